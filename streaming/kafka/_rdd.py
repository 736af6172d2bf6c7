"""KafkaRDD: one RDD partition per offset range, each read by its own task (Spark's ``KafkaRDD``, pyspark 2.4's ``KafkaRDD``).

The driver ships only the ranges; tasks read them (:mod:`._tasks`). ``offsetRanges()`` gives
the ranges back, as pyspark 2.4's did in ``foreachRDD`` and ``transform``. Importing this
module imports pyspark (the package imports it when a Kafka RDD is first made).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

from pyspark import SparkContext
from pyspark.rdd import PipelinedRDD

from ._offsets import OffsetRange

__all__ = ["KafkaRDD"]


class KafkaRDD(PipelinedRDD):  # type: ignore[misc]
    """The records of some offset ranges, RDD partition ``i`` reading ``offsetRanges()[i]`` (pyspark 2.4's ``KafkaRDD``).

    Every transformation of it (``map``, ``filter``...) is a plain RDD again, as in pyspark 2.4,
    where ``offsetRanges()`` is only on the RDD a direct stream hands to ``foreachRDD`` and
    ``transform``, and on ``createRDD``'s result.
    """

    def __init__(self, sc: SparkContext, ranges: Sequence[OffsetRange],
                 read: Callable[[int, Iterable[OffsetRange]], Iterator[Any]]) -> None:
        """Ship ``ranges`` (one per partition; one empty partition for none) to tasks that run ``read``."""
        ranges = tuple(ranges)
        super().__init__(sc.parallelize(list(ranges), max(1, len(ranges))), read)
        self._offset_ranges = ranges

    def offsetRanges(self) -> list[OffsetRange]:
        """The offset ranges this RDD reads, one per partition, in partition order."""
        return list(self._offset_ranges)
