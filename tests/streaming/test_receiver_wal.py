"""A receiver's write-ahead log on a file system that fails writes (a full disk): on the driver, on real Spark, and
in an executor's receiver task (without Spark).

The checkpoint is on the local disk, and the local file manager (``scheduler.LOCAL_FILES``)
refuses the receiver's block files while a switch is on, as a full disk would. The driver's
program runs on a ManualClock, batch by batch, so what the receiver holds is counted, not timed.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from listeners import EventRecorder, ReceiverError
from scheduler import LOCAL_FILES, Duration, JobFailedError, ManualClock
from streaming import StreamingContext
from streaming.inputs import ReceiverTaskSpec, WriteAheadLogError, read_block_file
from streaming.inputs._executor_receiver import run_receiver_task
from tests.anyio_support import BACKENDS
from tests.streaming.control_support import accept_task
from tests.support import advance

INTERVAL_MS = 1000
CAPACITY = 40


class FullDisk:
    """Fails the creation of files under ``directory`` while ``full`` (the other files are written); ``fail_after``
    times, fails one after making it (as a failed flush of its directory would)."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.prefix = str(directory) + os.sep
        self.full = False
        self.fail_after = 0
        self.refused = 0
        self._refusal = threading.Condition()
        real = LOCAL_FILES.create_new

        def create_new(path: str, data: bytes, *, durable: bool = True) -> bool:
            if self.full and path.startswith(self.prefix):
                with self._refusal:
                    self.refused += 1
                    self._refusal.notify_all()
                raise OSError(errno.ENOSPC, "No space left on device", path)
            created = real(path, data, durable=durable)
            if self.fail_after and path.startswith(self.prefix):
                self.fail_after -= 1
                raise OSError(errno.EIO, "Input/output error", path)
            return created

        monkeypatch.setattr(LOCAL_FILES, "create_new", create_new)

    def wait_for_refusals(self, count: int) -> None:
        """Wait (a minute at most: a hang guard) until ``count`` writes were refused in all."""
        with self._refusal:
            assert self._refusal.wait_for(lambda: self.refused >= count, 60), f"{self.refused} refusals, waited for {count}"


@pytest.mark.spark
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_receiver_whose_log_writes_fail_holds_its_input_and_loses_nothing(
        spark_context: Any, tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> None:
    """While block writes fail, the receiver takes no more than its buffer's bound from an endless source, the batches
    that needed a block fail with WriteAheadLogError, and once writes succeed every record reaches one batch, in order
    (also after a write that failed once its block was on disk)."""
    ck = tmp_path / "ck"
    disk = FullDisk(ck / "sources" / "0", monkeypatch)
    produced = 0
    outputs: dict[int, list[int]] = {}

    async def endless() -> Any:
        nonlocal produced
        while True:
            produced += 1
            yield produced - 1

    def output(time: Any, rdd: Any) -> None:
        outputs[int(time.timestamp() * 1000)] = rdd.collect()

    async def program() -> None:
        ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
        stream = ssc.asyncIterableStream(endless, maxBufferedRecords=CAPACITY)
        stream.foreachRDD(output)
        ssc.checkpoint(str(ck))
        recorder = EventRecorder()
        ssc.addStreamingListener(recorder)

        async def batch() -> None:
            await advance(ssc.runtime, clock, INTERVAL_MS)

        async with ssc:
            await ssc.start_async()
            await ssc.runtime.wait_until_idle()
            await batch()
            assert outputs and produced > 0
            disk.full = True
            for _ in range(3):
                await batch()
            delivered = sum(len(records) for records in outputs.values())
            # Held: the buffer's bound, plus the one item the source yielded and the receiver waits to store.
            assert produced - delivered <= CAPACITY + 1, (produced, delivered)
            assert stream.held_records == CAPACITY  # type: ignore[attr-defined]
            assert disk.refused >= 3 and sorted(outputs) == [1000]
            with pytest.raises(JobFailedError) as failed:
                await ssc.runtime.await_termination(Duration(0))
            disk.full = False
            for _ in range(2):
                await batch()
            disk.fail_after = 1  # a block is on disk though its write failed: kept, not written twice
            for _ in range(2):
                await batch()
            assert disk.fail_after == 0
            await ssc.stop_async(stopSparkContext=False)

        cause = failed.value.__cause__
        assert isinstance(cause, WriteAheadLogError) and isinstance(cause, OSError)
        entry = int(str(cause).split(" could not write block ")[1].split()[0])
        assert str(cause) == (
            f"AsyncIterableReceiver-0 could not write block {entry} of its write-ahead log ({ck / 'sources' / '0' / str(entry)}): "
            f"OSError: [Errno 28] No space left on device: '{ck / 'sources' / '0' / str(entry)}'; the receiver takes no more "
            f"input until a write succeeds ({CAPACITY} records held, at most {CAPACITY}; retried every 200 ms and at each "
            "batch, and nothing is lost); free space on the checkpoint's file system or restore its access")
        errors = recorder.of_type(ReceiverError)  # once each time the writes start failing: the full disk, the EIO
        assert [(e.receiver_info.name, e.receiver_info.active, e.receiver_info.last_error_message)  # type: ignore[attr-defined]
                for e in errors] == [("AsyncIterableReceiver-0", True, "Error writing the write-ahead log; input paused")] * 2

    anyio.run(program, backend=backend)
    assert sorted(outputs)[:3] == [1000, 5000, 6000]  # the batches at 2000-4000 failed: no offsets, no output
    assert 8000 in outputs
    received = [record for time in sorted(outputs) for record in outputs[time]]
    assert received == list(range(len(received))) and len(received) > CAPACITY  # each record once, in order
    blocks = sorted(int(name) for name in os.listdir(ck / "sources" / "0") if name.isdigit())
    assert blocks == list(range(blocks[0], blocks[0] + len(blocks)))  # no hole where the writes failed


def test_a_receiver_task_reads_nothing_while_its_log_writes_fail_and_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor's receiver task whose block writes fail reports it once (E), reads no more from its source, and
    writes what it held first once the writes succeed: every line in one block, in order, entries consecutive."""
    log = tmp_path / "sources" / "0"
    disk = FullDisk(log, monkeypatch)
    source = socket.create_server(("127.0.0.1", 0))
    driver = socket.create_server(("127.0.0.1", 0))
    spec = ReceiverTaskSpec(0, "127.0.0.1", source.getsockname()[1], "127.0.0.1", driver.getsockname()[1], str(log),
                            first_entry=0, block_interval_ms=20, restart_delay_ms=10, token="t0k3n")
    task = threading.Thread(target=run_receiver_task, args=(spec,), daemon=True)
    task.start()
    control = accept_task(driver, "t0k3n", 0)
    reports = control.makefile("r", encoding="utf-8")
    conn, _ = source.accept()
    seen: list[str] = []

    def until(predicate: Any) -> None:
        while not predicate():
            line = reports.readline()
            assert line, f"the task closed its control connection; it reported {seen}"
            seen.append(line.strip())

    def received() -> int:
        return sum(int(line.split()[2]) for line in seen if line.startswith("B "))

    def send(prefix: str) -> None:
        conn.sendall("".join(f"{prefix}{i}\n" for i in range(10)).encode())

    send("a")
    until(lambda: received() == 10)
    disk.full = True
    send("b")
    until(lambda: seen[-1].startswith("E "))
    assert seen[-1] == f"E Error writing the write-ahead log; input paused: OSError: [Errno 28] No space left on device: '{log / '1'}'"
    failed_at = len(seen)
    send("c")  # sent while the task is paused: it must not take these in
    disk.wait_for_refusals(disk.refused + 2)  # the task retries every block interval
    disk.full = False
    until(lambda: received() == 30)
    control.sendall(b"stop\n")
    until(lambda: seen[-1] == "X")
    task.join(60)
    assert not task.is_alive()
    conn.close()
    source.close()
    driver.close()

    blocks = [line for line in seen[failed_at:] if line.startswith("B ")]
    entries = [int(line.split()[1]) for line in seen if line.startswith("B ")]
    assert entries == list(range(len(entries)))
    first_after = read_block_file(str(log / blocks[0].split()[1]))
    assert first_after and all(line.startswith("b") for line in first_after)  # what was held, nothing read meanwhile
    assert [r for e in entries for r in read_block_file(str(log / str(e)))] == [f"{p}{i}" for p in "abc" for i in range(10)]
    assert sum(line.startswith("E ") for line in seen) == 1


def test_a_receiver_task_drops_a_connection_whose_line_is_too_long_and_reconnects(tmp_path: Path) -> None:
    """A line over the task's bound: the lines before it are kept, the connection is dropped (E, with the reason) and made
    again after the restart delay."""
    source = socket.create_server(("127.0.0.1", 0))
    driver = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        for data in (b"ok\n" + b"x" * 50 + b"\nlost\n", b"again\n"):
            conn, _ = source.accept()
            with conn:
                conn.sendall(data)
                if data.startswith(b"again"):
                    conn.recv(1)  # hold the second connection open until the task goes away

    threading.Thread(target=serve, daemon=True).start()
    spec = ReceiverTaskSpec(0, "127.0.0.1", source.getsockname()[1], "127.0.0.1", driver.getsockname()[1], str(tmp_path),
                            first_entry=0, block_interval_ms=20, restart_delay_ms=10, max_line_length=10, token="t0k3n")
    task = threading.Thread(target=run_receiver_task, args=(spec,), daemon=True)
    task.start()
    control = accept_task(driver, "t0k3n", 0)
    reports = control.makefile("r", encoding="utf-8")
    seen: list[str] = []
    while sum(int(line.split()[2]) for line in seen if line.startswith("B ")) < 2:
        seen.append(reports.readline().strip())
    control.sendall(b"stop\n")
    while seen[-1] != "X":
        seen.append(reports.readline().strip())
    task.join(60)
    source.close()
    driver.close()
    assert [line for line in seen if line.startswith("E ")] == [
        "E Error receiving data: a line of 50 characters is longer than spark.aiodstream.receiver.maxLineLength (10): the "
        "connection is dropped and made again after the restart delay; raise spark.aiodstream.receiver.maxLineLength if "
        "such lines are expected, or make the source end its lines"]
    assert seen.count("S") == 2
    entries = [int(line.split()[1]) for line in seen if line.startswith("B ")]
    assert [r for e in entries for r in read_block_file(str(tmp_path / str(e)))] == ["ok", "again"]


def test_a_quiet_receiver_task_says_it_is_alive_within_the_idle_timeout(tmp_path: Path) -> None:
    """A task whose source sends nothing reports P every heartbeat interval, so the driver's idle timeout
    (spark.network.timeout) never cuts a receiver that is merely quiet."""
    source = socket.create_server(("127.0.0.1", 0))
    driver = socket.create_server(("127.0.0.1", 0))
    spec = ReceiverTaskSpec(0, "127.0.0.1", source.getsockname()[1], "127.0.0.1", driver.getsockname()[1], str(tmp_path),
                            first_entry=0, block_interval_ms=20, restart_delay_ms=10, token="t0k3n", heartbeat_ms=30)
    task = threading.Thread(target=run_receiver_task, args=(spec,), daemon=True)
    task.start()
    control = accept_task(driver, "t0k3n", 0)
    conn, _ = source.accept()  # connected, and silent
    reports = control.makefile("r", encoding="utf-8")
    seen = [reports.readline().strip() for _ in range(5)]
    control.sendall(b"stop\n")
    while seen[-1] != "X":
        seen.append(reports.readline().strip())
    task.join(60)
    conn.close()
    source.close()
    driver.close()
    assert seen[0].startswith("H ") and seen[1] == "S" and seen[2:5] == ["P", "P", "P"]
