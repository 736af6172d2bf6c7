"""Processing-time models: how long one output operation's job (or one task) takes for one batch.

No Spark counterpart: samples of whole milliseconds from a seeded ``random.Random`` (same model and seed, same batches).
"""

from __future__ import annotations

import math
import random
from typing import Callable, Protocol, Union, runtime_checkable

import attrs

from scheduler import Duration, Time

from ._model_checks import ModelError, finite, int_tuple, whole, whole_ms

__all__ = [
    "BatchContext",
    "Constant",
    "Exponential",
    "FromFunction",
    "Linear",
    "LogNormal",
    "Normal",
    "ProcessingTime",
    "Replay",
    "Uniform",
]


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
        whole("ms", self.ms, minimum=0)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """``ms``."""
        return self.ms


@attrs.frozen
class Uniform:
    """Uniform between ``low_ms`` and ``high_ms``."""

    low_ms: float
    high_ms: float

    def __attrs_post_init__(self) -> None:
        low = finite("low", self.low_ms)
        if finite("high", self.high_ms) < low:
            raise ModelError("high", f"must not be below low ({self.low_ms:g} ms), got {self.high_ms:g} ms")

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """A uniform draw, rounded to whole milliseconds."""
        return whole_ms(rng.uniform(self.low_ms, self.high_ms))


@attrs.frozen
class Exponential:
    """Exponentially distributed with mean ``mean_ms`` (the M in D/M/1)."""

    mean_ms: float

    def __attrs_post_init__(self) -> None:
        finite("mean", self.mean_ms, strict=True)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """An exponential draw, rounded to whole milliseconds."""
        return whole_ms(rng.expovariate(1.0 / self.mean_ms))


@attrs.frozen
class Normal:
    """Normally distributed; draws below zero are taken as zero."""

    mean_ms: float
    stddev_ms: float

    def __attrs_post_init__(self) -> None:
        finite("mean", self.mean_ms)
        finite("stddev", self.stddev_ms)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """A normal draw, rounded to whole milliseconds and clamped at zero."""
        return whole_ms(rng.normalvariate(self.mean_ms, self.stddev_ms))


@attrs.frozen
class LogNormal:
    """Log-normally distributed: ``median_ms * exp(sigma * Z)``, the usual shape of job times."""

    median_ms: float
    sigma: float

    def __attrs_post_init__(self) -> None:
        finite("median", self.median_ms, strict=True)
        finite("sigma", self.sigma)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """A log-normal draw, rounded to whole milliseconds."""
        return whole_ms(rng.lognormvariate(math.log(self.median_ms), self.sigma))


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
        finite("base", self.base_ms)
        finite("per_record", self.per_record_ms)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """The linear cost (plus noise), rounded to whole milliseconds."""
        value = self.base_ms + self.per_record_ms * batch.num_records
        if self.noise is not None:
            value += self.noise.sample(batch, rng)
        return whole_ms(value)


@attrs.frozen
class FromFunction:
    """Any function of the batch (for notebooks): ``fn(batch, rng)`` returns ms or a Duration."""

    fn: Callable[[BatchContext, random.Random], Union[int, float, Duration]]

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """``fn(batch, rng)`` in whole milliseconds."""
        value = self.fn(batch, rng)
        if isinstance(value, Duration):
            return max(0, value.milliseconds)
        return whole_ms(finite("fn(batch, rng)", value, minimum=-math.inf))


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

    durations_ms: tuple[int, ...] = attrs.field(converter=int_tuple)
    records: tuple[int, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(int_tuple))
    per_record_ms: float = 0.0

    def __attrs_post_init__(self) -> None:
        if not self.durations_ms:
            raise ModelError("durations", "must hold at least one duration")
        for i, d in enumerate(self.durations_ms):
            whole(f"durations[{i}]", d, minimum=0)
        if self.records is not None and len(self.records) != len(self.durations_ms):
            raise ModelError("records", f"must be as long as durations ({len(self.durations_ms)}), got {len(self.records)}")
        finite("per_record", self.per_record_ms)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """The traced duration of batch ``index mod n``, corrected for the batch size."""
        k = batch.index % len(self.durations_ms)
        value = self.durations_ms[k]
        if self.records is None:
            return value
        return whole_ms(value + self.per_record_ms * (batch.num_records - self.records[k]))
