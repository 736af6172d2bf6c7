"""The engine's own costs on virtual time: checkpoint and commit writes, and a slow listener.

Each is what the real engine runs, with its work replaced by a sleep on the clock: the writes are
a :class:`~scheduler.BatchHook` (on the JobGenerator's task, as the real checkpoint hooks are),
the listener is a listener on the real bus.
"""

from __future__ import annotations

import math
import random
from typing import Sequence

import anyio

from scheduler import Duration, Milliseconds, Time, VirtualClock

from ._cost_model import Costs
from ._processing_times import BatchContext, ProcessingTime

__all__ = ["CostHook", "CostlyListener"]


class CostHook:
    """Checkpoint writes after each batch is submitted, commit writes after each completes.

    In ``sync`` mode a write takes its time on the JobGenerator's task, so a write longer than
    the gap to the next batch holds that batch up. In ``async`` mode writes queue for a writer
    task of their own (:meth:`run_writer`) and hold up nothing.

    Attributes:
        writes: writes finished.
        write_ms: their total virtual time.
        max_backlog: the most writes ever waiting for the async writer.
    """

    def __init__(self, costs: Costs, clock: VirtualClock, batch_interval: Duration, seed: int) -> None:
        """Wire the hook; in ``async`` mode start :meth:`run_writer` in the run's task group."""
        self._checkpoint = costs.checkpoint
        self._commit = costs.commit
        self._async = costs.checkpoint_mode == "async"
        self._clock = clock
        self._interval = batch_interval
        self._rng = random.Random(f"aiodstream-simulation:{seed}:checkpoint")
        self._count = 0
        self._send, self._receive = anyio.create_memory_object_stream[int](max_buffer_size=math.inf)
        self.writes = 0
        self.write_ms = 0
        self.max_backlog = 0

    async def batch_generated(self, time: Time, pending_times: Sequence[Time]) -> None:
        """The checkpoint write of a submitted batch."""
        await self._write(self._checkpoint, time)

    async def batch_completed(self, time: Time) -> None:
        """The commit write of a completed batch."""
        await self._write(self._commit, time)

    async def _write(self, model: ProcessingTime | None, time: Time) -> None:
        if model is None:
            return
        ms = model.sample(BatchContext(self._count, time, self._interval, 0), self._rng)
        self._count += 1
        if self._async:
            self._send.send_nowait(ms)
            self.max_backlog = max(self.max_backlog, self._send.statistics().current_buffer_used)
        else:
            await self._sleep(ms)

    async def _sleep(self, ms: int) -> None:
        if ms > 0:
            await self._clock.sleep(Milliseconds(ms))
        self.writes += 1
        self.write_ms += ms

    async def run_writer(self) -> None:
        """The async writer: one write at a time, in order, until cancelled."""
        async for ms in self._receive:
            await self._sleep(ms)

    def __repr__(self) -> str:
        return f"<CostHook [{self.writes} writes | {self.write_ms} ms]>"


class CostlyListener:
    """A listener that takes a sample of ``cost`` on the virtual clock for every event it gets.

    It runs on its own dispatcher task like any async listener; once its queue is full the
    bus blocks the scheduler (the simulation's bus is lossless), as a slow listener does.
    """

    def __init__(self, cost: ProcessingTime, clock: VirtualClock, batch_interval: Duration, seed: int) -> None:
        """A listener of the given cost per event."""
        self._cost = cost
        self._clock = clock
        self._interval = batch_interval
        self._rng = random.Random(f"aiodstream-simulation:{seed}:listener")
        self.events = 0
        self.busy_ms = 0

    async def __call__(self, event: object) -> None:
        """Spend the cost of one event."""
        ms = self._cost.sample(BatchContext(self.events, self._clock.now(), self._interval, 0), self._rng)
        self.events += 1
        self.busy_ms += ms
        if ms > 0:
            await self._clock.sleep(Milliseconds(ms))
