"""The contract between the stateful operators and the state store they run on.

Keys and values cross it as bytes (the operator pickles them); a row also carries its timeout
(epoch milliseconds, or ``NO_TIMESTAMP``), and a row may hold no value when its state was
removed but a timeout is still set (Spark keeps such a row until it times out).
"""

from __future__ import annotations

from typing import Iterator, Protocol

__all__ = ["NO_TIMESTAMP", "StateRow", "VersionedStore"]

NO_TIMESTAMP = -1
"""The timeout of a row that has none (Spark's ``GroupStateImpl.NO_TIMESTAMP``)."""

StateRow = tuple[bytes | None, int]
"""A stored row: (pickled value, or None for a removed state that keeps its timeout; timeout ms or NO_TIMESTAMP)."""


class VersionedStore(Protocol):
    """One partition of one operator's state, loaded at a version, open for the changes of the next one.

    Reads see the loaded version plus this store's own uncommitted changes. Nothing is visible
    to anyone else until :meth:`commit`.
    """

    @property
    def version(self) -> int:
        """The version this store was loaded at (0: the empty state before the first batch)."""
        ...

    def get(self, key: bytes) -> StateRow | None:
        """The row stored under ``key``, or None."""
        ...

    def put(self, key: bytes, value: bytes | None, timeout_ms: int) -> None:
        """Store a row (a None value keeps only the timeout of a removed state)."""
        ...

    def remove(self, key: bytes) -> None:
        """Delete the row under ``key`` (nothing if there is none)."""
        ...

    def due(self, threshold_ms: int, prefix: bytes = b"") -> list[tuple[bytes, StateRow]]:
        """Every row whose timeout is set and strictly less than ``threshold_ms``, earliest timeout first.

        Only rows whose key starts with ``prefix``, when given.

        Costs what the due rows cost, not what the store holds (timeouts are indexed).
        """
        ...

    def scan(self, prefix: bytes) -> list[tuple[bytes, StateRow]]:
        """Every row whose key starts with ``prefix``, by key; costs what those rows cost (keys are ordered)."""
        ...

    def last_key(self, prefix: bytes) -> bytes | None:
        """The greatest key starting with ``prefix``, or None."""
        ...

    def __iter__(self) -> Iterator[tuple[bytes, StateRow]]:
        """Every row (for snapshots and tests; not used on the per-batch path)."""
        ...

    def commit(self) -> int:
        """Make this store's changes version ``version + 1`` (under the checkpoint, before it returns); returns it."""
        ...

    def abort(self) -> None:
        """Drop this store's uncommitted changes."""
        ...
