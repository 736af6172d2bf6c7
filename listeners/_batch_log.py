"""BatchLog: the completed batches' values in one bounded ring, appended as the scheduler completes each batch, read when a view asks.

What Spark's ``StreamingJobProgressListener`` keeps for the Streaming tab, kept once per bus for
every view (the web UI's history, the Prometheus metrics) instead of one copy per listener fed by events.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Generic, Mapping, Sequence, TypeVar

from scheduler import JobSet, StreamingQueryProgress, StreamInputInfo

__all__ = ["BatchEntry", "BatchLog", "LogReader", "Operation", "ProgressEntry", "ProgressLog"]

Operation = tuple[str, str, "int | None", "int | None", "str | None"]
"""One output operation of a completed batch: name, description, start ms, end ms, failure reason."""

BatchEntry = tuple[int, int, Mapping[int, StreamInputInfo], int, "int | None", "int | None", tuple[Operation, ...], int, int]
"""A completed batch in the log: ``(seq, batch_time_ms, input infos, submission_ms, processing_start_ms,
processing_end_ms, operations, failures, num_records)``; ``seq`` counts the log's batches from 1.

A plain tuple (made in C, and untracked by the garbage collector once it holds only ints and
strings) rather than a record class: one is made for every completed batch.
"""

ProgressEntry = tuple[int, Callable[[], StreamingQueryProgress], int, Mapping[str, int]]
"""A progress report in the log: ``(seq, build, input rows, phase durations in ms)``; ``build()`` makes the report."""

E = TypeVar("E", bound="tuple[Any, ...]")

_NEVER = 1 << 62  # no reader: nothing ever has to be folded before it leaves the ring


class LogReader(Generic[E]):
    """A view that must see every entry of a log once (counters, histograms): ``fold`` takes entries newer than ``seen``.

    The log calls :meth:`catch_up` when the view asks (a scrape) and before an entry the reader has
    not seen would leave the ring, so nothing is missed however rarely the view asks. It may be
    called from the view's thread and from the event loop: a lock keeps each entry folded once.
    """

    def __init__(self, fold: Callable[[Sequence[E]], None], seen: int) -> None:
        """A reader that has seen the log's entries up to ``seen``."""
        self.fold = fold
        self.seen = seen
        self._lock = threading.Lock()

    def catch_up(self, entries: Sequence[E]) -> None:
        """Fold the entries of ``entries`` (the ring's, oldest first, each starting with its seq) newer than :attr:`seen`."""
        with self._lock:
            seen = self.seen
            if not entries or entries[-1][0] <= seen:
                return
            newer = entries[max(0, seen + 1 - entries[0][0]):]
            self.fold(newer)
            self.seen = newer[-1][0]


class _Ring(Generic[E]):
    """A bounded ring of entries numbered from 1, with readers that fold every one of them.

    Appends happen on the event loop; views read from any thread (one C-level copy of the ring).
    """

    def __init__(self) -> None:
        self._entries: collections.deque[E] = collections.deque(maxlen=1)
        self.appended = 0
        self._readers: list[LogReader[E]] = []
        # The seq at which some reader would miss an entry if it were not folded first: the append
        # only compares one int with it.
        self._due = _NEVER

    def retain(self, count: int) -> None:
        """Keep at least the last ``count`` entries from now on."""
        if count > (self._entries.maxlen or 0):
            self._entries = collections.deque(self._entries, maxlen=count)
            self._reschedule()

    def entries(self) -> list[E]:
        """The retained entries, oldest first (a copy, safe beside the loop that appends)."""
        return list(self._entries)

    def reader(self, fold: Callable[[Sequence[E]], None]) -> LogReader[E]:
        """A reader that folds every entry appended from now on (see :meth:`catch_up`)."""
        reader = LogReader(fold, self.appended)
        self._readers = [*self._readers, reader]
        self._reschedule()
        return reader

    def catch_up(self, reader: LogReader[E]) -> None:
        """Fold what ``reader`` has not seen yet (a view that is asked calls this first)."""
        reader.catch_up(list(self._entries))

    def _push(self, entry: E) -> None:
        if entry[0] >= self._due:
            # The ring is about to drop an entry some reader has not folded: fold for all first.
            entries = list(self._entries)
            for reader in self._readers:
                reader.catch_up(entries)
            self._reschedule()
        self._entries.append(entry)

    def _reschedule(self) -> None:
        readers = self._readers
        self._due = min(r.seen for r in readers) + (self._entries.maxlen or 1) + 1 if readers else _NEVER


class BatchLog(_Ring[BatchEntry]):
    """The completed batches of one bus, as :data:`BatchEntry` tuples: the last ``retained`` of them, and readers that fold them all.

    The bus appends one entry per completed batch once some view asked for the log
    (:meth:`StreamingListenerBus.batch_log`); a view reads :meth:`entries` when it is asked, or
    registers a :meth:`reader` for totals.
    """

    def append(self, job_set: JobSet) -> BatchEntry:
        """Take ``job_set``'s values now (it has completed) and append them; returns the entry."""
        # Called for every completed batch: loops rather than comprehensions, ints rather than Time objects.
        operations: list[Operation] = []
        failures = 0
        for job in job_set.jobs:
            start, end = job.start_time, job.end_time
            if job.failure is None:
                reason = None
            else:  # formats a traceback: only a failed job has one to format
                failures += 1
                reason = job.failure_reason
            operations.append((job.name, job.description, None if start is None else start.milliseconds,
                               None if end is None else end.milliseconds, reason))
        # The JobSet's own input infos: a per-batch copy nobody changes once the batch completed.
        inputs = job_set.input_infos
        total = 0
        for info in inputs.values():
            total += info.num_records
        start, end = job_set.processing_start, job_set.processing_end
        self.appended = seq = self.appended + 1
        entry: BatchEntry = (seq, job_set.time.milliseconds, inputs, job_set.submission_time.milliseconds,
                             None if start is None else start.milliseconds, None if end is None else end.milliseconds,
                             tuple(operations), failures, total)
        self._push(entry)
        return entry

    def __repr__(self) -> str:
        return f"<BatchLog [{self.appended} batches, {len(self._entries)} retained, {len(self._readers)} readers]>"


class ProgressLog(_Ring[ProgressEntry]):
    """A query's progress reports, as :data:`ProgressEntry` tuples: each report built only when a view reads it."""

    def append(self, build: Callable[[], StreamingQueryProgress], rows: int, durations: Mapping[str, int]) -> None:
        """Append a report (``build`` makes it), its input rows and its phase durations (not changed afterwards)."""
        self.appended = seq = self.appended + 1
        self._push((seq, build, rows, durations))

    def __repr__(self) -> str:
        return f"<ProgressLog [{self.appended} reports, {len(self._entries)} retained, {len(self._readers)} readers]>"
