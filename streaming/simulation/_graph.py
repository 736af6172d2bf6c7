"""SimulatedGraph: a JobGraph whose jobs sleep simulated durations on the clock.

It stands where the DStream graph stands in a real run: the real JobGenerator asks it for each
batch's jobs, and the real JobScheduler runs them.
"""

from __future__ import annotations

import functools
import math
import random
from typing import Awaitable, Callable, Sequence

from scheduler import Clock, InputInfoTracker, Job, Milliseconds, StreamInputInfo, Time, VirtualClock

from ._cluster import SimulatedCluster
from ._cluster_model import ClusterModel
from ._model_checks import ModelError
from ._processing_times import BatchContext
from ._simulation_model import SimulationModel

__all__ = ["SimulatedGraph"]

_UNBOUNDED_SLOTS = 2**31


class SimulatedGraph:
    """Generates, for each batch, one job per output operation of a :class:`SimulationModel`.

    The records of a batch come from the model's inputs; each job's work is drawn when the batch
    is generated, from a random stream of its own per output operation. Generation happens in
    batch-time order whatever the concurrency, so the k-th batch gets the same work in every
    configuration with the same seed (common random numbers: a sweep compares configurations on
    identical work). Failures and engine costs draw from streams of their own, so they never
    change the work either.

    Without a cluster model a job sleeps its duration; with one (or with failures) it runs its
    stages of tasks on a :class:`SimulatedCluster` shared by every job, which needs a
    :class:`~scheduler.VirtualClock`.

    Args:
        model: what to simulate.
        clock: the clock the jobs sleep on (the runtime's clock).
        on_generated: called with the number of batches generated so far, after each one.
    """

    def __init__(self, model: SimulationModel, clock: Clock, *, on_generated: Callable[[int], None] | None = None) -> None:
        """Wire the graph; :meth:`start` is called by the JobGenerator."""
        self.model = model
        self.sequential_batches = model.sequential_batches  # read by the JobGenerator at start
        self._clock = clock
        self._on_generated = on_generated
        self._rngs = [random.Random(f"aiodstream-simulation:{model.seed}:{i}") for i in range(len(model.outputs))]
        self._zero_ms = 0
        self._interval_ms = model.batch_interval.milliseconds
        self.generated = 0
        self._batches = model.num_batches
        self._infos: InputInfoTracker | None = None
        self.cluster: SimulatedCluster | None = None
        if model.cluster is not None or model.failures is not None:
            if not isinstance(clock, VirtualClock):
                raise ModelError("cluster", f"a cluster model or failures need a VirtualClock to run on, got {clock!r}")
            # Failures without a cluster model: slots without bound, so jobs run as independent sleeps.
            cluster = model.cluster or ClusterModel(executors=1, cores=_UNBOUNDED_SLOTS)
            self.cluster = SimulatedCluster(cluster, clock,
                                            downtime_ms=0.0 if model.failures is None else model.failures.downtime_ms)
        failures = model.failures
        self._failure_p = 0.0 if failures is None else failures.job_failure_probability
        self._failure_rng = random.Random(f"aiodstream-simulation:{model.seed}:failures")
        costs = model.costs
        self._generation = costs.generation
        self._generation_rng = random.Random(f"aiodstream-simulation:{model.seed}:generation")
        # Per output operation, what generating its job needs: its work, random stream, name
        # and description (looked up once, not per batch).
        self._operations = [
            (out.processing.sample if out.processing is not None and self.cluster is None else None, out.sample_stages,
             rng, out.name, f"simulated {out.name}", None if out.overhead is None else out.overhead.sample)
            for out, rng in zip(model.outputs, self._rngs, strict=True)
        ]
        # A job's function sleeps its duration on the clock, as a real job takes time. It is the
        # clock's own sleep, bound with partial (no Python frame of ours around it, when called
        # or when resumed), and shared by every job of one length.
        self._sleepers: dict[int, Callable[[], Awaitable[object]]] = {}
        # Rate control (a receiver's maxRate, backpressure), per input: records offered but not
        # yet taken wait at the source; each batch takes at most rate x interval of them.
        self._inputs = model.input_models
        self._plain_input = len(self._inputs) == 1 and not self._inputs[0].rate_controlled
        self._sleep_only = all(alone is not None and overhead is None for alone, _, _, _, _, overhead in self._operations)
        self._taken = [0] * len(self._inputs)
        self.rates: list[float | None] = [one.max_rate for one in self._inputs]
        for i, one in enumerate(self._inputs):
            initial = one.backpressure.initial_rate if one.backpressure is not None else None
            self.set_rate(initial if initial is not None else one.max_rate, stream=i)

    @property
    def rate(self) -> float | None:
        """The ingestion rate of input 0 (records per second), ``None`` for unlimited."""
        return self.rates[0]

    def start(self, zero_time: Time, input_infos: InputInfoTracker) -> None:
        """Remember the zero time: batch ``k`` (from 0) is ``zero_time + (k + 1) * interval``."""
        self._zero_ms = zero_time.milliseconds
        self._infos = input_infos

    async def allocate_input(self, time: Time) -> None:
        """Nothing to allocate: the input model is consulted when the batch is generated."""

    def _records(self, stream: int, rel_end: int) -> int:
        one = self._inputs[stream]
        model = self.model
        if one.rate_controlled:
            records = model.records_offered(rel_end, stream) - self._taken[stream]
            rate = self.rates[stream]
            if rate is not None:
                records = min(records, math.floor(rate * self._interval_ms / 1000))
            self._taken[stream] += records
            return records
        return model.records_between(rel_end - self._interval_ms, rel_end, stream)

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        """Report the batch's records and return one job per output operation."""
        assert self._infos is not None, "start() was not called"
        model = self.model
        end = time.milliseconds
        index = (end - self._zero_ms) // self._interval_ms - 1
        # Input is measured from the start of the run (the zero time), so records depend only on
        # the batch's window, not on when the simulation happened to start.
        rel_end = end - self._zero_ms
        if index >= self._batches:
            # A tick queued behind a slow generator or checkpoint after the stop point: the run
            # holds exactly the model's batches, so this one has no jobs (and is not submitted).
            return ()
        if self._plain_input:  # the common case, kept lean: one input, taken as it arrives
            records = model.records_between(rel_end - self._interval_ms, rel_end)
            self._infos.report_info(time, StreamInputInfo(0, records))
        else:
            records = 0
            for stream in range(len(self._inputs)):
                n = self._records(stream, rel_end)
                self._infos.report_info(time, StreamInputInfo(stream, n))
                records += n
        batch = BatchContext(index, time, model.batch_interval, records)
        if self._generation is not None:
            await self._clock.sleep(Milliseconds(self._generation.sample(batch, self._generation_rng)))
        jobs = self._sleeping_jobs(batch) if self._sleep_only else self._jobs(batch)
        self.generated += 1
        if self._on_generated is not None:
            self._on_generated(self.generated)
        return jobs

    def _sleeping_jobs(self, batch: BatchContext) -> list[Job]:
        # The hot path (no cluster, no overheads): every job a plain sleep of its drawn duration.
        time = batch.time
        sleepers = self._sleepers
        jobs = []
        for sample, _, rng, name, description, _ in self._operations:
            ms = sample(batch, rng)  # type: ignore[misc]
            sleeper = sleepers.get(ms)
            if sleeper is None:
                sleeper = self._sleeper(ms)
            jobs.append(Job(time, sleeper, name=name, description=description, is_async=True))
        return jobs

    def _jobs(self, batch: BatchContext) -> list[Job]:
        # Overheads, stages, or a cluster: each job's work drawn, then a sleep or a cluster run.
        time = batch.time
        cluster = self.cluster
        jobs = []
        for index, (alone, work, rng, name, description, overhead_of) in enumerate(self._operations):
            if alone is not None:
                ms = alone(batch, rng)
                if overhead_of is not None:
                    ms += overhead_of(batch, rng)
                fn = self._sleeper(ms)
            else:
                stages = work(batch, rng)
                overhead = 0 if overhead_of is None else overhead_of(batch, rng)
                if cluster is None:  # stages without a cluster: each stage takes its longest task
                    fn = self._sleeper(overhead + sum(max(stage, default=0) for stage in stages))
                else:
                    fails = self._failure_p > 0 and self._failure_rng.random() < self._failure_p
                    fn = functools.partial(cluster.run, stages, fails=fails, overhead_ms=overhead,
                                           order=(time.milliseconds, index))
            jobs.append(Job(time, fn, name=name, description=description, is_async=True))
        return jobs

    def _sleeper(self, ms: int) -> Callable[[], Awaitable[object]]:
        sleeper = self._sleepers.get(ms)
        if sleeper is None:
            sleeper = self._sleepers[ms] = functools.partial(self._clock.sleep, Milliseconds(ms))
        return sleeper

    def set_rate(self, rate: float | None, stream: int = 0) -> None:
        """Input ``stream``'s rate from now on (records per second), capped by its ``max_rate``; ``None`` keeps the cap."""
        cap = self._inputs[stream].max_rate
        if rate is None:
            self.rates[stream] = cap
        elif rate > 0:
            self.rates[stream] = rate if cap is None else min(rate, cap)

    def source_backlog(self, end_ms: int, stream: int | None = None) -> int:
        """Records offered up to ``end_ms`` (from the zero time) that no batch has taken: of one input, or of all."""
        streams = range(len(self._inputs)) if stream is None else (stream,)
        return sum(self.model.records_offered(end_ms, i) - self._taken[i]
                   for i in streams if self._inputs[i].rate_controlled)

    def clear_metadata(self, time: Time) -> None:
        """Nothing is kept per batch."""

    async def stop(self) -> None:
        """Nothing to stop."""

    def __repr__(self) -> str:
        return f"<SimulatedGraph [outputs: {len(self.model.outputs)} | generated: {self.generated}]>"
