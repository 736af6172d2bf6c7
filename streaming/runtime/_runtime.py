"""StreamingRuntime: the async core of a streaming context (Spark's ``StreamingContext`` lifecycle).

It owns the listener bus and the JobScheduler, runs them in its own task group, enforces the
INITIALIZED -> ACTIVE -> STOPPED lifecycle, and keeps the waiter that ``await_termination``
reads. With a checkpoint location (or a Once / AvailableNow trigger) it is also a query in
Structured Streaming's sense: an id kept across restarts, offsets and commits logs, progress
reports. The pyspark-compatible ``StreamingContext`` is built on it.
"""

from __future__ import annotations

import functools
import math
import os
import uuid
from types import TracebackType
from typing import Any, Callable, Coroutine, Mapping, Sequence

import anyio
import anyio.abc

from listeners import (
    DEFAULT_LISTENER_EXIT_TIMEOUT,
    OverflowPolicy,
    QueryStarted,
    QueryTerminated,
    StreamingListenerBus,
    StreamingStarted,
    current_listener,
)
from scheduler import (
    BatchHook,
    CheckpointPath,
    Clock,
    Duration,
    InvalidPipelineError,
    JobFailedError,
    JobGraph,
    JobScheduler,
    MicroBatchTracker,
    Milliseconds,
    RunPlan,
    StreamingQueryException,
    StreamingQueryProgress,
    StreamingQueryStatus,
    StreamingStateError,
    SystemClock,
    Time,
    Trigger,
    death_message,
    format_timestamp,
    library_logger,
    redacted_traceback,
)

from ._arguments import check_runtime_arguments
from ._core import RuntimeCore
from ._manager import QueryRegistration
from ._micro_batch_query import death_cause, drive_triggers, error_class_of, located, open_query, query_tracker, wait_no_new_data
from ._state import StreamingContextState

__all__ = ["StreamingRuntime"]


class StreamingRuntime:
    """Runs a job graph on the batch grid, with listeners, lifecycle and termination waiting.

    Use it as an async context manager, which gives it a task group inside your application::

        async with StreamingRuntime(pipeline, Seconds(1)) as runtime:
            await runtime.start()
            await runtime.await_termination(Seconds(10))
            await runtime.stop(graceful=True)

    Leaving the block stops a still-active runtime: gracefully on a normal exit, immediately
    (abandoning running jobs at once) on an exception or cancellation.

    Guarantees:
        * batches are generated for every grid time ``first + k * batch_duration``, never skipped;
        * at most ``concurrent_jobs`` jobs run at once; jobs start in submission order;
        * batch hooks see completed batches in batch-time order;
        * a failed job never stops the runtime (unless ``stop_on_failure``): it is raised by
          every later ``await_termination``;
        * every event posted to the listener bus is delivered before ``stop`` returns, unless a
          listener is still behind when ``listener_exit_timeout`` passes: its undelivered events
          are then dropped and counted, so a stop always ends.
    """

    def __init__(
        self,
        graph: JobGraph,
        batch_duration: Duration,
        *,
        clock: Clock | None = None,
        concurrent_jobs: int = 1,
        graceful_stop_timeout: Duration | None = None,
        abandon_after: Duration = Milliseconds(2000),
        listener_bus_capacity: int = 10_000,
        listener_overflow: OverflowPolicy = OverflowPolicy.DROP,
        listener_exit_timeout: Duration | None = DEFAULT_LISTENER_EXIT_TIMEOUT,
        hooks: Sequence[BatchHook] = (),
        name: str | None = None,
        checkpoint_location: str | os.PathLike[str] | CheckpointPath | None = None,
        trigger: Trigger = Trigger.PROCESSING_TIME,
        options: Mapping[str, object] | None = None,
        track_progress: bool = False,
        stop_on_failure: bool | None = None,
    ) -> None:
        """Configure a runtime; nothing runs until :meth:`start`.

        Args:
            graph: the pipeline (a ``JobGraph``) generating each batch's jobs.
            batch_duration: the batch interval, a positive :class:`Duration`.
            clock: where every time comes from (default: the wall clock).
            concurrent_jobs: how many jobs may run at once.
            graceful_stop_timeout: how long a graceful stop waits without any job finishing
                before it abandons what is left (default 10 batch intervals); late batches that
                keep finishing are all drained.
            abandon_after: how long an immediate stop lets running jobs finish before it
                cancels them (Spark waits 2 s).
            listener_bus_capacity: per-listener queue bound.
            listener_overflow: what a full listener queue does (drop or block).
            listener_exit_timeout: how long a stop lets listeners drain their queues, on
                ``clock`` (Spark's ``spark.scheduler.listenerbus.exitTimeout``); what a hung
                listener has not received by then is dropped and counted. ``None``: no bound.
            hooks: per-batch hooks (checkpointing, source commits), called in batch-time order.
            name: a name for logs; with query tracking, the query name, unique among the
                active queries of the process.
            checkpoint_location: a directory for the query's id and offsets and commits logs.
                A restart on the same directory re-runs the batches that were logged and not
                committed, with the same batch time and input, then generates the batches
                whose time passed while it was down, then carries on on the same grid.
            trigger: when batches run: every ``batch_duration`` on the grid (default), once,
                or everything available now (both stop by themselves).
            options: Spark-named progress options: ``asyncProgressTrackingEnabled``, ``asyncProgressTrackingCheckpointIntervalMs``,
                ``spark.sql.streaming.minBatchesToRetain``, ``spark.sql.streaming.numRecentProgressUpdates``,
                ``spark.sql.streaming.noDataProgressEventInterval``; ``spark.sql.streaming.multipleWatermarkPolicy``.
            track_progress: plan offsets and report progress without a checkpoint.
            stop_on_failure: what a failed job or batch does. ``True`` (Structured
                Streaming's semantics; the default with a checkpoint location): the query
                terminates, its batch stays uncommitted, ``await_termination`` raises a
                :class:`~scheduler.StreamingQueryException` and ``QueryTerminated`` carries it.
                ``False`` (the DStream semantics; the default otherwise): the failure is
                reported and later batches go on.

        Query tracking (any of the last four) needs a :class:`~scheduler.ReplayableGraph`
        whose every input is replayable, such as a :class:`Pipeline` of replayable sources.

        Raises:
            InvalidPipelineError: a bad option, async progress tracking with a Once or
                AvailableNow trigger (Spark's messages), or query tracking of a graph that is
                not replayable.
            InvalidDurationError, TypeError, ValueError: an argument of the wrong kind or range (named).
        """
        check_runtime_arguments(batch_duration, clock=clock, graceful_stop_timeout=graceful_stop_timeout,
                                abandon_after=abandon_after, name=name, stop_on_failure=stop_on_failure,
                                track_progress=track_progress)
        self.graph = graph
        self.batch_duration = self.interval = batch_duration
        self.kind = "micro-batch"
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.graceful_stop_timeout = graceful_stop_timeout if graceful_stop_timeout is not None else batch_duration * 10
        self.abandon_after = abandon_after
        self.name = name
        self.listener_bus = StreamingListenerBus(listener_bus_capacity, listener_overflow, clock=self.clock,
                                                 exit_timeout=listener_exit_timeout)
        if not isinstance(trigger, Trigger):
            raise InvalidPipelineError(f"trigger must be a Trigger, got {trigger!r}; pass e.g. Trigger.AVAILABLE_NOW")
        self.trigger = trigger
        self._concurrent_jobs = concurrent_jobs
        self._hooks = tuple(hooks)
        self._options = options
        self._track_progress = track_progress
        self._stop_on_failure_option = stop_on_failure
        self._driver_scope: anyio.CancelScope | None = None
        self.handle: object = self
        """What the query manager hands out for this query (a StreamingContext sets itself)."""
        self._registration = QueryRegistration(self)
        self._log = library_logger("aiodstream.streaming", component="StreamingRuntime", name=name)
        self._core = RuntimeCore(self.listener_bus, self.clock, kind="runtime", log=self._log)
        self._configure(checkpoint_location)
        self._scheduler_done: anyio.Event | None = None
        self.start_time: Time | None = None
        self.first_batch_time: Time | None = None

    def _configure(self, checkpoint_location: str | os.PathLike[str] | CheckpointPath | None) -> None:
        """Build the query tracker (if any) and the scheduler for ``checkpoint_location`` (a URI through fsspec)."""
        graph, checkpoint_location = self.graph, located(checkpoint_location)
        self.tracker = query_tracker(graph, self.batch_duration, self.clock, self.listener_bus,
                                     checkpoint_location=checkpoint_location, trigger=self.trigger, options=self._options,
                                     track_progress=self._track_progress, name=self.name, concurrent_jobs=self._concurrent_jobs)
        self.checkpoint_location = checkpoint_location
        option = self._stop_on_failure_option
        self.stop_on_failure = (checkpoint_location is not None) if option is None else bool(option)
        if self.stop_on_failure and self.tracker is None:
            raise InvalidPipelineError("stop_on_failure needs a query: pass checkpoint_location= or track_progress=True")
        bind = getattr(graph, "bind_checkpoint", None)
        if callable(bind):  # a Pipeline keeps its stateful operators' stores under the checkpoint
            bind(checkpoint_location, self.batch_duration)
        self.scheduler = JobScheduler(
            graph,
            self.batch_duration,
            clock=self.clock,
            listener=self.listener_bus,
            concurrent_jobs=self._concurrent_jobs,
            hooks=self._hooks,
            report_error=self._notify_error,
            planner=self.tracker,
        )

    def set_checkpoint_location(self, checkpoint_location: str | os.PathLike[str] | CheckpointPath | None, *,
                                options: Mapping[str, object] | None = None) -> None:
        """Set (or, with ``None``, clear) the checkpoint directory, and the progress options if given; only before :meth:`start`.

        Raises:
            StreamingStateError: the runtime was already started.
            InvalidPipelineError: the graph is not replayable, or a bad option.
        """
        if self.state is not StreamingContextState.INITIALIZED:
            raise StreamingStateError(f"the checkpoint location can only be set before start; the runtime is {self.state.value}")
        if options is not None:
            self._options = options
        self._configure(checkpoint_location)

    # -- state --

    @property
    def concurrent_jobs(self) -> int:
        """How many jobs may run at once (``spark.streaming.concurrentJobs``)."""
        return self._concurrent_jobs

    @property
    def state(self) -> StreamingContextState:
        """The lifecycle state."""
        return self._core.state

    def add_listener(self, listener: object, *, name: str | None = None, on_loop: bool | None = None) -> None:
        """Register a listener; allowed before and after start, from any thread.

        Plain ``def`` callbacks run on a worker thread of the listener's own unless ``on_loop``
        (or the listener's ``run_on_loop`` attribute) says they are quick enough for the event
        loop: see :class:`listeners.StreamingListenerBus`.
        """
        self._core.add_listener(listener, name=name, on_loop=on_loop)

    def remove_listener(self, listener: object) -> None:
        """Unregister a listener (from any thread)."""
        self._core.remove_listener(listener)

    # -- home: the task group everything runs in --

    async def __aenter__(self) -> StreamingRuntime:
        await self._core.enter()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        # A normal exit stops gracefully; cancellation or an error in the host stops now, without
        # waiting for running jobs (they are abandoned).
        return await self._core.exit(exc_type, exc, tb, self._stop_on_exit)

    async def _stop_on_exit(self, graceful: bool) -> None:
        await self._stop(graceful=graceful, abandon_after=self.abandon_after if graceful else Duration(0))

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start, report ready to ``task_group.start``, and run until stopped (embedding: ``await tg.start(runtime.run)``)."""
        async with self:
            await self.start()
            task_status.started()
            await self._core.wait_stopped()

    # -- start / stop --

    async def start(self) -> None:
        """Validate the graph and start generating batches on the grid (INITIALIZED -> ACTIVE).

        Raises:
            StreamingStateError: already started, already stopped, or not inside ``async with``.
            InvalidPipelineError: the graph cannot run (e.g. no output operations); the runtime
                is then STOPPED, as Spark marks a context whose start failed.
        """
        tg = self._core.startable(
            "start() needs the runtime's task group: use 'async with runtime:' or 'await task_group.start(runtime.run)'")
        self._scheduler_done = anyio.Event()
        tracker = self.tracker
        plan: RunPlan | None = None
        try:
            if tracker is not None:  # a query: the manager's listeners hear it from its start
                self._registration.add_manager_listeners(self.listener_bus)
            await tg.start(self.listener_bus.run)
            run: dict[str, Any] = {}
            if tracker is not None:
                plan = await open_query(tracker, self._registration, self.name, self.checkpoint_location,
                                        self.scheduler.generator.timer.start_time())
                await tg.start(tracker.run)
                run = {"start": plan.first_batch, "zero_time": plan.zero_time, "reschedule": plan.reschedule,
                       "timer": self.trigger is Trigger.PROCESSING_TIME}
            self.first_batch_time = await tg.start(self._run_scheduler, run)
        except BaseException:
            self._log.error("Error starting the context, marking it as stopped")
            try:
                if tracker is not None:
                    with anyio.CancelScope(shield=True):
                        await tracker.close()
                await self._registration.release()  # a start that failed is not a termination (its error was raised)
                tg.start_soon(self.listener_bus.stop)  # in the background, within the exit timeout: no hung listener holds us
            finally:  # STOPPED last: it wakes an exit waiting for this start, which then closes the group
                self._core.state = StreamingContextState.STOPPED
                self._scheduler_done.set()
                self._core.mark_stopped()
            raise
        self._core.state = StreamingContextState.ACTIVE
        self.start_time = self.clock.now()
        try:
            await _announce_start(self, plan, tg)
        except BaseException:
            # Cancelled announcing the start (a slow onQueryStarted): a start that raised leaves the runtime stopped (its
            # caller lets go of the checkpoint); as a cancelled stop, undelivered events drop, no hung listener holds it.
            with anyio.CancelScope(shield=True):
                await self._stop(graceful=False, abandon_after=Duration(0), drain_listeners=False)
            raise
        self._log.info("StreamingContext started", first_batch=self.first_batch_time.milliseconds,
                       batch_ms=self.batch_duration.milliseconds)

    async def _drive_triggers(self, plan: RunPlan) -> None:
        # Once and AvailableNow: batches are generated here instead of by the timer, back to
        # back on consecutive grid times, until a check finds no new data; then the run stops.
        tracker = self.tracker
        assert tracker is not None
        finished = False
        with anyio.CancelScope() as scope:
            self._driver_scope = scope
            error = await drive_triggers(self.scheduler, tracker, self.trigger, plan, lambda: self._core.error is not None)
            if error is not None:
                self._notify_error(error)
            finished = True
        self._driver_scope = None
        if finished:
            self._log.info("finished processing all available data, stopping", trigger=self.trigger.value)
            await self._stop(graceful=True, abandon_after=self.abandon_after)

    async def _run_scheduler(self, run: Mapping[str, Any], *,
                             task_status: anyio.abc.TaskStatus[Time] = anyio.TASK_STATUS_IGNORED) -> None:
        assert self._scheduler_done is not None
        try:
            await self.scheduler.run(**run, task_status=task_status)
        finally:
            self._scheduler_done.set()

    async def stop(self, *, graceful: bool = False) -> None:
        """Stop the runtime (ACTIVE -> STOPPED); idempotent.

        Graceful: the next tick still fires, then everything generated runs to completion; it gives up once
        ``graceful_stop_timeout`` passes without any job finishing. Immediate: nothing new starts; running jobs get
        ``abandon_after`` to finish and are then cancelled (a blocking Spark call in a worker thread cannot be
        interrupted: its Spark job group is cancelled and the thread is abandoned), as is a batch's generation. Either
        way every listener event already posted is delivered before this returns, within ``listener_exit_timeout``;
        after it, what a hung listener has not received is dropped and counted (``listener_bus.statistics()``), and a
        listener callback still running on its worker thread is abandoned (``OverflowPolicy.BLOCK``: a post waits for
        a hung listener that long at most). Concurrent calls wait for the first, and an immediate one makes a graceful
        stop under way immediate (its drain ends: what is queued is left, running jobs get ``abandon_after``); from its
        own job it starts the stop.

        Cancelled (``anyio.move_on_after`` around it), the stop still completes its short
        bookkeeping, drops the listener events not yet delivered, and the runtime is STOPPED
        when the cancellation propagates; running jobs are abandoned as in an immediate stop.

        Raises:
            StreamingStateError: called from inside a listener callback, which the stop would
                wait for (Spark refuses this too).
        """
        self._core.refuse_stop_from_listener()
        stop, group = functools.partial(self._stop, graceful=graceful, abandon_after=self.abandon_after), self._core.task_group
        await (_start_beside_job(self.scheduler, group, stop, graceful=graceful) if group is not None and self.scheduler.in_own_job()
               else stop())

    async def _stop(self, *, graceful: bool, abandon_after: Duration, drain_listeners: bool = True) -> None:
        if not await self._core.begin_stop(graceful=graceful, hurry=functools.partial(_hurry, self.scheduler)):
            return
        self.listener_bus.stopping()  # under BLOCK, a hung listener holds the jobs' posts no longer than the exit timeout
        if self._driver_scope is not None:
            self._driver_scope.cancel()  # no new trigger-driven batch; what is generated drains below
        assert self._scheduler_done is not None
        try:
            await self.scheduler.stop(graceful=graceful, timeout=self.graceful_stop_timeout, abandon_after=abandon_after)
            await self._scheduler_done.wait()
        except anyio.get_cancelled_exc_class():
            # Cancelled from outside: the scheduler must still end (its timer and workers live in
            # our task group), so stop it now, abandoning running jobs at once: short, shielded.
            with anyio.CancelScope(shield=True):
                await self.scheduler.stop(graceful=False, abandon_after=Duration(0))
                await self._scheduler_done.wait()
            raise
        finally:
            try:
                with anyio.CancelScope(shield=True):
                    await self._finish_query()
                # Stop the bus only once the scheduler can post nothing more: the listeners drain
                # their queues, within the bus's exit timeout (on our clock). Not shielded: a
                # cancelled stop drops what is undelivered instead of waiting for a hung listener.
                with anyio.CancelScope(deadline=math.inf if drain_listeners else -math.inf):  # else: as if cancelled
                    await self.listener_bus.stop()
            finally:
                self._core.end_stop()
                self._log.info("StreamingContext stopped successfully", graceful=graceful)

    async def _finish_query(self) -> None:
        # Spark's termination order: stop the writers, mark the status, unregister, then post
        # QueryTerminated; the bus is closed (and drained) after this.
        tracker = self.tracker
        if tracker is None:
            return
        await tracker.close()
        if (close_stores := getattr(self.graph, "close_state_stores", None)) is not None:
            await close_stores()  # a Pipeline's stateful operators let go of their working copies
        # Only a failure that terminated the query is its death cause: in the DStream semantics
        # a failed job was reported (await_termination raises it) and the query went on.
        error = self._core.error if self.stop_on_failure else None
        death = error or tracker.failure
        if tracker.failure is not None and self._core.error is None:  # after the last trigger: no batch raised it
            self._core.error = _log_write_failed(tracker.failure)
        tracker.set_status("Stopped" if death is None else f"Terminated with exception: {death_message(death)}")
        terminated = tracker.query_id is not None and self.state is StreamingContextState.ACTIVE
        await self._registration.release(terminated=terminated, death=death)
        if terminated:
            assert tracker.query_id is not None
            text = None if death is None else redacted_traceback(death)
            await self.listener_bus.post(QueryTerminated(tracker.query_id, tracker.run_id, text, error_class_of(death)))

    async def wait_until_idle(self) -> None:
        """Wait until every batch due so far is generated, run and finalised, and its events delivered.

        With a manual clock this is "let the engine settle" after ``clock.advance(...)``: ticks
        that the advance made due are generated first. It does not wait for future ticks.
        """
        await self.scheduler.wait_until_idle()
        await self.listener_bus.wait_delivered()

    # -- the waiter --

    def _notify_error(self, error: JobFailedError) -> None:
        tracker, core = self.tracker, self._core
        if self.stop_on_failure and tracker is not None:
            if isinstance(core.error, StreamingQueryException):
                return  # the query is already terminating: its first failure is its death cause
            error = death_cause(tracker, error)
            tracker.fail(error)  # nothing is planned or committed after the failed batch
            self.scheduler.refuse_new_work()  # nor run: a later batch's queued jobs would start before the stop does
            core.error = error
            if core.task_group is not None and not core.stopping:
                core.task_group.start_soon(self._stop_after_failure)
            core.wake()
            return
        if core.stopping and tracker is not None and tracker.failed_batches.keep():
            self.scheduler.refuse_new_work()  # a failure ends a stop's drain: it and later batches stay for the restart
        core.error = error  # the latest error wins, as in Spark's ContextWaiter
        core.wake()

    async def _stop_after_failure(self) -> None:
        self._log.error("query terminated with exception", error=str(self._core.error))
        await self._stop(graceful=False, abandon_after=self.abandon_after)

    async def await_termination(self, timeout: Duration | None = None) -> bool:
        """Wait until the runtime stops or a job fails; True if stopped, False if timed out.

        ``timeout`` is measured on the runtime's clock. Like Spark's ``awaitTermination``, a
        failure is sticky: once any job or batch generation has failed, every call raises the
        latest failure, even after a successful stop. With ``stop_on_failure`` a failure ends the
        wait only once the query has terminated (Structured Streaming's ``awaitTermination``).

        Raises:
            JobFailedError: a job or a batch generation failed (the original is ``__cause__``);
                with ``stop_on_failure``, the :class:`~scheduler.StreamingQueryException`.
        """
        # A failed query is waited for until it terminated, as in Spark.
        return await self._core.await_termination(timeout, failure_ends_wait=not self.stop_on_failure)

    def exception(self) -> JobFailedError | None:
        """The latest job or generation failure, or ``None``.

        With ``stop_on_failure``, the :class:`~scheduler.StreamingQueryException` that
        terminated the query (Spark's ``exception()``).
        """
        return self._core.error

    @property
    def is_active(self) -> bool:
        """Whether the runtime was started and has not stopped (Spark's ``isActive``)."""
        return self.state is StreamingContextState.ACTIVE

    # -- the query (with a checkpoint, a trigger or progress tracking) --

    def _query(self) -> MicroBatchTracker:
        if self.tracker is None:
            raise StreamingStateError(
                "this runtime does not track a query: pass checkpoint_location=, a trigger, or track_progress=True"
            )
        return self.tracker

    @property
    def id(self) -> uuid.UUID | None:
        """The query id, kept across restarts on the same checkpoint (``None`` before start, or without query tracking)."""
        return None if self.tracker is None else self.tracker.query_id

    @property
    def run_id(self) -> uuid.UUID | None:
        """This run's id, new at every start (``None`` without query tracking)."""
        return None if self.tracker is None else self.tracker.run_id

    @property
    def status(self) -> StreamingQueryStatus:
        """What the query is doing now (Spark's ``status``)."""
        return self._query().status

    @property
    def last_progress(self) -> StreamingQueryProgress | None:
        """The newest progress report, or ``None`` (Spark's ``lastProgress``)."""
        return self._query().last_progress

    @property
    def recent_progress(self) -> list[StreamingQueryProgress]:
        """Recent progress reports, oldest first, bounded (Spark's ``recentProgress``)."""
        return self._query().recent_progress

    async def process_all_available(self) -> None:
        """Wait until a batch planned after this call found no new input and everything before it finished.

        Spark's ``processAllAvailable``: for tests and interactive use; with input arriving
        continuously it may never return. Returns at once when the runtime is not active.

        Raises:
            JobFailedError: a job or batch generation failed (also one that failed earlier).
            StreamingStateError: the runtime does not track a query, or the call comes from a
                listener callback (which the wait would block).
        """
        tracker = self._query()
        listener = current_listener()
        if listener is not None:
            raise StreamingStateError(f"Cannot wait for a query state from within listener {listener!r}")
        core = self._core
        core.raise_error()
        if core.state is not StreamingContextState.ACTIVE:
            return
        await wait_no_new_data(tracker, core, tracker.sequence)

    async def start_service(self, service: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """Start ``service(*args, task_status=...)`` in the runtime's task group; it is cancelled once the runtime stops.

        Returns what the service reported to ``task_status.started`` (the web UI reports its URL).

        Raises:
            StreamingStateError: not inside the runtime's ``async with``.
        """
        return await self._core.start_service(service, *args)

    def __repr__(self) -> str:
        return f"<StreamingRuntime {self.name or ''}[{self.state.value} | batch {self.batch_duration}] {self.scheduler!r}>"


def _log_write_failed(failure: BaseException) -> JobFailedError:
    """The runtime's error for a progress-log write that failed after the last trigger (async tracking's background
    writes): a restart re-runs batches this run took for durable, so the stop reports it."""
    error = JobFailedError(f"Error writing the query's progress log: {type(failure).__name__}: {failure}")
    error.__cause__ = failure
    return error


async def _start_beside_job(scheduler: JobScheduler, group: anyio.abc.TaskGroup, stop: Callable[[], Coroutine[Any, Any, None]],
                            *, graceful: bool) -> None:
    """Start ``stop`` in ``group`` and return: a stop asked for by one of the runtime's own jobs, which it waits for.

    An immediate one refuses new work first: the job that asked returns before the stop task runs, and its worker
    would take the next queued job (no job may start once an immediate stop was asked for).
    """
    if not graceful:
        scheduler.refuse_new_work()
    group.start_soon(stop)


async def _announce_start(rt: StreamingRuntime, plan: RunPlan | None, tg: anyio.abc.TaskGroup) -> None:
    """What a runtime's start does once it is ACTIVE: post its start events and, for a query, drive its triggers."""
    assert rt.start_time is not None
    await rt.listener_bus.post(StreamingStarted(rt.start_time))
    tracker = rt.tracker
    if tracker is not None and plan is not None:
        assert tracker.query_id is not None
        await rt.listener_bus.post(QueryStarted(tracker.query_id, tracker.run_id, rt.name,
                                                format_timestamp(rt.start_time.milliseconds)))
        await rt.listener_bus.wait_delivered()  # Spark calls onQueryStarted before start() returns
        if rt.trigger is not Trigger.PROCESSING_TIME:
            tg.start_soon(rt._drive_triggers, plan)  # the runtime's own task, started by its start


def _hurry(scheduler: JobScheduler) -> None:
    """An immediate stop asked for while a graceful one runs: no tick it still waits for fires, nothing queued starts."""
    scheduler.refuse_new_work()  # (the drain, if it began, ends: what is queued is left pending)
    scheduler.generator.timer.stop_now()
