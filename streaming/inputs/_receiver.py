"""Receiver input streams: a task takes records in between batches (Spark's ``ReceiverInputDStream``).

Spark runs a ``Receiver`` on an executor, cuts what it stores into blocks and lets the
``ReceiverTracker`` allocate them to batches. Here the receiver is a task in the runtime's task
group on the driver, storing into a bounded buffer that each batch empties
(``allocateBlocksToBatch``); ``socketTextStream`` and ``asyncIterableStream`` are built on it.
"""

from __future__ import annotations

import socket
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any, AsyncIterable, AsyncIterator, Callable, Sequence, Union, cast

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import attrs
from anyio import get_cancelled_exc_class

from listeners import ReceiverError, ReceiverInfo, ReceiverStarted, ReceiverStopped
from scheduler import (
    Duration,
    InvalidPipelineError,
    Offset,
    RateLimiter,
    StreamingError,
    StreamInputInfo,
    Time,
    library_logger,
    redact_uri,
    redacted_traceback,
)

from ..dstream import StreamEnvironment
from ..network import IDLE_TIMEOUT_KEY, Admitted, FrameTooLargeError, FrontDoor, FrontDoorSettings, new_token
from ..recovery import BlockLog, format_log_offset
from ..spark import driver_bind_address, driver_host, executor_of_task, run_in_job_group, time_string_as
from ._base import InputDStream
from ._control import MAX_REPORT_BYTES, ReceiverProtocolError, Report, parse_report, receiver_roles
from ._decoder import MAX_LINE_LENGTH_KEY, LineDecoder, LineTooLongError, max_line_length
from ._executor_receiver import ReceiverTaskSpec, read_block_files, run_receiver_tasks

if TYPE_CHECKING:
    from pyspark import RDD  # only for annotations: pyspark is imported when Spark is first needed

__all__ = [
    "DEFAULT_MAX_BUFFERED_RECORDS",
    "EXECUTOR_STOP_TIMEOUT_S",
    "RECEIVER_PLACEMENT_KEY",
    "AsyncIterableInputDStream",
    "AsyncSource",
    "LineDecoder",
    "ReceiverInputDStream",
    "RecordBuffer",
    "SocketInputDStream",
    "WriteAheadLogError",
]

DEFAULT_MAX_BUFFERED_RECORDS = 100_000
"""Records a receiver may hold between two batches before it stops taking more in."""

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

AsyncSource = Union[AsyncIterable[Any], Callable[[], AsyncIterable[Any]]]
"""What ``asyncIterableStream`` takes: an async iterable, or a function returning a fresh one."""

# An async source that never awaits would hold the event loop for as long as the buffer has
# room; yielding every so many records keeps the timer and the host's tasks running.
_YIELD_EVERY = 512


def _positive_rate(value: str | None, key: str) -> float | None:
    """A records-per-second setting: ``None`` when unset or not positive (Spark's "no limit")."""
    if value is None or value.strip() == "":
        return None
    try:
        rate = float(value)
    except ValueError:
        raise ValueError(f"{key} must be a number of records per second, got {value!r}") from None
    return rate if rate > 0 else None


class RecordBuffer:
    r"""A bounded list of received records that each batch takes whole (Spark's ``BlockGenerator``).

    ``put``/``put_many`` wait while the buffer holds ``capacity`` records, so a fast source is
    slowed down instead of growing memory; :meth:`take_all` empties it and wakes them. With a
    write-ahead log, blocks are cut from the front instead (:meth:`peek`, then :meth:`drop` once
    the block is written), and while the log's writes fail the buffer is :meth:`pause`\ d: puts
    wait even with room, so the source is held back and nothing grows. Not thread-safe: the
    receiver and the batch allocation both run on the runtime's event loop.
    """

    def __init__(self, capacity: int = DEFAULT_MAX_BUFFERED_RECORDS) -> None:
        """Create an empty buffer of at most ``capacity`` records."""
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"maxBufferedRecords must be a positive int, got {capacity!r}; pass e.g. 100000")
        self.capacity = capacity
        self._records: list[Any] = []
        self._room: anyio.Event | None = None
        self._paused = False
        self.waits = 0

    def __len__(self) -> int:
        return len(self._records)

    @property
    def paused(self) -> bool:
        """Whether puts wait whatever the room (see :meth:`pause`)."""
        return self._paused

    def _full(self) -> bool:
        return self._paused or len(self._records) >= self.capacity

    async def put(self, record: Any) -> None:
        """Append ``record``, first waiting for room (and while paused); cancellable."""
        while self._full():
            await self._wait_for_room()
        self._records.append(record)

    async def put_many(self, records: Sequence[Any]) -> None:
        """Append ``records`` in order, waiting for room (and while paused) as often as needed; cancellable.

        On cancellation the records stored so far stay stored; the rest are not.
        """
        start, total = 0, len(records)
        while start < total:
            if self._full():
                await self._wait_for_room()
                continue
            room = self.capacity - len(self._records)
            self._records.extend(records[start:start + room])
            start += room

    async def _wait_for_room(self) -> None:
        self.waits += 1
        if self._room is None:
            self._room = anyio.Event()
        await self._room.wait()

    def _wake(self) -> None:
        if self._room is not None:
            self._room.set()
            self._room = None

    def take_all(self) -> list[Any]:
        """Every record stored so far, in order; the buffer is empty afterwards."""
        records, self._records = self._records, []
        self._wake()
        return records

    def peek(self) -> list[Any]:
        """Every record stored so far, in order, left in the buffer (a new list)."""
        return list(self._records)

    def drop(self, count: int) -> None:
        """Remove the ``count`` oldest records (a block of them was written)."""
        if count:
            del self._records[:count]
            self._wake()

    def pause(self) -> None:
        """Make every put wait, with room or not, until :meth:`resume`."""
        self._paused = True

    def resume(self) -> None:
        """Let puts store again (up to the capacity)."""
        if self._paused:
            self._paused = False
            self._wake()

    def __repr__(self) -> str:
        paused = " | paused" if self._paused else ""
        return f"<RecordBuffer [{len(self._records)}/{self.capacity} records{paused} | waited {self.waits}x]>"


class WriteAheadLogError(StreamingError, OSError):
    """A receiver could not write a block of its write-ahead log (a full disk, a lost file system).

    Raised for the batch that needed the block (its generation fails, no offsets are logged for
    it); the receiver takes no more input meanwhile, and its held records go into the first
    block written once the writes succeed again.
    """


@attrs.frozen
class _Outcome:
    """How one run of a receiver ended: restart after the delay, or stop for good."""

    restart: bool
    message: str
    error: BaseException | None = None
    dropped: bool = False
    """The driver dropped the task's connection (a broken rule, an idle timeout): this is why, whatever the job says."""


class _Session:
    """One launch's control connection: whether a task took it, how it ended, and when."""

    def __init__(self) -> None:
        self.taken = False
        self.outcome = _Outcome(True, "The receiver's Spark task ended")
        self.ended = anyio.Event()


class ReceiverInputDStream(InputDStream):
    """An input stream fed by a receiver task; each batch gets what arrived since the last one.

    Subclasses implement :meth:`_receive`, one connection's or one iteration's worth of
    receiving, which stores records with ``await self._buffer.put(...)`` and says how it ended.
    The base class supervises it like Spark's ``ReceiverSupervisor``: it posts
    ``ReceiverStarted`` when a run starts, ``ReceiverError`` when one fails with an exception,
    ``ReceiverStopped`` when one ends, and restarts after ``restart_delay`` (Spark's
    ``spark.streaming.receiverRestartDelay``) unless the source is finished.

    Guarantees: records reach batches in the order they were stored, each in exactly one batch;
    at most ``max_buffered_records`` wait in memory between two batches (the receiver waits when
    the buffer is full); on stop the receiver task is cancelled, whatever it had stored still goes
    to the next batch (the last one, on a graceful stop), and ``ReceiverStopped`` is posted.

    With a checkpoint directory the receiver writes a write-ahead log (Spark's receiver WAL,
    always on here): every ``spark.streaming.blockInterval`` (200 ms) and at each batch, what
    it stored becomes one block, ``sources/<id>/<N>``, written durably; a batch takes only
    blocks that are on disk, so a restart replays a batch's records exactly. What a crash
    catches in memory (at most one block interval of records) is lost, as in Spark.
    """

    has_receiver = True
    _receiver_class = "Receiver"
    _executor_id = "driver"
    """Where the receiver runs, as its ``ReceiverInfo.executor_id`` says: ``"driver"``, or ``"executor"`` for a
    receiver task (a Python task cannot see its executor's id; ``location`` is the executor's host)."""
    _reports_start = False
    """Whether the receiver posts ``ReceiverStarted`` itself (once its remote task connects)."""

    restart_delay: Duration
    """How long a failed or ended receiver waits before it starts again."""

    def __init__(self, env: StreamEnvironment, *, restart_delay: Duration | None, max_buffered_records: int) -> None:
        """Register a receiver stream of ``env``'s context; ``restart_delay`` None reads Spark's conf (2 s default)."""
        buffer = RecordBuffer(max_buffered_records)
        super().__init__(env)
        self._buffer = buffer
        settings = env.spark.settings()
        if restart_delay is None:  # Spark reads it as an int of milliseconds (getInt), not a time string
            restart_delay = Duration(int(settings.get("spark.streaming.receiverRestartDelay", "2000") or "2000"))
        self.restart_delay = restart_delay
        self._allocated: dict[Time, list[Any]] = {}
        interval = settings.get("spark.streaming.blockInterval", "200ms") or "200ms"
        self.block_interval = Duration(time_string_as(interval, "ms", "spark.streaming.blockInterval"))
        # With a checkpoint: the write-ahead log, its newest block, the blocks in memory, and
        # the block whose write failed (its records wait in the buffer, which is paused meanwhile).
        self._block_log: BlockLog | None = None
        self._last_entry = -1
        self._blocks: dict[int, list[Any]] = {}
        self._failed_entry: int | None = None  # the block whose write failed last (cleared by a successful write)
        self._flush_lock: anyio.Lock | None = None
        self._purged_below = 0
        # Spark's receiver rate limit: spark.streaming.receiver.maxRate caps every rate, and
        # spark.streaming.backpressure.initialRate (default: the cap) is where it starts.
        self.max_rate = _positive_rate(settings.get("spark.streaming.receiver.maxRate"), "spark.streaming.receiver.maxRate")
        initial = _positive_rate(settings.get("spark.streaming.backpressure.initialRate"),
                                 "spark.streaming.backpressure.initialRate")
        self.initial_rate = initial if initial is not None else self.max_rate
        self._limiter: RateLimiter | None = None
        self._host = socket.gethostname()
        self._log = library_logger("aiodstream.streaming", component=type(self).__name__, stream=self.id)

    def rate_limiter(self) -> RateLimiter:
        """The limiter the receiver waits on before storing records (created on first use, on the runtime's clock)."""
        if self._limiter is None:
            self._limiter = RateLimiter(self._env.runtime.clock, self.initial_rate, max_rate=self.max_rate)
        return self._limiter

    def update_rate(self, rate: float | None) -> None:
        """A new rate for the receiver (backpressure's ``RateController`` publishes here; on the event loop).

        Capped by ``spark.streaming.receiver.maxRate``; a receiver running elsewhere is sent it.
        """
        self.rate_limiter().update(rate)
        self._rate_updated()

    def _rate_updated(self) -> None:
        """Hook: the limiter's rate may have changed (a receiver on an executor forwards it)."""

    async def _store_many(self, records: Sequence[Any]) -> None:
        """Store ``records`` once the rate limit allows them and the buffer has room."""
        if records:
            await self.rate_limiter().acquire(len(records))
            await self._buffer.put_many(records)

    async def _store(self, record: Any) -> None:
        """Store one record once the rate limit allows it and the buffer has room."""
        await self.rate_limiter().acquire(1)
        await self._buffer.put(record)

    @property
    def receiver_name(self) -> str:
        """The receiver's name in its events, as Spark names it: ``"SocketReceiver-0"``."""
        return f"{self._receiver_class}-{self.id}"

    # -- the receiver side (runtime's event loop) --

    async def _receive(self) -> _Outcome:
        """Receive until the source ends or fails; store records in ``self._buffer``."""
        raise NotImplementedError

    async def run_receiver(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        runtime = self._env.runtime
        delay = self.restart_delay
        # Ready at once, as Spark's receiver start returns before the socket connects: a source
        # that is slow to come up must not hold up the context's start.
        task_status.started()
        final = _Outcome(False, "Stopped by driver")
        try:
            while True:
                if not self._reports_start:
                    await runtime.listener_bus.post(ReceiverStarted(self._info(active=True)))
                    self._log.info("receiver started", receiver=self.receiver_name)
                try:
                    outcome = await self._receive()
                except Exception as exc:  # a bug in a receiver: treat like a failed connection
                    outcome = _Outcome(True, "Error receiving data", exc)
                if outcome.error is not None:
                    await runtime.listener_bus.post(
                        ReceiverError(self._info(active=True, message=outcome.message, error=outcome.error, at=runtime.clock.now()))
                    )
                if not outcome.restart:
                    final = outcome
                    return
                message = f"Restarting receiver with delay {delay.milliseconds}ms: {outcome.message}"
                self._log.warning("restarting receiver", receiver=self.receiver_name, delay_ms=delay.milliseconds,
                                  reason=outcome.message, error=None if outcome.error is None else repr(outcome.error))
                await runtime.listener_bus.post(ReceiverStopped(self._info(
                    active=False, message=message, error=outcome.error,
                    at=None if outcome.error is None else runtime.clock.now())))
                await runtime.clock.sleep(delay)
        finally:
            # Shielded: this runs when the graph cancels the receiver at stop, and listeners
            # must still hear that it stopped (the bus closes only after the scheduler ends).
            with anyio.CancelScope(shield=True):
                error = final.error
                await runtime.listener_bus.post(ReceiverStopped(self._info(
                    active=False, message=final.message, error=error, at=None if error is None else runtime.clock.now())))
                self._log.info("receiver stopped", receiver=self.receiver_name, reason=final.message)

    def _info(self, *, active: bool, message: str = "", error: BaseException | None = None, at: Time | None = None) -> ReceiverInfo:
        trace = "" if error is None else redacted_traceback(error)
        return ReceiverInfo(self.id, self.receiver_name, active, self._host, self._executor_id,
                            last_error_message=message, last_error=trace, last_error_time=at)

    # -- the batch side --

    async def allocate(self, time: Time) -> None:
        if self.replaying:
            return  # the batch's blocks were decided (and written) when its offsets were planned
        records = self._buffer.take_all()
        if self._zero_time is None:
            return  # no output operation reads this stream: nothing will ever compute it
        self._allocated[time] = records
        # A batch whose generation failed never computed its records; drop them once they fall
        # out of the remember window, as Spark's block tracker cleans up old allocations.
        remember = self._remember_duration or self._slide
        for old in [t for t in self._allocated if t.milliseconds <= time.milliseconds - remember.milliseconds]:
            del self._allocated[old]

    def _compute(self, time: Time) -> RDD[Any] | None:
        # Runs in the generation worker thread, right after _allocate(time) on the loop: the two
        # never overlap, so the dict needs no lock.
        records = self._logged_records(time) if self.replaying else self._allocated.pop(time, None)
        sc = self._env.spark_context
        if records is None:
            return sc.emptyRDD()  # a time whose records were never allocated (e.g. cleaned up)
        tracker = self._env.graph.input_infos
        if tracker is not None:
            tracker.report_info(time, StreamInputInfo(self.id, len(records)))
        if not records:
            return sc.emptyRDD()
        slices = max(1, self._env.spark.settings().default_parallelism)
        return sc.parallelize(records, min(slices, len(records)))

    # -- the write-ahead log (with a checkpoint) --

    def _descriptor(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        return {"kind": self._receiver_class, "name": self.name}, ("kind",)

    def _load_log(self, recorded: dict[str, Any]) -> None:
        assert self._log_dir is not None
        self._block_log = BlockLog(self._log_dir)
        entries = self._block_log.entries()
        self._last_entry = entries[-1] if entries else -1

    def latest_offset(self) -> Offset:
        return format_log_offset(self._last_entry) if self._last_entry >= 0 else None

    async def plan_offset(self, start: Offset, time: Time) -> Offset:
        await self._flush()
        return self.latest_offset()

    async def _flush(self) -> None:
        """Write what the receiver stored since the last block as new blocks (if anything).

        The records stay in the buffer until their block is written, so they count against its
        bound; a failed write pauses the buffer (the receiver takes no more input) and raises
        :class:`WriteAheadLogError`; the next successful write takes the same records first and
        resumes it. Nothing is lost and nothing is written twice: a block a failed write may
        have left on disk is checked before it is written again (``BlockLog.write_again``).
        """
        if self._flush_lock is None:
            self._flush_lock = anyio.Lock()
        async with self._flush_lock:
            while True:
                records = self._buffer.peek()
                if not records:
                    return
                entry = self._last_entry + 1
                written = len(records)
                if self._block_log is not None:  # without a checkpoint the block stays in memory only
                    try:
                        written = await anyio.to_thread.run_sync(self._write_block, entry, records)
                    except Exception as exc:
                        raise await self._write_failed(entry, len(records), exc) from exc
                    except BaseException:  # cancelled: whether the block reached the disk is unknown
                        self._failed_entry = entry
                        raise
                    if self._failed_entry is not None:
                        self._writes_recovered(len(records))
                self._buffer.drop(written)
                self._blocks[entry] = records[:written]
                self._last_entry = entry
                if written == len(records):
                    return

    def _write_block(self, entry: int, records: list[Any]) -> int:
        """Write block ``entry`` (in a worker thread, under the flush lock); how many of ``records`` it holds."""
        assert self._block_log is not None
        if entry == self._failed_entry:  # the failed attempt may have left it on disk
            return self._block_log.write_again(entry, records)
        self._block_log.write(entry, records)
        return len(records)

    async def _write_failed(self, entry: int, held: int, exc: Exception) -> WriteAheadLogError:
        """Pause the receiver's input; the error for the batch (posted as ``ReceiverError`` when writes start failing)."""
        assert self._block_log is not None
        first = self._failed_entry is None
        self._failed_entry = entry
        self._buffer.pause()
        error = WriteAheadLogError(
            f"{self.receiver_name} could not write block {entry} of its write-ahead log "
            f"({self._block_log.path_of(entry)}): {type(exc).__name__}: {exc}; the receiver takes no more input until a "
            f"write succeeds ({held} records held, at most {self._buffer.capacity}; retried every "
            f"{self.block_interval.milliseconds} ms and at each batch, and nothing is lost); free space on the "
            "checkpoint's file system or restore its access"
        )
        if first:
            self._log.error("writing the write-ahead log failed; the receiver takes no more input until a write succeeds",
                            receiver=self.receiver_name, entry=entry, held=held, error=repr(exc))
            runtime = self._env.runtime
            await runtime.listener_bus.post(ReceiverError(self._info(
                active=True, message="Error writing the write-ahead log; input paused", error=error,
                at=runtime.clock.now())))
        else:
            self._log.debug("writing the write-ahead log failed again", receiver=self.receiver_name, entry=entry,
                            held=held, error=repr(exc))
        return error

    def _writes_recovered(self, held: int) -> None:
        self._failed_entry = None
        self._buffer.resume()
        self._log.info("the write-ahead log is written again; the receiver takes input again", receiver=self.receiver_name,
                       written=held)

    @property
    def held_records(self) -> int:
        """Records taken in and not yet in a block of the write-ahead log (or, without one, in a batch)."""
        return len(self._buffer)

    async def run_block_writer(self) -> None:
        """Write a block every ``block_interval`` until cancelled (a failed write is retried, the input paused)."""
        clock = self._env.runtime.clock
        while True:
            await clock.sleep(self.block_interval)
            try:
                await self._flush()
            except WriteAheadLogError:
                pass  # logged, and posted as a ReceiverError, when the writes started failing
            except Exception as exc:
                self._log.error("writing a block of received records failed; retrying at the next block",
                                receiver=self.receiver_name, error=repr(exc))

    def _logged_records(self, time: Time) -> list[Any]:
        records: list[Any] = []
        for entry in self._logged_entry_ids(time):
            block = self._blocks.get(entry)
            if block is None and self._block_log is None:
                continue  # in memory only: a range no remembered batch covers any more
            if block is None:
                assert self._block_log is not None
                block = self._blocks[entry] = self._block_log.read(entry)
            records.extend(block)
        return records

    async def commit(self, end: Offset) -> None:
        # Blocks before every remembered batch's range are needed neither to replay a batch nor
        # to rebuild a window (Spark cleans its WAL at the same point).
        below = self._first_entry_needed(end)
        if below <= self._purged_below:
            return
        for entry in [e for e in self._blocks if e < below]:
            del self._blocks[entry]
        self._purged_below = below
        if self._block_log is not None:
            await anyio.to_thread.run_sync(self._block_log.purge, below)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} [{self._buffer!r} | {len(self._allocated)} batches allocated]>"


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

    def _validate_at_start(self) -> None:
        checkpoint = self._env.graph.checkpoint_dir
        if self.placement == "executor":
            if checkpoint is None:
                raise InvalidPipelineError(
                    "a receiver on an executor writes its blocks into the checkpoint's write-ahead log and the batches "
                    "read them from there: give StreamingContext.checkpoint() a directory every executor reaches (a "
                    "shared path, or a URI such as hdfs://)"
                )
        super()._validate_at_start()

    async def _receive(self) -> _Outcome:
        if self.placement == "executor":
            return await self._receive_on_executor()
        try:
            stream = await anyio.connect_tcp(self.host, self.port)
        except OSError as exc:
            return _Outcome(True, f"Error connecting to {self.host}:{self.port}", exc)
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
                            return _Outcome(True, "Socket data stream had no more data")
                        return _Outcome(True, "Error receiving data", exc)
                    except OSError as exc:
                        await put_many(decoder.finish())
                        return _Outcome(True, "Error receiving data", exc)
                    lines = decoder.feed(data)
                    if lines:
                        await put_many(lines)
            except LineTooLongError as exc:
                # A bad stream, as Spark's receiver treats one: keep the lines before it, drop the connection
                # (the rest of the long line with it), report, and connect again after the restart delay.
                await put_many(exc.lines)
                return _Outcome(True, "Error receiving data", exc)

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

    async def _receive_on_executor(self) -> _Outcome:
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
        listeners = await anyio.create_tcp_listener(local_host=bind, local_port=0)
        listener = cast(anyio.abc.SocketListener, listeners.listeners[0])  # one address: one listener
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        job_error: list[BaseException] = []
        session = _Session()
        try:
            async with listeners, anyio.create_task_group() as tg:
                spec = self._task_spec(host, port, token)
                self.control_port = port
                tg.start_soon(self._job, spec, group, job_error, tg.cancel_scope)
                tg.start_soon(listener.serve, door.handler(partial(self._control_session, session, spec.rate)), tg)
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
            return _Outcome(True, "The receiver's Spark task failed", job_error[0])
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
            session.outcome = _Outcome(True, "The receiver's task lost its connection to the driver", exc)
        finally:
            session.ended.set()

    async def _take_reports(self, task: Admitted, started_at: float | None) -> _Outcome:
        """Handle the task's reports until it says X or the connection breaks; beside them, send it new rates (the
        task started at ``started_at``) and look its executor up. Cancelled: tell the task to stop, take its last
        block, re-raise."""
        outcome = _Outcome(False, "Stopped by driver")
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                tg.start_soon(self._send_rates, task.stream, started_at)
                try:
                    while not await self._on_report(await self._next_report(task)):
                        pass
                except TimeoutError as exc:  # before the connection errors: it is an OSError
                    outcome = _Outcome(True, f"The receiver's task sent nothing within {IDLE_TIMEOUT_KEY} "
                                             f"({task.idle_timeout_s:g} s)", exc, dropped=True)
                except _CONNECTION_ERRORS as exc:  # handled here: out of a task group it would be an ExceptionGroup
                    outcome = _Outcome(True, "The receiver's task lost its connection to the driver", exc)
                except (ReceiverProtocolError, FrameTooLargeError) as exc:
                    self._log.warning("the receiver's task broke the control protocol; its connection was dropped",
                                      receiver=self.receiver_name, error=str(exc))
                    outcome = _Outcome(True, "The receiver's task broke the control protocol", exc, dropped=True)
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


class AsyncIterableInputDStream(ReceiverInputDStream):
    """Records from an async iterable, one record per item (aiodstream's ``asyncIterableStream``).

    The iterable is pulled only while the buffer has room, so a fast source waits for the batches
    (backpressure). When it is exhausted the receiver stops for good (later batches are empty).
    When it raises, the error is posted as ``ReceiverError``; the receiver then restarts after the
    restart delay if the source can be iterated afresh (a factory function, or an iterable whose
    ``__aiter__`` returns a new iterator), and stops otherwise (an async generator object cannot
    be resumed after raising). On stop, an iterator with ``aclose`` is closed, so an async
    generator's ``finally`` blocks run.
    """

    _receiver_class = "AsyncIterableReceiver"

    def __init__(self, env: StreamEnvironment, source: AsyncSource, *, restart_delay: Duration | None,
                 max_buffered_records: int) -> None:
        """A stream of the items of ``source``."""
        if not callable(source) and not hasattr(source, "__aiter__"):
            raise TypeError(
                f"asyncIterableStream needs an async iterable or a function returning one, got {type(source).__name__}; "
                "pass e.g. an async generator"
            )
        super().__init__(env, restart_delay=restart_delay, max_buffered_records=max_buffered_records)
        self._source = source

    def _iterator(self) -> tuple[AsyncIterator[Any], bool]:
        source = self._source
        iterable = source() if callable(source) and not hasattr(source, "__aiter__") else source
        if not hasattr(iterable, "__aiter__"):
            raise TypeError(f"the asyncIterableStream factory must return an async iterable, got {type(iterable).__name__}")
        iterator = iterable.__aiter__()
        return iterator, iterator is not source  # restartable unless the source is itself the iterator

    async def _receive(self) -> _Outcome:
        try:
            iterator, restartable = self._iterator()
        except Exception as exc:
            return _Outcome(False, "Error creating the async iterator", exc)
        put = self._store
        count = 0
        try:
            while True:
                try:
                    item = await iterator.__anext__()
                except StopAsyncIteration:
                    return _Outcome(False, "Async source exhausted")
                except Exception as exc:
                    return _Outcome(restartable, "Error receiving data from the async source", exc)
                await put(item)
                count += 1
                if count % _YIELD_EVERY == 0:
                    await anyio.lowlevel.checkpoint()
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    try:
                        await aclose()
                    except Exception as exc:
                        self._log.warning("closing the async source failed", error=repr(exc))
