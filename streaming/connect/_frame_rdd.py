"""FrameRDD: pyspark's RDD API over a Spark Connect DataFrame, each row one pickled Python value; the
batches of DStreams on Connect (pyspark's ``RDD``)."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable, Iterable, Iterator

from ._directories import make_directories
from ._errors import unsupported_rdd_attribute
from ._frame_pairs import FramePairs

__all__ = ["FrameRDD"]


_CODECS = {
    "org.apache.hadoop.io.compress.GzipCodec": ("gzip", ".gz"),
    "org.apache.hadoop.io.compress.BZip2Codec": ("bz2", ".bz2"),
}
"""Hadoop codec classes ``saveAsTextFile`` takes: fsspec's compression name and the file suffix."""


class _PartFileWriter:
    """Runs in the Python worker: writes a partition's lines to ``part-NNNNN`` (pyspark's names),
    an empty partition too; bytes as they are, anything else as ``str(x)`` in UTF-8."""

    def __init__(self, path: str, compression: str | None, suffix: str) -> None:
        self.path = path
        self.compression = compression
        self.suffix = suffix

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[str]:
        import fsspec

        name = f"{self.path}/part-{index:05d}{self.suffix}"
        files = fsspec.open(name, "wb", compression=self.compression, auto_mkdir=False)  # made below, race-proof
        make_directories(files.fs, self.path)
        if files.fs.exists(name):
            raise FileExistsError(f"Output directory {self.path} already exists")
        with files as out:
            for value in values:
                out.write(value if isinstance(value, (bytes, bytearray)) else str(value).encode("utf-8"))
                out.write(b"\n")
        return [name]


class _SuccessMarker:
    """Runs in the Python worker: the ``_SUCCESS`` file of a finished output directory."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[str]:
        import fsspec

        with fsspec.open(f"{self.path}/_SUCCESS", "wb", auto_mkdir=True):
            pass
        return []


class _RowsToArrow:
    """Runs in the Python worker: a partition's tuples, Rows or dicts as Arrow rows of a schema."""

    def __init__(self, names: list[str], arrow_schema: Any) -> None:
        self.names = names
        self.arrow_schema = arrow_schema

    def __call__(self, batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa  # type: ignore[import-untyped]

        from ._codec import decode

        rows = []
        for value in decode(batches):
            if isinstance(value, dict):
                rows.append({name: value.get(name) for name in self.names})
            elif hasattr(value, "asDict"):
                rows.append(value.asDict())
            elif isinstance(value, (tuple, list)):
                rows.append(dict(zip(self.names, value, strict=False)))
            else:
                rows.append({self.names[0]: value})
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=self.arrow_schema)


_IDS = itertools.count(1)


class _Values:
    """A partition's values as they are (``toLocalIterator``'s partition function)."""

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[Any]:
        return values


def _pyspark(name: str) -> Any:
    """pyspark's ``RDD.<name>``: plain Python over RDD methods a FrameRDD has, so it gives pyspark's results here."""
    from pyspark import RDD

    return getattr(RDD, name)


class FrameRDD(FramePairs):
    """An RDD whose partitions are a Spark Connect DataFrame's: pyspark's RDD API, the same
    partitions, order and results as on a classic SparkContext.

    Each row of ``dataframe`` carries one value pickled as pyspark pickles RDD elements; functions
    travel with Connect's Python UDFs (cloudpickle) and run in ``mapInArrow`` tasks, pipelined as
    pyspark pipelines them. Shuffles place key ``k`` in partition ``partitionFunc(k) % n`` exactly.
    Actions block the calling thread until the server answers; cancel them through the session's
    tags (``interruptTag``), as a job group on a classic context.
    """

    def toDF(self, schema: Any = None, sampleRatio: float | None = None) -> Any:  # noqa: N803
        """A typed DataFrame of the elements (tuples, Rows or dicts), as ``rdd.toDF``; the schema
        is inferred from the first 100 elements when not given."""
        session = self.ctx.session
        if schema is None or isinstance(schema, (list, tuple)):
            sample = self.take(100)
            if not sample:
                raise ValueError("can not infer schema from an empty RDD; pass a schema")
            inferred = session.createDataFrame(sample, schema).schema
        elif isinstance(schema, str):
            inferred = session.createDataFrame([], schema).schema
        else:
            inferred = schema
        from pyspark.sql.pandas.types import to_arrow_schema

        return self.frame.mapInArrow(_RowsToArrow(inferred.names, to_arrow_schema(inferred)), inferred)

    def saveAsTextFile(self, path: str, compressionCodecClass: str | None = None) -> None:  # noqa: N803
        """Writes each element's ``str`` as a line into ``part-NNNNN`` files, one per partition (an
        empty one too), then ``_SUCCESS``, as pyspark's; the server's Python workers write them
        (with fsspec: a local path or a URI the server reaches)."""
        compression, suffix = None, ""
        if compressionCodecClass is not None:
            if compressionCodecClass not in _CODECS:
                raise ValueError(
                    f"unknown compression codec class {compressionCodecClass!r}; use one of {sorted(_CODECS)}"
                )
            compression, suffix = _CODECS[compressionCodecClass]
        target = path.rstrip("/")
        self.mapPartitionsWithIndex(_PartFileWriter(target, compression, suffix)).collect()
        self.ctx.parallelize([None], 1).mapPartitionsWithIndex(_SuccessMarker(target)).collect()

    # -- what pyspark builds from the methods above --

    def max(self, key: Callable[[Any], Any] | None = None) -> Any:
        """The largest element (by ``key``)."""
        return self.reduce(max if key is None else lambda a, b: max(a, b, key=key))

    def min(self, key: Callable[[Any], Any] | None = None) -> Any:
        """The smallest element (by ``key``)."""
        return self.reduce(min if key is None else lambda a, b: min(a, b, key=key))

    def stats(self) -> Any:
        """A ``StatCounter`` of the elements, merged partition by partition as pyspark's."""
        from pyspark.statcounter import StatCounter

        return self.mapPartitions(lambda values: [StatCounter(values)]).reduce(lambda a, b: a.mergeStats(b))

    def mean(self) -> float:
        """The mean of the elements."""
        return float(self.stats().mean())

    def variance(self) -> float:
        """The variance of the elements."""
        return float(self.stats().variance())

    def stdev(self) -> float:
        """The standard deviation of the elements."""
        return float(self.stats().stdev())

    def top(self, num: int, key: Callable[[Any], Any] | None = None) -> list[Any]:
        """The ``num`` largest elements, largest first."""
        return list(self.mapPartitions(lambda values: [heapq.nlargest(num, values, key=key)])
                    .reduce(lambda a, b: heapq.nlargest(num, a + b, key=key)))

    def takeOrdered(self, num: int, key: Callable[[Any], Any] | None = None) -> list[Any]:
        """The ``num`` smallest elements, smallest first."""
        if num < 0:
            raise ValueError("top N cannot be negative.")
        if num == 0 or self.getNumPartitions() == 0:
            return []
        return list(self.mapPartitions(lambda values: [heapq.nsmallest(num, values, key=key)])
                    .reduce(lambda a, b: heapq.nsmallest(num, a + b, key=key)))

    def zipWithIndex(self) -> FrameRDD:
        """Each element with its index in the RDD's order (one job counts the partitions first)."""
        starts = [0]
        if self.getNumPartitions() > 1:
            counts = self.mapPartitions(lambda values: [sum(1 for _ in values)]).collect()
            for count in counts[:-1]:
                starts.append(starts[-1] + count)

        def number(index: int, values: Iterator[Any]) -> Iterable[Any]:
            return ((value, position) for position, value in enumerate(values, starts[index]))

        return self._same_count(self.mapPartitionsWithIndex(number))

    def zipWithUniqueId(self) -> FrameRDD:
        """Each element with a unique id: ``i * n + k`` for the ``i``-th element of partition ``k``."""
        n = self.getNumPartitions()

        def number(index: int, values: Iterator[Any]) -> Iterable[Any]:
            return ((value, position * n + index) for position, value in enumerate(values))

        return self._same_count(self.mapPartitionsWithIndex(number))

    def subtract(self, other: FrameRDD, numPartitions: int | None = None) -> FrameRDD:  # noqa: N803
        """The elements not in ``other``."""
        theirs = other.map(lambda x: (x, True))
        return self.map(lambda x: (x, True)).subtractByKey(theirs, numPartitions).keys()

    def intersection(self, other: FrameRDD) -> FrameRDD:
        """The elements in both, once each."""
        return (self.map(lambda v: (v, None)).cogroup(other.map(lambda v: (v, None)))
                .filter(lambda pair: all(pair[1])).keys())

    # -- pyspark's own Python, over the methods above (the same results, the same errors) --

    def groupBy(self, f: Callable[[Any], Any], numPartitions: int | None = None,  # noqa: N803
                partitionFunc: Callable[[Any], int] | None = None) -> FrameRDD:  # noqa: N803
        """The elements grouped by ``f(x)``: ``keyBy(f)`` then ``groupByKey``, as pyspark's."""
        if partitionFunc is None:
            return self.keyBy(f).groupByKey(numPartitions)
        return self.keyBy(f).groupByKey(numPartitions, partitionFunc)

    def repartitionAndSortWithinPartitions(self, numPartitions: int | None = None,  # noqa: N803
                                           partitionFunc: Callable[[Any], int] | None = None,  # noqa: N803
                                           ascending: bool = True, keyfunc: Callable[[Any], Any] = lambda x: x) -> FrameRDD:
        """``partitionBy``, then each partition sorted by ``keyfunc(key)`` (stable), as pyspark's."""
        reverse = not ascending

        def sort_partition(values: Iterator[Any]) -> Iterable[Any]:
            return sorted(values, key=lambda pair: keyfunc(pair[0]), reverse=reverse)

        partitioned = self.partitionBy(numPartitions) if partitionFunc is None else self.partitionBy(numPartitions, partitionFunc)
        return partitioned.mapPartitions(sort_partition, True)

    def treeAggregate(self, zeroValue: Any, seqOp: Callable[[Any, Any], Any], combOp: Callable[[Any, Any], Any],  # noqa: N803
                      depth: int = 2) -> Any:
        """``aggregate`` combining the partial results in a tree of ``depth`` levels, as pyspark's."""
        return _pyspark("treeAggregate")(self, zeroValue, seqOp, combOp, depth)

    def treeReduce(self, f: Callable[[Any, Any], Any], depth: int = 2) -> Any:
        """``reduce`` combining the partial results in a tree of ``depth`` levels, as pyspark's."""
        return _pyspark("treeReduce")(self, f, depth)

    def takeSample(self, withReplacement: bool, num: int, seed: int | None = None) -> list[Any]:  # noqa: N803
        """``num`` elements sampled (pyspark's sampler: with a seed, pyspark's sample)."""
        result: list[Any] = _pyspark("takeSample")(self, withReplacement, num, seed)
        return result

    def randomSplit(self, weights: list[float], seed: int | None = None) -> list[FrameRDD]:
        """The elements split at random by ``weights`` (pyspark's sampler: with a seed, pyspark's split)."""
        result: list[FrameRDD] = _pyspark("randomSplit")(self, weights, seed)
        return result

    def sampleByKey(self, withReplacement: bool, fractions: dict[Any, float], seed: int | None = None) -> FrameRDD:  # noqa: N803
        """Pairs sampled by key at ``fractions[key]`` (pyspark's sampler)."""
        result: FrameRDD = _pyspark("sampleByKey")(self, withReplacement, fractions, seed)
        return result

    def histogram(self, buckets: Any) -> tuple[list[Any], list[int]]:
        """The buckets and the counts of the elements in them, as pyspark's."""
        result: tuple[list[Any], list[int]] = _pyspark("histogram")(self, buckets)
        return result

    def sampleStdev(self) -> Any:
        """The sample standard deviation of the elements."""
        return self.stats().sampleStdev()

    def sampleVariance(self) -> Any:
        """The sample variance of the elements."""
        return self.stats().sampleVariance()

    def pipe(self, command: str, env: dict[str, str] | None = None, checkCode: bool = False) -> FrameRDD:  # noqa: N803
        """Each partition piped through ``command`` in the server's Python workers, as pyspark's."""
        result: FrameRDD = _pyspark("pipe")(self, command, env, checkCode)
        return result

    def toLocalIterator(self, prefetchPartitions: bool = False) -> Iterator[Any]:  # noqa: N803
        """The elements, one partition collected at a time (a query each, run as the iterator reaches it)."""
        for index in range(self.getNumPartitions()):
            yield from self._collect_partitions(_Values(), (index,))

    def setName(self, name: str) -> FrameRDD:
        """Names the RDD (kept here: there is no JVM RDD to name)."""
        self._name = name
        return self

    def name(self) -> str | None:
        """The name ``setName`` gave, else ``None``."""
        return getattr(self, "_name", None)

    def id(self) -> int:
        """A number unique to this RDD in this process (a JVM RDD's id on classic Spark)."""
        if getattr(self, "_id", None) is None:
            self._id = next(_IDS)
        return self._id

    def __iter__(self) -> Iterator[Any]:
        """The elements, collected: a Connect session's ``createDataFrame`` takes any iterable, so
        ``spark.createDataFrame(rdd)`` takes a FrameRDD as a classic session takes an RDD (the rows
        travel through the client; ``rdd.toDF()`` keeps them on the server)."""
        return iter(self.collect())

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            from pyspark import RDD

            if hasattr(RDD, name):
                raise unsupported_rdd_attribute(name)
        raise AttributeError(f"'FrameRDD' object has no attribute {name!r}")
