"""ProgressRing: a query's recent progress reports, bounded (Spark's ``ProgressReporter.progressBuffer``)."""

from __future__ import annotations

import collections

from ._progress import StreamingQueryProgress

__all__ = ["ProgressRing"]


class ProgressRing:
    """The newest progress reports, oldest first; both query runtimes keep theirs in one.

    Spark's rule: after adding a report, drop the oldest while the buffer holds
    ``numRecentProgressUpdates`` or more, so at most ``capacity - 1`` stay.
    """

    def __init__(self, capacity: int) -> None:
        """An empty ring for ``spark.sql.streaming.numRecentProgressUpdates = capacity``."""
        self.capacity = capacity
        self._reports: collections.deque[StreamingQueryProgress] = collections.deque()

    def add(self, progress: StreamingQueryProgress) -> None:
        """Keep ``progress`` as the newest report, dropping the oldest beyond the bound."""
        self._reports.append(progress)
        while len(self._reports) >= self.capacity:
            self._reports.popleft()

    @property
    def last(self) -> StreamingQueryProgress | None:
        """The newest report, or ``None``."""
        return self._reports[-1] if self._reports else None

    def recent(self) -> list[StreamingQueryProgress]:
        """The reports kept, oldest first."""
        return list(self._reports)

    def __len__(self) -> int:
        return len(self._reports)
