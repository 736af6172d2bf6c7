"""StreamingListenerBus: delivers events to listeners, each through its own queue and task, without ever stalling the scheduler.

Spark's ``StreamingListenerBus`` on an ``AsyncEventQueue`` per listener, with an explicit overflow policy and a bounded stop.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence

import anyio
import anyio.abc
import attrs

from scheduler import (
    Clock,
    Duration,
    InvalidDurationError,
    Job,
    JobSet,
    Seconds,
    StreamingStateError,
    SystemClock,
    library_logger,
    run_with_timeout,
)

from ._batch_log import BatchLog, ProgressLog, completed_batch
from ._blocked_posts import BlockedPosts
from ._events import (
    BatchCompleted,
    BatchStarted,
    BatchSubmitted,
    OutputOperationCompleted,
    OutputOperationStarted,
    StreamingEvent,
    of_succeeded_values,
    succeeded_values,
)
from ._info import BatchInfo, BatchRecord, OutputOperationInfo
from ._listener import name_of
from ._listener_queue import DeliveryControl, ListenerQueue, ListenerStatistics
from ._serve import serve

__all__ = [
    "DEFAULT_LISTENER_EXIT_TIMEOUT",
    "ListenerBusStatistics",
    "OverflowPolicy",
    "StreamingListenerBus",
]

DEFAULT_LISTENER_EXIT_TIMEOUT: Duration = Seconds(10)
"""How long a stop lets listeners drain their queues by default (``spark.scheduler.listenerbus.exitTimeout``).

Spark's default, 0, waits without a bound, so one hung listener holds the stop (and a SIGTERM's
graceful path) forever; here the default is bounded and ``None`` asks for Spark's unbounded wait.
"""


class OverflowPolicy(enum.Enum):
    """What ``post`` does when a listener's queue is full."""

    DROP = "drop"
    """Drop the event for that listener, count it, and warn once naming the listener (Spark's behaviour)."""
    BLOCK = "block"
    """Wait for room: the scheduler slows down to the slowest listener, and nothing is dropped."""


@attrs.frozen
class ListenerBusStatistics:
    """Counters of the whole bus: ``delivered``, ``failed`` and ``dropped`` count (event, listener) pairs."""

    posted: int
    delivered: int
    failed: int
    dropped: int
    queued: int
    listeners: tuple[ListenerStatistics, ...]


class StreamingListenerBus:
    """An asynchronous, bounded event bus that delivers what is queued at stop, within a deadline.

    Spark's ``StreamingListenerBus`` on an ``AsyncEventQueue``, with three differences: each
    listener has its own bounded queue and dispatcher task (a ``ListenerQueue``: a slow
    listener delays only itself, and a drop names it); the overflow policy is explicit (drop and
    count, or block the producer); and a stop delivers what is queued, within a deadline
    (Spark's ``spark.scheduler.listenerbus.exitTimeout``, which Spark leaves unbounded by
    default): :meth:`stop` drains every queue first, then drops and counts what a hung listener
    still holds, so a stop always ends.

    Where callbacks run: an ``async def`` callback on the listener's dispatcher task; a plain
    ``def`` callback off the event loop, on a worker thread that serves that listener alone (one
    call at a time, in posting order), so one that blocks, does I/O or calls Spark delays neither
    the timer, the scheduler nor the host's loop (only while a busy loop keeps that thread from the
    GIL with ``HAND_OFF_EVENTS`` undelivered does a post wait, up to 1 ms with the GIL released, for its trip to run).
    A listener whose plain callbacks are quick and touch objects of the loop (anyio events, the
    engine's own state) asks to run on the loop instead, with ``add_listener(..., on_loop=True)``
    or a class attribute ``run_on_loop = True``.
    A listener whose callbacks are a few microseconds of arithmetic (metrics, the web UI's
    history) asks to run inline, ``add_listener(..., inline=True)`` or ``run_inline = True``: it is
    called inside :meth:`post`, in the posting task, with no queue and no task switch; its
    callbacks must never block or await.

    Run it in a task group (``await tg.start(bus.run)``), post events with :meth:`post`, and end
    it with :meth:`stop`, which delivers everything already queued within :attr:`exit_timeout`
    and drops (and counts) what a hung listener still holds after that; :meth:`close` only
    stops accepting events, and :meth:`run` returns once the queues are drained. Each listener
    receives events one at a time in posting order on its own task.

    It also implements the scheduler's ``JobSchedulerListener``: the scheduler tells it about
    batch and job transitions and it turns them into events.
    """

    def __init__(self, capacity: int = 10_000, overflow: OverflowPolicy = OverflowPolicy.DROP, *,
                 clock: Clock | None = None, exit_timeout: Duration | None = DEFAULT_LISTENER_EXIT_TIMEOUT,
                 linger: bool | None = None, linger_clock: Clock | None = None) -> None:
        """Create a bus whose listener queues each hold ``capacity`` events.

        Args:
            capacity: each listener's queue bound.
            overflow: what :meth:`post` does when a listener's queue is full.
            clock: the clock :meth:`stop`'s deadline is measured on (default: the wall clock);
                a runtime passes its own, so a manual clock decides when the deadline passes.
            exit_timeout: how long :meth:`stop` lets the listeners drain what is queued before
                it drops the rest (Spark's ``spark.scheduler.listenerbus.exitTimeout``); ``None``
                waits without a bound, as Spark's default does.
            linger: whether a plain listener's dispatcher lingers before a thread trip in a sustained
                stream (until ``LINGER_EVENTS`` are queued or ``LINGER`` passes, see
                ``ListenerQueue.dispatch``); default (``None``) and ``True``: yes, ``False``: never.
            linger_clock: the clock the linger's ``LINGER`` is measured on; default: real time (a
                :class:`~scheduler.SystemClock` of its own), whatever ``clock`` is, so that on a manual
                clock nobody advances lingering events still go within a few milliseconds, and the
                linger is no sleeper of that clock. A test passes a manual clock here to decide when
                a linger's time has passed.

        Raises:
            ValueError: a capacity that is not a positive int.
            TypeError: an overflow that is not an :class:`OverflowPolicy`.
            InvalidDurationError: an exit timeout that is not a non-negative Duration or None.
        """
        if type(capacity) is not int or capacity < 1:
            raise ValueError(f"listener bus capacity must be a positive int, got {capacity!r}")
        if not isinstance(overflow, OverflowPolicy):
            raise TypeError(f"overflow must be an OverflowPolicy, got {overflow!r}")
        if exit_timeout is not None and (not isinstance(exit_timeout, Duration) or exit_timeout.milliseconds < 0):
            raise InvalidDurationError(
                f"the listener bus exit timeout must be a non-negative Duration or None (no bound), got {exit_timeout!r}; "
                "pass e.g. Seconds(10)"
            )
        self.capacity = capacity
        self.overflow = overflow
        self._block = overflow is OverflowPolicy.BLOCK
        self.exit_timeout = exit_timeout
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._linger_clock: Clock | None = None
        if linger is None or linger:
            self._linger_clock = linger_clock if linger_clock is not None else SystemClock()
        self._ended: anyio.Event | None = None  # set when run() has returned
        # Shared with the queues: stop()'s deadline passed (or it was cancelled), so undelivered
        # events are dropped; and the tasks in wait_delivered().
        self._control = DeliveryControl()
        # Replaced, never mutated, on add/remove: a post that waits (BLOCK) keeps iterating the
        # list it started with, so no listener is skipped when another one leaves.
        self._slots: list[ListenerQueue] = []
        self._wanted: frozenset[type] = frozenset()
        self._posted = 0
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._closing: anyio.Event | None = None
        self._removed: list[ListenerQueue] = []  # removed, still delivering what was queued for them
        self._removed_stats: list[ListenerStatistics] = []  # removed and drained: final counts
        self._names: set[str] = set()  # every listener's, removed ones' too (statistics() keeps their counts)
        # The batches submitted and not completed, by time in ms, once a view asked to follow
        # them (follow_batches): references to the scheduler's own JobSets, snapshotted only when
        # the view reads them, instead of two snapshot events per batch.
        self._active: dict[int, JobSet] | None = None
        # The completed batches' and progress reports' values, kept once asked for by a view (the
        # web UI, the metrics) that reads them when it is asked, instead of taking events.
        self._batch_log: BatchLog | None = None
        self._progress_log: ProgressLog | None = None
        self._blocked = BlockedPosts(self._clock)
        self._log = library_logger("aiodstream.listeners", component="StreamingListenerBus")

    # -- listeners --

    def add_listener(self, listener: object, *, name: str | None = None, on_loop: bool | None = None,
                     inline: bool | None = None) -> None:
        """Register ``listener``; it receives every event posted from now on.

        Accepts a :class:`StreamingListener` (or any object with ``on_*`` callbacks), or a
        callable that takes every event. Callbacks may be plain or ``async``.

        Args:
            listener: the listener.
            name: the name logs and statistics use (default: its class or function name); one this bus
                gave before (two listeners of one class) gets ``-2``, ``-3``, ... in order, never reused.
            on_loop: run its plain callbacks on the event loop (they must be quick and must not
                block) rather than on a worker thread of its own; default: the listener's
                ``run_on_loop`` attribute, else ``False``.
            inline: call its callbacks inside :meth:`post`, in the posting task (no queue, no task
                switch): for callbacks of a few microseconds that never block or await; default:
                the listener's ``run_inline`` attribute, else ``False``.

        Raises:
            TypeError: not a listener, or an inline listener with an ``async`` callback.
        """
        if self._closed:
            raise StreamingStateError("cannot add a listener to a closed listener bus")
        slot = ListenerQueue(listener, _unique_name(name or name_of(listener), self._names), self.capacity, on_loop, inline,
                             self._log, self._linger_clock, gather=self.overflow is OverflowPolicy.DROP)
        self._names.add(slot.name)
        self._slots = [*self._slots, slot]
        self._refresh_wanted()
        if self._tg is not None:
            self._start_dispatcher(self._tg, slot)

    def remove_listener(self, listener: object) -> None:
        """Unregister ``listener``; events already queued for it are still delivered."""
        for slot in self._slots:
            if slot.listener is listener:
                self._slots = [s for s in self._slots if s is not slot]
                self._refresh_wanted()
                slot.queue.close()
                slot.end_linger()
                if slot.inline:  # nothing queued: its final counts are final now
                    self._removed_stats.append(slot.statistics())
                else:
                    self._removed.append(slot)
                return
        raise ValueError(f"listener {listener!r} is not registered")

    def _refresh_wanted(self) -> None:
        # Event types some listener handles: the scheduler-facing methods skip building
        # snapshots nobody would receive.
        self._wanted = frozenset(t for slot in self._slots for t in slot.handlers)

    def wants(self, event_type: type[StreamingEvent]) -> bool:
        """Whether some listener handles ``event_type`` now: a producer may skip building an event nobody would receive."""
        return event_type in self._wanted

    @property
    def listeners(self) -> list[object]:
        """The registered listeners, in registration order."""
        return [slot.listener for slot in self._slots]

    # -- posting --

    async def post(self, event: StreamingEvent) -> None:
        """Queue ``event`` for every listener; never waits unless the policy is BLOCK and a queue is full."""
        slots = self._offer(event)
        if slots is not None:
            await self._post_waiting(event, slots)

    def _offer(self, event: StreamingEvent) -> list[ListenerQueue] | None:
        """``post`` without waiting: the listeners from the first whose queue is full under BLOCK on, else ``None`` (all served).

        The whole of ``post`` when no queue is full: no coroutine, no task switch.
        """
        if self._closed:
            self._log.warning("event posted after the bus was closed; ignored", event_type=type(event).__name__)
            return None
        self._posted += 1
        return serve(event, self._slots, None, self.capacity, self._block)

    async def _post_waiting(self, event: StreamingEvent, slots: list[ListenerQueue] | None) -> None:
        # The first of slots has a full queue (BLOCK): wait for room there (see BlockedPosts), then serve the rest in order.
        while slots is not None:
            await self._blocked.put(slots[0], event)
            slots = serve(event, slots[1:], None, self.capacity, self._block)

    def stopping(self) -> None:
        """What posts here has begun to stop: under the BLOCK policy a post waiting for room (or waiting from now on)
        waits at most :attr:`exit_timeout` on the bus's clock, then drops its event for that listener, and every later
        event for that listener is dropped at once; :meth:`stop` then gives up on such a listener without waiting.

        So a hung listener holds the poster's stop (a runtime's scheduler posts from its jobs) no longer than it would
        hold the bus's own stop. Nothing changes under the DROP policy (a post never waits) or without an exit timeout.
        """
        if self._block and self.exit_timeout is not None and self._tg is not None:
            self._blocked.stopping(self._tg, self.exit_timeout)

    # -- the running batches, read when asked --

    def follow_batches(self) -> None:
        """From now on keep track of the batches submitted and not yet completed, for :meth:`active_batches`.

        For a view that shows the running batches when it is asked (the web UI): it costs a
        dictionary entry per batch, where taking ``BatchSubmitted`` and ``BatchStarted`` costs two
        snapshots and two deliveries.
        """
        if self._active is None:
            self._active = {}

    def active_batches(self) -> list[BatchInfo]:
        """Snapshots, taken now, of the batches submitted and not completed, oldest first (needs :meth:`follow_batches`).

        A batch whose ``processing_start_time`` is ``None`` is queued, else processing; each
        snapshot shows its output operations as they are now. A batch an immediate stop dropped
        (its queued jobs never ran) stays, as a listener of ``BatchSubmitted`` would keep it.
        May be called from another thread: the entries are copied in one step first.
        """
        if self._active is None:
            return []
        return [BatchInfo.from_job_set(job_set) for job_set in list(self._active.values())]

    # -- the logs views read when asked --

    def batch_log(self, retained: int = 1) -> BatchLog:
        """The log of the batches completed from now on, keeping at least the last ``retained`` (made on the first call).

        For views that read batches when they are asked (the web UI's history, the metrics): one
        entry per completed batch, made once for all of them, where a listener of
        ``BatchCompleted`` costs an event and a delivery per batch.
        """
        if self._batch_log is None:
            self._batch_log = BatchLog()
        self._batch_log.retain(retained)
        return self._batch_log

    def progress_log(self, retained: int = 1) -> ProgressLog:
        """The log of a micro-batch query's progress reports from now on, keeping at least the last ``retained`` (made on the first call).

        Each report is built only when a view reads it; its input rows and phase durations are
        kept as they are (for totals and histograms). Fed by the query's progress reporter, which
        appends to it itself (a ``ProgressKeeper``: see ``BusReports.progress_keeper``).
        """
        if self._progress_log is None:
            self._progress_log = ProgressLog()
        self._progress_log.retain(retained)
        return self._progress_log

    def keeps_progress(self) -> bool:
        """Whether a view keeps the progress reports (:meth:`progress_log`)."""
        return self._progress_log is not None

    # -- the scheduler's JobSchedulerListener protocol --

    async def on_batch_submitted(self, job_set: JobSet) -> None:
        """Post BatchSubmitted."""
        if self._active is not None:
            self._active[job_set.time.milliseconds] = job_set
        if BatchSubmitted in self._wanted:
            await self.post(BatchSubmitted(BatchInfo.from_job_set(job_set)))

    async def on_batch_started(self, job_set: JobSet) -> None:
        """Post BatchStarted."""
        if BatchStarted in self._wanted:
            await self.post(BatchStarted(BatchInfo.from_job_set(job_set)))

    async def on_job_started(self, job: Job, job_set: JobSet) -> None:
        """Post OutputOperationStarted."""
        if OutputOperationStarted in self._wanted:
            await self.post(OutputOperationStarted(OutputOperationInfo.from_job(job)))

    async def on_job_completed(self, job: Job, job_set: JobSet) -> None:
        """Post OutputOperationCompleted."""
        if OutputOperationCompleted in self._wanted:
            await self.post(OutputOperationCompleted(OutputOperationInfo.from_job(job)))

    async def on_batch_completed(self, job_set: JobSet) -> None:
        """Post BatchCompleted."""
        if self._active is not None:
            self._active.pop(job_set.time.milliseconds, None)
        log = self._batch_log
        wanted = BatchCompleted in self._wanted
        if log is None and not wanted:
            return
        # Kept by the log, or by listeners for as long as they like: the JobSet without its jobs'
        # functions, or a record of it if a job failed; a BatchInfo is built only if a listener reads it.
        jobs = job_set.jobs
        one_succeeded = len(jobs) == 1 and jobs[0].failure is None
        if one_succeeded:
            batch: JobSet | BatchRecord = job_set  # the common case: its job let go of its function as it ended
        else:
            batch = completed_batch(job_set)
        if log is not None:  # BatchLog.append, inline: this is the per-batch path of the UI and the metrics
            log.items.append(batch)
            log.left -= 1
            if not log.left:
                log.rest()
        if wanted:
            # post's _offer, inline: this is the per-batch path of every listener of BatchCompleted.
            if self._closed:
                self._log.warning("event posted after the bus was closed; ignored", event_type="BatchCompleted")
                return
            self._posted += 1
            event: BatchCompleted | None = None
            values = None
            if one_succeeded and job_set.processing_start is not None:
                # The batch's values, not the JobSet: a plain listener's queue keeps them flat and its
                # thread builds the event (see ListenerQueue.flat), so what the queue holds starts no
                # garbage collection; another listener gets an event built here, once, from them.
                values = succeeded_values(job_set, jobs[0])
            elif isinstance(batch, BatchRecord):
                event = BatchCompleted.of_record(batch)
            else:
                event = BatchCompleted.of_completed(batch)
            slots = serve(event, self._slots, values, self.capacity, self._block)
            if slots is not None:
                # A full queue under BLOCK waits with the object (not SUCCEEDED: the dispatcher may take
                # a waiting put before this task resumes, so the values would come too late).
                await self._post_waiting(event or of_succeeded_values(values), slots)  # type: ignore[arg-type]

    # -- running --

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Dispatch events until :meth:`close`; returns once every queue is drained (or :meth:`stop` gave up on it).

        Runs until :meth:`close` even with no listener, so that listeners added later are served.
        """
        if self._tg is not None:
            raise StreamingStateError("the listener bus is already running")
        self._closing = anyio.Event()
        self._ended = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                for slot in (*self._slots, *self._removed):
                    self._start_dispatcher(tg, slot)
                task_status.started()
                if not self._closed:
                    await self._closing.wait()
        finally:
            self._tg = None
            self._ended.set()

    def _start_dispatcher(self, tg: anyio.abc.TaskGroup, slot: ListenerQueue) -> None:
        if not slot.dispatched and not slot.inline:
            slot.dispatched = True
            tg.start_soon(self._dispatch, slot)
            if slot.may_linger:
                tg.start_soon(slot.guard_lingers)

    async def _dispatch(self, slot: ListenerQueue) -> None:
        try:
            await slot.dispatch(self._control)
        finally:
            if self._control.abandoned:
                self._drop_undelivered(slot)
            if slot in self._removed:  # drained: keep its final counts, not the listener
                self._removed.remove(slot)
                self._removed_stats.append(slot.statistics())
            self._control.notify_progress()

    def close(self) -> None:
        """Accept no more events; dispatchers exit once they have delivered what is queued.

        A post still waiting for room (BLOCK policy) when the bus closes delivers its event only
        to the listeners it had already reached.
        """
        if self._closed:
            return
        self._closed = True
        self._blocked.close()
        for slot in self._slots:
            slot.queue.close()
            slot.end_linger()
        if self._closing is not None:
            self._closing.set()
        dropped = sum(slot.dropped for slot in self._slots)
        if dropped:
            self._log.warning("listener bus closed after dropping events", dropped=dropped,
                              by_listener={s.name: s.dropped for s in self._slots if s.dropped})

    async def stop(self) -> bool:
        """Close the bus, let the listeners drain what is queued within :attr:`exit_timeout`, then drop the rest.

        Spark's ``LiveListenerBus.stop`` with ``spark.scheduler.listenerbus.exitTimeout``: it
        returns once :meth:`run` has ended. Until the deadline (measured on the bus's clock)
        every queued event is delivered; past it, what a listener has not received yet is
        dropped, counted in :meth:`statistics` (``dropped``) and reported by one warning per
        listener naming it, and its dispatcher is cancelled. An ``async`` callback in progress is
        cancelled. A plain callback in progress on the listener's worker thread cannot be
        interrupted: it is abandoned, runs to its end unwaited (the process's exit still waits
        for that thread), its event counts as dropped and the listener gets nothing after it. A
        plain callback that blocks the event loop itself (``on_loop``) holds everything,
        this deadline included.

        Cancellation (a ``move_on_after`` around the stop of a context) is honoured: the wait
        ends at once, what is undelivered is dropped as at the deadline, and the cancellation
        propagates; only the short wait for the cancelled dispatchers to leave is shielded.

        Returns:
            True if every queued event was delivered, False if some were dropped.
        """
        self.close()
        ended = self._ended
        if ended is None:  # never ran: what is queued is delivered if it runs later
            return True
        try:
            return await run_with_timeout(self._clock, self.exit_timeout, self._drained) and ended.is_set()
        finally:
            if not ended.is_set():
                self._abandon()
                with anyio.CancelScope(shield=True):
                    # Short: cancelled dispatchers leave at once (a thread is not waited for).
                    await ended.wait()
                for slot in (*self._slots, *self._removed):
                    self._drop_undelivered(slot)  # a dispatcher cancelled before it ever ran

    async def _drained(self) -> None:
        # Until run() has ended; or, once a listener was given up on while the stop began (stopping), until every
        # other listener has received what is queued for it: the stop then gives up on the rest at once.
        ended, control, stalled = self._ended, self._control, self._blocked.stalled
        assert ended is not None
        if not stalled:
            await ended.wait()
            return
        control.waiters += 1
        try:
            while not ended.is_set() and any(slot.processed < slot.accepted and not slot.ended
                                             for slot in (*self._slots, *self._removed) if slot not in stalled):
                await control.wait_progress()
        finally:
            control.waiters -= 1

    def _abandon(self) -> None:
        """Give up on what is still queued: cancel the dispatchers; each counts and reports its undelivered events."""
        self._control.abandoned = True
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    async def wait_delivered(self, listeners: Collection[object] | None = None) -> None:
        """Wait until every event posted before this call has reached every listener (or each of ``listeners``).

        Events dropped by the DROP policy never will; they are counted in :meth:`statistics`.
        """
        targets = [(slot, slot.accepted) for slot in self._slots_of(listeners)]
        control = self._control
        control.waiters += 1
        for slot, _ in targets:
            slot.end_linger()  # a waiter ends every linger: what is queued goes now
        try:
            for slot, target in targets:
                while slot.processed < target and not slot.ended:
                    await control.wait_progress()
        finally:
            control.waiters -= 1

    def _slots_of(self, listeners: Collection[object] | None) -> Sequence[ListenerQueue]:
        slots = (*self._slots, *self._removed)
        return slots if listeners is None else [slot for slot in slots if any(slot.listener is one for one in listeners)]

    def _drop_undelivered(self, slot: ListenerQueue) -> None:
        # The stop's deadline passed (or the stop was cancelled): what this listener has not
        # received, the event of a callback still running on its thread included, is dropped.
        lost = slot.drop_undelivered()
        if not lost:
            return
        self._log.warning("listener bus stopped before this listener received every queued event; they were dropped",
                          listener=slot.name, dropped=lost,
                          exit_timeout_ms=None if self.exit_timeout is None else self.exit_timeout.milliseconds)

    # -- introspection --

    def undelivered(self, listeners: Collection[object]) -> int:
        """Events queued for ``listeners`` they have not finished (none for an ended one); their lingers end, as for a waiter."""
        slots = [slot for slot in self._slots_of(listeners) if not slot.ended and slot.accepted > slot.processed]
        for slot in slots:
            slot.end_linger()
        return sum(slot.accepted - slot.processed for slot in slots)

    def statistics(self) -> ListenerBusStatistics:
        """Posted events, and delivered / failed / dropped / queued (event, listener) pairs."""
        per = tuple(slot.statistics() for slot in (*self._slots, *self._removed)) + tuple(self._removed_stats)
        return ListenerBusStatistics(
            posted=self._posted,
            delivered=sum(s.delivered for s in per),
            failed=sum(s.failed for s in per),
            dropped=sum(s.dropped for s in per),
            queued=sum(s.queued for s in per),
            listeners=per,
        )

    def __repr__(self) -> str:
        st = self.statistics()
        return (f"<StreamingListenerBus [listeners: {len(self._slots)} | events: {st.posted} posted, "
                f"{st.queued} queued, {st.dropped} dropped]>")


def _unique_name(wanted: str, taken: set[str]) -> str:
    """``wanted``, or the first of ``wanted-2``, ``wanted-3``, ... not in ``taken``: each listener's counters told apart."""
    name, n = wanted, 1
    while name in taken:
        n += 1
        name = f"{wanted}-{n}"
    return name
