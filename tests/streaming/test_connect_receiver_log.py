"""A driver receiver's write-ahead log on Spark Connect: logged blocks replay into the re-run batch after getOrCreate.

The receiver collects records in this process; with ``ssc.checkpoint(dir)`` it writes each block
under ``sources/<id>/`` before the batch that takes it runs. A batch fails after its blocks were
logged (what a crash between the log and the commit leaves), the context stops, and ``getOrCreate``
on the same Connect session re-runs that batch from the log while the new source yields other
records. Every record is counted exactly once, and both runs together give what the same scenario
gives on classic Spark.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from listeners import EventRecorder
from scheduler import ManualClock
from streaming import StreamingContext
from tests.streaming.test_dstream_recovery import run_program

pytestmark = [pytest.mark.connect, pytest.mark.spark]

INTERVAL_MS = 1000


class Run:
    """One program run: its word counts by batch time, and a switch that fails one batch time's output."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.outputs: dict[int, Any] = {}
        self.kinds: set[str] = set()
        self.fail_at = fail_at

    def output(self, time: Any, rdd: Any) -> None:
        ms = int(time.timestamp() * 1000)
        if ms == self.fail_at:
            raise RuntimeError(f"simulated crash in batch {ms}")
        self.kinds.add(type(rdd).__name__)
        self.outputs[ms] = sorted(rdd.collect())


class LineServer:
    """A TCP server on localhost that sends each connection the next script of lines, then closes it."""

    def __init__(self, scripts: list[list[str]]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self._scripts = list(scripts)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        for lines in self._scripts:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall("".join(f"{line}\n" for line in lines).encode())

    def close(self) -> None:
        self.sock.close()
        self._thread.join()


Source = Callable[[StreamingContext, list[str]], Any]


def async_source(ssc: StreamingContext, items: list[str]) -> Any:
    async def source() -> Any:
        for item in items:
            yield item
    return ssc.asyncIterableStream(source)


def socket_source(servers: list[LineServer]) -> Source:
    """A socketTextStream (default placement: the driver) on a server that sends the run's lines once and closes."""
    def make(ssc: StreamingContext, items: list[str]) -> Any:
        server = LineServer([items])
        servers.append(server)
        return ssc.socketTextStream("127.0.0.1", server.port, restartDelay=3600)
    return make


def program(run: Run, source: Source, items: list[str]) -> Callable[[StreamingContext], None]:
    """Word counts per batch over a receiver placed in this process."""
    def build(ssc: StreamingContext) -> None:
        source(ssc, items).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b, 2).foreachRDD(run.output)
    return build


def run_receiver_program(spark: Any, directory: Path, clock: ManualClock, batches: int,
                         build: Callable[[StreamingContext], None], *, resume: bool) -> None:
    """:func:`run_program`, with the batches run once the receiver has stopped: its source ended (the iterable is
    done, the server closed), so every record is stored."""
    recorder = EventRecorder()

    def build_and_record(ssc: StreamingContext) -> None:
        build(ssc)
        ssc.addStreamingListener(recorder)

    run_program(spark, directory, clock, batches, build_and_record, resume=resume, until_ready=lambda: recorder.wait_for(
        lambda events: any(type(e).__name__ == "ReceiverStopped" for e in events)))


def crash_and_resume(spark: Any, directory: Path, source: Source) -> tuple[Run, Run]:
    """Batch 1 takes the logged records a, b, a and fails; the resumed run re-runs it from the log, then batch 2 takes c."""
    first = Run(fail_at=1 * INTERVAL_MS)
    run_receiver_program(spark, directory, ManualClock(0), 1, program(first, source, ["a", "b", "a"]), resume=False)
    second = Run()
    run_receiver_program(spark, directory, ManualClock(INTERVAL_MS), 1, program(second, source, ["c"]), resume=True)
    return first, second


@pytest.fixture(params=["async", "socket"])
def source(request: pytest.FixtureRequest) -> Iterator[Source]:
    if request.param == "async":
        yield async_source
        return
    servers: list[LineServer] = []
    yield socket_source(servers)
    for server in servers:
        server.close()


def test_a_driver_receiver_s_logged_blocks_replay_on_connect_exactly_once_as_on_classic_spark(
        connect_session: Any, spark_context: Any, tmp_path: Path, source: Source) -> None:
    """The Connect run's two halves give classic Spark's outputs; the re-run batch has the logged records, not the new source's."""
    classic = crash_and_resume(spark_context, tmp_path / "classic", source)
    first, second = crash_and_resume(connect_session, tmp_path / "connect", source)

    assert first.outputs == {}
    log = tmp_path / "connect" / "sources" / "0"
    assert sorted(n for n in os.listdir(log) if n.isdigit()), "the Connect run wrote the records to the write-ahead log"
    assert second.outputs == {1000: [("a", 2), ("b", 1)], 2000: [("c", 1)]}
    assert (first.outputs, second.outputs) == (classic[0].outputs, classic[1].outputs)
    assert second.kinds == {"FrameRDD"}  # the replayed blocks run on the server, not through a SparkContext
