"""Row counts of inputs that only learn them by running the batch: files and queued RDDs.

Spark's ``numInputRows`` is the rows the batch's scans produced, measured by SQL metrics while
the batch runs. An input stream here counts the same way: its RDD is wrapped so that each
partition adds its row count to a Spark accumulator, keyed by (batch time, partition). The
count kept per partition is the largest seen, so a partition that several output operations
compute (or a retried task) counts once, and a partition read only in part (``take``) counts
the rows read, as Spark's scans do under a limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

if TYPE_CHECKING:
    from pyspark import RDD, Accumulator, SparkContext

__all__ = ["RowCounter"]

_Key = tuple[int, int]  # (batch time ms, partition index)


def _max_per_partition() -> Any:
    # A class local to a function: tasks unpickle it by value, so workers need only pyspark,
    # not aiodstream. No lock: the driver merges on pyspark's accumulator server thread, one
    # dict operation at a time, and the reader copies before it iterates.
    class MaxPerPartition:
        """pyspark's AccumulatorParam protocol: partition counts merged, the largest kept per key."""

        def zero(self, value: dict[Any, int]) -> dict[Any, int]:
            return {}

        def addInPlace(self, value1: dict[Any, int], value2: dict[Any, int]) -> dict[Any, int]:
            for key, count in value2.items():
                if count > value1.get(key, -1):
                    value1[key] = count
            return value1

    return MaxPerPartition()


def _counting(accumulator: Accumulator[dict[_Key, int]], batch_ms: int) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    def count(index: int, records: Iterable[Any]) -> Iterator[Any]:
        n = 0
        try:
            for record in records:
                n += 1
                yield record
        finally:  # also when the consumer stops early (take): the generator is closed, and counted
            accumulator.add({(batch_ms, index): n})

    return count


class RowCounter:
    """Counts, per batch, the rows an input's RDDs produce while the batch runs."""

    def __init__(self) -> None:
        """A counter; its accumulator is made on first use (it needs the SparkContext)."""
        self._accumulator: Accumulator[dict[_Key, int]] | None = None
        self._counting: set[int] = set()  # batch times whose RDD is wrapped and not yet taken

    def wrap(self, sc: SparkContext, rdd: RDD[Any], batch_ms: int) -> RDD[Any]:
        """``rdd`` counting its rows for batch ``batch_ms`` (same partitions, same records)."""
        if self._accumulator is None:
            self._accumulator = sc.accumulator({}, _max_per_partition())
        self._counting.add(batch_ms)
        return rdd.mapPartitionsWithIndex(_counting(self._accumulator, batch_ms), preservesPartitioning=True)

    def take(self, batch_ms: int) -> int | None:
        """The rows batch ``batch_ms`` read (``None`` if it was not counted), once its jobs ended; then forgotten.

        Counts that arrive for a batch already taken (a window computing an older batch's RDD
        again) are dropped here too.
        """
        if batch_ms not in self._counting or self._accumulator is None:
            return None
        self._counting.discard(batch_ms)
        pending = self._counting
        counts = self._accumulator.value  # the driver's merged value (the object itself, not a copy)
        total = 0
        for key, rows in list(counts.items()):  # a copy: the accumulator server thread may be merging
            if key[0] == batch_ms:
                total += rows
            if key[0] not in pending:
                counts.pop(key, None)
        return total
