"""BatchLog: the completed batches' values in one bounded ring, appended as the scheduler completes each batch, read when a view asks.

What Spark's ``StreamingJobProgressListener`` keeps for the Streaming tab, kept once per bus for
every view (the web UI's history, the Prometheus metrics) instead of one copy per listener fed by events.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Generic, Mapping, Sequence, TypeVar

from scheduler import JobSet, StreamingQueryProgress, StreamingStateError, library_logger

from ._info import BatchRecord

__all__ = ["BatchEntry", "BatchLog", "LogReader", "ProgressEntry", "ProgressItem", "ProgressLog", "completed_batch"]

BatchEntry = tuple[int, "JobSet | BatchRecord"]
"""A completed batch in the log: ``(seq, batch)``; ``seq`` counts the log's batches from 1.

``batch`` is the scheduler's own ``JobSet`` when every job succeeded (it no longer changes, and the
log let go of its jobs' functions, whose closures hold the batch's data), else the batch's
:class:`BatchRecord`, whose failure reasons are formatted once (a failure's traceback holds the
frames, and so the data, of the code that raised).
"""

ProgressEntry = tuple[int, Callable[[], StreamingQueryProgress], int, Mapping[str, int]]
"""A progress report in the log: ``(seq, build, input rows, phase durations in ms)``; ``build()`` makes the report."""

ProgressItem = tuple[Callable[[], StreamingQueryProgress], int, Mapping[str, int]]
"""A progress report as the log holds it: ``(build, input rows, phase durations in ms)``; a :data:`ProgressEntry` without its seq."""

E = TypeVar("E", bound="tuple[Any, ...]")
I = TypeVar("I")  # noqa: E741 - an item as a log holds it: a batch, or a progress report's ProgressItem

_log = library_logger("aiodstream.listeners", component="BatchLog")

READER_BATCH = 128
"""A log keeps at least this many entries, and its readers fold them in runs of one less (see :class:`_Ring`)."""


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


class LogReader(Generic[E, I]):
    """A view that must see every entry of a log once (counters, histograms): ``fold`` takes entries newer than ``seen``.

    The log folds what the reader has not seen when the view asks (:meth:`_Ring.catch_up`, a
    scrape) and before it lets go of entries the reader has not seen, so nothing is missed however
    rarely the view asks. That may happen on the view's thread and on the event loop: a lock keeps
    each entry folded once. A reader made with ``numbered=False`` is given the items as the log
    holds them (a batch, a :data:`ProgressItem`), without their seqs: no tuple is built for it.

    A fold that raises: its run counts as seen all the same (never folded twice, whatever part of
    it the fold took in); on a view's thread the view gets the error, and at a rest on the loop it
    is logged (``failed_folds``) and goes no further, so the appender and the other readers go on.
    """

    def __init__(self, fold: Callable[[Sequence[Any]], None], seen: int, *, numbered: bool = True,
                 number: Callable[[int, Sequence[I]], list[E]] | None = None,
                 item: Callable[[E], I] | None = None) -> None:
        """A reader that has seen the log's entries up to ``seen``.

        ``number`` makes a log's entries of its items, ``item`` an item of an entry (its log's).
        """
        self.fold = fold
        self.seen = seen
        self.numbered = numbered
        self._number = number
        self._item = item
        self._lock = threading.Lock()

    def catch_up(self, entries: Sequence[E]) -> None:
        """Fold the entries of ``entries`` (the ring's, oldest first, each starting with its seq) newer than :attr:`seen`."""
        with self._lock:
            seen = self.seen
            if not entries or entries[-1][0] <= seen:
                return
            newer = entries[max(0, seen + 1 - entries[0][0]):]
            # Seen even if the fold raises part-way: a run is folded at most once (never counted twice).
            self.seen = newer[-1][0]
            if self.numbered:
                self.fold(newer)
            else:
                assert self._item is not None
                self.fold([self._item(entry) for entry in newer])

    def catch_up_items(self, first: int, items: Sequence[I]) -> None:
        """Fold the items of ``items`` newer than :attr:`seen`; the first of them is the log's entry ``first``."""
        with self._lock:
            seen = self.seen
            last = first + len(items) - 1
            if last <= seen:
                return
            newer = items[max(0, seen + 1 - first):] if seen >= first else items
            self.seen = last  # before the fold, as in catch_up
            if self.numbered:
                assert self._number is not None
                self.fold(self._number(max(first, seen + 1), newer))
            else:
                self.fold(newer)


class _Ring(Generic[E, I]):
    """A bounded ring of items numbered from 1, with readers that fold every one of them.

    Appending (on the event loop) is a deque append, which lets go of the oldest item once the
    ring is full, and a countdown in small ints: no tuple and no seq per item. Every ``size - 1``
    appends the ring *rests*: its readers fold what they have not seen (so nothing unseen is let
    go) and it notes its newest item with that item's seq, its *anchor*. The anchor leaves the
    ring only after the next rest, so a view on any thread numbers a copy of the ring by finding
    the anchor in it; the copy and the anchor are taken under a lock that a rest takes to move
    the anchor (an append takes none).

    ``items`` (the deque), ``left`` (appends until the next rest) and :meth:`rest` are what an
    append does, public so that the bus appends inline on its per-batch path (one Python call
    fewer): ``items.append(item)``, ``left -= 1``, and ``rest()`` when ``left`` is 0; on the loop only.
    """

    def __init__(self) -> None:
        self.items: collections.deque[I] = collections.deque(maxlen=READER_BATCH)
        self.left = READER_BATCH - 1  # appends until the next rest
        self._period = READER_BATCH - 1  # the countdown's start at the last rest
        # The newest item at the last rest and its seq; before any rest (no item let go yet)
        # (0, None): the ring's first item is entry 1.
        self._anchor: tuple[int, I | None] = (0, None)
        self._readers: list[LogReader[E, I]] = []
        self._lock = threading.Lock()
        self.failed_folds = 0  # readers' folds that raised at a rest (logged; the readers missed those runs)

    @property
    def appended(self) -> int:
        """How many entries were appended: the seq of the newest."""
        first, items = self._snapshot()
        return first - 1 + len(items)

    def retain(self, count: int) -> None:
        """Keep at least the last ``count`` entries from now on (on the event loop)."""
        size = max(count, READER_BATCH)
        if size > (self.items.maxlen or 0):
            self.rest()  # readers fold, and the anchor is the newest item, which the larger ring keeps
            with self._lock:
                self.items = collections.deque(self.items, maxlen=size)
                self._period = self.left = size - 1

    def _number(self, first: int, items: Sequence[I]) -> list[E]:
        """The entries of ``items``, the first of which is entry ``first``."""
        raise NotImplementedError

    def _item(self, entry: E) -> I:
        """The item of the entry ``entry``."""
        raise NotImplementedError

    def _snapshot(self) -> tuple[int, list[I]]:
        """The seq of the ring's oldest item, and a copy of its items, oldest first."""
        with self._lock:
            seq, anchor = self._anchor
            items = list(self.items)
        if anchor is None:
            return seq + 1, items
        # The anchor is in the copy (it leaves only after a rest, which waited for the lock); found by
        # identity (equal items may be different entries), in C.
        return seq - list(map(id, items)).index(id(anchor)), items

    def entries(self) -> list[E]:
        """The retained entries (at least the last ``retained``), oldest first: a copy, safe beside the loop that appends."""
        first, items = self._snapshot()
        return self._number(first, items)

    def reader(self, fold: Callable[[Sequence[Any]], None], *, numbered: bool = True) -> LogReader[E, I]:
        """A reader that folds every entry appended from now on (see :meth:`catch_up`).

        ``fold`` is given the entries (``numbered``), or with ``numbered=False`` the items as the
        log holds them, oldest first.
        """
        reader: LogReader[E, I] = LogReader(fold, self.appended, numbered=numbered, number=self._number, item=self._item)
        self._readers = [*self._readers, reader]
        return reader

    def catch_up(self, reader: LogReader[E, I]) -> None:
        """Fold what ``reader`` has not seen yet (a view that is asked calls this first)."""
        first, items = self._snapshot()
        reader.catch_up_items(first, items)

    def push(self, item: I) -> None:
        """Append ``item``, the next entry: what the bus and the progress reporter write inline (see the class)."""
        self.items.append(item)
        self.left -= 1
        if not self.left:
            self.rest()

    def rest(self) -> None:
        """Let the readers fold what they have not seen and move the anchor (an append does this when ``left`` reaches 0)."""
        # On the loop (an append, or retain): no append can happen meanwhile. The readers fold what
        # they have not seen; then the newest item becomes the anchor, and the countdown restarts:
        # the next size - 1 appends let go only items seen now, and never the new anchor.
        items = list(self.items)
        newest = self._anchor[0] + self._period - self.left
        first = newest - len(items) + 1
        for reader in self._readers:
            try:
                reader.catch_up_items(first, items)
            except Exception:
                # A view's failure stays the view's: the appender (the scheduler's per-batch path)
                # and the other readers go on, and the ring rests on time. That reader misses the run.
                self.failed_folds += 1
                _log.exception("a view of the log failed to fold a run of entries: that view misses them",
                               log=type(self).__name__, fold=getattr(reader.fold, "__qualname__", repr(reader.fold)),
                               entries=len(items))
        with self._lock:
            self._anchor = (newest, items[-1] if items else None)
            self._period = self.left = (self.items.maxlen or READER_BATCH) - 1


class BatchLog(_Ring[BatchEntry, "JobSet | BatchRecord"]):
    """The completed batches of one bus, as :data:`BatchEntry` tuples: the last ``retained`` of them, and readers that fold them all.

    The bus appends one entry per completed batch once some view asked for the log
    (:meth:`StreamingListenerBus.batch_log`); a view reads :meth:`entries` when it is asked, or
    registers a :meth:`reader` for totals.
    """

    def append(self, batch: JobSet | BatchRecord) -> None:
        """Append a completed batch (see :data:`BatchEntry`, and :func:`completed_batch` for what to pass)."""
        self.push(batch)

    def _number(self, first: int, items: Sequence[JobSet | BatchRecord]) -> list[BatchEntry]:
        return list(zip(range(first, first + len(items)), items, strict=True))

    def _item(self, entry: BatchEntry) -> JobSet | BatchRecord:
        return entry[1]

    def __repr__(self) -> str:
        first, items = self._snapshot()
        return f"<BatchLog [{first - 1 + len(items)} batches, {len(items)} retained, {len(self._readers)} readers]>"


class ProgressLog(_Ring[ProgressEntry, ProgressItem]):
    """A query's progress reports, as :data:`ProgressEntry` tuples: each report built only when a view reads it."""

    def append(self, build: Callable[[], StreamingQueryProgress], rows: int, durations: Mapping[str, int]) -> None:
        """Append a report (``build`` makes it), its input rows and its phase durations (not changed afterwards)."""
        self.push((build, rows, durations))

    def _number(self, first: int, items: Sequence[ProgressItem]) -> list[ProgressEntry]:
        numbered = zip(range(first, first + len(items)), items, strict=True)
        return [(seq, build, rows, durations) for seq, (build, rows, durations) in numbered]

    def _item(self, entry: ProgressEntry) -> ProgressItem:
        return entry[1:]

    def __repr__(self) -> str:
        first, items = self._snapshot()
        return f"<ProgressLog [{first - 1 + len(items)} reports, {len(items)} retained, {len(self._readers)} readers]>"
