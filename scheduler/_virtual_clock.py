"""VirtualClock: a manual clock that jumps to the next deadline whenever no task can run.

The engine of the scheduling-delay simulator: the real JobGenerator, JobScheduler and listener bus
run on it, and a simulated day takes as long as the CPU work it needs. It plays the role of trio's
``MockClock(autojump_threshold=0)`` for the runtime's own millisecond clock, on asyncio and trio.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import heapq
import select
import selectors
import weakref
from asyncio import format_helpers
from typing import Any, Awaitable, Callable, Coroutine, Mapping

import anyio
import anyio.abc
import anyio.lowlevel
import sniffio

from ._clock import ManualClock
from ._streams import _waiter_and_loop
from ._time import Duration, Time

__all__ = ["VirtualClock"]

_heappush = heapq.heappush
_heappop = heapq.heappop

# asyncio tasks currently running VirtualClock.run, so that two drivers in one event loop do not
# each keep the other from ever seeing an idle loop.
_asyncio_drivers: weakref.WeakSet[Any] = weakref.WeakSet()


class VirtualClock(ManualClock):
    """A :class:`ManualClock` that advances itself: when every task is blocked, time jumps.

    Start the driver in the task group that runs the engine, and cancel it when done::

        clock = VirtualClock()
        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)
            ...                      # run the engine on ``clock``
            tg.cancel_scope.cancel()

    While :meth:`run` is active, whenever no task in the event loop is ready to run, the clock
    jumps to the earliest deadline any task sleeps until and wakes the tasks due then. Nothing
    else moves it, so the engine sees exactly the same sequence of instants as under a
    :class:`ManualClock` advanced by hand from deadline to deadline, only without the hand.

    "No task is ready to run" is decided by the event loop itself, without polling or real
    sleeps: on trio by ``trio.testing.wait_all_tasks_blocked()``; on CPython's asyncio loop by
    yielding and then checking that the loop's ready queue (``BaseEventLoop._ready``) holds
    nothing but driver wake-ups. An asyncio loop without that queue (uvloop) falls back to
    anyio's ``wait_all_tasks_blocked``, which is correct but polls every 0.1 s of real time. A
    task waiting on real I/O, a real timer or a worker thread counts as blocked: it does not hold
    virtual time back.

    Determinism: given the same tasks, the same sequence of jumps happens. On asyncio, whose
    scheduling is FIFO, the order of everything at one virtual instant is reproducible too; trio
    deliberately shuffles tasks made runnable together, so there only the instants (and so every
    time the engine records) are reproducible, not the order of tasks within one instant.

    Manual :meth:`advance` and :meth:`set_time` still work (time never goes back).

    A program that owns its event loop can skip the driver task altogether: run it on
    :meth:`new_event_loop`, an asyncio loop that jumps this clock itself whenever it would
    otherwise wait. That is what :func:`streaming.simulation.simulate` does on asyncio.
    """

    def __init__(self, start: Time | int = 0) -> None:
        """Create a clock reading ``start`` (a Time or integer milliseconds)."""
        super().__init__(start)
        self.jumps = 0
        self._driven = False
        # The simulator parks a task here for every job and every tick, so sleeping is the hot
        # path: on asyncio a sleeper waits on a bare loop future (a fifth of a simulation's CPU
        # time went to building anyio Events); elsewhere on an anyio Event. Heap entries are
        # (deadline, sequence, waiter); a waiter that is done (woken or cancelled) is skipped.
        self._sleep_heap: list[tuple[int, int, Any]] = []
        self._parked_count = 0
        # The engine reads the clock several times per instant: one Time per instant will do.
        self._now_time = Time(self._now)
        # The asyncio loop sleepers' waiters are made on, once a first one has found it: the
        # sleepers of one run are tasks of one event loop (see _streams._waiter_and_loop).
        self._loop: Any = None

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep_until`."""
        return self._parked_count

    @property
    def driven(self) -> bool:
        """Whether something moves this clock by itself: :meth:`run`, or a :meth:`new_event_loop` loop."""
        return self._driven

    @property
    def next_deadline(self) -> Time | None:
        """The earliest deadline any parked task waits for, or ``None``."""
        heap = self._sleep_heap
        while heap and heap[0][2].done():
            heapq.heappop(heap)
        return Time(heap[0][0]) if heap else None

    def _wake_due(self) -> None:
        heap = self._sleep_heap
        now = self._now
        if self._now_time.milliseconds != now:
            self._now_time = Time(now)
        while heap and heap[0][0] <= now:
            waiter = _heappop(heap)[2]
            if not waiter.done():
                self._parked_count -= 1
                waiter.set_result(None)
        if self._changed is not None:
            self._notify()

    def now(self) -> Time:
        """The current virtual time."""
        # Every move of the clock goes through _wake_due, which keeps this up to date.
        return self._now_time

    # sleep_until and sleep hand back _park's coroutine rather than awaiting it in one of their
    # own: a sleeping job is resumed through every frame of its await chain, and this is the
    # innermost part of the simulator's hot path.

    def sleep_until(self, deadline: Time) -> Coroutine[Any, Any, Time]:
        """Park until the clock reaches ``deadline``; a checkpoint even if it already has."""
        return self._park(deadline.milliseconds)

    def sleep(self, duration: Duration) -> Coroutine[Any, Any, Time]:
        """Park for ``duration`` of virtual time."""
        return self._park(self._now + duration.milliseconds)

    async def _park(self, ms: int) -> Time:
        if ms <= self._now:
            await anyio.lowlevel.checkpoint()
            return self._now_time
        waiter, self._loop = _waiter_and_loop(self._loop)
        _heappush(self._sleep_heap, (ms, next(self._seq), waiter))
        self._parked_count += 1
        if self._changed is not None:
            self._notify()
        try:
            await waiter
        except BaseException:
            if not waiter.done() or waiter.cancelled():  # cancelled before its deadline
                waiter.cancel()
                self._parked_count -= 1
                self._notify()
            raise
        return self._now_time

    def _jump(self) -> bool:
        """Jump to the earliest live deadline and wake the sleepers due then; False if nobody sleeps."""
        heap = self._sleep_heap
        while heap and heap[0][2].done():
            _heappop(heap)
        if not heap:
            return False
        self.jumps += 1
        # Live deadlines are always in the future: a sleeper due now was woken when time reached it.
        if heap[0][0] > self._now:
            self._now = heap[0][0]
        self._wake_due()
        return True

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        """A new asyncio event loop that drives this clock: no :meth:`run` task is needed.

        When the loop has no callback ready to run, it would wait for I/O or a timer; instead it
        first polls for I/O without waiting, and if there is none, jumps this clock to the next
        deadline, which makes the sleepers due then ready. Only when no task sleeps on the clock
        does it really wait (for I/O, a real timer or a worker thread). So a jump costs no loop
        iteration and no task switch, and the instants the engine sees are the same as under
        :meth:`run`. Pass it as anyio's ``loop_factory`` backend option, for example::

            anyio.run(main, backend="asyncio", backend_options={"loop_factory": clock.new_event_loop})

        The clock is then driven by that loop; :meth:`run` refuses to drive it too.
        """
        if self._driven:
            raise RuntimeError("this VirtualClock is already being driven; create one event loop per clock")
        self._driven = True
        return _VirtualTimeEventLoop(_VirtualTimeSelector(self))

    async def wait_for_sleepers(self, count: int = 1) -> None:
        """Wait until at least ``count`` tasks are parked in :meth:`sleep_until`."""
        while self._parked_count < count:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Drive the clock until cancelled: wait until no task can run, then jump to the next deadline.

        Reports ready to ``task_group.start`` before the first jump. If every task is blocked and
        none sleeps on this clock, it waits for a sleeper rather than spinning. Cancel it (for
        example by cancelling its task group) to stop; cancellation leaves the clock where it is.

        Raises:
            RuntimeError: the clock is already being driven.
        """
        if self._driven:
            raise RuntimeError("this VirtualClock is already being driven; start VirtualClock.run once")
        self._driven = True
        driver = _register_driver()
        try:
            wait_idle = _idle_waiter()
            task_status.started()
            while True:
                await wait_idle()
                deadline = self.next_deadline
                if deadline is None:
                    # Everything is blocked and nobody sleeps on this clock: nothing can happen
                    # until some task (woken by something outside) parks on it.
                    await self.wait_for_sleepers(1)
                    continue
                self.jumps += 1
                self.set_time(deadline)
        finally:
            self._driven = False
            if driver is not None:
                _asyncio_drivers.discard(driver)

    def __repr__(self) -> str:
        return f"<VirtualClock [{self.now().milliseconds} ms | {self.sleepers} sleepers | {self.jumps} jumps]>"


# A busy iteration of the self-driving loop skips the I/O poll, but not more than this many in a
# row: a task spinning on checkpoints until some I/O arrives must still see it.
_POLL_EVERY = 16

# call_soon builds its Handle field by field rather than through Handle.__init__ (whose debug
# check is one more call), and _run_once runs handles as Handle._run does: only while Handle has
# exactly the fields they know.
_HANDLE_FIELDS = ("_callback", "_args", "_cancelled", "_loop", "_source_traceback", "_repr", "_context")
_FIELD_BY_FIELD = set(getattr(asyncio.Handle, "__slots__", ())) - {"__weakref__"} == set(_HANDLE_FIELDS)
_new_object = object.__new__
_copy_context = contextvars.copy_context


class _VirtualTimeEventLoop(asyncio.SelectorEventLoop):
    """The :meth:`VirtualClock.new_event_loop` loop: stock asyncio with short cuts for a simulation's iterations.

    A simulation runs a handful of callbacks per loop iteration and several iterations per
    virtual instant, so what each iteration and each ``call_soon`` cost around the callbacks is a
    large share of the whole. The short cuts leave what runs, and in which order, unchanged:

    * an iteration that has callbacks ready and no timer pending runs exactly the callbacks the
      stock iteration would (those ready when it starts, in order), without the I/O poll and the
      timer bookkeeping; every :data:`_POLL_EVERY`-th busy iteration polls I/O first, as the
      stock one does;
    * an idle iteration (nothing ready, no timer pending) polls I/O without waiting and, if there
      is none, jumps the clock, then runs what became ready: what the stock iteration does
      through :class:`_VirtualTimeSelector`, without its timer bookkeeping; with nobody on the
      clock it is the stock iteration, which waits for real;
    * both run each callback as ``Handle._run`` does, inline (a callback that raises is
      reported to the exception handler in the same words);
    * every iteration with timers, debug mode or a stop request is the stock one;
    * ``call_soon`` queues the handle directly (in debug mode, the stock checks run).

    They rely on asyncio's private ``_run_once``, ``_process_events``, ``_ready``, ``_scheduled``
    and ``Handle`` fields, which the driver already relies on: long-standing internals of every
    CPython asyncio.
    """

    _busy_iterations = 0

    def __init__(self, selector: _VirtualTimeSelector) -> None:
        super().__init__(selector)
        self._io_ready = selector.io_ready
        self._jump = selector.clock._jump

    def call_soon(self, callback: Callable[..., object], *args: Any, context: Any = None) -> asyncio.Handle:  # type: ignore[override]
        if self._debug or not _FIELD_BY_FIELD:  # type: ignore[attr-defined]
            return super().call_soon(callback, *args, context=context)
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        # What Handle(callback, args, self, context) builds outside debug mode.
        handle = _new_object(asyncio.Handle)
        fields: Any = handle
        fields._callback = callback
        fields._args = args
        fields._cancelled = False
        fields._loop = self
        fields._source_traceback = None
        fields._repr = None
        fields._context = _copy_context() if context is None else context
        self._ready.append(handle)  # type: ignore[attr-defined]
        return handle

    def _run_once(self) -> None:
        if self._scheduled or self._stopping or self._debug or not _FIELD_BY_FIELD:  # type: ignore[attr-defined]
            self._busy_iterations = 0
            super()._run_once()  # type: ignore[misc]
            return
        ready = self._ready  # type: ignore[attr-defined]
        if ready:
            if self._busy_iterations < _POLL_EVERY:
                self._busy_iterations += 1
            else:
                self._busy_iterations = 0
                if self._io_ready():
                    self._process_events(self._selector.select(0))  # type: ignore[attr-defined]
        else:
            # Idle: pending I/O first, as after a real wait; else the jump, which makes the
            # sleepers due then ready; with nobody on the clock, the stock iteration waits.
            self._busy_iterations = 0
            if self._io_ready():
                self._process_events(self._selector.select(0))  # type: ignore[attr-defined]
            elif not self._jump():
                super()._run_once()  # type: ignore[misc]
                return
        # The callbacks ready now, in order, each as Handle._run runs it (inline: one call less
        # per task step).
        todo = len(ready)
        popleft = ready.popleft
        while todo:
            todo -= 1
            handle = popleft()
            if handle._cancelled:
                continue
            try:
                handle._context.run(handle._callback, *handle._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._callback_failed(handle, exc)

    def _callback_failed(self, handle: Any, exc: BaseException) -> None:
        # Handle._run's report of a callback that raised, word for word.
        callback = format_helpers._format_callback_source(handle._callback, handle._args)
        context = {"message": f"Exception in callback {callback}", "exception": exc, "handle": handle}
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)


class _VirtualTimeSelector(selectors.BaseSelector):
    """The real selector of a :meth:`VirtualClock.new_event_loop` loop, with idle time replaced by jumps.

    An asyncio loop asks its selector to wait (a timeout other than 0) exactly when it has no
    callback ready to run: every task is blocked. That is the moment the driver task of
    :meth:`VirtualClock.run` detects by polling the ready queue once per loop iteration; here
    the loop itself says so, once, with no extra task step.
    """

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._selector = selectors.DefaultSelector()
        # "Is any I/O ready now?", asked at every idle iteration. On Linux the epoll object
        # answers it in C (at most one event, no wait); elsewhere the selector's own select(0).
        epoll = getattr(self._selector, "_selector", None)
        if isinstance(self._selector, selectors.EpollSelector) and isinstance(epoll, select.epoll):
            self.io_ready: Callable[[], object] = functools.partial(epoll.poll, 0, 1)
        else:
            self.io_ready = functools.partial(self._selector.select, 0)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        selector = self._selector
        if timeout is not None and timeout <= 0:
            return selector.select(0)  # callbacks are ready: the usual non-blocking poll
        # Nothing is ready. Pending I/O goes first, as it would after a real wait; then the jump,
        # which makes the woken sleepers ready (so the loop must not wait this time); with
        # nobody on the clock, wait for real: only the outside world can start anything now.
        events = selector.select(0)
        if events or self.clock._jump():
            return events
        return selector.select(timeout)

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._selector.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._selector.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._selector.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._selector.get_map()

    def close(self) -> None:
        self._selector.close()


def _register_driver() -> Any:
    """On asyncio, record the calling task as a driver and return it; else ``None``."""
    if sniffio.current_async_library() != "asyncio":
        return None
    task = asyncio.current_task()
    if task is not None:
        _asyncio_drivers.add(task)
    return task


def _idle_waiter() -> Callable[[], Awaitable[None]]:
    """The current backend's "wait until no other task is ready to run"."""
    library = sniffio.current_async_library()
    if library == "trio":
        import trio.testing

        return trio.testing.wait_all_tasks_blocked
    if library == "asyncio":
        ready = getattr(asyncio.get_running_loop(), "_ready", None)
        if ready is not None:
            return _asyncio_idle_waiter(ready)
    return anyio.wait_all_tasks_blocked


def _asyncio_idle_waiter(ready: Any) -> Callable[[], Awaitable[None]]:
    # Why this is exact: a checkpoint puts this task's next step at the back of the ready queue.
    # When that step runs, every callback queued before it has run; whatever those callbacks made
    # runnable was queued behind it. So an empty queue at that point means no task can run until
    # something outside the loop (I/O, a timer, a thread) happens. Each wait costs one loop
    # iteration per round of work the other tasks still have.
    drivers = _asyncio_drivers
    checkpoint = anyio.lowlevel.checkpoint

    async def wait_idle() -> None:
        while True:
            await checkpoint()
            if not ready:
                return
            # Other VirtualClock drivers waiting the same way do not count as work.
            if len(drivers) > 1 and all(getattr(handle._callback, "__self__", None) in drivers for handle in ready):
                return

    return wait_idle
