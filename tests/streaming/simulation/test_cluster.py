"""The cluster model: jobs compete for task slots (FIFO or FAIR), processors are shared, overheads and failures cost time.

Every expected number here is worked out by hand from the model's rules, so a change in the
scheduling (which task gets a freed slot, when a stage starts, how processor sharing divides
time) shows up as a wrong number, not a tolerance.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from scheduler import Milliseconds, VirtualClock
from streaming.simulation import (
    Backpressure,
    ClusterModel,
    Constant,
    ConstantRate,
    Costs,
    Exponential,
    Failures,
    InputModel,
    ModelError,
    OutputModel,
    SimulatedCluster,
    SimulatedGraph,
    SimulationModel,
    Stage,
    simulate,
)

INTERVAL = Milliseconds(1000)


def _model(outputs: list[OutputModel], **fields: Any) -> SimulationModel:
    fields.setdefault("batches", 6)
    return SimulationModel(INTERVAL, outputs, **fields)


def _delays(model: SimulationModel) -> list[tuple[int, int]]:
    """Each batch's (scheduling delay, processing delay)."""
    return [(b.scheduling_delay.milliseconds, b.processing_delay.milliseconds)  # type: ignore[union-attr]
            for b in simulate(model).batches]


def _op_durations(model: SimulationModel) -> list[list[int]]:
    """Each batch's output operation durations, in operation order."""
    out = []
    for b in simulate(model).batches:
        out.append([op.duration.milliseconds for _, op in sorted(b.output_operation_infos.items())])  # type: ignore[union-attr]
    return out


TWO_STAGES = OutputModel("word-count", stages=[Stage(2, Constant(300)), Stage(2, Constant(200))])


def test_a_job_runs_its_stages_one_after_the_other_on_the_slots() -> None:
    """Two stages of two tasks: 500 ms on two slots (the stage's tasks in parallel), 1000 ms on one."""
    assert _delays(_model([TWO_STAGES], cluster=ClusterModel(1, 2))) == [(0, 500)] * 6
    assert _delays(_model([TWO_STAGES], cluster=ClusterModel(1, 1))) == [(0, 1000)] * 6
    assert _delays(_model([TWO_STAGES], cluster=ClusterModel(2, 1))) == [(0, 500)] * 6


def test_without_a_cluster_model_stages_take_their_longest_task() -> None:
    """No cluster: each job as if alone on a cluster of its own, the sum over stages of the longest task."""
    assert _delays(_model([TWO_STAGES])) == [(0, 500)] * 6


def test_concurrent_jobs_share_the_slots_instead_of_multiplying_them() -> None:
    """Three outputs of two 300 ms tasks on two slots take 900 ms per batch whatever the concurrency.

    Without a cluster model, concurrentJobs = 3 would run the three jobs side by side in 300 ms.
    """
    three = [OutputModel(n, stages=[Stage(2, Constant(300))]) for n in ("a", "b", "c")]
    for jobs in (1, 2, 3):
        assert _delays(_model(three, cluster=ClusterModel(1, 2), concurrent_jobs=jobs)) == [(0, 900)] * 6
    assert _delays(_model(three, concurrent_jobs=3)) == [(0, 300)] * 6


def test_an_overloaded_cluster_stays_overloaded_under_more_concurrency() -> None:
    """1200 ms of work on both slots per 1000 ms batch: the delay grows 200 ms a batch at any concurrency."""
    heavy = OutputModel("heavy", stages=[Stage(2, Constant(1200))])
    growing = [(200 * k, 1200) for k in range(6)]
    assert _delays(_model([heavy], cluster=ClusterModel(1, 2), concurrent_jobs=1)) == growing
    # Two batches at once: each gets one slot, so each task set runs in two rounds of 1200 ms.
    delays = _delays(_model([heavy], cluster=ClusterModel(1, 2), concurrent_jobs=2, batches=8))
    ends = [1000 * (k + 1) + s + p for k, (s, p) in enumerate(delays)]
    assert [b - a for a, b in itertools.pairwise(ends)][2:] == [1200] * 5  # one batch's work per 1200 ms, as with one job
    # Without the cluster model the same configuration wrongly looks stable.
    assert _delays(_model([heavy], concurrent_jobs=2)) == [(0, 1200)] * 6


def test_fifo_gives_freed_slots_to_the_earliest_job_fair_to_the_least_served() -> None:
    """Job a (four 100 ms tasks) takes both slots; job b (one 100 ms task) arrives at the same instant and waits.

    When both slots free at 100 ms, FIFO gives them to a again (a ends at 200 ms, b at 300 ms);
    FAIR gives one to a and one to b, the job with fewer running tasks (b ends at 200 ms, a at 300 ms).
    """
    outputs = [OutputModel("a", stages=[Stage(4, Constant(100))]), OutputModel("b", stages=[Stage(1, Constant(100))])]
    fifo = _op_durations(_model(outputs, cluster=ClusterModel(1, 2, "FIFO"), concurrent_jobs=2))
    fair = _op_durations(_model(outputs, cluster=ClusterModel(1, 2, "FAIR"), concurrent_jobs=2))
    assert fifo == [[200, 300]] * 6
    assert fair == [[300, 200]] * 6


def test_slots_beyond_the_processors_share_them() -> None:
    """local[4] on two processors: four 300 ms tasks take 600 ms, as two rounds on two slots would."""
    four = OutputModel("four", stages=[Stage(4, Constant(300))])
    assert _delays(_model([four], cluster=ClusterModel(1, 4, cpus=2))) == [(0, 600)] * 6
    assert _delays(_model([four], cluster=ClusterModel(1, 4))) == [(0, 300)] * 6
    # 100 ms and 300 ms on one processor: both at half speed until the short one ends at 200 ms,
    # then the long one alone with 200 ms left: 400 ms.
    pair = OutputModel("pair", stages=[Stage(2, Constant(0))])  # replaced below by a function of the task
    uneven = OutputModel("uneven", stages=_UnevenTasks((100, 300)))
    assert _delays(_model([uneven], cluster=ClusterModel(1, 2, cpus=1))) == [(0, 400)] * 6
    assert _delays(_model([pair], cluster=ClusterModel(1, 2, cpus=1))) == [(0, 0)] * 6


def test_tasks_that_keep_a_processor_busy_only_part_of_the_time_share_less() -> None:
    """task_cpu: four tasks each using half a processor fit on two (300 ms); at 3/4 each, all run at 2/3 speed (450 ms)."""
    four = OutputModel("four", stages=[Stage(4, Constant(300))])
    assert _delays(_model([four], cluster=ClusterModel(1, 4, cpus=2, task_cpu=0.5))) == [(0, 300)] * 6
    assert _delays(_model([four], cluster=ClusterModel(1, 4, cpus=2, task_cpu=0.75))) == [(0, 450)] * 6


def test_driver_work_runs_one_job_at_a_time_with_one_driver_thread() -> None:
    """Three operations of 100 ms driver overhead and one 100 ms task: the driver serialises the overheads.

    Unbounded, the three run their overheads together (200 ms each); with one driver thread the
    third starts its overhead at 200 ms and ends at 400 ms.
    """
    three = [OutputModel(n, stages=[Stage(1, Constant(100))], overhead=Constant(100)) for n in ("a", "b", "c")]
    free = _op_durations(_model(three, cluster=ClusterModel(1, 3), concurrent_jobs=3))
    serial = _op_durations(_model(three, cluster=ClusterModel(1, 3, driver_threads=1), concurrent_jobs=3))
    assert free == [[200, 200, 200]] * 6
    assert serial == [[200, 300, 400]] * 6
    # Two jobs on one shared processor: both overheads at half speed (until 200 ms), then both
    # tasks at half speed (until 400 ms).
    shared = _op_durations(_model(three[:2], cluster=ClusterModel(1, 2, cpus=1, driver_on_cpus=True), concurrent_jobs=2))
    assert shared == [[400, 400]] * 6


class _UnevenTasks:
    """Stage work given as fixed per-task durations (the StageWork protocol a trace replay uses)."""

    def __init__(self, durations: tuple[int, ...]) -> None:
        self.durations = durations

    def sample_stages(self, batch: object, rng: object) -> tuple[tuple[int, ...], ...]:
        return (self.durations,)


def test_overheads_add_per_job_stage_and_task() -> None:
    """Job 20 ms before its first stage, 50 ms between stages, 5 ms in every task's slot: 20 + 305 + 50 + 205."""
    cluster = ClusterModel(1, 2, job_overhead_ms=20, stage_overhead_ms=50, task_overhead_ms=5)
    assert _delays(_model([TWO_STAGES], cluster=cluster)) == [(0, 580)] * 6


def test_the_work_drawn_is_the_same_under_any_cluster_or_concurrency() -> None:
    """Common random numbers: the slot time summed over the run is the same in every configuration."""
    out = OutputModel("noisy", stages=[Stage(3, Exponential(150)), Stage(2, Exponential(80))])
    busy = set()
    for cluster in (ClusterModel(1, 2), ClusterModel(2, 2, "FAIR"), ClusterModel(1, 4, cpus=2)):
        for jobs in (1, 3):
            result = simulate(_model([out], cluster=cluster, concurrent_jobs=jobs, batches=30, seed=4))
            assert result.cluster is not None and result.cluster.tasks == 30 * 5
            busy.add(result.cluster.busy_ms)
    assert len(busy) == 1 and busy.pop() > 0


def test_a_processing_model_is_one_task_on_the_cluster() -> None:
    """An output given by its duration is a job of one task: D/D/1 on one slot is exact."""
    job = OutputModel("job", Constant(1250))
    assert _delays(_model([job], cluster=ClusterModel(1, 1), batches=10)) == [(250 * k, 1250) for k in range(10)]


@pytest.mark.anyio
async def test_a_failed_job_takes_the_context_down_and_every_job_in_flight_starts_over() -> None:
    """a (100 ms) fails at 100 ms; b's 300 ms task is lost; after 50 ms down both start over: a ends at 250, b at 450."""
    clock = VirtualClock(0)
    cluster = SimulatedCluster(ClusterModel(1, 2), clock, downtime_ms=50)
    ends: dict[str, int] = {}

    async def job(name: str, stages: tuple[tuple[int, ...], ...], fails: bool) -> None:
        await cluster.run(stages, fails=fails)
        ends[name] = clock.now().milliseconds

    async with anyio.create_task_group() as tg:
        await tg.start(clock.run)
        async with anyio.create_task_group() as jobs:
            jobs.start_soon(job, "a", ((100,),), True)
            jobs.start_soon(job, "b", ((300,),), False)
        tg.cancel_scope.cancel()
    assert ends == {"a": 250, "b": 450}
    stats = cluster.statistics
    assert (stats.failures, stats.lost_tasks, stats.down_ms, stats.tasks) == (1, 1, 50, 3)
    assert cluster.free_slots == 2 and cluster.running_tasks == 0


def test_failures_delay_the_run_and_never_change_the_work() -> None:
    """With failures: the same records and drawn work, some restarts, and later ends than without."""
    out = OutputModel("job", stages=[Stage(2, Constant(200))])
    base = _model([out], cluster=ClusterModel(1, 2), batches=40, seed=3, input=ConstantRate(100))
    clean = simulate(base)
    failing = simulate(base.evolve(failures=Failures(0.2, 1500)))
    assert failing.cluster is not None and clean.cluster is not None
    assert failing.cluster.failures > 0 and clean.cluster.failures == 0
    assert failing.cluster.down_ms == 1500 * failing.cluster.failures
    assert [b.num_records for b in failing.batches] == [b.num_records for b in clean.batches]
    # Each failure re-runs its job's two tasks, plus any task lost in flight.
    assert failing.cluster.tasks == clean.cluster.tasks + 2 * failing.cluster.failures
    assert failing.summary.scheduling_delay.max_ms >= 1500
    assert "failures" in failing.format()


def test_failures_without_a_cluster_model_keep_jobs_independent() -> None:
    """Failures alone: the jobs still run as independent sleeps between restarts."""
    out = OutputModel("job", stages=[Stage(2, Constant(300)), Stage(2, Constant(200))])
    assert _delays(_model([out], failures=Failures(0.0, 100))) == [(0, 500)] * 6


def test_each_input_has_its_own_rate_cap_and_backpressure() -> None:
    """Two inputs: one capped at 300 records/s with 500/s arriving, the other unthrottled at 200/s."""
    model = _model(
        [OutputModel("job", Constant(10))],
        inputs=[InputModel(ConstantRate(500), name="clicks", max_rate=300), InputModel(ConstantRate(200), name="views")],
        batches=5,
    )
    result = simulate(model)
    per_stream = [{sid: info.num_records for sid, info in b.stream_id_to_input_info.items()} for b in result.batches]
    assert per_stream == [{0: 300, 1: 200}] * 5
    assert [b.num_records for b in result.batches] == [500] * 5
    assert result.source_backlog == 5 * 200  # only the capped input holds records back
    assert result.final_rates == (300, None)


def test_backpressure_on_one_input_leaves_the_other_alone() -> None:
    """2 ms a record, 1,100 records a second, backpressure on input 0: its rate comes down, input 1 keeps its full rate."""
    model = _model(
        [OutputModel("job", stages=[Stage(1, _PerRecord(2.0))])],
        inputs=[InputModel(ConstantRate(1000), backpressure=Backpressure(min_rate=10)), InputModel(ConstantRate(100))],
        cluster=ClusterModel(1, 1),
        batches=30,
    )
    result = simulate(model)
    rate0, rate1 = result.final_rates
    # Input 1 takes 200 ms of each 1000 ms batch, so input 0 can have about 400 records a second.
    assert rate0 is not None and 300 < rate0 < 500 and rate1 is None
    assert {b.stream_id_to_input_info[1].num_records for b in result.batches} == {100}
    assert result.batches[-1].stream_id_to_input_info[0].num_records < 1000


class _PerRecord:
    """A task taking ``ms`` per record of its batch (a ProcessingTime)."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def sample(self, batch: Any, rng: object) -> int:
        return round(self.ms * batch.num_records)


def test_a_sync_checkpoint_longer_than_the_interval_holds_up_the_next_batches() -> None:
    """100 ms generation and a 1500 ms checkpoint on the generator: batches are submitted 1600 ms apart."""
    costs = Costs(generation=Constant(100), checkpoint=Constant(1500))
    result = simulate(_model([OutputModel("job", Constant(500))], costs=costs, batches=4))
    assert [b.submission_time.milliseconds for b in result.batches] == [1100, 2700, 4300, 5900]
    async_costs = Costs(generation=Constant(100), checkpoint=Constant(1500), checkpoint_mode="async")
    result = simulate(_model([OutputModel("job", Constant(500))], costs=async_costs, batches=4))
    assert [b.submission_time.milliseconds for b in result.batches] == [1100, 2100, 3100, 4100]


def test_a_commit_write_on_the_generator_delays_generation_too() -> None:
    """A 1400 ms commit after each 500 ms batch: the generator commits batch 1000 from 1500 to 2900 ms, so batch 2000 waits for it."""
    result = simulate(_model([OutputModel("job", Constant(500))], costs=Costs(commit=Constant(1400)), batches=4))
    submitted = [b.submission_time.milliseconds for b in result.batches]
    assert submitted[:2] == [1000, 2900]
    assert len(submitted) == 4 and submitted == sorted(submitted)


def test_a_slow_listener_blocks_the_scheduler_once_its_queue_is_full() -> None:
    """400 ms per event and room for two: five events per batch make batches wait more and more."""
    fast = _delays(_model([OutputModel("job", Constant(500))], costs=Costs(listener=Constant(1))))
    slow = _delays(_model([OutputModel("job", Constant(500))], costs=Costs(listener=Constant(400), listener_capacity=2)))
    assert fast == [(0, 500)] * 6
    waits = [s for s, _ in slow]
    assert waits[0] == 0 and waits[-1] > waits[1] > 0


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Stage(0, Constant(1)), "tasks"),
        (lambda: Stage(2, 5), "task"),
        (lambda: ClusterModel(0, 2), "cluster.executors"),
        (lambda: ClusterModel(1, 2, "ROUND_ROBIN"), "cluster.scheduling_mode"),
        (lambda: ClusterModel(1, 2, cpus=0), "cluster.cpus"),
        (lambda: ClusterModel(1, 2, task_overhead_ms=-1), "cluster.task_overhead"),
        (lambda: ClusterModel(1, 2, task_cpu=0), "cluster.task_cpu"),
        (lambda: ClusterModel(1, 2, task_cpu=1.5), "cluster.task_cpu"),
        (lambda: ClusterModel(1, 2, driver_on_cpus=True), "cluster.driver_on_cpus"),
        (lambda: ClusterModel(1, 2, driver_threads=0), "cluster.driver_threads"),
        (lambda: OutputModel("x", Constant(1), overhead=5), "overhead"),  # type: ignore[arg-type]
        (lambda: Failures(1.0), "failures.job_failure_probability"),
        (lambda: Failures(0.1, -5), "failures.downtime"),
        (lambda: Costs(checkpoint_mode="later"), "costs.checkpoint_mode"),
        (lambda: Costs(listener=3), "costs.listener"),  # type: ignore[arg-type]
        (lambda: OutputModel("x"), "processing"),
        (lambda: OutputModel("x", Constant(1), stages=[Stage(1, Constant(1))]), "stages"),
        (lambda: OutputModel("x", stages=[]), "stages"),
        (lambda: InputModel(ConstantRate(1), max_rate=0), "max_rate"),
        (lambda: SimulationModel(INTERVAL, [TWO_STAGES], inputs=[InputModel(ConstantRate(1))], max_rate=5), "inputs"),
        (lambda: SimulationModel(INTERVAL, [TWO_STAGES], cluster=4), "cluster"),  # type: ignore[arg-type]
    ],
)
def test_bad_models_are_refused_naming_the_field(build: Any, field: str) -> None:
    """Every new field is validated, and the error starts with its name."""
    with pytest.raises(ModelError) as caught:
        build()
    assert caught.value.field == field


def test_a_cluster_model_needs_the_virtual_clock() -> None:
    """The cluster's slots run on the virtual clock's timers: another clock is refused."""
    from scheduler import ManualClock

    with pytest.raises(ModelError, match="VirtualClock"):
        SimulatedGraph(_model([TWO_STAGES], cluster=ClusterModel()), ManualClock(0))
