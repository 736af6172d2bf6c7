"""A FrameRDD's partitions saved as files by the server's Python workers, and read back into the same partitions
(what Spark's ``ReliableCheckpointRDD`` does with one file per partition, for Connect's RDD checkpoints and state
snapshots).

Each task writes its partition's Arrow batches (the marker row, then the pickled values, as the frame holds them)
as one Arrow IPC stream, ``part-NNNNN``, through :func:`~scheduler.task_checkpoint_path`: a local path or shared
mount directly, any other URI through fsspec in the worker. Reading back, task ``i`` of a range of ``n`` partitions
reads ``part-i``, so no shuffle is needed and the order is kept. The server's Hadoop FileSystem is not used: the
client reaches the checkpoint through fsspec too, so one configuration (the URI's credentials, fsspec's settings)
serves both sides, and Hadoop's FTP file system cannot seek, so Spark's Parquet and text readers fail on it.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import pyarrow as pa  # type: ignore[import-untyped]

from scheduler import task_checkpoint_path

from ._codec import FRAME_SCHEMA, INDEX_SCHEMA, _drain, _open

__all__ = ["PART_NAME", "save_frame_partitions", "saved_partitions_frame"]

PART_NAME = "part-{:05d}"
"""The name of partition ``i``'s file in a saved RDD's directory."""


class _PartitionSaver:
    """Runs in the Python worker: writes its partition's batches as one Arrow stream file and answers its index."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index, rows = _open(batches)
        sink = pa.BufferOutputStream()
        writer: Any = None
        for batch in rows:
            if writer is None:
                writer = pa.ipc.new_stream(sink, batch.schema)
            writer.write_batch(batch)
        writer.close()
        directory = task_checkpoint_path(self.directory)
        directory.mkdirs()  # the job's other tasks make it too (FsspecFileManager.mkdirs takes the race)
        # Replacing: a task attempt run again (a retry, speculation) writes the same partition again.
        (directory / PART_NAME.format(index)).write_replacing(sink.getvalue().to_pybytes())
        yield pa.RecordBatch.from_arrays([pa.array([index], pa.int32())], names=["p"])


class _PartitionLoader:
    """Runs in the Python worker: partition ``i`` (its marker row in) gives the batches saved in ``part-i``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index, rows = _open(batches)
        _drain(rows)
        path = task_checkpoint_path(self.directory) / PART_NAME.format(index)
        data = path.read_bytes()
        if data is None:
            raise FileNotFoundError(f"{path} is missing: partition {index} of a saved RDD (a checkpoint or a state "
                                    "snapshot) was deleted or never written")
        yield from pa.ipc.open_stream(data)


def save_frame_partitions(frame: Any, partitions: int, directory: str) -> None:
    """Have the server's Python workers write ``frame``'s ``partitions`` partitions (a FrameRDD's frame) as files in
    ``directory`` (a local path or a URI, as the workers reach it); blocking: one Spark job.

    Raises:
        RuntimeError: a partition was not written (the frame is not a FrameRDD's).
    """
    saved = {row[0] for row in frame.mapInArrow(_PartitionSaver(directory), INDEX_SCHEMA).collect()}
    if saved != set(range(partitions)):
        raise RuntimeError(f"saving an RDD of {partitions} partitions in {directory} wrote partitions {sorted(saved)}")


def saved_partitions_frame(session: Any, partitions: int, directory: str) -> Any:
    """The frame (``p int, v binary``) of the partitions saved in ``directory``, partition ``i`` read from ``part-i``
    by the server's Python workers when a query runs (no call to the server here)."""
    from pyspark.sql.connect import functions

    if partitions == 0:  # no partition: no marker to give a task its index (an empty RDD's frame has no rows)
        return session.range(0, 0, 1, 1).select(functions.col("id").cast("int").alias("p"),
                                               functions.lit(None).cast("binary").alias("v"))
    # A range of n rows in n partitions puts id i in partition i: each task finds its index in its marker row.
    markers = session.range(0, partitions, 1, partitions).select(
        functions.col("id").cast("int").alias("p"), functions.lit(None).cast("binary").alias("v"))
    return markers.mapInArrow(_PartitionLoader(directory), FRAME_SCHEMA)
