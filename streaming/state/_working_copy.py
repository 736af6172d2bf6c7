"""The state store's working copy: an SQLite database (rows, the timeout index, the version and digest it holds).

The counterpart of the local RocksDB instance of Spark's RocksDB state store.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ._protocol import NO_TIMESTAMP
from ._store_format import REMOVED, Change

__all__ = [
    "apply_changes",
    "open_working_copy",
    "write_row",
]


def open_working_copy(path: Path) -> sqlite3.Connection:
    """Open (or make) the working copy at ``path``, in autocommit mode, with its tables and index.

    SQLite, from the standard library: its B-tree keeps a point read or write in microseconds
    with a million keys, a partial index on the timeout serves the timeout pass,
    ``Connection.backup`` copies a consistent snapshot while the next batch writes, and it adds
    no dependency. It needs no durability of its own: the delta files are the truth, and a
    working copy that is missing, stale or newer than wanted is rebuilt from them. But it must stay
    consistent through a power loss (its ``meta`` row is what proves its rows' version): with
    ``synchronous=NORMAL`` in WAL mode a commit is not flushed (it may be lost, and the copy is
    then behind, which the deltas prove), while a checkpoint flushes the WAL before the database
    and the database before the WAL starts over. (``OFF`` let a power loss keep the new ``meta``
    over rows of an older version.) A working copy of an earlier release gains the columns it lacks.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        _prepare(conn)
    except BaseException:  # not a database (sqlite3.DatabaseError), or a disk error: no connection left behind
        conn.close()
        raise
    return conn


def _prepare(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # consistent after a power loss; a commit costs no flush
    conn.execute("CREATE TABLE IF NOT EXISTS state (key BLOB PRIMARY KEY, value BLOB, timeout INTEGER NOT NULL) WITHOUT ROWID")
    conn.execute(f"CREATE INDEX IF NOT EXISTS due ON state (timeout, key) WHERE timeout != {NO_TIMESTAMP}")
    conn.execute("CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 0), version INTEGER NOT NULL, "
                 "rows INTEGER NOT NULL, store TEXT NOT NULL DEFAULT '', digest BLOB NOT NULL DEFAULT x'')")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(meta)")}
    for column, kind in (("store", "TEXT NOT NULL DEFAULT ''"), ("digest", "BLOB NOT NULL DEFAULT x''")):
        if column not in columns:  # a snapshot of an earlier release
            conn.execute(f"ALTER TABLE meta ADD COLUMN {column} {kind}")
    conn.execute("INSERT OR IGNORE INTO meta (id, version, rows) VALUES (0, 0, 0)")


def apply_changes(conn: sqlite3.Connection, changes: list[Change]) -> None:
    """Apply ``changes`` (a delta's) to the rows and their count, in the caller's transaction."""
    rows = 0
    for key, value, timeout in changes:
        rows += write_row(conn, key, value, timeout)
    conn.execute("UPDATE meta SET rows = rows + ?", (rows,))


def write_row(conn: sqlite3.Connection, key: bytes, value: bytes | None, timeout: int, existed: bool | None = None) -> int:
    """Write one change to the rows (not their count); return how the count changes (-1, 0 or 1).

    ``existed``: whether ``key`` has a row now, if the caller knows (else it is looked up).
    """
    if existed is None:
        existed = conn.execute("SELECT 1 FROM state WHERE key = ?", (key,)).fetchone() is not None
    if timeout == REMOVED:
        if existed:
            conn.execute("DELETE FROM state WHERE key = ?", (key,))
            return -1
        return 0
    conn.execute("INSERT INTO state VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
                 "timeout = excluded.timeout", (key, value, timeout))
    return 0 if existed else 1
