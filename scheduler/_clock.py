"""Clocks: the one place that knows what time it is (Spark's ``Clock`` / ``ManualClock``).

Every component takes a :class:`Clock` by injection. :class:`SystemClock` follows the wall clock;
:class:`ManualClock` moves only when a test tells it to, and lets the test wait until the engine's
tasks are parked on it before moving it (Spark's SPARK-16002 race, designed out).
"""

from __future__ import annotations

import heapq
import itertools
import time as _time
from typing import Awaitable, Callable, Protocol, runtime_checkable

import anyio
import anyio.lowlevel

from ._change_signal import ChangeSignal
from ._logging import library_logger
from ._time import Duration, Time

__all__ = ["Clock", "ManualClock", "SystemClock", "run_with_timeout"]


@runtime_checkable
class Clock(Protocol):
    """What the runtime needs from a clock.

    Implementations must be monotonic enough for scheduling: ``sleep_until(t)`` returns only once
    ``now() >= t``.
    """

    def now(self) -> Time:
        """The current time."""
        ...

    async def sleep_until(self, deadline: Time) -> Time:
        """Wait until ``now() >= deadline`` and return ``now()``.

        Always a checkpoint (it yields to the event loop even when the deadline has passed), and
        cancellable.
        """
        ...

    async def sleep(self, duration: Duration) -> Time:
        """Wait for ``duration`` from now and return the time on waking."""
        ...


_LONGEST_SLEEP_S = 1.0
"""The longest a SystemClock sleeps before it reads the wall clock again."""


class SystemClock:
    """The wall clock, in milliseconds since the Unix epoch, watching itself for steps.

    Batch times are wall-clock times (Spark's ``SystemClock``), so a step of the wall clock (an
    operator or NTP setting it, a VM resumed) moves them. The grid is kept either way, as in
    Spark: after a step forwards the timer fires every tick it missed, in order; after a step
    backwards it waits until the wall clock reaches its next tick again. What Spark does not do
    is say so: this clock compares the wall clock with the monotonic one at every reading and
    logs each step larger than ``step_threshold`` as a warning (``wall clock stepped``, with its
    direction and size), and counts them in :attr:`steps`. A sleep until a wall time re-reads the
    wall clock at least every second (the event loop sleeps on the monotonic clock, which a
    suspended machine does not advance), so a step forwards is seen within a second, however long
    the batch interval; a sleep for a duration (timeouts, a stop's bounds) is measured on the
    monotonic clock, so a step of the wall clock neither stretches nor cuts it.

    Args:
        step_threshold: the smallest change of (wall - monotonic) between two readings that
            counts as a step (default 100 ms; NTP's slewing changes it by well under 1 ms a second).
        wall_ns: the wall clock in nanoseconds since the epoch (default :func:`time.time_ns`).
        monotonic_ns: a monotonic clock in nanoseconds (default :func:`time.monotonic_ns`).
        sleep: sleeps for a number of seconds (default :func:`anyio.sleep`).
    """

    def __init__(
        self,
        *,
        step_threshold: Duration | None = None,
        wall_ns: Callable[[], int] = _time.time_ns,
        monotonic_ns: Callable[[], int] = _time.monotonic_ns,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        """Create a clock; the defaults are the real clocks."""
        threshold = step_threshold.milliseconds if step_threshold is not None else 100
        if threshold <= 0:
            raise ValueError(f"step_threshold must be positive, got {step_threshold!r}")
        self._threshold_ns = threshold * 1_000_000
        self._wall_ns = wall_ns
        self._monotonic_ns = monotonic_ns
        self._sleep = sleep
        self._offset_ns = wall_ns() - monotonic_ns()
        self.steps = 0
        """How many steps of the wall clock this clock has seen."""
        self._log = library_logger("aiodstream.scheduler", component="SystemClock")

    def now(self) -> Time:
        """The wall-clock time (a step since the previous reading is logged first)."""
        wall = self._wall_ns()
        offset = wall - self._monotonic_ns()
        change = offset - self._offset_ns
        self._offset_ns = offset
        if change > self._threshold_ns or change < -self._threshold_ns:
            self._stepped(change // 1_000_000, wall // 1_000_000)
        return Time(wall // 1_000_000)

    def _stepped(self, change_ms: int, now_ms: int) -> None:
        self.steps += 1
        self._log.warning(
            "wall clock stepped",
            direction="forwards" if change_ms > 0 else "backwards",
            step_ms=abs(change_ms),
            now=now_ms,
            consequence="a context's timer fires the ticks it skipped, in order (a continuous query's opens one epoch)"
            if change_ms > 0
            else "the timer waits until the wall clock reaches its next tick again",
        )

    async def sleep_until(self, deadline: Time) -> Time:
        """Sleep until the wall clock reaches ``deadline`` (re-checks after early wake-ups)."""
        slept = False
        while True:
            now = self.now()
            remaining = deadline.milliseconds - now.milliseconds
            if remaining <= 0:
                # A deadline already passed still yields; after a sleep (which yielded) a second
                # yield would only cost the timer a pass of the event loop on every tick.
                if not slept:
                    await anyio.lowlevel.checkpoint()
                return now
            # The event loop sleeps on a monotonic clock; re-reading the wall clock afterwards
            # absorbs the difference instead of firing early, and re-reading it at least every
            # second sees a step forwards (a resumed machine) in time.
            await self._sleep(min(remaining / 1000, _LONGEST_SLEEP_S))
            slept = True

    async def sleep(self, duration: Duration) -> Time:
        """Sleep for ``duration`` of elapsed (monotonic) time: a step of the wall clock meanwhile does not change it."""
        deadline = self._monotonic_ns() + duration.milliseconds * 1_000_000
        remaining = deadline - self._monotonic_ns()
        if remaining <= 0:
            await anyio.lowlevel.checkpoint()  # still a checkpoint, as the protocol says
        while remaining > 0:
            await self._sleep(remaining / 1e9)
            remaining = deadline - self._monotonic_ns()
        return self.now()

    def __repr__(self) -> str:
        return "<SystemClock>"


class _Sleeper:
    __slots__ = ("deadline", "event")

    def __init__(self, deadline: int, event: anyio.Event) -> None:
        self.deadline = deadline
        self.event = event


class ManualClock:
    """A clock that moves only when told to, for deterministic tests.

    Typical use::

        clock = ManualClock()
        ...
        await clock.wait_for_sleepers(1)   # the timer is parked on its next tick
        clock.advance(Seconds(1))          # wake it

    ``advance`` and ``set_time`` are synchronous: they wake every sleeper whose deadline has been
    reached before returning, so the woken tasks run at the caller's next checkpoint.
    """

    def __init__(self, start: Time | int = 0) -> None:
        """Create a clock reading ``start`` (a Time or integer milliseconds)."""
        self._now = start.milliseconds if isinstance(start, Time) else Time(start).milliseconds
        self._heap: list[tuple[int, int, _Sleeper]] = []
        self._parked: set[_Sleeper] = set()
        self._seq = itertools.count()
        self._changed = ChangeSignal()

    def now(self) -> Time:
        """The current manual time."""
        return Time(self._now)

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep_until`."""
        return len(self._parked)

    @property
    def next_deadline(self) -> Time | None:
        """The earliest deadline any parked task waits for, or ``None``."""
        self._prune()
        return Time(self._heap[0][0]) if self._heap else None

    def advance(self, duration: Duration | int) -> Time:
        """Move the clock forward by ``duration`` (a Duration or integer milliseconds)."""
        ms = duration.milliseconds if isinstance(duration, Duration) else Duration(duration).milliseconds
        if ms < 0:
            raise ValueError(f"a manual clock only moves forward; got advance({ms} ms)")
        return self.set_time(Time(self._now + ms))

    def set_time(self, new_time: Time) -> Time:
        """Set the clock to ``new_time``, which must not be in the past."""
        if new_time.milliseconds < self._now:
            raise ValueError(
                f"a manual clock only moves forward; it reads {self._now} ms, got set_time({new_time})"
            )
        self._now = new_time.milliseconds
        self._wake_due()
        return new_time

    def _wake_due(self) -> None:
        heap = self._heap
        while heap and heap[0][0] <= self._now:
            _, _, sleeper = heapq.heappop(heap)
            if sleeper in self._parked:
                self._parked.discard(sleeper)
                sleeper.event.set()
        self._changed.notify()

    def _prune(self) -> None:
        while self._heap and self._heap[0][2] not in self._parked:
            heapq.heappop(self._heap)

    async def sleep_until(self, deadline: Time) -> Time:
        """Park until the clock reaches ``deadline``; a checkpoint even if it already has."""
        if deadline.milliseconds <= self._now:
            await anyio.lowlevel.checkpoint()
            return Time(self._now)
        sleeper = _Sleeper(deadline.milliseconds, anyio.Event())
        heapq.heappush(self._heap, (sleeper.deadline, next(self._seq), sleeper))
        self._parked.add(sleeper)
        self._changed.notify()
        try:
            await sleeper.event.wait()
        finally:
            if sleeper in self._parked:  # cancelled before its deadline
                self._parked.discard(sleeper)
                self._changed.notify()
        return Time(self._now)

    async def sleep(self, duration: Duration) -> Time:
        """Park for ``duration`` of manual time."""
        return await self.sleep_until(Time(self._now + duration.milliseconds))

    async def wait_for_sleepers(self, count: int = 1) -> None:
        """Wait until at least ``count`` tasks are parked in :meth:`sleep_until`.

        Call this before :meth:`advance` so that the advance is seen by the task it is meant for.
        """
        while len(self._parked) < count:
            await self._changed.wait()

    def __repr__(self) -> str:
        return f"<ManualClock [{self._now} ms | {len(self._parked)} sleepers]>"


async def run_with_timeout(clock: Clock, timeout: Duration | None, fn: Callable[[], Awaitable[object]]) -> bool:
    """Run ``fn()`` and return True, or cancel it once ``timeout`` passes on ``clock`` and return False.

    ``anyio.fail_after`` measures the event loop's monotonic time, which a manual clock does not
    move; deadlines in the runtime are on the injected clock, so they need this instead.
    ``timeout=None`` waits without a bound. An exception from ``fn`` propagates unchanged.
    """
    if timeout is None:
        await fn()
        return True
    finished = False
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:

        async def guard() -> None:
            await clock.sleep(timeout)
            tg.cancel_scope.cancel()

        tg.start_soon(guard)
        try:
            await fn()
            finished = True
        except Exception as exc:
            # Raised again outside the task group, which would wrap it in an ExceptionGroup:
            # the caller gets fn's own error, as with timeout=None.
            failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return finished
