"""A Kafka batch on Spark Connect: a FrameRDD whose partitions are the batch's offset ranges (``KafkaRDD``'s counterpart).

Connect has no SparkContext, so no ``KafkaRDD``: the ranges are sliced into the FrameContext's
``parallelize`` (one range per partition, as ``KafkaRDD`` ships them) and each partition reads
its range in the server's Python workers with the same task the classic executors run
(:mod:`._tasks`: a confluent-kafka consumer kept per worker). The RDD given to ``foreachRDD`` and
``transform`` answers ``offsetRanges()``; what is derived from it does not, as on classic Spark.
Imports no pyspark (the FrameContext does).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

from ._offsets import OffsetRange

__all__ = ["OffsetRangesOf", "frame_kafka_rdd", "is_frame_context"]


class OffsetRangesOf:
    """The ``offsetRanges()`` method a Connect Kafka batch carries: the ranges, one per partition, in partition order."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        """Answer ``ranges``."""
        self._ranges = tuple(ranges)

    def __call__(self) -> list[OffsetRange]:
        """A new list of the ranges each call (a caller may change it)."""
        return list(self._ranges)

    def __repr__(self) -> str:
        return f"<offsetRanges of {len(self._ranges)} ranges>"


def is_frame_context(sc: Any) -> bool:
    """Whether ``sc`` is what a Connect context has instead of a SparkContext (a ``FrameContext``: it has a Connect session)."""
    from ..spark import is_connect_session

    return is_connect_session(getattr(sc, "session", None))


def frame_kafka_rdd(frames: Any, ranges: Sequence[OffsetRange], read: Callable[[int, Iterable[OffsetRange]], Iterator[Any]]) -> Any:
    """The records of ``ranges`` as a FrameRDD of ``frames``: partition ``i`` reads ``ranges[i]`` (one empty partition for none).

    The RDD has ``offsetRanges()``. Nothing runs until an action: then each task reads its range
    on the server, as a classic executor reads a ``KafkaRDD`` partition.
    """
    ranges = tuple(ranges)
    rdd = frames.parallelize(list(ranges), max(1, len(ranges))).mapPartitionsWithIndex(read)
    rdd.offsetRanges = OffsetRangesOf(ranges)
    return rdd
