"""Input-rate models: how many records arrive over time (constant, in steps, in bursts, replayed).

No Spark counterpart: what the simulator's inputs receive instead of a source's records.
"""

from __future__ import annotations

import bisect
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

import attrs

from ._model_checks import ModelError, finite, int_tuple, whole

__all__ = [
    "BurstRate",
    "ConstantRate",
    "InputRate",
    "ReplayRate",
    "StepRate",
]


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
        finite("rate", self.per_second)

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
            finite(f"steps[{i}].rate", rate)
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
        finite("rate", self.per_second)
        finite("burst_rate", self.burst_per_second)
        whole("every", self.every_ms, minimum=1)
        whole("length", self.length_ms, minimum=0)
        whole("first", self.first_ms, minimum=0)
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
    records: tuple[int, ...] = attrs.field(converter=int_tuple)
    _prefix: tuple[int, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        whole("batch_interval", self.batch_interval_ms, minimum=1)
        if not self.records:
            raise ModelError("records", "must hold at least one batch")
        prefix = [0]
        for i, r in enumerate(self.records):
            prefix.append(prefix[-1] + whole(f"records[{i}]", r, minimum=0))
        object.__setattr__(self, "_prefix", tuple(prefix))

    def cumulative(self, t_ms: int) -> float:
        """Whole traced batches so far, plus the elapsed share of the current one."""
        n = len(self.records)
        k, into = divmod(t_ms, self.batch_interval_ms)
        cycles, i = divmod(k, n)
        return cycles * self._prefix[n] + self._prefix[i] + self.records[i] * into / self.batch_interval_ms
