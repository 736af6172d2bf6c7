"""StreamingContext: pyspark.streaming's entry point, on aiodstream's runtime (a face: the parts live beside it).

A pyspark program's ``start()``/``awaitTermination()``/``stop()`` drive the runtime on a loop in a thread
of its own (``SyncBridge``); an async program uses ``async with`` and the ``*_async`` methods on its own loop.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import anyio
import anyio.to_thread
import attrs

from listeners import OverflowPolicy
from scheduler import Clock, CorruptCheckpointError, Duration, InvalidDurationError, StreamingStateError, library_logger

from . import inputs
from ._active import ActiveContexts
from ._checkpointing import ContextCheckpoint, refuse_pyspark_checkpoint, saved_graph, spark_context_for
from ._listener_compat import in_query_listener, stop_after_callback
from ._listeners import ContextListeners
from ._manager import StreamingQueryManager, streams
from ._query import StreamingQueryFace
from ._query_runtime import create_runtime, micro_batch_runtime, query_options, start_micro_batch
from ._settings import ContextArguments, ContextSettings
from ._shutdown import SignalShutdown, shutdown_signal
from ._sync_bridge import BridgeClosedError, SyncBridge
from .continuous import Continuous, ContinuousSource, RateSource
from .dstream import DStream, MultiTransformedDStream, SavedRecipe, StreamEnvironment, StreamNode, api_call
from .inputs import DEFAULT_MAX_BUFFERED_RECORDS, AsyncSource
from .runtime import QueryRuntime, RuntimeCore, StreamingContextState
from .simulation import TraceRecording
from .spark import bind_spark, seconds_to_duration
from .ui import ContextUI, spark_links

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext  # only for annotations: pyspark is imported when Spark is first needed
    from pyspark.sql import SparkSession

__all__ = ["StreamingContext"]


def _frame_context(session: Any) -> Any:
    """The FrameContext over a Spark Connect session (``streaming.connect``, imported only for a Connect context)."""
    from .connect import FrameContext

    return FrameContext(session)

# The constructor options a checkpoint's graph keeps (StreamingContext._saved_options), beside concurrentJobs.
_SAVED_OPTIONS = ("queryName", "stopOnFailure", "exclusive", "uiPort", "listenerOverflow")

_ids = itertools.count()
_registry: ActiveContexts[StreamingContext] = ActiveContexts()


class StreamingContext(StreamingQueryFace):
    """The entry point of a DStream program, with pyspark.streaming's API.

    Args:
        sparkContext: the SparkContext to run batches on; ``None`` starts an embedded local
            Spark (``local[2]``) when first needed. A Spark Connect session runs the same program
            on Spark Connect: each batch is a ``FrameRDD`` over a DataFrame of the session
            (docs/connect.md); a classic SparkSession stands for its SparkContext.
        batchDuration: the batch interval in seconds (int or float), as in pyspark, or a Duration;
            or a :class:`~streaming.continuous.Continuous` trigger for continuous processing
            (long-running tasks; the trigger's interval cuts epochs; docs/continuous.md).
        clock: the runtime's clock (default: the wall clock); tests may pass a ManualClock.
        listenerOverflow: what a full listener queue does (drop, as Spark, or block).
        concurrentJobs: how many output-operation jobs may run at once; overrides
            ``spark.streaming.concurrentJobs`` (useful when the SparkContext is shared).
        exclusive: whether no other context may be active beside this one: by default one
            started with :meth:`start` is (pyspark's one active context per JVM), and one started
            with :meth:`start_async` is not (a service may run several on one SparkContext).
        queryName: the context's name as a query (Spark's ``queryName``), unique among the active queries.
        stopOnFailure: ``False`` (default, the DStream semantics; ``spark.streaming.stopOnFailure``):
            a failed batch is raised by ``awaitTermination`` and later batches go on. ``True``
            (Structured Streaming's): the context terminates with a ``StreamingQueryException``.
        uiPort: serve a web UI (Spark's Streaming tab) on this port of 127.0.0.1 while running
            (``0``: a free port; ``uiWebUrl`` gives it; ``spark.aiodstream.ui.*``: docs/ui.md).

    Every context is also a query with pyspark's ``StreamingQuery`` surface (``id``, ``runId``,
    ``status``, ``lastProgress``, ``processAllAvailable``, ``exception``, ``explain``...), listed
    by :data:`streaming.streams`; with a checkpoint its id lasts across restarts.
    """

    def __init__(
        self,
        sparkContext: SparkContext | SparkSession | None = None, batchDuration: float | Duration | Continuous | None = None,  # noqa: N803
        *, clock: Clock | None = None, listenerOverflow: OverflowPolicy = OverflowPolicy.DROP,  # noqa: N803
        concurrentJobs: int | None = None, exclusive: bool | None = None, queryName: str | None = None,  # noqa: N803
        stopOnFailure: bool | None = None, uiPort: int | None = None,  # noqa: N803
    ) -> None:
        """Create a context; nothing runs until it is started."""
        if batchDuration is None:
            raise InvalidDurationError("batchDuration is required: the batch interval in seconds, e.g. StreamingContext(sc, 1)")
        continuous = batchDuration if isinstance(batchDuration, Continuous) else None
        self._batch_duration = continuous.interval if continuous else seconds_to_duration(batchDuration, "batchDuration")
        self._arguments = ContextArguments(concurrentJobs, queryName, stopOnFailure, uiPort, clock=clock,
                                           listener_overflow=listenerOverflow, exclusive=exclusive)
        self._context_id = next(_ids)
        name = f"aiodstream-{self._context_id}"
        self._spark = bind_spark(sparkContext, name, frame_context=_frame_context)
        if continuous is not None:
            self._spark.require_jvm("continuous processing (a Continuous trigger)",
                                    "give a batch duration in seconds, e.g. StreamingContext(spark, 1)")
        self._env = StreamEnvironment(batch_duration=self._batch_duration, spark=self._spark, clock=clock, name=name, owner=self,
                                      check_can_add=self._check_can_add, runtime=lambda: micro_batch_runtime(self.runtime))
        self._env.continuous = continuous
        self._trace = TraceRecording(name)
        # A stop on another thread (spark.aiodstream.trace.batches) may still be adding the Spark
        # jobs to the trace when awaitTermination returns: the program's next step may stop Spark.
        super().__init__(self._env, SyncBridge(), queryName, after_termination=self._trace.wait_written)
        self._graph = self._env.graph
        self._graph.spark_context = lambda: self._spark.spark_context
        self._config: ContextSettings | None = None  # read on first need
        self._checkpoint = ContextCheckpoint(self._env, self._spark)
        self._ui = ContextUI()
        self._listeners = ContextListeners()
        self._shutdown: SignalShutdown | None = None
        # start() and stop() one at a time (Spark's synchronized start and stop). Not the registry's lock: a stop holds
        # this for as long as it drains, and a job or listener asking for the active context meanwhile must not wait.
        self._lifecycle = threading.RLock()
        self._log = library_logger("aiodstream.streaming", component="StreamingContext", context=self._context_id)

    @property
    def sparkContext(self) -> SparkContext:
        """The SparkContext batches run on (an embedded local one is started if none was given).

        On Spark Connect, the ``FrameContext`` over the session: ``parallelize``, ``union``,
        ``emptyRDD``, ``textFile`` and the like make FrameRDDs; what needs a JVM is refused.
        """
        return self._spark.spark_context

    def _settings(self) -> ContextSettings:
        """The settings this context uses (read on first need; on entering ``async with``, in a thread: py4j calls)."""
        if self._config is None:
            self._config = ContextSettings.read(self._spark.settings(), self._arguments, continuous=self._env.continuous is not None)
        return self._config

    def getState(self) -> str:
        """``"INITIALIZED"``, ``"ACTIVE"`` or ``"STOPPED"``."""
        return self._state.value

    @property
    def runtime(self) -> QueryRuntime:
        """The async runtime underneath (created on first use): a ``ContinuousExecution`` with a Continuous trigger."""
        if self._runtime is None:
            arguments = self._arguments
            self._runtime = create_runtime(self._env, self._settings(), clock=arguments.clock, overflow=arguments.listener_overflow,
                                           name=self._query_name, checkpoint_location=self._checkpoint.location,
                                           options=self._checkpoint.options)
            self._runtime.handle = self
            self._listeners.attach(self._runtime)
        return self._runtime

    def _saved_options(self) -> dict[str, object]:
        """The constructor options a checkpoint keeps for a restart (getOrCreate), by keyword: those given.

        What the query is (its name, its failure semantics) and how it shares the process and its
        listeners; not ``clock``, an object of this run (a restart runs on the wall clock).
        """
        arguments = self._arguments
        overflow = arguments.listener_overflow
        given = {"queryName": arguments.query_name, "stopOnFailure": arguments.stop_on_failure, "exclusive": arguments.exclusive,
                 "uiPort": arguments.ui_port, "listenerOverflow": None if overflow is OverflowPolicy.DROP else overflow}
        return {keyword: value for keyword, value in given.items() if value is not None}

    def _release_job_threads(self) -> None:
        """Let the job threads and the graph's generation thread end (each after its current work)."""
        self._spark.release_job_threads()
        self._graph.release_threads()

    def _check_can_add(self) -> None:
        if self._state is not StreamingContextState.INITIALIZED:
            when = "starting" if self._state is StreamingContextState.ACTIVE else "stopping"
            raise StreamingStateError(f"Adding new inputs, transformations, and output operations after {when} a context is "
                                      "not supported")

    # -- the process's active contexts --

    @classmethod
    def getActive(cls) -> StreamingContext | None:
        """The started, not yet stopped context of this process (the latest started, when several are), if any."""
        return next(reversed(_registry.active()), None)

    @classmethod
    def getActiveContexts(cls) -> list[StreamingContext]:
        """Every started, not yet stopped context of this process, oldest first (an aiodstream extension)."""
        return _registry.active()

    @classmethod
    def getActiveOrCreate(cls, checkpointPath: str | None, setupFunc: Callable[[], StreamingContext]) -> StreamingContext:  # noqa: N803
        """The active context, else one from ``checkpointPath`` (see :meth:`getOrCreate`), else ``setupFunc()``."""
        if not callable(setupFunc):
            raise TypeError("setupFunc should be callable.")
        active = cls.getActive()
        if active is not None:
            return active
        return setupFunc() if checkpointPath is None else cls.getOrCreate(checkpointPath, setupFunc)

    @classmethod
    def getOrCreate(cls, checkpointPath: str, setupFunc: Callable[[], StreamingContext], *,  # noqa: N803
                    restoreGraph: bool = True, options: Mapping[str, object] | None = None) -> StreamingContext:  # noqa: N803
        """A context rebuilt from the DStream graph saved in ``checkpointPath``, else ``setupFunc()`` with that checkpoint.

        As in Spark, ``setupFunc`` runs only when the checkpoint holds no graph; either way the
        context resumes what the checkpoint records (docs/checkpointing.md). A rebuilt context has the
        constructor options the saved one was given (``concurrentJobs``, ``queryName``, ``stopOnFailure``,
        ``exclusive``, ``uiPort``: its next 16 ports are tried if taken, ``listenerOverflow``; not ``clock``). ``restoreGraph=False``
        calls ``setupFunc`` anyway, so that a new version of the program (the same inputs and stateful
        streams, in the same order) resumes the old one's logs and state (an aiodstream extension);
        ``options`` are as for :meth:`checkpoint`.

        Raises:
            TypeError: ``setupFunc`` is not callable or does not return a StreamingContext.
            CorruptCheckpointError: the saved graph cannot be read.
            CheckpointError: the directory holds a checkpoint pyspark.streaming wrote (``checkpoint-<ms>`` files) and no
                graph of ours: its format differs, and ``setupFunc`` would start from scratch (docs/compatibility.md).
        """
        if not callable(setupFunc):
            raise TypeError("setupFunc should be callable.")
        recipe = saved_graph(checkpointPath) if restoreGraph else None
        if recipe is not None:
            return cls._restore(checkpointPath, recipe, options)
        refuse_pyspark_checkpoint(checkpointPath)
        ssc = setupFunc()
        if not isinstance(ssc, StreamingContext):
            raise TypeError(f"setupFunc should return a StreamingContext, got {type(ssc).__name__}")
        ssc.checkpoint(checkpointPath, options=options)
        ssc._checkpoint.recovering = True
        return ssc

    @classmethod
    def _restore(cls, checkpoint_path: str, recipe: SavedRecipe, options: Mapping[str, object] | None) -> StreamingContext:
        """The context a saved graph describes, with the saved constructor options, on the active SparkContext or a new
        one with the saved settings.

        Raises:
            CorruptCheckpointError: the graph holds a constructor option this version does not take.
        """
        saved = recipe.saved_context_options()
        unknown = sorted(set(saved) - set(_SAVED_OPTIONS))
        if unknown:
            raise CorruptCheckpointError(f"the DStream graph in {checkpoint_path} was saved with StreamingContext options this "
                                         f"version does not take: {', '.join(unknown)}", path=checkpoint_path)
        sc, interval = spark_context_for(recipe)
        ssc = cls(sc, interval, concurrentJobs=recipe.concurrent_jobs, **saved)
        # The port was free for the first run; another program may hold it now (see ContextArguments.ui_port_restored).
        ssc._arguments = attrs.evolve(ssc._arguments, ui_port_restored=True)
        recipe.replay(ssc, StreamNode)
        ssc._graph.restored_from_checkpoint = True
        ssc.checkpoint(checkpoint_path, options=options)
        ssc._checkpoint.recovering = True
        ssc._log.info("StreamingContext rebuilt from the checkpoint", checkpoint=checkpoint_path, calls=len(recipe.calls))
        return ssc

    def _register(self) -> None:
        """Count as active from now on, unless the one-active-context rule forbids it."""
        exclusive = self._arguments.exclusive
        _registry.register(self, exclusive=exclusive if exclusive is not None else not self._env.async_mode)

    def _before_start(self, *, own_properties: bool) -> None:
        """What a start does before the runtime starts (py4j calls, file I/O): the jobs' local properties (this thread's
        with ``own_properties``, else none), checkpoint, web UI, micro-batch extras."""
        self._spark.save_local_properties(inherit=own_properties)
        runtime = self.runtime
        self._checkpoint.prepare(runtime, self._arguments.concurrent_jobs, self._saved_options())
        self._ui.prepare(self._settings().ui, self, self._query_name or self._env.name)
        start_micro_batch(runtime, self._env, self._settings(), self._trace,
                          stop=lambda: self.stop(stopSparkContext=False, stopGraceFully=False))

    def _after_stop(self) -> None:
        """Once an async runtime stopped (blocking): Spark's job cancellations delivered, threads let go, trace finished."""
        self._spark.join_cancellations()
        self._release_job_threads()
        _registry.unregister(self)
        self._checkpoint.let_go()
        self._trace.finish(self._spark.started_spark_context)

    # -- synchronous lifecycle (pyspark) --

    def start(self) -> None:
        """Start generating batches; returns once the context is ACTIVE (a second call only logs a warning, as in Spark)."""
        with self._lifecycle:
            if self._state is StreamingContextState.ACTIVE:
                self._log.warning("StreamingContext has already been started")
                return
            if self._state is StreamingContextState.STOPPED:
                raise StreamingStateError("StreamingContext has already been stopped")
            if self._env.async_mode:
                raise StreamingStateError("this context was entered with 'async with': use 'await ssc.start_async()'")
            self._register()
            try:
                self._before_start(own_properties=True)
                self._bridge.start(self.runtime, self._ui.serve)
            except BaseException:
                self._checkpoint.release()
                _registry.unregister(self)
                raise
            _registry.started(self)
            if self._settings().stop_gracefully_on_shutdown:  # Spark's shutdown hook: drain and stop on SIGTERM or SIGINT
                self._shutdown = SignalShutdown(lambda: self.stop(stopSparkContext=False, stopGraceFully=True), self._env.name,
                                                active=lambda: self._state is StreamingContextState.ACTIVE,
                                                hurry=_stopper_now(self._bridge, self.runtime))
                self._shutdown.install()

    def stop(self, stopSparkContext: bool = True, stopGraceFully: bool = False) -> None:  # noqa: N803
        """Stop the context, and the SparkContext with ``stopSparkContext``; ``stopGraceFully`` finishes the batches
        already received first. Idempotent.

        Raises:
            StreamingStateError: called from a StreamingListener's callback, which the stop would wait for (pyspark's
                refusal; a StreamingQueryListener's callback may stop it, as Spark's: after the callback returns).
        """
        if in_query_listener():  # Spark lets a query listener stop its query; that stop waits for it: after the callback
            host = self._host[0] if self._env.async_mode and self._host is not None else None
            return stop_after_callback(functools.partial(self.stop, stopSparkContext, stopGraceFully), host,
                                       functools.partial(self.stop_async, stopSparkContext, stopGraceFully))
        if self._bridge.in_loop_thread():
            raise StreamingStateError("Cannot stop StreamingContext within listener bus thread.")
        RuntimeCore.refuse_stop_from_listener()  # a plain listener's thread: refused before anything is undone
        if self._shutdown is not None:
            self._shutdown.uninstall()
        runtime = self._runtime
        if self._in_own_job() and not self._env.async_mode and runtime is not None:
            # From a job of this context (a foreachRDD function): the stop waits for that job, so it cannot be waited
            # for here. The runtime begins it now (an immediate one refuses new work before this returns: no queued
            # batch starts after it); the rest, and the waiting, on a thread of its own once the job has returned.
            with contextlib.suppress(BridgeClosedError):  # the loop has ended: the runtime has stopped already
                self._bridge.call(functools.partial(runtime.stop, graceful=stopGraceFully))
            threading.Thread(target=self.stop, args=(stopSparkContext, stopGraceFully),
                             name="aiodstream-stop-from-job").start()
            return
        if self._env.async_mode:
            raise StreamingStateError("this context was entered with 'async with': use 'await ssc.stop_async()'")
        # Another thread's stop holding the lock (a graceful one draining, say): this immediate one hurries it first.
        busy = None if stopGraceFully or runtime is None else _stopper_now(self._bridge, runtime)
        with _held(self._lifecycle, busy):
            if self._state is StreamingContextState.INITIALIZED:
                self._log.warning("StreamingContext has not been started yet")
                self._close_unstarted()
            elif self._bridge.is_open and self._runtime is not None:
                try:
                    self._bridge.stop(self._runtime, graceful=stopGraceFully)
                finally:
                    self._spark.join_cancellations()
                    self._release_job_threads()
            else:
                self._log.warning("StreamingContext has already been stopped")
            _registry.unregister(self)
        self._checkpoint.let_go()
        self._trace.finish(self._spark.started_spark_context)
        if stopSparkContext:
            self._spark.stop_spark()  # on Connect: the session is released

    # -- asynchronous lifecycle --

    async def __aenter__(self) -> StreamingContext:
        self._refuse_if_started_sync("run it in 'async with'")
        self._env.async_mode = True
        self._entered_async()
        await anyio.to_thread.run_sync(self._settings)  # starts the embedded Spark if needed; py4j calls
        await self.runtime.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        try:
            return await self.runtime.__aexit__(exc_type, exc, tb)
        finally:
            await self._after_stop_async()

    async def _after_stop_async(self) -> None:
        """Once the runtime stopped (shielded, off the loop): cancellations delivered, threads let go, trace finished."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._after_stop)

    async def start_async(self) -> None:
        """Start generating batches, inside ``async with``; raises if already started."""
        if not self._env.async_mode:
            raise StreamingStateError("start_async() needs 'async with StreamingContext(...) as ssc:'")
        self._refuse_off_host("start_async")
        self._register()
        try:
            # py4j calls and file I/O: off the loop, so the loop thread's local properties are not read (docs/compatibility.md).
            await anyio.to_thread.run_sync(functools.partial(self._before_start, own_properties=False))
            await self._ui.serve(self.runtime)
            await self.runtime.start()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._checkpoint.release)  # a Hadoop lease: py4j calls
            _registry.unregister(self)
            raise
        _registry.started(self)

    async def stop_async(self, stopSparkContext: bool = False, stopGraceFully: bool = False) -> None:  # noqa: N803
        """Stop the context without blocking the event loop.

        Unlike :meth:`stop`, the SparkContext is kept by default: in a service it is usually shared.

        Raises:
            StreamingStateError: the context was started with ``start()``, or runs in 'async with' on another thread's
                event loop (await it there).
        """
        self._refuse_if_started_sync("stop it with stop_async()")
        self._refuse_off_host("stop_async")
        in_job = self._in_own_job()
        if in_job and stopSparkContext:
            raise StreamingStateError("cannot stop the SparkContext from inside one of this context's jobs: stop it "
                                      "after the context's 'async with' ends")
        await self.runtime.stop(graceful=stopGraceFully)
        if in_job:  # the runtime's stop runs beside the job that asked; the clean-up after it at the 'async with' exit
            return
        await self._after_stop_async()
        if stopSparkContext:
            await anyio.to_thread.run_sync(self._spark.stop_spark)

    async def stop_on_signal_async(self, *signals: int, stopGraceFully: bool = True) -> int:  # noqa: N803
        """Wait for a shutdown signal (SIGTERM or SIGINT by default), then stop the context; returns the signal.

        For an async host's task group: ``tg.start_soon(ssc.stop_on_signal_async)``; the SparkContext is kept.
        One signal stops every context waiting for it in the loop, and the host's own handlers are back once none waits.
        """
        signum = await shutdown_signal(*signals)
        self._log.warning("shutdown signal received: stopping the StreamingContext", signal=signum, graceful=stopGraceFully)
        await self.stop_async(stopGraceFully=stopGraceFully)
        return signum

    # -- configuration --

    @api_call
    def remember(self, duration: float) -> None:
        """Keep each stream's RDDs for at least ``duration`` seconds."""
        self._graph.remember(seconds_to_duration(duration, "remember duration"))

    def checkpoint(self, directory: str | None, *, options: Mapping[str, object] | None = None) -> None:
        """Set the checkpoint directory (``None``: none) for RDD checkpoints and the recovery logs :meth:`getOrCreate` resumes.

        Started without :meth:`getOrCreate`, a context starts afresh, as in Spark (a previous run's logs are moved
        aside). ``options``: Spark's progress-tracking writer options (docs/checkpointing.md).

        Raises:
            StreamingStateError: the context was already started.
            InvalidPipelineError: an unknown or malformed option.
        """
        if self._state is not StreamingContextState.INITIALIZED:
            raise StreamingStateError("the checkpoint directory can only be set before the StreamingContext is started")
        settings = self._settings()
        location = self._checkpoint.set(directory, mode=settings.checkpoint_file_manager, default_fs=settings.default_fs, options=options)
        if self._runtime is not None:
            self._runtime.set_checkpoint_location(location, options=query_options(self._env, settings, self._checkpoint.options))

    def record_trace(self, path: str | os.PathLike[str], *, batches: int | None = None) -> None:
        """Record this run for the simulator (``spark.aiodstream.trace.path``; docs/simulation.md); call it before :meth:`start`.

        ``batches`` stops the context once that many batches completed. Raises StreamingStateError
        once started, ValueError for a ``batches`` that is not a positive int.
        """
        if self._state is not StreamingContextState.INITIALIZED:
            raise StreamingStateError("record_trace() must be called before the context starts")
        self._trace.request(path, batches)

    def ui_links(self) -> dict[str, Any]:
        """For the web UI: the Spark UI's address and a lookup of an output operation's Spark jobs (py4j calls)."""
        return spark_links(self._spark.started_spark_context, self._env.name, micro_batch=self._env.continuous is None)

    @property
    def uiWebUrl(self) -> str | None:
        """The address of this context's web UI while it serves one (``uiPort``, ``spark.aiodstream.ui.port``), else ``None``."""
        return self._ui.url(self._runtime)

    def addStreamingListener(self, streamingListener: object) -> None:  # noqa: N803
        """Register a listener: a pyspark ``StreamingListener`` or ``StreamingQueryListener``, or an aiodstream listener.

        A ``StreamingQueryListener`` hears this context's query events (started, progress,
        idle, terminated) as pyspark's event objects; to hear every query's, add it to
        :data:`streaming.streams` instead.
        """
        self._listeners.add(streamingListener, self._runtime)

    def removeStreamingListener(self, streamingListener: object) -> None:  # noqa: N803
        """Unregister a listener added with :meth:`addStreamingListener`.

        Raises:
            ValueError: the listener was not added.
        """
        self._listeners.remove(streamingListener, self._runtime)

    @property
    def streams(self) -> StreamingQueryManager:
        """The process's query manager (pyspark's ``spark.streams``)."""
        return streams

    # -- inputs and combinators (their arguments are checked in streaming.inputs) --

    @api_call
    def queueStream(self, rdds: Sequence[Any], oneAtATime: bool = True, default: Any = None) -> DStream[Any]:  # noqa: N803
        """A stream of the given RDDs (or lists), one per batch or all at once (see :func:`streaming.inputs.queue_stream`)."""
        return inputs.queue_stream(self._env, rdds, oneAtATime, default)

    @api_call
    def socketTextStream(self, hostname: str, port: int, storageLevel: Any = None, *,  # noqa: N803
                         restartDelay: float | None = None, maxBufferedRecords: int = DEFAULT_MAX_BUFFERED_RECORDS,  # noqa: N803
                         placement: str | None = None) -> DStream[Any]:
        """The UTF-8 text lines read from a TCP server at ``hostname:port`` (see :func:`streaming.inputs.socket_text_stream`)."""
        return inputs.socket_text_stream(self._env, hostname, port, storageLevel, restart_delay=restartDelay,
                                  max_buffered_records=maxBufferedRecords, placement=placement)

    @api_call
    def rateStream(self, rowsPerSecond: int = 1, numPartitions: int = 2) -> DStream[Any]:  # noqa: N803 - Spark's option names
        """Spark's ``rate`` source (continuous): ``Row(timestamp, value)`` at ``rowsPerSecond`` over ``numPartitions`` tasks."""
        return self.continuousStream(RateSource(rowsPerSecond, numPartitions))

    @api_call
    def continuousStream(self, source: ContinuousSource) -> DStream[Any]:
        """A continuous input reading ``source`` in a context with a Continuous trigger (see :func:`streaming.inputs.continuous_stream`)."""
        return inputs.continuous_stream(self._env, source)

    @api_call
    def asyncIterableStream(self, source: AsyncSource, *, restartDelay: float | None = None,  # noqa: N803
                            maxBufferedRecords: int = DEFAULT_MAX_BUFFERED_RECORDS) -> DStream[Any]:  # noqa: N803
        """The items of an async iterable, each batch those arrived since the last (:func:`streaming.inputs.async_iterable_stream`)."""
        return inputs.async_iterable_stream(self._env, source, restart_delay=restartDelay, max_buffered_records=maxBufferedRecords)

    @api_call
    def textFileStream(self, directory: str) -> DStream[Any]:
        """The UTF-8 lines of the files that newly appear in ``directory`` (see :func:`streaming.inputs.text_file_stream`)."""
        return inputs.text_file_stream(self._env, directory)

    @api_call
    def binaryRecordsStream(self, directory: str, recordLength: int) -> DStream[Any]:  # noqa: N803
        """The fixed-length byte records of the files newly in ``directory`` (:func:`streaming.inputs.binary_records_stream`)."""
        return inputs.binary_records_stream(self._env, directory, recordLength)

    @api_call
    def inputStream(self, factory: Callable[..., DStream[Any]], *args: Any, **kwargs: Any) -> DStream[Any]:
        """The stream ``factory(environment, *args, **kwargs)`` makes: the seam for inputs defined outside the context.

        ``streaming.kafka``'s ``KafkaUtils.createDirectStream`` makes its stream through it.
        The call is recorded like the context's own input methods, so a checkpointed graph is
        rebuilt with it: ``factory`` must be importable by name, its arguments picklable.
        """
        return factory(self._env, *args, **kwargs)

    @api_call
    def union(self, *dstreams: DStream[Any]) -> DStream[Any]:
        """The union of streams with the same slide duration."""
        return inputs.union(dstreams)

    @api_call
    def transform(self, dstreams: Sequence[DStream[Any]], transformFunc: Callable[[Sequence[RDD[Any]]], RDD[Any]]) -> DStream[Any]:  # noqa: N803
        """A stream whose RDD is ``transformFunc(rdds)`` of the given streams' RDDs (same context and slide; in their order)."""
        return MultiTransformedDStream(list(dstreams), transformFunc)

    def __repr__(self) -> str:
        return f"<StreamingContext {self._context_id} [{self._state.value} | batch {self._batch_duration}]>"


@contextlib.contextmanager
def _held(lock: threading.RLock, busy: Callable[[], None] | None) -> Iterator[None]:
    """``lock`` held for the block; when another thread holds it, ``busy`` is called before waiting for it."""
    if busy is None or not lock.acquire(blocking=False):
        if busy is not None:
            busy()
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _stopper_now(bridge: SyncBridge, runtime: QueryRuntime) -> Callable[[], None]:
    """What makes ``runtime``'s graceful stop under way immediate, through ``bridge``: :func:`_stop_now` on weak references."""
    return functools.partial(_stop_now, weakref.ref(bridge), weakref.ref(runtime))


def _stop_now(bridge_ref: weakref.ref[SyncBridge], runtime_ref: weakref.ref[QueryRuntime]) -> None:
    """A second shutdown signal while the first one's graceful stop drains: the runtime's stop becomes immediate (the
    drain ends; what is queued is left to a restart); the first stop, on its own thread, finishes the rest. Weak
    references: the handler that keeps this until a later context starts must not keep a stopped context alive."""
    bridge, runtime = bridge_ref(), runtime_ref()
    if bridge is not None and runtime is not None and runtime.state is StreamingContextState.ACTIVE:
        with contextlib.suppress(BridgeClosedError):  # the loop has ended: the runtime has stopped already
            bridge.call(functools.partial(runtime.stop, graceful=False))
