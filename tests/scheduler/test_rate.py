"""Backpressure: the PID rate estimator (Spark's arithmetic and messages), the token-bucket limiter, the controller."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from listeners import BatchCompleted, BatchInfo
from scheduler import Duration, InvalidPipelineError, ManualClock, PIDRateEstimator, RateController, RateLimiter, StreamInputInfo, Time
from tests.anyio_support import raises_exactly, settle

pytestmark = pytest.mark.anyio


# -- PIDRateEstimator --


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0,), "Specified batch interval 0 in PIDRateEstimator is invalid."),
        ((1000, -1.0), "Proportional term -1.0 in PIDRateEstimator should be >= 0."),
        ((1000, 1.0, -0.5), "Integral term -0.5 in PIDRateEstimator should be >= 0."),
        ((1000, 1.0, 0.2, -2.0), "Derivative term -2.0 in PIDRateEstimator should be >= 0."),
        ((1000, 1.0, 0.2, 0.0, 0.0), "Minimum rate in PIDRateEstimator should be > 0"),
    ],
)
def test_pid_parameters_are_checked_with_sparks_messages(args: tuple[Any, ...], message: str) -> None:
    """Each out-of-range parameter raises Spark's require() message."""
    with raises_exactly(InvalidPipelineError, f"requirement failed: {message}"):
        PIDRateEstimator(*args)


def test_the_first_batch_calibrates_and_later_ones_follow_the_processing_rate() -> None:
    """kp=1 and no backlog: the new rate is the measured processing rate; the first batch only sets it."""
    pid = PIDRateEstimator(1000, 1.0, 0.0, 0.0, 10)
    assert pid.compute(10, 1000, 1000, 0) is None  # 1000 records/s measured, nothing returned
    assert pid.compute(20, 2000, 1000, 0) == pytest.approx(2000)
    assert pid.compute(30, 500, 1000, 0) == pytest.approx(500)


def test_the_integral_term_takes_the_backlog_off_the_rate() -> None:
    """historicalError = schedulingDelay x processingRate / interval, weighted by ki (0.2)."""
    pid = PIDRateEstimator(1000, 1.0, 0.2, 0.0, 10)
    pid.compute(10, 1000, 1000, 0)
    # processing rate 2000/s; backlog 500 ms of it = 1000 records; 2000 - 0.2 * 1000
    assert pid.compute(20, 2000, 1000, 500) == pytest.approx(1800)


def test_the_rate_never_goes_below_the_minimum() -> None:
    """A collapsing processing rate bottoms out at minRate."""
    pid = PIDRateEstimator(1000, 1.0, 0.2, 0.0, 100)
    pid.compute(10, 1000, 1000, 0)
    assert pid.compute(20, 1, 1000, 5000) == 100


def test_batches_without_records_or_time_or_out_of_order_are_skipped() -> None:
    """No records, no processing time, or an end time not after the last: None, and the state is unchanged."""
    pid = PIDRateEstimator(1000, 1.0, 0.0, 0.0, 10)
    assert pid.compute(10, 0, 1000, 0) is None
    assert pid.compute(10, 100, 0, 0) is None
    assert pid.compute(10, 1000, 1000, 0) is None  # calibrates
    assert pid.compute(10, 5000, 1000, 0) is None  # same time: skipped
    assert pid.compute(20, 3000, 1000, 0) == pytest.approx(3000)


# -- RateLimiter --


async def test_the_limiter_lets_the_first_records_through_and_paces_the_rest(clock: ManualClock) -> None:
    """10 records/s: the first acquire is free, the next waits until the first is paid off (100 ms)."""
    limiter = RateLimiter(clock, 10)
    await limiter.acquire(1)
    done: list[int] = []

    async def second() -> None:
        await limiter.acquire(5)
        done.append(clock.now().milliseconds)

    async with anyio.create_task_group() as tg:
        tg.start_soon(second)
        await clock.wait_for_sleepers(1)
        clock.advance(99)
        await settle()
        assert done == []
        clock.advance(1)
    assert done == [100] and limiter.waits == 1
    # The 5 records paid at 100 ms are paid off at 600 ms: a later caller waits until then.
    clock.set_time(Time(300))
    async with anyio.create_task_group() as tg:
        tg.start_soon(limiter.acquire, 1)
        await clock.wait_for_sleepers(1)
        assert clock.next_deadline == Time(600)
        clock.set_time(Time(600))


async def test_unused_time_is_stored_for_a_burst_of_at_most_one_second(clock: ManualClock) -> None:
    """After 5 s idle at 10/s, 10 records (one second's worth) come from storage; the next is paid forward and the one after waits."""
    limiter = RateLimiter(clock, 10)
    await limiter.acquire(1)
    clock.set_time(Time(5000))
    await limiter.acquire(10)  # from the stored permits: no wait, nothing owed
    await limiter.acquire(1)  # owes 100 ms, paid by whoever comes next
    assert limiter.waits == 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(limiter.acquire, 1)
        await clock.wait_for_sleepers(1)
        assert clock.next_deadline == Time(5100)
        clock.advance(100)
    assert limiter.waits == 1


async def test_rates_are_capped_by_the_maximum_and_non_positive_updates_are_ignored(clock: ManualClock) -> None:
    """spark.streaming.receiver.maxRate caps every update; 0 or less leaves the rate as it is; no rate: no waiting."""
    limiter = RateLimiter(clock, None, max_rate=50)
    assert limiter.rate == 50
    limiter.update(500)
    assert limiter.rate == 50
    limiter.update(20)
    assert limiter.rate == 20
    limiter.update(0)
    limiter.update(-3)
    assert limiter.rate == 20
    unlimited = RateLimiter(clock)
    await unlimited.acquire(10**9)
    assert unlimited.rate is None and unlimited.waits == 0
    with pytest.raises(ValueError, match="max_rate must be a positive number"):
        RateLimiter(clock, max_rate=0)
    with pytest.raises(ValueError, match=r"^max_rate must be a positive number of records per second or None, got inf$"):
        RateLimiter(clock, max_rate=math.inf)
    with pytest.raises(ValueError, match=r"^rate must be a finite number of records per second or None, got nan$"):
        RateLimiter(clock, math.nan)


async def test_a_new_rate_reprices_what_is_owed_and_wakes_a_waiting_caller(clock: ManualClock) -> None:
    """10/s, 10 records paid at 0 (owed until 1000 ms): a rise to 1000/s at 0 makes the waiter's wait 10 ms, a fall to
    5/s at 5 ms makes the 5 ms left 10 ms; nothing owed from before stays at the old rate (no stale debt)."""
    limiter = RateLimiter(clock, 10)
    await limiter.acquire(10)
    done: list[int] = []

    async def waiter() -> None:
        await limiter.acquire(1)
        done.append(clock.now().milliseconds)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await clock.wait_for_sleepers(1)
        assert clock.next_deadline == Time(1000)
        limiter.update(1000)
        await settle()
        assert clock.next_deadline == Time(10)
        clock.set_time(Time(5))
        limiter.update(500)
        await settle()
        assert clock.next_deadline == Time(15)
        clock.set_time(Time(15))
    assert done == [15] and limiter.waits == 1


async def test_slices_hold_a_periods_worth_at_the_rate(clock: ManualClock) -> None:
    """slice_size: the records one acquire takes, a period's worth at the current rate, at least one; None unlimited."""
    limiter = RateLimiter(clock, 20)
    assert limiter.slice_size(Duration(200)) == 4
    limiter.update(2)
    assert limiter.slice_size(Duration(200)) == 1
    assert RateLimiter(clock).slice_size(Duration(200)) is None


# -- RateController --


def completed(stream_records: dict[int, int], *, start: int | None = 1000, end: int | None = 1500) -> BatchCompleted:
    info = BatchInfo(
        Time(1000), {sid: StreamInputInfo(sid, n) for sid, n in stream_records.items()}, Time(1000),
        None if start is None else Time(start), None if end is None else Time(end), {},
    )
    return BatchCompleted(info)


def test_the_controller_publishes_the_estimate_for_its_own_stream_only() -> None:
    """Batches without this stream's input info or without processing times are skipped; others feed the estimator."""
    published: list[float] = []
    controller = RateController(1, PIDRateEstimator(1000, 1.0, 0.0, 0.0, 10), published.append)
    controller.on_batch_completed(completed({0: 500}))  # another stream
    controller.on_batch_completed(completed({1: 500}, start=None, end=None))  # never processed
    controller.on_batch_completed(completed({1: 500}, start=1000, end=1500))  # calibrates: 1000/s
    assert published == []
    controller.on_batch_completed(completed({1: 800}, start=1000, end=2000))  # 800 records in 1000 ms
    assert published == [pytest.approx(800)] and controller.latest_rate == pytest.approx(800)
