"""A StreamingContext's checkpoint: where it is, the graph saved for a restart, a previous run moved aside, a restore.

Spark's ``Checkpoint``, ``CheckpointWriter`` and ``StreamingContext.getOrCreate``'s recovery, for the
recovery logs a context keeps (offsets, commits, input logs, state) and its saved DStream graph.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from scheduler import CheckpointClaim, CheckpointError, CheckpointPath, Duration, ProgressTrackingOptions, checkpoint_claims, library_logger

from .continuous import Continuous
from .dstream import RECIPE_FILE, SavedRecipe, StreamEnvironment, load_recipe, write_recipe
from .spark import (
    CHECKPOINT_FILE_MANAGER_KEY,
    HadoopFileManager,
    SparkBackend,
    SparkSettings,
    active_spark_context,
    resolve_checkpoint_path,
)

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["ContextCheckpoint", "saved_graph", "spark_context_for"]

_RECOVERY_ENTRIES = ("metadata", "offsets", "commits", "sources", "state", RECIPE_FILE)

# Settings of the SparkContext that a restored program does not take over from the saved graph:
# they belong to the driver process that wrote it (Spark's Checkpoint drops the same ones).
_NOT_RESTORED_CONF = frozenset({
    "spark.driver.host", "spark.driver.port", "spark.driver.bindAddress", "spark.app.id", "spark.app.startTime",
    "spark.app.submitTime", "spark.executor.id", "spark.ui.port", "spark.blockManager.port", "spark.repl.class.uri",
    "spark.repl.class.outputDir", "spark.sql.warehouse.dir",
})


def saved_graph(checkpoint_path: str) -> SavedRecipe | None:
    """The DStream graph a previous run saved in ``checkpoint_path``, or ``None`` (blocking: file I/O, perhaps py4j).

    Raises:
        CorruptCheckpointError: the saved graph cannot be read.
    """
    active = active_spark_context()
    settings = None if active is None else SparkSettings.read(active)
    location = resolve_checkpoint_path(
        checkpoint_path, mode=None if settings is None else settings.get(CHECKPOINT_FILE_MANAGER_KEY),
        default_fs=None if settings is None else settings.default_fs, hadoop=HadoopFileManager)
    return load_recipe(location)


def spark_context_for(recipe: SavedRecipe) -> tuple[SparkContext, Duration | Continuous]:
    """The SparkContext to rebuild ``recipe``'s graph on (the active one, or a new one with the saved settings), and its interval."""
    from pyspark import SparkConf, SparkContext

    sc = active_spark_context()
    if sc is None:
        sc = SparkContext.getOrCreate(SparkConf(loadDefaults=False).setAll(list(recipe.spark_conf)))
    continuous_ms = getattr(recipe, "continuous_ms", None)  # recipes written before continuous processing lack it
    return sc, Duration(recipe.batch_ms) if continuous_ms is None else Continuous(continuous_ms)


def _snapshots_state(outputs: Sequence[Any]) -> bool:
    """Whether a stream the outputs depend on saves state snapshots (``updateStateByKey``, an inverse-reduced window)."""
    stack = list(outputs)
    while stack:
        stream = stack.pop()
        if stream.must_checkpoint:
            return True
        stack.extend(stream.parents)
    return False


class ContextCheckpoint:
    """Where a context keeps its recovery logs, and what a start does there before the runtime starts.

    Attributes:
        location: the checkpoint directory, or ``None`` (no checkpoint).
        recovering: resume from the logs there (``getOrCreate``) instead of moving them aside.
        options: progress-tracking options given to ``checkpoint()`` or ``getOrCreate()``: Spark's writer
            options ``asyncProgressTrackingEnabled``, ``asyncProgressTrackingCheckpointIntervalMs`` (also the
            settings ``spark.streaming.<option>``), ``spark.sql.streaming.minBatchesToRetain``,
            ``spark.sql.streaming.numRecentProgressUpdates``, ``spark.sql.streaming.noDataProgressEventInterval``.
    """

    def __init__(self, env: StreamEnvironment, spark: SparkBackend) -> None:
        """No checkpoint yet, for the context whose streams share ``env``."""
        self._env = env
        self._spark = spark
        self.location: CheckpointPath | None = None
        self.recovering = False
        self.options: dict[str, object] = {}
        self._pending_spark_dir: str | None = None  # set inside async with (a py4j call), applied at start
        self._claim: CheckpointClaim | None = None  # taken by a start, kept by the runtime
        self._log = library_logger("aiodstream.streaming", component="ContextCheckpoint", context=env.name)

    def set(self, directory: str | None, *, mode: str | None, default_fs: str,
            options: Mapping[str, object] | None) -> CheckpointPath | None:
        """Use ``directory`` (``None``: none) for Spark's RDD checkpoints and the recovery logs; returns the logs' place.

        Raises:
            InvalidPipelineError: an unknown or malformed option.
        """
        if directory is not None:
            if self._env.async_mode:  # a py4j call: made by the start, in a thread
                self._pending_spark_dir = str(directory)
            else:
                self._spark.spark_context.setCheckpointDir(directory)
        self.location = None if directory is None else resolve_checkpoint_path(
            directory, mode=mode, default_fs=default_fs, hadoop=self._hadoop_files)
        if options is not None:
            ProgressTrackingOptions.from_options(options)  # refused here, with the call that gave them
            self.options = dict(options)
        self._env.graph.set_checkpoint_dir(self.location)
        return self.location

    def _hadoop_files(self) -> HadoopFileManager:
        """The Hadoop file manager for a checkpoint that is not on the driver's disk (refused on Spark Connect: py4j)."""
        self._spark.require_jvm("a checkpoint directory written through Hadoop's FileSystem",
                                "give a directory on the driver's disk (a local path or a file: URI)")
        return HadoopFileManager(lambda: self._spark.spark_context)

    def prepare(self, owner: object, concurrent_jobs: int | None) -> None:
        """Before a start (blocking: py4j calls, file I/O): claim the directory for ``owner``, point Spark's RDD
        checkpoints there, move a previous run's logs aside unless recovering, and save the DStream graph.

        Raises:
            GraphNotSerializableError: a function of the graph cannot be pickled (Spark refuses the start).
            ConcurrentCheckpointUpdateError: another query holds the directory.
        """
        # Spark's validate(): a graph that cannot be serialized refuses the start before anything
        # on disk changes, the checkpoint's lock file included (pyspark's message).
        saved = None
        if self.location is not None and _snapshots_state(self._env.graph.output_streams):
            # State snapshots are saved and read back as pickle files of RDDs (saveAsPickleFile, pickleFile);
            # the keyed state operators keep theirs in their state store, which Connect's tasks reach.
            self._spark.require_jvm(
                "a stateful stream (updateStateByKey, a window with an inverse function) with ssc.checkpoint(dir)",
                "give the state's directory with ssc.sparkContext.setCheckpointDir(dir) instead (a restart from the "
                "checkpoint does not carry state on Connect yet)")
        if self.location is not None:
            # A Connect session's settings live on its server, which a restart reconnects to: nothing to carry.
            conf = [] if self._spark.kind == "connect" else [
                (k, v) for k, v in self._spark.spark_context.getConf().getAll() if k not in _NOT_RESTORED_CONF]
            continuous = self._env.continuous
            saved = self._env.recipe.serialize(batch_ms=self._env.batch_duration.milliseconds, concurrent_jobs=concurrent_jobs,
                                               spark_conf=conf, continuous_ms=None if continuous is None else continuous.interval_ms)
            # Claimed for the runtime before anything there changes (Spark's directory for RDD
            # checkpoints, a previous run moved aside): a refused second context must not touch
            # a live one's files. The runtime keeps the claim and gives it up at its stop.
            self._claim = checkpoint_claims.claim(self.location, owner)
        sc = self._spark.spark_context
        if self._pending_spark_dir is not None:
            sc.setCheckpointDir(self._pending_spark_dir)
            self._pending_spark_dir = None
        self._env.spark_checkpoint_dir = sc.getCheckpointDir()
        if self.location is not None and saved is not None:
            data, reason = saved
            if not self.recovering:
                self.move_previous_run_aside(self.location)
            self.location.mkdirs()
            write_recipe(self.location, data)
            if reason is not None:
                self._log.warning("the DStream graph cannot be saved in the checkpoint: a restart through getOrCreate calls "
                                  "the setup function again", reason=reason)
        self._env.graph.prepare_task_checkpoint()

    def release(self) -> None:
        """A failed start gives up the claim it took (idempotent: the runtime may have given it up already)."""
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()

    def move_previous_run_aside(self, directory: CheckpointPath) -> None:
        """Move a previous run's recovery logs to ``superseded-<time>-<id>/`` in ``directory`` (blocking I/O).

        Raises:
            CheckpointError: the target exists.
        """
        present = set(directory.listdir())
        previous = [directory / name for name in _RECOVERY_ENTRIES if name in present]
        if not previous:
            return
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        target = directory / f"superseded-{stamp}-{uuid.uuid4().hex[:8]}"
        target.mkdirs()
        for path in previous:
            if not path.rename_new(target / path.name):
                raise CheckpointError(f"cannot move {path} aside to {target}: the target exists", path=str(path))
        self._log.warning("a previous run's recovery logs were moved aside: this context starts afresh (use "
                          "StreamingContext.getOrCreate to resume from them)", moved_to=str(target))

    def __repr__(self) -> str:
        return f"<ContextCheckpoint {self.location or 'none'}{' (recovering)' if self.recovering else ''}>"
