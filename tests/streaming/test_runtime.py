"""StreamingRuntime: lifecycle rules, stopping, the termination waiter, and embedding."""

from __future__ import annotations

import anyio
import pytest

from listeners import BatchCompleted, EventRecorder, OverflowPolicy, StreamingListener, StreamingStarted
from scheduler import (
    InvalidDurationError,
    InvalidPipelineError,
    Job,
    JobFailedError,
    ManualClock,
    Milliseconds,
    Minutes,
    Seconds,
    StreamingStateError,
    Time,
)
from streaming import Batch, Pipeline, StreamingContextState, StreamingRuntime
from tests.anyio_support import settle
from tests.support import Gate, RecordingHook, ScriptedGraph, advance, capture_events, noop_job, wait_until

pytestmark = pytest.mark.anyio


def one_output_pipeline(sink: list[int] | None = None) -> Pipeline:
    p = Pipeline()
    p.add_source(lambda t: [t.milliseconds], name="t")

    async def out(batch: Batch) -> None:
        if sink is not None:
            sink.append(batch.time.milliseconds)

    p.add_output(out)
    return p


async def test_lifecycle_states() -> None:
    """A runtime goes INITIALIZED -> ACTIVE -> STOPPED."""
    async with StreamingRuntime(one_output_pipeline(), Seconds(1), clock=ManualClock()) as rt:
        assert rt.state is StreamingContextState.INITIALIZED
        await rt.start()
        assert rt.state is StreamingContextState.ACTIVE
        await rt.stop()
        assert rt.state is StreamingContextState.STOPPED


async def test_start_twice_is_refused() -> None:
    """Starting an active runtime raises 'already been started'."""
    async with StreamingRuntime(one_output_pipeline(), Seconds(1), clock=ManualClock()) as rt:
        await rt.start()
        with pytest.raises(StreamingStateError, match=r"^StreamingContext has already been started$"):
            await rt.start()
        await rt.stop()


async def test_start_after_stop_is_refused() -> None:
    """Starting a stopped runtime raises 'already been stopped'."""
    async with StreamingRuntime(one_output_pipeline(), Seconds(1), clock=ManualClock()) as rt:
        await rt.start()
        await rt.stop()
        with pytest.raises(StreamingStateError, match=r"^StreamingContext has already been stopped$"):
            await rt.start()


async def test_start_without_outputs_fails_and_marks_stopped() -> None:
    """A pipeline with no output operations fails to start with Spark's message; the runtime is then STOPPED."""
    async with StreamingRuntime(Pipeline(), Seconds(1), clock=ManualClock()) as rt:
        with pytest.raises(InvalidPipelineError, match=r"^No output operations registered, so nothing to execute$"):
            await rt.start()
        assert rt.state is StreamingContextState.STOPPED
        with pytest.raises(StreamingStateError, match=r"^StreamingContext has already been stopped$"):
            await rt.start()


async def test_adding_outputs_after_start_is_refused() -> None:
    """Adding a source or output after start raises Spark's message."""
    pipeline = one_output_pipeline()
    async with StreamingRuntime(pipeline, Seconds(1), clock=ManualClock()) as rt:
        await rt.start()
        message = r"^Adding new inputs, transformations, and output operations after starting a context is not supported$"
        with pytest.raises(StreamingStateError, match=message):
            pipeline.add_output(lambda b: None)
        with pytest.raises(StreamingStateError, match=message):
            pipeline.add_source(lambda t: [], name="late")
        await rt.stop()


async def test_start_outside_its_task_group_is_refused() -> None:
    """start() without 'async with' says how to give the runtime a home."""
    rt = StreamingRuntime(one_output_pipeline(), Seconds(1), clock=ManualClock())
    with pytest.raises(StreamingStateError, match=r"^start\(\) needs the runtime's task group: use 'async with runtime:'"):
        await rt.start()


@pytest.mark.parametrize(
    ("duration", "message"),
    [
        (Milliseconds(0), r"^batch duration must be a positive multiple of 1 ms, got 0 ms; pass e.g. Seconds\(1\)$"),
        (Milliseconds(-5), r"^batch duration must be a positive multiple of 1 ms, got -5 ms; pass e.g. Seconds\(1\)$"),
        (1, r"^batch duration must be a Duration, got int 1; pass e.g. Seconds\(1\) or Milliseconds\(500\)$"),
        (0.5, r"^batch duration must be a Duration, got float 0.5; pass e.g. Seconds\(1\) or Milliseconds\(500\)$"),
    ],
)
def test_bad_batch_duration_is_refused(duration: object, message: str) -> None:
    """A batch duration that is not a positive Duration is refused, naming the value and the fix."""
    with pytest.raises(InvalidDurationError, match=message):
        StreamingRuntime(one_output_pipeline(), duration, clock=ManualClock())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"clock": "x"}, TypeError, r"^clock must be a Clock \(SystemClock, ManualClock...\), got str 'x'$"),
        ({"stop_on_failure": "no"}, TypeError, r"^stop_on_failure must be a bool or None, got 'no'$"),
        ({"track_progress": 1}, TypeError, r"^track_progress must be a bool, got 1$"),
        ({"name": 5}, ValueError, r"^name must be a non-empty string or None, got 5$"),
        ({"name": " "}, ValueError, r"^name must be a non-empty string or None, got ' '$"),
        ({"abandon_after": Milliseconds(-1)}, InvalidDurationError,
         r"^abandon_after must be a non-negative Duration, got Duration\(-1\); pass e.g. Seconds\(2\)$"),
        ({"abandon_after": None}, InvalidDurationError, r"^abandon_after must be a non-negative Duration, got None"),
        ({"abandon_after": 5}, InvalidDurationError, r"^abandon_after must be a non-negative Duration, got 5"),
        ({"graceful_stop_timeout": 5}, InvalidDurationError, r"^graceful_stop_timeout must be a non-negative Duration, got 5"),
    ],
)
def test_bad_arguments_are_refused_when_the_runtime_is_made(arguments: dict[str, object], error: type[Exception],
                                                           message: str) -> None:
    """A wrong clock, flag, name or stop duration is refused by the constructor, naming it (a string clock failed at
    start inside an exception group; stop_on_failure="no" meant True)."""
    with pytest.raises(error, match=message):
        StreamingRuntime(one_output_pipeline(), Seconds(1), **arguments)  # type: ignore[arg-type]


async def test_stop_before_start_marks_stopped_with_warning() -> None:
    """Stopping a runtime that never started marks it STOPPED and warns."""
    with capture_events() as logs:
        async with StreamingRuntime(one_output_pipeline(), Seconds(1), clock=ManualClock()) as rt:
            await rt.stop()
            assert rt.state is StreamingContextState.STOPPED
    assert any(e["event"] == "StreamingContext has not been started yet" and e["log_level"] == "warning" for e in logs)


async def test_stop_twice_is_idempotent() -> None:
    """A second stop only warns."""
    with capture_events() as logs:
        async with StreamingRuntime(one_output_pipeline(), Seconds(1), clock=ManualClock()) as rt:
            await rt.start()
            await rt.stop()
            await rt.stop()
    assert [e["event"] for e in logs].count("StreamingContext has already been stopped") == 1


async def test_stop_from_inside_a_listener_is_refused(clock: ManualClock) -> None:
    """A listener callback that tries to stop the runtime gets Spark's error; the listener keeps working."""
    errors: list[BaseException] = []

    class Stopper(StreamingListener):
        def __init__(self, rt: StreamingRuntime) -> None:
            self.rt = rt

        async def on_batch_completed(self, event: BatchCompleted) -> None:
            try:
                await self.rt.stop()
            except StreamingStateError as exc:
                errors.append(exc)

    async with StreamingRuntime(one_output_pipeline(), Seconds(1), clock=clock) as rt:
        rt.add_listener(Stopper(rt))
        await rt.start()
        await advance(rt, clock)
        assert rt.state is StreamingContextState.ACTIVE
        await rt.stop()
    listener = "test_stop_from_inside_a_listener_is_refused.<locals>.Stopper"
    assert [str(e) for e in errors] == [f"Cannot stop StreamingContext within listener bus thread. (called from listener {listener!r})"]


async def test_graceful_stop_runs_the_pending_tick_and_drains(clock: ManualClock) -> None:
    """A graceful stop fires the tick the timer waits for, runs every generated batch, and delivers every event."""
    sink: list[int] = []
    hook = RecordingHook()
    delivered: list[int] = []

    class SlowListener(StreamingListener):
        async def on_batch_completed(self, event: BatchCompleted) -> None:
            await anyio.lowlevel.checkpoint()
            delivered.append(event.batch_info.batch_time.milliseconds)

    pipeline = one_output_pipeline(sink)
    async with StreamingRuntime(pipeline, Seconds(1), clock=clock, hooks=[hook]) as rt:
        rt.add_listener(SlowListener())
        await rt.start()
        await advance(rt, clock, Seconds(2))
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.stop(graceful=True))
            await settle()  # stop() has asked the timer, parked at 3000, for one more tick
            clock.advance(Seconds(1))
        assert rt.state is StreamingContextState.STOPPED
    assert sink == [1000, 2000, 3000]
    assert hook.completed == [1000, 2000, 3000]
    assert delivered == [1000, 2000, 3000]
    st = rt.listener_bus.statistics()
    assert (st.queued, st.dropped) == (0, 0)


async def test_graceful_stop_times_out_and_abandons(clock: ManualClock) -> None:
    """A graceful stop gives a running job an hour (Spark's graceful JobScheduler.stop), not just its timeout; then it
    gives up, abandoning the job that never ends, and still stops."""
    gate = Gate()
    cancelled: list[str] = []
    rec = EventRecorder()

    def make(t: Time) -> list[Job]:
        job = gate.job(t, f"{t.milliseconds}")
        job.cancel = lambda: cancelled.append(str(t))
        return [job]

    async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock, graceful_stop_timeout=Seconds(5),
                                abandon_after=Milliseconds(0)) as rt:
        rt.add_listener(rec)
        await rt.start()
        clock.advance(Seconds(1))
        await gate.wait_started("1000")
        with capture_events() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: rt.stop(graceful=True))
                await settle()  # stop() has asked the timer, parked at 2000, for one more tick
                clock.advance(Seconds(1))  # the extra tick fires; batch 2000 queues behind 1000
                await settle()  # batch 2000 generated (progress), the graceful-stop deadline parked after it
                assert clock.sleepers == 1
                clock.advance(Seconds(5))  # the timeout, while batch 1000's job runs: the stop waits on for it
                await settle()
                assert rt.state is StreamingContextState.ACTIVE and clock.sleepers == 1 and cancelled == []
                clock.advance(Minutes(60) - Seconds(5))
        assert rt.state is StreamingContextState.STOPPED
    assert any(e["event"] == "timed out while stopping the job generator" for e in logs)
    assert cancelled == ["1000 ms"]
    completed = rec.completed_batches
    assert [b.batch_time.milliseconds for b in completed] == [1000]
    assert "abandoned by an immediate stop" in (completed[0].output_operation_infos[0].failure_reason or "")
    assert rt.scheduler.pending_times() == [Time(1000), Time(2000)]


async def test_immediate_stop_drops_queued_and_abandons_running_after_grace(clock: ManualClock) -> None:
    """An immediate stop drops queued jobs, lets running ones finish within the grace period, then cancels them."""
    gate = Gate()
    cancelled: list[str] = []

    def make(t: Time) -> list[Job]:
        jobs = [gate.job(t, f"{t.milliseconds}.{i}") for i in range(2)]
        for job in jobs:
            job.cancel = lambda job=job: cancelled.append(job.name)
        return jobs

    async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock, abandon_after=Seconds(2)) as rt:
        await rt.start()
        clock.advance(Seconds(1))
        await gate.wait_started("1000.0")
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.stop(graceful=False))
            await wait_until(lambda: clock.next_deadline == Time(3000))  # the timer is gone; the grace period runs
            clock.advance(Seconds(2))
    assert cancelled == ["1000.0"]
    assert gate.started == ["1000.0"]  # 1000.1 was queued and dropped
    assert rt.scheduler.pending_times() == [Time(1000)]


async def test_job_finishing_within_grace_is_finalised(clock: ManualClock) -> None:
    """A running job that ends during an immediate stop's grace period completes normally and its batch is finalised."""
    gate = Gate()
    hook = RecordingHook()
    async with StreamingRuntime(ScriptedGraph(lambda t: [gate.job(t, "a")]), Seconds(1), clock=clock, hooks=[hook]) as rt:
        await rt.start()
        clock.advance(Seconds(1))
        await gate.wait_started("a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.stop(graceful=False))
            await settle()  # stop() has ended the timer and waits out the grace period
            gate.open("a")
    assert hook.completed == [1000]
    assert rt.scheduler.pending_times() == []


async def test_await_termination_times_out_on_the_clock(clock: ManualClock) -> None:
    """await_termination(timeout) returns False once the timeout passes on the runtime's clock."""
    async with StreamingRuntime(ScriptedGraph(lambda t: []), Seconds(10), clock=clock) as rt:
        await rt.start()
        async with anyio.create_task_group() as tg:
            result: list[bool] = []

            async def wait() -> None:
                result.append(await rt.await_termination(Seconds(3)))

            tg.start_soon(wait)
            await clock.wait_for_sleepers(2)  # the timer and the waiter
            clock.advance(Seconds(3))
        assert result == [False]
        await rt.stop()
        assert await rt.await_termination() is True
        assert await rt.await_termination(Seconds(0)) is True


async def test_await_termination_error_takes_precedence_and_sticks(clock: ManualClock) -> None:
    """Once a job failed, every await_termination raises the latest failure, even after a clean stop."""

    def make(t: Time) -> list[Job]:
        async def fail() -> None:
            raise KeyError(f"bad {t.milliseconds}")

        return [Job(t, fail)]

    async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock) as rt:
        await rt.start()
        await advance(rt, clock, Seconds(2))
        await rt.stop()
    for _ in range(2):
        with pytest.raises(JobFailedError, match=r"^Error running job streaming job 2000 ms.0: KeyError: 'bad 2000'$"):
            await rt.await_termination()
    assert rt.exception() is not None and rt.exception().batch_time_ms == 2000  # type: ignore[union-attr]


async def test_waiter_wakes_on_failure(clock: ManualClock) -> None:
    """A task blocked in await_termination is woken by a job failure."""

    def make(t: Time) -> list[Job]:
        def fail() -> None:
            raise ValueError("sync job failed")

        return [Job(t, fail)]

    async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock) as rt:
        await rt.start()
        async with anyio.create_task_group() as tg:
            caught: list[BaseException] = []

            async def wait() -> None:
                try:
                    await rt.await_termination()
                except JobFailedError as exc:
                    caught.append(exc)

            tg.start_soon(wait)
            await settle()  # the waiter is blocked in await_termination, the timer parked at 1000
            clock.advance(Seconds(1))
        assert [str(e) for e in caught] == ["Error running job streaming job 1000 ms.0: ValueError: sync job failed"]
        await rt.stop()


async def test_host_cancellation_shuts_down_cleanly(clock: ManualClock) -> None:
    """Cancelling the host's task group stops the runtime at once, abandoning running jobs, without hanging."""
    gate = Gate()
    cancelled: list[str] = []

    def make(t: Time) -> list[Job]:
        job = gate.job(t, "forever")
        job.cancel = lambda: cancelled.append("forever")
        return [job]

    rt = StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as host:

            async def service() -> None:
                async with rt:
                    await rt.start()
                    await anyio.sleep_forever()

            host.start_soon(service)
            await clock.wait_for_sleepers(1)
            clock.advance(Seconds(1))
            await gate.wait_started("forever")
            host.cancel_scope.cancel()
    assert rt.state is StreamingContextState.STOPPED
    assert cancelled == ["forever"]


async def test_run_embeds_with_task_group_start(clock: ManualClock) -> None:
    """'await tg.start(runtime.run)' returns once the runtime is active; stop() ends it."""
    sink: list[int] = []
    rt = StreamingRuntime(one_output_pipeline(sink), Seconds(1), clock=clock)
    async with anyio.create_task_group() as tg:
        await tg.start(rt.run)
        assert rt.state is StreamingContextState.ACTIVE
        await advance(rt, clock)
        await rt.stop()
    assert sink == [1000]


async def test_streaming_started_is_posted_once_on_the_clock() -> None:
    """StreamingStarted is posted once, with the clock's time at start."""
    clock = ManualClock(500)
    rec = EventRecorder()
    async with StreamingRuntime(one_output_pipeline(), Seconds(1), clock=clock) as rt:
        rt.add_listener(rec)
        await rt.start()
        await rt.stop()
    assert rec.of_type(StreamingStarted) == [StreamingStarted(Time(500))]


async def test_block_policy_loses_nothing_with_tiny_queue(clock: ManualClock) -> None:
    """With a one-event queue and the BLOCK policy, a slow listener still receives every event."""
    rec = EventRecorder()

    class Slow(StreamingListener):
        async def on_batch_completed(self, event: BatchCompleted) -> None:
            for _ in range(3):
                await anyio.lowlevel.checkpoint()

    async with StreamingRuntime(ScriptedGraph(lambda t: [noop_job(t), noop_job(t)]), Seconds(1), clock=clock,
                                listener_bus_capacity=1, listener_overflow=OverflowPolicy.BLOCK) as rt:
        rt.add_listener(Slow())
        rt.add_listener(rec)
        await rt.start()
        await advance(rt, clock, Seconds(20))
        await rt.stop()
    assert len(rec.completed_batches) == 20
    assert rt.listener_bus.statistics().dropped == 0
