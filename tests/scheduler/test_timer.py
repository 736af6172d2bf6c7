"""RecurringTimer: grid alignment, scheduled tick times, catching up without skips, stopping."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import (
    Duration,
    InvalidDurationError,
    ManualClock,
    Milliseconds,
    RecurringTimer,
    StreamingStateError,
    Time,
)
from tests.anyio_support import BACKENDS, raises_exactly, run, settle
from tests.support import advance_until_parked, capture_events, start_parked


class Ticks(list[Time]):
    """The callback: records every time it is called with."""

    def __call__(self, time: Time) -> None:
        self.append(time)

    @property
    def ms(self) -> list[int]:
        return [t.milliseconds for t in self]


def make_timer(clock: ManualClock, period_ms: int, name: str = "test") -> tuple[RecurringTimer, Ticks]:
    ticks = Ticks()
    return RecurringTimer(clock, Milliseconds(period_ms), ticks, name), ticks


# -- construction and grid arithmetic --


@pytest.mark.parametrize(
    ("period", "message"),
    [(0, "timer period must be positive, got 0 ms"), (-5, "timer period must be positive, got -5 ms")],
)
def test_period_must_be_positive(period: int, message: str) -> None:
    """A zero or negative period is refused with the period in the message."""
    with raises_exactly(InvalidDurationError, message):
        RecurringTimer(ManualClock(), Duration(period), lambda t: None, "bad")


def test_start_time_examples_from_spark() -> None:
    """start_time is the next multiple of the period strictly after now (now=1000, period=1000 gives 2000)."""
    assert make_timer(ManualClock(1000), 1000)[0].start_time() == Time(2000)
    assert make_timer(ManualClock(999), 1000)[0].start_time() == Time(1000)
    assert make_timer(ManualClock(0), 1000)[0].start_time() == Time(1000)
    assert make_timer(ManualClock(-1), 1000)[0].start_time() == Time(0)


@given(st.integers(-(10**13), 10**13), st.integers(1, 10**7))
def test_start_time_is_the_smallest_multiple_of_the_period_strictly_after_now(now: int, period: int) -> None:
    """For any now and period, start_time is a multiple of the period, > now, and the one before it is <= now."""
    start = make_timer(ManualClock(now), period)[0].start_time().milliseconds
    assert start % period == 0
    assert start > now
    assert start - period <= now


@given(st.integers(-(10**9), 10**9), st.integers(-(10**9), 10**9), st.integers(1, 10**6))
def test_restart_time_is_the_next_point_after_now_on_the_original_grid(now: int, origin: int, period: int) -> None:
    """restart_time(origin) is on the grid origin + k*period, strictly after now, the earliest such point."""
    restart = make_timer(ManualClock(now), period)[0].restart_time(Time(origin)).milliseconds
    assert (restart - origin) % period == 0
    assert restart > now
    assert restart - period <= now


def test_restart_time_example() -> None:
    """Restarting at 2350 ms on a 1000 ms grid anchored at 500 ms resumes at 2500 ms."""
    assert make_timer(ManualClock(2350), 1000)[0].restart_time(Time(500)) == Time(2500)
    assert make_timer(ManualClock(2500), 1000)[0].restart_time(Time(500)) == Time(3500)


def test_a_fresh_timer_is_idle() -> None:
    """Before run, there is no next or last tick, the period is reported, and repr says idle."""
    timer, _ = make_timer(ManualClock(), 100, "idle-one")
    assert timer.period == Milliseconds(100)
    assert timer.last_tick is None and timer.next_tick is None
    assert repr(timer) == "<RecurringTimer 'idle-one' [idle | period 100 ms | next None | last None]>"


# -- running --


@pytest.mark.anyio
async def test_run_reports_the_first_tick_and_fires_on_the_grid() -> None:
    """tg.start(timer.run) reports the first tick; each tick fires when the clock reaches it, not before."""
    clock = ManualClock(1234)
    timer, ticks = make_timer(clock, 1000)
    async with anyio.create_task_group() as tg:
        first = await tg.start(timer.run)
        assert first == Time(2000) and timer.next_tick == Time(2000)
        await clock.wait_for_sleepers(1)
        await advance_until_parked(clock, 765)  # 1999 ms
        assert ticks == []
        await advance_until_parked(clock, 1)  # 2000 ms
        assert ticks.ms == [2000]
        assert timer.last_tick == Time(2000) and timer.next_tick == Time(3000)
        await advance_until_parked(clock, 1000)
        assert ticks.ms == [2000, 3000]
        await timer.stop(one_more_tick=False)


@pytest.mark.anyio
async def test_callbacks_get_the_scheduled_time_not_the_wake_up_time(clock: ManualClock) -> None:
    """Woken late (the clock jumped to 1070 ms), the callback still receives the grid time 1000 ms."""
    timer, ticks = make_timer(clock, 1000)
    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock)
        await advance_until_parked(clock, 1070)
        assert ticks.ms == [1000]
        await timer.stop(one_more_tick=False)


@pytest.mark.anyio
async def test_spark_basic_and_falling_behind(clock: ManualClock) -> None:
    """As in Spark's RecurringTimerSuite: start(0) fires 0, then 100, 200; a 200 ms jump fires 300 and 400 back to back."""
    timer, ticks = make_timer(clock, 100)
    async with anyio.create_task_group() as tg:
        assert await start_parked(tg, timer, clock, Time(0)) == Time(0)
        assert ticks.ms == [0]
        await advance_until_parked(clock, 100)
        await advance_until_parked(clock, 100)
        assert ticks.ms == [0, 100, 200]
        await advance_until_parked(clock, 200)
        assert ticks.ms == [0, 100, 200, 300, 400]
        assert await timer.stop(one_more_tick=False) == Time(400)


@pytest.mark.anyio
async def test_a_start_in_the_past_fires_every_missed_tick_in_order() -> None:
    """run(start) with start behind the clock fires every grid time up to now at once, then waits."""
    clock = ManualClock(350)
    timer, ticks = make_timer(clock, 100)
    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock, Time(0))
        assert ticks.ms == [0, 100, 200, 300]
        assert clock.next_deadline == Time(400) and timer.next_tick == Time(400)
        await timer.stop(one_more_tick=False)


@pytest.mark.anyio
async def test_a_timer_far_behind_fires_every_tick_without_skipping_or_drifting(clock: ManualClock) -> None:
    """A jump of 1000 periods fires 1000 callbacks, each grid time once, in order, and the grid stays put."""
    timer, ticks = make_timer(clock, 7)
    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock)
        await advance_until_parked(clock, 7000)
        assert ticks.ms == list(range(7, 7001, 7))
        await advance_until_parked(clock, 10)
        assert ticks.ms[-1] == 7007 and timer.next_tick == Time(7014)
        await timer.stop(one_more_tick=False)


@pytest.mark.anyio
async def test_a_timer_that_skips_missed_ticks_fires_once_after_a_jump_and_goes_on_from_the_next_point(
        clock: ManualClock) -> None:
    """skip_missed (a continuous query's epochs, as Spark's ProcessingTimeExecutor): a jump of 1000 periods fires one
    callback, with the tick that was due, and the next tick is the first grid point after now; on time, nothing changes."""
    ticks = Ticks()
    timer = RecurringTimer(clock, Milliseconds(7), ticks, "skipping", skip_missed=True)
    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock)
        await advance_until_parked(clock, 7)
        await advance_until_parked(clock, 7000)
        assert ticks.ms == [7, 14] and timer.next_tick == Time(7014)
        await advance_until_parked(clock, 7)
        await advance_until_parked(clock, 7)
        assert ticks.ms == [7, 14, 7014, 7021]
        await timer.stop(one_more_tick=False)


@pytest.mark.anyio
async def test_a_timer_catching_up_still_lets_other_tasks_run(clock: ManualClock) -> None:
    """While firing a long backlog, the timer yields to the event loop now and then."""
    spins = 0
    seen: list[int] = []

    def on_tick(time: Time) -> None:
        seen.append(spins)

    async def spinner() -> None:
        nonlocal spins
        while True:
            spins += 1
            await anyio.lowlevel.checkpoint()

    timer = RecurringTimer(clock, Milliseconds(1), on_tick, "busy")
    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock)
        tg.start_soon(spinner)
        await anyio.lowlevel.checkpoint()
        await advance_until_parked(clock, 500)
        assert len(seen) == 500
        assert seen[-1] > seen[0]  # the spinner ran while the backlog was being fired
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(-(10**6), 10**6),
    period=st.integers(1, 500),
    advances=st.lists(st.integers(0, 1500), max_size=6),
)
def test_ticks_are_exactly_the_grid_points_reached_for_any_advances(backend: str, start: int, period: int, advances: list[int]) -> None:
    """After any sequence of advances, the ticks fired are exactly the grid points <= now, in order, each once."""

    async def body() -> None:
        clock = ManualClock(start)
        timer, ticks = make_timer(clock, period)
        async with anyio.create_task_group() as tg:
            first = (await tg.start(timer.run)).milliseconds
            assert first % period == 0 and first - period <= start < first
            await clock.wait_for_sleepers(1)
            for step in advances:
                await advance_until_parked(clock, step)
                now = clock.now().milliseconds
                assert ticks.ms == list(range(first, now + 1, period))
                assert timer.next_tick == Time(now // period * period + period)
            await timer.stop(one_more_tick=False)

    run(backend, body)


# -- stopping --


@pytest.mark.anyio
async def test_stop_without_another_tick_stops_at_once(clock: ManualClock) -> None:
    """stop(one_more_tick=False) returns the last tick at once; run ends; no tick fires afterwards."""
    timer, ticks = make_timer(clock, 100)
    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock)
        await advance_until_parked(clock, 250)
        assert await timer.stop(one_more_tick=False) == Time(200)
        assert clock.sleepers == 0
        assert timer.next_tick is None
    clock.advance(1000)
    await settle()
    assert ticks.ms == [100, 200]
    assert timer.last_tick == Time(200)


@pytest.mark.anyio
async def test_stop_with_one_more_tick_waits_for_the_pending_tick_then_stops(clock: ManualClock) -> None:
    """stop(one_more_tick=True) lets the awaited tick fire at its scheduled time, returns it, and fires nothing after."""
    timer, ticks = make_timer(clock, 100)
    returned: list[Time | None] = []

    async def stopper() -> None:
        returned.append(await timer.stop(one_more_tick=True))

    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock)
        await advance_until_parked(clock, 100)
        tg.start_soon(stopper)
        await settle()
        assert returned == [] and ticks.ms == [100]  # stop waits for the tick at 200 ms
        clock.advance(99)
        await settle()
        assert returned == []
        clock.advance(1)
    assert returned == [Time(200)]
    assert ticks.ms == [100, 200]
    clock.advance(1000)
    await settle()
    assert ticks.ms == [100, 200]


@pytest.mark.anyio
async def test_a_graceful_stop_can_be_escalated_to_an_immediate_one(clock: ManualClock) -> None:
    """stop(one_more_tick=False) while a graceful stop waits ends the timer before the pending tick; both calls return."""
    timer, ticks = make_timer(clock, 100)
    returned: list[Time | None] = []

    async def stopper(one_more_tick: bool) -> None:
        returned.append(await timer.stop(one_more_tick=one_more_tick))

    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock)
        await advance_until_parked(clock, 100)
        tg.start_soon(stopper, True)
        await settle()
        tg.start_soon(stopper, False)
    assert returned == [Time(100), Time(100)]
    assert ticks.ms == [100]


@pytest.mark.anyio
async def test_stop_is_idempotent_and_safe_before_start(clock: ManualClock) -> None:
    """stop before run returns None; stopping a stopped timer returns its last tick again."""
    timer, _ = make_timer(clock, 100, "twice")
    assert await timer.stop(one_more_tick=True) is None
    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock)
        await advance_until_parked(clock, 100)
        assert await timer.stop(one_more_tick=False) == Time(100)
    assert await timer.stop(one_more_tick=False) == Time(100)
    assert await timer.stop(one_more_tick=True) == Time(100)
    assert repr(timer) == "<RecurringTimer 'twice' [stopped | period 100 ms | next 200 | last 100]>"


@pytest.mark.anyio
async def test_a_timer_runs_only_once(clock: ManualClock) -> None:
    """Running a timer a second time is refused, naming the timer."""
    timer, _ = make_timer(clock, 100, "once")
    async with anyio.create_task_group() as tg:
        await tg.start(timer.run)
        assert repr(timer) == "<RecurringTimer 'once' [running | period 100 ms | next 100 | last None]>"
        with raises_exactly(StreamingStateError, "timer 'once' has already been started"):
            await timer.run()
        await timer.stop(one_more_tick=False)
    with raises_exactly(StreamingStateError, "timer 'once' has already been started"):
        await timer.run()


@pytest.mark.anyio
async def test_cancelling_the_host_ends_the_timer_without_another_tick(clock: ManualClock) -> None:
    """Cancelling the task group that runs the timer ends it at once; stop then returns the last tick."""
    timer, ticks = make_timer(clock, 100)
    async with anyio.create_task_group() as tg:
        await start_parked(tg, timer, clock)
        await advance_until_parked(clock, 100)
        tg.cancel_scope.cancel()
    clock.advance(500)
    assert ticks.ms == [100]
    assert timer.next_tick is None
    assert await timer.stop(one_more_tick=True) == Time(100)


@pytest.mark.anyio
async def test_a_failing_callback_ends_the_timer_and_propagates_from_run() -> None:
    """An exception from the callback propagates out of run and leaves the timer stopped."""
    clock = ManualClock(100)

    def explode(time: Time) -> None:
        raise RuntimeError(f"tick {time}")

    timer = RecurringTimer(clock, Milliseconds(100), explode, "fragile")
    with raises_exactly(RuntimeError, "tick 0 ms"):
        await timer.run(Time(0))
    assert timer.last_tick is None and timer.next_tick is None
    assert await timer.stop(one_more_tick=True) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_start_and_stop_are_logged_with_the_timers_identity(backend: str, clock: ManualClock) -> None:
    """The timer logs its start (first tick, period) and stop (last tick), bound to its component and name."""

    async def body() -> None:
        timer, _ = make_timer(clock, 100, "JobGenerator")
        async with anyio.create_task_group() as tg:
            await start_parked(tg, timer, clock)
            await advance_until_parked(clock, 100)
            await timer.stop(one_more_tick=False)

    with capture_events() as logs:
        run(backend, body)
    assert logs == [
        {"event": "timer started", "log_level": "debug", "component": "RecurringTimer", "timer": "JobGenerator",
         "first_tick": 100, "period_ms": 100},
        {"event": "timer stopped", "log_level": "debug", "component": "RecurringTimer", "timer": "JobGenerator",
         "last_tick": 100},
    ]
