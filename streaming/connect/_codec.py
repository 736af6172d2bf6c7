"""Python values in Arrow batches: one pickled value per row (pyspark's rules: plain pickle for values),
and the callables that run in the Python workers of ``mapInArrow`` (PythonRDD's worker loop).

Every partition starts with a *marker* row (``v`` null) holding the partition's index ``p``: a
task's own partition id is the stage's (a union's, say), not the RDD's, and the marker also makes
Spark run the Python function on an otherwise empty partition, as pyspark runs ``mapPartitions``.
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any, Callable, Iterable, Iterator, Sequence

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from ._shared_values import task_ended, task_started

__all__ = [
    "FRAME_SCHEMA",
    "INDEX_SCHEMA",
    "SHUFFLE_SCHEMA",
    "TEXT_SCHEMA",
    "VALUE_COLUMN",
    "PartitionFunc",
    "PartitionRunner",
    "Route",
    "ShuffleWriter",
    "SourceRows",
    "decode",
    "dumps",
    "encode",
    "loads",
]

VALUE_COLUMN = "v"
# StructTypes, not DDL strings: Connect's client parses a DDL string on the server, one round trip
# per mapInArrow or createDataFrame call.
FRAME_SCHEMA = StructType([StructField("p", IntegerType()), StructField(VALUE_COLUMN, BinaryType())])
"""A FrameRDD's frame: ``p int, v binary``."""
# A shuffle row: ``h`` picks the target partition (see partition_keys), ``p`` is that partition,
# ``m`` and ``s`` restore the order pyspark's shuffle gives (map partition, then position in its
# output; markers have m = -1 and come first), ``v`` is the value.
SHUFFLE_SCHEMA = StructType(
    [StructField("h", IntegerType()), StructField("p", IntegerType()), StructField("m", IntegerType()),
     StructField("s", LongType()), StructField(VALUE_COLUMN, BinaryType())]
)
"""A shuffle's rows: ``h int, p int, m int, s long, v binary``."""
INDEX_SCHEMA = StructType([StructField("p", IntegerType())])
"""One partition index per row: ``p int``."""
TEXT_SCHEMA = StructType([StructField("value", StringType())])
"""Text lines: ``value string``, as ``spark.read.text`` gives and ``write.text`` takes."""

PartitionFunc = Callable[[int, Iterator[Any]], Iterable[Any]]
"""``(partition index, values) -> values``: what ``mapPartitionsWithIndex`` takes."""
Route = Callable[[int, Iterator[Any]], Iterable["tuple[int, Any]"]]
"""``(partition index, values) -> (target partition, value)`` pairs: one side of a shuffle."""

_ROWS_PER_BATCH = 4096
_BYTES_PER_BATCH = 4 << 20
_FRAME_ARROW_SCHEMA = pa.schema([pa.field("p", pa.int32()), pa.field(VALUE_COLUMN, pa.binary())])
_SHUFFLE_ARROW_SCHEMA = pa.schema(
    [pa.field("h", pa.int32()), pa.field("p", pa.int32()), pa.field("m", pa.int32()), pa.field("s", pa.int64()),
     pa.field(VALUE_COLUMN, pa.binary())]
)


def dumps(value: Any) -> bytes:
    """A value as pyspark pickles RDD elements (plain pickle, the highest protocol)."""
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    """The value of one pickled row."""
    return pickle.loads(data)


def decode(batches: Iterable[pa.RecordBatch]) -> Iterator[Any]:
    """The values of Arrow batches' value column, in order, markers left out."""
    for batch in batches:
        for data in batch.column(VALUE_COLUMN).to_pylist():
            if data is not None:
                yield pickle.loads(data)


def encode(index: int, values: Iterable[Any]) -> Iterator[pa.RecordBatch]:
    """A partition's marker, then its values as pickled rows (batches bounded by rows and bytes)."""
    rows: list[bytes | None] = [None]
    size = 0
    for value in values:
        data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        rows.append(data)
        size += len(data)
        if len(rows) >= _ROWS_PER_BATCH or size >= _BYTES_PER_BATCH:
            yield _frame_batch(index, rows)
            rows, size = [], 0
    if rows:
        yield _frame_batch(index, rows)


def _frame_batch(index: int, rows: list[bytes | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([index] * len(rows), pa.int32()), pa.array(rows, pa.binary())], schema=_FRAME_ARROW_SCHEMA
    )


def _open(batches: Iterable[pa.RecordBatch]) -> tuple[int, Iterator[pa.RecordBatch]]:
    """The partition's index (from its marker, the first row) and all its batches."""
    batches = iter(batches)
    for first in batches:
        if first.num_rows:
            return first.column("p")[0].as_py(), itertools.chain((first,), batches)
    raise RuntimeError("a FrameRDD partition without its marker row (the frame was not built by FrameRDD)")


def _drain(batches: Iterator[pa.RecordBatch]) -> None:
    # A partition function may stop reading early (take, first): the worker protocol still
    # expects the whole input read, as PythonRDD's writer thread sends it all.
    for _ in batches:
        pass


class PartitionRunner:
    """The ``mapInArrow`` function of a pipelined partition function: decode, run, encode.

    Args:
        func: ``(partition index, values) -> values``, the index read from the partition's marker.
        source: when given, the partition's values come from these slices (``parallelize``)
            instead of the input rows, which are then only the partition's marker.
        only: when given, only the partitions of these indexes run (pyspark's ``runJob`` on some
            partitions, as ``take`` scans them); any other yields just its marker, running nothing.
    """

    def __init__(self, func: PartitionFunc | None, source: Sequence[bytes] | None = None,
                 only: frozenset[int] | None = None) -> None:
        self.func = func
        self.source = source
        self.only = only

    def values(self, index: int, batches: Iterator[pa.RecordBatch]) -> Iterator[Any]:
        """The partition's values: its slice of the source, else its decoded rows, through ``func``."""
        if self.only is not None and index not in self.only:
            return iter(())
        values: Iterator[Any] = iter(pickle.loads(self.source[index])) if self.source is not None else decode(batches)
        return iter(self.func(index, values)) if self.func is not None else values

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Runs in the Python worker, once per partition."""
        task_started()
        index, batches = _open(batches)
        yield from encode(index, self.values(index, batches))
        task_ended()
        _drain(batches)


class ShuffleWriter:
    """The map side of an exact shuffle: each value routed to its target partition's key.

    Rows carry ``h = keys[target]`` (``repartition(n, "h")`` then puts them in partition ``target``),
    ``m = order + partition index`` and ``s`` = the position in this partition's output, so
    ``sortWithinPartitions("m", "s")`` gives pyspark's order: map partitions in turn, each in order.
    With ``markers``, the task of partition 0 also writes every target partition's marker row.
    """

    def __init__(self, runner: PartitionRunner, route: Route, keys: Sequence[int], order: int,
                 markers: bool = False) -> None:
        self.runner = runner
        self.route = route
        self.keys = keys
        self.order = order
        self.markers = markers

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Runs in the Python worker, once per map partition."""
        task_started()
        index, batches = _open(batches)
        keys, order = self.keys, self.order + index
        if self.markers and index == 0:  # every target partition's marker, once for the shuffle
            yield shuffle_batch(list(keys), list(range(len(keys))), -1, 0, [None] * len(keys))
        hashes: list[int] = []
        targets: list[int] = []
        rows: list[bytes] = []
        size = 0
        start = 0
        for target, value in self.route(index, self.runner.values(index, batches)):
            data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
            hashes.append(keys[target])
            targets.append(target)
            rows.append(data)
            size += len(data)
            if len(rows) >= _ROWS_PER_BATCH or size >= _BYTES_PER_BATCH:
                yield shuffle_batch(hashes, targets, order, start, rows)
                start += len(rows)
                hashes, targets, rows, size = [], [], [], 0
        if rows:
            yield shuffle_batch(hashes, targets, order, start, rows)
        task_ended()
        _drain(batches)


def shuffle_batch(hashes: list[int], targets: list[int], order: int, start: int, rows: Sequence[bytes | None]) -> pa.RecordBatch:
    """Shuffle rows (see SHUFFLE_SCHEMA); positions count from ``start``."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array(hashes, pa.int32()),
            pa.array(targets, pa.int32()),
            pa.array([order] * len(rows), pa.int32()),
            pa.array(range(start, start + len(rows)), pa.int64()),
            pa.array(rows, pa.binary()),
        ],
        schema=_SHUFFLE_ARROW_SCHEMA,
    )


class SourceRows:
    """Runs in the Python worker over a server-side frame (files read by ``spark.read.text``, a
    user's DataFrame): each row, as a line or a ``Row``, routed to the partition of the same index
    (this runs in the frame's last stage, so the task's id is the frame's partition index)."""

    def __init__(self, keys: Sequence[int], lines: bool) -> None:
        self.keys = keys
        self.lines = lines

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Runs in the Python worker, once per partition of the frame."""
        from pyspark import TaskContext
        from pyspark.sql import Row

        context = TaskContext.get()
        index = context.partitionId() if context is not None else 0
        start = 0
        for batch in batches:
            if self.lines:
                # Spark holds text as bytes it never checked: read them as bytes and decode malformed sequences as
                # U+FFFD, as classic Spark's Hadoop Text does (pyarrow's str would raise on them and fail the batch).
                values: list[Any] = [data.decode("utf-8", "replace")
                                     for data in batch.column("value").cast(pa.binary()).to_pylist()]
            else:
                make = Row(*batch.schema.names)
                values = [make(*row.values()) for row in batch.to_pylist()]
            if values:
                rows = [pickle.dumps(value, pickle.HIGHEST_PROTOCOL) for value in values]
                yield shuffle_batch([self.keys[index]] * len(rows), [index] * len(rows), 0, start, rows)
                start += len(rows)
