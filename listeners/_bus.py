"""StreamingListenerBus: delivers events to listeners without ever stalling the scheduler.

Spark's ``StreamingListenerBus`` on an ``AsyncEventQueue``, with three differences: each listener
has its own bounded queue and dispatcher task (a slow listener delays only itself, and a drop
names it); the overflow policy is explicit (drop and count, or block the producer); and a stop
delivers what is queued, within a deadline (Spark's ``spark.scheduler.listenerbus.exitTimeout``,
which Spark leaves unbounded by default): :meth:`StreamingListenerBus.stop` drains every queue
first, then drops and counts what a hung listener still holds, so a stop always ends.

Where callbacks run: an ``async def`` callback on the listener's dispatcher task; a plain ``def``
callback off the event loop, on a worker thread that serves that listener alone (one call at a
time, in posting order), so one that blocks, does I/O or calls Spark delays neither the timer,
the scheduler nor the host's loop. A listener whose plain callbacks are quick and touch objects
of the loop (anyio events, the engine's own state) asks to run on the loop instead, with
``add_listener(..., on_loop=True)`` or a class attribute ``run_on_loop = True``. A listener whose
callbacks are a few microseconds of arithmetic (metrics, the web UI's history) asks to run inline,
``add_listener(..., inline=True)`` or ``run_inline = True``: it is called inside :meth:`post`, in the
posting task, with no queue and no task switch; its callbacks must never block or await.
"""

from __future__ import annotations

import contextvars
import enum
import inspect
from typing import Any, Callable

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import attrs

from scheduler import (
    Clock,
    Duration,
    InvalidDurationError,
    Job,
    JobSet,
    Mailbox,
    Seconds,
    StreamingStateError,
    SystemClock,
    library_logger,
    ready_probe,
    run_with_timeout,
    yield_to_ready,
)

from ._events import (
    BatchCompleted,
    BatchStarted,
    BatchSubmitted,
    OutputOperationCompleted,
    OutputOperationStarted,
    StreamingEvent,
)
from ._info import BatchInfo, OutputOperationInfo
from ._listener import HANDLER_NAMES, StreamingListener

__all__ = [
    "DEFAULT_LISTENER_EXIT_TIMEOUT",
    "ListenerBusStatistics",
    "ListenerStatistics",
    "OverflowPolicy",
    "StreamingListenerBus",
    "current_listener",
]

_current_listener: contextvars.ContextVar[str | None] = contextvars.ContextVar("aiodstream_listener", default=None)

# A dispatcher that keeps finding events queued still yields to the event loop this often.
_YIELD_EVERY = 256

_EMPTY: Any = object()  # what Mailbox.poll returns when no event is queued

DEFAULT_LISTENER_EXIT_TIMEOUT: Duration = Seconds(10)
"""How long a stop lets listeners drain their queues by default (``spark.scheduler.listenerbus.exitTimeout``).

Spark's default, 0, waits without a bound, so one hung listener holds the stop (and a SIGTERM's
graceful path) forever; here the default is bounded and ``None`` asks for Spark's unbounded wait.
"""


def current_listener() -> str | None:
    """The name of the listener whose callback is running in this task, else ``None``.

    Used to refuse stopping a context from inside a listener callback, which would wait for
    the very callback that asked.
    """
    return _current_listener.get()


class OverflowPolicy(enum.Enum):
    """What ``post`` does when a listener's queue is full."""

    DROP = "drop"
    """Drop the event for that listener, count it, and warn once naming the listener (Spark's behaviour)."""
    BLOCK = "block"
    """Wait for room: the scheduler slows down to the slowest listener, and nothing is dropped."""


@attrs.frozen
class ListenerStatistics:
    """Counters of one listener's queue."""

    name: str
    queued: int
    delivered: int
    failed: int
    dropped: int


@attrs.frozen
class ListenerBusStatistics:
    """Counters of the whole bus: ``delivered``, ``failed`` and ``dropped`` count (event, listener) pairs."""

    posted: int
    delivered: int
    failed: int
    dropped: int
    queued: int
    listeners: tuple[ListenerStatistics, ...]


class _Slot:
    """One listener: its queue, its handlers, where its plain callbacks run, and its counters."""

    def __init__(self, listener: object, name: str, capacity: int, on_loop: bool | None, inline: bool | None) -> None:
        self.listener = listener
        self.name = name
        self.on_loop = bool(getattr(listener, "run_on_loop", False)) if on_loop is None else on_loop
        self.inline = bool(getattr(listener, "run_inline", False)) if inline is None else inline
        # Its own thread token: a listener blocked in a callback holds no thread another one needs.
        self.limiter: anyio.CapacityLimiter | None = None
        # Bounded, and unlike a memory object stream it parks an idle dispatcher in one step and
        # wakes it without building a receiver record per event: one loop iteration per wake-up.
        self.queue: Mailbox[StreamingEvent] = Mailbox(capacity)
        self.handlers: dict[type, tuple[Callable[[Any], Any], bool]] = _handlers_of(listener)
        if self.inline and any(is_async for _, is_async in self.handlers.values()):
            raise TypeError(f"listener {name!r} runs inline (inside post), so its callbacks must be plain 'def' "
                            "functions that never block; make them plain, or register it without inline")
        self.accepted = 0
        self.processed = 0
        self.failed = 0
        self.dropped = 0
        self.warned = False
        self.running = False
        self.dispatched = False
        self.ended = False  # its dispatcher has returned: nothing more is delivered to it
        # Progress through the run of events on the listener's thread (written by that thread).
        self.run_done = 0
        self.run_failed = 0

    def statistics(self) -> ListenerStatistics:
        return ListenerStatistics(self.name, self.accepted - self.processed, self.processed - self.failed, self.failed, self.dropped)


def _handlers_of(listener: object) -> dict[type, tuple[Callable[[Any], Any], bool]]:
    handlers: dict[type, tuple[Callable[[Any], Any], bool]] = {}
    if isinstance(listener, StreamingListener) or any(hasattr(listener, n) for n in HANDLER_NAMES.values()):
        for event_type, method_name in HANDLER_NAMES.items():
            method = getattr(listener, method_name, None)
            if method is None:
                continue
            base = getattr(StreamingListener, method_name)
            if getattr(method, "__func__", None) is base:
                continue  # not overridden: skip the call entirely
            handlers[event_type] = (method, inspect.iscoroutinefunction(method))
    elif callable(listener):
        is_async = inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(type(listener).__call__)
        for event_type in HANDLER_NAMES:
            handlers[event_type] = (listener, is_async)
    else:
        raise TypeError(
            f"a listener must be a StreamingListener, an object with on_* callbacks, or a callable taking an event; got {listener!r}"
        )
    return handlers


class StreamingListenerBus:
    """An asynchronous, bounded event bus that delivers what is queued at stop, within a deadline.

    Run it in a task group (``await tg.start(bus.run)``), post events with :meth:`post`, and end
    it with :meth:`stop`, which delivers everything already queued within :attr:`exit_timeout`
    and drops (and counts) what a hung listener still holds after that; :meth:`close` only
    stops accepting events, and :meth:`run` returns once the queues are drained. Each listener
    receives events one at a time in posting order on its own task.

    It also implements the scheduler's ``JobSchedulerListener``: the scheduler tells it about
    batch and job transitions and it turns them into events.
    """

    def __init__(self, capacity: int = 10_000, overflow: OverflowPolicy = OverflowPolicy.DROP, *,
                 clock: Clock | None = None, exit_timeout: Duration | None = DEFAULT_LISTENER_EXIT_TIMEOUT) -> None:
        """Create a bus whose listener queues each hold ``capacity`` events.

        Args:
            capacity: each listener's queue bound.
            overflow: what :meth:`post` does when a listener's queue is full.
            clock: the clock :meth:`stop`'s deadline is measured on (default: the wall clock);
                a runtime passes its own, so a manual clock decides when the deadline passes.
            exit_timeout: how long :meth:`stop` lets the listeners drain what is queued before
                it drops the rest (Spark's ``spark.scheduler.listenerbus.exitTimeout``); ``None``
                waits without a bound, as Spark's default does.

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
        self.exit_timeout = exit_timeout
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._ended: anyio.Event | None = None  # set when run() has returned
        self._abandoned = False  # stop()'s deadline passed, or it was cancelled: undelivered events are dropped
        # Replaced, never mutated, on add/remove: a post that waits (BLOCK) keeps iterating the
        # list it started with, so no listener is skipped when another one leaves.
        self._slots: list[_Slot] = []
        self._wanted: frozenset[type] = frozenset()
        self._posted = 0
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._closing: anyio.Event | None = None
        self._progress: anyio.Event | None = None
        self._waiters = 0
        self._removed: list[_Slot] = []  # removed, still delivering what was queued for them
        self._removed_stats: list[ListenerStatistics] = []  # removed and drained: final counts
        self._log = library_logger("aiodstream.listeners", component="StreamingListenerBus")

    # -- listeners --

    def add_listener(self, listener: object, *, name: str | None = None, on_loop: bool | None = None,
                     inline: bool | None = None) -> None:
        """Register ``listener``; it receives every event posted from now on.

        Accepts a :class:`StreamingListener` (or any object with ``on_*`` callbacks), or a
        callable that takes every event. Callbacks may be plain or ``async``.

        Args:
            listener: the listener.
            name: the name logs and statistics use (default: its class or function name).
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
        slot = _Slot(listener, name or _name_of(listener), self.capacity, on_loop, inline)
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

    @property
    def listeners(self) -> list[object]:
        """The registered listeners, in registration order."""
        return [slot.listener for slot in self._slots]

    # -- posting --

    async def post(self, event: StreamingEvent) -> None:
        """Queue ``event`` for every listener; never waits unless the policy is BLOCK and a queue is full."""
        if self._closed:
            self._log.warning("event posted after the bus was closed; ignored", event_type=type(event).__name__)
            return
        self._posted += 1
        for slot in self._slots:
            if slot.inline:
                self._deliver_inline(slot, event)
                continue
            try:
                slot.queue.put_nowait(event)
            except anyio.WouldBlock:
                if self.overflow is OverflowPolicy.BLOCK:
                    await self._send_waiting(slot, event)
                else:
                    self._drop(slot, event)
                continue
            except anyio.ClosedResourceError:
                continue  # removed meanwhile, or its dispatcher is gone
            slot.accepted += 1

    def _deliver_inline(self, slot: _Slot, event: StreamingEvent) -> None:
        entry = slot.handlers.get(type(event))
        slot.accepted += 1
        if entry is not None:
            token = _current_listener.set(slot.name)
            try:
                entry[0](event)
            except Exception:
                slot.failed += 1
                self._log.exception("listener raised; it stays registered", listener=slot.name,
                                    event_type=type(event).__name__)
            finally:
                _current_listener.reset(token)
        slot.processed += 1

    async def _send_waiting(self, slot: _Slot, event: StreamingEvent) -> None:
        # Counted before waiting: the dispatcher takes the event from this waiting send and may
        # deliver it before this task resumes; queued (accepted - processed) must not go negative.
        slot.accepted += 1
        try:
            await slot.queue.put(event)
        except BaseException as exc:
            slot.accepted -= 1
            # Withdrawn because the listener was removed, the bus closed or the dispatcher ended
            # while we waited: the event is not for that listener any more; carry on with the others.
            if not isinstance(exc, anyio.ClosedResourceError):
                raise

    def _drop(self, slot: _Slot, event: StreamingEvent) -> None:
        slot.dropped += 1
        if not slot.warned:
            slot.warned = True
            self._log.warning(
                "dropping events for a slow listener: its queue is full",
                listener=slot.name,
                capacity=self.capacity,
                event_type=type(event).__name__,
            )

    # -- the scheduler's JobSchedulerListener protocol --

    async def on_batch_submitted(self, job_set: JobSet) -> None:
        """Post BatchSubmitted."""
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
        if BatchCompleted in self._wanted:
            await self.post(BatchCompleted(BatchInfo.from_job_set(job_set)))

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

    def _start_dispatcher(self, tg: anyio.abc.TaskGroup, slot: _Slot) -> None:
        if not slot.dispatched and not slot.inline:
            slot.dispatched = True
            tg.start_soon(self._dispatch, slot)

    def close(self) -> None:
        """Accept no more events; dispatchers exit once they have delivered what is queued.

        A post still waiting for room (BLOCK policy) when the bus closes delivers its event only
        to the listeners it had already reached.
        """
        if self._closed:
            return
        self._closed = True
        for slot in self._slots:
            slot.queue.close()
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
            return await run_with_timeout(self._clock, self.exit_timeout, ended.wait)
        finally:
            if not ended.is_set():
                self._abandon()
                with anyio.CancelScope(shield=True):
                    # Short: cancelled dispatchers leave at once (a thread is not waited for).
                    await ended.wait()
                for slot in (*self._slots, *self._removed):
                    self._drop_undelivered(slot)  # a dispatcher cancelled before it ever ran

    def _abandon(self) -> None:
        """Give up on what is still queued: cancel the dispatchers; each counts and reports its undelivered events."""
        self._abandoned = True
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    async def wait_delivered(self) -> None:
        """Wait until every event posted before this call has reached every listener.

        Events dropped by the DROP policy never will; they are counted in :meth:`statistics`.
        """
        targets = [(slot, slot.accepted) for slot in (*self._slots, *self._removed)]
        self._waiters += 1
        try:
            for slot, target in targets:
                while slot.processed < target and not slot.ended:
                    if self._progress is None:
                        self._progress = anyio.Event()
                    await self._progress.wait()
        finally:
            self._waiters -= 1

    async def _dispatch(self, slot: _Slot) -> None:
        _current_listener.set(slot.name)
        slot.running = True
        queue = slot.queue
        handlers = slot.handlers
        probe = ready_probe()  # this task's loop, asked once (None: no short cut, always yield)
        try:
            # poll, not get_nowait: an idle listener is the common case, and raising
            # WouldBlock to find that out costs more than handling the event.
            event = queue.poll(_EMPTY)
            while True:
                if event is _EMPTY:
                    try:
                        event = await queue.get()
                    except anyio.EndOfStream:
                        return
                    # Woken by one event: let the producer (and whatever else is ready) run on
                    # for one loop iteration so the events it posts next are taken in this same
                    # wake-up. With nothing else ready that iteration would be empty: skip it.
                    await yield_to_ready(probe)
                n = 0
                while True:
                    entry = handlers.get(type(event))
                    if entry is not None and not entry[1] and not slot.on_loop:
                        # Plain callbacks run on the listener's thread: the events queued now
                        # for them go in one trip, in order.
                        run, event = _take_run(queue, handlers, entry[0], event)
                        await self._call_on_thread(slot, run)
                        slot.processed += len(run)
                        n += len(run)
                    else:
                        if entry is not None:
                            # Inline rather than a helper call: this is the per-event hot path.
                            callback, is_async = entry
                            try:
                                if is_async:
                                    await callback(event)
                                else:
                                    result = callback(event)
                                    if result is not None and inspect.isawaitable(result):
                                        await result
                            except Exception:
                                slot.failed += 1
                                self._log.exception("listener raised; it stays registered", listener=slot.name,
                                                    event_type=type(event).__name__)
                        slot.processed += 1
                        n += 1
                        event = queue.poll(_EMPTY)
                    if n >= _YIELD_EVERY:
                        n = 0
                        self._notify_progress()
                        await anyio.lowlevel.checkpoint()
                    if event is _EMPTY:
                        break  # to get(): the queue was just found empty
                if self._waiters:
                    self._notify_progress()
        finally:
            # Nobody takes from this queue any more: later posts skip it, waiting ones give up.
            queue.close()
            slot.running = False
            slot.ended = True
            if self._abandoned:
                self._drop_undelivered(slot)
            if slot in self._removed:  # drained: keep its final counts, not the listener
                self._removed.remove(slot)
                self._removed_stats.append(slot.statistics())
            self._notify_progress()

    async def _call_on_thread(self, slot: _Slot, run: _Run) -> None:
        if slot.limiter is None:
            slot.limiter = anyio.CapacityLimiter(1)
        # Cancelled (the host tears the context down), the dispatcher leaves at once and the
        # callback in progress finishes on its thread, unwaited; a close drains as always.
        slot.run_done = slot.run_failed = 0
        try:
            slot.failed += await anyio.to_thread.run_sync(self._deliver, slot, run, limiter=slot.limiter,
                                                          abandon_on_cancel=True)
        except BaseException:
            if self._abandoned:
                # Given up by stop(): the events of this run the thread got through count as
                # delivered; the one in progress and the rest are dropped.
                slot.processed += slot.run_done
                slot.failed += slot.run_failed
            raise

    def _drop_undelivered(self, slot: _Slot) -> None:
        # The stop's deadline passed (or the stop was cancelled): what this listener has not
        # received, the event of a callback still running on its thread included, is dropped.
        lost = slot.accepted - slot.processed
        if lost <= 0:
            return
        slot.dropped += lost
        slot.accepted = slot.processed
        self._log.warning(
            "listener bus stopped before this listener received every queued event; they were dropped",
            listener=slot.name,
            dropped=lost,
            exit_timeout_ms=None if self.exit_timeout is None else self.exit_timeout.milliseconds,
        )

    def _deliver(self, slot: _Slot, run: _Run) -> int:
        """On the listener's thread: each callback in order; returns how many raised.

        Counts its progress in ``slot.run_done`` / ``slot.run_failed`` as it goes (plain int
        stores, read by the loop only if :meth:`stop` gives up on the run).
        """
        failed = 0
        for callback, event in run:
            if self._abandoned:
                break  # the stop gave up on this listener: its remaining events were dropped
            if callback is not None:
                try:
                    result = callback(event)
                    if result is not None and inspect.isawaitable(result):
                        anyio.from_thread.run(_awaited, result)  # a plain def that returned an awaitable
                except Exception:
                    failed += 1
                    slot.run_failed = failed
                    self._log.exception("listener raised; it stays registered", listener=slot.name,
                                        event_type=type(event).__name__)
            slot.run_done += 1
        return failed

    def _notify_progress(self) -> None:
        if self._waiters and self._progress is not None:
            self._progress.set()
            self._progress = None

    # -- introspection --

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


_Run = list[tuple[Callable[[Any], Any] | None, object]]


def _take_run(queue: Mailbox[StreamingEvent], handlers: dict[type, tuple[Callable[[Any], Any], bool]],
              callback: Callable[[Any], Any], event: object) -> tuple[_Run, Any]:
    """``event`` and the events queued behind it up to one for an async callback; and the next event (or _EMPTY).

    At most ``_YIELD_EVERY`` events, and only those queued now: the listener's thread gets them
    in one trip while the producer keeps posting.
    """
    run: _Run = [(callback, event)]
    while len(run) < _YIELD_EVERY:
        event = queue.poll(_EMPTY)
        if event is _EMPTY:
            return run, _EMPTY
        entry = handlers.get(type(event))
        if entry is not None and entry[1]:
            return run, event  # an async callback: the dispatcher awaits it on the loop
        run.append((None if entry is None else entry[0], event))
    return run, queue.poll(_EMPTY)


async def _awaited(awaitable: Any) -> None:
    await awaitable


def _name_of(listener: object) -> str:
    if inspect.isfunction(listener) or inspect.ismethod(listener):
        return getattr(listener, "__qualname__", repr(listener))
    return type(listener).__qualname__
