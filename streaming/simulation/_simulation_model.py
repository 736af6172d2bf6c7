"""SimulationModel: everything a simulated run needs, the work, the inputs and the scheduler's configuration.

No Spark counterpart: the simulator's whole input (a StreamingContext's settings and its program's work).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import attrs

from scheduler import Duration, Minutes

from ._cluster_model import ClusterModel
from ._cost_model import Costs
from ._failure_model import Failures
from ._input_model import Backpressure, InputModel
from ._input_rates import ConstantRate, InputRate
from ._model_checks import ModelError, finite, whole
from ._output_model import OutputModel

__all__ = [
    "MAX_BATCHES",
    "SimulationModel",
]

MAX_BATCHES = 10_000_000
"""The most batches one run simulates: the results keep about 1.3 KB a batch (13 GB at the limit)."""


def _outputs(value: Sequence[OutputModel]) -> tuple[OutputModel, ...]:
    if isinstance(value, OutputModel) or not isinstance(value, Iterable):
        raise ModelError("outputs", f"must be a list of OutputModel, got {value!r}")
    return tuple(value)


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
        sequential_batches: the program runs its batches one after another, each once the one before ended, whatever
            ``concurrent_jobs`` says (a watermark or a state-store operator: see ``docs/compatibility.md``); a
            batch's output operations still run at once. A trace records it.
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
    sequential_batches: bool = False
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
        whole("concurrent_jobs", self.concurrent_jobs, minimum=1)
        if not isinstance(self.sequential_batches, bool):
            raise ModelError("sequential_batches", f"must be true or false, got {self.sequential_batches!r}")
        if not isinstance(self.duration, Duration) or self.duration.milliseconds < 0:
            raise ModelError("duration", f"must be a non-negative duration, got {self.duration!r}")
        if self.batches is not None:
            whole("batches", self.batches, minimum=1)
        elif self.duration.milliseconds < self.batch_interval.milliseconds:
            raise ModelError(
                "duration",
                f"must cover at least one batch interval ({self.batch_interval}), got {self.duration}",
            )
        if self.num_batches > MAX_BATCHES:
            raise ModelError("batches" if self.batches is not None else "duration",
                             f"asks for {self.num_batches:,} batches; a run simulates at most {MAX_BATCHES:,} (its results "
                             "keep about 1.3 KB a batch): shorten the run or lengthen the batch interval")
        whole("seed", self.seed, minimum=-(2**63))
        finite("rate_factor", self.rate_factor)
        if self.max_rate is not None:
            finite("max_rate", self.max_rate, strict=True)
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
