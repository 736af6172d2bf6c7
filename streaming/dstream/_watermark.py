"""WatermarkedNode: ``DStream.withWatermark``, which passes every record on and records its event time.

Spark's ``EventTimeWatermarkExec`` for DStreams: the node's RDD is its parent's, unchanged (a
watermark alone filters nothing), and each partition adds the count, min, max and sum of its
records' event times to one accumulator per stream, keyed by batch time. After the batch ran,
the graph takes that batch's entry (:meth:`WatermarkedNode.take_event_time_stats`) and the query
tracker advances the watermark with it. A partition computed twice (two output operations
reading the stream) adds its statistics twice: min and max stay right, and so does the mean.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, cast

from scheduler import EventTimeStats, InvalidPipelineError, Time

from ..state import event_time_ms
from ._node import StreamNode
from ._refusals import refuse_on_connect

if TYPE_CHECKING:
    from pyspark import RDD

__all__ = ["BatchStatsParam", "WatermarkedNode"]

class BatchStatsParam:
    """An accumulator parameter for per-batch statistics: batch time (ms) -> a record with ``merge``, merged.

    Tasks add ``{batch: stats}``; the driver takes a finished batch's entry. ``addInPlace`` runs
    on the driver's accumulator-server thread while the graph takes an entry on another, so
    both go through one lock.
    """

    def __init__(self) -> None:
        """A parameter whose driver-side merges and takes are serialised."""
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {}  # shipped to tasks without the lock; each task gets its own

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()

    def zero(self, value: dict[int, Any]) -> dict[int, Any]:
        """An empty table (what each task starts from)."""
        return {}

    def addInPlace(self, value1: dict[int, Any], value2: dict[int, Any]) -> dict[int, Any]:
        """Merge ``value2`` into ``value1``."""
        with self._lock:
            for time, stats in value2.items():
                mine = value1.get(time)
                value1[time] = stats if mine is None else mine.merge(stats)
        return value1

    def peek(self, value: dict[int, Any], time: int) -> Any:
        """Batch ``time``'s entry so far (``None`` if no task reported one), left in place."""
        with self._lock:
            return value.get(time)

    def take(self, value: dict[int, Any], time: int) -> Any:
        """Remove and return batch ``time``'s entry (``None`` if no task reported one)."""
        with self._lock:
            return value.pop(time, None)


class WatermarkedNode(StreamNode):
    """The records of ``parent``, unchanged; their event times recorded per batch for the watermark."""

    def __init__(self, parent: StreamNode, event_time: Callable[[Any], Any], delay_ms: int) -> None:
        """Watermark ``parent`` by ``event_time(record)`` with ``delay_ms`` of allowed lateness.

        Raises:
            InvalidPipelineError: ``event_time`` is not callable.
        """
        if not callable(event_time):
            raise InvalidPipelineError(f"eventTime must be a function of a record, got {event_time!r}")
        refuse_on_connect(parent.env, "withWatermark")
        super().__init__(parent.env, [parent])
        self.event_time = event_time
        self.watermark_delay_ms = delay_ms
        self._param = BatchStatsParam()
        self._accumulator: Any = None

    def _compute(self, time: Time) -> RDD[Any] | None:
        rdd = self._parents[0].get_or_compute(time)
        if rdd is None:
            return None
        if self._accumulator is None:
            # Duck-typed as pyspark's AccumulatorParam (zero, addInPlace): importing pyspark to
            # subclass it would make ``import streaming`` start loading Spark.
            self._accumulator = self._env.spark_context.accumulator({}, cast(Any, self._param))
        accumulator, extract, batch = self._accumulator, self.event_time, time.milliseconds

        def record(records: Iterable[Any]) -> Iterator[Any]:
            times: list[int] = []
            for item in records:
                times.append(event_time_ms(extract(item)))
                yield item
            stats = EventTimeStats.of(times)
            if stats is not None:
                accumulator.add({batch: stats})

        return rdd.mapPartitions(record, preservesPartitioning=True)

    def take_event_time_stats(self, time: Time) -> EventTimeStats | None:
        """What batch ``time`` saw (``None``: no record), forgotten afterwards."""
        if self._accumulator is None:
            return None
        stats: EventTimeStats | None = self._param.take(self._accumulator.value, time.milliseconds)
        return stats
