"""SystemClock, ManualClock and run_with_timeout, on asyncio and trio; time moves only by hand."""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from scheduler import (
    Clock,
    Duration,
    InvalidDurationError,
    ManualClock,
    Milliseconds,
    RecurringTimer,
    Seconds,
    SystemClock,
    Time,
    run_with_timeout,
)
from tests.anyio_support import BACKENDS, raises_exactly, run, settle
from tests.support import capture_events

# -- SystemClock --


def test_system_clock_reads_the_wall_clock_in_whole_milliseconds() -> None:
    """SystemClock.now() is the Unix wall clock in integer milliseconds."""
    before = time.time_ns() // 1_000_000
    now = SystemClock().now()
    after = time.time_ns() // 1_000_000
    assert type(now.milliseconds) is int
    assert before <= now.milliseconds <= after


def test_clocks_satisfy_the_clock_protocol() -> None:
    """Both clocks are Clocks; SystemClock has a fixed repr."""
    assert isinstance(SystemClock(), Clock)
    assert isinstance(ManualClock(), Clock)
    assert repr(SystemClock()) == "<SystemClock>"


class FakeWallClock:
    """The wall clock, the monotonic clock and the loop's sleep of a SystemClock, moved by hand.

    ``sleep(s)`` advances both clocks by ``wake_fraction`` of what was asked, modelling a loop
    whose monotonic clock runs ahead of the wall clock (an early wake-up); ``step(ms)`` moves the
    wall clock alone, as an operator or NTP setting it would.
    """

    def __init__(self, now_ms: int, wake_fraction: float = 1.0) -> None:
        self.now_ms = now_ms
        self.mono_ms = 0
        self.wake_fraction = wake_fraction
        self.sleeps: list[float] = []

    def time_ns(self) -> int:
        return self.now_ms * 1_000_000

    def monotonic_ns(self) -> int:
        return self.mono_ms * 1_000_000

    def step(self, ms: int) -> None:
        self.now_ms += ms

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        ms = max(1, int(seconds * 1000 * self.wake_fraction))
        self.now_ms += ms
        self.mono_ms += ms
        await anyio.lowlevel.checkpoint()

    def clock(self, **options: Any) -> SystemClock:
        return SystemClock(wall_ns=self.time_ns, monotonic_ns=self.monotonic_ns, sleep=self.sleep, **options)


@pytest.fixture
def fake_wall() -> FakeWallClock:
    """Clocks and a sleep to inject into a SystemClock."""
    return FakeWallClock(10_000)


@pytest.mark.parametrize("backend", BACKENDS)
def test_system_clock_sleep_until_a_passed_deadline_returns_now_without_sleeping(backend: str, fake_wall: FakeWallClock) -> None:
    """sleep_until(past) returns the current wall time and never sleeps."""

    async def body() -> None:
        assert await fake_wall.clock().sleep_until(Time(9_000)) == Time(10_000)
        assert await fake_wall.clock().sleep_until(Time(10_000)) == Time(10_000)

    run(backend, body)
    assert fake_wall.sleeps == []


@pytest.mark.anyio
async def test_system_clock_sleep_until_is_a_checkpoint_even_when_the_deadline_has_passed(fake_wall: FakeWallClock) -> None:
    """sleep_until(past) still yields: inside a cancelled scope it raises cancellation."""
    reached = False
    with anyio.CancelScope() as scope:
        scope.cancel()
        await fake_wall.clock().sleep_until(Time(0))
        reached = True
    assert scope.cancelled_caught and not reached


@pytest.mark.parametrize("backend", BACKENDS)
def test_system_clock_sleep_until_returns_from_its_sleep_without_a_second_yield(
    backend: str, fake_wall: FakeWallClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sleep_until(future) yields in its sleep only: no extra checkpoint (an event-loop pass per timer tick) on waking."""
    checkpoints: list[int] = []
    real_checkpoint = anyio.lowlevel.checkpoint

    async def counted() -> None:
        checkpoints.append(len(fake_wall.sleeps))
        await real_checkpoint()

    async def body() -> None:
        monkeypatch.setattr(anyio.lowlevel, "checkpoint", counted)
        assert await fake_wall.clock().sleep_until(Time(10_400)) == Time(10_400)
        assert await fake_wall.clock().sleep_until(Time(10_400)) == Time(10_400)  # passed: one checkpoint

    run(backend, body)
    # The fake sleep's own checkpoint (after 1 sleep), then the passed deadline's (still 1 sleep).
    assert checkpoints == [1, 1]
    assert fake_wall.sleeps == [0.4]


@pytest.mark.parametrize("backend", BACKENDS)
def test_system_clock_sleeps_the_remaining_time_and_rechecks_after_an_early_wakeup(backend: str, fake_wall: FakeWallClock) -> None:
    """sleep_until sleeps for what remains and, woken early, sleeps again until the wall clock reaches the deadline."""
    fake_wall.wake_fraction = 0.5

    async def body() -> None:
        woke = await fake_wall.clock().sleep_until(Time(10_400))
        assert woke >= Time(10_400)
        assert woke == Time(fake_wall.now_ms)

    run(backend, body)
    assert fake_wall.sleeps[:2] == [0.4, 0.2]
    assert len(fake_wall.sleeps) > 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_system_clock_sleep_is_relative_to_now(backend: str, fake_wall: FakeWallClock) -> None:
    """SystemClock.sleep(d) sleeps until now + d and returns the time on waking."""

    async def body() -> None:
        assert await fake_wall.clock().sleep(Milliseconds(250)) == Time(10_250)

    run(backend, body)
    assert fake_wall.sleeps == [0.25]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_long_sleep_until_sees_a_forward_step_within_a_second(backend: str, fake_wall: FakeWallClock) -> None:
    """Waiting 10 minutes for a tick while the machine is suspended for 2 hours (the wall clock jumps, the monotonic one
    does not): the wall clock is read again after a second of sleep, so the tick is seen then, not 10 minutes later."""
    real_sleep = fake_wall.sleep

    async def suspended_during_the_first_sleep(seconds: float) -> None:
        if not fake_wall.sleeps:
            fake_wall.step(2 * 3600 * 1000)
        await real_sleep(seconds)

    fake_wall.sleep = suspended_during_the_first_sleep  # type: ignore[method-assign]

    async def body() -> None:
        await fake_wall.clock().sleep_until(Time(10_000 + 600_000))

    run(backend, body)
    assert fake_wall.sleeps == [1.0] and fake_wall.mono_ms == 1_000


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sleep_for_a_duration_is_not_stretched_by_a_backward_step(backend: str, fake_wall: FakeWallClock) -> None:
    """A 2 s bound (a stop's timeout) while the wall clock steps an hour back: it ends after 2 s of elapsed time, not
    3,602 s; the time it returns is the wall clock's, stepped."""
    real_sleep = fake_wall.sleep

    async def stepped_back_during_the_first_sleep(seconds: float) -> None:
        if not fake_wall.sleeps:
            fake_wall.step(-3600 * 1000)
        await real_sleep(seconds)

    fake_wall.sleep = stepped_back_during_the_first_sleep  # type: ignore[method-assign]
    woke: list[Time] = []

    async def body() -> None:
        woke.append(await fake_wall.clock().sleep(Milliseconds(2000)))

    run(backend, body)
    assert fake_wall.mono_ms == 2_000 and fake_wall.sleeps == [2.0]
    assert woke == [Time(10_000 - 3_600_000 + 2_000)]


# -- ManualClock: reading and moving --


def test_manual_clock_starts_where_told() -> None:
    """A ManualClock starts at 0, at a Time, or at integer milliseconds."""
    assert ManualClock().now() == Time(0)
    assert ManualClock(Time(1500)).now() == Time(1500)
    assert ManualClock(42).now() == Time(42)


def test_manual_clock_rejects_a_non_integer_start() -> None:
    """A float start is rejected with the Time validation message."""
    with raises_exactly(InvalidDurationError, "a Time must be a whole number of milliseconds (int), got float 1.5"):
        ManualClock(1.5)  # type: ignore[arg-type]


def test_advance_and_set_time_move_forward_and_return_the_new_time(clock: ManualClock) -> None:
    """advance takes a Duration or int ms; set_time jumps; both return the new reading."""
    assert clock.advance(Seconds(1)) == Time(1000)
    assert clock.advance(5) == Time(1005)
    assert clock.advance(0) == Time(1005)
    assert clock.set_time(Time(2000)) == Time(2000)
    assert clock.set_time(Time(2000)) == Time(2000)
    assert clock.now() == Time(2000)


def test_manual_clock_never_moves_backwards() -> None:
    """A negative advance or a set_time into the past is refused, exactly worded, and changes nothing."""
    clock = ManualClock(10)
    with raises_exactly(ValueError, "a manual clock only moves forward; got advance(-1 ms)"):
        clock.advance(-1)
    with raises_exactly(ValueError, "a manual clock only moves forward; got advance(-5 ms)"):
        clock.advance(Milliseconds(-5))
    with raises_exactly(ValueError, "a manual clock only moves forward; it reads 10 ms, got set_time(9 ms)"):
        clock.set_time(Time(9))
    assert clock.now() == Time(10)


def test_advance_rejects_a_non_integer_amount() -> None:
    """advance(1.5) is rejected with the Duration validation message."""
    with raises_exactly(InvalidDurationError, "a Duration must be a whole number of milliseconds (int), got float 1.5"):
        ManualClock().advance(1.5)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_manual_clock_repr_shows_time_and_sleepers() -> None:
    """repr summarises the reading and the parked sleepers."""
    clock = ManualClock(7)
    assert repr(clock) == "<ManualClock [7 ms | 0 sleepers]>"
    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.sleep_until, Time(100))
        await clock.wait_for_sleepers(1)
        assert repr(clock) == "<ManualClock [7 ms | 1 sleepers]>"
        clock.advance(100)


# -- ManualClock: sleeping --


@pytest.mark.anyio
async def test_sleep_until_a_reached_deadline_returns_at_once_but_is_a_checkpoint() -> None:
    """sleep_until(t <= now) returns now without parking, yet raises cancellation in a cancelled scope."""
    clock = ManualClock(100)
    assert await clock.sleep_until(Time(100)) == Time(100)
    assert await clock.sleep_until(Time(-5)) == Time(100)
    assert clock.sleepers == 0
    reached = False
    with anyio.CancelScope() as scope:
        scope.cancel()
        await clock.sleep_until(Time(50))
        reached = True
    assert scope.cancelled_caught and not reached


@pytest.mark.anyio
async def test_a_sleeper_wakes_exactly_when_the_clock_reaches_its_deadline(clock: ManualClock) -> None:
    """A task parked for t stays parked at t - 1 ms and wakes at t, returning the clock reading."""
    woke: list[Time] = []

    async def sleeper() -> None:
        woke.append(await clock.sleep_until(Time(100)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await clock.wait_for_sleepers(1)
        clock.advance(99)
        await settle()
        assert woke == [] and clock.sleepers == 1
        clock.advance(1)
        assert clock.sleepers == 0  # advance wakes synchronously
    assert woke == [Time(100)]


@pytest.mark.anyio
async def test_sleep_until_returns_the_reading_on_waking_not_the_deadline(clock: ManualClock) -> None:
    """A clock that jumps past the deadline wakes the sleeper with the later reading."""
    woke: list[Time] = []

    async def sleeper() -> None:
        woke.append(await clock.sleep_until(Time(100)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await clock.wait_for_sleepers(1)
        clock.set_time(Time(250))
    assert woke == [Time(250)]


@pytest.mark.anyio
async def test_advance_wakes_every_due_sleeper_and_only_those(clock: ManualClock) -> None:
    """Sleepers whose deadlines are reached wake (ties included); later ones stay parked; next_deadline tracks the earliest."""
    woke: set[int] = set()

    async def sleeper(deadline: int) -> None:
        await clock.sleep_until(Time(deadline))
        woke.add(deadline)

    async with anyio.create_task_group() as tg:
        assert clock.next_deadline is None
        for deadline in (300, 100, 200, 100):
            tg.start_soon(sleeper, deadline)
        await clock.wait_for_sleepers(4)
        assert clock.next_deadline == Time(100)
        clock.advance(150)
        assert clock.sleepers == 2
        assert clock.next_deadline == Time(200)
        await settle()
        assert woke == {100}
        clock.advance(50)
        await settle()
        assert woke == {100, 200} and clock.next_deadline == Time(300)
        clock.advance(100)
    assert woke == {100, 200, 300}
    assert clock.sleepers == 0 and clock.next_deadline is None


@pytest.mark.anyio
async def test_sleep_parks_for_a_duration_of_manual_time() -> None:
    """ManualClock.sleep(d) parks until now + d."""
    clock = ManualClock(1000)
    woke: list[Time] = []

    async def sleeper() -> None:
        woke.append(await clock.sleep(Milliseconds(500)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await clock.wait_for_sleepers(1)
        assert clock.next_deadline == Time(1500)
        clock.advance(500)
    assert woke == [Time(1500)]


@pytest.mark.anyio
async def test_wait_for_sleepers_waits_until_enough_tasks_are_parked(clock: ManualClock) -> None:
    """wait_for_sleepers(n) returns once n tasks are parked, at once if they already are."""
    returned = anyio.Event()

    async def watcher() -> None:
        await clock.wait_for_sleepers(2)
        returned.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher)
        tg.start_soon(clock.sleep_until, Time(10))
        await settle()
        assert clock.sleepers == 1 and not returned.is_set()
        tg.start_soon(clock.sleep_until, Time(20))
        await returned.wait()
        await clock.wait_for_sleepers(2)  # already satisfied: returns at once
        await clock.wait_for_sleepers(0)
        clock.advance(20)


@pytest.mark.anyio
async def test_woken_sleepers_no_longer_count_as_parked(clock: ManualClock) -> None:
    """After an advance wakes a sleeper, wait_for_sleepers waits for it to park again."""
    laps: list[Time] = []

    async def looper() -> None:
        for deadline in (10, 20):
            laps.append(await clock.sleep_until(Time(deadline)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(looper)
        await clock.wait_for_sleepers(1)
        clock.advance(10)
        assert clock.sleepers == 0
        await clock.wait_for_sleepers(1)  # parked again, on 20
        assert laps == [Time(10)] and clock.next_deadline == Time(20)
        clock.advance(10)
    assert laps == [Time(10), Time(20)]


@pytest.mark.anyio
async def test_a_cancelled_sleeper_is_unparked_and_forgotten(clock: ManualClock) -> None:
    """Cancelling a parked sleeper drops it from sleepers and next_deadline; a later advance past its deadline is harmless."""
    outcome: list[str] = []

    async def sleeper(scope_holder: list[anyio.CancelScope], deadline: int) -> None:
        with anyio.CancelScope() as scope:
            scope_holder.append(scope)
            await clock.sleep_until(Time(deadline))
            outcome.append(f"woke {deadline}")
            return
        outcome.append(f"cancelled {deadline}")

    early: list[anyio.CancelScope] = []
    late: list[anyio.CancelScope] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, early, 100)
        tg.start_soon(sleeper, late, 200)
        await clock.wait_for_sleepers(2)
        early[0].cancel()
        await settle()
        assert outcome == ["cancelled 100"]
        assert clock.sleepers == 1
        assert clock.next_deadline == Time(200)
        clock.advance(150)  # past the cancelled deadline: nothing to wake
        await settle()
        assert outcome == ["cancelled 100"] and clock.sleepers == 1
        clock.advance(50)
    assert outcome == ["cancelled 100", "woke 200"]


@pytest.mark.anyio
async def test_cancelling_a_sleeper_wakes_a_sleeper_count_watcher(clock: ManualClock) -> None:
    """A task waiting for sleepers re-checks when a sleeper leaves by cancellation (it keeps waiting for the count)."""
    async with anyio.create_task_group() as tg:
        sleepers = anyio.CancelScope()

        async def sleeper() -> None:
            with sleepers:
                await clock.sleep_until(Time(10))

        tg.start_soon(sleeper)
        await clock.wait_for_sleepers(1)
        sleepers.cancel()
        await settle()
        assert clock.sleepers == 0
        tg.start_soon(clock.sleep_until, Time(10))
        await clock.wait_for_sleepers(1)
        clock.advance(10)


# -- run_with_timeout --


@pytest.mark.anyio
async def test_run_with_timeout_none_just_runs() -> None:
    """With timeout=None the function runs to completion and the result is True."""
    ran: list[int] = []

    async def fn() -> None:
        ran.append(1)

    assert await run_with_timeout(ManualClock(), None, fn) is True
    assert ran == [1]


@pytest.mark.anyio
async def test_run_with_timeout_returns_true_when_fn_finishes_in_time_and_leaves_no_sleeper(clock: ManualClock) -> None:
    """A function that finishes before the timeout yields True and its guard stops waiting on the clock."""
    release = anyio.Event()
    result: list[bool] = []

    async def fn() -> None:
        await release.wait()

    async def caller() -> None:
        result.append(await run_with_timeout(clock, Seconds(1), fn))

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        await clock.wait_for_sleepers(1)  # the guard is parked
        assert clock.next_deadline == Time(1000)
        clock.advance(999)
        release.set()
    assert result == [True]
    assert clock.sleepers == 0


@pytest.mark.anyio
async def test_run_with_timeout_cancels_fn_when_the_clock_reaches_the_timeout() -> None:
    """At the timeout (not a millisecond earlier) fn is cancelled and the result is False."""
    clock = ManualClock(500)
    cancelled: list[bool] = []
    result: list[bool] = []

    async def fn() -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise

    async def caller() -> None:
        result.append(await run_with_timeout(clock, Milliseconds(300), fn))

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        await clock.wait_for_sleepers(1)
        clock.advance(299)
        await settle()
        assert result == [] and cancelled == []
        clock.advance(1)
    assert result == [False] and cancelled == [True]


@pytest.mark.anyio
@pytest.mark.parametrize("timeout", [None, Seconds(1)])
async def test_run_with_timeout_propagates_fns_exception_unchanged(timeout: Duration | None) -> None:
    """An exception from fn reaches the caller as itself, not wrapped in an ExceptionGroup, with or without a timeout."""
    async def fn() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await run_with_timeout(ManualClock(), timeout, fn)


@pytest.mark.anyio
async def test_run_with_timeout_does_not_swallow_the_callers_cancellation(clock: ManualClock) -> None:
    """Cancelling the caller cancels fn and propagates; it is not reported as a timeout."""
    after: list[bool] = []
    with anyio.CancelScope() as scope:

        async def fn() -> None:
            scope.cancel()
            await anyio.sleep_forever()

        after.append(await run_with_timeout(clock, Seconds(1), fn))
    assert scope.cancelled_caught and after == []
    assert clock.sleepers == 0


# -- SystemClock: steps of the wall clock --


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forward_step_is_logged_and_the_timer_fires_every_tick_it_skipped_on_the_grid(
        backend: str, fake_wall: FakeWallClock) -> None:
    """The wall clock jumps 1 s ahead after the first tick: one warning, then ticks 10_200 ... 11_200 in order."""
    clock = fake_wall.clock()
    ticks: list[int] = []

    def on_tick(time: Time) -> None:
        ticks.append(time.milliseconds)
        if len(ticks) == 1:
            fake_wall.step(1_000)

    async def body() -> None:
        timer = RecurringTimer(clock, Milliseconds(100), on_tick, "stepped")
        async with anyio.create_task_group() as tg:
            await tg.start(timer.run)
            while len(ticks) < 12:
                await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()

    with capture_events() as logs:
        run(backend, body)
    # (the poller cancels once it sees 12 ticks; the timer may have fired one more by then)
    assert ticks[:12] == [10_100 + 100 * k for k in range(12)]
    assert clock.steps == 1
    steps = [e for e in logs if e["event"] == "wall clock stepped"]
    assert [(e["log_level"], e["direction"], e["step_ms"]) for e in steps] == [("warning", "forwards", 1_000)]
    # after the step the timer caught up without sleeping: the sleeps before are the grid's
    assert fake_wall.sleeps[:2] == [0.1, 0.1] and len(fake_wall.sleeps) <= 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backward_step_is_logged_and_the_timer_waits_for_its_next_tick_on_the_grid(
        backend: str, fake_wall: FakeWallClock) -> None:
    """The wall clock goes 2 s back after the first tick: one warning, and the next tick is still 10_200, reached 2 s later."""
    clock = fake_wall.clock()
    ticks: list[tuple[int, int]] = []

    def on_tick(time: Time) -> None:
        ticks.append((time.milliseconds, fake_wall.mono_ms))
        if len(ticks) == 1:
            fake_wall.step(-2_000)

    async def body() -> None:
        timer = RecurringTimer(clock, Milliseconds(100), on_tick, "stepped")
        async with anyio.create_task_group() as tg:
            await tg.start(timer.run)
            while len(ticks) < 3:
                await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()

    with capture_events() as logs:
        run(backend, body)
    assert ticks[:3] == [(10_100, 100), (10_200, 2_200), (10_300, 2_300)]  # a fourth may fire before the cancel
    steps = [e for e in logs if e["event"] == "wall clock stepped"]
    assert [(e["direction"], e["step_ms"]) for e in steps] == [("backwards", 2_000)]
    assert clock.steps == 1


def test_no_step_without_a_jump_and_a_bad_threshold_is_refused(fake_wall: FakeWallClock) -> None:
    """Readings that move both clocks alike, or differ by less than the threshold, are no step; a threshold must be positive."""
    clock = fake_wall.clock(step_threshold=Milliseconds(50))
    fake_wall.now_ms += 500
    fake_wall.mono_ms += 500
    clock.now()
    fake_wall.step(50)  # exactly the threshold: not more than it
    clock.now()
    assert clock.steps == 0
    fake_wall.step(-51)
    assert clock.now() == Time(10_499)
    assert clock.steps == 1
    with raises_exactly(ValueError, "step_threshold must be positive, got Duration(0)"):
        SystemClock(step_threshold=Milliseconds(0))
