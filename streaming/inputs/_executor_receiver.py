"""A socket receiver as a long-running task on an executor (Spark's ``ReceiverSupervisorImpl`` on an executor).

The task runs in a Python worker: it reads the source, cuts what it read into a block every
block interval, writes each block whole into the stream's write-ahead log (``sources/<id>/<N>``
of the checkpoint: a path the executors share with the driver, or any URI, which the task reaches
through fsspec) and reports it to the driver over a control connection. The driver allocates
reported blocks to batches, and a batch's tasks read them back from the log: the records never
pass through the driver. The task side needs the standard library, and fsspec for a URI; the
driver side is in ``SocketInputDStream``.
"""

from __future__ import annotations

import math
import select
import socket
import time
from typing import Any, Iterable, Iterator

import attrs

from scheduler import CheckpointError, CorruptCheckpointError, redact_uri, task_checkpoint_path

from ..network import DEFAULT_MAX_LINE_LENGTH, LineDecoder, LineTooLongError, connect
from ..recovery import BlockLog, decode_block
from ._control import MAX_REPORT_MESSAGE, RECEIVER_ROLE

__all__ = ["ReceiverTaskSpec", "read_block_file", "read_block_files", "run_receiver_task", "run_receiver_tasks"]

_RECV_BYTES = 65536
_MAX_COMMAND = 4096  # the driver's commands are a few bytes: "stop", "rate <r>"


@attrs.frozen
class ReceiverTaskSpec:
    """What the receiver task needs: the source, the driver's control address, the log and the pacing.

    Attributes:
        stream_id: the input stream's id (for messages).
        source_host: the source's host.
        source_port: the source's port.
        driver_host: where the driver listens for the task's reports.
        driver_port: that listener's port.
        log_dir: the stream's write-ahead log directory: a path the executors share, or a URI
            (reached through fsspec: :func:`~scheduler.task_checkpoint_path`).
        first_entry: the number of the first block this task writes.
        block_interval_ms: how often what was read becomes a block.
        restart_delay_ms: how long to wait before reconnecting to the source.
        rate: records per second at most when the task starts (``None``: no limit); the driver
            sends each new rate (backpressure) over the control connection.
        max_line_length: the longest line taken, in characters; a longer one drops the source's
            connection (reported, then made again after the restart delay).
        token: the secret of this launch: the task proves it in its hello to the driver's
            control channel (the token itself never crosses that connection). It reaches the
            executor inside this spec, in the job's closure, over Spark's RPC (authenticate and
            encrypt that with ``spark.authenticate`` and ``spark.network.crypto.enabled`` where
            others can listen). Left out of the spec's repr.
        heartbeat_ms: how often the task reports ``P`` when it has nothing else to say, so the
            driver's idle timeout (``spark.network.timeout``) does not cut a quiet receiver.
    """

    stream_id: int
    source_host: str
    source_port: int
    driver_host: str
    driver_port: int
    log_dir: str
    first_entry: int
    block_interval_ms: int
    restart_delay_ms: int
    rate: float | None = None
    max_line_length: int = DEFAULT_MAX_LINE_LENGTH
    token: str = attrs.field(kw_only=True, repr=False)
    heartbeat_ms: int = attrs.field(kw_only=True, default=30_000)


def read_block_file(path: str) -> list[Any]:
    """The records of one block file (run by a batch's task on an executor).

    Raises:
        CorruptCheckpointError: the file is not a whole receiver block (a ``ValueError``).
    """
    data = task_checkpoint_path(path).read_bytes()
    if data is None:
        raise CorruptCheckpointError(f"receiver block {path} is missing from the write-ahead log")
    return decode_block(data, path)


def read_block_files(paths: Iterable[str]) -> Iterator[Any]:
    """Every record of the given block files, in order (a ``mapPartitions`` function)."""
    for path in paths:
        yield from read_block_file(path)


class Pacer:
    """Records per second at most, with a second's worth of unused allowance kept (as Spark's receiver limiter).

    Pure arithmetic over the times it is given, so the task's pacing is testable without a clock.
    The task takes what it read in slices of at most :meth:`slice_size` records, each once
    :meth:`wait` says 0, so nothing is taken far ahead of the rate.

    Args:
        rate: records per second, or ``None`` for no limit.
        now: the monotonic time, in seconds, the allowance starts from.
    """

    def __init__(self, rate: float | None, now: float) -> None:
        """A pacer at ``rate`` from ``now``."""
        self.rate = rate
        self._free_at = now  # when the records taken so far are paid for

    def set_rate(self, rate: float | None, now: float) -> None:
        """Pace at ``rate`` from ``now`` on, at once: what is still owed is repriced at the new rate (a higher rate
        shortens the wait); from no limit, pacing starts afresh."""
        if self.rate is None or rate is None:
            self._free_at = now
        else:
            self._free_at = max(self._free_at, now - 1.0)
            if self._free_at > now:
                self._free_at = now + (self._free_at - now) * self.rate / rate
        self.rate = rate

    def wait(self, now: float) -> float:
        """Seconds to wait before taking more records (0: take now)."""
        return 0.0 if self.rate is None else max(0.0, self._free_at - now)

    def slice_size(self, seconds: float) -> int | None:
        """The most records to take at once: ``seconds``' worth at the rate, at least 1 (``None``: no limit)."""
        return None if self.rate is None else max(1, int(self.rate * seconds))

    def take(self, count: int, now: float) -> None:
        """Account for ``count`` records taken at ``now``."""
        if self.rate is not None:
            self._free_at = max(self._free_at, now - 1.0) + count / self.rate


class _Control:
    """The task's end of the control connection: reports out; ``stop`` and ``rate <r>`` in.

    It connects through the driver's front door, proving the spec's token (:func:`streaming.network.connect`).
    """

    def __init__(self, spec: ReceiverTaskSpec) -> None:
        self.sock = connect(spec.driver_host, spec.driver_port, spec.token, RECEIVER_ROLE, {"stream": spec.stream_id},
                            timeout_s=30)
        self.sock.settimeout(None)
        self._pending = b""
        self.stopped = False
        self.rates: list[float | None] = []  # received, not yet applied
        self._heartbeat = spec.heartbeat_ms / 1000
        self._last_sent = time.monotonic()

    def send(self, line: str) -> None:
        if line.startswith("E ") and len(line) > MAX_REPORT_MESSAGE + 2:
            line = line[:MAX_REPORT_MESSAGE + 2 - 3] + "..."
        self.sock.sendall(line.replace("\n", " ").encode("utf-8") + b"\n")
        self._last_sent = time.monotonic()

    def heartbeat(self) -> None:
        """Report ``P`` if nothing was sent for a heartbeat interval."""
        if time.monotonic() - self._last_sent >= self._heartbeat:
            self.send("P")

    def poll(self) -> None:
        """Read what the driver sent without waiting; a closed connection means stop too."""
        while not self.stopped:
            ready, _, _ = select.select([self.sock], [], [], 0)
            if not ready:
                return
            data = self.sock.recv(4096)
            if not data:  # the driver is gone: nothing will read our blocks
                self.stopped = True
                return
            self._pending += data
            *lines, self._pending = self._pending.split(b"\n")
            if len(self._pending) > _MAX_COMMAND:  # not the driver's commands: stop rather than buffer
                self.stopped = True
                return
            for line in lines:
                command, _, value = line.decode("utf-8", "replace").partition(" ")
                if command == "stop":
                    self.stopped = True
                elif command == "rate":
                    try:
                        rate = None if value == "none" else float(value)
                    except ValueError:
                        continue
                    if rate is None or (math.isfinite(rate) and rate > 0):
                        self.rates.append(rate)


class _Blocks:
    """Cuts records into blocks, writes each whole into the log (the driver's ``BlockLog``) and reports it.

    A write that fails (a full disk, a lost file system) keeps the records and sets
    :attr:`failing`: the task then reads nothing more from its source until a write succeeds
    (the source is held back by TCP), so what waits here stays at one block interval's worth.
    """

    def __init__(self, spec: ReceiverTaskSpec, control: _Control) -> None:
        self._log = BlockLog(task_checkpoint_path(spec.log_dir))
        self._entry = spec.first_entry
        self._control = control
        self.records: list[Any] = []
        self.failing = False

    def flush(self) -> None:
        """Write what was read as the next block and report it; on failure keep it (reported once as ``E``)."""
        while self.records:
            try:
                if self.failing:  # the failed attempt may have left the block on disk: kept, never written twice
                    written = self._log.write_again(self._entry, self.records)
                else:
                    self._log.write(self._entry, self.records)
                    written = len(self.records)
            except CheckpointError:
                raise  # another receiver writes this log: nothing here can fix that
            except Exception as exc:
                if not self.failing:
                    # redacted: a file system's error may name the block's URI with its credentials
                    self._control.send(f"E Error writing the write-ahead log; input paused: {type(exc).__name__}: "
                                       f"{redact_uri(str(exc))}")
                self.failing = True
                return
            self.failing = False
            self._control.send(f"B {self._entry} {written}")
            self._entry += 1
            del self.records[:written]


def _wait(seconds: float, control: _Control, *, until_rate: bool = False) -> None:
    """Sleep up to ``seconds``, waking when the driver says stop (or, ``until_rate``, sends a rate)."""
    deadline = time.monotonic() + seconds
    while not control.stopped and not (until_rate and control.rates):
        control.heartbeat()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        select.select([control.sock], [], [], min(left, 0.2))
        control.poll()


def _attempt_number() -> int:
    """This Spark task's attempt number (0 outside a task)."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return 0
    context = TaskContext.get()
    return 0 if context is None else int(context.attemptNumber())


def _finish(decoder: LineDecoder, into: list[Any], reason: str) -> str:
    """Keep the source's unterminated last line (it ended) in ``into``; why the connection ended."""
    try:
        into.extend(decoder.finish())
    except LineTooLongError as exc:
        into.extend(exc.lines)
        return f"Error receiving data: {exc}"
    return reason


def _task_identity() -> list[str]:
    """This Spark task's stage and attempt ids (the driver finds its executor by them); none outside a task."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return []
    context = TaskContext.get()
    return [] if context is None else [str(context.stageId()), str(context.taskAttemptId())]


def run_receiver_task(spec: ReceiverTaskSpec) -> None:
    """Receive lines from the source until the driver says stop (or goes away); blocking, in the task.

    Reconnects after the restart delay when the source fails or ends, reporting each as
    ``E <message>``; ``H <host> [<stage> <task>]`` first; ``S`` when connected; ``B <entry> <count>`` for every
    block written; ``R <rate>`` when it applied a rate the driver sent; ``X`` when it stops (after writing what it
    read). Records are paced to the spec's rate, then to each rate the driver sends. While the log's writes fail
    (``E`` once) nothing more is read from the source; what was read is written once a write succeeds (at a stop
    while they fail, it is lost, as in a crash).
    """
    control = _Control(spec)
    control.send(" ".join(["H", socket.gethostname(), *_task_identity()]))
    blocks = _Blocks(spec, control)
    interval = spec.block_interval_ms / 1000
    pacer = Pacer(spec.rate, time.monotonic())
    try:
        while not control.stopped:
            try:
                source = socket.create_connection((spec.source_host, spec.source_port),
                                                  timeout=min(10.0, spec.heartbeat_ms / 1000))
            except OSError as exc:
                control.send(f"E Error connecting to {spec.source_host}:{spec.source_port}: {exc!r}")
                _wait(spec.restart_delay_ms / 1000, control)
                continue
            source.settimeout(None)
            control.send("S")
            decoder = LineDecoder(spec.max_line_length)
            next_block = time.monotonic() + interval
            reason = ""
            pending: list[Any] = []  # read, not yet admitted by the pacer: nothing more is read meanwhile
            ended = False  # the source ended or failed: admit what is pending, then reconnect
            with source:
                while not control.stopped and (pending or not ended):
                    now = time.monotonic()
                    control.heartbeat()
                    if control.rates:
                        pacer.set_rate(control.rates[-1], now)
                        control.rates.clear()
                        control.send(f"R {pacer.rate or 'none'}")
                    if now >= next_block:
                        blocks.flush()
                        next_block = now + interval
                    if blocks.failing:  # read nothing more until the log takes what was read
                        _wait(max(0.001, next_block - now), control)
                        continue
                    if pending:  # a block interval's worth at most at a time, each once the pacer allows it
                        pause = pacer.wait(now)
                        if pause > 0:
                            _wait(min(next_block - now, max(0.001, pause)), control, until_rate=True)
                            continue
                        size = pacer.slice_size(interval)
                        taken = len(pending) if size is None else min(size, len(pending))
                        blocks.records.extend(pending[:taken])
                        del pending[:taken]
                        pacer.take(taken, now)
                        continue
                    ready, _, _ = select.select([source, control.sock], [], [], max(0.0, next_block - now))
                    if control.sock in ready:
                        control.poll()
                    if source not in ready:
                        continue
                    try:
                        data = source.recv(_RECV_BYTES)
                    except OSError as exc:
                        reason, ended = _finish(decoder, pending, f"Error receiving data: {exc!r}"), True
                        continue
                    if not data:
                        reason, ended = _finish(decoder, pending, "Socket data stream had no more data"), True
                        continue
                    try:
                        pending.extend(decoder.feed(data))
                    except LineTooLongError as exc:  # a bad stream: keep what came before, reconnect
                        pending.extend(exc.lines)
                        reason, ended = f"Error receiving data: {exc}", True
            blocks.records.extend(pending)  # told to stop meanwhile: what was read is written, unpaced
            blocks.flush()
            if reason and not control.stopped:
                control.send(f"E {reason}")
                _wait(spec.restart_delay_ms / 1000, control)
        blocks.flush()
        control.send("X")
    finally:
        control.sock.close()


def run_receiver_tasks(specs: Iterable[ReceiverTaskSpec]) -> None:
    """A ``foreachPartition`` function: run the partition's receiver (one spec per partition).

    A re-attempt (Spark retried the task after its executor or worker died) returns at once, as
    Spark's receiver tasks do: its spec is stale (the first block number, the driver's control
    port, which accepts one connection) and the driver starts a new task with a fresh one.
    """
    if _attempt_number() != 0:
        return
    for spec in specs:
        run_receiver_task(spec)
