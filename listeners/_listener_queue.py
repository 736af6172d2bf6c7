"""ListenerQueue: one listener's bounded queue, the task that delivers it, and its counters.

Spark's ``AsyncEventQueue`` (its dispatcher thread and drop counter), one per listener here.
"""

from __future__ import annotations

import contextvars
import inspect
import sys
import threading
import weakref
from typing import Any, Callable

import anyio
import anyio.from_thread
import anyio.lowlevel
import attrs

from scheduler import (
    ChangeSignal,
    Clock,
    Duration,
    Handover,
    LibraryLogger,
    Mailbox,
    Milliseconds,
    WorkerThreads,
    ready_probe,
    yield_to_ready,
)

from ._events import SUCCEEDED_WIDTH, BatchCompleted, StreamingEvent
from ._hand_off import HAND_OFF_EVENTS, HAND_OFF_WAIT_S
from ._listener import Handlers as _Handlers
from ._listener import check_listener

__all__ = ["SUCCEEDED", "DeliveryControl", "ListenerQueue", "ListenerStatistics", "callback_lock", "current_listener"]

_current_listener: contextvars.ContextVar[str | None] = contextvars.ContextVar("aiodstream_listener", default=None)

# A dispatcher that keeps finding events queued still yields to the event loop this often.
_YIELD_EVERY = 256
_ALL = sys.maxsize  # a plain listener's trip takes every event queued (see dispatch)

_EMPTY: Any = object()  # what Mailbox.poll returns when no event is queued
_DONE = (None, None)  # an entry of a run whose event was delivered

_set_values = object.__setattr__  # a BatchCompleted is frozen: its values are set past its __setattr__

SUCCEEDED: Any = object()
"""A plain listener's queue's stand-in for a succeeded one-job batch's ``BatchCompleted`` (see ``ListenerQueue.flat``)."""

LINGER: Duration = Milliseconds(5)
"""How long a plain listener's dispatcher waits for more events before a thread trip, in a sustained stream.

Each trip costs its thread's wake-ups and a handover of the GIL when the loop is busy: flat out,
trips of 5 ms (about 550 batches) cost the engine 0.6 us a batch less than trips of 2 ms (issue
28, eighth pass); a listener then hears of a batch at most a few milliseconds late.

On the linger's own clock (real time by default); one begun while the guard still sleeps may last twice this."""

LINGER_EVENTS = 1024
"""A lingering dispatcher starts its trip as soon as this many events are queued.

A trip costs thread wake-ups and GIL waits whatever it carries, and queued succeeded batches cost
the collector nothing (``SUCCEEDED``), so trips may be long; until issue 28's seventh pass queued
events were objects and a linger past 24 started collections. Flat out the time (``LINGER``) ends
a linger first: figures in docs/ui.md ("History and cost").
"""

_Run = list[tuple[Callable[[Any], Any] | None, object]]

_new_lock = threading.Lock  # (a test counts the waits on it)
_callback_locks: dict[int, Any] = {}  # by id(listener), each entry removed when its listener dies
_callback_locks_guard = threading.Lock()


def callback_lock(listener: object) -> Any:
    """The lock ``listener``'s thread callbacks run under, on every bus it is on: one per listener object.

    One listener may be on several buses (``streams.addListener`` puts it on every query's); each
    bus gives it a thread of its own, and this lock keeps its callbacks one at a time, as Spark's
    single listener-bus thread does. A listener that cannot be weakly referenced gets a lock per bus.
    """
    key = id(listener)
    with _callback_locks_guard:
        lock = _callback_locks.get(key)
        if lock is None:
            try:
                weakref.finalize(listener, _callback_locks.pop, key, None)  # an id is reused only after its object died
            except TypeError:
                return _new_lock()
            lock = _callback_locks[key] = _new_lock()
        return lock


def current_listener() -> str | None:
    """The name of the listener whose callback is running in this task, else ``None``.

    Used to refuse stopping a context from inside a listener callback, which would wait for
    the very callback that asked.
    """
    return _current_listener.get()


@attrs.frozen
class ListenerStatistics:
    """Counters of one listener's queue."""

    name: str
    queued: int
    delivered: int
    failed: int
    dropped: int


class DeliveryControl:
    """What a bus shares with its listener queues: whether its stop gave up on them, and who waits for progress.

    ``abandoned`` is set once (by the bus's stop) and read by the queues, also on their
    listeners' threads; ``waiters`` counts the tasks in :meth:`wait_progress`.
    """

    def __init__(self) -> None:
        """Nothing abandoned, nobody waiting."""
        self.abandoned = False
        self.waiters = 0
        self._progress = ChangeSignal()

    def notify_progress(self) -> None:
        """Wake the tasks waiting in :meth:`wait_progress` (cheap when nobody waits)."""
        if self.waiters:
            self._progress.notify()

    async def wait_progress(self) -> None:
        """Wait until some queue delivered events or ended (the caller counts itself in ``waiters``)."""
        await self._progress.wait()


class ListenerQueue:
    """One listener: its queue, its handlers, where its plain callbacks run, its dispatcher and its counters.

    The bus puts events in (:meth:`deliver_inline` for an inline listener, else ``queue``,
    :meth:`put_waiting` or :meth:`drop`), runs :meth:`dispatch` (and, for a listener that may
    linger, :meth:`guard_lingers`) on tasks of its group, and reads the counters: ``accepted -
    processed`` events are queued, ``failed`` of the processed ones raised, ``dropped`` never
    reached the listener.
    """

    def __init__(self, listener: object, name: str, capacity: int, on_loop: bool | None, inline: bool | None,
                 log: LibraryLogger, linger_clock: Clock | None = None, gather: bool = False) -> None:
        """Take ``listener``'s callbacks; ``log`` is the bus's logger, which names the listener in each line.

        ``linger_clock``: the clock a plain listener's linger is measured on (see :meth:`dispatch`;
        the bus passes a real-time one whatever its own clock is); without one the dispatcher never lingers.
        ``gather``: whether the events posted during a plain listener's thread trip may go to
        :attr:`pending` rather than the queue (the bus asks it under its DROP policy only).

        Raises:
            TypeError: not a listener, or an inline listener with an ``async`` callback.
        """
        self.listener = listener
        self.name = name
        self.on_loop = bool(getattr(listener, "run_on_loop", False)) if on_loop is None else on_loop
        self.inline = bool(getattr(listener, "run_inline", False)) if inline is None else inline
        self.log = log
        # Its own thread (made on the first trip): a listener blocked in a callback holds no thread
        # another one needs. A trip is one queue put and one call_soon_threadsafe back (WorkerThreads),
        # a third of what anyio's to_thread costs, so the events queued during one stay few.
        self.threads: WorkerThreads | None = None
        self.serial = None if self.inline or self.on_loop else callback_lock(listener)  # see _call_on_thread
        # The dispatcher's context (current_listener() set) and loop token, for its thread's callbacks.
        self.context: contextvars.Context | None = None
        self.token: anyio.lowlevel.EventLoopToken | None = None
        # Bounded, and unlike a memory object stream it parks an idle dispatcher in one step and
        # wakes it without building a receiver record per event: one loop iteration per wake-up.
        self.queue: Mailbox[StreamingEvent] = Mailbox(capacity)
        self.handlers: _Handlers = check_listener(listener, name, inline=self.inline)
        # Every callback plain and run off the loop: a thread trip takes whatever is queued, as it is.
        self.all_plain = not self.on_loop and not any(is_async for _, is_async in self.handlers.values())
        self.gather = gather and self.all_plain and not self.inline
        # Every callback plain and on its own thread: the bus queues a succeeded one-job batch's
        # BatchCompleted as SUCCEEDED, its SUCCEEDED_WIDTH values appended to ``values`` (by the
        # loop, in queue order); the thread reads them from ``values_taken`` on as it meets each
        # SUCCEEDED, and the dispatcher cuts what a trip read off the front once the trip is back.
        # So a queued event is no object the collector tracks: queued objects start young
        # collections, which promote the batches in flight (a tuple of the values would too, once
        # the interpreter's free tuples run out). The thread's event dies by refcount after its call.
        self.flat = self.all_plain and not self.inline and BatchCompleted in self.handlers
        self.values: list[Any] = []
        self.values_taken = 0
        # The next trip's run, gathering while a trip is in flight (and lingers) with nothing else
        # queued: the bus appends each event it posts for this listener here (a list append instead of
        # a mailbox put, at most ``capacity`` of them, then drops) and the dispatcher takes the list
        # whole after the trip; ``None`` otherwise (the bus then uses the queue). Set and cleared on the loop.
        self.pending: list[Any] | None = None
        self.accepted = 0
        self.processed = 0
        # Events with no callback of this listener: counted as delivered, never queued (so accepted
        # and processed, which wait_delivered compares, count only what went through the queue).
        self.skipped = 0
        self.failed = 0
        self.dropped = 0
        self.warned = False
        self.running = False
        self.dispatched = False
        self.ended = False  # its dispatcher has returned: nothing more is delivered to it
        # Progress through the run of events on the listener's thread (written by that thread).
        self.run_done = 0
        self.run_failed = 0
        self.linger_clock = linger_clock
        # Set while the dispatcher lingers before a thread trip: the bus sets it once LINGER_EVENTS
        # are queued; the guard once LINGER passes; a close, a removal and wait_delivered set it too (end_linger).
        self.filled: anyio.Event | None = None
        self.lingers = 0  # how many times it lingered (for tests and statistics)
        # The trips' handover: a trip asked for and not started is one whose handover has not
        # started its call; a post that finds hand_off_at events undelivered meanwhile hands the
        # thread the GIL (hand_off).
        self.hand_off_at = HAND_OFF_EVENTS
        self.handover = Handover()
        self.handed_off = 0  # trips the loop handed the GIL to (for the benchmark and tests)
        self.settled_on_loop = 0  # of those, the trips that ended within the wait
        self.trips = 0  # thread trips made, and the events they carried (for the benchmark and tests)
        self.tripped = 0
        # The linger's guard (a task of the bus, see guard_lingers): the number of each linger begun,
        # so that it ends that linger LINGER after its start, and only that one.
        self._linger_starts: Mailbox[int] = Mailbox()
        self._linger_seq = 0
        self._guard_sleep: anyio.CancelScope | None = None
        self._guarded = False  # its guard runs

    def statistics(self) -> ListenerStatistics:
        """This listener's counters now."""
        return ListenerStatistics(self.name, self.accepted - self.processed, self.processed - self.failed + self.skipped,
                                  self.failed, self.dropped)

    # -- putting events in --

    def deliver_inline(self, event: StreamingEvent) -> None:
        """Call the callback for ``event`` now, in the posting task (an inline listener)."""
        entry = self.handlers.get(type(event))
        self.accepted += 1
        if entry is not None:
            token = _current_listener.set(self.name)
            try:
                entry[0](event)
            except Exception:
                self.failed += 1
                self._log_failure(event)
            finally:
                _current_listener.reset(token)
        self.processed += 1

    async def put_waiting(self, event: StreamingEvent) -> None:
        """Queue ``event``, waiting for room; withdrawn silently if the queue closes meanwhile."""
        # Counted before waiting: the dispatcher takes the event from this waiting send and may
        # deliver it before this task resumes; queued (accepted - processed) must not go negative.
        self.accepted += 1
        try:
            await self.queue.put(event)
        except BaseException as exc:
            self.accepted -= 1
            # Withdrawn because the listener was removed, the bus closed or the dispatcher ended
            # while we waited: the event is not for that listener any more; carry on with the others.
            if not isinstance(exc, anyio.ClosedResourceError):
                raise

    def drop(self, event: Any) -> None:
        """Count ``event`` (or ``SUCCEEDED``) as dropped for this listener (its queue is full); the first drop is logged."""
        self.dropped += 1
        if not self.warned:
            self.warned = True
            self.log.warning(
                "dropping events for a slow listener: its queue is full",
                listener=self.name,
                capacity=self.queue.capacity,
                event_type="BatchCompleted" if event is SUCCEEDED else type(event).__name__,
            )

    def drop_undelivered(self) -> int:
        """Count what this listener has not received as dropped (the bus's stop gave up); returns how many."""
        lost = self.accepted - self.processed
        if lost <= 0:
            return 0
        self.dropped += lost
        self.accepted = self.processed
        return lost

    # -- delivering --

    async def dispatch(self, control: DeliveryControl) -> None:
        """Deliver queued events in order until the queue is closed and empty (or the task is cancelled)."""
        _current_listener.set(self.name)
        self.context = contextvars.copy_context()
        self.token = anyio.lowlevel.current_token()
        self.running = True
        queue = self.queue
        handlers = self.handlers
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
                    if self.all_plain:
                        # Every event queued for it has a plain callback (the bus queues no other):
                        # the thread takes them all, as queued, and looks each callback up. All of
                        # them, not a yield's worth: while the loop runs flat out the thread gets the
                        # GIL once per switch interval (5 ms), and a run of at most 256 a trip then
                        # delivered fewer events than the loop posted, so the queue filled up.
                        events = [event, *queue.take(_ALL)]
                        while events:
                            # The queue's next event, if any, goes in a later trip (a full run, or events
                            # posted while the dispatcher yielded); only when it is empty do the events
                            # posted during the trip gather (or wait in the queue: linger).
                            taken = len(events)  # the thread lets go of each event as it delivers it
                            event = queue.poll(_EMPTY)
                            if event is _EMPTY and self.gather:
                                self.pending = []  # nothing else queued: what is posted meanwhile gathers here
                            await self._call_on_thread(self._deliver_events, events, control)
                            self.processed += taken
                            if self.values_taken:
                                del self.values[:self.values_taken]  # (the thread is back: nothing reads them)
                                self.values_taken = 0
                            n += taken
                            pending = self.pending
                            if pending is not None:
                                if 0 < len(pending) < LINGER_EVENTS and not control.waiters:
                                    await self._linger()  # see below; the events keep gathering meanwhile
                                self.pending = None
                                events = pending  # posted after the trip's events, before any in the queue
                            elif event is _EMPTY:
                                if 0 < len(queue) < LINGER_EVENTS and not control.waiters:
                                    await self._linger()  # see below
                                events = []
                            else:
                                events = [event, *queue.take(_ALL)]
                            if n >= _YIELD_EVERY:
                                n = 0
                                control.notify_progress()
                                await anyio.lowlevel.checkpoint()
                        event = queue.poll(_EMPTY)  # posted while it lingered or yielded (nothing gathered then)
                        if event is _EMPTY:
                            break
                        continue
                    entry = handlers.get(type(event))
                    if entry is not None and not entry[1] and not self.on_loop:
                        # Plain callbacks run on the listener's thread: the events queued now
                        # for them go in one trip, in order.
                        run, event = _take_run(queue, handlers, entry[0], event)
                        taken = len(run)
                        await self._call_on_thread(self._deliver, run, control)
                        self.processed += taken
                        n += taken
                        if event is _EMPTY and 0 < len(queue) < LINGER_EVENTS and not control.waiters:
                            # Events arrived during the trip: a sustained stream. A trip costs
                            # tens of microseconds of thread wake-ups and GIL hand-offs whatever
                            # it carries, so let more gather first: until LINGER_EVENTS are queued
                            # or LINGER passes on the linger's clock (real time: a manual clock
                            # that nobody advances must not hold events back), or the bus closes,
                            # or someone waits for delivery.
                            await self._linger()
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
                                self.failed += 1
                                self._log_failure(event)
                        self.processed += 1
                        n += 1
                        event = queue.poll(_EMPTY)
                    if n >= _YIELD_EVERY:
                        n = 0
                        control.notify_progress()
                        await anyio.lowlevel.checkpoint()
                    if event is _EMPTY:
                        break  # to get(): the queue was just found empty
                if control.waiters:
                    control.notify_progress()
        finally:
            # Nobody takes from this queue any more: later posts skip it, waiting ones give up.
            self.pending = None  # (a cancelled dispatcher's gathered events count as undelivered)
            queue.close()
            self._linger_starts.close()  # its guard returns, at once
            if self._guard_sleep is not None:
                self._guard_sleep.cancel()
            if self.threads is not None:
                self.threads.shutdown()  # a callback still running on it finishes; its thread then ends
            self.running = False
            self.ended = True

    async def _linger(self) -> None:
        if not self._guarded:
            return  # no guard runs (no linger clock, or one set after the start): nothing would end it in time
        self.lingers += 1
        # The guard, a task already running, measures the time: a timeout of our own (a task group
        # and a sleeping task per linger) costs about 100 us, more than the trip it saves.
        self._linger_seq += 1
        filled = self.filled = anyio.Event()
        try:
            self._linger_starts.put_nowait(self._linger_seq)
            await filled.wait()
        finally:
            self.filled = None

    @property
    def may_linger(self) -> bool:
        """Whether :meth:`dispatch` may linger before a thread trip: the bus then runs :meth:`guard_lingers` beside it."""
        return self.linger_clock is not None and not self.inline and not self.on_loop and any(
            not is_async for _, is_async in self.handlers.values())

    async def guard_lingers(self) -> None:
        """End each linger once ``LINGER`` has passed on the linger's clock since it began; returns when the queue ends.

        One task for all the lingers of this listener: a linger that began while this slept for an earlier one (which
        the events themselves ended) is ended after a full ``LINGER`` of its own once this wakes, within twice ``LINGER``.
        """
        clock = self.linger_clock
        if clock is None:
            return
        starts = self._linger_starts
        self._guarded = True
        # One cancel scope for the guard's life (cancelled when the queue ends), not one per
        # linger: entering and leaving an anyio scope costs about what the rest of a linger does.
        with anyio.CancelScope() as self._guard_sleep:
            while True:
                try:
                    seq = await starts.get()
                except anyio.EndOfStream:
                    return
                seq = starts.take(len(starts))[-1] if len(starts) else seq  # only the newest can still be going
                if self.filled is None or seq != self._linger_seq:
                    continue  # over already (enough events came, or the queue closed)
                await clock.sleep(LINGER)
                if seq == self._linger_seq:
                    self.end_linger()

    def hand_off(self) -> None:
        """On the loop, with ``hand_off_at`` undelivered and a trip asked for not started: hand its thread the GIL.

        The loop's thread waits, the GIL released, until the trip has run, at most
        ``HAND_OFF_WAIT_S`` (:meth:`scheduler.Handover.wait`); a trip that ended meanwhile is settled
        here and its thread does not wake the loop. Once per trip if it starts within the wait; a
        trip that has still not started (its thread was not scheduled in time) is handed the GIL
        again once ``HAND_OFF_EVENTS`` more are undelivered: a busy loop would starve it otherwise."""
        self.handed_off += 1
        self.settled_on_loop += self.handover.wait(HAND_OFF_WAIT_S)
        if not self.handover.started:
            self.hand_off_at = self.accepted - self.processed + HAND_OFF_EVENTS

    def end_linger(self) -> None:
        """Let a lingering dispatcher make its trip now (the bus closes, the listener leaves, someone waits for delivery)."""
        filled = self.filled
        if filled is not None:
            filled.set()

    async def _call_on_thread(self, deliver: Callable[[Any, DeliveryControl], int], run: Any,
                              control: DeliveryControl) -> None:
        threads = self.threads
        if threads is None:
            threads = self.threads = WorkerThreads(1, f"aiodstream-listener-{self.name}")
        # Cancelled (the host tears the context down), the dispatcher leaves at once and the
        # callback in progress finishes on its thread, unwaited; a close drains as always.
        self.run_done = self.run_failed = 0
        self.hand_off_at = HAND_OFF_EVENTS
        self.trips += 1
        self.tripped += len(run)
        try:
            # In the dispatcher's context, as anyio's to_thread would run it (one trip at a time:
            # the thread is this listener's only, so the context is never entered twice at once).
            context = self.context
            assert context is not None  # set by dispatch, the only caller
            self.failed += await threads.run(context.run, self._serially, deliver, run, control, handover=self.handover)
        except BaseException:
            if control.abandoned:
                # Given up by stop(): the events of this run the thread got through count as
                # delivered; the one in progress and the rest are dropped.
                self.processed += self.run_done
                self.failed += self.run_failed
            raise

    def _serially(self, deliver: Callable[[Any, DeliveryControl], int], run: Any, control: DeliveryControl) -> int:
        # One trip at a time of this listener across every bus it is on. A trip that waited here for another bus's hung
        # callback past its own bus's stop delivers nothing: its deliver sees ``abandoned`` before each event.
        serial = self.serial
        assert serial is not None  # set for every listener that makes thread trips (neither inline nor on the loop)
        with serial:
            return deliver(run, control)

    def _deliver(self, run: _Run, control: DeliveryControl) -> int:
        """On the listener's thread: each callback in order; returns how many raised.

        Counts its progress in ``run_done`` / ``run_failed`` as it goes (plain int stores, read
        by the loop only if the bus's stop gives up on the run).
        """
        failed = 0
        for n, (callback, event) in enumerate(run):
            if control.abandoned:
                break  # the stop gave up on this listener: its remaining events were dropped
            run[n] = _DONE  # let go of it once delivered (see _deliver_events)
            if callback is not None:
                try:
                    result = callback(event)
                    if result is not None and inspect.isawaitable(result):
                        anyio.from_thread.run(_awaited, result, token=self.token)  # a plain def that returned an awaitable
                except Exception:
                    failed += 1
                    self.run_failed = failed
                    self._log_failure(event)
            self.run_done += 1
        event = None
        run.clear()
        return failed

    def _deliver_events(self, events: list[Any], control: DeliveryControl) -> int:
        """:meth:`_deliver` for a listener whose callbacks are all plain: each event's callback looked up here."""
        handlers = self.handlers
        completed = handlers.get(BatchCompleted)
        on_completed = None if completed is None else completed[0]
        values = self.values
        new, set_values = object.__new__, _set_values  # of_succeeded_values, inline: the per-event path
        at = 0  # where the next SUCCEEDED's values start: the loop only appends to values meanwhile
        failed = 0
        # Each event is let go of once delivered (and the list emptied at the end): a run's events,
        # which keep their batches alive, do not stay alive until the next run (see LINGER_EVENTS).
        for n, event in enumerate(events):
            if control.abandoned:
                break
            if event is SUCCEEDED:  # (a stand-in keeps nothing alive: left in the list)
                # Built here, right before its callback: unless the listener keeps it, it dies by
                # refcount after the call, never having been seen by a collection.
                end = at + SUCCEEDED_WIDTH
                event = new(BatchCompleted)
                set_values(event, "values", values[at:end])
                at = end
                callback = on_completed
            else:
                events[n] = None
                entry = handlers.get(type(event))
                callback = None if entry is None else entry[0]
            try:
                result = None if callback is None else callback(event)
                if result is not None and inspect.isawaitable(result):
                    anyio.from_thread.run(_awaited, result, token=self.token)
            except Exception:
                failed += 1
                self.run_failed = failed
                self._log_failure(event)
            self.run_done += 1
        self.values_taken = at
        event = None
        events.clear()
        return failed

    def _log_failure(self, event: object) -> None:
        # Inside the except block: the line carries the listener's traceback.
        self.log.exception("listener raised; it stays registered", listener=self.name, event_type=type(event).__name__)

    def __repr__(self) -> str:
        return f"<ListenerQueue {self.name} [{self.accepted - self.processed} queued, {self.dropped} dropped]>"


def _take_run(queue: Mailbox[StreamingEvent], handlers: _Handlers, callback: Callable[[Any], Any],
              event: object) -> tuple[_Run, Any]:
    """``event`` and the events queued behind it up to one for an async callback (at most ``_YIELD_EVERY``, only those
    queued now: one trip); and the next event (or _EMPTY)."""
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
