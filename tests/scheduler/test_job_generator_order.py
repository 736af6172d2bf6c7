"""JobGenerator message order: finished batches go ahead of a backlog of generations; a planner runs around each batch."""

from __future__ import annotations

from collections.abc import Sequence

import anyio.lowlevel
import pytest

from listeners import BatchInfo, EventRecorder
from scheduler import BatchPlanner, Job, JobSet, ManualClock, Milliseconds, Seconds, Time
from streaming import StreamingRuntime
from tests.anyio_support import settle
from tests.support import ScriptedGraph, advance, noop_job, sleeping_job

pytestmark = pytest.mark.anyio


class YieldingGraph(ScriptedGraph):
    """A graph whose generation yields to the event loop, as one reading input does."""

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        await anyio.lowlevel.checkpoint()
        return await super().generate_jobs(time)


class OrderPlanner:
    """A BatchPlanner recording the order of plans and finishes."""

    def __init__(self, sequential: bool = False) -> None:
        self.order: list[tuple[str, int]] = []
        self.sequential_batches = sequential

    async def plan_batch(self, time: Time) -> None:
        self.order.append(("plan", time.milliseconds))

    async def batch_finished(self, job_set: JobSet, succeeded: bool) -> None:
        self.order.append(("finish", job_set.time.milliseconds))


async def test_finished_batches_are_handled_before_queued_generations(clock: ManualClock) -> None:
    """With five ticks queued at once, each batch is finished as soon as its job ends, not after all five are generated."""
    planner = OrderPlanner()
    assert isinstance(planner, BatchPlanner)
    rt = StreamingRuntime(YieldingGraph(lambda t: [noop_job(t)]), Seconds(1), clock=clock)
    rt.scheduler.generator._planner = planner  # the planner seam, without a replayable graph
    async with rt:
        await rt.start()
        await advance(rt, clock, Seconds(5))
        await rt.stop()
    plans = [t for kind, t in planner.order if kind == "plan"]
    finishes = [t for kind, t in planner.order if kind == "finish"]
    assert plans == finishes == [1000, 2000, 3000, 4000, 5000]  # each kind in order
    # Interleaved: batch 1000 finished before the last queued tick was generated.
    assert planner.order.index(("finish", 1000)) < planner.order.index(("plan", 5000))


async def test_sequential_batches_plan_each_batch_after_the_one_before_finished(clock: ManualClock) -> None:
    """A planner asking for sequential batches: five ticks at once are planned one at a time, each after the previous finish."""
    planner = OrderPlanner(sequential=True)
    rt = StreamingRuntime(YieldingGraph(lambda t: [noop_job(t)]), Seconds(1), clock=clock)
    rt.scheduler.generator._planner = planner
    async with rt:
        await rt.start()
        await advance(rt, clock, Seconds(5))
        await rt.stop()
    # Held ticks still run as the batches of their own times: the grid is kept.
    assert planner.order == [(kind, t) for t in range(1000, 6000, 1000) for kind in ("plan", "finish")]


async def test_a_held_tick_s_batch_counts_as_submitted_when_the_tick_came(clock: ManualClock) -> None:
    """Sequential batches: batch 1000 takes 2.5 s, so the ticks of 2000, 3000 and 4000 are held until it ends (at 4000
    on the clock). Each held batch's submission time is when its tick came, as Spark submits a batch at its tick, so
    its scheduling delay shows the wait (it was 0: the batch counted as submitted only once generated)."""
    planner = OrderPlanner(sequential=True)
    recorder = EventRecorder()
    graph = ScriptedGraph(lambda t: [sleeping_job(clock, t, 2500) if t.milliseconds == 1000 else noop_job(t)])
    rt = StreamingRuntime(graph, Seconds(1), clock=clock)
    rt.scheduler.generator._planner = planner
    async with rt:
        rt.add_listener(recorder)
        await rt.start()
        for _ in range(3):  # 1000 (its job sleeps until 3500), then the ticks of 2000 and 3000, held
            clock.advance(Seconds(1))
            await settle()
        clock.advance(Seconds(1))  # 4000: batch 1000 ends, and the held batches run one after another
        await rt.wait_until_idle()
        await rt.stop()
    batches = {b.batch_time.milliseconds: b for b in recorder.completed_batches}
    assert [(t, b.submission_time.milliseconds, b.scheduling_delay.milliseconds) for t, b in sorted(batches.items())] == [
        (1000, 1000, 0), (2000, 2000, 2000), (3000, 3000, 1000), (4000, 4000, 0)]


async def test_held_ticks_are_listed_as_waiting_batches_submitted_when_their_tick_came(clock: ManualClock) -> None:
    """Sequential batches: while batch 1000 runs, the held ticks of 2000 and 3000 are running batches too (a view lists
    them as waiting, with no job yet), oldest last; once generated each is listed once, as the batch it became."""
    planner = OrderPlanner(sequential=True)
    graph = ScriptedGraph(lambda t: [sleeping_job(clock, t, 2500) if t.milliseconds == 1000 else noop_job(t)])
    rt = StreamingRuntime(graph, Seconds(1), clock=clock)
    rt.scheduler.generator._planner = planner
    async with rt:
        await rt.start()
        for _ in range(3):  # 1000 (its job sleeps until 3500), then the ticks of 2000 and 3000, held
            clock.advance(Seconds(1))
            await settle()
        running = rt.scheduler.running_batches()
        assert [(b.time.milliseconds, b.submission_time.milliseconds, len(b.jobs), b.has_started) for b in running] == [
            (1000, 1000, 1, True), (2000, 2000, 0, False), (3000, 3000, 0, False)]
        infos = [BatchInfo.from_job_set(b) for b in running]
        assert [(i.batch_time.milliseconds, i.processing_start_time, i.num_records) for i in infos[1:]] == [
            (2000, None, 0), (3000, None, 0)]
        clock.advance(Seconds(1))  # 4000: batch 1000 ends, and the held batches run one after another
        await rt.wait_until_idle()
        assert rt.scheduler.running_batches() == []
        await rt.stop()


async def test_held_ticks_an_immediate_stop_drops_stay_listed(clock: ManualClock) -> None:
    """An immediate stop while batch 1000 runs and the ticks of 2000 and 3000 are held: the held ticks stay among the
    running batches (a view of the stopped runtime counts them as dropped, as it counts a generated batch the stop
    dropped); they vanished, though the UI had listed them as waiting (lane K4)."""
    planner = OrderPlanner(sequential=True)
    graph = ScriptedGraph(lambda t: [sleeping_job(clock, t, 2500) if t.milliseconds == 1000 else noop_job(t)])
    rt = StreamingRuntime(graph, Seconds(1), clock=clock, abandon_after=Milliseconds(0))  # the stop leaves batch 1000
    rt.scheduler.generator._planner = planner
    async with rt:
        await rt.start()
        for _ in range(3):
            clock.advance(Seconds(1))
            await settle()
        await rt.stop(graceful=False)
        held = [b for b in rt.scheduler.running_batches() if not b.jobs]
        assert [(b.time.milliseconds, b.submission_time.milliseconds) for b in held] == [(2000, 2000), (3000, 3000)]
    assert [t for kind, t in planner.order if kind == "plan"] == [1000]  # the held ticks were never generated
