"""ContinuousExecution: a continuous query's driver side, on the event loop (Spark's ``ContinuousExecution``).

It ties the parts of a run together: the resume point (``_resume``), the coordinator's TCP server
(``_server``), the epoch timer, the commit path and progress (``_commits``) and the long-running
tasks through a launcher. Its lifecycle, listener events and query surface are those of the
micro-batch runtime: both keep the ``QueryRuntime`` contract on a ``RuntimeCore``.
"""

from __future__ import annotations

import functools
import inspect
import os
import uuid
from types import TracebackType
from typing import Any, Callable, Coroutine, Mapping

import anyio
import anyio.abc
import anyio.to_thread
import attrs

from listeners import DEFAULT_LISTENER_EXIT_TIMEOUT, QueryStarted, QueryTerminated, StreamingListenerBus
from scheduler import (
    CheckpointPath,
    Clock,
    Duration,
    InvalidPipelineError,
    JobFailedError,
    Milliseconds,
    RecurringTimer,
    StreamingError,
    StreamingQueryException,
    StreamingQueryProgress,
    StreamingQueryStatus,
    StreamingStateError,
    SystemClock,
    Time,
    as_checkpoint_path,
    death_message,
    format_timestamp,
    library_logger,
    redacted_traceback,
    run_with_timeout,
)

from ..network import FrontDoor, new_token
from ..runtime import QueryRegistration, RuntimeCore, StreamingContextState
from ._commits import EpochCommitter
from ._coordinator import EpochCoordinator
from ._launchers import TaskLauncher
from ._options import ContinuousOptions
from ._plan import Continuous, ContinuousPlan
from ._protocol import task_roles
from ._resume import OpenedRun, open_run, task_specs
from ._server import CoordinatorServer
from ._task import TaskSpec

__all__ = ["ContinuousExecution", "ContinuousExecutionStatistics"]


@attrs.frozen
class ContinuousExecutionStatistics:
    """A snapshot of a run's counters (trio's ``statistics()`` convention).

    Attributes:
        epochs_committed: epochs this run committed.
        commit_ms: per committed epoch (the latest 10,000): ms from the epoch's last partition
            message arriving to its commits entry written.
        connections: task connections the coordinator accepted.
        dropped_messages: reports and commits the coordinator dropped (stale, repeated, after a stop).
        input_rows: rows read by the epochs committed in this run.
        refused_connections: connections the coordinator's front door closed before their hello
            proved the run's token, by reason (``busy``, ``timeout``, ``closed``, ``hello``).
    """

    epochs_committed: int
    commit_ms: tuple[float, ...]
    connections: int
    dropped_messages: int
    input_rows: int = 0
    refused_connections: Mapping[str, int] = attrs.field(factory=dict)



class ContinuousExecution:
    """Runs a continuous query: long-running tasks, epochs cut by the driver, committed in order.

    Use it as an async context manager, as the micro-batch runtime::

        plan = ContinuousStream(RateSource(1000, 2)).filter(keep).to(MemorySink())
        async with ContinuousExecution(plan, Continuous("1 second"), launcher=SparkTaskLauncher(lambda: sc)) as query:
            await query.start()
            ...
            await query.stop()

    Guarantees:
        * epochs commit strictly in order, each once: the sink's commit, then ``commits/<epoch>``;
        * a restart resumes after the last committed epoch (with the file sink, the last epoch the
          sink committed): at least once in general, exactly once with a replayable source and
          an exactly-once sink;
        * a graceful stop closes the epoch in progress (its rows are committed) before the tasks
          end; an immediate stop drops what was not committed and cancels the tasks' Spark job
          group (a task thread that cannot be interrupted is abandoned after ``abandon_after``);
        * every listener event posted is delivered before ``stop`` returns.
    """

    def __init__(
        self,
        plan: ContinuousPlan | Callable[[], ContinuousPlan],
        trigger: Continuous,
        *,
        launcher: TaskLauncher,
        clock: Clock | None = None,
        checkpoint_location: str | os.PathLike[str] | CheckpointPath | None = None,
        name: str | None = None,
        options: Mapping[str, object] | None = None,
        bind_host: str | None = None,
        graceful_stop_timeout: Duration | None = None,
        abandon_after: Duration = Milliseconds(2000),
        listener_bus_capacity: int = 10_000,
        listener_exit_timeout: Duration | None = DEFAULT_LISTENER_EXIT_TIMEOUT,
    ) -> None:
        """Configure the query; nothing runs until :meth:`start`.

        Args:
            plan: what to run, or a function building it at start (the DStream API's way).
            trigger: the interval between epochs.
            launcher: where the tasks run (:class:`SparkTaskLauncher` or :class:`ThreadTaskLauncher`).
            clock: the clock epochs are timed on (default: the wall clock).
            checkpoint_location: a directory for the query id and the offsets and commits logs;
                without one the query starts afresh every time.
            name: the query name.
            options: Spark's ``spark.sql.streaming.continuous.epochBacklogQueueSize``,
                ``...executorPollIntervalMs``, ``spark.sql.streaming.minBatchesToRetain`` and
                ``spark.sql.streaming.numRecentProgressUpdates``; the coordinator's network bounds
                ``spark.network.auth.rpcTimeout`` (the tasks' hello), ``spark.network.timeout``
                (a task's silence), ``spark.rpc.message.maxSize`` (a task's frame, MiB) and
                ``spark.aiodstream.network.maxUnauthenticatedConnections``.
            bind_host: the interface the coordinator listens on (default: the launcher's bind
                address, ``spark.driver.bindAddress`` or else ``spark.driver.host`` with Spark).
            graceful_stop_timeout: bound on a graceful stop (default 10 epoch intervals).
            abandon_after: how long an immediate stop waits for the tasks after cancelling them.
            listener_bus_capacity: per-listener queue bound.
            listener_exit_timeout: how long a stop lets listeners drain their queues, on
                ``clock`` (Spark's ``spark.scheduler.listenerbus.exitTimeout``); what a hung
                listener has not received by then is dropped and counted. ``None``: no bound.

        Raises:
            InvalidPipelineError: a bad option or trigger.
        """
        if not isinstance(trigger, Continuous):
            raise InvalidPipelineError(f"a continuous query needs a Continuous trigger, got {trigger!r}")
        self._plan_source = plan
        self.plan: ContinuousPlan | None = None
        self.trigger = trigger
        self.launcher = launcher
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.checkpoint_location = None if checkpoint_location is None else as_checkpoint_path(checkpoint_location)
        self.name = name
        self.options = ContinuousOptions(options)
        self._bind_host = bind_host
        self.kind, self.interval = "continuous", trigger.interval
        self.graceful_stop_timeout = graceful_stop_timeout or trigger.interval * 10
        self.abandon_after = abandon_after
        self.listener_bus = StreamingListenerBus(listener_bus_capacity, clock=self.clock, exit_timeout=listener_exit_timeout)
        self.handle: object = self
        """What the query manager hands out for this query."""
        self.run_id = uuid.uuid4()
        self.query_id: uuid.UUID | None = None
        self.coordinator: EpochCoordinator | None = None
        self._log = library_logger("aiodstream.continuous", component="ContinuousExecution", name=name)
        self._core = RuntimeCore(self.listener_bus, self.clock, kind="query", log=self._log)
        self._status = StreamingQueryStatus("Initializing StreamExecution", False, False)
        self._stopping = False
        self._tearing_down = False
        self._tasks_done: anyio.Event | None = None
        self._tasks_scope: anyio.CancelScope | None = None
        self._timer: RecurringTimer | None = None
        self._server: CoordinatorServer | None = None
        self._committer: EpochCommitter | None = None
        self._registration = QueryRegistration(self)
        self._group = f"aiodstream-continuous-{self.run_id}"
        self._token = new_token()  # travels to the tasks inside their closure; never over the coordinator's port
        self._coordinator_address: tuple[str, int] | None = None
        self._door: FrontDoor | None = None

    def set_checkpoint_location(self, checkpoint_location: str | os.PathLike[str] | CheckpointPath | None, *,
                                options: Mapping[str, object] | None = None) -> None:
        """Set (or clear) the checkpoint directory before start; ``options`` as the constructor's, when given.

        Raises:
            StreamingStateError: the query already started.
        """
        if self.state is not StreamingContextState.INITIALIZED:
            raise StreamingStateError("the checkpoint directory can only be set before the query is started")
        self.checkpoint_location = None if checkpoint_location is None else as_checkpoint_path(checkpoint_location)
        if options is not None:
            self.options = ContinuousOptions(options)

    # -- listeners (from any thread, as the query manager adds them) --

    def add_listener(self, listener: object, *, name: str | None = None, on_loop: bool | None = None) -> None:
        """Register a listener on the query's bus."""
        self._core.add_listener(listener, name=name, on_loop=on_loop)

    def remove_listener(self, listener: object) -> None:
        """Unregister a listener."""
        self._core.remove_listener(listener)

    # -- lifecycle --

    async def __aenter__(self) -> ContinuousExecution:
        await self._core.enter()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        return await self._core.exit(exc_type, exc, tb, self._stop_on_exit)

    async def _stop_on_exit(self, graceful: bool) -> None:
        await self._stop(graceful=graceful)

    @property
    def state(self) -> StreamingContextState:
        """INITIALIZED, ACTIVE or STOPPED."""
        return self._core.state

    @property
    def is_active(self) -> bool:
        """Started and not stopped."""
        return self._core.state is StreamingContextState.ACTIVE

    async def start(self) -> None:
        """Resolve the checkpoint, start the coordinator, the tasks and the epoch timer (INITIALIZED -> ACTIVE).

        Raises:
            StreamingStateError: already started or stopped, not inside ``async with``, or a copy
                of an active query's checkpoint.
            InvalidPipelineError: the plan cannot run (an unsupported operation, too few task
                slots, a checkpoint of another plan), or another active query has this name; the
                query is then STOPPED.
            CheckpointError: the checkpoint cannot be read, or another query holds it.
        """
        core = self._core
        tg = core.startable("start() needs the query's task group: use 'async with query:'")
        self._tasks_done = anyio.Event()
        try:
            plan = self._plan_source() if callable(self._plan_source) else self._plan_source
            if not isinstance(plan, ContinuousPlan):
                raise InvalidPipelineError(f"a continuous query runs a ContinuousPlan, got {plan!r}")
            self.plan = plan
            registration = self._registration
            registration.add_manager_listeners(self.listener_bus)
            await tg.start(self.listener_bus.run)
            registration.claim_name(self.name)
            # The claim is taken on the start's worker thread; the registration keeps it, so a failed start gives it up.
            claim = functools.partial(registration.claim_checkpoint, run_id=self.run_id)
            opened: OpenedRun = await anyio.to_thread.run_sync(open_run, plan, self.launcher, self.checkpoint_location, claim,
                                                               self._log, self.options.epoch_backlog_queue_size)
            resume = opened.resume
            self.query_id = resume.query_id
            registration.claim_id(resume.query_id)  # a copy of an active query's checkpoint is refused
            coordinator = self.coordinator = EpochCoordinator(resume.start_epoch, self.options.epoch_backlog_queue_size)
            coordinator.num_reader_partitions = plan.num_partitions
            coordinator.num_writer_partitions = plan.num_partitions
            self._set_status("Starting new streaming query" if resume.latest is None else
                             f"Starting new streaming query and getting offsets from latest epoch {resume.latest}")
            committer = self._committer = EpochCommitter(
                plan, opened.checkpoint, self.options, clock=self.clock, bus=self.listener_bus, query_id=resume.query_id,
                run_id=self.run_id, name=self.name, first_epoch=resume.start_epoch, first_offsets=resume.latest_offsets,
                fail=self._fail, changed=core.wake, set_status=self._set_status, stopping=lambda: self._stopping, log=self._log)
            tg.start_soon(committer.run)
            bind_host = self._bind_host or opened.bind_address
            listener = await anyio.create_tcp_listener(local_host=bind_host, local_port=0)
            port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
            self._coordinator_address = (bind_host, port)
            door = self._door = FrontDoor(self._token, task_roles(plan.num_partitions), self.options.network,
                                          name=f"continuous coordinator {self.name or self.run_id}")
            server = self._server = CoordinatorServer(coordinator, door, max_frame_bytes=self.options.max_frame_bytes,
                                                      deliver=committer.enqueue, fail=self._fail, changed=core.wake,
                                                      log=self._log)
            await tg.start(server.serve, listener)
            specs = task_specs(plan, resume, opened.driver_host, port, self._token, self.options.executor_poll_interval_ms)
            now = self.clock.now()
            committer.epoch_started(resume.start_epoch, now.milliseconds)
            tg.start_soon(self._run_tasks, specs)
            self._timer = RecurringTimer(self.clock, self.trigger.interval, self._tick, "continuous-epochs", skip_missed=True)
            await tg.start(self._timer.run, now)  # Spark's first tick fires at once
            core.raise_error()  # a task failed while the query was starting
        except BaseException:
            self._log.error("Error starting the continuous query, marking it as stopped")
            core.state = StreamingContextState.STOPPED
            try:
                with anyio.CancelScope(shield=True):
                    await self._teardown()
                    await self.listener_bus.stop()  # bounded by the bus's exit timeout
            finally:  # a teardown that fails must not keep the checkpoint claimed: a retry would be refused
                await self._registration.release()  # a start that failed is not a termination (its error was raised)
                core.mark_stopped()
            raise
        core.state = StreamingContextState.ACTIVE
        self._set_status("Running")
        try:
            await self.listener_bus.post(QueryStarted(resume.query_id, self.run_id, self.name, format_timestamp(now.milliseconds)))
            await self.listener_bus.wait_delivered()  # Spark calls onQueryStarted before start() returns
        except BaseException:  # cancelled announcing it (a slow onQueryStarted): a start that raised leaves it stopped
            with anyio.CancelScope(shield=True), anyio.CancelScope() as dropping:
                dropping.cancel()  # as a cancelled stop: teardown shielded, undelivered events dropped (no hung listener holds it)
                await self._stop(graceful=False)
            raise
        self._log.info("continuous query started", epoch=resume.start_epoch, partitions=plan.num_partitions,
                       bind_host=bind_host, port=port)

    def _tasks_ended(self) -> bool:
        # The tasks ended and every frame they sent was read (their connections are closed): nothing more can come.
        done, server = self._tasks_done, self._server
        return done is not None and done.is_set() and (server is None or server.open_connections == 0)

    # -- epochs and tasks --

    def _tick(self, time: Time) -> None:
        # The timer passes the scheduled tick time; the epoch it opens starts then, or now if the timer fired an interval
        # or more late (after a clock jump it fires once for the ticks it skipped: the epoch starts when it fires).
        coordinator, committer = self.coordinator, self._committer
        if coordinator is None or committer is None or self._stopping:
            return
        start, now = time.milliseconds, self.clock.now().milliseconds
        committer.epoch_started(coordinator.increment_epoch(), now if now - start >= self.trigger.interval.milliseconds else start)

    async def _run_tasks(self, specs: list[TaskSpec]) -> None:
        assert self._tasks_done is not None
        try:
            with anyio.CancelScope() as scope:
                self._tasks_scope = scope
                try:
                    run = self.launcher.run
                    if "failed" in inspect.signature(run).parameters:  # it reports a failure before its tasks all ended
                        await run(specs, self._group, failed=self._task_failed)  # type: ignore[call-arg]
                    else:
                        await run(specs, self._group)
                except Exception as exc:
                    if not self._tearing_down:  # a graceful stop's last epoch may fail too: not swallowed
                        self._fail(exc)
                    else:
                        self._log.debug("continuous tasks ended by the stop", error=repr(exc))
                else:
                    if not self._stopping:
                        self._fail(StreamingError("the continuous query's tasks ended while the query was running"))
        finally:
            self._tasks_done.set()
            self._core.wake()

    def _task_failed(self, error: Exception) -> None:
        """A task failed and the launcher still waits for the others: the query fails now (as in :meth:`_run_tasks`)."""
        if not self._tearing_down:
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        core = self._core
        if core.error is not None or core.state is StreamingContextState.STOPPED:
            return
        self._log.error("continuous query failed", error=str(error))
        failure = StreamingQueryException(self.query_id, self.run_id, error)
        failure.__cause__ = error
        core.error = failure
        if self.coordinator is not None:
            self.coordinator.stop_writes()
        if self._committer is not None:
            self._committer.discard()  # an epoch queued behind the failed one must not commit
        # While starting, start() itself raises the failure and tears down; once active, stop now.
        if core.task_group is not None and not core.stopping and core.state is StreamingContextState.ACTIVE:
            core.task_group.start_soon(functools.partial(self._stop, graceful=False))
        core.wake()

    # -- stop --

    async def stop(self, *, graceful: bool = False) -> None:
        """Stop the query (ACTIVE -> STOPPED); idempotent; concurrent calls wait for the first (an immediate one makes
        a graceful stop under way immediate).

        Graceful: the epoch in progress is closed and committed, then the tasks end (within ``graceful_stop_timeout``,
        after which the stop goes on as an immediate one). Immediate: nothing more is committed; the tasks end at their
        next poll of the epoch (within three ``executorPollIntervalMs``), else their job group is cancelled. Either way
        the listeners get what is queued within ``listener_exit_timeout``; after it, what a hung listener has not
        received is dropped and counted, and a callback running on its thread is abandoned. Cancelled
        (``anyio.move_on_after`` around it), the stop goes on as an immediate one for its short bookkeeping
        (shielded), drops the listener events not yet delivered, and the query is STOPPED when the cancellation
        propagates.

        Raises:
            StreamingStateError: called from a listener callback (the stop waits for the listeners).
        """
        self._core.refuse_stop_from_listener()
        await self._stop(graceful=graceful)

    async def _stop(self, *, graceful: bool) -> None:
        core = self._core
        hurried = anyio.CancelScope()  # an immediate stop asked for meanwhile ends the graceful stop's wait now
        if not await core.begin_stop(graceful=graceful, hurry=hurried.cancel):
            return
        try:
            self._stopping = True
            if graceful and self._timer is not None:  # immediate: the teardown discards the commits before anything waits
                await self._timer.stop(one_more_tick=False)
            coordinator, committer = self.coordinator, self._committer
            if graceful and core.error is None and coordinator is not None and committer is not None:
                coordinator.stopping = True
                final = coordinator.increment_epoch()  # the tasks close the epoch they are in, then end
                committer.epoch_started(final, self.clock.now().milliseconds)

                closed = functools.partial(committer.wait_last_epoch, final, self._tasks_ended, core.wait_changed,
                                           lambda: core.error is not None)
                closed_in_time = False
                with hurried:
                    closed_in_time = await run_with_timeout(self.clock, self.graceful_stop_timeout, closed)
                    if not closed_in_time:
                        self._log.warning("graceful stop timed out; stopping now", timeout_ms=self.graceful_stop_timeout.milliseconds)
                # Timed out or hurried: what is not committed stays so, as in an immediate stop.
                graceful = closed_in_time and not hurried.cancel_called
        except anyio.get_cancelled_exc_class():
            graceful = False  # cancelled from outside: what is not committed stays so, as in an immediate stop
            raise
        finally:
            try:
                with anyio.CancelScope(shield=True):
                    await self._teardown(graceful=graceful and core.error is None)
            finally:  # even after a failed teardown: the claim is given up and the query marked stopped
                await self._finish()

    async def _teardown(self, *, graceful: bool = False) -> None:
        self._tearing_down = True
        committer = self._committer
        if not graceful and committer is not None:
            committer.discard()
        if self._timer is not None:
            await self._timer.stop(one_more_tick=False)  # also when a failed start leaves it running
        if self.coordinator is not None:
            self.coordinator.stop_writes()
            self.coordinator.stopping = True  # their next poll ends the tasks, before Spark's cancel: those it reaches
            if self._tasks_done is not None and not self._tasks_done.is_set() and self._tasks_scope is not None:
                # after the coordinator closed would fail (a traceback each in Spark's log) rather than be killed
                with anyio.move_on_after(min(self.abandon_after.seconds, 3 * self.options.executor_poll_interval_ms / 1000)):
                    await self._tasks_done.wait()
        if self._tasks_done is not None and not self._tasks_done.is_set():
            self.launcher.cancel(self._group)
        if self._server is not None:
            self._server.close()  # tasks still polling find the coordinator gone and end
        if self._tasks_done is not None and not self._tasks_done.is_set() and self._tasks_scope is not None:
            with anyio.move_on_after(self.abandon_after.seconds):
                await self._tasks_done.wait()
            if not self._tasks_done.is_set():
                self._log.warning("continuous tasks did not end in time; abandoned", group=self._group)
                self._tasks_scope.cancel()
                await self._tasks_done.wait()
        if committer is not None:
            await committer.finish(self.abandon_after)
            # A sink's commit abandoned by it may still write: the checkpoint stays claimed until it ends.
            self._registration.defer_claim(committer.release_when_abandoned_call_ends, "the sink's commit its stop abandoned ends")

    async def _finish(self) -> None:
        core = self._core
        was_active = core.state is StreamingContextState.ACTIVE
        death = core.error
        try:
            with anyio.CancelScope(shield=True):
                self._set_status("Stopped" if death is None else f"Terminated with exception: {death_message(death)}")
                # After the teardown (nothing more is written), and before QueryTerminated is posted.
                await self._registration.release(terminated=was_active, death=death)
                if was_active and self.query_id is not None:
                    text = None if death is None else redacted_traceback(death)
                    await self.listener_bus.post(QueryTerminated(self.query_id, self.run_id, text, None))
            # Not shielded: bounded by the bus's exit timeout, and a cancelled stop drops what is
            # undelivered instead of waiting for a hung listener.
            await self.listener_bus.stop()
        finally:
            core.end_stop()
            self._log.info("continuous query stopped", error=None if death is None else str(death))

    # -- waiting --

    async def start_service(self, service: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """Start ``service(*args, task_status=...)`` in the query's task group; it is cancelled once the query stops.

        Returns what the service reported to ``task_status.started``.

        Raises:
            StreamingStateError: not inside the query's ``async with``.
        """
        return await self._core.start_service(service, *args)

    async def await_termination(self, timeout: Duration | None = None) -> bool:
        """Wait until the query stops (True) or ``timeout`` passes on the query's clock (False).

        Raises:
            StreamingQueryException: the query failed (also after it stopped).
            InvalidDurationError: a negative timeout.
        """
        return await self._core.await_termination(timeout, failure_ends_wait=False)

    def exception(self) -> JobFailedError | None:
        """The failure that terminated the query (a :class:`~scheduler.StreamingQueryException`), or ``None``."""
        return self._core.error

    async def process_all_available(self) -> None:
        """Wait until an epoch committed after this call read nothing new (Spark's continuous ``processAllAvailable``).

        With input arriving all the time (a rate source) it never returns.

        Raises:
            StreamingQueryException: the query failed.
        """
        # An epoch the tasks are still in at this call (they cannot have reported it yet): one that committed before,
        # or was reported before and waits behind a slow sink, may have ended before data written just now.
        coordinator = self.coordinator
        mark = coordinator.current_epoch if coordinator is not None else 0
        await self._wait_for(lambda: self._committer is not None and self._committer.no_new_data_epoch >= mark)

    async def wait_for_epoch(self, epoch: int) -> None:
        """Wait until ``epoch`` is committed (or the query stopped).

        Raises:
            StreamingQueryException: the query failed.
        """
        await self._wait_for(lambda: self.last_committed_epoch >= epoch)

    async def _wait_for(self, done: Callable[[], bool]) -> None:
        # Until done; a failure is raised, and a stop ends the wait.
        while not done():
            self._core.raise_error()
            if self.state is StreamingContextState.STOPPED:
                return
            await self._core.wait_changed()

    # -- the query surface --

    @property
    def id(self) -> uuid.UUID | None:
        """The query id (kept across restarts with a checkpoint); ``None`` before start."""
        return self.query_id

    @property
    def last_committed_epoch(self) -> int:
        """The newest epoch whose commit was performed (sink and commits log), -1 before any."""
        return -1 if self._committer is None else self._committer.last_committed_epoch

    def _set_status(self, message: str) -> None:
        self._status = StreamingQueryStatus(message, False, False)  # always false in continuous mode (Spark)

    @property
    def coordinator_address(self) -> tuple[str, int] | None:
        """Where the coordinator listens, ``(bind host, port)``, once started; the tasks connect to the launcher's driver host."""
        return self._coordinator_address

    @property
    def status(self) -> StreamingQueryStatus:
        """What the query is doing now."""
        return self._status

    @property
    def last_progress(self) -> StreamingQueryProgress | None:
        """The newest epoch's progress."""
        return None if self._committer is None else self._committer.progress.last

    @property
    def recent_progress(self) -> list[StreamingQueryProgress]:
        """Recent epochs' progress, oldest first."""
        return [] if self._committer is None else self._committer.progress.recent()

    def statistics(self) -> ContinuousExecutionStatistics:
        """Epochs committed, per-epoch commit cost, connections, dropped messages, refused connections."""
        committer, server = self._committer, self._server
        dropped = 0 if self.coordinator is None else self.coordinator.statistics().dropped_messages
        refused = {} if self._door is None else dict(self._door.statistics().refused)
        if committer is None:
            return ContinuousExecutionStatistics(0, (), 0, dropped, 0, refused)
        return ContinuousExecutionStatistics(committer.committed, tuple(committer.commit_ms),
                                             0 if server is None else server.connections, dropped, committer.input_rows,
                                             refused)

    def __repr__(self) -> str:
        epoch = "-" if self.coordinator is None else self.coordinator
        return f"<ContinuousExecution {self.name or ''}[{self.state.value} | {self.trigger!r}] {epoch}>"
