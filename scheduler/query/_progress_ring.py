"""ProgressRing: a query's recent progress reports, bounded (Spark's ``ProgressReporter.progressBuffer``)."""

from __future__ import annotations

import collections
from typing import Callable, Union

from ._progress import StreamingQueryProgress

__all__ = ["ProgressRing"]


class _Deferred:
    """A report kept as what builds it, built (once) when someone reads it."""

    __slots__ = ("_build", "_value")

    def __init__(self, build: Callable[[], StreamingQueryProgress]) -> None:
        self._build = build
        self._value: StreamingQueryProgress | None = None

    def get(self) -> StreamingQueryProgress:
        # Readers may be on other threads: two of them racing build equal reports, and the
        # builder is kept (not dropped after use) so that neither finds it gone.
        value = self._value
        if value is None:
            value = self._value = self._build()
        return value


_Entry = Union[StreamingQueryProgress, _Deferred]


class ProgressRing:
    """The newest progress reports, oldest first; both query runtimes keep theirs in one.

    Spark's rule: after adding a report, drop the oldest while the buffer holds
    ``numRecentProgressUpdates`` or more, so at most ``capacity - 1`` stay.

    A report may be added as the function that builds it (:meth:`add_deferred`): it is built
    when first read (``last``, ``recent``, ``get``), so a run whose progress nobody reads never
    builds one. The builder must depend only on values that no longer change.
    """

    def __init__(self, capacity: int) -> None:
        """An empty ring for ``spark.sql.streaming.numRecentProgressUpdates = capacity``."""
        self.capacity = capacity
        # Spark's rule as the deque's own bound: appending beyond it drops the oldest.
        self._reports: collections.deque[_Entry] = collections.deque(maxlen=max(capacity - 1, 0))

    def add(self, progress: StreamingQueryProgress) -> None:
        """Keep ``progress`` as the newest report, dropping the oldest beyond the bound."""
        self._reports.append(progress)

    def add_deferred(self, build: Callable[[], StreamingQueryProgress]) -> Callable[[], StreamingQueryProgress]:
        """Keep the report ``build()`` returns as the newest, built when first read; returns its getter.

        The getter builds the report at most once however often (and from whichever thread) it is
        called, as reading it through the ring does.
        """
        entry = _Deferred(build)
        self._reports.append(entry)
        return entry.get

    @property
    def last(self) -> StreamingQueryProgress | None:
        """The newest report, or ``None``."""
        try:
            entry = self._reports[-1]
        except IndexError:
            return None
        return entry if isinstance(entry, StreamingQueryProgress) else entry.get()

    def recent(self) -> list[StreamingQueryProgress]:
        """The reports kept, oldest first."""
        return [e if isinstance(e, StreamingQueryProgress) else e.get() for e in list(self._reports)]

    def __len__(self) -> int:
        return len(self._reports)
