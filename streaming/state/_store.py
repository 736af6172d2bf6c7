"""StateStore: one partition's state at a version, with a batch's changes on top, committed as the next version's delta.

Spark's ``StateStore`` (of the RocksDB provider with changelog checkpointing).
"""

from __future__ import annotations

import hashlib
import pickle
import sqlite3
import time
from typing import Callable, Iterator

import attrs

from ._partition_files import PartitionFiles
from ._processor_rows import prefix_end
from ._protocol import NO_TIMESTAMP, StateRow
from ._store_format import REMOVED, StateStoreError
from ._working_copy import write_row

__all__ = [
    "StateStore",
    "StateStoreMetrics",
]


@attrs.frozen
class StateStoreMetrics:
    """One partition's numbers for one committed version (Spark's state store metrics).

    Attributes:
        num_rows_total: rows held after the commit.
        num_rows_updated: rows written by the batch.
        num_rows_removed: rows deleted by the batch.
        memory_used_bytes: the working copy's size (its pages, which the OS caches).
        commit_time_ms: writing the delta file and committing the working copy.
        delta_bytes: the size of the delta file written (what decides when a snapshot is due).
    """

    num_rows_total: int
    num_rows_updated: int
    num_rows_removed: int
    memory_used_bytes: int
    commit_time_ms: int
    delta_bytes: int = 0


class StateStore:
    """One partition's state at a version, with this batch's changes on top; see :class:`~streaming.state.VersionedStore`."""

    def __init__(self, files: PartitionFiles, conn: sqlite3.Connection, version: int, parent: bytes, loaded_from: str,
                 release: Callable[[StateStoreMetrics | None], None]) -> None:
        """Made by :meth:`StateStoreProvider.load`, inside an open transaction.

        ``parent`` is the loaded version's digest; ``release`` is called once, when the store is
        committed (with its metrics) or aborted (with None).
        """
        self._files = files
        self._release = release
        self._conn = conn
        self._version = version
        self._parent = parent
        self._loaded_from = loaded_from
        self._changes: dict[bytes, tuple[bytes | None, int]] = {}
        self._exists: dict[bytes, bool] = {}  # keys this batch read or wrote: whether they have a row now
        self._rows = int(conn.execute("SELECT rows FROM meta").fetchone()[0])  # the count, with this batch's changes
        self._open = True

    @property
    def version(self) -> int:
        """The version this store was loaded at."""
        return self._version

    @property
    def loaded_from(self) -> str:
        """``"working copy"`` (the one on disk, proven current), ``"checkpoint"`` (rebuilt from its files) or ``"empty"`` (version 0)."""
        return self._loaded_from

    def _check_open(self) -> None:
        if not self._open:
            raise StateStoreError(f"the state store of {self._files.directory} at version {self._version} was "
                                  "already committed or aborted")

    def get(self, key: bytes) -> StateRow | None:
        """The row under ``key``, or None."""
        self._check_open()
        _check_bytes("key", key)
        row = self._conn.execute("SELECT value, timeout FROM state WHERE key = ?", (key,)).fetchone()
        self._exists[key] = row is not None
        return None if row is None else (row[0], row[1])

    def put(self, key: bytes, value: bytes | None, timeout_ms: int) -> None:
        """Store a row."""
        self._check_open()
        _check_bytes("key", key)
        if value is not None:
            _check_bytes("value", value)
        if not isinstance(timeout_ms, int) or (timeout_ms < 0 and timeout_ms != NO_TIMESTAMP):
            raise ValueError(f"a timeout is epoch ms >= 0 or NO_TIMESTAMP, got {timeout_ms!r}")
        self._rows += write_row(self._conn, key, value, timeout_ms, self._exists.get(key))
        self._exists[key] = True
        self._changes[key] = (value, timeout_ms)

    def remove(self, key: bytes) -> None:
        """Delete the row under ``key``."""
        self._check_open()
        _check_bytes("key", key)
        self._rows += write_row(self._conn, key, None, REMOVED, self._exists.get(key))
        self._exists[key] = False
        self._changes[key] = (None, REMOVED)

    def due(self, threshold_ms: int, prefix: bytes = b"") -> list[tuple[bytes, StateRow]]:
        """Rows with a timeout strictly before ``threshold_ms`` and a key starting with ``prefix``, earliest first (timeout index)."""
        self._check_open()
        query = f"SELECT key, value, timeout FROM state WHERE timeout != {NO_TIMESTAMP} AND timeout < ?"
        rows = self._conn.execute(query + _range(prefix) + " ORDER BY timeout, key", (threshold_ms, *_bounds(prefix))).fetchall()
        for key, _, _ in rows:
            self._exists[key] = True
        return [(key, (value, timeout)) for key, value, timeout in rows]

    def scan(self, prefix: bytes) -> list[tuple[bytes, StateRow]]:
        """Every row whose key starts with ``prefix``, by key (one range of the ordered keys)."""
        self._check_open()
        _check_bytes("prefix", prefix)
        rows = self._conn.execute("SELECT key, value, timeout FROM state WHERE 1" + _range(prefix) + " ORDER BY key",
                                  _bounds(prefix)).fetchall()
        for key, _, _ in rows:
            self._exists[key] = True
        return [(key, (value, timeout)) for key, value, timeout in rows]

    def last_key(self, prefix: bytes) -> bytes | None:
        """The greatest key starting with ``prefix``, or None."""
        self._check_open()
        _check_bytes("prefix", prefix)
        row = self._conn.execute("SELECT key FROM state WHERE 1" + _range(prefix) + " ORDER BY key DESC LIMIT 1",
                                 _bounds(prefix)).fetchone()
        return None if row is None else bytes(row[0])

    def __iter__(self) -> Iterator[tuple[bytes, StateRow]]:
        """Every row, by key."""
        self._check_open()
        for key, value, timeout in self._conn.execute("SELECT key, value, timeout FROM state ORDER BY key").fetchall():
            yield key, (value, timeout)

    def __len__(self) -> int:
        """Rows held now."""
        self._check_open()
        return self._rows

    def commit(self) -> int:
        """Write version ``version + 1``: its delta file (whole; flushed under the provider's ``fsync``), then the working copy."""
        self._check_open()
        started = time.perf_counter()
        new = self._version + 1
        try:
            changes = [(key, value, timeout) for key, (value, timeout) in self._changes.items()]
            payload = self._parent + pickle.dumps(changes, protocol=5)
            written = self._files.write_delta(new, payload)
            rows = self._rows
            self._conn.execute("UPDATE meta SET version = ?, digest = ?, rows = ?", (new, hashlib.sha256(payload).digest(), rows))
            self._conn.execute("COMMIT")
        except BaseException:
            self._abort()
            raise
        pages = self._conn.execute("PRAGMA page_count").fetchone()[0] * self._conn.execute("PRAGMA page_size").fetchone()[0]
        removed = sum(1 for _, timeout in self._changes.values() if timeout == REMOVED)
        metrics = StateStoreMetrics(rows, len(self._changes) - removed, removed, int(pages),
                                    round((time.perf_counter() - started) * 1000), written)
        self._open = False
        self._release(metrics)
        return new

    def abort(self) -> None:
        """Drop this batch's changes."""
        if self._open:
            self._abort()

    def _abort(self) -> None:
        try:
            self._conn.execute("ROLLBACK")
        finally:
            self._open = False
            self._release(None)

    def __repr__(self) -> str:
        return f"<StateStore {self._files.directory} v{self._version} | {len(self._changes)} changed>"


def _range(prefix: bytes) -> str:
    """The SQL condition of keys starting with ``prefix`` (none for the empty prefix), for :func:`_bounds`' parameters."""
    if not prefix:
        return ""
    return " AND key >= ?" if prefix_end(prefix) is None else " AND key >= ? AND key < ?"


def _bounds(prefix: bytes) -> tuple[bytes, ...]:
    if not prefix:
        return ()
    end = prefix_end(prefix)
    return (prefix,) if end is None else (prefix, end)


def _check_bytes(what: str, value: object) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"state store {what}s are bytes, got {type(value).__name__}")
