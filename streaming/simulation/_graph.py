"""SimulatedGraph: a JobGraph whose jobs sleep simulated durations on the clock.

It stands where the DStream graph stands in a real run: the real JobGenerator asks it for each
batch's jobs, and the real JobScheduler runs them.
"""

from __future__ import annotations

import functools
import math
import random
from typing import Awaitable, Callable, Sequence

from scheduler import Clock, InputInfoTracker, Job, Milliseconds, StreamInputInfo, Time

from ._models import BatchContext, SimulationModel

__all__ = ["SimulatedGraph"]


class SimulatedGraph:
    """Generates, for each batch, one job per output operation of a :class:`SimulationModel`.

    The records of a batch come from the model's input rate; each job's duration is drawn when
    the batch is generated, from a random stream of its own per output operation. Generation
    happens in batch-time order whatever the concurrency, so the k-th batch gets the same
    durations in every configuration with the same seed (common random numbers: a sweep compares
    configurations on identical work).

    Args:
        model: what to simulate.
        clock: the clock the jobs sleep on (the runtime's clock).
        on_generated: called with the number of batches generated so far, after each one.
    """

    def __init__(self, model: SimulationModel, clock: Clock, *, on_generated: Callable[[int], None] | None = None) -> None:
        """Wire the graph; :meth:`start` is called by the JobGenerator."""
        self.model = model
        self._clock = clock
        self._on_generated = on_generated
        self._rngs = [random.Random(f"aiodstream-simulation:{model.seed}:{i}") for i in range(len(model.outputs))]
        self._zero_ms = 0
        self._interval_ms = model.batch_interval.milliseconds
        self.generated = 0
        self._infos: InputInfoTracker | None = None
        # Per output operation, what generating its job needs: its sampler, random stream, name
        # and description (looked up once, not per batch).
        self._operations = [
            (out.processing.sample, rng, out.name, f"simulated {out.name}")
            for out, rng in zip(model.outputs, self._rngs, strict=True)
        ]
        # A job's function sleeps its duration on the clock, as a real job takes time. It is the
        # clock's own sleep, bound with partial (no Python frame of ours around it, when called
        # or when resumed), and shared by every job of one length.
        self._sleepers: dict[int, Callable[[], Awaitable[object]]] = {}
        # Rate control (a receiver's maxRate, backpressure): records offered but not yet taken
        # wait at the source; each batch takes at most rate x interval of them.
        self._taken = 0
        initial = model.backpressure.initial_rate if model.backpressure is not None else None
        self.rate: float | None = None
        self.set_rate(initial if initial is not None else model.max_rate)

    def start(self, zero_time: Time, input_infos: InputInfoTracker) -> None:
        """Remember the zero time: batch ``k`` (from 0) is ``zero_time + (k + 1) * interval``."""
        self._zero_ms = zero_time.milliseconds
        self._infos = input_infos

    async def allocate_input(self, time: Time) -> None:
        """Nothing to allocate: the input model is consulted when the batch is generated."""

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        """Report the batch's records and return one sleeping job per output operation."""
        assert self._infos is not None, "start() was not called"
        model = self.model
        end = time.milliseconds
        index = (end - self._zero_ms) // self._interval_ms - 1
        # Input is measured from the start of the run (the zero time), so records depend only on
        # the batch's window, not on when the simulation happened to start.
        rel_end = end - self._zero_ms
        if model.rate_controlled:
            records = model.records_offered(rel_end) - self._taken
            if self.rate is not None:
                records = min(records, math.floor(self.rate * self._interval_ms / 1000))
            self._taken += records
        else:
            records = model.records_between(rel_end - self._interval_ms, rel_end)
        self._infos.report_info(time, StreamInputInfo(0, records))
        batch = BatchContext(index, time, model.batch_interval, records)
        sleepers = self._sleepers
        jobs = []
        for sample, rng, name, description in self._operations:
            ms = sample(batch, rng)
            sleeper = sleepers.get(ms)
            if sleeper is None:
                sleeper = sleepers[ms] = functools.partial(self._clock.sleep, Milliseconds(ms))
            jobs.append(Job(time, sleeper, name=name, description=description, is_async=True))
        self.generated += 1
        if self._on_generated is not None:
            self._on_generated(self.generated)
        return jobs

    def set_rate(self, rate: float | None) -> None:
        """The ingestion rate from now on (records per second), capped by the model's ``max_rate``; ``None`` keeps the cap."""
        cap = self.model.max_rate
        if rate is None:
            self.rate = cap
        elif rate > 0:
            self.rate = rate if cap is None else min(rate, cap)

    def source_backlog(self, end_ms: int) -> int:
        """Records offered up to ``end_ms`` (from the zero time) that no batch has taken."""
        return self.model.records_offered(end_ms) - self._taken if self.model.rate_controlled else 0

    def clear_metadata(self, time: Time) -> None:
        """Nothing is kept per batch."""

    async def stop(self) -> None:
        """Nothing to stop."""

    def __repr__(self) -> str:
        return f"<SimulatedGraph [outputs: {len(self.model.outputs)} | generated: {self.generated}]>"
