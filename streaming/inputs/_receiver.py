"""Receiver input streams: a task takes records in between batches (Spark's ``ReceiverInputDStream``).

Spark runs a ``Receiver`` on an executor, cuts what it stores into blocks and lets the
``ReceiverTracker`` allocate them to batches. Here the receiver is a task in the runtime's task
group on the driver, storing into a bounded buffer that each batch empties
(``allocateBlocksToBatch``); ``socketTextStream`` and ``asyncIterableStream`` are built on it.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any, Sequence

import anyio
import anyio.abc
import anyio.to_thread
import attrs

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
    redacted_traceback,
)

from ..dstream import StreamEnvironment
from ..recovery import BlockLog, format_log_offset
from ..spark import SparkSettings, time_string_as
from ._base import InputDStream
from ._record_buffer import RecordBuffer

if TYPE_CHECKING:
    from pyspark import RDD  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["ReceiverInputDStream", "ReceiverOutcome", "ReceiverSettings", "WriteAheadLogError"]


def _positive_rate(settings: SparkSettings, key: str) -> float | None:
    """A records-per-second setting, a whole number as Spark's ``getLong`` reads it: ``None`` when unset or not positive
    (Spark's "no limit"); ``inf``, ``nan`` or a fraction is refused, naming ``key``."""
    rate = settings.get_long(key)
    return float(rate) if rate is not None and rate > 0 else None


@attrs.frozen
class ReceiverSettings:
    """What a receiver stream reads from Spark's settings, checked when the stream is made.

    Attributes:
        restart_delay: ``spark.streaming.receiverRestartDelay`` (ms, Spark's ``getInt``, not negative; 2000).
        block_interval: ``spark.streaming.blockInterval`` (a positive time string, ms by default; 200 ms).
        max_rate: ``spark.streaming.receiver.maxRate`` in records per second, a whole number as Spark's
            ``getLong`` reads it (``None``: unset, 0 or less: no limit).
        initial_rate: ``spark.streaming.backpressure.initialRate``, read the same way (default: ``max_rate``).
    """

    restart_delay: Duration
    block_interval: Duration
    max_rate: float | None
    initial_rate: float | None

    @classmethod
    def read(cls, settings: SparkSettings) -> ReceiverSettings:
        """Read them from ``settings`` (no py4j call).

        Raises:
            InvalidPipelineError: a malformed whole number, a rate among them (Spark's message, naming the
                setting), a negative restart delay, or a block interval that is not positive (Spark's message).
            InvalidDurationError: a malformed block interval.
        """
        restart_delay = settings.get_int("spark.streaming.receiverRestartDelay", 2000)
        if restart_delay < 0:  # Spark's restart thread fails to sleep; here it would reconnect without a pause
            raise InvalidPipelineError(f"spark.streaming.receiverRestartDelay must be a non-negative number of "
                                       f"milliseconds, got {restart_delay}; set it to e.g. 2000")
        interval = settings.get("spark.streaming.blockInterval", "200ms") or "200ms"
        block_interval = time_string_as(interval, "ms", "spark.streaming.blockInterval")
        if block_interval <= 0:  # Spark's BlockGenerator requires it (a block every 0 ms would spin)
            raise InvalidPipelineError("requirement failed: 'spark.streaming.blockInterval' should be a positive value")
        # Spark's receiver rate limit: spark.streaming.receiver.maxRate caps every rate, and
        # spark.streaming.backpressure.initialRate (default: the cap) is where it starts.
        max_rate = _positive_rate(settings, "spark.streaming.receiver.maxRate")
        initial = _positive_rate(settings, "spark.streaming.backpressure.initialRate")
        return cls(Duration(restart_delay), Duration(block_interval), max_rate, initial if initial is not None else max_rate)


class WriteAheadLogError(StreamingError, OSError):
    """A receiver could not write a block of its write-ahead log (a full disk, a lost file system).

    Raised for the batch that needed the block (its generation fails, no offsets are logged for
    it); the receiver takes no more input meanwhile, and its held records go into the first
    block written once the writes succeed again.
    """


@attrs.frozen
class ReceiverOutcome:
    """How one run of a receiver ended: restart after the delay, or stop for good (with why, and the error if any)."""

    restart: bool
    message: str
    error: BaseException | None = None
    dropped: bool = False
    """The driver dropped the task's connection (a broken rule, an idle timeout): this is why, whatever the job says."""



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

    reports_latest = False  # its data is found while a batch is planned: progress shows latestOffset null, as Spark's file source

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
        settings = ReceiverSettings.read(env.spark.settings())
        self.restart_delay = settings.restart_delay if restart_delay is None else restart_delay
        self._allocated: dict[Time, list[Any]] = {}
        self.block_interval = settings.block_interval
        # With a checkpoint: the write-ahead log, its newest block, the blocks in memory, and
        # the block whose write failed (its records wait in the buffer, which is paused meanwhile).
        self._block_log: BlockLog | None = None
        self._last_entry = -1
        self._blocks: dict[int, list[Any]] = {}
        self._failed_entry: int | None = None  # the block whose write failed last (cleared by a successful write)
        self._flush_lock: anyio.Lock | None = None
        self._purged_below = 0
        self.max_rate = settings.max_rate
        self.initial_rate = settings.initial_rate
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
        """Store ``records`` as the rate limit allows them (and the buffer has room), in order.

        They go in slices of at most a block interval's worth at the current rate, each stored
        once the limiter admits it, so a large read (a socket's 64 KiB of lines) never passes in
        one go: the rest waits here, and the source, no longer read meanwhile, is held back by
        its own flow control. A rate change applies at once, to the wait and the size of the next slice.
        """
        limiter = self.rate_limiter()
        start = 0
        while start < len(records):
            end = start + await limiter.acquire_slice(len(records) - start, self.block_interval)
            await self._buffer.put_many(records[start:end])
            start = end

    async def _store(self, record: Any) -> None:
        """Store one record once the rate limit allows it and the buffer has room."""
        await self.rate_limiter().acquire(1)
        await self._buffer.put(record)

    @property
    def receiver_name(self) -> str:
        """The receiver's name in its events, as Spark names it: ``"SocketReceiver-0"``."""
        return f"{self._receiver_class}-{self.id}"

    # -- the receiver side (runtime's event loop) --

    async def _receive(self) -> ReceiverOutcome:
        """Receive until the source ends or fails; store records in ``self._buffer``."""
        raise NotImplementedError

    async def run_receiver(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        runtime = self._env.runtime
        delay = self.restart_delay
        # Ready at once, as Spark's receiver start returns before the socket connects: a source
        # that is slow to come up must not hold up the context's start.
        task_status.started()
        final = ReceiverOutcome(False, "Stopped by driver")
        try:
            while True:
                if not self._reports_start:
                    await runtime.listener_bus.post(ReceiverStarted(self._info(active=True)))
                    self._log.info("receiver started", receiver=self.receiver_name)
                try:
                    outcome = await self._receive()
                except Exception as exc:  # a bug in a receiver: treat like a failed connection
                    outcome = ReceiverOutcome(True, "Error receiving data", exc)
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
        # The newest block always stays: a restart numbers its new blocks after the newest one on disk, and the
        # offsets log points at it (purged, the next run numbered from 0 again: its first batch read nothing).
        below = min(self._first_entry_needed(end), self._last_entry)
        if below <= self._purged_below:
            return
        for entry in [e for e in self._blocks if e < below]:
            del self._blocks[entry]
        self._purged_below = below
        if self._block_log is not None:
            await anyio.to_thread.run_sync(self._block_log.purge, below)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} [{self._buffer!r} | {len(self._allocated)} batches allocated]>"
