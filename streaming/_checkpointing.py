"""A StreamingContext's checkpoint: where it is, the graph saved for a restart, a previous run moved aside, a restore.

Spark's ``Checkpoint``, ``CheckpointWriter`` and ``StreamingContext.getOrCreate``'s recovery, for the
recovery logs a context keeps (offsets, commits, input logs, state) and its saved DStream graph.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import uuid
from typing import TYPE_CHECKING, Mapping

from scheduler import (
    CheckpointClaim,
    CheckpointError,
    CheckpointFileManager,
    CheckpointPath,
    Duration,
    checkpoint_claims,
    library_logger,
    parse_watermark_policy,
    read_query_options,
    redact_uri,
    task_checkpoint_path,
    uri_scheme,
)

from .continuous import Continuous
from .dstream import RECIPE_FILE, SavedRecipe, StreamEnvironment, load_recipe, write_recipe
from .spark import (
    CHECKPOINT_FILE_MANAGER_KEY,
    HadoopFileManager,
    SparkBackend,
    SparkSettings,
    active_spark_context,
    context_checkpoint_dir,
    let_go_of_checkpoint_dir,
    resolve_checkpoint_path,
    users_checkpoint_dir,
)

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed
    from pyspark.sql import SparkSession

__all__ = ["ContextCheckpoint", "connect_checkpoint_files", "refuse_pyspark_checkpoint", "saved_graph", "spark_context_for"]

SPARK_KIND_KEY = "spark.aiodstream.savedBy"
"""The saved graph's Spark settings name a Connect session's program with this key (``"connect"``)."""

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
    return load_recipe(_checkpoint_location(checkpoint_path))


def refuse_pyspark_checkpoint(checkpoint_path: str) -> None:
    """Refuse a directory holding pyspark.streaming's checkpoint and no graph of ours (blocking: file I/O, perhaps py4j).

    Spark writes its Java-serialized graph as ``checkpoint-<ms>`` files (and ``.bk`` copies) and its receiver
    metadata in ``receivedBlockMetadata/``; aiodstream cannot read them, and calling ``setup()`` there would start
    from scratch, the state of the pyspark run lost, and write this format's files beside Spark's.

    Raises:
        CheckpointError: ``checkpoint_path`` holds Spark's checkpoint files and no ``graph`` of aiodstream's.
    """
    location = _checkpoint_location(checkpoint_path)
    names = location.listdir()
    if RECIPE_FILE in names:
        return
    spark_files = sorted(n for n in names if _SPARK_CHECKPOINT_FILE.fullmatch(n) or n == "receivedBlockMetadata")
    if spark_files:
        shown = ", ".join(spark_files[:3]) + (f" and {len(spark_files) - 3} more" if len(spark_files) > 3 else "")
        raise CheckpointError(
            f"checkpoint directory {location} holds a checkpoint written by pyspark.streaming ({shown}) and no "
            "aiodstream graph: the formats differ (Spark's serialized checkpoint files; aiodstream writes a graph file "
            "and recovery logs, see docs/compatibility.md), so it cannot be resumed here, and calling setupFunc would "
            "start from scratch and lose that run's state; resume it with pyspark.streaming, or pass getOrCreate a new "
            "directory to start afresh", path=str(location))


# Spark's Checkpoint.REGEX: checkpoint-<batch time ms>, its backup checkpoint-<ms>.bk.
_SPARK_CHECKPOINT_FILE = re.compile(r"checkpoint-\d+(\.bk)?")


def _checkpoint_location(checkpoint_path: str) -> CheckpointPath:
    """Where ``checkpoint_path`` is, on the file manager this process reaches it with (blocking: perhaps py4j)."""
    active = active_spark_context()
    if active is None and uri_scheme(checkpoint_path) not in ("", "file") and _connect_session_or_none() is not None:
        # A Spark Connect client has no JVM to start for Hadoop: it reaches the URI through fsspec, as its run did.
        return CheckpointPath(connect_checkpoint_files(checkpoint_path), checkpoint_path)
    settings = None if active is None else SparkSettings.read(active)
    return resolve_checkpoint_path(
        checkpoint_path, mode=None if settings is None else settings.get(CHECKPOINT_FILE_MANAGER_KEY),
        default_fs=None if settings is None else settings.default_fs, hadoop=HadoopFileManager)


def spark_context_for(recipe: SavedRecipe) -> tuple[SparkContext | SparkSession, Duration | Continuous]:
    """The Spark to rebuild ``recipe``'s graph on, and its interval: for a graph saved on classic Spark, the active
    SparkContext or a new one with the saved settings; for one saved on Spark Connect, the process's active (else
    default) Connect session, which the program makes before ``getOrCreate`` (the server's address is not saved).

    Raises:
        CheckpointError: the graph was saved on Spark Connect and this process has no Connect session.
    """
    from pyspark import SparkConf, SparkContext

    continuous_ms = getattr(recipe, "continuous_ms", None)  # recipes written before continuous processing lack it
    interval = Duration(recipe.batch_ms) if continuous_ms is None else Continuous(continuous_ms)
    if dict(recipe.spark_conf).get(SPARK_KIND_KEY) == "connect":
        return _connect_session(), interval
    sc = active_spark_context()
    if sc is None:
        sc = SparkContext.getOrCreate(SparkConf(loadDefaults=False).setAll(list(recipe.spark_conf)))
    return sc, interval


def connect_checkpoint_files(location: str) -> CheckpointFileManager:
    """The file manager a Spark Connect client reaches checkpoint URI ``location`` with: fsspec's implementation of its
    scheme (this process has no Hadoop FileSystem); a ``file:`` URI stays on the local manager.

    Raises:
        CheckpointError: fsspec cannot open the scheme here (no implementation, or its package is not installed).
    """
    scheme = uri_scheme(location)
    try:
        return task_checkpoint_path(location).files
    except (ValueError, ImportError) as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, (ImportError, ValueError)) else exc
        why = str(cause) if isinstance(cause, ImportError) else (
            f"fsspec knows no file system for {scheme}://, and no installed package registers one")
        raise CheckpointError(
            f"checkpoint directory {redact_uri(location)!r}: on Spark Connect this process reads and writes the checkpoint "
            f"through fsspec, which cannot open {scheme}:// here ({why}); install the package that implements it in this "
            "Python and in the Connect server's (its Python workers write the state there), or use a directory this "
            "process and the server both see", path=redact_uri(location)) from exc


def _connect_session() -> SparkSession:
    """The active Spark Connect session of this thread, else the process's default one.

    Raises:
        CheckpointError: there is none.
    """
    session = _connect_session_or_none()
    if session is None:
        raise CheckpointError(
            "the checkpoint's DStream graph was saved by a program on Spark Connect, and this process has no Spark Connect "
            "session to rebuild it on; make the session first, e.g. SparkSession.builder.remote(url).getOrCreate(), then "
            "call StreamingContext.getOrCreate")
    return session


def _connect_session_or_none() -> SparkSession | None:
    """The active Spark Connect session of this thread, else the process's default one, else ``None``."""
    from pyspark.errors import PySparkRuntimeError

    session = None
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the connect extra
        pass
    else:
        try:
            session = ConnectSession.active()
        except PySparkRuntimeError:  # neither an active nor a default session
            pass
    return session  # type: ignore[return-value]  # the Connect session stands where a SparkSession is taken


class ContextCheckpoint:
    """Where a context keeps its recovery logs, and what a start does there before the runtime starts.

    Attributes:
        location: the checkpoint directory, or ``None`` (no checkpoint).
        recovering: resume from the logs there (``getOrCreate``) instead of moving them aside.
        options: progress-tracking options given to ``checkpoint()`` or ``getOrCreate()``: Spark's writer
            options ``asyncProgressTrackingEnabled``, ``asyncProgressTrackingCheckpointIntervalMs`` (also the
            settings ``spark.streaming.<option>``), ``spark.sql.streaming.minBatchesToRetain``,
            ``spark.sql.streaming.numRecentProgressUpdates``, ``spark.sql.streaming.noDataProgressEventInterval``,
            and ``spark.sql.streaming.multipleWatermarkPolicy``.
    """

    def __init__(self, env: StreamEnvironment, spark: SparkBackend) -> None:
        """No checkpoint yet, for the context whose streams share ``env``."""
        self._env = env
        self._spark = spark
        self.location: CheckpointPath | None = None
        self.recovering = False
        self.options: dict[str, object] = {}
        self._pending_spark_dir: str | None = None  # set inside async with (a py4j call), applied at start
        self._own_spark_dir: str | None = None  # Spark's RDD checkpoint directory for this context's streams
        self._claim: CheckpointClaim | None = None  # taken by a start, kept by the runtime
        self._log = library_logger("aiodstream.streaming", component="ContextCheckpoint", context=env.name)

    def set(self, directory: str | None, *, mode: str | None, default_fs: str,
            options: Mapping[str, object] | None) -> CheckpointPath | None:
        """Use ``directory`` (``None``: none) for Spark's RDD checkpoints and the recovery logs; returns the logs' place.

        Raises:
            InvalidPipelineError: an unknown or malformed option.
        """
        if directory is not None and self._spark.kind == "connect":
            directory = _qualified(os.fspath(directory), default_fs)
        text = "" if directory is None else os.fspath(directory)
        self.location = None if directory is None else resolve_checkpoint_path(
            directory, mode=mode, default_fs=default_fs, hadoop=lambda: self._remote_files(text))
        if self.location is not None and self._spark.kind == "connect":
            # The RDD checkpoints' directory as the server's workers name it (a relative path would be theirs).
            directory = os.fspath(self.location) if self.location.is_local else self.location.path
        self.let_go()  # of the directory an earlier checkpoint() set
        if directory is not None:
            if self._env.async_mode:  # a py4j call: made by the start, in a thread
                self._pending_spark_dir = str(directory)
            else:
                self._own_spark_dir = self._set_spark_dir(str(directory))
        if options is not None:  # refused here, with the call that gave them
            for policy in read_query_options(options)[1]:  # read by the query's tracker, as from the SparkConf
                parse_watermark_policy(policy)
            self.options = dict(options)
        self._env.graph.set_checkpoint_dir(self.location)
        return self.location

    def let_go(self) -> None:
        """The context stopped (or set another directory): Spark's RDD checkpoint directory it set is no longer held, so a
        context without one of its own may use it, as Spark's next context does (a py4j-free call)."""
        made, self._own_spark_dir = self._own_spark_dir, None
        if made is not None and self._spark.kind == "classic":
            let_go_of_checkpoint_dir(made)

    def _set_spark_dir(self, directory: str) -> str | None:
        """Spark's RDD checkpoint directory for this context (py4j calls on classic Spark); what Spark made there."""
        sc = self._spark.spark_context
        if self._spark.kind == "classic":
            return context_checkpoint_dir(sc, directory)
        sc.setCheckpointDir(directory)
        return sc.getCheckpointDir()

    def _remote_files(self, directory: str) -> CheckpointFileManager:
        """The file manager of a checkpoint that is not on the driver's disk: Hadoop's FileSystem in the driver's JVM on
        classic Spark, fsspec on Spark Connect (no JVM here; see :func:`connect_checkpoint_files`)."""
        if self._spark.kind == "connect":
            return connect_checkpoint_files(directory)
        return HadoopFileManager(lambda: self._spark.spark_context)

    def prepare(self, owner: object, concurrent_jobs: int | None, context_options: Mapping[str, object] | None = None) -> None:
        """Before a start (blocking: py4j calls, file I/O): claim the directory for ``owner``, point Spark's RDD
        checkpoints there, move a previous run's logs aside unless recovering, and save the DStream graph (with
        the context's ``concurrent_jobs`` and other constructor options, which a restart makes its context with).

        Raises:
            GraphNotSerializableError: a function of the graph cannot be pickled (Spark refuses the start).
            ConcurrentCheckpointUpdateError: another query holds the directory.
        """
        # Spark's validate(): a graph that cannot be serialized refuses the start before anything
        # on disk changes, the checkpoint's lock file included (pyspark's message).
        saved = None
        if self.location is not None:
            # A Connect session's settings live on its server, which a restart reconnects to: only the kind is carried.
            conf = [(SPARK_KIND_KEY, "connect")] if self._spark.kind == "connect" else [
                (k, v) for k, v in self._spark.spark_context.getConf().getAll() if k not in _NOT_RESTORED_CONF]
            continuous = self._env.continuous
            saved = self._env.recipe.serialize(batch_ms=self._env.batch_duration.milliseconds, concurrent_jobs=concurrent_jobs,
                                               spark_conf=conf, continuous_ms=None if continuous is None else continuous.interval_ms,
                                               context_options=context_options)
            # Claimed for the runtime before anything there changes (Spark's directory for RDD
            # checkpoints, a previous run moved aside): a refused second context must not touch
            # a live one's files. The runtime keeps the claim and gives it up at its stop.
            self._claim = checkpoint_claims.claim(self.location, owner)
        sc = self._spark.spark_context
        if self._pending_spark_dir is not None:
            self._own_spark_dir = self._set_spark_dir(self._pending_spark_dir)
            self._pending_spark_dir = None
        if self._own_spark_dir is not None:
            self._env.spark_checkpoint_dir = self._own_spark_dir
        elif self._spark.kind == "classic":  # the program's sc.setCheckpointDir, never another context's directory
            self._env.spark_checkpoint_dir = users_checkpoint_dir(sc)
        else:  # a FrameContext is this context's alone
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


def _qualified(directory: str, default_fs: str) -> str:
    """A bare path on a Spark Connect client named as a URI on ``fs.defaultFS`` (the server's) when that is not ``file:``,
    so that this process (through fsspec) and the server's workers reach the same place; anything else as it is."""
    base = default_fs.strip()
    if uri_scheme(directory) or base.startswith("file:") or not base:
        return directory
    return base.rstrip("/") + "/" + directory.lstrip("/")
