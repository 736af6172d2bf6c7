"""ContinuousExecution: a continuous query's driver side, on the event loop (Spark's ``ContinuousExecution``).

It resolves where the query resumes from its checkpoint, serves the epoch coordinator to the tasks
over TCP, advances the epoch on the injected clock, performs the coordinator's actions in order
(offsets entries, sink commits, commits entries, progress), and runs the long-running tasks through
a launcher. Its lifecycle, listener events and query surface are those of the micro-batch runtime.
"""

from __future__ import annotations

import collections
import os
import pickle
import threading
import time as _time
import uuid
from types import TracebackType
from typing import Any, Callable, Coroutine, Mapping

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import attrs

from listeners import (
    DEFAULT_LISTENER_EXIT_TIMEOUT,
    QueryProgress,
    QueryStarted,
    QueryTerminated,
    StreamingListenerBus,
    current_listener,
)
from scheduler import (
    Checkpoint,
    CheckpointClaim,
    CheckpointError,
    CheckpointPath,
    Clock,
    CommitMetadata,
    Duration,
    InvalidPipelineError,
    Milliseconds,
    OffsetSeq,
    RecurringTimer,
    SinkProgress,
    SourceProgress,
    StreamingError,
    StreamingQueryException,
    StreamingQueryProgress,
    StreamingQueryStatus,
    StreamingStateError,
    SystemClock,
    as_checkpoint_path,
    checkpoint_claims,
    concurrent_log_update_error,
    format_timestamp,
    library_logger,
    parse_long,
    redacted_traceback,
    remove_temp_files,
    run_with_timeout,
)

from ..network import (
    HELLO_TIMEOUT_KEY,
    IDLE_TIMEOUT_KEY,
    MAX_UNAUTHENTICATED_KEY,
    Admitted,
    FrontDoor,
    FrontDoorSettings,
    new_token,
)
from ..runtime import StreamingContextState, exit_task_group, query_registry, run_until_stopped
from ._coordinator import EPOCH_QUEUE_EXCEEDED, AddOffsets, BacklogExceeded, CommitEpoch, CoordinatorAction, EpochCoordinator
from ._launchers import TaskLauncher
from ._plan import Continuous, ContinuousPlan
from ._protocol import DEFAULT_MAX_FRAME_MIB, MAX_FRAME_KEY, GetCurrentEpoch, encode_frame, task_message_error, task_roles
from ._task import TaskSpec, compose

__all__ = ["ContinuousExecution", "ContinuousExecutionStatistics", "ContinuousOptions"]

BACKLOG = "spark.sql.streaming.continuous.epochBacklogQueueSize"
POLL_INTERVAL = "spark.sql.streaming.continuous.executorPollIntervalMs"
MIN_BATCHES_TO_RETAIN = "spark.sql.streaming.minBatchesToRetain"
NUM_RECENT_PROGRESS = "spark.sql.streaming.numRecentProgressUpdates"
_OPTIONS = {BACKLOG: 10_000, POLL_INTERVAL: 100, MIN_BATCHES_TO_RETAIN: 100, NUM_RECENT_PROGRESS: 100}
# The coordinator's front door and frame bound: Spark's names where Spark has the setting.
_NETWORK_OPTIONS = (HELLO_TIMEOUT_KEY, IDLE_TIMEOUT_KEY, MAX_UNAUTHENTICATED_KEY, MAX_FRAME_KEY)
_MAX_FRAME_MIB = 2047  # Spark's RpcUtils.MAX_MESSAGE_SIZE_IN_MB


class ContinuousOptions:
    """A continuous query's settings, by Spark's names (case-insensitive), with Spark's defaults.

    Attributes:
        network: the coordinator's front door (``spark.network.auth.rpcTimeout``,
            ``spark.network.timeout``, ``spark.aiodstream.network.maxUnauthenticatedConnections``).
        max_frame_bytes: the largest frame a task may send after its hello (``spark.rpc.message.maxSize``, MiB).
    """

    def __init__(self, options: Mapping[str, object] | None = None) -> None:
        """Read ``options``.

        Raises:
            InvalidPipelineError: an unknown name, or a value out of its range.
        """
        known = {k.lower(): k for k in (*_OPTIONS, *_NETWORK_OPTIONS)}
        values = dict(_OPTIONS)
        network: dict[str, object] = {}
        for key, value in (options or {}).items():
            name = known.get(str(key).lower())
            if name is None:
                raise InvalidPipelineError(f"unknown option {key!r} for a continuous query; the options are "
                                           f"{', '.join((*_OPTIONS, *_NETWORK_OPTIONS))}")
            if name in _NETWORK_OPTIONS:
                network[name] = value
                continue
            values[name] = _positive_option(name, value)
        self.epoch_backlog_queue_size = values[BACKLOG]
        self.executor_poll_interval_ms = values[POLL_INTERVAL]
        self.min_batches_to_retain = values[MIN_BATCHES_TO_RETAIN]
        self.num_recent_progress_updates = values[NUM_RECENT_PROGRESS]
        frame_mib = DEFAULT_MAX_FRAME_MIB
        if MAX_FRAME_KEY in network:
            frame_mib = _positive_option(MAX_FRAME_KEY, network.pop(MAX_FRAME_KEY))
            if frame_mib > _MAX_FRAME_MIB:
                raise InvalidPipelineError(f"{MAX_FRAME_KEY} should not be greater than {_MAX_FRAME_MIB} MB, got {frame_mib}")
        self.max_frame_bytes = frame_mib * 1024 * 1024
        try:
            self.network = FrontDoorSettings.from_conf(network)
        except ValueError as exc:
            raise InvalidPipelineError(str(exc)) from exc
        if self.executor_poll_interval_ms >= self.network.idle_timeout_s * 1000:
            raise InvalidPipelineError(
                f"{POLL_INTERVAL} ({self.executor_poll_interval_ms} ms) must be shorter than {IDLE_TIMEOUT_KEY} "
                f"({self.network.idle_timeout_s:g} s): the coordinator closes a task's connection once it was silent that "
                "long; shorten the poll interval or lengthen the timeout")


def _positive_option(name: str, value: object) -> int:
    parsed = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str):
        parsed = parse_long(value.strip())
    if parsed is None or parsed < 1:
        raise InvalidPipelineError(f"option {name} must be a positive whole number, got {value!r}")
    return parsed


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


@attrs.frozen
class _Resume:
    """Where a run starts: its first epoch, each partition's offset, and the last committed epoch (if any)."""

    query_id: uuid.UUID
    start_epoch: int
    offsets: list[Any]
    latest: int | None


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
        self.graceful_stop_timeout = graceful_stop_timeout or trigger.interval * 10
        self.abandon_after = abandon_after
        self.listener_bus = StreamingListenerBus(listener_bus_capacity, clock=self.clock, exit_timeout=listener_exit_timeout)
        self.handle: object = self
        """What the query manager hands out for this query."""
        self.run_id = uuid.uuid4()
        self.query_id: uuid.UUID | None = None
        self.coordinator: EpochCoordinator | None = None
        self._state = StreamingContextState.INITIALIZED
        self._tg: anyio.abc.TaskGroup | None = None
        self._status = StreamingQueryStatus("Initializing StreamExecution", False, False)
        self._progress: list[StreamingQueryProgress] = []
        self._error: StreamingQueryException | None = None
        self._stopping = False
        self._discard_actions = False  # an immediate stop: what is not committed stays so
        self._tearing_down = False
        self._open_connections = 0
        self._stop_done: anyio.Event | None = None
        self._changed = anyio.Event()
        self._tasks_done: anyio.Event | None = None
        self._actions_done: anyio.Event | None = None
        self._server_scope: anyio.CancelScope | None = None
        self._tasks_scope: anyio.CancelScope | None = None
        self._timer: RecurringTimer | None = None
        self._actions_send: Any = None
        self._checkpoint: Checkpoint | None = None
        self._checkpoint_claim: CheckpointClaim | None = None
        self._group = f"aiodstream-continuous-{self.run_id}"
        self._token = new_token()  # travels to the tasks inside their closure; never over the coordinator's port
        self._task_partitions: set[int] = set()  # partitions with an open task connection
        self._coordinator_address: tuple[str, int] | None = None
        self._door: FrontDoor | None = None
        self._epoch_started: dict[int, int] = {}
        self._epoch_offsets: dict[int, list[str]] = {}
        self._epoch_walcommit: dict[int, int] = {}
        self._commit_ms: collections.deque[float] = collections.deque(maxlen=10_000)
        self._complete_at: dict[int, float] = {}  # epoch -> when its last report or commit arrived
        self._committed = 0
        self._input_rows = 0
        self.last_committed_epoch = -1
        """The newest epoch whose commit was performed (sink and commits log), -1 before any."""
        self._no_new_data_at = -1  # the commit count at which an epoch last committed with no new data
        self._connections = 0
        self._loop_token: anyio.lowlevel.EventLoopToken | None = None
        self._loop_thread: int | None = None
        self._registered = False
        self._log = library_logger("aiodstream.continuous", component="ContinuousExecution", name=name)

    def set_checkpoint_location(self, checkpoint_location: str | os.PathLike[str] | CheckpointPath | None, *,
                                options: Mapping[str, object] | None = None) -> None:
        """Set (or clear) the checkpoint directory before start; ``options`` as the constructor's, when given.

        Raises:
            StreamingStateError: the query already started.
        """
        if self._state is not StreamingContextState.INITIALIZED:
            raise StreamingStateError("the checkpoint directory can only be set before the query is started")
        self.checkpoint_location = None if checkpoint_location is None else as_checkpoint_path(checkpoint_location)
        if options is not None:
            self.options = ContinuousOptions(options)

    # -- listeners (from any thread, as the query manager adds them) --

    def add_listener(self, listener: object, *, name: str | None = None, on_loop: bool | None = None) -> None:
        """Register a listener on the query's bus."""
        self._on_loop(lambda: self.listener_bus.add_listener(listener, name=name, on_loop=on_loop))

    def remove_listener(self, listener: object) -> None:
        """Unregister a listener."""
        self._on_loop(lambda: self.listener_bus.remove_listener(listener))

    def _on_loop(self, action: Callable[[], None]) -> None:
        token = self._loop_token
        if token is None or threading.get_ident() == self._loop_thread:
            action()
        else:
            anyio.from_thread.run_sync(action, token=token)

    # -- lifecycle --

    async def __aenter__(self) -> ContinuousExecution:
        if self._tg is not None:
            raise StreamingStateError("this query is already entered; a query has one home")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._loop_token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        assert self._tg is not None
        try:
            if self._stop_done is not None and not self._stop_done.is_set():
                await self._stop_done.wait()  # a stop is under way elsewhere
            elif self._state is StreamingContextState.ACTIVE:
                # A normal exit stops gracefully; an error or a cancellation in the host stops now,
                # shielded so the bookkeeping finishes.
                with anyio.CancelScope(shield=exc is not None):
                    await self._stop(graceful=exc is None)
            elif self._state is StreamingContextState.INITIALIZED:
                await self._stop(graceful=False)
        finally:
            tg, self._tg = self._tg, None
            result = await exit_task_group(tg, exc_type, exc, tb)
        return result

    @property
    def state(self) -> StreamingContextState:
        """INITIALIZED, ACTIVE or STOPPED."""
        return self._state

    @property
    def is_active(self) -> bool:
        """Started and not stopped."""
        return self._state is StreamingContextState.ACTIVE

    async def start(self) -> None:
        """Resolve the checkpoint, start the coordinator, the tasks and the epoch timer (INITIALIZED -> ACTIVE).

        Raises:
            StreamingStateError: already started or stopped, or not inside ``async with``.
            InvalidPipelineError: the plan cannot run (an unsupported operation, too few task
                slots, a checkpoint of another plan); the query is then STOPPED.
            CheckpointError: the checkpoint cannot be read.
        """
        if self._state is StreamingContextState.ACTIVE:
            raise StreamingStateError("StreamingContext has already been started")
        if self._state is StreamingContextState.STOPPED:
            raise StreamingStateError("StreamingContext has already been stopped")
        if self._tg is None:
            raise StreamingStateError("start() needs the query's task group: use 'async with query:'")
        tg = self._tg
        self._tasks_done, self._actions_done = anyio.Event(), anyio.Event()
        try:
            plan = self._plan_source() if callable(self._plan_source) else self._plan_source
            if not isinstance(plan, ContinuousPlan):
                raise InvalidPipelineError(f"a continuous query runs a ContinuousPlan, got {plan!r}")
            self.plan = plan
            for listener, lname in query_registry.listeners():
                if listener not in self.listener_bus.listeners:
                    self.listener_bus.add_listener(listener, name=lname)
            await tg.start(self._run_bus)
            resume, host, bind = await anyio.to_thread.run_sync(self._open, plan)
            self.query_id = resume.query_id
            self.last_committed_epoch = resume.start_epoch - 1
            other = query_registry.claim(self, resume.query_id)
            if other is not None:
                raise StreamingStateError(f"cannot start query {resume.query_id}: it is already active in this process ({other!r})")
            self._registered = True
            self.coordinator = EpochCoordinator(resume.start_epoch, self.options.epoch_backlog_queue_size)
            self.coordinator.num_reader_partitions = plan.num_partitions
            self.coordinator.num_writer_partitions = plan.num_partitions
            self._set_status("Starting new streaming query" if resume.latest is None else
                             f"Starting new streaming query and getting offsets from latest epoch {resume.latest}")
            # Two actions per epoch (its offsets entry, its commit); see _enqueue.
            send, receive = anyio.create_memory_object_stream[CoordinatorAction](2 * self.options.epoch_backlog_queue_size)
            self._actions_send = send
            tg.start_soon(self._perform_actions, receive)
            bind_host = self._bind_host or bind
            listener = await anyio.create_tcp_listener(local_host=bind_host, local_port=0)
            port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
            self._coordinator_address = (bind_host, port)
            door = self._door = FrontDoor(self._token, task_roles(plan.num_partitions), self.options.network,
                                          name=f"continuous coordinator {self.name or self.run_id}")
            await tg.start(self._serve, listener, door)
            specs = self._specs(plan, resume, host, port)
            now = self.clock.now()
            self._epoch_started[resume.start_epoch] = now.milliseconds
            tg.start_soon(self._run_tasks, specs)
            self._timer = RecurringTimer(self.clock, self.trigger.interval, self._tick, "continuous-epochs")
            await tg.start(self._timer.run, now)  # Spark's first tick fires at once
            if self._error is not None:  # a task failed while the query was starting
                raise self._error.with_traceback(None)
        except BaseException:
            self._log.error("Error starting the continuous query, marking it as stopped")
            self._state = StreamingContextState.STOPPED
            try:
                with anyio.CancelScope(shield=True):
                    await self._teardown()
                    await self.listener_bus.stop()  # bounded by the bus's exit timeout
            finally:  # a teardown that fails must not keep the checkpoint claimed: a retry would be refused
                if self._registered:
                    query_registry.forget(self)
                await self._release_checkpoint()
                self._wake()
            raise
        self._state = StreamingContextState.ACTIVE
        self._set_status("Running")
        assert self.query_id is not None
        await self.listener_bus.post(QueryStarted(self.query_id, self.run_id, self.name, format_timestamp(now.milliseconds)))
        await self.listener_bus.wait_delivered()  # Spark calls onQueryStarted before start() returns
        self._log.info("continuous query started", epoch=resume.start_epoch, partitions=plan.num_partitions,
                       bind_host=bind_host, port=port)

    def _open(self, plan: ContinuousPlan) -> tuple[_Resume, str, str]:
        """Blocking: the launcher's checks and addresses, the checkpoint's resume point, the sink's preparation."""
        self.launcher.check(plan.num_partitions)
        host = self.launcher.driver_host()
        bind = self.launcher.bind_address()
        for source in plan.sources:
            source.check()
        if self.checkpoint_location is None:
            earlier = plan.sink.latest_committed_epoch()
            if earlier is not None:
                raise InvalidPipelineError(
                    f"{plan.sink.description()} holds the epochs of an earlier run (up to {earlier}), and this query has no "
                    "checkpoint to continue from: pass the checkpoint location of that run, or write to an empty directory")
            resume = _Resume(uuid.uuid4(), 0, self._initial_offsets(plan), None)
        else:
            # Claimed before anything in the directory changes: the resume drops uncommitted entries
            # and temporary files, which must not happen under a query writing there.
            self._checkpoint_claim = checkpoint_claims.claim(self.checkpoint_location, self, run_id=self.run_id)
            resume = self._resume(plan, Checkpoint(self.checkpoint_location))
        plan.sink.prepare(resume.start_epoch - 1)
        return resume, host, bind

    async def _release_checkpoint(self) -> None:
        # Giving up a Hadoop lease is file I/O through py4j: off the loop, and finished even when cancelled.
        claim, self._checkpoint_claim = self._checkpoint_claim, None
        if claim is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(claim.release)

    @staticmethod
    def _initial_offsets(plan: ContinuousPlan) -> list[Any]:
        return [s.initial_offset(p) for s in plan.sources for p in range(s.num_partitions)]

    def _resume(self, plan: ContinuousPlan, checkpoint: Checkpoint) -> _Resume:
        claim = self._checkpoint_claim
        assert claim is not None and claim.held
        root = checkpoint.root
        query_id = checkpoint.read_query_id() or checkpoint.create_query_id()
        if claim.guarantee != "detect":  # without a hold across processes they may be another writer's
            for directory in (checkpoint.offsets.directory, checkpoint.commits.directory, root):
                remove_temp_files(directory)
        self._checkpoint = checkpoint
        latest_commit = checkpoint.commits.get_latest()
        latest = None if latest_commit is None else latest_commit[0]
        # An exactly-once sink may have committed epochs the commits log has not recorded (a crash
        # between the two writes): those epochs are done, so record them (their offsets are logged
        # before any commit).
        sink_latest = plan.sink.latest_committed_epoch()
        if sink_latest is not None and (latest is None or sink_latest > latest):
            for epoch in range(0 if latest is None else latest + 1, sink_latest + 1):
                if checkpoint.offsets.get(epoch) is None:
                    raise CheckpointError(f"the sink committed epoch {epoch} but the checkpoint has no offsets for it; "
                                          "the sink's output and this checkpoint belong to different queries",
                                          path=str(checkpoint.offsets.path_of(epoch)))
                if not checkpoint.commits.add(epoch, CommitMetadata(0)):
                    raise concurrent_log_update_error(epoch, checkpoint.commits.path_of(epoch))
            latest = sink_latest
        # Offsets logged for epochs after the last commit belong to a run that died before committing
        # them; this run cuts its epochs anew from the last commit, so they are dropped (Spark keeps
        # them and ignores them, which would let a later restart resume from a stale entry).
        stale = [e for e in checkpoint.offsets.batch_ids() if latest is None or e > latest]
        for epoch in reversed(stale):
            checkpoint.offsets.path_of(epoch).delete()
        if stale:
            self._log.info("uncommitted epochs of the previous run dropped", epochs=stale)
        if latest is None:
            return _Resume(query_id, 0, self._initial_offsets(plan), None)
        entry = checkpoint.offsets.get(latest)
        if entry is None:
            raise CheckpointError(f"epoch {latest} is committed but its offsets entry is missing", path=str(checkpoint.root))
        if len(entry.offsets) != len(plan.sources):
            raise InvalidPipelineError(
                f"There are [{len(entry.offsets)}] sources in the checkpoint offsets and now there are "
                f"[{len(plan.sources)}] sources requested by the query. Cannot continue.")
        offsets: list[Any] = []
        for source, line in zip(plan.sources, entry.offsets, strict=True):
            if line is None:
                offsets.extend(source.initial_offset(p) for p in range(source.num_partitions))
            else:
                offsets.extend(source.split_offsets(line))
        self._epoch_offsets[latest] = [o if o is not None else "-" for o in entry.offsets]
        return _Resume(query_id, latest + 1, offsets, latest)

    def _specs(self, plan: ContinuousPlan, resume: _Resume, host: str, port: int) -> list[TaskSpec]:
        specs = []
        partition = 0
        for branch in plan.branches:
            operations = compose(branch.operations)
            for local in range(branch.source.num_partitions):
                specs.append(TaskSpec(host, port, self._token, partition, branch.source, local, resume.offsets[partition],
                                      resume.start_epoch, operations, plan.sink, self.options.executor_poll_interval_ms))
                partition += 1
        return specs

    async def _run_bus(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await self.listener_bus.run(task_status=task_status)

    # -- epochs --

    def _tick(self, time: Any) -> None:
        # The timer passes the scheduled tick time; the epoch it opens starts then.
        coordinator = self.coordinator
        if coordinator is None or self._stopping:
            return
        epoch = coordinator.increment_epoch()
        self._epoch_started[epoch] = time.milliseconds

    # -- the coordinator's server --

    async def _serve(self, listener: anyio.abc.Listener[anyio.abc.SocketStream], door: FrontDoor, *,
                     task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.CancelScope() as scope:
            self._server_scope = scope
            async with listener, anyio.create_task_group() as tg:
                task_status.started()
                # The front door admits only connections whose hello proved this run's token;
                # whatever a stranger sends ends in that connection, never in this task group.
                await listener.serve(door.handler(self._connection), task_group=tg)

    async def _connection(self, admitted: Admitted) -> None:
        partition = admitted.hello.fields["partition"]
        if partition in self._task_partitions:
            self._log.warning("a second connection for a task's partition was refused", partition=partition)
            return
        self._task_partitions.add(partition)
        self._connections += 1
        self._open_connections += 1
        try:
            await self._serve_task(admitted, partition)
        finally:
            self._task_partitions.discard(partition)
            self._open_connections -= 1
            self._wake()

    async def _serve_task(self, task: Admitted, partition: int) -> None:
        """Answer one task's asks and feed its reports and commits to the coordinator, until it disconnects.

        A frame that cannot be read, or a message this task may not send (a driver-only message, another
        partition's report, an epoch it cannot have closed), closes this connection and nothing else.
        """
        coordinator = self.coordinator
        assert coordinator is not None
        max_frame = self.options.max_frame_bytes
        try:
            while True:
                try:
                    # Unpickled only behind the front door: the peer proved this run's token, so it is one of our tasks.
                    message = pickle.loads(await task.read_frame(max_frame))
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    return  # the task ended (or the stop closed the coordinator)
                except TimeoutError:
                    self._log.warning("a task sent nothing within spark.network.timeout; its connection was closed",
                                      partition=partition, timeout_s=task.idle_timeout_s)
                    return
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                    return
                except Exception as exc:  # too large, or anything unpickling raised: one connection's fault
                    self._log.warning("a task sent an unreadable frame; its connection was closed", partition=partition,
                                      error=f"{exc!r:.300}")
                    return
                error = task_message_error(message, partition, coordinator.current_epoch)
                if error is not None:
                    self._log.warning("a task sent a message it may not send; its connection was closed",
                                      partition=partition, error=error)
                    return
                if isinstance(message, GetCurrentEpoch):  # the hot path: every poll of every task
                    await task.send(encode_frame(pickle.dumps(coordinator.current())))
                    continue
                arrived = _time.perf_counter()  # only to measure the commit cost, never for scheduling
                _, actions = coordinator.handle(message)
                self._enqueue(actions, arrived)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            return  # the reply could not be sent: the task is gone
        except Exception as exc:  # a fault of ours, not the peer's: the query fails with it, the host's task group never sees it
            self._fail(exc)

    def _enqueue(self, actions: list[CoordinatorAction], arrived: float) -> None:
        """Queue the coordinator's actions for the performer, in order; never waits.

        The queue holds at most ``epochBacklogQueueSize`` epochs (two actions each): a sink slower
        than the epochs fails the query with Spark's message for the epoch queue rather than
        growing without bound. Waiting for room instead would stall every task's polls behind the
        sink. The coordinator's own backlog failure is not queued: it fails the query at once,
        even while a stuck sink holds the performer.
        """
        send = self._actions_send
        for action in actions:
            if isinstance(action, BacklogExceeded):  # at once: not behind a sink that may be what is stuck
                self._fail(IllegalStateError(action.message))
                return
            if isinstance(action, CommitEpoch):  # the epoch became complete now
                self._complete_at[action.epoch] = arrived
            try:
                send.send_nowait(action)
            except anyio.WouldBlock:  # _fail stops the coordinator's writes: nothing more is queued
                queued = send.statistics().current_buffer_used
                self._fail(IllegalStateError(
                    f"{EPOCH_QUEUE_EXCEEDED}: {queued} actions of complete epochs wait for the sink's commit and the "
                    f"checkpoint's writes ({BACKLOG} is {self.options.epoch_backlog_queue_size} epochs); make the sink "
                    "keep up with the trigger interval, lengthen the interval, or raise the setting"))
                return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the run is tearing down: nothing more is performed

    # -- the coordinator's actions, in order --

    async def _perform_actions(self, receive: Any) -> None:
        assert self._actions_done is not None
        try:
            async with receive:
                async for action in receive:
                    # After a failure or an immediate stop nothing more is written: an epoch queued
                    # behind a failed one must not commit (a restart would skip the failed one).
                    if self._error is not None or self._discard_actions:
                        continue
                    try:
                        await self._perform(action)
                    except Exception as exc:
                        self._fail(exc)
        finally:
            self._actions_done.set()

    async def _perform(self, action: CoordinatorAction) -> None:
        plan = self.plan
        assert plan is not None
        if isinstance(action, AddOffsets):
            merged = self._merge(plan, action.offsets)
            started = _time.perf_counter()
            if self._checkpoint is not None:
                checkpoint = self._checkpoint
                if not await anyio.to_thread.run_sync(checkpoint.offsets.add, action.epoch, OffsetSeq(tuple(merged))):
                    # The start dropped every entry after the last commit: another writer made this one.
                    raise concurrent_log_update_error(action.epoch, checkpoint.offsets.path_of(action.epoch))
            self._epoch_walcommit[action.epoch] = round((_time.perf_counter() - started) * 1000)
            self._epoch_offsets[action.epoch] = merged
            return
        assert isinstance(action, CommitEpoch)
        await self._commit(plan, action)

    def _merge(self, plan: ContinuousPlan, offsets: Mapping[int, Any]) -> list[str]:
        merged = []
        partition = 0
        for source in plan.sources:
            merged.append(source.merge_offsets([offsets[p] for p in range(partition, partition + source.num_partitions)]))
            partition += source.num_partitions
        return merged

    async def _commit(self, plan: ContinuousPlan, action: CommitEpoch) -> None:
        epoch = action.epoch
        self._set_status(f"Committing epoch {epoch}")
        arrival = self._complete_at.pop(epoch, None)
        checkpoint, retain = self._checkpoint, self.options.min_batches_to_retain

        def commit() -> tuple[float, float]:
            started = _time.perf_counter()
            plan.sink.commit_epoch(epoch, action.messages)  # the sink first: a crash between keeps the data
            sink_done = _time.perf_counter()
            if checkpoint is not None:
                if not checkpoint.commits.add(epoch, CommitMetadata(0)):
                    raise concurrent_log_update_error(epoch, checkpoint.commits.path_of(epoch))
                if retain <= epoch:
                    threshold = epoch + 1 - retain
                    checkpoint.offsets.purge(threshold)
                    checkpoint.commits.purge(threshold)
            return (sink_done - started) * 1000, (_time.perf_counter() - sink_done) * 1000

        sink_ms, log_ms = await anyio.to_thread.run_sync(commit)
        self._commit_ms.append((_time.perf_counter() - arrival) * 1000 if arrival is not None else sink_ms + log_ms)
        self._committed += 1
        self._input_rows += sum(action.rows.values())
        self.last_committed_epoch = epoch
        if self._epoch_offsets.get(epoch - 1) == self._epoch_offsets.get(epoch):  # Spark's noNewData
            self._no_new_data_at = self._committed
        await self._report(plan, action, round(sink_ms), round(log_ms))
        if not self._stopping:
            self._set_status("Running")
        self._wake()

    async def _report(self, plan: ContinuousPlan, action: CommitEpoch, sink_ms: int, log_ms: int) -> None:
        epoch = action.epoch
        assert self.query_id is not None
        end_ms = self.clock.now().milliseconds
        started = self._epoch_started.pop(epoch, end_ms)
        length_s = max(1, end_ms - started) / 1000
        sources = []
        partition = 0
        start_offsets = self._epoch_offsets.get(epoch - 1)
        end_offsets = self._epoch_offsets.get(epoch, [])
        for index, source in enumerate(plan.sources):
            rows = sum(action.rows.get(p, 0) for p in range(partition, partition + source.num_partitions))
            partition += source.num_partitions
            end = end_offsets[index] if index < len(end_offsets) else None
            sources.append(SourceProgress(repr(source), None if start_offsets is None else start_offsets[index], end, end,
                                          rows, rows / length_s, rows / length_s))
        progress = StreamingQueryProgress(
            self.query_id, self.run_id, self.name, format_timestamp(started), epoch, end_ms - started,
            {"walCommit": self._epoch_walcommit.pop(epoch, 0), "addBatch": sink_ms, "commitOffsets": log_ms,
             "triggerExecution": end_ms - started},
            tuple(sources), SinkProgress(plan.sink.description(), -1))
        for old in [e for e in self._epoch_offsets if e < epoch - 1]:
            del self._epoch_offsets[old]
        self._progress.append(progress)
        while len(self._progress) >= self.options.num_recent_progress_updates:
            self._progress.pop(0)
        self._log.info("epoch committed", epoch=epoch, rows=progress.num_input_rows, commit_ms=round(self._commit_ms[-1], 3))
        await self.listener_bus.post(QueryProgress(progress))

    # -- the tasks --

    async def _run_tasks(self, specs: list[TaskSpec]) -> None:
        assert self._tasks_done is not None
        try:
            with anyio.CancelScope() as scope:
                self._tasks_scope = scope
                try:
                    await self.launcher.run(specs, self._group)
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
            self._wake()

    def _fail(self, error: BaseException) -> None:
        if self._error is not None or self._state is StreamingContextState.STOPPED:
            return
        self._log.error("continuous query failed", error=str(error))
        self._error = StreamingQueryException(self.query_id, self.run_id, error)
        self._error.__cause__ = error
        if self.coordinator is not None:
            self.coordinator.stop_writes()
        # While starting, start() itself raises the failure and tears down; once active, stop now.
        if self._tg is not None and self._stop_done is None and self._state is StreamingContextState.ACTIVE:
            self._tg.start_soon(self._stop_now)
        self._wake()

    async def _stop_now(self) -> None:
        await self._stop(graceful=False)

    # -- stop --

    async def stop(self, *, graceful: bool = False) -> None:
        """Stop the query (ACTIVE -> STOPPED); idempotent; concurrent calls wait for the first.

        Graceful: the epoch in progress is closed and committed, then the tasks end (within
        ``graceful_stop_timeout``, after which the stop goes on as an immediate one). Immediate:
        nothing more is committed, the tasks' job group is cancelled. Either way the listeners
        get what is queued within ``listener_exit_timeout``; after it, what a hung listener has
        not received is dropped and counted, and a callback running on its thread is abandoned.

        Cancelled (``anyio.move_on_after`` around it), the stop goes on as an immediate one for
        its short bookkeeping (shielded), drops the listener events not yet delivered, and the
        query is STOPPED when the cancellation propagates.

        Raises:
            StreamingStateError: called from a listener callback (the stop waits for the listeners).
        """
        listener = current_listener()
        if listener is not None:
            raise StreamingStateError(f"Cannot stop StreamingContext within listener bus thread. (called from listener {listener!r})")
        await self._stop(graceful=graceful)

    async def _stop(self, *, graceful: bool) -> None:
        if self._state is StreamingContextState.INITIALIZED:
            self._state = StreamingContextState.STOPPED
            self.listener_bus.close()
            self._wake()
            return
        if self._stop_done is not None:
            await self._stop_done.wait()
            return
        if self._state is StreamingContextState.STOPPED:
            return
        self._stop_done = anyio.Event()
        try:
            self._stopping = True
            if self._timer is not None:
                await self._timer.stop(one_more_tick=False)
            coordinator = self.coordinator
            if graceful and self._error is None and coordinator is not None:
                coordinator.stopping = True
                final = coordinator.increment_epoch()  # the tasks close the epoch they are in, then end
                self._epoch_started[final] = self.clock.now().milliseconds

                async def closed() -> None:
                    while self.last_committed_epoch < final - 1 and self._error is None:
                        assert self._tasks_done is not None
                        # The tasks ended and every frame they sent was read (their connections are
                        # closed) and performed: nothing more can come.
                        if self._tasks_done.is_set() and self._open_connections == 0 and self._actions_done_or_idle():
                            return
                        await self._wait_changed()

                if not await run_with_timeout(self.clock, self.graceful_stop_timeout, closed):
                    self._log.warning("graceful stop timed out; stopping now", timeout_ms=self.graceful_stop_timeout.milliseconds)
        except anyio.get_cancelled_exc_class():
            graceful = False  # cancelled from outside: what is not committed stays so, as in an immediate stop
            raise
        finally:
            try:
                with anyio.CancelScope(shield=True):
                    await self._teardown(graceful=graceful and self._error is None)
            finally:  # even after a failed teardown: the claim is given up and the query marked stopped
                await self._finish()

    def _actions_done_or_idle(self) -> bool:
        return self._actions_send is None or self._actions_send.statistics().current_buffer_used == 0

    async def _teardown(self, *, graceful: bool = False) -> None:
        self._tearing_down = True
        if not graceful:
            self._discard_actions = True
        if self._timer is not None:
            await self._timer.stop(one_more_tick=False)  # also when a failed start leaves it running
        if self.coordinator is not None:
            self.coordinator.stop_writes()
        if self._tasks_done is not None and not self._tasks_done.is_set():
            self.launcher.cancel(self._group)
        if self._server_scope is not None:
            self._server_scope.cancel()  # tasks still polling find the coordinator gone and end
        if self._tasks_done is not None and not self._tasks_done.is_set() and self._tasks_scope is not None:
            with anyio.move_on_after(self.abandon_after.seconds):
                await self._tasks_done.wait()
            if not self._tasks_done.is_set():
                self._log.warning("continuous tasks did not end in time; abandoned", group=self._group)
                self._tasks_scope.cancel()
                await self._tasks_done.wait()
        if self._actions_send is not None:
            self._actions_send.close()
            assert self._actions_done is not None
            await self._actions_done.wait()

    async def _finish(self) -> None:
        was_active = self._state is StreamingContextState.ACTIVE
        death = self._error
        try:
            with anyio.CancelScope(shield=True):
                self._set_status("Stopped" if death is None else f"Terminated with exception: {death}")
                if self._registered:
                    if was_active:
                        query_registry.terminated(self, death)
                    else:
                        query_registry.forget(self)
                    self._registered = False
                await self._release_checkpoint()  # after the teardown: nothing more is written
                if was_active and self.query_id is not None:
                    text = None if death is None else redacted_traceback(death)
                    await self.listener_bus.post(QueryTerminated(self.query_id, self.run_id, text, None))
            # Not shielded: bounded by the bus's exit timeout, and a cancelled stop drops what is
            # undelivered instead of waiting for a hung listener.
            await self.listener_bus.stop()
        finally:
            self._state = StreamingContextState.STOPPED
            assert self._stop_done is not None
            self._stop_done.set()
            self._wake()
            self._log.info("continuous query stopped", error=None if death is None else str(death))

    # -- waiting --

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _wait_changed(self) -> None:
        await self._changed.wait()

    async def _wait_stopped(self) -> None:
        while self._state is not StreamingContextState.STOPPED or (self._stop_done is not None and not self._stop_done.is_set()):
            await self._wait_changed()

    async def start_service(self, service: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """Start ``service(*args, task_status=...)`` in the query's task group; it is cancelled once the query stops.

        Returns what the service reported to ``task_status.started``.

        Raises:
            StreamingStateError: not inside the query's ``async with``.
        """
        if self._tg is None:
            raise StreamingStateError("start_service() needs the query's task group: use 'async with query:'")
        return await self._tg.start(run_until_stopped, service, args, self._wait_stopped)

    async def await_termination(self, timeout: Duration | None = None) -> bool:
        """Wait until the query stops (True) or ``timeout`` passes on the query's clock (False).

        Raises:
            StreamingQueryException: the query failed (also after it stopped).
        """
        done = await run_with_timeout(self.clock, timeout, self._wait_stopped)
        if self._error is not None:
            raise self._error.with_traceback(None)
        return done

    def exception(self) -> StreamingQueryException | None:
        """The failure that terminated the query, or ``None``."""
        return self._error

    async def process_all_available(self) -> None:
        """Wait until an epoch committed after this call read nothing new (Spark's continuous ``processAllAvailable``).

        With input arriving all the time (a rate source) it never returns.

        Raises:
            StreamingQueryException: the query failed.
        """
        mark = self._committed
        while not (self._no_new_data_at > mark):
            if self._error is not None:
                raise self._error.with_traceback(None)
            if self._state is StreamingContextState.STOPPED:
                return
            await self._wait_changed()

    async def wait_for_epoch(self, epoch: int) -> None:
        """Wait until ``epoch`` is committed (or the query stopped).

        Raises:
            StreamingQueryException: the query failed.
        """
        while self.last_committed_epoch < epoch:
            if self._error is not None:
                raise self._error.with_traceback(None)
            if self._state is StreamingContextState.STOPPED:
                return
            await self._wait_changed()

    # -- the query surface --

    @property
    def id(self) -> uuid.UUID | None:
        """The query id (kept across restarts with a checkpoint)."""
        return self.query_id

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
        return self._progress[-1] if self._progress else None

    @property
    def recent_progress(self) -> list[StreamingQueryProgress]:
        """Recent epochs' progress, oldest first."""
        return list(self._progress)

    def statistics(self) -> ContinuousExecutionStatistics:
        """Epochs committed, per-epoch commit cost, connections, dropped messages, refused connections."""
        dropped = 0 if self.coordinator is None else self.coordinator.statistics().dropped_messages
        refused = {} if self._door is None else dict(self._door.statistics().refused)
        return ContinuousExecutionStatistics(self._committed, tuple(self._commit_ms), self._connections, dropped, self._input_rows,
                                             refused)

    def __repr__(self) -> str:
        epoch = "-" if self.coordinator is None else self.coordinator
        return f"<ContinuousExecution {self.name or ''}[{self._state.value} | {self.trigger!r}] {epoch}>"


class IllegalStateError(StreamingError, RuntimeError):
    """Spark's ``IllegalStateException``, which stops a continuous query whose epoch backlog overflowed."""
