"""JobGenerator and JobScheduler: batch generation, job execution, ordering and delays."""

from __future__ import annotations

import threading

import anyio
import pytest

from listeners import (
    BatchCompleted,
    BatchStarted,
    BatchSubmitted,
    EventRecorder,
    OutputOperationCompleted,
    OutputOperationStarted,
)
from scheduler import Job, JobFailedError, JobScheduler, ManualClock, Milliseconds, Seconds, Time
from streaming import StreamingRuntime
from tests.anyio_support import raises_exactly
from tests.support import Gate, RecordingHook, ScriptedGraph, advance, advance_until_parked, capture_events, noop_job, sleeping_job

pytestmark = pytest.mark.anyio


def names(recorder: EventRecorder) -> list[str]:
    return [type(e).__name__ for e in recorder.events if type(e).__name__ != "StreamingStarted"]


async def test_first_batch_is_next_grid_point_strictly_after_now() -> None:
    """The first batch time is the next multiple of the interval strictly after now; zero time is one batch earlier."""
    clock = ManualClock(3000)
    graph = ScriptedGraph(lambda t: [noop_job(t)])
    async with StreamingRuntime(graph, Seconds(1), clock=clock) as rt:
        await rt.start()
        assert rt.first_batch_time == Time(4000)
        assert graph.zero_time == Time(3000)
        await rt.stop()


async def test_one_job_per_output_in_registration_order_with_spark_ids(clock: ManualClock) -> None:
    """Each batch has one job per output operation, numbered in order, with Spark's job ids."""
    ran: list[tuple[str, int]] = []
    ids: list[str] = []

    def make(t: Time) -> list[Job]:
        jobs = [noop_job(t, "a", ran), noop_job(t, "b", ran), noop_job(t, "c", ran)]
        return jobs

    rec = EventRecorder()
    async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock) as rt:
        rt.add_listener(rec)
        rt.add_listener(lambda e: ids.append(f"streaming job {e.output_operation_info.batch_time}.{e.output_operation_info.id}")
                        if isinstance(e, OutputOperationStarted) else None)
        await rt.start()
        await advance(rt, clock, Seconds(2))
        await rt.stop()
    assert ran == [("a", 1000), ("b", 1000), ("c", 1000), ("a", 2000), ("b", 2000), ("c", 2000)]
    assert ids[:3] == ["streaming job 1000 ms.0", "streaming job 1000 ms.1", "streaming job 1000 ms.2"]
    infos = rec.completed_batches[0].output_operation_infos
    assert [infos[i].name for i in range(3)] == ["a", "b", "c"]


def test_job_id_is_sparks_format() -> None:
    """A job's id is 'streaming job <ms> ms.<n>' once its JobSet numbers it."""
    from scheduler import JobSet

    jobs = [noop_job(Time(1500)), noop_job(Time(1500))]
    JobSet(Time(1500), jobs, Time(1500))
    assert [j.id for j in jobs] == ["streaming job 1500 ms.0", "streaming job 1500 ms.1"]


async def test_per_tick_order_matches_spark(clock: ManualClock) -> None:
    """Per tick: allocate input, generate jobs, submit, then the checkpoint hook; completion hooks after the jobs."""
    order: list[str] = []
    graph = ScriptedGraph(lambda t: [noop_job(t)])
    hook = RecordingHook()

    class OrderHook(RecordingHook):
        async def batch_generated(self, time: Time, pending_times: list[Time]) -> None:  # type: ignore[override]
            order.append(f"hook.generated {time.milliseconds}")

        async def batch_completed(self, time: Time) -> None:
            order.append(f"hook.completed {time.milliseconds}")

    async with StreamingRuntime(graph, Seconds(1), clock=clock, hooks=[OrderHook(), hook]) as rt:
        await rt.start()
        await advance(rt, clock)
        await rt.stop()
    assert graph.calls[:4] == [("start", 0), ("allocate", 1000), ("generate", 1000), ("clear", 1000)]
    assert order == ["hook.generated 1000", "hook.completed 1000"]
    assert hook.pending_seen == [[1000]]  # the batch was already submitted when the checkpoint hook ran


async def test_events_of_a_batch_come_in_sparks_order(clock: ManualClock) -> None:
    """With one job slot, a batch's events are Submitted, Started, then each op Started/Completed, then Completed."""
    rec = EventRecorder()
    graph = ScriptedGraph(lambda t: [noop_job(t, "a"), noop_job(t, "b")])
    async with StreamingRuntime(graph, Seconds(1), clock=clock) as rt:
        rt.add_listener(rec)
        await rt.start()
        await advance(rt, clock)
        await rt.stop()
    assert names(rec) == [
        "BatchSubmitted", "BatchStarted",
        "OutputOperationStarted", "OutputOperationCompleted",
        "OutputOperationStarted", "OutputOperationCompleted",
        "BatchCompleted",
    ]


async def test_snapshots_show_what_was_known_when_posted(clock: ManualClock) -> None:
    """BatchSubmitted has no start or end; BatchStarted has a start but no op start; BatchCompleted has everything."""
    rec = EventRecorder()
    async with StreamingRuntime(ScriptedGraph(lambda t: [noop_job(t)]), Seconds(1), clock=clock) as rt:
        rt.add_listener(rec)
        await rt.start()
        await advance(rt, clock)
        await rt.stop()
    submitted = rec.of_type(BatchSubmitted)[0].batch_info  # type: ignore[union-attr]
    started = rec.of_type(BatchStarted)[0].batch_info  # type: ignore[union-attr]
    completed = rec.of_type(BatchCompleted)[0].batch_info  # type: ignore[union-attr]
    assert submitted.processing_start_time is None and submitted.processing_end_time is None
    assert submitted.output_operation_infos[0].start_time is None
    assert started.processing_start_time == Time(1000) and started.processing_end_time is None
    assert started.output_operation_infos[0].start_time is None
    assert completed.scheduling_delay == Milliseconds(0) and completed.output_operation_infos[0].end_time == Time(1000)


async def test_empty_batch_posts_no_events_but_is_finalised(clock: ManualClock) -> None:
    """A batch with no jobs posts no listener events, yet its hooks still run in order."""
    rec = EventRecorder()
    hook = RecordingHook()
    graph = ScriptedGraph(lambda t: [] if t == Time(2000) else [noop_job(t)])
    async with StreamingRuntime(graph, Seconds(1), clock=clock, hooks=[hook]) as rt:
        rt.add_listener(rec)
        await rt.start()
        await advance(rt, clock, Seconds(3))
        await rt.stop()
    assert [b.batch_time.milliseconds for b in rec.completed_batches] == [1000, 3000]
    assert not [e for e in rec.events if isinstance(e, BatchSubmitted) and e.batch_info.batch_time == Time(2000)]
    assert hook.completed == [1000, 2000, 3000]


async def test_timer_behind_generates_every_missed_batch_in_order(clock: ManualClock) -> None:
    """Jumping the clock by five intervals generates the five missed batches, in order, none skipped."""
    rec = EventRecorder()
    async with StreamingRuntime(ScriptedGraph(lambda t: [noop_job(t)]), Seconds(1), clock=clock) as rt:
        rt.add_listener(rec)
        await rt.start()
        await advance(rt, clock, Seconds(5))
        await rt.stop()
    batches = rec.completed_batches
    assert [b.batch_time.milliseconds for b in batches] == [1000, 2000, 3000, 4000, 5000]
    # All five were submitted at 5000: the scheduling delay is measured from submission.
    assert {b.submission_time for b in batches} == {Time(5000)}


async def test_delays_follow_job_durations_on_the_manual_clock(clock: ManualClock) -> None:
    """A 1500 ms job every 1000 ms makes each batch wait 500 ms longer than the one before."""
    rec = EventRecorder()
    graph = ScriptedGraph(lambda t: [sleeping_job(clock, t, 1500)])
    async with StreamingRuntime(graph, Seconds(1), clock=clock, abandon_after=Milliseconds(0)) as rt:
        rt.add_listener(rec)
        await rt.start()
        # Advance, then wait until every tick so far is submitted (the generator handles a tick
        # after the timer has parked again, so parked sleepers alone do not say it) and the timer
        # and the running job are parked.
        for to in (1000, 2000, 2500, 3000, 4000, 5000, 5500):
            clock.set_time(Time(to))
            await rec.wait_for(lambda events, ticks=to // 1000: sum(type(e) is BatchSubmitted for e in events) == ticks)
            await clock.wait_for_sleepers(2)
        await rt.listener_bus.wait_delivered()
        got = [(b.batch_time.milliseconds, b.scheduling_delay, b.processing_delay, b.total_delay) for b in rec.completed_batches]
        await rt.stop(graceful=False)
    assert got == [
        (1000, Milliseconds(0), Milliseconds(1500), Milliseconds(1500)),
        (2000, Milliseconds(500), Milliseconds(1500), Milliseconds(2000)),
        (3000, Milliseconds(1000), Milliseconds(1500), Milliseconds(2500)),
    ]


async def test_concurrent_jobs_bound_and_in_order_completion_hooks(clock: ManualClock) -> None:
    """With concurrent_jobs=2 at most two jobs ever run, and hooks run in batch order though batch 2 finishes first."""
    gate = Gate()
    hook = RecordingHook()
    rec = EventRecorder()
    graph = ScriptedGraph(lambda t: [gate.job(t, f"{t.milliseconds}.{i}") for i in range(3)])
    async with StreamingRuntime(graph, Seconds(1), clock=clock, concurrent_jobs=2, hooks=[hook]) as rt:
        rt.add_listener(rec)
        await rt.start()
        clock.advance(Seconds(1))
        await gate.wait_started("1000.0", "1000.1")
        await advance_until_parked(clock, Seconds(1))
        assert gate.running == 2 and "1000.2" not in gate.started
        for key, nxt in (("1000.1", "1000.2"), ("1000.2", "2000.0"), ("2000.0", "2000.1"), ("2000.1", "2000.2")):
            gate.open(key)
            await gate.wait_started(nxt)
            assert gate.running == 2
        gate.open("2000.2")
        await rec.wait_for_batches(1)
        assert rec.completed_batches[0].batch_time == Time(2000)
        assert rt.scheduler.statistics().batches_completed == 1  # batch 2000 completed...
        assert hook.completed == []  # ...but waits for batch 1000 before it is finalised
        gate.open("1000.0")
        await rt.wait_until_idle()
        assert hook.completed == [1000, 2000]
        await rt.stop()
    assert gate.max_running == 2


async def test_a_huge_concurrent_jobs_starts_only_the_workers_its_jobs_need_at_once(clock: ManualClock) -> None:
    """concurrent_jobs of a million costs nothing up front: batches one after another keep to one worker, a batch of
    three jobs that run at once starts two more, and batches after it start none (Spark's pool starts threads as jobs
    come)."""
    gate = Gate()

    def jobs(t: Time) -> list[Job]:
        if t == Time(21_000):
            return [gate.job(t, f"wide.{i}") for i in range(3)]
        return [noop_job(t)]

    async with StreamingRuntime(ScriptedGraph(jobs), Seconds(1), clock=clock, concurrent_jobs=1_000_000) as rt:
        await rt.start()
        await advance(rt, clock, times=20)
        assert rt.scheduler.statistics().workers_started == 1
        clock.advance(Seconds(1))
        await gate.wait_started("wide.0", "wide.1", "wide.2")
        assert gate.running == 3 and rt.scheduler.statistics().workers_started == 3
        for i in range(3):
            gate.open(f"wide.{i}")
        await rt.wait_until_idle()
        await advance(rt, clock, times=20)
        stats = rt.scheduler.statistics()
        assert stats.workers_started == 3 and stats.batches_completed == 41
        await rt.stop()


async def test_sync_jobs_run_in_worker_threads_async_jobs_on_the_loop(clock: ManualClock) -> None:
    """A plain job function runs in a worker thread; an async one runs on the event loop thread."""
    loop_thread = threading.get_ident()
    seen: dict[str, int] = {}

    def sync_fn() -> None:
        seen["sync"] = threading.get_ident()

    async def async_fn() -> None:
        seen["async"] = threading.get_ident()

    graph = ScriptedGraph(lambda t: [Job(t, sync_fn), Job(t, async_fn)])
    async with StreamingRuntime(graph, Seconds(1), clock=clock) as rt:
        await rt.start()
        await advance(rt, clock)
        await rt.stop()
    assert seen["async"] == loop_thread and seen["sync"] != loop_thread


async def test_failed_job_reports_and_keeps_running(clock: ManualClock) -> None:
    """A failing job completes its batch with a failure reason, reaches the waiter, and later batches still run."""
    rec = EventRecorder()
    hook = RecordingHook()

    def make(t: Time) -> list[Job]:
        async def boom() -> None:
            raise ValueError("boom")

        return [Job(t, boom, name="bad") if t == Time(1000) else noop_job(t), noop_job(t, "ok")]

    async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock, hooks=[hook]) as rt:
        rt.add_listener(rec)
        await rt.start()
        await advance(rt, clock, Seconds(2))
        with pytest.raises(JobFailedError) as info:
            await rt.await_termination(Seconds(1))
        assert rt.scheduler.pending_times() == [Time(1000)]
        await rt.stop()
    err = info.value
    assert str(err) == "Error running job streaming job 1000 ms.0: ValueError: boom"
    assert isinstance(err.__cause__, ValueError) and err.job_id == "streaming job 1000 ms.0"
    first = rec.completed_batches[0]
    assert first.failed and "ValueError: boom" in (first.output_operation_infos[0].failure_reason or "")
    assert first.output_operation_infos[1].failure_reason is None
    failed_op = [e for e in rec.of_type(OutputOperationCompleted) if e.output_operation_info.failure_reason]  # type: ignore[union-attr]
    assert len(failed_op) == 1
    assert [b.batch_time.milliseconds for b in rec.completed_batches] == [1000, 2000]
    assert hook.completed == [2000]  # the failed batch is not committed


async def test_generation_error_reaches_waiter_without_events(clock: ManualClock) -> None:
    """An exception while generating a batch is reported for that time, posts no events, and the next batch runs."""
    rec = EventRecorder()

    def make(t: Time) -> list[Job]:
        if t == Time(1000):
            raise RuntimeError("bad graph")
        return [noop_job(t)]

    async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock) as rt:
        rt.add_listener(rec)
        await rt.start()
        await advance(rt, clock, Seconds(2))
        await rt.stop()
        with raises_exactly(JobFailedError, "Error generating jobs for time 1000 ms: RuntimeError: bad graph"):
            await rt.await_termination()
    assert [b.batch_time.milliseconds for b in rec.completed_batches] == [2000]


async def test_input_infos_reach_batch_info(clock: ManualClock) -> None:
    """Records reported by input streams while generating are the batch's num_records."""
    rec = EventRecorder()
    graph = ScriptedGraph(lambda t: [noop_job(t)], records=lambda t: t.milliseconds // 100)
    async with StreamingRuntime(graph, Seconds(1), clock=clock) as rt:
        rt.add_listener(rec)
        await rt.start()
        await advance(rt, clock, Seconds(2))
        await rt.stop()
    assert [b.num_records for b in rec.completed_batches] == [10, 20]


async def test_one_log_line_per_completed_batch_with_three_delays(clock: ManualClock) -> None:
    """Each completed batch logs one 'batch completed' line carrying its scheduling, processing and total delay."""
    with capture_events() as logs:
        async with StreamingRuntime(ScriptedGraph(lambda t: [sleeping_job(clock, t, 300)]), Seconds(1), clock=clock) as rt:
            await rt.start()
            clock.set_time(Time(1000))
            await clock.wait_for_sleepers(2)
            clock.set_time(Time(1300))
            await rt.wait_until_idle()
            await rt.stop()
    lines = [entry for entry in logs if entry["event"] == "batch completed"]
    assert len(lines) == 1
    line = lines[0]
    assert (line["batch_time"], line["scheduling_delay_ms"], line["processing_delay_ms"], line["total_delay_ms"]) == (1000, 0, 300, 300)
    assert line["component"] == "JobScheduler" and line["log_level"] == "info"


async def test_scheduler_repr_summarises_state(clock: ManualClock) -> None:
    """The scheduler's repr shows running and queued jobs and batch counts."""
    gate = Gate()
    async with StreamingRuntime(ScriptedGraph(lambda t: [gate.job(t, "a"), gate.job(t, "b")]), Seconds(1), clock=clock) as rt:
        await rt.start()
        clock.advance(Seconds(1))
        await gate.wait_started("a")
        assert repr(rt.scheduler) == (
            "<JobScheduler [jobs: 1 running, 1 queued | batches: 1 pending, 0 completed, 0 failed]>"
        )
        gate.open("a")
        gate.open("b")
        await rt.wait_until_idle()
        await rt.stop()


def test_bad_concurrency_and_duration_are_refused() -> None:
    """A non-positive concurrent_jobs or batch duration is refused with a clear message."""
    graph = ScriptedGraph(lambda t: [])
    with pytest.raises(ValueError, match=r"^concurrent_jobs must be a positive int, got 0$"):
        JobScheduler(graph, Seconds(1), clock=ManualClock(), concurrent_jobs=0)
    with pytest.raises(ValueError, match=r"^batch duration must be a positive multiple of 1 ms, got 0 ms; pass e.g. Seconds\(1\)$"):
        JobScheduler(graph, Milliseconds(0), clock=ManualClock())


async def test_scheduler_runs_alone_with_a_plain_listener(clock: ManualClock) -> None:
    """The JobScheduler runs without the runtime, telling a bare JobSchedulerListener about each batch."""
    told: list[str] = []

    class Listener:
        async def on_batch_submitted(self, job_set: object) -> None:
            told.append("submitted")

        async def on_batch_started(self, job_set: object) -> None:
            told.append("started")

        async def on_job_started(self, job: object, job_set: object) -> None:
            told.append("job started")

        async def on_job_completed(self, job: object, job_set: object) -> None:
            told.append("job completed")

        async def on_batch_completed(self, job_set: object) -> None:
            told.append("completed")

    scheduler = JobScheduler(ScriptedGraph(lambda t: [noop_job(t)]), Seconds(1), clock=clock, listener=Listener())
    async with anyio.create_task_group() as tg:
        first = await tg.start(scheduler.run)
        assert first == Time(1000)
        await advance(scheduler, clock)
        await scheduler.stop(graceful=False)
    assert told == ["submitted", "started", "job started", "job completed", "completed"]


async def test_a_finished_job_lets_go_of_its_function_so_a_closure_cycle_is_freed_without_the_collector(
        clock: ManualClock) -> None:
    """A job whose function refers back to the job (as an output's closures do, for its id) is freed by reference counting
    once it ran: a stream of batches leaves no garbage for the collector's passes."""
    import gc
    import weakref

    class Data:
        pass

    held: list[weakref.ref[Data]] = []

    def make(t: Time) -> list[Job]:
        data = Data()
        held.append(weakref.ref(data))
        holder: list[Job] = []

        async def run() -> None:
            assert holder[0].output_op_id == 0 and data is not None

        job = Job(t, run, name="cycle")
        holder.append(job)
        return [job]

    gc.disable()
    try:
        async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock) as rt:
            await rt.start()
            await advance(rt, clock, Seconds(3))
            assert len(held) == 3 and all(ref() is None for ref in held)
            await rt.stop()
    finally:
        gc.enable()
