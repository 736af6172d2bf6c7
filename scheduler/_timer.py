"""RecurringTimer: fires a callback on every point of a fixed grid (Spark's ``RecurringTimer``).

The callback always receives the *scheduled* grid time, never the wake-up time. A timer that falls
behind (a slow loop, a manual clock jumping ahead) fires every missed tick in order: ticks are
never skipped and the grid never drifts. A timer made with ``skip_missed`` (a continuous query's
epochs, which have no batch grid, as Spark's ``ProcessingTimeExecutor``) fires once when it finds
itself behind and goes on from the next grid point after now.
"""

from __future__ import annotations

from typing import Callable

import anyio
import anyio.abc
import anyio.lowlevel

from ._clock import Clock
from ._errors import InvalidDurationError, StreamingStateError
from ._logging import library_logger
from ._time import Duration, Time

__all__ = ["RecurringTimer"]

# How many missed ticks a timer that is behind fires between two yields to the event loop.
_YIELD_EVERY_BEHIND = 16


class RecurringTimer:
    """Calls ``callback(t)`` for ``t = start, start + period, ...`` as the clock reaches each ``t``.

    The callback is synchronous and should only hand the time on (the JobGenerator's posts a
    message); it runs on the timer's task. Run the timer with ``await task_group.start(timer.run)``
    and stop it with :meth:`stop`.
    """

    def __init__(self, clock: Clock, period: Duration, callback: Callable[[Time], None], name: str, *,
                 skip_missed: bool = False) -> None:
        """Create a stopped timer on ``clock`` firing every ``period`` (once for all the ticks it missed if ``skip_missed``)."""
        if period.milliseconds <= 0:
            raise InvalidDurationError(f"timer period must be positive, got {period}")
        self._clock = clock
        self._period = period.milliseconds
        self._callback = callback
        self._skip_missed = skip_missed
        self.name = name
        self._next: int | None = None
        self._last: int | None = None
        self._stop_after_tick = False
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        self._log = library_logger("aiodstream.scheduler", component="RecurringTimer", timer=name)

    @property
    def period(self) -> Duration:
        """The grid spacing."""
        return Duration(self._period)

    @property
    def last_tick(self) -> Time | None:
        """The last time whose callback completed, or ``None`` before the first tick."""
        return None if self._last is None else Time(self._last)

    @property
    def next_tick(self) -> Time | None:
        """The time the timer fires next, or ``None`` when not running."""
        return None if self._next is None or self._done is None or self._done.is_set() else Time(self._next)

    def start_time(self) -> Time:
        """The next grid point strictly after now: ``(floor(now / period) + 1) * period``."""
        now = self._clock.now().milliseconds
        return Time((now // self._period + 1) * self._period)

    def restart_time(self, original_start: Time) -> Time:
        """The next point strictly after now on the grid anchored at ``original_start``."""
        now = self._clock.now().milliseconds
        origin = original_start.milliseconds
        return Time(((now - origin) // self._period + 1) * self._period + origin)

    async def run(self, start: Time | None = None, *, task_status: anyio.abc.TaskStatus[Time] = anyio.TASK_STATUS_IGNORED) -> None:
        """Fire ticks until stopped; reports the first tick time to ``task_group.start``.

        Cancellation ends the timer at once (no further tick).
        """
        if self._done is not None:
            raise StreamingStateError(f"timer {self.name!r} has already been started")
        self._done = anyio.Event()
        first = self.start_time() if start is None else start
        self._next = first.milliseconds
        self._log.debug("timer started", first_tick=self._next, period_ms=self._period)
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                task_status.started(first)
                clock = self._clock
                behind = 0
                while True:
                    nxt = self._next
                    tick = Time(nxt)
                    if clock.now().milliseconds < nxt:
                        behind = 0
                        await clock.sleep_until(tick)
                    else:
                        # Behind the grid: fire the missed ticks back to back, yielding now and
                        # then so the loop's other tasks (and the host's) keep running.
                        behind += 1
                        if behind % _YIELD_EVERY_BEHIND == 0:
                            await anyio.lowlevel.checkpoint()
                    self._callback(tick)
                    self._last = nxt
                    self._next = nxt + self._period
                    if self._skip_missed:
                        now = clock.now().milliseconds
                        if now >= self._next:  # the ticks up to now are missed: none of them fires
                            self._next += (now - self._next) // self._period * self._period + self._period
                    if self._stop_after_tick:
                        break
        finally:
            self._done.set()
            self._log.debug("timer stopped", last_tick=self._last)

    async def stop(self, *, one_more_tick: bool) -> Time | None:
        """Stop the timer and wait until it has stopped; return :attr:`last_tick`.

        Args:
            one_more_tick: if True (the graceful case), the tick the timer is waiting for still
                fires at its scheduled time, then the timer stops; if False, it stops now.
        """
        if self._done is None:
            return self.last_tick
        if one_more_tick:
            self._stop_after_tick = True
        else:
            self.stop_now()
        await self._done.wait()
        return self.last_tick

    def stop_now(self) -> None:
        """Stop now without waiting (a tick a graceful :meth:`stop` waits for does not fire; that stop returns)."""
        if self._scope is not None:
            self._scope.cancel()

    def __repr__(self) -> str:
        state = "idle" if self._done is None else ("stopped" if self._done.is_set() else "running")
        return f"<RecurringTimer {self.name!r} [{state} | period {self._period} ms | next {self._next} | last {self._last}]>"
