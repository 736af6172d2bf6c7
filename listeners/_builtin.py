"""Built-in listeners: an awaitable event recorder and Spark's ``StatsReportListener``."""

from __future__ import annotations

import statistics as _stats
from collections import deque
from typing import Callable, Sequence

from scheduler import ChangeSignal, Duration, library_logger

from ._events import BatchCompleted, StreamingEvent
from ._info import BatchInfo

__all__ = ["EventRecorder", "StatsReportListener"]


class EventRecorder:
    """Keeps every event it receives and lets a task wait for the one it needs.

    Tests and notebooks wait on domain events instead of sleeping::

        recorder = EventRecorder()
        runtime.add_listener(recorder)
        ...
        await recorder.wait_for_batches(3)
    """

    run_on_loop = True
    """It only appends and wakes waiting tasks: quick, and it must wake them from the loop."""

    def __init__(self) -> None:
        """Create an empty recorder."""
        self.events: list[StreamingEvent] = []
        self._changed = ChangeSignal()

    def __call__(self, event: StreamingEvent) -> None:
        """Record ``event`` (the bus calls this for every event)."""
        self.events.append(event)
        self._changed.notify()

    def of_type(self, event_type: type) -> list[StreamingEvent]:
        """The recorded events of one type, in order."""
        return [e for e in self.events if type(e) is event_type]

    @property
    def completed_batches(self) -> list[BatchInfo]:
        """BatchInfo of every BatchCompleted event, in order."""
        return [e.batch_info for e in self.events if type(e) is BatchCompleted]

    async def wait_for(self, predicate: Callable[[Sequence[StreamingEvent]], bool]) -> None:
        """Wait until ``predicate(events)`` is true."""
        while not predicate(self.events):
            await self._changed.wait()

    async def wait_for_batches(self, count: int) -> list[BatchInfo]:
        """Wait until ``count`` batches have completed; return their BatchInfos."""
        await self.wait_for(lambda events: sum(type(e) is BatchCompleted for e in events) >= count)
        return self.completed_batches[:count]


class StatsReportListener:
    """Logs delay distributions over the last ``num_batch_infos`` completed batches (Spark's ``StatsReportListener``)."""

    def __init__(self, num_batch_infos: int = 10) -> None:
        """Keep the last ``num_batch_infos`` completed batches.

        Raises:
            ValueError: ``num_batch_infos`` is not a positive int.
        """
        if isinstance(num_batch_infos, bool) or not isinstance(num_batch_infos, int) or num_batch_infos < 1:
            raise ValueError(f"num_batch_infos must be a positive int, got {num_batch_infos!r}; pass e.g. 10")
        self.batch_infos: deque[BatchInfo] = deque(maxlen=num_batch_infos)
        self._log = library_logger("aiodstream.listeners", component="StatsReportListener")

    def on_batch_completed(self, event: BatchCompleted) -> None:
        """Record the batch and log the distributions."""
        self.batch_infos.append(event.batch_info)
        self._log.info(
            "batch delay distribution",
            batches=len(self.batch_infos),
            total_delay_ms=self._distribution([b.total_delay for b in self.batch_infos]),
            processing_delay_ms=self._distribution([b.processing_delay for b in self.batch_infos]),
        )

    @staticmethod
    def _distribution(values: Sequence[Duration | None]) -> dict[str, float] | None:
        ms = sorted(v.milliseconds for v in values if v is not None)
        if not ms:
            return None
        qs = _stats.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else [ms[0]] * 3
        return {"min": ms[0], "p25": qs[0], "p50": qs[1], "p75": qs[2], "max": ms[-1]}
