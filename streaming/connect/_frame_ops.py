"""FrameOps: pyspark's element-wise RDD transformations and actions over FrameCore, with the same
partitions and per-partition order as pyspark's (``core/rdd.py``'s ``RDD`` methods of the same names)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from functools import reduce as _reduce
from typing import Any, Callable, Iterable, Iterator

from typing_extensions import Self

from ._frame_core import FrameCore, shifted
from ._partitioning import coalesce_ranges

__all__ = ["FrameOps"]


class _Elementwise:
    """Partition functions of one-element user functions (picklable, pipelined by FrameCore)."""

    def __init__(self, kind: str, f: Callable[..., Any]) -> None:
        self.kind = kind
        self.f = f

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[Any]:
        f = self.f
        if self.kind == "map":
            return map(f, values)
        if self.kind == "flatMap":
            return itertools.chain.from_iterable(map(f, values))
        if self.kind == "filter":
            return filter(f, values)
        if self.kind == "partitions":
            result: Iterable[Any] = f(values)
            return result
        if self.kind == "glom":
            return [list(values)]
        raise AssertionError(self.kind)


def _count(index: int, values: Iterator[Any]) -> Iterable[int]:
    return [sum(1 for _ in values)]


class _TakeUpTo:
    """A partition's first ``count`` values (``take``'s partition function)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[Any]:
        return itertools.islice(values, self.count)


class _ToIndex:
    """A route sending every value of partition ``i`` to the partition whose range holds ``i``."""

    def __init__(self, targets: list[int]) -> None:
        self.targets = targets

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[tuple[int, Any]]:
        target = self.targets[index]
        return ((target, value) for value in values)


class FrameOps(FrameCore):
    """Element-wise transformations, unions and coalescing, and the actions."""

    # -- narrow transformations --

    def map(self, f: Callable[[Any], Any], preservesPartitioning: bool = False) -> Self:  # noqa: N803
        """Applies ``f`` to each element."""
        return self._same_count(self.mapPartitionsWithIndex(_Elementwise("map", f), preservesPartitioning))

    def flatMap(self, f: Callable[[Any], Iterable[Any]], preservesPartitioning: bool = False) -> Self:  # noqa: N803
        """Applies ``f`` to each element and flattens the results."""
        return self.mapPartitionsWithIndex(_Elementwise("flatMap", f), preservesPartitioning)

    def filter(self, f: Callable[[Any], bool]) -> Self:
        """Keeps the elements for which ``f`` is true."""
        return self.mapPartitionsWithIndex(_Elementwise("filter", f), True)

    def mapPartitions(self, f: Callable[[Iterator[Any]], Iterable[Any]], preservesPartitioning: bool = False) -> Self:  # noqa: N803
        """Applies ``f`` to each partition's iterator (once per partition, even an empty one)."""
        return self.mapPartitionsWithIndex(_Elementwise("partitions", f), preservesPartitioning)

    def mapPartitionsWithSplit(self, f: Callable[[int, Iterator[Any]], Iterable[Any]],
                               preservesPartitioning: bool = False) -> Self:  # noqa: N803
        """pyspark's deprecated alias of ``mapPartitionsWithIndex``."""
        return self.mapPartitionsWithIndex(f, preservesPartitioning)

    def glom(self) -> Self:
        """One list per partition."""
        return self.mapPartitionsWithIndex(_Elementwise("glom", list))

    def keyBy(self, f: Callable[[Any], Any]) -> Self:
        """``(f(x), x)`` pairs."""
        return self.map(lambda x: (f(x), x))

    def union(self, other: FrameOps) -> Self:
        """The elements of both: the partitions of one then the other's, or, when both have the
        same partitioner, partition ``i`` of each concatenated (Spark's partitioner-aware union)."""
        if self.partitioner is not None and self.partitioner == other.partitioner:
            n = self.getNumPartitions()
            identity = _ToIndex(list(range(n)))
            united = self._exchange([(self, identity), (other, identity)], n, self.partitioner)
        else:
            frame = self.frame.union(shifted(other.frame, self.getNumPartitions()))
            united = self._derive(frame, self.getNumPartitions() + other.getNumPartitions(), None, None)
        if self.known_count is not None and other.known_count is not None:
            united.known_count = self.known_count + other.known_count
        return united

    def __add__(self, other: FrameOps) -> Self:
        return self.union(other)

    def coalesce(self, numPartitions: int, shuffle: bool = False) -> Self:  # noqa: N803
        """Fewer partitions: consecutive runs of partitions joined (no shuffle), as Spark's
        coalescer groups partitions without preferred locations; ``shuffle=True`` is ``repartition``."""
        if shuffle:
            return self.repartition(numPartitions)
        ranges = coalesce_ranges(self.getNumPartitions(), numPartitions)
        if len(ranges) == self.getNumPartitions():
            return self._same_count(self._derive(self.frame, len(ranges), None, None))
        targets = [group for group, parents in enumerate(ranges) for _ in parents]
        return self._same_count(self._exchange([(self, _ToIndex(targets))], len(ranges)))

    def repartition(self, numPartitions: int) -> Self:  # noqa: N803
        """Exactly ``numPartitions`` partitions, the elements dealt as Spark's ``coalesce(n, shuffle=True)``."""
        from ._repartition import RoundRobin

        return self._same_count(self._exchange([(self, RoundRobin(numPartitions))], numPartitions))

    # -- actions --

    def collect(self) -> list[Any]:
        """All elements, partition by partition."""
        return self._collect_values()

    def count(self) -> int:
        """The number of elements."""
        return sum(self.mapPartitionsWithIndex(_count).collect())

    def take(self, num: int) -> list[Any]:
        """The first ``num`` elements, in partition order, scanning partitions as pyspark's ``take`` does: partition 0
        first, then more (up to 4 times as many as scanned so far) only while elements are missing, so a partition
        never scanned never runs (an error in it does not fail the action). Each round is one query."""
        items: list[Any] = []
        total = self.getNumPartitions()
        scanned = 0
        while len(items) < num and scanned < total:
            tries = 1
            if scanned > 0:  # pyspark's estimate: none found yet, 4 times as many; else 1.5 times what seems needed
                tries = scanned * 4 if not items else min(max(int(1.5 * num * scanned / len(items)) - scanned, 1),
                                                          scanned * 4)
            left = num - len(items)
            items += self._collect_partitions(_TakeUpTo(left), range(scanned, min(scanned + tries, total)))
            scanned += tries
        return items[:num]

    def first(self) -> Any:
        """The first element; ``ValueError("RDD is empty")`` as pyspark when there is none."""
        values = self.take(1)
        if values:
            return values[0]
        raise ValueError("RDD is empty")

    def isEmpty(self) -> bool:
        """Whether the RDD has no element."""
        return self.getNumPartitions() == 0 or len(self.take(1)) == 0

    def reduce(self, f: Callable[[Any, Any], Any]) -> Any:
        """Reduces the elements with ``f``, partition by partition then on the client."""

        def partial(values: Iterator[Any]) -> Iterable[Any]:
            for initial in values:  # the first element, if any
                yield _reduce(f, values, initial)
                return

        values = self.mapPartitions(partial).collect()
        if values:
            return _reduce(f, values)
        raise ValueError("Can not reduce() empty RDD")

    def fold(self, zeroValue: Any, op: Callable[[Any, Any], Any]) -> Any:  # noqa: N803
        """Folds each partition from ``zeroValue``, then the partial results from ``zeroValue``."""

        def partial(values: Iterator[Any]) -> Iterable[Any]:
            acc = zeroValue
            for value in values:
                acc = op(acc, value)
            yield acc

        return _reduce(op, self.mapPartitions(partial).collect(), zeroValue)

    def aggregate(self, zeroValue: Any, seqOp: Callable[[Any, Any], Any], combOp: Callable[[Any, Any], Any]) -> Any:  # noqa: N803
        """Aggregates each partition with ``seqOp`` then the results with ``combOp``."""

        def partial(values: Iterator[Any]) -> Iterable[Any]:
            acc = zeroValue
            for value in values:
                acc = seqOp(acc, value)
            yield acc

        return _reduce(combOp, self.mapPartitions(partial).collect(), zeroValue)

    def sum(self) -> Any:
        """The sum of the elements."""
        return self.mapPartitions(lambda values: [sum(values, 0)]).fold(0, lambda a, b: a + b)

    def countByValue(self) -> dict[Any, int]:
        """How often each element occurs (a ``defaultdict(int)``, as pyspark's)."""

        def partial(values: Iterator[Any]) -> Iterable[dict[Any, int]]:
            counts: dict[Any, int] = defaultdict(int)
            for value in values:
                counts[value] += 1
            yield counts

        def merge(left: dict[Any, int], right: dict[Any, int]) -> dict[Any, int]:
            for key, count in right.items():
                left[key] += count
            return left

        counts: dict[Any, int] = self.mapPartitions(partial).reduce(merge)
        return counts

    def foreach(self, f: Callable[[Any], None]) -> None:
        """Runs ``f`` on each element, on the server's executors."""

        def run(values: Iterator[Any]) -> Iterable[Any]:
            for value in values:
                f(value)
            return iter(())

        self.mapPartitions(run).count()

    def foreachPartition(self, f: Callable[[Iterator[Any]], Any]) -> None:
        """Runs ``f`` on each partition's iterator, on the server's executors."""

        def run(values: Iterator[Any]) -> Iterable[Any]:
            result = f(values)
            if hasattr(result, "__iter__"):
                for _ in result:  # pyspark drains a generator foreachPartition returns
                    pass
            return iter(())

        self.mapPartitions(run).count()

