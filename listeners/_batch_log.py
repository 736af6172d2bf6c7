"""BatchLog: the completed batches' values in one bounded ring, appended as the scheduler completes each batch, read when a view asks.

What Spark's ``StreamingJobProgressListener`` keeps for the Streaming tab, kept once per bus for
every view (the web UI's history, the Prometheus metrics) instead of one copy per listener fed by events.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Generic, Mapping, Sequence, TypeVar

from scheduler import JobSet, StreamingQueryProgress, StreamingStateError

from ._info import BatchRecord

__all__ = ["BatchEntry", "BatchLog", "LogReader", "ProgressEntry", "ProgressLog", "completed_batch"]

BatchEntry = tuple[int, "JobSet | BatchRecord"]
"""A completed batch in the log: ``(seq, batch)``; ``seq`` counts the log's batches from 1.

``batch`` is the scheduler's own ``JobSet`` when every job succeeded (it no longer changes, and the
log let go of its jobs' functions, whose closures hold the batch's data), else the batch's
:class:`BatchRecord`, whose failure reasons are formatted once (a failure's traceback holds the
frames, and so the data, of the code that raised).
"""

ProgressEntry = tuple[int, Callable[[], StreamingQueryProgress], int, Mapping[str, int]]
"""A progress report in the log: ``(seq, build, input rows, phase durations in ms)``; ``build()`` makes the report."""

E = TypeVar("E", bound="tuple[Any, ...]")

_NEVER = 1 << 62  # no reader: nothing ever has to be folded before it leaves the ring

READER_BATCH = 128
"""A log with readers keeps at least this many entries, so that they fold entries in runs of at least this many."""


def _ran() -> None:
    raise StreamingStateError("this job already ran: its batch completed")


def completed_batch(job_set: JobSet) -> JobSet | BatchRecord:
    """What may be kept of ``job_set``, which has completed: itself with its jobs' functions let go, or a BatchRecord if a job failed.

    A job's function (its closure holds the batch's data) is never called again once its batch
    completed; a failure's traceback holds the frames, and so the data, of the code that raised,
    so a failed batch is kept as its values, with each failure formatted once.
    """
    # Called for every completed batch that something keeps: the common case (one job, no failure)
    # in the fewest instructions.
    jobs = job_set.jobs
    if len(jobs) == 1:
        job = jobs[0]
        if job.failure is not None:
            return BatchRecord(job_set)
        job.func = _ran
        return job_set
    for job in jobs:
        if job.failure is not None:
            return BatchRecord(job_set)
    for job in jobs:
        job.func = _ran
    return job_set


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
        self.retain(READER_BATCH)
        self._reschedule()
        return reader

    def catch_up(self, reader: LogReader[E]) -> None:
        """Fold what ``reader`` has not seen yet (a view that is asked calls this first)."""
        reader.catch_up(list(self._entries))

    def _fold_all(self) -> None:
        # The ring is about to drop an entry some reader has not folded: fold for all first.
        entries = list(self._entries)
        for reader in self._readers:
            reader.catch_up(entries)
        self._reschedule()

    def _reschedule(self) -> None:
        readers = self._readers
        self._due = min(r.seen for r in readers) + (self._entries.maxlen or 1) + 1 if readers else _NEVER


class BatchLog(_Ring[BatchEntry]):
    """The completed batches of one bus, as :data:`BatchEntry` tuples: the last ``retained`` of them, and readers that fold them all.

    The bus appends one entry per completed batch once some view asked for the log
    (:meth:`StreamingListenerBus.batch_log`); a view reads :meth:`entries` when it is asked, or
    registers a :meth:`reader` for totals.
    """

    def append(self, batch: JobSet | BatchRecord) -> None:
        """Append a completed batch (see :data:`BatchEntry`, and :func:`completed_batch` for what to pass)."""
        self.appended = seq = self.appended + 1
        if seq >= self._due:
            self._fold_all()
        self._entries.append((seq, batch))

    def __repr__(self) -> str:
        return f"<BatchLog [{self.appended} batches, {len(self._entries)} retained, {len(self._readers)} readers]>"


class ProgressLog(_Ring[ProgressEntry]):
    """A query's progress reports, as :data:`ProgressEntry` tuples: each report built only when a view reads it."""

    def append(self, build: Callable[[], StreamingQueryProgress], rows: int, durations: Mapping[str, int]) -> None:
        """Append a report (``build`` makes it), its input rows and its phase durations (not changed afterwards)."""
        self.appended = seq = self.appended + 1
        if seq >= self._due:  # _push, inline: once per batch
            self._fold_all()
        self._entries.append((seq, build, rows, durations))

    def __repr__(self) -> str:
        return f"<ProgressLog [{self.appended} reports, {len(self._entries)} retained, {len(self._readers)} readers]>"
