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
    "Constant",
    "ConstantRate",
    "Exponential",
    "FromFunction",
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


@attrs.frozen
class OutputModel:
    """One output operation: a name and its processing-time model."""

    name: str
    processing: ProcessingTime

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ModelError("name", f"must be a non-empty string, got {self.name!r}")
        if not isinstance(self.processing, ProcessingTime):
            raise ModelError("processing", f"must be a processing-time model (with sample()), got {self.processing!r}")


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

    @property
    def rate_controlled(self) -> bool:
        """Whether input is taken at a limited rate (a cap or backpressure)."""
        return self.max_rate is not None or self.backpressure is not None

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

    def records_offered(self, end_ms: int) -> int:
        """Records that arrived in ``(0, end_ms]``, with the rate factor applied."""
        return math.floor(self.rate_factor * self.input.cumulative(end_ms))

    def records_between(self, start_ms: int, end_ms: int) -> int:
        """Records arriving in ``(start_ms, end_ms]``, with the rate factor applied."""
        f = self.rate_factor
        return math.floor(f * self.input.cumulative(end_ms)) - math.floor(f * self.input.cumulative(start_ms))
