"""What a FrameRDD needs of its context: the Connect session and a few settings read from the server
once (the part of ``SparkContext`` an RDD reaches through ``rdd.ctx``)."""

from __future__ import annotations

from typing import Any, Callable, Protocol

__all__ = ["FrameEnvironment", "Partitioner"]


class FrameEnvironment(Protocol):
    """The context of FrameRDDs: a Spark Connect session and its RDD-level settings."""

    @property
    def session(self) -> Any:
        """The ``pyspark.sql.connect.session.SparkSession`` the batches run on."""

    @property
    def defaultParallelism(self) -> int:
        """pyspark's ``SparkContext.defaultParallelism``, read from the server once."""

    @property
    def default_parallelism_set(self) -> bool:
        """Whether ``spark.default.parallelism`` is set (pyspark's default reduce partitions rule)."""

    @property
    def checkpoint_dir(self) -> str | None:
        """The directory ``setCheckpointDir`` gave, if any."""

    def parallelize(self, c: Any, numSlices: int | None = None) -> Any:  # noqa: N803 (pyspark's name)
        """A FrameRDD of a local collection, partitioned as pyspark's ``parallelize``."""


class Partitioner:
    """pyspark's ``Partitioner``: the partition count and function of a shuffle's output.

    Two RDDs partitioned by equal partitioners line up key by key: ``partitionBy`` skips the
    shuffle and ``union`` keeps the partition count (Spark's partitioner-aware union).
    """

    __slots__ = ("numPartitions", "partitionFunc")

    def __init__(self, numPartitions: int, partitionFunc: Callable[[Any], int]) -> None:  # noqa: N803
        self.numPartitions = numPartitions
        self.partitionFunc = partitionFunc

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Partitioner)
            and self.numPartitions == other.numPartitions
            and self.partitionFunc == other.partitionFunc
        )

    def __hash__(self) -> int:
        return hash((self.numPartitions, id(self.partitionFunc)))

    def __call__(self, key: Any) -> int:
        """The partition of a key: ``partitionFunc(key) % numPartitions``."""
        return self.partitionFunc(key) % self.numPartitions

    def __repr__(self) -> str:
        return f"Partitioner({self.numPartitions}, {getattr(self.partitionFunc, '__name__', self.partitionFunc)!r})"
