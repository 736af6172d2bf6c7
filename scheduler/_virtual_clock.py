"""VirtualClock: a manual clock that jumps to the next deadline whenever no task can run.

The engine of the scheduling-delay simulator: the real JobGenerator, JobScheduler and listener bus
run on it, and a simulated day takes as long as the CPU work it needs. It plays the role of trio's
``MockClock(autojump_threshold=0)`` for the runtime's own millisecond clock, on asyncio and trio.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import weakref
from typing import Any, Awaitable, Callable, Coroutine, Iterator

import anyio
import anyio.abc
import anyio.lowlevel
import sniffio

from ._clock import ManualClock
from ._loop_probe import ReadyProbe, ready_probe
from ._streams import _waiter_and_loop
from ._time import Duration, Time

__all__ = ["TimerHandle", "VirtualClock"]

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

    "No task is ready to run" is decided by the event loop itself: on trio by
    ``trio.testing.wait_all_tasks_blocked()``; on an asyncio loop that advertises a
    :class:`~scheduler.ReadyProbe` (the loops of ``streaming.simulation``) by yielding and then
    asking the probe whether anything but driver wake-ups is ready, without polling or real
    sleeps. On any other asyncio loop (stock, uvloop) it falls back to anyio's public
    ``wait_all_tasks_blocked``, which is correct but polls every 0.1 s of real time while tasks
    are busy. A task waiting on real I/O, a real timer or a worker thread counts as blocked: it
    does not hold virtual time back.

    Determinism: given the same tasks, the same sequence of jumps happens. On asyncio, whose
    scheduling is FIFO, the order of everything at one virtual instant is reproducible too; trio
    deliberately shuffles tasks made runnable together, so there only the instants (and so every
    time the engine records) are reproducible, not the order of tasks within one instant.

    Manual :meth:`advance` and :meth:`set_time` still work (time never goes back).

    A program that owns its event loop can skip the driver task altogether: run it on
    ``streaming.simulation.virtual_time_event_loop(clock)``, an asyncio loop that jumps this
    clock itself whenever it would otherwise wait. That is what ``streaming.simulation.simulate``
    does on asyncio.
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
        self._holds: list[tuple[Callable[[], object], Callable[[], Awaitable[object]]]] = []

    @contextlib.contextmanager
    def held_while(self, busy: Callable[[], object], settle: Callable[[], Awaitable[object]]) -> Iterator[None]:
        """Within the block, the clock does not jump while ``busy()`` is true.

        For work of the current instant that no task of the loop stands for: a listener's callback on its own thread,
        or awaiting real I/O, counts as blocked, and without a hold the clock would jump past it while the engine
        waits for it. ``busy`` is asked whenever the loop is idle (keep it cheap). While it is true a virtual-time
        loop waits for real wake-ups (the work's own), and the :meth:`run` task awaits ``settle()``, which returns
        once the work ``busy`` saw is done.
        """
        hold = (busy, settle)
        self._holds.append(hold)
        try:
            yield
        finally:
            self._holds.remove(hold)

    @property
    def held(self) -> bool:
        """Whether a :meth:`held_while` hold keeps the clock from jumping now."""
        return any(busy() for busy, _ in self._holds)

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep_until`, plus pending :meth:`call_at` timers."""
        return self._parked_count

    @property
    def driven(self) -> bool:
        """Whether something moves this clock by itself: :meth:`run`, or a ``virtual_time_event_loop`` loop."""
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
        self._changed.notify()

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
        self._changed.notify()
        try:
            await waiter
        except BaseException:
            if not waiter.done() or waiter.cancelled():  # cancelled before its deadline
                waiter.cancel()
                self._parked_count -= 1
                self._changed.notify()
            raise
        return self._now_time

    def call_at(self, deadline: Time | int, callback: Callable[[], object]) -> TimerHandle:
        """Call ``callback()`` when the clock reaches ``deadline`` (a Time or integer milliseconds).

        The callback runs inside the jump that reaches its deadline, before any task woken at
        the same instant resumes, so it can model work that needs no task of its own (the
        simulator's task slots use it). Timers and sleepers due at one instant fire in the
        order they were registered. A deadline already reached fires at the next jump, or at
        once when the clock is next set. The callback must not raise and must not await; it
        may register further timers.

        Returns:
            A handle whose ``cancel()`` withdraws the timer if it has not fired.
        """
        ms = deadline.milliseconds if isinstance(deadline, Time) else int(deadline)
        timer = TimerHandle(callback, self)
        _heappush(self._sleep_heap, (ms, next(self._seq), timer))
        self._parked_count += 1
        self._changed.notify()
        return timer

    def jump(self) -> bool:
        """Jump to the earliest live deadline and wake the sleepers due then; False if nobody sleeps or a hold keeps it."""
        if self._holds and self.held:
            return False
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

    def claim_driver(self) -> None:
        """Record that something now moves this clock by itself (:meth:`run`, or a virtual-time event loop).

        Raises:
            RuntimeError: something drives it already.
        """
        if self._driven:
            raise RuntimeError("this VirtualClock is already being driven; start VirtualClock.run once, or make "
                               "one event loop per clock")
        self._driven = True

    def release_driver(self) -> None:
        """Record that the driver stopped (the clock stays where it is)."""
        self._driven = False

    async def wait_for_sleepers(self, count: int = 1) -> None:
        """Wait until at least ``count`` tasks are parked in :meth:`sleep_until`."""
        while self._parked_count < count:
            await self._changed.wait()

    async def run(
        self,
        *,
        probe: ReadyProbe | None = None,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Drive the clock until cancelled: wait until no task can run, then jump to the next deadline.

        Reports ready to ``task_group.start`` before the first jump. If every task is blocked and
        none sleeps on this clock, it waits for a sleeper rather than spinning. Cancel it (for
        example by cancelling its task group) to stop; cancellation leaves the clock where it is.

        Args:
            probe: how to ask the running asyncio loop whether anything else is ready, when the
                loop does not advertise a probe itself (``streaming.simulation.running_loop_probe``
                gives one for CPython's stock loop). Without either, asyncio falls back to anyio's
                polling ``wait_all_tasks_blocked``. Ignored on trio.

        Raises:
            RuntimeError: the clock is already being driven.
        """
        self.claim_driver()
        driver = _register_driver()
        try:
            wait_idle = _idle_waiter(probe)
            task_status.started()
            while True:
                await wait_idle()
                holding = [settle for busy, settle in self._holds if busy()]
                if holding:
                    for settle in holding:  # outside the loop's tasks: wait for it, then look again
                        await settle()
                    continue
                deadline = self.next_deadline
                if deadline is None:
                    # Everything is blocked and nobody sleeps on this clock: nothing can happen
                    # until some task (woken by something outside) parks on it.
                    await self.wait_for_sleepers(1)
                    continue
                self.jumps += 1
                self.set_time(deadline)
        finally:
            self.release_driver()
            if driver is not None:
                _asyncio_drivers.discard(driver)

    def __repr__(self) -> str:
        return f"<VirtualClock [{self.now().milliseconds} ms | {self.sleepers} sleepers | {self.jumps} jumps]>"


class TimerHandle:
    """A pending :meth:`VirtualClock.call_at` timer: ``cancel()`` withdraws it."""

    __slots__ = ("_callback", "_clock", "_done")

    def __init__(self, callback: Callable[[], object], clock: VirtualClock) -> None:
        self._callback: Callable[[], object] | None = callback
        self._clock = clock
        self._done = False

    def done(self) -> bool:
        """Whether it fired or was cancelled."""
        return self._done

    def cancelled(self) -> bool:
        """Whether it was cancelled before firing."""
        return self._done and self._callback is not None

    def cancel(self) -> None:
        """Withdraw the timer; nothing happens if it already fired or was cancelled."""
        if not self._done:
            self._done = True
            self._clock._parked_count -= 1

    def set_result(self, _: object) -> None:
        """Fire: the clock calls this when the deadline is reached, in place of waking a sleeper."""
        callback, self._callback = self._callback, None
        self._done = True
        if callback is not None:
            callback()


def _register_driver() -> Any:
    """On asyncio, record the calling task as a driver and return it; else ``None``."""
    if sniffio.current_async_library() != "asyncio":
        return None
    task = asyncio.current_task()
    if task is not None:
        _asyncio_drivers.add(task)
    return task


def _idle_waiter(given: ReadyProbe | None) -> Callable[[], Awaitable[None]]:
    """The current backend's "wait until no other task is ready to run"."""
    library = sniffio.current_async_library()
    if library == "trio":
        import trio.testing  # only reached on trio, an optional dependency

        return trio.testing.wait_all_tasks_blocked
    probe = ready_probe() or given
    if probe is not None:
        return _probed_idle_waiter(probe)
    return anyio.wait_all_tasks_blocked


def _probed_idle_waiter(probe: ReadyProbe) -> Callable[[], Awaitable[None]]:
    # Why this is exact: a checkpoint puts this task's next step at the back of the ready queue.
    # When that step runs, every callback queued before it has run; whatever those callbacks made
    # runnable was queued behind it. So nothing ready at that point means no task can run until
    # something outside the loop (I/O, a timer, a thread) happens. Each wait costs one loop
    # iteration per round of work the other tasks still have. Other VirtualClock drivers waiting
    # the same way do not count as work.
    drivers = _asyncio_drivers
    checkpoint = anyio.lowlevel.checkpoint

    async def wait_idle() -> None:
        while True:
            await checkpoint()
            if not probe.others_ready(drivers):
                return

    return wait_idle
