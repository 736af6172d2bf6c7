"""FramePairs: pyspark's key-value RDD operations over exact shuffles: ``partitionBy``, ``combineByKey``
(map-side combine, shuffle, merge) and what pyspark builds on them (joins, cogroup, sorting, distinct)."""

from __future__ import annotations

import bisect
import copy
from typing import Any, Callable, Iterable, Iterator

from pyspark.core.rdd import portable_hash
from pyspark.rddsampler import RDDSampler
from pyspark.resultiterable import ResultIterable
from typing_extensions import Self

from ._environment import Partitioner
from ._frame_ops import FrameOps

__all__ = ["FramePairs"]


class _ByKey:
    """The route of ``partitionBy``: each ``(k, v)`` to ``partitionFunc(k) % n``."""

    def __init__(self, partitioner: Partitioner) -> None:
        self.partitioner = partitioner

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[tuple[int, Any]]:
        partition = self.partitioner
        return ((partition(pair[0]), pair) for pair in values)


class _Grid:
    """The routes of ``cartesian``: partition ``(i, j)`` is ``i * right + j``; left values are
    sent to every ``j`` of their row, right values to every ``i`` of their column, tagged by side."""

    def __init__(self, side: int, left: int, right: int) -> None:
        self.side, self.left, self.right = side, left, right

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[tuple[int, Any]]:
        for value in values:
            if self.side == 0:
                for j in range(self.right):
                    yield index * self.right + j, (0, value)
            else:
                for i in range(self.left):
                    yield i * self.right + index, (1, value)


def _pairs_of_grid(values: Iterator[Any]) -> Iterable[Any]:
    left: list[Any] = []
    right: list[Any] = []
    for side, value in values:
        (left if side == 0 else right).append(value)
    return ((a, b) for a in left for b in right)


class _Tag:
    """Tags a value with its side in a cogroup: ``(side, value)``."""

    def __init__(self, side: int) -> None:
        self.side = side

    def __call__(self, value: Any) -> tuple[int, Any]:
        return self.side, value


def _join_dispatch(kind: str) -> Callable[[Iterable[tuple[int, Any]]], Iterable[tuple[Any, Any]]]:
    def dispatch(tagged: Iterable[tuple[int, Any]]) -> Iterable[tuple[Any, Any]]:
        left: list[Any] = []
        right: list[Any] = []
        for side, value in tagged:
            if side == 1:
                left.append(value)
            elif side == 2:
                right.append(value)
        if not left and kind in ("right", "full"):
            left.append(None)
        if not right and kind in ("left", "full"):
            right.append(None)
        return ((v, w) for v in left for w in right)

    return dispatch


class FramePairs(FrameOps):
    """Operations on RDDs of ``(key, value)`` pairs, and the other shuffling operations."""

    def _defaultReducePartitions(self) -> int:
        """pyspark's rule: ``spark.default.parallelism`` when set, else this RDD's partition count."""
        if self.ctx.default_parallelism_set:
            return self.ctx.defaultParallelism
        return self.getNumPartitions()

    def partitionBy(self, numPartitions: int | None, partitionFunc: Callable[[Any], int] = portable_hash) -> Self:  # noqa: N803
        """Puts key ``k`` in partition ``partitionFunc(k) % numPartitions``; no shuffle when the RDD
        is already partitioned so."""
        n = self._defaultReducePartitions() if numPartitions is None else numPartitions
        partitioner = Partitioner(n, partitionFunc)
        if self.partitioner == partitioner:
            return self
        return self._same_count(self._exchange([(self, _ByKey(partitioner))], n, partitioner))

    def combineByKey(
        self,
        createCombiner: Callable[[Any], Any],  # noqa: N803
        mergeValue: Callable[[Any, Any], Any],  # noqa: N803
        mergeCombiners: Callable[[Any, Any], Any],  # noqa: N803
        numPartitions: int | None = None,  # noqa: N803
        partitionFunc: Callable[[Any], int] = portable_hash,  # noqa: N803
    ) -> Self:
        """Combines each partition's values by key, shuffles, merges the combiners (keys in the
        order they first arrive, as pyspark's in-memory merger)."""
        n = self._defaultReducePartitions() if numPartitions is None else numPartitions

        def combine_locally(values: Iterator[Any]) -> Iterable[Any]:
            combined: dict[Any, Any] = {}
            for key, value in values:
                combined[key] = mergeValue(combined[key], value) if key in combined else createCombiner(value)
            return iter(combined.items())

        def merge(values: Iterator[Any]) -> Iterable[Any]:
            merged: dict[Any, Any] = {}
            for key, combiner in values:
                merged[key] = mergeCombiners(merged[key], combiner) if key in merged else combiner
            return iter(merged.items())

        local = self.mapPartitions(combine_locally, preservesPartitioning=True)
        return local.partitionBy(n, partitionFunc).mapPartitions(merge, preservesPartitioning=True)

    def reduceByKey(self, func: Callable[[Any, Any], Any], numPartitions: int | None = None,  # noqa: N803
                    partitionFunc: Callable[[Any], int] = portable_hash) -> Self:  # noqa: N803
        """Merges each key's values with ``func``."""
        return self.combineByKey(lambda x: x, func, func, numPartitions, partitionFunc)

    def reduceByKeyLocally(self, func: Callable[[Any, Any], Any]) -> dict[Any, Any]:
        """Merges each key's values with ``func`` into a dict on the client."""

        def partial(values: Iterator[Any]) -> Iterable[dict[Any, Any]]:
            merged: dict[Any, Any] = {}
            for key, value in values:
                merged[key] = func(merged[key], value) if key in merged else value
            yield merged

        def merge(left: dict[Any, Any], right: dict[Any, Any]) -> dict[Any, Any]:
            for key, value in right.items():
                left[key] = func(left[key], value) if key in left else value
            return left

        merged: dict[Any, Any] = self.mapPartitions(partial).reduce(merge)
        return merged

    def foldByKey(self, zeroValue: Any, func: Callable[[Any, Any], Any], numPartitions: int | None = None,  # noqa: N803
                  partitionFunc: Callable[[Any], int] = portable_hash) -> Self:  # noqa: N803
        """Merges each key's values with ``func`` from a copy of ``zeroValue``."""
        return self.combineByKey(lambda v: func(copy.deepcopy(zeroValue), v), func, func, numPartitions, partitionFunc)

    def aggregateByKey(self, zeroValue: Any, seqFunc: Callable[[Any, Any], Any], combFunc: Callable[[Any, Any], Any],  # noqa: N803
                       numPartitions: int | None = None, partitionFunc: Callable[[Any], int] = portable_hash) -> Self:  # noqa: N803
        """Aggregates each key's values with ``seqFunc`` from a copy of ``zeroValue``, then ``combFunc``."""
        return self.combineByKey(lambda v: seqFunc(copy.deepcopy(zeroValue), v), seqFunc, combFunc, numPartitions, partitionFunc)

    def groupByKey(self, numPartitions: int | None = None, partitionFunc: Callable[[Any], int] = portable_hash) -> Self:  # noqa: N803
        """Each key with a ``ResultIterable`` of its values."""

        def append(values: list[Any], value: Any) -> list[Any]:
            values.append(value)
            return values

        def extend(left: list[Any], right: list[Any]) -> list[Any]:
            left.extend(right)
            return left

        grouped = self.combineByKey(lambda value: [value], append, extend, numPartitions, partitionFunc)
        return grouped.mapValues(ResultIterable)

    def mapValues(self, f: Callable[[Any], Any]) -> Self:
        """Applies ``f`` to each value, keeping keys and partitioning."""
        return self.map(lambda kv: (kv[0], f(kv[1])), preservesPartitioning=True)

    def flatMapValues(self, f: Callable[[Any], Iterable[Any]]) -> Self:
        """Applies ``f`` to each value and flattens, keeping keys and partitioning."""
        return self.flatMap(lambda kv: ((kv[0], x) for x in f(kv[1])), preservesPartitioning=True)

    def keys(self) -> Self:
        """The keys of the pairs."""
        return self.map(lambda kv: kv[0])

    def values(self) -> Self:
        """The values of the pairs."""
        return self.map(lambda kv: kv[1])

    def countByKey(self) -> dict[Any, int]:
        """How many pairs each key has."""
        return self.map(lambda kv: kv[0]).countByValue()

    def collectAsMap(self) -> dict[Any, Any]:
        """The pairs as a dict on the client."""
        return dict(self.collect())

    def lookup(self, key: Any) -> list[Any]:
        """The values of one key."""
        return self.filter(lambda kv: kv[0] == key).values().collect()

    # -- joins --

    def _join(self, other: FramePairs, numPartitions: int | None, kind: str) -> Self:  # noqa: N803
        dispatch = _join_dispatch(kind)
        left = self.mapValues(lambda v: (1, v))
        right = other.mapValues(lambda v: (2, v))
        return left.union(right).groupByKey(numPartitions).flatMapValues(lambda group: dispatch(iter(group)))

    def join(self, other: FramePairs, numPartitions: int | None = None) -> Self:  # noqa: N803
        """``(k, (v, w))`` for every pair of values of a key in both."""
        return self._join(other, numPartitions, "inner")

    def leftOuterJoin(self, other: FramePairs, numPartitions: int | None = None) -> Self:  # noqa: N803
        """As ``join``, keeping this RDD's keys missing from ``other`` with ``None``."""
        return self._join(other, numPartitions, "left")

    def rightOuterJoin(self, other: FramePairs, numPartitions: int | None = None) -> Self:  # noqa: N803
        """As ``join``, keeping ``other``'s keys missing here with ``None``."""
        return self._join(other, numPartitions, "right")

    def fullOuterJoin(self, other: FramePairs, numPartitions: int | None = None) -> Self:  # noqa: N803
        """As ``join``, keeping the keys of either with ``None`` for the missing side."""
        return self._join(other, numPartitions, "full")

    def cogroup(self, other: FramePairs, numPartitions: int | None = None) -> Self:  # noqa: N803
        """Each key with a tuple of ``ResultIterable``s: its values here and in ``other``."""
        return self._cogroup([self, other], numPartitions)

    def groupWith(self, other: FramePairs, *others: FramePairs) -> Self:
        """``cogroup`` of several RDDs."""
        return self._cogroup([self, other, *others], None)

    def _cogroup(self, rdds: list[FramePairs], numPartitions: int | None) -> Self:  # noqa: N803
        count = len(rdds)
        tagged = [rdd.mapValues(_Tag(i)) for i, rdd in enumerate(rdds)]
        union = tagged[0]
        for rdd in tagged[1:]:
            union = union.union(rdd)

        def dispatch(group: Iterable[tuple[int, Any]]) -> tuple[ResultIterable[Any], ...]:
            buffers: list[list[Any]] = [[] for _ in range(count)]
            for side, value in group:
                buffers[side].append(value)
            return tuple(ResultIterable(values) for values in buffers)

        return union.groupByKey(numPartitions).mapValues(dispatch)  # type: ignore[return-value]

    def cartesian(self, other: FramePairs) -> Self:
        """Every ``(a, b)``; partition ``i * other's count + j`` pairs partition ``i`` with ``j``."""
        left, right = self.getNumPartitions(), other.getNumPartitions()
        grid = self._exchange([(self, _Grid(0, left, right)), (other, _Grid(1, left, right))], left * right)
        return grid.mapPartitions(_pairs_of_grid)

    def distinct(self, numPartitions: int | None = None) -> Self:  # noqa: N803
        """Each element once."""
        return self.map(lambda x: (x, None)).reduceByKey(lambda x, _: x, numPartitions).map(lambda x: x[0])

    def subtractByKey(self, other: FramePairs, numPartitions: int | None = None) -> Self:  # noqa: N803
        """The pairs whose key is not in ``other``."""

        def keep(pair: Any) -> bool:
            _, (left, right) = pair
            return bool(left) and not right

        return self.cogroup(other, numPartitions).filter(keep).flatMapValues(lambda pair: pair[0])

    # -- sorting --

    def sample(self, withReplacement: bool, fraction: float, seed: int | None = None) -> Self:  # noqa: N803
        """A sample drawn per partition as pyspark's (the same seeds give the same elements)."""
        if not fraction >= 0:
            raise ValueError("Fraction must be nonnegative.")
        return self.mapPartitionsWithIndex(RDDSampler(withReplacement, fraction, seed).func, True)

    def sortByKey(self, ascending: bool | None = True, numPartitions: int | None = None,  # noqa: N803
                  keyfunc: Callable[[Any], Any] = lambda x: x) -> Self:
        """Sorted by key: range partitions from a sample (seed 1, as pyspark), each sorted."""
        count = self._defaultReducePartitions() if numPartitions is None else numPartitions
        reverse = not ascending

        def sort_partition(values: Iterator[Any]) -> Iterable[Any]:
            return iter(sorted(values, key=lambda kv: keyfunc(kv[0]), reverse=reverse))

        if count == 1:
            source = self.coalesce(1) if self.getNumPartitions() > 1 else self
            return source.mapPartitions(sort_partition, True)
        size = self.count()
        if not size:
            return self
        fraction = min(count * 20.0 / max(size, 1), 1.0)
        samples = sorted(self.sample(False, fraction, 1).map(lambda kv: kv[0]).collect(), key=keyfunc)
        bounds = [samples[int(len(samples) * (i + 1) / count)] for i in range(count - 1)]

        def range_partition(key: Any) -> int:
            p = bisect.bisect_left(bounds, keyfunc(key))
            return p if not reverse else count - 1 - p

        return self.partitionBy(count, range_partition).mapPartitions(sort_partition, True)

    def sortBy(self, keyfunc: Callable[[Any], Any], ascending: bool = True, numPartitions: int | None = None) -> Self:  # noqa: N803
        """Sorted by ``keyfunc``."""
        return self.keyBy(keyfunc).sortByKey(ascending, numPartitions).values()
