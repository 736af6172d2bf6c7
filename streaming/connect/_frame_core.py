"""FrameCore: the machinery of an RDD over a Spark Connect DataFrame (pyspark's ``PipelinedRDD`` and
``ShuffledRDD`` in one): pipelined partition functions, exact shuffles, persistence, checkpoints."""

from __future__ import annotations

import functools
import uuid
from typing import Any, Iterable, Iterator, Sequence

from typing_extensions import Self

from ._codec import (
    FRAME_SCHEMA,
    SHUFFLE_SCHEMA,
    VALUE_COLUMN,
    PartitionFunc,
    PartitionRunner,
    Route,
    ShuffleWriter,
    loads,
)
from ._environment import FrameEnvironment, Partitioner
from ._partitioning import partition_keys
from ._saved_partitions import save_frame_partitions, saved_partitions_frame

__all__ = ["FrameCore", "exchanged", "shifted"]


class _Chained:
    """Two partition functions run one after the other in the same task (a pipelined stage)."""

    def __init__(self, first: PartitionFunc, then: PartitionFunc) -> None:
        self.first = first
        self.then = then

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[Any]:
        return self.then(index, iter(self.first(index, values)))


def exchanged(frames: Sequence[Any], num_partitions: int) -> Any:
    """Shuffle rows (markers first) in their target partitions, in order, as a ``p, v`` frame."""
    union = functools.reduce(lambda left, right: left.union(right), frames)
    return union.repartition(num_partitions, "h").sortWithinPartitions("m", "s").select("p", VALUE_COLUMN)


def shifted(frame: Any, offset: int) -> Any:
    """A frame whose partitions come ``offset`` partitions later in a union: their markers renumbered."""
    if offset == 0:
        return frame
    from pyspark.sql.connect import functions

    return frame.select((functions.col("p") + functions.lit(offset)).cast("int").alias("p"), VALUE_COLUMN)


class FrameCore:
    """An RDD's partitions as a Connect DataFrame of pickled values, built lazily.

    ``source`` is a DataFrame whose partitions are this RDD's (a shuffle's output, a persisted or
    checkpointed frame, or a placeholder range whose runner reads ``parallelize``'s slices);
    ``runner`` holds the narrow functions pipelined on top of it, as pyspark pipelines
    ``mapPartitions`` calls into one Python task. Nothing runs on the server until an action.
    """

    def __init__(
        self,
        ctx: FrameEnvironment,
        source: Any,
        num_partitions: int,
        runner: PartitionRunner | None = None,
        partitioner: Partitioner | None = None,
    ) -> None:
        self.ctx = ctx
        self.partitioner = partitioner
        self._source = source
        self._runner = runner
        self._num_partitions = num_partitions
        self._frame: Any = None
        self._storage: Any = None
        self._persisted: Any = None  # the frame persist() stored on the server
        self._checkpoint_kind: str | None = None
        self._checkpointed = False
        self._checkpoint_path: str | None = None
        self.known_count: int | None = None
        """How many values the RDD holds, where known without running it: ``parallelize`` sets it, and the operations
        that keep every value's count (``map`` and what builds on it, ``union``, ``partitionBy``, ``repartition``,
        ``coalesce``, ``zipWithIndex``, ``zipWithUniqueId``) pass it on; any other derived RDD has none."""

    # -- construction --

    def _derive(self, source: Any, num_partitions: int, runner: PartitionRunner | None,
                partitioner: Partitioner | None) -> Self:
        return type(self)(self.ctx, source, num_partitions, runner, partitioner)

    def _pipelinable(self) -> bool:
        # A persisted or checkpointed RDD is a boundary: what follows reads its stored frame.
        return self._storage is None and self._checkpoint_kind is None

    def mapPartitionsWithIndex(self, f: PartitionFunc, preservesPartitioning: bool = False) -> Self:  # noqa: N803
        """A new RDD applying ``f(index, iterator)`` to each partition (pipelined, lazily)."""
        partitioner = self.partitioner if preservesPartitioning else None
        if self._pipelinable() and self._runner is not None:
            previous = self._runner
            chained: PartitionFunc = f if previous.func is None else _Chained(previous.func, f)
            runner = PartitionRunner(chained, previous.source)
            return self._derive(self._source, self._num_partitions, runner, partitioner)
        return self._derive(self.frame, self._num_partitions, PartitionRunner(f), partitioner)

    def observed(self, observation: Any) -> Self | None:
        """This RDD with its values counted into ``observation`` (a Connect ``Observation``, metric ``rows``) by every
        query that reads them: ``DataFrame.observe`` adds no job and no stage.

        ``None`` when Python functions still have to make the values (``rdd.filter(f)``, not persisted): they exist
        only inside the ``mapInArrow`` that pipelines those functions with what follows, and observing them would
        split that pipeline into two Python passes (measured: +29-50% CPU per batch of a word count over a queued
        ``filter``); and while a reliable checkpoint is pending (observing would write it now). A persisted or
        checkpointed RDD's stored frame is observed as it is read.
        """
        from pyspark.sql.connect import functions

        if self._checkpoint_kind is not None and not self._checkpointed:
            return None
        if self._pipelinable():
            if self._runner is not None:
                return None
            frame = self._source
        else:
            frame = self.frame  # the stored frame, which what follows reads anyway (marker rows' null values: not counted)
        source = frame.observe(observation, functions.count(VALUE_COLUMN).alias("rows"))
        observed = self._derive(source, self._num_partitions, None, self.partitioner)
        observed.known_count = self.known_count
        return observed

    def _same_count(self, derived: Self) -> Self:
        """``derived`` (an RDD holding exactly as many values as this one) knowing the count this one knows."""
        derived.known_count = self.known_count
        return derived

    def _exchange(self, sides: Sequence[tuple[FrameCore, Route]], num_partitions: int,
                  partitioner: Partitioner | None = None) -> Self:
        """Routes every side's values to target partitions exactly, in pyspark's shuffle order.

        Each side's rows are keyed so that ``repartition(n, "h")`` (Spark's Murmur3 hash, ``pmod
        n``) lands them in their target partition; ``sortWithinPartitions("m", "s")`` then orders
        them as pyspark's shuffle reads them: side by side, map partition by map partition, each
        in its output order.
        """
        keys = partition_keys(num_partitions)
        # One marker per target partition (m = -1 sorts it first): every partition has its index
        # and runs its Python functions even when no value lands in it. The first map task writes
        # them (no extra stage); with no map task at all they come from a small local frame.
        frames = []
        order = 0
        for side, route in sides:
            source, runner = side._stage()
            writes_markers = order == 0 and side.getNumPartitions() > 0
            writer = ShuffleWriter(runner, route, keys, order, writes_markers)
            frames.append(source.mapInArrow(writer, SHUFFLE_SCHEMA))
            order += side.getNumPartitions()
        if order == 0:
            markers = [(keys[j], j, -1, 0, None) for j in range(num_partitions)]
            frames.append(self.ctx.session.createDataFrame(markers, SHUFFLE_SCHEMA))
        shuffled = exchanged(frames, num_partitions)
        return self._derive(shuffled, num_partitions, None, partitioner)

    def _stage(self) -> tuple[Any, PartitionRunner]:
        """The frame and runner a task reading this RDD's values starts from."""
        if self._pipelinable() and self._runner is not None:
            return self._source, self._runner
        return self.frame, PartitionRunner(None)

    # -- the frame --

    @property
    def dataframe(self) -> Any:
        """The Connect DataFrame of this RDD's values: one binary column ``v``, a value pickled as
        pyspark pickles it per row, partitioned as the RDD is (``toDF()`` gives typed columns)."""
        from pyspark.sql.connect import functions

        return self.frame.where(functions.col(VALUE_COLUMN).isNotNull()).select(VALUE_COLUMN)

    @property
    def frame(self) -> Any:
        """The frame FrameRDD builds on: ``p int, v binary``, each partition led by a marker row
        (``v`` null, ``p`` the partition's index), then one pickled value per row."""
        if self._frame is None:
            if self._runner is None:
                self._frame = self._source
            else:
                self._frame = self._source.mapInArrow(self._runner, FRAME_SCHEMA)
        if self._checkpoint_kind is not None and not self._checkpointed:
            saved = self._checkpoint_frame(self._frame)
            self._checkpointed = True
            persisted = self._persisted
            if persisted is not None and self._storage is not None:
                # What persist() stored is read no more (later RDDs start from the saved partitions): the read-back
                # frame is kept instead, so that no cached plan still names the files the saved frame derived from.
                saved = saved.persist(self._storage)
                self._persisted = saved
                persisted.unpersist(False)
            self._frame = saved
        return self._frame

    def _checkpoint_frame(self, frame: Any) -> Any:
        if self._checkpoint_kind == "local":
            return frame.localCheckpoint(eager=True)
        # The server's own checkpoint directory is a static setting a client cannot change, so the
        # partitions are saved under the context's directory (a path or URI the server's Python
        # workers reach), one file per partition, and read back into the same partitions.
        path = f"{str(self.ctx.checkpoint_dir).rstrip('/')}/rdd-{uuid.uuid4().hex}"
        save_frame_partitions(frame, self._num_partitions, path)
        self._checkpoint_path = path
        return saved_partitions_frame(self.ctx.session, self._num_partitions, path)

    def getNumPartitions(self) -> int:
        """The number of partitions (known without asking the server)."""
        return self._num_partitions

    @property
    def context(self) -> FrameEnvironment:
        """The FrameContext this RDD was created on."""
        return self.ctx

    def _collect_values(self) -> list[Any]:
        table = self.frame.toArrow()
        return [loads(data) for data in table.column(VALUE_COLUMN).to_pylist() if data is not None]

    def _collect_partitions(self, f: PartitionFunc, partitions: Iterable[int]) -> list[Any]:
        """``f``'s values on some partitions only, in partition order (pyspark's ``runJob(rdd, f, partitions)``):
        the functions pipelined in this RDD's last stage run on those partitions alone. Earlier stages run whole
        (a shuffle's map side, as on classic Spark; the sides of a ``union``, unlike classic Spark)."""
        derived = self.mapPartitionsWithIndex(f)
        runner = derived._runner
        assert runner is not None  # mapPartitionsWithIndex always pipelines f into a runner
        derived._runner = PartitionRunner(runner.func, runner.source, frozenset(partitions))
        return derived._collect_values()

    # -- persistence and checkpoints --

    def persist(self, storageLevel: Any = None) -> Self:  # noqa: N803
        """Keeps the partitions on the server (Connect ``DataFrame.persist``); later RDDs read them."""
        frame = self.frame
        self._frame = self._persisted = frame.persist() if storageLevel is None else frame.persist(storageLevel)
        self._storage = storageLevel if storageLevel is not None else self._frame.storageLevel
        return self

    def cache(self) -> Self:
        """``persist()`` at the default level."""
        return self.persist()

    def unpersist(self, blocking: bool = False) -> Self:
        """Drops the stored partitions (they are recomputed when read again)."""
        # The persisted frame, not ``_frame``: a checkpoint taken since replaced ``_frame`` with the frame read back.
        if self._persisted is not None and self._storage is not None:
            self._persisted.unpersist(blocking)
        self._persisted = None
        self._storage = None
        return self

    @property
    def is_cached(self) -> bool:
        """Whether ``persist``/``cache`` was called and ``unpersist`` not since."""
        return self._storage is not None

    def getStorageLevel(self) -> Any:
        """The storage level of ``persist``, else the frame's (none)."""
        if self._storage is not None:
            return self._storage
        from pyspark import StorageLevel

        return StorageLevel(False, False, False, False)

    def checkpoint(self) -> None:
        """Marks the RDD for checkpointing: its first use saves its partitions under the checkpoint
        directory (as Parquet) and later reads start from there."""
        if self.ctx.checkpoint_dir is None:
            raise RuntimeError(
                "Checkpoint directory has not been set in the SparkContext; call setCheckpointDir(dir) on the FrameContext"
            )
        self._checkpoint_kind = "reliable"

    def localCheckpoint(self) -> None:
        """Marks the RDD for a local checkpoint (Connect ``DataFrame.localCheckpoint``)."""
        self._checkpoint_kind = "local"

    def isCheckpointed(self) -> bool:
        """Whether a checkpoint was taken (after the first action of a marked RDD)."""
        return self._checkpointed

    def isLocallyCheckpointed(self) -> bool:
        """Whether a local checkpoint was taken."""
        return self._checkpointed and self._checkpoint_kind == "local"

    def getCheckpointFile(self) -> str | None:
        """Where the partitions were saved (Parquet), once checkpointed."""
        return self._checkpoint_path

    def __repr__(self) -> str:
        state = ", cached" if self._storage is not None else ""
        return f"<FrameRDD [{self._num_partitions} partitions{state}]>"
