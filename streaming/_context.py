"""StreamingContext: pyspark.streaming's entry point, on aiodstream's runtime.

The same object serves two kinds of programs. A pyspark.streaming program calls ``start()``,
``awaitTermination()`` and ``stop()``, which drive the runtime on an event loop of its own in a
background thread (anyio's blocking portal). An async program uses ``async with`` and the
``*_async`` methods, and the runtime lives in the program's own event loop.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import itertools
import os
import signal
import threading
import uuid
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, ContextManager, Iterator, Mapping, Sequence

import anyio
import anyio.from_thread
import anyio.to_thread

from listeners import OverflowPolicy
from scheduler import (
    CheckpointClaim,
    CheckpointError,
    CheckpointPath,
    Clock,
    Duration,
    InvalidDurationError,
    InvalidPipelineError,
    MicroBatchTracker,
    PIDRateEstimator,
    ProgressTrackingOptions,
    RateController,
    StreamingQueryException,
    StreamingStateError,
    Time,
    checkpoint_claims,
    library_logger,
    scaled_milliseconds,
)

from ._listener_compat import adapt_listener
from ._manager import StreamingQueryManager, as_pyspark_exception, streams
from ._manager import pyspark_progress as _pyspark_progress
from ._shutdown import SHUTDOWN_SIGNALS, SignalShutdown
from .continuous import (
    Continuous,
    ContinuousExecution,
    ContinuousSource,
    RateSource,
    SocketSource,
    SparkTaskLauncher,
)
from .dstream import (
    RECIPE_FILE,
    DStream,
    MultiTransformedDStream,
    SavedRecipe,
    StreamEnvironment,
    StreamNode,
    UnionDStream,
    api_call,
    load_recipe,
    write_recipe,
)
from .inputs import (
    DEFAULT_MAX_BUFFERED_RECORDS,
    AsyncIterableInputDStream,
    AsyncSource,
    ContinuousInputDStream,
    FileInputDStream,
    QueueInputDStream,
    ReceiverInputDStream,
    SocketInputDStream,
    continuous_plan,
)
from .runtime import StreamingContextState, StreamingRuntime
from .spark import (
    CHECKPOINT_FILE_MANAGER_KEY,
    LISTENER_EXIT_TIMEOUT_KEY,
    HadoopFileManager,
    SparkBinding,
    SparkSettings,
    listener_exit_timeout,
    resolve_checkpoint_path,
    seconds_to_duration,
    streaming_job_group,
    time_string_as,
    timeout_milliseconds,
    user_frame,
)

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["StreamingContext"]

_ids = itertools.count()


# What a context writes to its checkpoint directory besides Spark's RDD checkpoints.
# Spark settings that give progress-tracking options (their option names in Spark's writer).
_OPTION_SETTINGS = {
    "spark.streaming.asyncProgressTrackingEnabled": "asyncProgressTrackingEnabled",
    "spark.streaming.asyncProgressTrackingCheckpointIntervalMs": "asyncProgressTrackingCheckpointIntervalMs",
    "spark.sql.streaming.minBatchesToRetain": "spark.sql.streaming.minBatchesToRetain",
    "spark.sql.streaming.numRecentProgressUpdates": "spark.sql.streaming.numRecentProgressUpdates",
    "spark.sql.streaming.noDataProgressEventInterval": "spark.sql.streaming.noDataProgressEventInterval",
}

_CONTINUOUS_SETTINGS = ("spark.sql.streaming.continuous.epochBacklogQueueSize",
                        "spark.sql.streaming.continuous.executorPollIntervalMs",
                        # The coordinator's front door and frame bound.
                        "spark.network.auth.rpcTimeout", "spark.network.timeout", "spark.rpc.message.maxSize",
                        "spark.aiodstream.network.maxUnauthenticatedConnections")
# The progress options (read from their settings by _options()) that a continuous query takes too.
_CONTINUOUS_PROGRESS_OPTIONS = ("spark.sql.streaming.minBatchesToRetain", "spark.sql.streaming.numRecentProgressUpdates")
_RECOVERY_ENTRIES = ("metadata", "offsets", "commits", "sources", "state", RECIPE_FILE)

# Settings of the SparkContext that a restored program does not take over from the saved graph:
# they belong to the driver process that wrote it (Spark's Checkpoint drops the same ones).
_NOT_RESTORED_CONF = frozenset({
    "spark.driver.host", "spark.driver.port", "spark.driver.bindAddress", "spark.app.id", "spark.app.startTime",
    "spark.app.submitTime", "spark.executor.id", "spark.ui.port", "spark.blockManager.port", "spark.repl.class.uri",
    "spark.repl.class.outputDir", "spark.sql.warehouse.dir",
})


@contextlib.contextmanager
def _as_pyspark_errors() -> Iterator[None]:
    """A query's death cause leaves a context as pyspark's ``StreamingQueryException`` too (pyspark code catches that)."""
    try:
        yield
    except StreamingQueryException as exc:
        raise as_pyspark_exception(exc).with_traceback(None) from exc.__cause__


def _call_site() -> str:
    """``function at file:line`` of the user's code that called in (Spark's long call site form)."""
    frame = user_frame()
    return "?" if frame is None else f"{frame.function} at {frame.filename}:{frame.lineno}"


_TRACE_WRITE_TIMEOUT_S = 120.0


class _StopAfterBatches:
    """``spark.aiodstream.trace.batches``: stops the context once that many batches completed.

    The stop runs on a thread of its own (a listener may not stop its context), as a program's
    own ``ssc.stop(stopSparkContext=False)`` would; ``awaitTermination`` then returns and the
    program carries on to its end. Not a graceful stop: that drains every batch generated so far,
    and a loaded run that fell behind would record (and wait for) its whole backlog; here the
    batches queued behind are dropped and the one running gets the usual grace period.
    """

    def __init__(self, limit: int, context: StreamingContext) -> None:
        self._limit = limit
        self._context = context
        self._seen = 0

    def on_batch_completed(self, event: object) -> None:
        self._seen += 1
        if self._seen == self._limit:
            threading.Thread(target=self._context.stop, kwargs={"stopSparkContext": False, "stopGraceFully": False},
                             name="aiodstream-trace-stop", daemon=True).start()


def _check_socket_address(hostname: object, port: object) -> None:
    # Spark takes both as given and its receiver fails at every reconnect (Java's "port out of
    # range", or a null host read as the loopback address): refuse them at the call instead.
    if not isinstance(hostname, str) or not hostname.strip():
        raise InvalidPipelineError(f"socketTextStream needs the server's host name or address, got {hostname!r}; "
                                   "pass e.g. 'localhost'")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise InvalidPipelineError(f"socketTextStream's port must be an int from 1 to 65535, got {port!r}; pass the port "
                                   "the server listens on, e.g. 9999")


class StreamingContext:
    """The entry point of a DStream program, with pyspark.streaming's API.

    Args:
        sparkContext: the SparkContext to run batches on; ``None`` starts an embedded local
            Spark (``local[2]``) when first needed.
        batchDuration: the batch interval in seconds (int or float), as in pyspark, or a Duration;
            or a :class:`~streaming.continuous.Continuous` trigger for continuous processing:
            long-running tasks process each row as it arrives, and the trigger's interval cuts
            epochs (see :meth:`rateStream`, :meth:`DStream.foreach`).
        clock: the runtime's clock (default: the wall clock); tests may pass a ManualClock.
        listenerOverflow: what a full listener queue does (drop, as Spark, or block).
        concurrentJobs: how many output-operation jobs may run at once; overrides
            ``spark.streaming.concurrentJobs`` (useful when the SparkContext is shared).
        exclusive: whether no other context may be active beside this one. By default a context
            started with :meth:`start` is exclusive, as in pyspark (one active context per JVM),
            and one started with :meth:`start_async` is not: an async service may run several
            pipelines, each with its own graph and runtime, on one shared SparkContext.
        queryName: the context's name as a query (Spark's ``queryName``): in progress reports
            and listener events, unique among the active queries of the process.
        stopOnFailure: what a failed batch does. ``False`` (default, the DStream semantics;
            setting ``spark.streaming.stopOnFailure``): the failure is reported (raised by
            ``awaitTermination``) and later batches go on. ``True`` (Structured Streaming's): the
            context terminates, the failed batch stays uncommitted, and ``awaitTermination``,
            ``exception()`` and ``onQueryTerminated`` carry a ``StreamingQueryException``.
        uiPort: serve a web UI of this context (Spark's Streaming tab) on this port of
            127.0.0.1 while it runs; ``0`` picks a free port; ``uiWebUrl`` gives the address.
            Setting ``spark.aiodstream.ui.port`` does the same for an unchanged pyspark program
            (a taken port is followed by the next 16, as Spark's UI does), and
            ``spark.aiodstream.ui.host`` sets the address to listen on (beyond loopback only with
            ``spark.aiodstream.ui.allowRemote``; access control, the Host check and tracebacks:
            the other ``spark.aiodstream.ui.*`` settings of :class:`streaming.ui.UISecurity`).

    Every context is also a query with pyspark's ``StreamingQuery`` surface (``id``, ``runId``,
    ``status``, ``lastProgress``, ``processAllAvailable``, ``exception``, ``explain``...), listed
    by :data:`streaming.streams`; with a checkpoint its id lasts across restarts.

    An exclusive context refuses to start while another is active, and no context starts while
    an exclusive one is active (pyspark's error).
    """

    _active: ClassVar[list[StreamingContext]] = []  # started and not stopped, oldest first
    _activation_lock: ClassVar[threading.RLock] = threading.RLock()

    def __init__(
        self,
        sparkContext: SparkContext | None = None,  # noqa: N803
        batchDuration: float | Duration | Continuous | None = None,  # noqa: N803
        *,
        clock: Clock | None = None,
        listenerOverflow: OverflowPolicy = OverflowPolicy.DROP,  # noqa: N803
        concurrentJobs: int | None = None,  # noqa: N803
        exclusive: bool | None = None,
        queryName: str | None = None,  # noqa: N803
        stopOnFailure: bool | None = None,  # noqa: N803
        uiPort: int | None = None,  # noqa: N803
    ) -> None:
        """Create a context; nothing runs until it is started."""
        if batchDuration is None:
            raise InvalidDurationError("batchDuration is required: the batch interval in seconds, e.g. StreamingContext(sc, 1)")
        self._continuous = batchDuration if isinstance(batchDuration, Continuous) else None
        self._batch_duration = (batchDuration.interval if isinstance(batchDuration, Continuous)
                                else seconds_to_duration(batchDuration, "batchDuration"))
        self._clock = clock
        self._overflow = listenerOverflow
        if concurrentJobs is not None and (isinstance(concurrentJobs, bool) or not isinstance(concurrentJobs, int)
                                           or concurrentJobs < 1):
            raise ValueError(f"concurrentJobs must be a positive int, got {concurrentJobs!r}; pass e.g. 2")
        self._concurrent_jobs = concurrentJobs
        self._exclusive = exclusive
        if queryName is not None and (not isinstance(queryName, str) or not queryName.strip()):
            raise ValueError(f"queryName must be a non-empty string, got {queryName!r}")
        self._query_name = queryName
        if stopOnFailure is not None and not isinstance(stopOnFailure, bool):
            raise TypeError(f"stopOnFailure must be a bool, got {stopOnFailure!r}")
        self._stop_on_failure = stopOnFailure
        if uiPort is not None:
            from .ui import check_port

            check_port(uiPort)
        self._ui_port = uiPort
        self._ui: Any = None  # the StreamingUI serving this context, once started with a UI port
        self._ui_bind: tuple[str, int, int] | None = None
        self._ui_url: str | None = None
        self._trace: Any = None  # the TraceRecorder of spark.aiodstream.trace.path while this run is recorded
        self._trace_request: tuple[str, int | None] | None = None  # record_trace(path, batches)
        self._trace_written = threading.Event()  # set while no trace is being recorded or completed
        self._trace_written.set()
        self._progress_options: dict[str, object] = {}  # given to checkpoint() or getOrCreate()
        self._is_exclusive = False  # decided at start
        self._context_id = next(_ids)
        self._spark = SparkBinding(sparkContext, f"aiodstream-{self._context_id}")
        self._env = StreamEnvironment(
            batch_duration=self._batch_duration, spark=self._spark, clock=clock, name=f"aiodstream-{self._context_id}",
            owner=self, check_can_add=self._check_can_add, runtime=self._micro_batch_runtime)
        self._env.continuous = self._continuous
        self._graph = self._env.graph
        self._graph.spark_context = lambda: self._spark.spark_context
        self._log_dir: CheckpointPath | None = None  # where offsets, commits, input logs and state go
        self._recovering = False  # created by getOrCreate: resume from the checkpoint's logs
        self._runtime: StreamingRuntime | ContinuousExecution | None = None
        self._pending_listeners: list[tuple[object, str | None]] = []
        self._listener_adapters: dict[int, tuple[object, object]] = {}  # id(given) -> (given, what the bus has)
        self._closed_before_start = False
        self._stopped_unstarted = threading.Event()
        self._portal_cm: ContextManager[anyio.from_thread.BlockingPortal] | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._runtime_cm: ContextManager[StreamingRuntime | ContinuousExecution] | None = None
        self._loop_thread: int | None = None
        self._start_site = ""
        self._pending_checkpoint_dir: str | None = None  # set by checkpoint() inside async with, applied at start
        self._checkpoint_claim: CheckpointClaim | None = None  # taken by a start, kept by the runtime
        self._shutdown: SignalShutdown | None = None
        self._log = library_logger("aiodstream.streaming", component="StreamingContext", context=self._context_id)

    # -- properties --

    @property
    def sparkContext(self) -> SparkContext:
        """The SparkContext batches run on (an embedded local one is started if none was given)."""
        return self._spark.spark_context

    def _settings(self) -> SparkSettings:
        """The Spark settings this context uses (read on first need; on entering ``async with``, in a thread)."""
        return self._spark.settings()

    @property
    def _state(self) -> StreamingContextState:
        if self._runtime is None:
            return StreamingContextState.STOPPED if self._closed_before_start else StreamingContextState.INITIALIZED
        return self._runtime.state

    def getState(self) -> str:
        """``"INITIALIZED"``, ``"ACTIVE"`` or ``"STOPPED"``."""
        return self._state.value

    @property
    def runtime(self) -> StreamingRuntime | ContinuousExecution:
        """The async runtime underneath (created on first use): a ``ContinuousExecution`` with a Continuous trigger."""
        return self._ensure_runtime()

    def _micro_batch_runtime(self) -> StreamingRuntime:
        runtime = self._ensure_runtime()
        if not isinstance(runtime, StreamingRuntime):
            raise StreamingStateError("a continuous context has no micro-batch runtime: its inputs are continuous inputs")
        return runtime

    def _ensure_runtime(self) -> StreamingRuntime | ContinuousExecution:
        if self._runtime is not None:
            return self._runtime
        settings = self._settings()
        graceful = settings.get("spark.streaming.gracefulStopTimeout")
        timeout = None if graceful is None else Duration(time_string_as(graceful, "ms", "spark.streaming.gracefulStopTimeout"))
        exit_timeout = listener_exit_timeout(settings.get(LISTENER_EXIT_TIMEOUT_KEY))
        runtime: StreamingRuntime | ContinuousExecution
        if self._continuous is not None:
            runtime = ContinuousExecution(
                lambda: continuous_plan(self._env.recipe), self._continuous,
                launcher=SparkTaskLauncher(lambda: self._spark.spark_context), clock=self._clock, name=self._query_name,
                checkpoint_location=self._log_dir, options=self._continuous_options(), graceful_stop_timeout=timeout,
                listener_exit_timeout=exit_timeout,
            )
        else:
            concurrent = self._concurrent_jobs or int(settings.get("spark.streaming.concurrentJobs", "1") or "1")
            self._spark.set_concurrency(concurrent)
            stop_on_failure = self._stop_on_failure
            if stop_on_failure is None:
                stop_on_failure = (settings.get("spark.streaming.stopOnFailure", "false") or "false").strip().lower() == "true"
            runtime = StreamingRuntime(
                self._graph, self._batch_duration, clock=self._clock, concurrent_jobs=concurrent,
                graceful_stop_timeout=timeout, listener_overflow=self._overflow, listener_exit_timeout=exit_timeout,
                name=self._query_name, checkpoint_location=self._log_dir, track_progress=True, options=self._options(),
                stop_on_failure=stop_on_failure,
            )
        self._runtime = runtime
        runtime.handle = self
        for listener, name in self._pending_listeners:
            runtime.add_listener(listener, name=name)
        self._pending_listeners.clear()
        return runtime

    def _continuous_options(self) -> dict[str, object]:
        """A continuous query's settings: Spark's, overridden by the options given to checkpoint() or getOrCreate().

        Raises:
            InvalidPipelineError: async progress tracking asked for (micro-batch queries only).
        """
        settings = self._settings()
        options: dict[str, object] = {key: setting for key in _CONTINUOUS_SETTINGS if (setting := settings.get(key)) is not None}
        known = {key.lower(): key for key in _CONTINUOUS_PROGRESS_OPTIONS}
        for option, given in self._options().items():
            name = known.get(option.lower())
            if name is not None:
                options[name] = given
            elif option.lower() == "asyncprogresstrackingenabled" and str(given).strip().lower() == "true":
                raise InvalidPipelineError("async progress tracking is for micro-batch queries: a continuous query writes its "
                                           "offsets and commits at each epoch's commit; remove asyncProgressTrackingEnabled")
        return options

    def _options(self) -> dict[str, object]:
        """The progress-tracking options: Spark settings, overridden by those given to checkpoint() or getOrCreate()."""
        settings = self._settings()
        options: dict[str, object] = {}
        for key, option in _OPTION_SETTINGS.items():
            setting = settings.get(key)
            if setting is not None:
                options[option] = setting
        lowered = {k.lower(): k for k in options}
        for option, value in self._progress_options.items():
            options.pop(lowered.get(option.lower(), option), None)
            options[option] = value
        return options

    def _join_cancellations(self) -> None:
        """Wait until the Spark job cancellations of an immediate stop were delivered (blocking)."""
        self._spark.join_cancellations()

    def _release_job_threads(self) -> None:
        """Let the job threads and the graph's generation thread end (each after its current work)."""
        self._spark.release_job_threads()
        self._graph.release_threads()

    def _check_can_add(self) -> None:
        state = self._state
        if state is StreamingContextState.ACTIVE:
            raise StreamingStateError(
                "Adding new inputs, transformations, and output operations after starting a context is not supported"
            )
        if state is StreamingContextState.STOPPED:
            raise StreamingStateError(
                "Adding new inputs, transformations, and output operations after stopping a context is not supported"
            )

    # -- active context registry --

    @classmethod
    def getActive(cls) -> StreamingContext | None:
        """The started, not yet stopped context of this process (the latest started, when several are), if any."""
        with cls._activation_lock:
            cls._active[:] = [c for c in cls._active if c._state is StreamingContextState.ACTIVE]
            return cls._active[-1] if cls._active else None

    @classmethod
    def getActiveContexts(cls) -> list[StreamingContext]:
        """Every started, not yet stopped context of this process, oldest first (an aiodstream extension)."""
        with cls._activation_lock:
            cls._active[:] = [c for c in cls._active if c._state is StreamingContextState.ACTIVE]
            return list(cls._active)

    @classmethod
    def getActiveOrCreate(cls, checkpointPath: str | None, setupFunc: Callable[[], StreamingContext]) -> StreamingContext:  # noqa: N803
        """The active context, else one from ``checkpointPath`` (see :meth:`getOrCreate`), else ``setupFunc()``."""
        if not callable(setupFunc):
            raise TypeError("setupFunc should be callable.")
        active = cls.getActive()
        if active is not None:
            return active
        if checkpointPath is not None:
            return cls.getOrCreate(checkpointPath, setupFunc)
        return setupFunc()

    @classmethod
    def getOrCreate(cls, checkpointPath: str, setupFunc: Callable[[], StreamingContext], *,  # noqa: N803
                    restoreGraph: bool = True, options: Mapping[str, object] | None = None) -> StreamingContext:  # noqa: N803
        """A context rebuilt from the DStream graph saved in ``checkpointPath``, else ``setupFunc()`` with that checkpoint.

        As in Spark, ``setupFunc`` is called only when the checkpoint holds no graph: the graph a
        previous run saved (the program's DStream calls, its functions pickled as pyspark pickles
        them) is rebuilt without it, on the active SparkContext or on a new one with the saved
        settings. Either way the context resumes what the checkpoint records: batches logged but
        not committed run again with the same time and input, batches whose time passed while
        the program was down follow, and stateful streams continue from their saved state.

        A graph that cannot be pickled (a queue of RDDs, a function that holds the SparkContext)
        is not saved (a warning says why); a restart then calls ``setupFunc``, which must build
        the same inputs and stateful streams in the same order (a changed program is refused).

        Args:
            checkpointPath: the checkpoint directory.
            setupFunc: builds the context when there is nothing to restore.
            restoreGraph: ``False`` calls ``setupFunc`` even when the checkpoint holds a graph, so
                that a new version of the program resumes the old one's input logs and state (an
                aiodstream extension: Spark cannot resume a checkpoint with changed code). The
                new program must build the same inputs and stateful streams, in the same order.
            options: progress-tracking options, as for :meth:`checkpoint` (async progress
                tracking, for instance).

        Raises:
            TypeError: ``setupFunc`` is not callable or does not return a StreamingContext.
            CorruptCheckpointError: the saved graph cannot be read.
        """
        if not callable(setupFunc):
            raise TypeError("setupFunc should be callable.")
        recipe = None
        if restoreGraph:
            from pyspark import SparkContext

            active = SparkContext._active_spark_context
            settings = None if active is None else SparkSettings.read(active)
            location = resolve_checkpoint_path(
                checkpointPath, mode=None if settings is None else settings.get(CHECKPOINT_FILE_MANAGER_KEY),
                default_fs=None if settings is None else settings.default_fs, hadoop=HadoopFileManager)
            recipe = load_recipe(location)
        if recipe is not None:
            return cls._restore(checkpointPath, recipe, options)
        ssc = setupFunc()
        if not isinstance(ssc, StreamingContext):
            raise TypeError(f"setupFunc should return a StreamingContext, got {type(ssc).__name__}")
        ssc.checkpoint(checkpointPath, options=options)
        ssc._recovering = True
        return ssc

    @classmethod
    def _restore(cls, checkpoint_path: str, recipe: SavedRecipe, options: Mapping[str, object] | None) -> StreamingContext:
        """The context a saved graph describes, on the active SparkContext or a new one with the saved settings."""
        from pyspark import SparkConf, SparkContext

        sc = SparkContext._active_spark_context
        if sc is None:
            sc = SparkContext.getOrCreate(SparkConf(loadDefaults=False).setAll(list(recipe.spark_conf)))
        continuous_ms = getattr(recipe, "continuous_ms", None)  # recipes written before continuous processing lack it
        interval = Duration(recipe.batch_ms) if continuous_ms is None else Continuous(continuous_ms)
        ssc = cls(sc, interval, concurrentJobs=recipe.concurrent_jobs)
        recipe.replay(ssc, StreamNode)
        ssc.checkpoint(checkpoint_path, options=options)
        ssc._recovering = True
        ssc._log.info("StreamingContext rebuilt from the checkpoint", checkpoint=checkpoint_path, calls=len(recipe.calls))
        return ssc

    def _activate(self) -> None:
        """Register as active, under the activation lock, unless the one-active-context rule forbids it."""
        exclusive = self._exclusive if self._exclusive is not None else not self._env.async_mode
        with StreamingContext._activation_lock:
            # A context counts from the moment it registers (start_async registers before its
            # runtime starts), until it stopped.
            others = [c for c in StreamingContext._active if c is not self and c._state is not StreamingContextState.STOPPED]
            StreamingContext._active[:] = [*others, self]
            blocking = others if exclusive else [c for c in others if c._is_exclusive]
            if blocking:
                StreamingContext._active.remove(self)
                raise StreamingStateError(
                    "Only one StreamingContext may be started in this JVM. Currently running StreamingContext was started at"
                    + blocking[-1]._start_site
                )
            self._is_exclusive = exclusive

    def _deactivate(self) -> None:
        with StreamingContext._activation_lock:
            if self in StreamingContext._active:
                StreamingContext._active.remove(self)

    # -- synchronous lifecycle (pyspark) --

    def start(self) -> None:
        """Start generating batches; returns once the context is ACTIVE.

        A second call on an active context only logs a warning, as in Spark.
        """
        with StreamingContext._activation_lock:
            state = self._state
            if state is StreamingContextState.ACTIVE:
                self._log.warning("StreamingContext has already been started")
                return
            if state is StreamingContextState.STOPPED:
                raise StreamingStateError("StreamingContext has already been stopped")
            if self._env.async_mode:
                raise StreamingStateError("this context was entered with 'async with': use 'await ssc.start_async()'")
            self._activate()
            try:
                runtime = self._ensure_runtime()
                self._before_start()
                self._portal_cm = anyio.from_thread.start_blocking_portal()
                portal = self._portal_cm.__enter__()
                self._portal = portal
                self._loop_thread = portal.call(threading.get_ident)
                self._runtime_cm = portal.wrap_async_context_manager(runtime)
                self._runtime_cm.__enter__()
                try:
                    if self._ui_bind is not None:
                        self._ui_url = portal.call(runtime.start_service, self._ui.serve, *self._ui_bind)
                    portal.call(runtime.start)
                except BaseException:
                    self._close_portal()
                    raise
            except BaseException:
                self._release_checkpoint()
                self._deactivate()
                raise
            self._start_site = _call_site()
            self._install_shutdown_hook()

    def stop(self, stopSparkContext: bool = True, stopGraceFully: bool = False) -> None:  # noqa: N803
        """Stop the context (and by default the SparkContext); idempotent.

        Args:
            stopSparkContext: also stop the SparkContext, as pyspark does by default.
            stopGraceFully: finish the batches already received before stopping.
        """
        if self._shutdown is not None:
            self._shutdown.uninstall()
        if self._loop_thread is not None and threading.get_ident() == self._loop_thread:
            raise StreamingStateError("Cannot stop StreamingContext within listener bus thread.")
        if self._env.async_mode:
            raise StreamingStateError("this context was entered with 'async with': use 'await ssc.stop_async()'")
        with StreamingContext._activation_lock:
            state = self._state
            if state is StreamingContextState.INITIALIZED:
                self._log.warning("StreamingContext has not been started yet")
                self._closed_before_start = True
                self._stopped_unstarted.set()
            elif self._portal is not None and self._runtime is not None:
                runtime = self._runtime
                try:
                    self._portal.call(functools.partial(runtime.stop, graceful=stopGraceFully))
                finally:
                    self._close_portal()
                    self._join_cancellations()
                    self._release_job_threads()
            else:
                self._log.warning("StreamingContext has already been stopped")
            self._deactivate()
        self._finish_trace()
        sc = self._spark.started_spark_context
        if stopSparkContext and sc is not None:
            sc.stop()

    def _install_shutdown_hook(self) -> None:
        """With ``spark.streaming.stopGracefullyOnShutdown``, drain and stop on SIGTERM or SIGINT (Spark's shutdown hook)."""
        graceful = (self._settings().get("spark.streaming.stopGracefullyOnShutdown", "false") or "false").strip().lower()
        if graceful != "true":
            return
        self._shutdown = SignalShutdown(lambda: self.stop(stopSparkContext=False, stopGraceFully=True),
                                        f"aiodstream-{self._context_id}")
        self._shutdown.install()

    def _close_portal(self) -> None:
        try:
            if self._runtime_cm is not None:
                self._runtime_cm.__exit__(None, None, None)
        finally:
            self._runtime_cm = None
            if self._portal_cm is not None:
                self._portal_cm.__exit__(None, None, None)
            self._portal_cm = None
            self._portal = None

    def awaitTermination(self, timeout: float | None = None) -> None:
        """Wait until the context stops or a batch fails (then raise its error); ``timeout`` in seconds."""
        if timeout is None:
            self._await(None)
        else:
            self.awaitTerminationOrTimeout(timeout)

    def awaitTerminationOrTimeout(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True if the context stopped, False on timeout."""
        return self._await(Duration(max(0, timeout_milliseconds(timeout))))

    def _await(self, timeout: Duration | None) -> bool:
        with _as_pyspark_errors():
            stopped = self._await_termination(timeout)
        if stopped:
            # A stop on another thread (spark.aiodstream.trace.batches) may still be adding the
            # Spark jobs to the trace: the program's next step may stop the SparkContext.
            self._trace_written.wait(_TRACE_WRITE_TIMEOUT_S)
        return stopped

    def _await_termination(self, timeout: Duration | None) -> bool:
        portal, runtime = self._portal, self._runtime
        if portal is not None and runtime is not None:
            try:
                return portal.call(runtime.await_termination, timeout)
            except RuntimeError as exc:
                if "portal is not running" not in str(exc):
                    raise
        if runtime is not None and runtime.state is StreamingContextState.STOPPED:
            if runtime.exception() is not None:
                raise runtime.exception().with_traceback(None)  # type: ignore[union-attr]
            return True
        return self._stopped_unstarted.wait(None if timeout is None else timeout.seconds)

    # -- asynchronous lifecycle --

    async def __aenter__(self) -> StreamingContext:
        self._env.async_mode = True
        await anyio.to_thread.run_sync(self._settings)  # starts the embedded Spark if needed; py4j calls
        runtime = self._ensure_runtime()
        await runtime.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        try:
            assert self._runtime is not None
            return await self._runtime.__aexit__(exc_type, exc, tb)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._join_cancellations)
                await anyio.to_thread.run_sync(self._finish_trace)
            self._release_job_threads()
            self._deactivate()

    async def start_async(self) -> None:
        """Start generating batches, inside ``async with``; raises if already started."""
        if not self._env.async_mode:
            raise StreamingStateError("start_async() needs 'async with StreamingContext(...) as ssc:'")
        self._activate()
        try:
            await anyio.to_thread.run_sync(self._before_start)  # py4j calls and file I/O: off the loop
            if self._ui_bind is not None:
                self._ui_url = await self.runtime.start_service(self._ui.serve, *self._ui_bind)
            await self.runtime.start()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._release_checkpoint)  # a Hadoop lease: py4j calls
            self._deactivate()
            raise
        self._start_site = _call_site()

    async def stop_async(self, stopSparkContext: bool = False, stopGraceFully: bool = False) -> None:  # noqa: N803
        """Stop the context without blocking the event loop.

        Unlike :meth:`stop`, the SparkContext is kept by default: in a service it is usually shared.
        """
        await self.runtime.stop(graceful=stopGraceFully)
        await anyio.to_thread.run_sync(self._join_cancellations)
        self._release_job_threads()
        self._deactivate()
        await anyio.to_thread.run_sync(self._finish_trace)
        sc = self._spark.started_spark_context
        if stopSparkContext and sc is not None:
            await anyio.to_thread.run_sync(sc.stop)

    async def await_termination_async(self, timeout: float | None = None) -> bool:
        """Wait until the context stops (True) or ``timeout`` seconds pass (False); raises a batch's error."""
        with _as_pyspark_errors():
            return await self.runtime.await_termination(None if timeout is None else Duration(max(0, timeout_milliseconds(timeout))))

    async def stop_on_signal_async(self, *signals: int, stopGraceFully: bool = True) -> int:  # noqa: N803
        """Wait for a shutdown signal (SIGTERM or SIGINT by default), then stop the context; returns the signal.

        The way to tie a context to an async host's shutdown: run it in the host's task group,
        ``tg.start_soon(ssc.stop_on_signal_async)``. It handles the signals through anyio (the
        event loop's own signal handling, main thread only) for as long as it waits; cancel it
        to stop waiting. The SparkContext is kept, as by :meth:`stop_async`.
        """
        with anyio.open_signal_receiver(*(signal.Signals(s) for s in signals or SHUTDOWN_SIGNALS)) as received:
            async for signum in received:
                self._log.warning("shutdown signal received: stopping the StreamingContext", signal=int(signum),
                                  graceful=stopGraceFully)
                await self.stop_async(stopGraceFully=stopGraceFully)
                return int(signum)
        raise AssertionError("the signal receiver ended without a signal")  # pragma: no cover - anyio's never ends

    # -- configuration --

    @api_call
    def remember(self, duration: float) -> None:
        """Keep each stream's RDDs for at least ``duration`` seconds."""
        self._graph.remember(seconds_to_duration(duration, "remember duration"))

    def checkpoint(self, directory: str | None, *, options: Mapping[str, object] | None = None) -> None:
        """Set the checkpoint directory; ``None`` disables checkpointing.

        RDD checkpoints of stateful streams go there, and so do the recovery logs that
        :meth:`getOrCreate` resumes from: offsets and commits (Structured Streaming's format),
        what each input took per batch, and the state of stateful streams. A context started
        without :meth:`getOrCreate` starts afresh, as in Spark: it moves a previous run's logs
        to ``superseded-<time>-<id>/`` in the directory instead of resuming from them.

        ``options`` are Spark's progress-tracking writer options (an aiodstream extension):
        ``asyncProgressTrackingEnabled``, ``asyncProgressTrackingCheckpointIntervalMs`` (also
        as the settings ``spark.streaming.<option>``), ``spark.sql.streaming.minBatchesToRetain``,
        ``spark.sql.streaming.numRecentProgressUpdates``,
        ``spark.sql.streaming.noDataProgressEventInterval``.

        Raises:
            StreamingStateError: the context was already started.
            InvalidPipelineError: an unknown or malformed option.
        """
        if self._state is not StreamingContextState.INITIALIZED:
            raise StreamingStateError("the checkpoint directory can only be set before the StreamingContext is started")
        if directory is not None:
            if self._env.async_mode:  # a py4j call: made by the start, in a thread
                self._pending_checkpoint_dir = str(directory)
            else:
                self.sparkContext.setCheckpointDir(directory)
        self._log_dir = None if directory is None else self._resolve_checkpoint(directory)
        if options is not None:
            ProgressTrackingOptions.from_options(options)  # refused here, with the call that gave them
            self._progress_options = dict(options)
        self._graph.set_checkpoint_dir(self._log_dir)
        if self._runtime is not None:
            options = self._continuous_options() if isinstance(self._runtime, ContinuousExecution) else self._options()
            self._runtime.set_checkpoint_location(self._log_dir, options=options)

    def _resolve_checkpoint(self, directory: str) -> CheckpointPath:
        """Where the recovery logs go: the driver's disk, or Hadoop's file system for the path (as Spark resolves it)."""
        settings = self._settings()
        return resolve_checkpoint_path(directory, mode=settings.get(CHECKPOINT_FILE_MANAGER_KEY),
                                       default_fs=settings.default_fs,
                                       hadoop=lambda: HadoopFileManager(lambda: self._spark.spark_context))

    def _before_start(self) -> None:
        """What a start does before the runtime starts (py4j calls, file I/O): Spark's checkpoint
        directory, rate controllers, the recovery logs."""
        # Spark's validate(): a graph that cannot be serialized refuses the start before anything
        # on disk changes, the checkpoint's lock file included (GraphNotSerializableError, pyspark's message).
        saved = self._serialize_graph()
        if self._log_dir is not None:
            # Claimed for the runtime before anything there changes (Spark's directory for RDD
            # checkpoints, a previous run moved aside): a refused second context must not touch
            # a live one's files. The runtime keeps the claim and gives it up at its stop.
            self._checkpoint_claim = checkpoint_claims.claim(self._log_dir, self.runtime)
        sc = self.sparkContext
        if self._pending_checkpoint_dir is not None:
            sc.setCheckpointDir(self._pending_checkpoint_dir)
            self._pending_checkpoint_dir = None
        self._env.spark_checkpoint_dir = sc.getCheckpointDir()
        self._install_rate_controllers()
        self._prepare_checkpoint(saved)
        self._graph.prepare_task_checkpoint()
        self._prepare_ui()
        self._prepare_trace()

    def record_trace(self, path: str | os.PathLike[str], *, batches: int | None = None) -> None:
        """Record this run for the simulator: its listener events and, at stop, its Spark jobs' task times.

        The programmatic form of ``spark.aiodstream.trace.path`` (and ``.batches``); call it
        before :meth:`start`. The trace is what ``aiodstream calibrate`` and
        :func:`streaming.simulation.calibrate` fit the cluster model to; the task times come
        from Spark's UI (``spark.ui.enabled``), read once the context stops.

        Args:
            path: the trace file (JSON lines).
            batches: stop the context once this many batches completed (as
                ``stop(stopSparkContext=False)`` on another thread would: the batches queued
                behind are not run).

        Raises:
            StreamingStateError: the context has started.
            ValueError: ``batches`` is not a positive int.
        """
        if self._state is not StreamingContextState.INITIALIZED:
            raise StreamingStateError("record_trace() must be called before the context starts")
        if batches is not None and (isinstance(batches, bool) or not isinstance(batches, int) or batches < 1):
            raise ValueError(f"batches must be a positive int, got {batches!r}")
        self._trace_request = (os.fspath(path), batches)

    def _prepare_trace(self) -> None:
        """With ``record_trace`` or ``spark.aiodstream.trace.path``: record this run's events (and, at stop, its Spark jobs)."""
        request = self._trace_request
        if request is None:
            settings = self._settings()
            path = (settings.get("spark.aiodstream.trace.path") or "").strip()
            if not path:
                return
            raw = (settings.get("spark.aiodstream.trace.batches") or "").strip()
            limit = None
            if raw:
                try:
                    limit = int(raw)
                except ValueError:
                    limit = 0
                if limit < 1:
                    raise ValueError(f"spark.aiodstream.trace.batches must be a positive number of batches, got {raw!r}")
            request = (path, limit)
        path, limit = request
        if self._continuous is not None or self._trace is not None:
            return
        if limit is not None and self._env.async_mode:
            raise ValueError("a trace's batch limit stops a context started with start(); a context in 'async with' "
                             "stops itself (await ssc.stop_async())")
        from .simulation import TraceRecorder

        sc = self.sparkContext
        runtime = self._ensure_runtime()
        assert isinstance(runtime, StreamingRuntime)
        meta = {"master": sc.master, "default_parallelism": sc.defaultParallelism, "cpus": os.cpu_count(),
                "context": self._env.name, "app_id": sc.applicationId}
        self._trace = TraceRecorder(path, batch_interval=self._batch_duration, concurrent_jobs=runtime.concurrent_jobs,
                                    meta=meta, keep_batches=True)
        runtime.add_listener(self._trace, name="trace-recorder")
        self._trace_written.clear()
        if limit is not None:
            runtime.add_listener(_StopAfterBatches(limit, self), name="trace-batches")

    def _finish_trace(self) -> None:
        """Once the run stopped: add the Spark jobs of every recorded output operation to the trace, and close it."""
        recorder, self._trace = self._trace, None
        if recorder is None:
            return
        try:
            self._write_trace(recorder)
        finally:
            self._trace_written.set()

    def _write_trace(self, recorder: Any) -> None:
        from .simulation import ModelError, fetch_spark_jobs

        try:
            sc = self._spark.started_spark_context
            url = None if sc is None else sc.uiWebUrl
            if sc is None or url is None:
                self._log.warning("trace without Spark jobs: Spark's UI is off (spark.ui.enabled=false), so its task "
                                  "times cannot be read", path=recorder.path)
                return
            name = self._env.name
            groups = {streaming_job_group(name, Time(batch), op): (batch, op)
                      for batch, ops in recorder.batches for op in ops}
            try:
                found = fetch_spark_jobs(url, sc.applicationId, groups)
            except ModelError as exc:
                self._log.warning("trace without Spark jobs", reason=str(exc), path=recorder.path)
                return
            for (batch, op), jobs in sorted(found.items()):
                recorder.write_spark_jobs(Time(batch), op, jobs)
        finally:
            recorder.close()

    def _prepare_ui(self) -> None:
        """With ``uiPort`` or ``spark.aiodstream.ui.port``: a web UI attached to this context, to serve from start."""
        settings = self._settings()
        port = self._ui_port
        if port is None:
            raw = settings.get("spark.aiodstream.ui.port")
            if raw is None or not raw.strip():
                return
            try:
                port = int(raw.strip())
            except ValueError:
                raise ValueError(f"spark.aiodstream.ui.port must be a port number (0: any free port), got {raw!r}") from None
        from .ui import StreamingUI, UISecurity, check_port

        check_port(port)
        host = (settings.get("spark.aiodstream.ui.host") or "127.0.0.1").strip()
        if self._ui is None:
            self._ui = StreamingUI(security=UISecurity.from_settings(settings.get))
            self._ui.attach(self, name=self._query_name or self._env.name)
        # An explicit port is taken as given; Spark's setting follows the next ports when taken, as Spark's UI does.
        self._ui_bind = (host, port, 0 if self._ui_port is not None else 16)

    def ui_links(self) -> dict[str, Any]:
        """For the web UI: the Spark UI's address and a lookup of an output operation's Spark jobs (py4j calls)."""
        sc = self._spark.started_spark_context
        if sc is None:
            return {}
        links: dict[str, Any] = {"spark_ui": sc.uiWebUrl}
        if self._continuous is None:
            name = self._env.name

            def spark_jobs(batch_time_ms: int, output_op_id: int) -> list[int]:
                group = streaming_job_group(name, Time(batch_time_ms), output_op_id)
                return sorted(int(j) for j in sc.statusTracker().getJobIdsForGroup(group))

            links["spark_jobs"] = spark_jobs
        return links

    @property
    def uiWebUrl(self) -> str | None:
        """The address of this context's web UI while it serves one (``uiPort``, ``spark.aiodstream.ui.port``), else ``None``."""
        runtime = self._runtime
        if self._ui_url is None or runtime is None or runtime.state is not StreamingContextState.ACTIVE:
            return None
        return self._ui_url

    def _install_rate_controllers(self) -> None:
        """With ``spark.streaming.backpressure.enabled``, a rate controller per receiver stream (Spark's).

        Raises:
            InvalidPipelineError: an unknown ``spark.streaming.backpressure.rateEstimator`` or a
                PID parameter out of range (Spark's messages).
        """
        settings = self._settings()
        if (settings.get("spark.streaming.backpressure.enabled", "false") or "false").strip().lower() != "true":
            return
        if self._continuous is not None:
            return  # continuous inputs are read as they come: no receiver, no rate to control
        estimator = settings.get("spark.streaming.backpressure.rateEstimator", "pid") or "pid"
        if estimator != "pid":
            raise InvalidPipelineError(f"Unknown rate estimator: {estimator}")

        def number(key: str, default: str) -> float:
            value = settings.get(key, default) or default
            try:
                return float(value)
            except ValueError:
                raise InvalidPipelineError(f"{key} must be a number, got {value!r}") from None

        params = (number("spark.streaming.backpressure.pid.proportional", "1.0"),
                  number("spark.streaming.backpressure.pid.integral", "0.2"),
                  number("spark.streaming.backpressure.pid.derived", "0.0"),
                  number("spark.streaming.backpressure.pid.minRate", "100"))
        runtime = self._micro_batch_runtime()
        for stream in self._graph.input_streams:
            if isinstance(stream, ReceiverInputDStream):
                pid = PIDRateEstimator(self._batch_duration.milliseconds, *params)
                runtime.add_listener(RateController(stream.id, pid, stream.update_rate),
                                     name=f"RateController-{stream.id}")

    def _serialize_graph(self) -> tuple[bytes | None, str | None] | None:
        """With a checkpoint: the DStream graph saved for :meth:`getOrCreate`, and why it cannot be restored (if so).

        Raises:
            GraphNotSerializableError: a function of the graph cannot be pickled (Spark refuses the start).
        """
        if self._log_dir is None:
            return None
        conf = [(k, v) for k, v in self.sparkContext.getConf().getAll() if k not in _NOT_RESTORED_CONF]
        return self._env.recipe.serialize(batch_ms=self._batch_duration.milliseconds,
                                          concurrent_jobs=self._concurrent_jobs, spark_conf=conf,
                                          continuous_ms=None if self._continuous is None else self._continuous.interval_ms)

    def _prepare_checkpoint(self, saved: tuple[bytes | None, str | None] | None) -> None:
        """Before a start with a checkpoint (blocking I/O and py4j calls): move a previous run's recovery
        logs aside unless resuming, then save the DStream graph (``saved``) for :meth:`getOrCreate`."""
        directory = self._log_dir
        if directory is None or saved is None:
            return
        data, reason = saved
        if not self._recovering:
            self._move_previous_run_aside(directory)
        directory.mkdirs()
        write_recipe(directory, data)
        if reason is not None:
            self._log.warning("the DStream graph cannot be saved in the checkpoint: a restart through getOrCreate calls "
                              "the setup function again", reason=reason)

    def _release_checkpoint(self) -> None:
        """A failed start gives up the claim it took (idempotent: the runtime may have given it up already)."""
        claim, self._checkpoint_claim = self._checkpoint_claim, None
        if claim is not None:
            claim.release()

    def _move_previous_run_aside(self, directory: CheckpointPath) -> None:
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

    def addStreamingListener(self, streamingListener: object) -> None:  # noqa: N803
        """Register a listener: a pyspark ``StreamingListener`` or ``StreamingQueryListener``, or an aiodstream listener.

        A ``StreamingQueryListener`` hears this context's query events (started, progress,
        idle, terminated) as pyspark's event objects; to hear every query's, add it to
        :data:`streaming.streams` instead.
        """
        listener, name = adapt_listener(streamingListener)
        if self._runtime is None:
            self._pending_listeners.append((listener, name))
        else:
            self._runtime.add_listener(listener, name=name)
        self._listener_adapters[id(streamingListener)] = (streamingListener, listener)

    def removeStreamingListener(self, streamingListener: object) -> None:  # noqa: N803
        """Unregister a listener added with :meth:`addStreamingListener`.

        Raises:
            ValueError: the listener was not added.
        """
        entry = self._listener_adapters.pop(id(streamingListener), None)
        if entry is None:
            raise ValueError(f"listener {streamingListener!r} is not registered")
        listener = entry[1]
        pending = [entry for entry in self._pending_listeners if entry[0] is listener]
        if pending:
            self._pending_listeners.remove(pending[0])
        elif self._runtime is not None:
            self._runtime.remove_listener(listener)

    # -- the query (pyspark's StreamingQuery) --

    @property
    def streams(self) -> StreamingQueryManager:
        """The process's query manager (pyspark's ``spark.streams``)."""
        return streams

    def _tracker_or_none(self) -> MicroBatchTracker | ContinuousExecution | None:
        # Both keep the query's id, run id, status and progress under the same names.
        runtime = self._runtime
        if isinstance(runtime, ContinuousExecution):
            return runtime
        return None if runtime is None else runtime.tracker

    @property
    def id(self) -> str | None:
        """The query id (pyspark's ``StreamingQuery.id``): kept across restarts on the same checkpoint; ``None`` before start."""
        tracker = self._tracker_or_none()
        return None if tracker is None or tracker.query_id is None else str(tracker.query_id)

    @property
    def runId(self) -> str | None:
        """This run's id, new at every start; ``None`` before start."""
        tracker = self._tracker_or_none()
        return None if tracker is None or tracker.query_id is None else str(tracker.run_id)

    @property
    def name(self) -> str | None:
        """The query name (``queryName``), or ``None``."""
        return self._query_name

    @property
    def isActive(self) -> bool:
        """Whether the context was started and has not stopped."""
        return self._state is StreamingContextState.ACTIVE

    @property
    def status(self) -> dict[str, Any]:
        """What the query is doing now, as pyspark's ``status`` dict (``message``, ``isDataAvailable``, ``isTriggerActive``)."""
        tracker = self._tracker_or_none()
        if tracker is None:
            message = "Stopped" if self._state is StreamingContextState.STOPPED else "Initializing StreamExecution"
            return {"message": message, "isDataAvailable": False, "isTriggerActive": False}
        return tracker.status.json_value()

    @property
    def lastProgress(self) -> Any:
        """The newest progress report as pyspark's ``StreamingQueryProgress`` (a dict), or ``None``."""
        tracker = self._tracker_or_none()
        last = None if tracker is None else tracker.last_progress
        return None if last is None else _pyspark_progress(last)

    @property
    def recentProgress(self) -> list[Any]:
        """The recent progress reports, oldest first, as pyspark's ``StreamingQueryProgress`` objects."""
        tracker = self._tracker_or_none()
        return [] if tracker is None else [_pyspark_progress(p) for p in tracker.recent_progress]

    def processAllAvailable(self) -> None:
        """Block until everything available when called has been processed (pyspark's ``processAllAvailable``).

        Returns once a batch planned after the call found no new input and every earlier batch
        finished; with input arriving continuously it may never return. For tests.

        Raises:
            StreamingQueryException: the query terminated with a failure (stop on failure).
            JobFailedError: a batch failed (the DStream semantics).
            StreamingStateError: called from a listener callback, or inside ``async with`` (use
                :meth:`process_all_available_async`).
        """
        if self._env.async_mode:
            raise StreamingStateError("this context was entered with 'async with': use 'await ssc.process_all_available_async()'")
        if self._loop_thread is not None and threading.get_ident() == self._loop_thread:
            raise StreamingStateError("Cannot wait for a query state from the same thread that is running the query")
        portal, runtime = self._portal, self._runtime
        if runtime is None or runtime.state is not StreamingContextState.ACTIVE or portal is None:
            self._raise_death_cause()
            return
        try:
            with _as_pyspark_errors():
                portal.call(runtime.process_all_available)
        except RuntimeError as exc:
            if "portal is not running" not in str(exc):
                raise
            self._raise_death_cause()

    async def process_all_available_async(self) -> None:
        """:meth:`processAllAvailable` without blocking the event loop, inside ``async with``."""
        runtime = self._runtime
        if runtime is None or runtime.state is not StreamingContextState.ACTIVE:
            self._raise_death_cause()
            return
        with _as_pyspark_errors():
            await runtime.process_all_available()

    def _raise_death_cause(self) -> None:
        error = self.exception()
        if error is not None:
            raise error.with_traceback(None)

    def exception(self) -> StreamingQueryException | None:
        """The failure that terminated the query (a ``StreamingQueryException``), or ``None``.

        The exception is also an instance of pyspark's ``pyspark.errors.StreamingQueryException``
        (with ``getCondition() == "STREAM_FAILED"``). Under the DStream semantics (the default)
        a failed batch does not terminate the query, so this stays ``None``; the failure is
        raised by :meth:`awaitTermination`.
        """
        runtime = self._runtime
        error = None if runtime is None else runtime.exception()
        if not isinstance(error, StreamingQueryException):
            return None
        return as_pyspark_exception(error)

    def explain(self, extended: bool = False) -> None:
        """Print each output operation's DStream lineage down to its input streams (pyspark's ``explain``)."""
        print(self._graph.explain(extended=extended))

    # -- inputs and combinators --

    @api_call
    def queueStream(self, rdds: Sequence[Any], oneAtATime: bool = True, default: Any = None) -> DStream:  # noqa: N803
        """A stream of the given RDDs (or lists), one per batch or all at once.

        Lists are parallelized now, as pyspark does; inside ``async with`` (where this runs on the
        event loop and ``sc.parallelize`` would block it) a copy of each list is parallelized by
        the batch that takes it, on the generation thread.
        """
        from pyspark import RDD

        items = list(rdds)
        if not items and default is not None:
            items = [[]]
        if not items:
            raise IndexError("list index out of range: queueStream needs at least one RDD or list, or a default")
        if self._env.async_mode:
            queued: list[Any] = [r if isinstance(r, RDD) else list(r) for r in items]
            if default is not None and not isinstance(default, RDD):
                default = list(default)
        else:
            sc = self.sparkContext
            queued = [r if isinstance(r, RDD) else sc.parallelize(r) for r in items]
            if default is not None and not isinstance(default, RDD):
                default = sc.parallelize(default)
        return QueueInputDStream(self._env, queued, oneAtATime, default)

    @api_call
    def socketTextStream(
        self,
        hostname: str,
        port: int,
        storageLevel: Any = None,  # noqa: N803
        *,
        restartDelay: float | None = None,  # noqa: N803
        maxBufferedRecords: int = DEFAULT_MAX_BUFFERED_RECORDS,  # noqa: N803
        placement: str | None = None,
    ) -> DStream:
        """A stream of the UTF-8 text lines read from a TCP server at ``hostname:port``.

        A receiver task on the context's event loop connects when the context starts; lines end
        at ``\n``, ``\r\n`` or ``\r``, as in pyspark. When the connection fails, breaks or
        ends, it reconnects after ``restartDelay`` seconds (default
        ``spark.streaming.receiverRestartDelay``, 2 s); each failure is posted as a
        ``ReceiverError`` and each restart as ``ReceiverStopped`` then ``ReceiverStarted``.

        Args:
            hostname: the server's host name or address.
            port: the server's port.
            storageLevel: accepted for pyspark compatibility and checked, but unused: received
                lines are kept on the driver until their batch, then shipped with the batch's RDD.
            restartDelay: seconds to wait before reconnecting.
            maxBufferedRecords: lines held between two batches at most; when reached, the
                receiver stops reading until the next batch (TCP flow control then slows the
                sender) instead of growing memory.
            placement: ``"driver"`` (the default, or ``spark.aiodstream.receiver.placement``)
                or ``"executor"``: the receiver runs as a long-running Spark task, as Spark runs
                receivers, writing each block into the checkpoint's write-ahead log, and each
                batch's tasks read its blocks from there, so the records never pass through
                the driver. It takes a task slot for the context's life and needs a checkpoint
                directory that the driver and the executors see at the same path.

        On stop the connection is closed; lines read by then still reach the next batch (the
        last one, on a graceful stop). Lines the server sent but the receiver had not read are lost.

        Raises:
            InvalidPipelineError: a missing or empty ``hostname``, or a ``port`` outside 1..65535
                (refused here, where Spark's receiver would fail at every reconnect).
        """
        _check_socket_address(hostname, port)
        self._check_storage_level(storageLevel)
        if self._continuous is not None:  # a one-partition continuous input; union several for more partitions
            return ContinuousInputDStream(self._env, SocketSource([(hostname, port)]))
        return SocketInputDStream(self._env, hostname, port, restart_delay=self._restart_delay(restartDelay),
                                  max_buffered_records=maxBufferedRecords, placement=placement)

    @api_call
    def rateStream(self, rowsPerSecond: int = 1, numPartitions: int = 2) -> DStream:  # noqa: N803 - Spark's option names
        """Spark's ``rate`` source as a continuous input: ``Row(timestamp, value)`` at ``rowsPerSecond`` over ``numPartitions``.

        Each partition is one long-running task; values are ``p, p + n, ...`` per partition,
        timestamped when they are due. Needs a Continuous trigger.

        Raises:
            InvalidPipelineError: a rate or partition count that is not positive (Spark's
                message), or a micro-batch context.
        """
        return self.continuousStream(RateSource(rowsPerSecond, numPartitions))

    @api_call
    def continuousStream(self, source: ContinuousSource) -> DStream:
        """A continuous input reading ``source`` (a ``RateSource``, ``SocketSource``, ``FileSource`` or your own).

        In a context with a Continuous trigger; in continuous mode ``socketTextStream`` makes a
        one-partition socket input, and ``ssc.union`` of inputs reads all their partitions.

        Raises:
            InvalidPipelineError: a micro-batch context, or ``source`` is not a continuous source.
        """
        if self._continuous is None:
            raise InvalidPipelineError(
                "continuous inputs are read by continuous processing: create the context with a trigger, "
                "StreamingContext(sc, Continuous('1 second'))")
        return ContinuousInputDStream(self._env, source)

    @api_call
    def asyncIterableStream(
        self,
        source: AsyncSource,
        *,
        restartDelay: float | None = None,  # noqa: N803
        maxBufferedRecords: int = DEFAULT_MAX_BUFFERED_RECORDS,  # noqa: N803
    ) -> DStream:
        """A stream of the items of an async iterable: each batch gets those that arrived since the last.

        ``source`` is an async iterable (an async generator, a channel's receive side, ...) or a
        function returning one. It is iterated by a receiver task on the context's event loop
        (the host's loop under ``async with``), one record per item, pulled only while fewer
        than ``maxBufferedRecords`` wait for a batch: a fast source is slowed down to the batch
        rate instead of filling memory.

        When the iterable is exhausted the receiver stops (``ReceiverStopped``) and later batches
        are empty. When it raises, a ``ReceiverError`` is posted; a function or re-iterable
        source is then iterated afresh after ``restartDelay`` seconds, while an iterator that
        raised (e.g. an async generator object) is not restarted.

        On stop the receiver task is cancelled and an iterator with ``aclose`` is closed (an
        async generator's ``finally`` runs); items received by then still reach the next batch.
        """
        return AsyncIterableInputDStream(self._env, source, restart_delay=self._restart_delay(restartDelay),
                                         max_buffered_records=maxBufferedRecords)

    @api_call
    def textFileStream(self, directory: str) -> DStream:
        """A stream of the UTF-8 lines of the files that newly appear in ``directory``.

        Each batch reads the files modified since the previous batches and not read before
        (Spark's FileInputDStream rules: hidden files are skipped, files older than the stream or
        than the 60 s remember window are ignored). Move finished files into the directory
        rather than writing them in place. ``directory`` may be a local path, a glob, or a
        Hadoop URI (``hdfs://``, ``file:``...).
        """
        return FileInputDStream(self._env, directory, lambda sc, path: sc.textFile(path))

    @api_call
    def binaryRecordsStream(self, directory: str, recordLength: int) -> DStream:  # noqa: N803
        """A stream of the fixed-length byte records of the files that newly appear in ``directory``.

        Files are selected as by :meth:`textFileStream`; each record is ``recordLength`` bytes.
        """
        if isinstance(recordLength, bool) or not isinstance(recordLength, int) or recordLength < 1:
            raise ValueError(f"recordLength must be a positive int (bytes per record), got {recordLength!r}")
        return FileInputDStream(self._env, directory, lambda sc, path: sc.binaryRecords(path, recordLength))

    @staticmethod
    def _check_storage_level(level: Any) -> None:
        if level is None:
            return
        from pyspark import StorageLevel

        if not isinstance(level, StorageLevel):
            raise TypeError("storageLevel must be of type pyspark.StorageLevel")

    @staticmethod
    def _restart_delay(seconds: float | None) -> Duration | None:
        if seconds is None:
            return None
        fix = "pass e.g. 2"
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            raise InvalidDurationError(f"restartDelay must be a non-negative number of seconds, got {seconds!r}; {fix}")
        return Duration(scaled_milliseconds(seconds, 1000, "restartDelay", fix=fix, truncate=True))

    @api_call
    def union(self, *dstreams: DStream) -> DStream:
        """The union of streams with the same slide duration."""
        if not dstreams:
            raise InvalidPipelineError("should have at least one DStream to union")
        if len(dstreams) == 1:
            return dstreams[0]
        if len({d._slide for d in dstreams}) > 1:
            raise InvalidPipelineError("All DStreams should have same slide duration")
        return UnionDStream(list(dstreams))

    @api_call
    def transform(self, dstreams: Sequence[DStream], transformFunc: Callable[[Sequence[RDD[Any]]], RDD[Any]]) -> DStream:  # noqa: N803
        """A stream whose RDD is ``transformFunc(rdds)`` of the given streams' RDDs (a tuple, in their order).

        Every stream must have an RDD for the batch and ``transformFunc`` must return an RDD;
        the streams must share this context and a slide duration.
        """
        return MultiTransformedDStream(list(dstreams), transformFunc)

    def __repr__(self) -> str:
        return f"<StreamingContext {self._context_id} [{self._state.value} | batch {self._batch_duration}]>"

