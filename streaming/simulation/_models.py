"""Models of the work a pipeline does: processing times per output operation and input rates.

No Spark counterpart: these are what the simulator feeds the real scheduler instead of Spark jobs.
Every sample is a whole number of milliseconds drawn from a seeded ``random.Random``, so the same
model and seed always give the same batches.
"""

from __future__ import annotations

import bisect
import math
import random
from typing import Any, Callable, Iterable, Protocol, Sequence, Union, runtime_checkable

import attrs

from scheduler import Duration, Minutes, StreamingError, Time

__all__ = [
    "Backpressure",
    "BatchContext",
    "BurstRate",
    "ClusterModel",
    "Constant",
    "ConstantRate",
    "Exponential",
    "Costs",
    "Failures",
    "FromFunction",
    "InputModel",
    "InputRate",
    "Linear",
    "LogNormal",
    "ModelError",
    "Normal",
    "OutputModel",
    "ProcessingTime",
    "Replay",
    "ReplayRate",
    "SimulationModel",
    "Stage",
    "StageWork",
    "StepRate",
    "Uniform",
]


class ModelError(StreamingError, ValueError):
    """A simulation model is invalid. The message starts with the offending field.

    Attributes:
        field: the field's path, e.g. ``"outputs[1].mean"``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message

    def within(self, prefix: str) -> ModelError:
        """The same error with ``prefix`` put in front of its field path."""
        field = f"{prefix}.{self.field}" if self.field and not self.field.startswith("[") else f"{prefix}{self.field}"
        return ModelError(field, self.reason)


def _finite(field: str, value: object, *, minimum: float = 0.0, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelError(field, f"must be a finite number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        rule = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise ModelError(field, f"must be {rule}, got {value!r}")
    return float(value)


def _whole(field: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(field, f"must be a whole number, got {value!r}")
    if value < minimum:
        raise ModelError(field, f"must be at least {minimum}, got {value!r}")
    return value


def _ms(value: float) -> int:
    # Samples are rounded to the nearest millisecond (ties to even) and never negative: the
    # runtime's durations are whole milliseconds.
    return max(0, round(value))


# -- processing time --


@attrs.frozen
class BatchContext:
    """What a processing-time model may look at for one batch.

    Attributes:
        index: the batch's position in the run, from 0.
        time: the batch time.
        batch_interval: the batch interval of the run.
        num_records: the records the input model put in this batch.
    """

    index: int
    time: Time
    batch_interval: Duration
    num_records: int


@runtime_checkable
class ProcessingTime(Protocol):
    """How long one output operation's job takes for one batch."""

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """A duration in whole milliseconds (non-negative), drawn with ``rng`` only."""
        ...


@attrs.frozen
class Constant:
    """Always ``ms`` milliseconds."""

    ms: int

    def __attrs_post_init__(self) -> None:
        _whole("ms", self.ms, minimum=0)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """``ms``."""
        return self.ms


@attrs.frozen
class Uniform:
    """Uniform between ``low_ms`` and ``high_ms``."""

    low_ms: float
    high_ms: float

    def __attrs_post_init__(self) -> None:
        low = _finite("low", self.low_ms)
        if _finite("high", self.high_ms) < low:
            raise ModelError("high", f"must not be below low ({self.low_ms:g} ms), got {self.high_ms:g} ms")

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """A uniform draw, rounded to whole milliseconds."""
        return _ms(rng.uniform(self.low_ms, self.high_ms))


@attrs.frozen
class Exponential:
    """Exponentially distributed with mean ``mean_ms`` (the M in D/M/1)."""

    mean_ms: float

    def __attrs_post_init__(self) -> None:
        _finite("mean", self.mean_ms, strict=True)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """An exponential draw, rounded to whole milliseconds."""
        return _ms(rng.expovariate(1.0 / self.mean_ms))


@attrs.frozen
class Normal:
    """Normally distributed; draws below zero are taken as zero."""

    mean_ms: float
    stddev_ms: float

    def __attrs_post_init__(self) -> None:
        _finite("mean", self.mean_ms)
        _finite("stddev", self.stddev_ms)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """A normal draw, rounded to whole milliseconds and clamped at zero."""
        return _ms(rng.normalvariate(self.mean_ms, self.stddev_ms))


@attrs.frozen
class LogNormal:
    """Log-normally distributed: ``median_ms * exp(sigma * Z)``, the usual shape of job times."""

    median_ms: float
    sigma: float

    def __attrs_post_init__(self) -> None:
        _finite("median", self.median_ms, strict=True)
        _finite("sigma", self.sigma)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """A log-normal draw, rounded to whole milliseconds."""
        return _ms(rng.lognormvariate(math.log(self.median_ms), self.sigma))


@attrs.frozen
class Linear:
    """A function of the batch's size: ``base_ms + per_record_ms * num_records``, plus optional noise.

    Attributes:
        base_ms: fixed cost per batch.
        per_record_ms: cost per input record (fractions of a millisecond allowed).
        noise: an optional model whose sample is added (e.g. ``Normal(0, 20)``; the sum is
            clamped at zero).
    """

    base_ms: float
    per_record_ms: float
    noise: ProcessingTime | None = None

    def __attrs_post_init__(self) -> None:
        _finite("base", self.base_ms)
        _finite("per_record", self.per_record_ms)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """The linear cost (plus noise), rounded to whole milliseconds."""
        value = self.base_ms + self.per_record_ms * batch.num_records
        if self.noise is not None:
            value += self.noise.sample(batch, rng)
        return _ms(value)


@attrs.frozen
class FromFunction:
    """Any function of the batch (for notebooks): ``fn(batch, rng)`` returns ms or a Duration."""

    fn: Callable[[BatchContext, random.Random], Union[int, float, Duration]]

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """``fn(batch, rng)`` in whole milliseconds."""
        value = self.fn(batch, rng)
        if isinstance(value, Duration):
            return max(0, value.milliseconds)
        return _ms(_finite("fn(batch, rng)", value, minimum=-math.inf))


def _int_tuple(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(values)


@attrs.frozen
class Replay:
    """Durations replayed from a trace, batch ``k`` taking ``durations_ms[k % n]``.

    When ``records_ms`` is given (the traced batch sizes), a batch whose size differs from its
    traced batch is corrected by ``per_record_ms * (num_records - traced_records)``: so a changed
    interval or rate factor changes the work, while the trace's batch-to-batch variation stays.
    ``per_record_ms`` is what :func:`~streaming.simulation.model_from_trace` fits from the trace.

    Attributes:
        durations_ms: the traced durations, in batch order.
        records: the traced batch sizes, aligned with ``durations_ms`` (optional).
        per_record_ms: the cost of one record used for the correction.
    """

    durations_ms: tuple[int, ...] = attrs.field(converter=_int_tuple)
    records: tuple[int, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(_int_tuple))
    per_record_ms: float = 0.0

    def __attrs_post_init__(self) -> None:
        if not self.durations_ms:
            raise ModelError("durations", "must hold at least one duration")
        for i, d in enumerate(self.durations_ms):
            _whole(f"durations[{i}]", d, minimum=0)
        if self.records is not None and len(self.records) != len(self.durations_ms):
            raise ModelError("records", f"must be as long as durations ({len(self.durations_ms)}), got {len(self.records)}")
        _finite("per_record", self.per_record_ms)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """The traced duration of batch ``index mod n``, corrected for the batch size."""
        k = batch.index % len(self.durations_ms)
        value = self.durations_ms[k]
        if self.records is None:
            return value
        return _ms(value + self.per_record_ms * (batch.num_records - self.records[k]))


# -- input rates --


@runtime_checkable
class InputRate(Protocol):
    """How many records arrive over time.

    ``cumulative(t)`` is the (possibly fractional) number of records that arrived between time 0
    and ``t`` milliseconds; a batch covering ``(start, end]`` gets
    ``floor(cumulative(end)) - floor(cumulative(start))`` records, so no record is lost or
    counted twice to rounding, whatever the interval.
    """

    def cumulative(self, t_ms: int) -> float:
        """Records arrived in ``[0, t_ms]``; non-decreasing in ``t_ms``."""
        ...


@attrs.frozen
class ConstantRate:
    """``per_second`` records every second."""

    per_second: float

    def __attrs_post_init__(self) -> None:
        _finite("rate", self.per_second)

    def cumulative(self, t_ms: int) -> float:
        """``per_second * t / 1 s``."""
        return self.per_second * t_ms / 1000


def _piecewise(starts: Sequence[int], rates: Sequence[float]) -> Callable[[int], float]:
    # cumulative() of a piecewise-constant rate: prefix sums at each start, then linear.
    prefix = [0.0]
    for i in range(1, len(starts)):
        prefix.append(prefix[-1] + rates[i - 1] * (starts[i] - starts[i - 1]) / 1000)

    def cumulative(t_ms: int) -> float:
        i = bisect.bisect_right(starts, t_ms) - 1
        if i < 0:
            return 0.0
        return prefix[i] + rates[i] * (t_ms - starts[i]) / 1000

    return cumulative


def _step_tuple(steps: Iterable[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    return tuple((a, r) for a, r in steps)


@attrs.frozen
class StepRate:
    """A rate that changes in steps: ``steps[i] = (at_ms, per_second)``, the first at 0."""

    steps: tuple[tuple[int, float], ...] = attrs.field(converter=_step_tuple)
    _cumulative: Callable[[int], float] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.steps:
            raise ModelError("steps", "must hold at least one step")
        previous = -1
        for i, (at, rate) in enumerate(self.steps):
            if i == 0 and at != 0:
                raise ModelError("steps[0].at", f"the first step must start at 0, got {at} ms")
            if at <= previous:
                raise ModelError(f"steps[{i}].at", f"steps must be in increasing time order, got {at} ms after {previous} ms")
            _finite(f"steps[{i}].rate", rate)
            previous = at
        object.__setattr__(self, "_cumulative", _piecewise([a for a, _ in self.steps], [r for _, r in self.steps]))

    def cumulative(self, t_ms: int) -> float:
        """The integral of the step function up to ``t_ms``."""
        return self._cumulative(t_ms)


@attrs.frozen
class BurstRate:
    """A base rate with periodic bursts: from ``first_ms``, every ``every_ms``, ``length_ms`` at ``burst_per_second``."""

    per_second: float
    burst_per_second: float
    every_ms: int
    length_ms: int
    first_ms: int = 0

    def __attrs_post_init__(self) -> None:
        _finite("rate", self.per_second)
        _finite("burst_rate", self.burst_per_second)
        _whole("every", self.every_ms, minimum=1)
        _whole("length", self.length_ms, minimum=0)
        _whole("first", self.first_ms, minimum=0)
        if self.length_ms > self.every_ms:
            raise ModelError("length", f"must not exceed every ({self.every_ms} ms), got {self.length_ms} ms")

    def cumulative(self, t_ms: int) -> float:
        """Base records plus the extra records of every burst up to ``t_ms``."""
        base = self.per_second * t_ms / 1000
        if t_ms <= self.first_ms:
            return base
        cycles, into = divmod(t_ms - self.first_ms, self.every_ms)
        burst_ms = cycles * self.length_ms + min(into, self.length_ms)
        return base + (self.burst_per_second - self.per_second) * burst_ms / 1000


@attrs.frozen
class ReplayRate:
    """Input replayed from a trace: ``records[k]`` arrived evenly over the k-th traced batch.

    Beyond the end of the trace it starts over, so any horizon can be simulated.
    """

    batch_interval_ms: int
    records: tuple[int, ...] = attrs.field(converter=_int_tuple)
    _prefix: tuple[int, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        _whole("batch_interval", self.batch_interval_ms, minimum=1)
        if not self.records:
            raise ModelError("records", "must hold at least one batch")
        prefix = [0]
        for i, r in enumerate(self.records):
            prefix.append(prefix[-1] + _whole(f"records[{i}]", r, minimum=0))
        object.__setattr__(self, "_prefix", tuple(prefix))

    def cumulative(self, t_ms: int) -> float:
        """Whole traced batches so far, plus the elapsed share of the current one."""
        n = len(self.records)
        k, into = divmod(t_ms, self.batch_interval_ms)
        cycles, i = divmod(k, n)
        return cycles * self._prefix[n] + self._prefix[i] + self.records[i] * into / self.batch_interval_ms


# -- the whole model --


def _task_context(batch: BatchContext, tasks: int) -> BatchContext:
    # A task sees its share of the batch's records (the input is split evenly over the tasks).
    return BatchContext(batch.index, batch.time, batch.batch_interval, batch.num_records // tasks)


@attrs.frozen
class Stage:
    """One stage of an output operation's Spark job: ``tasks`` tasks, each taking a ``task`` sample.

    A task's model sees the batch with its share of the records (``num_records // tasks``), so
    a :class:`Linear` task cost scales with the batch.

    Attributes:
        tasks: the number of tasks (the stage's partitions).
        task: the duration of one task, drawn once per task.
    """

    tasks: int
    task: ProcessingTime

    def __attrs_post_init__(self) -> None:
        _whole("tasks", self.tasks, minimum=1)
        if not isinstance(self.task, ProcessingTime):
            raise ModelError("task", f"must be a processing-time model (with sample()), got {self.task!r}")

    def sample(self, batch: BatchContext, rng: random.Random) -> tuple[int, ...]:
        """Every task's duration for ``batch``, in whole milliseconds."""
        share = _task_context(batch, self.tasks) if self.tasks > 1 else batch
        draw = self.task.sample
        return tuple(draw(share, rng) for _ in range(self.tasks))


@runtime_checkable
class StageWork(Protocol):
    """Per-task durations of a job for one batch: a tuple of stages, each a tuple of task milliseconds."""

    def sample_stages(self, batch: BatchContext, rng: random.Random) -> tuple[tuple[int, ...], ...]:
        """The stages of the job for ``batch``, drawn with ``rng`` only."""
        ...


def _stage_tuple(value: Sequence[Stage] | None) -> tuple[Stage, ...] | None:
    return None if value is None else tuple(value)


@attrs.frozen
class OutputModel:
    """One output operation: a name, and its work as one duration or as a job of stages of tasks.

    Attributes:
        name: the operation's name.
        processing: the whole job's duration (what a run without a :class:`ClusterModel` sleeps;
            with a cluster model, a job of one task of this duration).
        stages: the job as stages of tasks for the cluster model, run one stage after the
            other, each stage's tasks on the cluster's task slots. Or any object with
            ``sample_stages(batch, rng)`` (a trace's recorded tasks). Without a cluster model
            the job takes the sum over stages of the longest task.
        overhead: the operation's time on the driver outside its tasks (submitting its Spark
            jobs, collecting results, the Python around them), drawn per batch and spent before
            its first stage, holding no slot (``None``: none).
    """

    name: str
    processing: ProcessingTime | None = None
    stages: Sequence[Stage] | StageWork | None = None
    overhead: ProcessingTime | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ModelError("name", f"must be a non-empty string, got {self.name!r}")
        if self.processing is None and self.stages is None:
            raise ModelError("processing", "give the job's work: a processing-time model, or stages of tasks")
        if self.processing is not None and self.stages is not None:
            raise ModelError("stages", "give either processing or stages, not both")
        if self.processing is not None and not isinstance(self.processing, ProcessingTime):
            raise ModelError("processing", f"must be a processing-time model (with sample()), got {self.processing!r}")
        if self.stages is not None and not isinstance(self.stages, StageWork):
            stages = tuple(self.stages) if isinstance(self.stages, (list, tuple)) else None
            if not stages:
                raise ModelError("stages", f"must be a non-empty sequence of Stage, got {self.stages!r}")
            for i, stage in enumerate(stages):
                if not isinstance(stage, Stage):
                    raise ModelError(f"stages[{i}]", f"must be a Stage, got {stage!r}")
            object.__setattr__(self, "stages", stages)
        if self.overhead is not None and not isinstance(self.overhead, ProcessingTime):
            raise ModelError("overhead", f"must be a processing-time model (with sample()), got {self.overhead!r}")

    def sample_stages(self, batch: BatchContext, rng: random.Random) -> tuple[tuple[int, ...], ...]:
        """The job's tasks for ``batch``: stages of task durations (one task for a ``processing`` model)."""
        stages = self.stages
        if stages is None:
            assert self.processing is not None
            return ((self.processing.sample(batch, rng),),)
        if isinstance(stages, StageWork):
            return stages.sample_stages(batch, rng)
        return tuple(stage.sample(batch, rng) for stage in stages)


@attrs.frozen
class InputModel:
    """One input stream: its arrivals, and how it is throttled.

    Attributes:
        rate: when records arrive.
        name: a name for reports (default ``input-<id>``).
        max_rate: ``spark.streaming.receiver.maxRate`` for this input (records per second;
            ``None``: no cap).
        backpressure: this input's backpressure controller (``None``: off).
    """

    rate: InputRate
    name: str | None = None
    max_rate: float | None = None
    backpressure: Backpressure | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.rate, InputRate):
            raise ModelError("rate", f"must be an input-rate model (with cumulative()), got {self.rate!r}")
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise ModelError("name", f"must be a non-empty string, got {self.name!r}")
        if self.max_rate is not None:
            _finite("max_rate", self.max_rate, strict=True)
        if self.backpressure is not None and not isinstance(self.backpressure, Backpressure):
            raise ModelError("backpressure", f"must be a Backpressure or None, got {self.backpressure!r}")

    @property
    def rate_controlled(self) -> bool:
        """Whether this input is taken at a limited rate (a cap or backpressure)."""
        return self.max_rate is not None or self.backpressure is not None


SCHEDULING_MODES = ("FIFO", "FAIR")


@attrs.frozen
class ClusterModel:
    """Where the jobs run: executors with task slots, shared by every running job.

    Spark's task scheduler offers each free slot to the running jobs' pending tasks: in FIFO
    mode to the earliest job first (Spark's default), in FAIR mode to the job with the fewest
    running tasks (Spark's fair scheduler with one pool per job, equal weights). Stages of one
    job run one after the other. So concurrent jobs compete for slots, and ``concurrentJobs``
    only wins the slots a single job leaves idle.

    Attributes:
        executors: the executors.
        cores: task slots per executor (``spark.executor.cores``; ``local[N]`` is one executor
            with N).
        scheduling_mode: ``"FIFO"`` or ``"FAIR"`` (``spark.scheduler.mode``).
        cpus: the processors the slots share, when there are fewer than slots (``local[4]`` on
            a two-core machine): running tasks then share them equally (processor sharing),
            so each takes longer. ``None``: a processor per slot.
        task_overhead_ms: added to every task in its slot (launch, deserialisation, result).
        stage_overhead_ms: between the end of a stage and the start of the next (the DAG
            scheduler, shuffle bookkeeping); no slot is held.
        job_overhead_ms: per job, before its first stage (submission from the driver); no slot
            is held.
        driver_on_cpus: the driver runs on the same processors as the tasks (``local[N]``):
            each job's driver time (the job overhead and its operation's overhead) is work that
            shares the ``cpus`` with the running tasks, so concurrent jobs slow each other down
            on the driver too. Needs ``cpus``.
        task_cpu: the share of its slot time a task keeps a processor busy, for processor
            sharing (1: all of it; a PySpark task waits on the JVM and its sockets for part).
        driver_threads: how many jobs' driver work (job, operation and stage overheads) may
            run at once; the rest waits its turn (``1``: a Python driver, whose work holds its
            GIL; ``None``: no bound).
    """

    executors: int = 1
    cores: int = 2
    scheduling_mode: str = "FIFO"
    cpus: int | None = None
    task_overhead_ms: float = 0.0
    stage_overhead_ms: float = 0.0
    job_overhead_ms: float = 0.0
    driver_on_cpus: bool = False
    driver_threads: int | None = None
    task_cpu: float = 1.0

    def __attrs_post_init__(self) -> None:
        _whole("cluster.executors", self.executors, minimum=1)
        _whole("cluster.cores", self.cores, minimum=1)
        if self.scheduling_mode not in SCHEDULING_MODES:
            raise ModelError("cluster.scheduling_mode", f"must be FIFO or FAIR, got {self.scheduling_mode!r}")
        if self.cpus is not None:
            _whole("cluster.cpus", self.cpus, minimum=1)
        _finite("cluster.task_overhead", self.task_overhead_ms)
        _finite("cluster.stage_overhead", self.stage_overhead_ms)
        _finite("cluster.job_overhead", self.job_overhead_ms)
        if self.driver_on_cpus and self.cpus is None:
            raise ModelError("cluster.driver_on_cpus", "needs cpus: the processors the driver shares with the tasks")
        if self.driver_threads is not None:
            _whole("cluster.driver_threads", self.driver_threads, minimum=1)
        if not 0 < _finite("cluster.task_cpu", self.task_cpu, strict=True) <= 1:
            raise ModelError("cluster.task_cpu", f"must be in (0, 1], got {self.task_cpu!r}")

    @property
    def slots(self) -> int:
        """Task slots in all: ``executors * cores``."""
        return self.executors * self.cores


CHECKPOINT_MODES = ("sync", "async")


@attrs.frozen
class Costs:
    """Virtual time the engine itself spends, beside the jobs (each ``None``: free).

    Attributes:
        generation: per batch, on the JobGenerator before the batch's jobs are submitted.
        checkpoint: per batch, the checkpoint (offsets) write after the batch is submitted.
        commit: per batch, the commit write after the batch completes.
        checkpoint_mode: ``"sync"``: the writes run on the JobGenerator's task, so a slow
            write holds up the next batch (the default progress tracking); ``"async"``: they
            queue for a writer of their own and hold up nothing (async progress tracking).
        listener: per listener event, the time a host's listener takes to handle it; the bus
            queues events meanwhile and, once ``listener_capacity`` events wait, blocks the
            scheduler (the engine's lossless ``block`` policy).
        listener_capacity: that listener's queue bound.
    """

    generation: ProcessingTime | None = None
    checkpoint: ProcessingTime | None = None
    commit: ProcessingTime | None = None
    checkpoint_mode: str = "sync"
    listener: ProcessingTime | None = None
    listener_capacity: int = 10_000

    def __attrs_post_init__(self) -> None:
        for name in ("generation", "checkpoint", "commit", "listener"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, ProcessingTime):
                raise ModelError(f"costs.{name}", f"must be a processing-time model (with sample()), got {value!r}")
        if self.checkpoint_mode not in CHECKPOINT_MODES:
            raise ModelError("costs.checkpoint_mode", f"must be sync or async, got {self.checkpoint_mode!r}")
        _whole("costs.listener_capacity", self.listener_capacity, minimum=1)


@attrs.frozen
class Failures:
    """Job failures, and the restart from the checkpoint that follows each.

    A job fails with ``job_failure_probability`` (drawn per job from a random stream of its own,
    so the work of every batch is the same with and without failures). It fails at the end of
    its work; the driver is then down for ``downtime``: nothing runs, the tasks running on the
    cluster are lost, and every job in flight (the failed one included) runs again from its
    first stage once the context is back, as a restart from the checkpoint re-runs the batches
    that were not committed. The batch timer keeps its grid, so the batches due meanwhile queue
    up, as a restarted context generates them at once.

    Attributes:
        job_failure_probability: the chance that one job fails, in ``[0, 1)``.
        downtime_ms: from the failure until the context runs again (restart and recovery).
    """

    job_failure_probability: float
    downtime_ms: float = 0.0

    def __attrs_post_init__(self) -> None:
        p = _finite("failures.job_failure_probability", self.job_failure_probability)
        if p >= 1:
            raise ModelError("failures.job_failure_probability", f"must be below 1 (a run must make progress), got {p!r}")
        _finite("failures.downtime", self.downtime_ms)


def _outputs(value: Sequence[OutputModel]) -> tuple[OutputModel, ...]:
    return tuple(value)


@attrs.frozen
class Backpressure:
    """Spark's backpressure in a simulation: a PID rate estimator sets the ingestion rate after each batch.

    Attributes:
        proportional: ``spark.streaming.backpressure.pid.proportional``.
        integral: ``spark.streaming.backpressure.pid.integral``.
        derivative: ``spark.streaming.backpressure.pid.derived``.
        min_rate: ``spark.streaming.backpressure.pid.minRate`` (records per second).
        initial_rate: ``spark.streaming.backpressure.initialRate``: the rate before the first
            estimate (``None``: the model's ``max_rate``, else unlimited).
    """

    proportional: float = 1.0
    integral: float = 0.2
    derivative: float = 0.0
    min_rate: float = 100.0
    initial_rate: float | None = None

    def __attrs_post_init__(self) -> None:
        _finite("backpressure.proportional", self.proportional)
        _finite("backpressure.integral", self.integral)
        _finite("backpressure.derivative", self.derivative)
        _finite("backpressure.min_rate", self.min_rate, strict=True)
        if self.initial_rate is not None:
            _finite("backpressure.initial_rate", self.initial_rate, strict=True)


@attrs.frozen
class SimulationModel:
    """Everything a simulated run needs: the work, the input, and the scheduler's configuration.

    Build one in Python or load one with :func:`~streaming.simulation.load_model`; change one
    field with :meth:`evolve` (``model.evolve(concurrent_jobs=2)``).

    Attributes:
        batch_interval: the batch interval.
        outputs: the output operations, each one job per batch, in order.
        input: the input-rate model (default: no records).
        concurrent_jobs: Spark's ``spark.streaming.concurrentJobs``.
        duration: the simulated horizon; batches are generated for ``(0, duration]``.
        batches: the number of batches instead of ``duration`` (wins when given).
        seed: the seed of every random draw.
        rate_factor: multiplies the input rate ("30 % more input" is 1.3).
        max_rate: ``spark.streaming.receiver.maxRate``: at most this many records per second
            are taken in; the rest waits at the source (``None``: no cap).
        backpressure: Spark's backpressure (``None``: off). With a cap or backpressure, input
            the pipeline does not take waits at the source, like a sender held back by TCP:
            the result reports that backlog.
        inputs: several input streams, each with its own rate, cap and backpressure (instead
            of ``input``, ``max_rate`` and ``backpressure``, which describe one).
        cluster: the executors and task slots the jobs share (``None``: each job runs alone,
            as if on a cluster of its own).
        costs: virtual time the engine spends on generation, checkpoints and listeners.
        failures: job failures and restarts (``None``: none).
    """

    batch_interval: Duration
    outputs: tuple[OutputModel, ...] = attrs.field(converter=_outputs)
    input: InputRate = ConstantRate(0.0)
    concurrent_jobs: int = 1
    duration: Duration = Minutes(60)
    batches: int | None = None
    seed: int = 0
    rate_factor: float = 1.0
    max_rate: float | None = None
    backpressure: Backpressure | None = None
    inputs: tuple[InputModel, ...] = attrs.field(default=(), converter=tuple)
    cluster: ClusterModel | None = None
    costs: Costs = Costs()
    failures: Failures | None = None
    _input_models: tuple[InputModel, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.batch_interval, Duration) or self.batch_interval.milliseconds <= 0:
            raise ModelError("interval", f"must be a positive duration, got {self.batch_interval!r}; pass e.g. Seconds(1)")
        if not self.outputs:
            raise ModelError("outputs", "must hold at least one output operation")
        for i, out in enumerate(self.outputs):
            if not isinstance(out, OutputModel):
                raise ModelError(f"outputs[{i}]", f"must be an OutputModel, got {out!r}")
        if not isinstance(self.input, InputRate):
            raise ModelError("input", f"must be an input-rate model (with cumulative()), got {self.input!r}")
        _whole("concurrent_jobs", self.concurrent_jobs, minimum=1)
        if not isinstance(self.duration, Duration) or self.duration.milliseconds < 0:
            raise ModelError("duration", f"must be a non-negative duration, got {self.duration!r}")
        if self.batches is not None:
            _whole("batches", self.batches, minimum=1)
        elif self.duration.milliseconds < self.batch_interval.milliseconds:
            raise ModelError(
                "duration",
                f"must cover at least one batch interval ({self.batch_interval}), got {self.duration}",
            )
        _whole("seed", self.seed, minimum=-(2**63))
        _finite("rate_factor", self.rate_factor)
        if self.max_rate is not None:
            _finite("max_rate", self.max_rate, strict=True)
        if self.backpressure is not None and not isinstance(self.backpressure, Backpressure):
            raise ModelError("backpressure", f"must be a Backpressure or None, got {self.backpressure!r}")
        if self.inputs:
            if self.input != ConstantRate(0.0) or self.max_rate is not None or self.backpressure is not None:
                raise ModelError("inputs", "give either inputs, or input with max_rate and backpressure, not both")
            for i, one in enumerate(self.inputs):
                if not isinstance(one, InputModel):
                    raise ModelError(f"inputs[{i}]", f"must be an InputModel, got {one!r}")
        if self.cluster is not None and not isinstance(self.cluster, ClusterModel):
            raise ModelError("cluster", f"must be a ClusterModel or None, got {self.cluster!r}")
        if not isinstance(self.costs, Costs):
            raise ModelError("costs", f"must be a Costs, got {self.costs!r}")
        if self.failures is not None and not isinstance(self.failures, Failures):
            raise ModelError("failures", f"must be a Failures or None, got {self.failures!r}")
        object.__setattr__(self, "_input_models", self.inputs or (
            InputModel(self.input, max_rate=self.max_rate, backpressure=self.backpressure),))

    @property
    def input_models(self) -> tuple[InputModel, ...]:
        """Every input stream, stream ``i`` being ``input_models[i]``."""
        return self._input_models

    @property
    def rate_controlled(self) -> bool:
        """Whether any input is taken at a limited rate (a cap or backpressure)."""
        return any(one.rate_controlled for one in self.input_models)

    @property
    def num_batches(self) -> int:
        """How many batches the run generates."""
        if self.batches is not None:
            return self.batches
        return self.duration.milliseconds // self.batch_interval.milliseconds

    @property
    def horizon(self) -> Duration:
        """The simulated time covered by the batches: ``num_batches * batch_interval``."""
        return self.batch_interval * self.num_batches

    def evolve(self, **changes: Any) -> SimulationModel:
        """A copy with ``changes`` applied (and validated)."""
        return attrs.evolve(self, **changes)

    def records_offered(self, end_ms: int, stream: int = 0) -> int:
        """Records of input ``stream`` that arrived in ``(0, end_ms]``, with the rate factor applied."""
        return math.floor(self.rate_factor * self._input_models[stream].rate.cumulative(end_ms))

    def records_between(self, start_ms: int, end_ms: int, stream: int = 0) -> int:
        """Records of input ``stream`` arriving in ``(start_ms, end_ms]``, with the rate factor applied."""
        f = self.rate_factor
        rate = self._input_models[stream].rate
        return math.floor(f * rate.cumulative(end_ms)) - math.floor(f * rate.cumulative(start_ms))
