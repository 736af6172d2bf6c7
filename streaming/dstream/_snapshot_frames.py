"""State snapshots on Spark Connect: a state FrameRDD saved by the server as Parquet of pickled rows, and read back
into the same partitions in the same order (classic Spark's snapshots are ``saveAsPickleFile`` files instead).

Each row is ``(p, s, v)``: the partition index, the value's place in it, the value pickled. The number of
partitions goes in a ``_partitions`` file beside the Parquet parts (Spark's reader skips names starting with ``_``),
so that a state whose partitions are all empty comes back with as many partitions.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

from scheduler import CheckpointError, CheckpointPath

__all__ = ["FRAMES_MARKER", "is_frame_snapshot", "load_frame_snapshot", "save_frame_snapshot"]

FRAMES_MARKER = "_partitions"
"""The file in a Connect snapshot's directory that names its format and its number of partitions."""

_FORMAT = "parquet-pickled-rows"


def _schema() -> Any:
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

    return StructType([StructField("p", IntegerType(), False), StructField("s", LongType(), False),
                       StructField("v", BinaryType(), False)])


# The functions below run in the server's Python workers. They are made inside the calls that
# ship them, so cloudpickle sends them by value: the workers need no aiodstream installed.

def save_frame_snapshot(rdd: Any, target: CheckpointPath) -> None:
    """Have the server write ``rdd``'s partitions as Parquet in ``target`` (a new directory), then name their
    number beside them (blocking: one Spark job, then a small write on this process's file manager)."""
    def tag(index: int, values: Iterator[Any]) -> Iterable[tuple[int, int, bytes]]:
        import pickle

        return ((index, place, pickle.dumps(value, pickle.HIGHEST_PROTOCOL)) for place, value in enumerate(values))

    rdd.mapPartitionsWithIndex(tag).toDF(_schema()).write.parquet(target.uri())
    marker = json.dumps({"format": _FORMAT, "partitions": rdd.getNumPartitions()}).encode()
    if not (target / FRAMES_MARKER).create_new(marker):
        raise CheckpointError(f"cannot name the partitions of the state snapshot {target}: {FRAMES_MARKER} exists", path=str(target))


def is_frame_snapshot(directory: CheckpointPath) -> bool:
    """Whether ``directory`` holds a snapshot written on Spark Connect (blocking I/O)."""
    return (directory / FRAMES_MARKER).exists()


def load_frame_snapshot(context: Any, directory: CheckpointPath) -> Any:
    """The FrameRDD a snapshot holds, on ``context`` (a FrameContext), in its saved partitions and order (blocking:
    a small Spark job that counts the Parquet frame's partitions; the values are read when the RDD is first used).

    The RDD is marked for an RDD checkpoint (under the context's checkpoint directory), which its first use takes:
    a Connect plan names the files it reads, and every plan derived from a cached one is analyzed again on the
    server, so no plan may keep naming the snapshot, which a later save deletes (on classic Spark a checkpoint
    cuts the lineage and a cached RDD is never read from its files again).

    Raises:
        CheckpointError: the snapshot's partitions file is missing or malformed.
    """
    data = (directory / FRAMES_MARKER).read_bytes()
    try:
        described = json.loads(data or b"")
        partitions = int(described["partitions"])
        if described.get("format") != _FORMAT or partitions < 1:
            raise ValueError(described)
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"the state snapshot {directory} cannot be read: its {FRAMES_MARKER} file is "
                              f"{'missing' if data is None else 'malformed'}", path=str(directory)) from exc
    rows = context.fromDataFrame(context.session.read.schema(_schema()).parquet(directory.uri()))

    def keyed(row: Any) -> tuple[int, tuple[int, bytes]]:
        return row[0], (row[1], row[2])

    def in_place(index: int) -> int:
        return index

    def in_order(pairs: Iterator[tuple[int, tuple[int, bytes]]]) -> list[Any]:
        import pickle

        return [pickle.loads(value) for _, (_, value) in sorted(pairs, key=lambda pair: pair[1][0])]

    # An exact shuffle puts partition p's rows in partition p; their places restore the order.
    restored = rows.map(keyed).partitionBy(partitions, in_place).mapPartitions(in_order)
    restored.checkpoint()
    return restored
