"""WatermarkedNode: ``DStream.withWatermark``, which passes every record on and records its event time.

Spark's ``EventTimeWatermarkExec`` for DStreams: the node's RDD is its parent's, unchanged (a
watermark alone filters nothing), and each partition adds the count, min, max and sum of its
records' event times to one channel per stream, keyed by batch time (an accumulator, or report
files on Spark Connect: ``_batch_stats``). After the batch ran, the graph takes that batch's
entry (:meth:`WatermarkedNode.take_event_time_stats`) and the query tracker advances the
watermark with it. A partition computed twice (two output operations reading the stream) adds
its statistics twice through an accumulator (min and max stay right, and so does the mean); a
report file names its partition, so there the later replaces the earlier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from scheduler import EventTimeStats, InvalidPipelineError, Time

from ..state import event_time_ms
from ._batch_stats import BatchStats, batch_stats
from ._node import StreamNode

if TYPE_CHECKING:
    from pyspark import RDD

__all__ = ["WatermarkedNode"]


class WatermarkedNode(StreamNode):
    """The records of ``parent``, unchanged; their event times recorded per batch for the watermark."""

    def __init__(self, parent: StreamNode, event_time: Callable[[Any], Any], delay_ms: int) -> None:
        """Watermark ``parent`` by ``event_time(record)`` with ``delay_ms`` of allowed lateness.

        Raises:
            InvalidPipelineError: ``event_time`` is not callable.
        """
        if not callable(event_time):
            raise InvalidPipelineError(f"eventTime must be a function of a record, got {event_time!r}")
        super().__init__(parent.env, [parent])
        self.event_time = event_time
        self.watermark_delay_ms = delay_ms
        self._stats: BatchStats | None = None

    def _compute(self, time: Time) -> RDD[Any] | None:
        rdd = self._parents[0].get_or_compute(time)
        if rdd is None:
            return None
        if self._stats is None:
            self._stats = batch_stats(self._env)
        sink, extract, batch = self._stats.sink, self.event_time, time.milliseconds

        def record(partition: int, records: Iterable[Any]) -> Iterator[Any]:
            times: list[int] = []
            for item in records:
                times.append(event_time_ms(extract(item)))
                yield item
            stats = EventTimeStats.of(times)
            if stats is not None:
                sink.add_partition(batch, partition, stats)

        return rdd.mapPartitionsWithIndex(record, preservesPartitioning=True)

    def take_event_time_stats(self, time: Time) -> EventTimeStats | None:
        """What batch ``time`` saw (``None``: no record), forgotten afterwards."""
        if self._stats is None:
            return None
        stats: EventTimeStats | None = self._stats.take(time.milliseconds)
        return stats
