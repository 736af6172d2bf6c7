"""Rebuilding one partition's state at a version from its checkpoint files: a base snapshot, then the deltas after it.

The pure part shared by the store's own rebuild of its working copy (``StateStoreProvider``) and
the state reader's private copy (``_reader``): it only reads the checkpoint's files and writes the
SQLite connection it is given; where that database lives, and any sweeping, is the caller's.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from scheduler import CheckpointPath

from ._partition_files import PartitionFiles
from ._store_format import DELTA, GENESIS, SNAPSHOT, LineageBreakError, StateStoreError, read_delta
from ._working_copy import apply_changes, open_working_copy

__all__ = ["open_base", "rebuild", "replay_deltas"]


def open_base(files: PartitionFiles, base: int, into: Path) -> sqlite3.Connection:
    """A new SQLite database at ``into`` (any old one and its journals removed, made with mode 0600) holding
    snapshot ``base`` of the partition, or the empty state for 0."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{into}{suffix}").unlink(missing_ok=True)
    if base:
        fd = os.open(into, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(files.snapshot(base))
    try:
        conn = open_working_copy(into)
    except sqlite3.DatabaseError as exc:  # its checksum matched, yet it is not a database: written so by hand
        raise StateStoreError(f"state store file {files.path(base, SNAPSHOT)} is damaged: it is not an SQLite database "
                              f"({exc})") from exc
    if not base:
        conn.execute("UPDATE meta SET version = 0, rows = 0, digest = ?", (GENESIS,))
    return conn


def replay_deltas(conn: sqlite3.Connection, files: PartitionFiles, current: int, version: int, *, prove: bool = False,
                  missing: Callable[[CheckpointPath], str] | None = None) -> None:
    """Apply the deltas after ``current`` up to ``version`` to ``conn``, each on the history it names.

    Each delta is applied in its own transaction, with the version and digest it leaves in ``meta``.
    ``prove``: ``conn`` is not yet known to be the checkpoint's at ``current``; a first delta of an
    earlier release (no parent digest) is then checked against the checkpoint's delta at ``current``.
    ``missing``: the message for a missing delta (else :func:`read_delta`'s, naming the file).

    Raises:
        LineageBreakError: a delta was written on top of another history than the one replayed.
        StateStoreError: a delta is missing or damaged.
    """
    digest = bytes(conn.execute("SELECT digest FROM meta").fetchone()[0]) or GENESIS
    for v in range(current + 1, version + 1):
        path = files.path(v, DELTA)
        if missing is not None and not path.exists():
            raise StateStoreError(missing(path))
        new_digest, parent, changes = read_delta(path)  # missing or damaged: StateStoreError naming it
        if parent is None and prove and v == current + 1:
            parent = files.delta_digest(current)
        if parent is not None and parent != digest:
            raise LineageBreakError(f"{path} was written on top of another history than version {v - 1}'s")
        conn.execute("BEGIN")
        try:
            apply_changes(conn, changes)
            conn.execute("UPDATE meta SET version = ?, digest = ?", (v, new_digest))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        digest = new_digest


def _recovery(files: PartitionFiles, base: int, older: list[int], version: int) -> str | None:
    """How to recover from the damage of snapshot ``base`` when an older base and every delta after it up to ``version``
    are there (the rebuild is then exact without the damaged file, which is left for the user to move), else None."""
    for candidate in older:
        if files.has_deltas(candidate, version):
            start = f"snapshot {files.path(candidate, SNAPSHOT).name}" if candidate else "the empty state"
            return (f"{start} and every delta after it up to version {version} are there: move {files.path(base, SNAPSHOT)} "
                    "aside and restart, and the state is rebuilt from them")
    return None


def rebuild(files: PartitionFiles, version: int, start: Callable[[int], sqlite3.Connection], *, verb: str = "load",
            missing: Callable[[CheckpointPath], str] | None = None,
            on_older_base: Callable[[int, LineageBreakError], None] | None = None) -> sqlite3.Connection:
    """Version ``version`` of a partition: the newest snapshot at or before it (``start(base)`` opens a
    database holding it, the empty state for 0), then :func:`replay_deltas`.

    A replay that meets a delta of another history (a snapshot taken from a working copy whose
    batch was then re-run elsewhere) closes that database and starts over from the next older
    snapshot, down to the empty state, calling ``on_older_base(base, first_break)`` after each base that failed.

    Raises:
        StateStoreError: the newest base's own damage or gap (named), or no base leads to ``version``
            ("cannot <verb> state version ...").
    """
    bases = [v for v in reversed(files.versions(SNAPSHOT)) if v <= version] + [0]
    first_break: LineageBreakError | None = None
    for i, base in enumerate(bases):
        try:
            conn = start(base)
        except StateStoreError as exc:  # the snapshot is damaged or missing
            hint = None if not base or first_break is not None else _recovery(files, base, bases[i + 1:], version)
            if hint is None:
                raise
            raise StateStoreError(f"{exc}; {hint}") from exc
        try:
            replay_deltas(conn, files, base, version, missing=missing)
            if base == version and base:  # the snapshot alone: still the checkpoint's version, if its delta is there?
                digest = conn.execute("SELECT digest FROM meta").fetchone()[0]
                on_file = files.delta_digest(base)
                if on_file is not None and digest and on_file != digest:
                    raise LineageBreakError(f"{files.path(base, SNAPSHOT)} is not of the history of "
                                            f"{files.path(base, DELTA).name}")
            return conn
        except LineageBreakError as exc:
            conn.close()
            first_break = first_break or exc
        except StateStoreError:
            conn.close()
            if first_break is None:
                raise  # the newest base's own damage or gap: as before, named
        except BaseException:
            conn.close()
            raise
        if on_older_base is not None:
            on_older_base(base, first_break)
    raise StateStoreError(f"cannot {verb} state version {version} from {files.directory}: its files do not form one "
                          f"history ({first_break}) and no older snapshot leads to it")
