"""SocketInputDStream: UTF-8 lines from a TCP server, received on the driver or by a Spark task (Spark's ``SocketInputDStream``).

On the driver the receiver is a task on the context's event loop; on an executor it is a
long-running Spark task (:mod:`._executor_receiver`) that writes blocks into the checkpoint's
write-ahead log and reports them over an authenticated control channel (:mod:`._control`).
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.abc
import anyio.to_thread
from anyio import get_cancelled_exc_class

from listeners import ReceiverError, ReceiverStarted
from scheduler import Duration, InvalidPipelineError, Offset, StreamInputInfo, Time, redact_uri

from ..dstream import StreamEnvironment
from ..network import (
    IDLE_TIMEOUT_KEY,
    MAX_LINE_LENGTH_KEY,
    Admitted,
    FrameTooLargeError,
    FrontDoor,
    FrontDoorSettings,
    LineDecoder,
    LineTooLongError,
    max_line_length,
    new_token,
)
from ..spark import driver_bind_address, driver_host, executor_of_task, run_in_job_group
from ._control import MAX_REPORT_BYTES, ReceiverProtocolError, Report, parse_report, receiver_roles
from ._executor_receiver import ReceiverTaskSpec, read_block_files, run_receiver_tasks
from ._receiver import ReceiverInputDStream, ReceiverOutcome

if TYPE_CHECKING:
    from pyspark import RDD  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["EXECUTOR_LOOKUP_TIMEOUT_S", "EXECUTOR_STOP_TIMEOUT_S", "RECEIVER_PLACEMENT_KEY", "SocketInputDStream"]

RECEIVER_PLACEMENT_KEY = "spark.aiodstream.receiver.placement"
"""Where socket receivers run: ``driver`` (default: a task on the context's event loop) or
``executor`` (a long-running Spark task writing blocks into the checkpoint's write-ahead log)."""

EXECUTOR_STOP_TIMEOUT_S = 10.0
"""How long a stop waits for a receiver task on an executor to write and report its last block."""

_CONNECTION_ERRORS = (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError,
                      OSError)
"""How the control connection to a receiver task breaks."""

EXECUTOR_LOOKUP_TIMEOUT_S = 5.0
"""How long the driver looks for a receiver task's executor in Spark's status store before posting ``ReceiverStarted``."""


class _Session:
    """One launch's control connection: whether a task took it, how it ended, and when."""

    def __init__(self) -> None:
        self.taken = False
        self.outcome = ReceiverOutcome(True, "The receiver's Spark task ended")
        self.ended = anyio.Event()



class SocketInputDStream(ReceiverInputDStream):
    """UTF-8 text lines from a TCP server (pyspark's ``socketTextStream``).

    Connects to ``host:port`` and stores each line (see :class:`LineDecoder`). When the
    connection fails, breaks or reaches end of stream, the receiver reconnects after the restart
    delay, as Spark's ``SocketReceiver`` does; failures are posted as ``ReceiverError``.
    """

    _receiver_class = "SocketReceiver"

    def __init__(self, env: StreamEnvironment, host: str, port: int, *, restart_delay: Duration | None,
                 max_buffered_records: int, placement: str | None = None) -> None:
        """A stream of lines read from ``host:port``; ``placement`` ``None`` reads :data:`RECEIVER_PLACEMENT_KEY`.

        Raises:
            ValueError: a bad port or placement.
        """
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be an int from 1 to 65535, got {port!r}")
        super().__init__(env, restart_delay=restart_delay, max_buffered_records=max_buffered_records)
        self.host = host
        self.port = port
        if placement is None:
            placement = env.spark.settings().get(RECEIVER_PLACEMENT_KEY, "driver") or "driver"
        placement = placement.strip().lower()
        if placement not in ("driver", "executor"):
            raise ValueError(f"a receiver's placement must be 'driver' or 'executor', got {placement!r} "
                             f"(socketTextStream(placement=...) or {RECEIVER_PLACEMENT_KEY})")
        self.placement = placement
        if placement == "executor":
            env.spark.require_jvm("a receiver on an executor (placement='executor')",
                                  "use placement='driver': the lines are received here and sent with each batch")
        self.max_line_length = max_line_length(env.spark.settings().get(MAX_LINE_LENGTH_KEY))
        """The longest line taken, in characters (:data:`~streaming.inputs.MAX_LINE_LENGTH_KEY`)."""
        if placement == "executor":
            self._executor_id = "executor"
            self._reports_start = True
        self._block_counts: dict[int, int] = {}  # executor placement: records per reported block
        self._rate_changed: anyio.Event | None = None  # set when the limiter's rate may have changed
        self._executor_found: anyio.Event | None = None  # set when the task's executor id is known (or given up)
        self._task_group: anyio.abc.TaskGroup | None = None
        self.network = FrontDoorSettings.from_conf(env.spark.settings().conf) if placement == "executor" else FrontDoorSettings()
        """With ``placement="executor"``: the control channel's bounds (``spark.network.auth.rpcTimeout``,
        ``spark.network.timeout``, ``spark.aiodstream.network.maxUnauthenticatedConnections``)."""
        self.control_port: int | None = None
        """With ``placement="executor"``: the port the driver listens on for the task's control connection, while one
        is open (for diagnostics; every connection to it must prove the launch's token first)."""
        self.executor_rate: float | None = None
        """With ``placement="executor"``: the last rate the task said it applied (``None``: none, or no limit)."""

    def validate_at_start(self) -> None:
        """The graph's hook (not for users): an executor receiver needs a checkpoint directory; then the node's checks."""
        checkpoint = self._env.graph.checkpoint_dir
        if self.placement == "executor":
            if checkpoint is None:
                raise InvalidPipelineError(
                    "a receiver on an executor writes its blocks into the checkpoint's write-ahead log and the batches "
                    "read them from there: give StreamingContext.checkpoint() a directory every executor reaches (a "
                    "shared path, or a URI such as hdfs://)"
                )
        super().validate_at_start()

    async def _receive(self) -> ReceiverOutcome:
        if self.placement == "executor":
            return await self._receive_on_executor()
        try:
            stream = await anyio.connect_tcp(self.host, self.port)
        except OSError as exc:
            return ReceiverOutcome(True, f"Error connecting to {self.host}:{self.port}", exc)
        decoder = LineDecoder(self.max_line_length)
        put_many = self._store_many
        async with stream:
            self._log.info("connected", host=self.host, port=self.port)
            try:
                while True:
                    try:
                        data = await stream.receive(65536)
                    except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                        await put_many(decoder.finish())
                        if isinstance(exc, anyio.EndOfStream):
                            return ReceiverOutcome(True, "Socket data stream had no more data")
                        return ReceiverOutcome(True, "Error receiving data", exc)
                    except OSError as exc:
                        await put_many(decoder.finish())
                        return ReceiverOutcome(True, "Error receiving data", exc)
                    lines = decoder.feed(data)
                    if lines:
                        await put_many(lines)
            except LineTooLongError as exc:
                # A bad stream, as Spark's receiver treats one: keep the lines before it, drop the connection
                # (the rest of the long line with it), report, and connect again after the restart delay.
                await put_many(exc.lines)
                return ReceiverOutcome(True, "Error receiving data", exc)

    # -- on an executor --

    @property
    def tasks_write_checkpoint(self) -> str | None:
        """What this stream's tasks write into the checkpoint: a receiver on an executor, its write-ahead log."""
        return f"the write-ahead log of {self.receiver_name} (on an executor)" if self.placement == "executor" else None

    def _task_spec(self, host: str, port: int, token: str) -> ReceiverTaskSpec:
        assert self._log_dir is not None
        return ReceiverTaskSpec(
            self.id, self.host, self.port, host, port, self._env.graph.task_path(self._log_dir), self._last_entry + 1,
            self.block_interval.milliseconds, self.restart_delay.milliseconds, self.rate_limiter().rate,
            self.max_line_length, token=token, heartbeat_ms=self._heartbeat_ms())

    def _heartbeat_ms(self) -> int:
        """How often an idle task says it is alive: well within the idle timeout (``spark.network.timeout``)."""
        return max(50, int(self.network.idle_timeout_s * 1000 / 4))

    def _run_job(self, spec: ReceiverTaskSpec, group: str) -> None:
        """The receiver's Spark job: one long-running task (blocking, in a worker thread)."""
        sc = self._env.spark_context
        run_in_job_group(sc, group, f"{self.receiver_name}: receiving from {self.host}:{self.port}",
                         lambda: sc.parallelize([spec], 1).foreachPartition(run_receiver_tasks))

    def _addresses(self) -> tuple[str, str]:
        """Where tasks reach the driver, and where the control channel listens (blocking: py4j calls)."""
        sc = self._env.spark_context
        return driver_host(sc), driver_bind_address(sc)

    def _adopt_unreported_blocks(self) -> None:
        """Count blocks a previous task wrote and could not report (blocking): the next task writes after them.

        They are whole and durable (blocks are written atomically), so they are the source's
        records: the next batch takes them, as a restart takes the blocks it finds.
        """
        assert self._block_log is not None
        for entry in self._block_log.entries():
            if entry == self._last_entry + 1:
                self._last_entry = entry

    async def _receive_on_executor(self) -> ReceiverOutcome:
        """Run the receiver as a Spark task and take its reports until it stops or fails.

        The control channel is a front door (:mod:`streaming.network`): a connection is heard
        only once its hello proved this launch's token, a fresh one per task launched, which
        reaches the task inside its spec. Strangers and tasks of earlier launches are dropped
        without taking the task's place; the first task admitted is the receiver's, a second is
        refused. Its reports are checked (:func:`~streaming.inputs._control.parse_report`)
        before any is believed; one that breaks the rules ends the run with
        :class:`ReceiverProtocolError`.

        Cancelled (the context stops): the task is told to stop, and the blocks it writes last
        are registered before this returns (bounded by :data:`EXECUTOR_STOP_TIMEOUT_S`); then
        its job group is cancelled. A task that fails or loses its connection ends this run,
        and the supervisor starts a new task after the restart delay.
        """
        host, bind = await anyio.to_thread.run_sync(self._addresses)
        await anyio.to_thread.run_sync(self._adopt_unreported_blocks)
        group = f"aiodstream-receiver-{self.id}-{uuid.uuid4().hex[:8]}"
        token = new_token()
        door = FrontDoor(token, receiver_roles(self.id), self.network, name=f"{self.receiver_name} control channel")
        # A listener on each address the bind name resolves to (a host name may have an IPv6 and an
        # IPv4 one, as Fedora's localhost has), all on one port: the task may reach any of them.
        listeners = await anyio.create_tcp_listener(local_host=bind, local_port=0)
        port = cast(anyio.abc.SocketListener, listeners.listeners[0]).extra(anyio.abc.SocketAttribute.local_port)
        job_error: list[BaseException] = []
        session = _Session()
        try:
            async with listeners, anyio.create_task_group() as tg:
                spec = self._task_spec(host, port, token)
                self.control_port = port
                tg.start_soon(self._job, spec, group, job_error, tg.cancel_scope)
                tg.start_soon(door.serve, listeners, partial(self._control_session, session, spec.rate), tg)
                await session.ended.wait()
                if session.outcome.restart and not session.outcome.dropped:
                    # The connection broke: if the task failed, its job's error says why.
                    with anyio.move_on_after(EXECUTOR_STOP_TIMEOUT_S):
                        await anyio.sleep_forever()  # until _job, at the job's end, cancels this group
                tg.cancel_scope.cancel()
        finally:
            # After the task group: a stop's last reports (the control session's shielded wait) come first.
            self.control_port = None
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._env.spark.cancel_job_group, group)
        if job_error and not session.outcome.dropped:
            return ReceiverOutcome(True, "The receiver's Spark task failed", job_error[0])
        return session.outcome

    async def _job(self, spec: ReceiverTaskSpec, group: str, errors: list[BaseException], scope: anyio.CancelScope) -> None:
        try:
            await anyio.to_thread.run_sync(self._run_job, spec, group, abandon_on_cancel=True,
                                           limiter=anyio.CapacityLimiter(1))
        except Exception as exc:
            errors.append(exc)
        scope.cancel()  # the task is over: nothing more will report

    async def _control_session(self, session: _Session, started_at: float | None, task: Admitted) -> None:
        """Serve the admitted task's connection (the first one only) until it ends; then end the run."""
        if session.taken:
            self._log.warning("a second receiver task connection was refused", receiver=self.receiver_name,
                              hello=dict(task.hello.fields))
            return
        session.taken = True
        try:
            session.outcome = await self._take_reports(task, started_at)
        except _CONNECTION_ERRORS as exc:
            session.outcome = ReceiverOutcome(True, "The receiver's task lost its connection to the driver", exc)
        finally:
            session.ended.set()

    async def _take_reports(self, task: Admitted, started_at: float | None) -> ReceiverOutcome:
        """Handle the task's reports until it says X or the connection breaks; beside them, send it new rates (the
        task started at ``started_at``) and look its executor up. Cancelled: tell the task to stop, take its last
        block, re-raise."""
        outcome = ReceiverOutcome(False, "Stopped by driver")
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                tg.start_soon(self._send_rates, task.stream, started_at)
                try:
                    while not await self._on_report(await self._next_report(task)):
                        pass
                except TimeoutError as exc:  # before the connection errors: it is an OSError
                    outcome = ReceiverOutcome(True, f"The receiver's task sent nothing within {IDLE_TIMEOUT_KEY} "
                                             f"({task.idle_timeout_s:g} s)", exc, dropped=True)
                except _CONNECTION_ERRORS as exc:  # handled here: out of a task group it would be an ExceptionGroup
                    outcome = ReceiverOutcome(True, "The receiver's task lost its connection to the driver", exc)
                except (ReceiverProtocolError, FrameTooLargeError) as exc:
                    self._log.warning("the receiver's task broke the control protocol; its connection was dropped",
                                      receiver=self.receiver_name, error=str(exc))
                    outcome = ReceiverOutcome(True, "The receiver's task broke the control protocol", exc, dropped=True)
                tg.cancel_scope.cancel()  # nothing more to send or look up
            return outcome
        except get_cancelled_exc_class():
            self._task_group = None  # closed: a late H report starts no lookup
            # The context stops: the task writes what it read as a last block and says X.
            with anyio.CancelScope(shield=True), anyio.move_on_after(EXECUTOR_STOP_TIMEOUT_S):
                try:
                    await task.send(b"stop\n")
                    while not await self._on_report(await self._next_report(task)):
                        pass
                except (*_CONNECTION_ERRORS, TimeoutError, ReceiverProtocolError, FrameTooLargeError) as exc:
                    self._log.warning("the receiver's task did not stop cleanly", receiver=self.receiver_name,
                                      error=repr(exc))
            self._log.info("receiver task stopped", receiver=self.receiver_name, last_block=self._last_entry)
            raise
        finally:
            self._task_group = None

    async def _next_report(self, task: Admitted) -> Report:
        """The task's next report, checked (bounded in length, under the idle timeout)."""
        return parse_report(await task.read_line(MAX_REPORT_BYTES), self._last_entry + 1)

    async def _find_executor(self, stage: int, task: int, found: anyio.Event) -> None:
        """Look the task's executor up in Spark's status store, which hears of the task soon after it starts."""
        sc = self._env.spark_context
        try:
            with anyio.move_on_after(EXECUTOR_LOOKUP_TIMEOUT_S):
                while True:
                    executor = await anyio.to_thread.run_sync(executor_of_task, sc, stage, task)
                    if executor is not None:
                        self._executor_id = executor
                        return
                    await anyio.sleep(0.05)
            self._log.warning("the receiver task's executor is not in Spark's status store", receiver=self.receiver_name,
                              stage=stage, task=task)
        except Exception as exc:  # a name in events is not worth the receiver: keep the placeholder
            self._log.warning("looking the receiver task's executor up failed", receiver=self.receiver_name,
                              error=repr(exc))
        finally:
            found.set()

    def _rate_updated(self) -> None:
        if self._rate_changed is not None:
            self._rate_changed.set()

    async def _send_rates(self, control: anyio.abc.ByteStream, sent: float | None) -> None:
        """Send the task each new rate of the limiter (the task started at ``sent``); the newest wins.

        The event is made before the rate is read, so a change during a send is not missed. A
        broken connection ends this quietly: the report loop sees it too.
        """
        while True:
            changed = self._rate_changed = anyio.Event()
            rate = self.rate_limiter().rate
            if rate == sent:
                await changed.wait()
                continue
            try:
                await control.send(f"rate {'none' if rate is None else rate}\n".encode())
            except _CONNECTION_ERRORS:
                return
            sent = rate

    async def _on_report(self, report: Report) -> bool:
        """Handle one checked report of the task; whether it said it stopped."""
        kind = report.kind
        runtime = self._env.runtime
        if kind == "B":
            self._block_counts[report.entry] = report.count
            self._last_entry = report.entry
        elif kind == "H":
            self._host = report.host
            if report.task is not None and self._task_group is not None:
                self._executor_found = anyio.Event()
                self._task_group.start_soon(self._find_executor, *report.task, self._executor_found)
        elif kind == "R":
            self.executor_rate = report.rate
            self._log.debug("receiver task paced", receiver=self.receiver_name, rate=self.executor_rate)
        elif kind == "S":
            if self._executor_found is not None:  # the event names the executor: wait (briefly) for the status store
                with anyio.move_on_after(EXECUTOR_LOOKUP_TIMEOUT_S):
                    await self._executor_found.wait()
            await runtime.listener_bus.post(ReceiverStarted(self._info(active=True)))
            self._log.info("receiver started", receiver=self.receiver_name, host=self._host, location="executor")
        elif kind == "E":
            message = redact_uri(report.message)  # the task's text may name a URI with credentials (listeners, the UI)
            error = ConnectionError(message)
            await runtime.listener_bus.post(ReceiverError(self._info(active=True, message=message, error=error,
                                                                     at=runtime.clock.now())))
            self._log.warning("receiver error on its executor", receiver=self.receiver_name, reason=message)
        return kind == "X"

    def _compute(self, time: Time) -> RDD[Any] | None:
        if self.placement != "executor":
            return super()._compute(time)
        # The batch's tasks read its blocks from the log: the records never pass through the driver.
        assert self._block_log is not None
        sc = self._env.spark_context
        entries = list(self._logged_entry_ids(time))
        # Blocks reported by this run's task carry their counts; blocks found at a restart are counted once here.
        count = sum(self._block_counts[e] if e in self._block_counts else len(self._block_log.read(e)) for e in entries)
        tracker = self._env.graph.input_infos
        if tracker is not None:
            tracker.report_info(time, StreamInputInfo(self.id, count))
        if not entries:
            return sc.emptyRDD()
        paths = [self._env.graph.task_path(self._block_log.path_of(e)) for e in entries]
        return sc.parallelize(paths, len(paths)).mapPartitions(read_block_files)

    async def commit(self, end: Offset) -> None:
        await super().commit(end)
        for entry in [e for e in self._block_counts if e < self._purged_below]:
            del self._block_counts[entry]
