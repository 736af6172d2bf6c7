"""StreamingContext on a real local Spark: job groups, concurrent jobs, cancellation, real sources, async hosts.

Every test shares the session's SparkContext and waits on listener events (with a timeout), never
on fixed sleeps. Batch intervals are short; Spark jobs on a busy two-core machine are not, so the
timeouts are generous and the assertions never depend on how many batches ran.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from listeners import (
    BatchCompleted,
    BatchInfo,
    EventRecorder,
    OutputOperationCompleted,
    ReceiverError,
    ReceiverStarted,
    ReceiverStopped,
    StreamingEvent,
)
from scheduler import InvalidPipelineError, StreamingStateError
from streaming import StreamingContext, run_spark
from streaming.inputs import read_block_file
from tests.anyio_support import BACKENDS
from tests.support import advance, run_dstream_batches

pytestmark = pytest.mark.spark

WAIT_S = 90.0  # a hang guard only: Spark's first Python jobs can take many seconds on a loaded machine


class ThreadRecorder:
    """A listener for sync-API tests: records events; the test thread waits on a condition."""

    def __init__(self) -> None:
        self.events: list[StreamingEvent] = []
        self._cond = threading.Condition()

    def __call__(self, event: StreamingEvent) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[Sequence[StreamingEvent]], bool], what: str, timeout: float = WAIT_S) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self.events), timeout):
                kinds = [type(e).__name__ for e in self.events]
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; events so far: {kinds}")

    def of_type(self, kind: type) -> list[Any]:
        with self._cond:
            return [e for e in self.events if type(e) is kind]

    @property
    def batches(self) -> list[BatchInfo]:
        return [e.batch_info for e in self.of_type(BatchCompleted)]

    def wait_for_batches(self, count: int) -> list[BatchInfo]:
        self.wait_for(lambda evs: sum(type(e) is BatchCompleted for e in evs) >= count, f"{count} completed batches")
        return self.batches

    def wait_for_records(self, total: int) -> list[BatchInfo]:
        self.wait_for(lambda evs: sum(e.batch_info.num_records for e in evs if type(e) is BatchCompleted) >= total,
                      f"{total} records in completed batches")
        return self.batches


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Poll something outside the engine (a file written by a Spark task) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def blocking_partitions(started: str | Path, release: str | Path) -> Callable[[Any], Any]:
    """A ``mapPartitions`` function for a Spark task to stop during: it creates ``started``, then waits
    for ``release`` to exist (120 s at most, so no Python worker is left spinning)."""
    started_path, release_path = str(started), str(release)

    def block(rows: Any) -> Any:
        import os as _os  # inside: the function is pickled by value to the Python workers
        import time as _time

        open(started_path, "w").close()
        deadline = _time.monotonic() + 120
        while not _os.path.exists(release_path) and _time.monotonic() < deadline:
            _time.sleep(0.05)
        return rows

    return block


@pytest.fixture
def contexts(spark_context: Any) -> Iterator[Callable[..., tuple[StreamingContext, ThreadRecorder]]]:
    """Makes sync-API contexts with a recorder attached; stops them (not the SparkContext) afterwards."""
    made: list[StreamingContext] = []

    def make(batch_s: float = 0.2, **kwargs: Any) -> tuple[StreamingContext, ThreadRecorder]:
        ssc = StreamingContext(spark_context, batch_s, **kwargs)
        recorder = ThreadRecorder()
        ssc.addStreamingListener(recorder)
        made.append(ssc)
        return ssc, recorder

    yield make
    for ssc in made:
        ssc.stop(stopSparkContext=False)
    assert StreamingContext.getActive() is None


# -- listeners off the loop --


@pytest.mark.spark
def test_a_pyspark_listener_blocking_for_seconds_delays_neither_batches_nor_other_listeners(contexts: Any) -> None:
    """A pyspark StreamingListener blocks in its first onBatchCompleted until four more batches completed elsewhere.

    Its callbacks run on a thread of its own: the timer, the jobs and the other listener go on
    meanwhile, batch after batch on the grid. Were it on the loop, nothing would complete while it
    waits, and it would give up after WAIT_S.
    """
    from streaming import StreamingListener

    ssc, recorder = contexts(0.2)
    released = threading.Event()
    calls: list[int] = []

    class Blocking(StreamingListener):  # type: ignore[misc]
        def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803 (pyspark's names)
            calls.append(batchCompleted.batchInfo().batchTime().milliseconds())
            if len(calls) == 1:
                if _wait_batches(recorder, 5):
                    released.set()

    ssc.addStreamingListener(Blocking())
    ssc.queueStream([[i] for i in range(8)], default=[0]).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    batches = recorder.wait_for_batches(6)
    assert released.is_set(), "the other listener saw no batches while this one blocked"
    times = [b.batch_time.milliseconds for b in batches[:6]]
    assert [b - a for a, b in itertools.pairwise(times)] == [200] * 5
    assert not any(b.failed for b in batches[:6])
    recorder.wait_for(lambda _: len(calls) >= 6, "the blocked listener to catch up")
    assert calls[:6] == times  # in order, none lost


def _wait_batches(recorder: ThreadRecorder, count: int) -> bool:
    try:
        recorder.wait_for_batches(count)
    except AssertionError:
        return False
    return True


# -- Spark integration: job groups, concurrency, cancellation --


def test_each_batch_job_carries_a_job_group_and_a_description_naming_its_batch(contexts: Any, spark_context: Any) -> None:
    """Inside foreachRDD the Spark job group names the context, batch and output op, and the description names the batch time."""
    ssc, recorder = contexts()
    seen: list[tuple[int, int, str, str]] = []

    def output(op: int) -> Callable[[Any, Any], None]:
        def record(t: Any, rdd: Any) -> None:
            rdd.collect()
            seen.append((op, int(t.timestamp() * 1000), spark_context.getLocalProperty("spark.jobGroup.id"),
                         spark_context.getLocalProperty("spark.job.description")))
        return record

    stream = ssc.queueStream([[1, 2], [3]])
    stream.foreachRDD(output(0))
    stream.foreachRDD(output(1))
    ssc.start()
    batches = recorder.wait_for_batches(2)
    ssc.stop(stopSparkContext=False)

    assert [(op, t) for op, t, _, _ in seen[:4]] == [
        (0, batches[0].batch_time.milliseconds), (1, batches[0].batch_time.milliseconds),
        (0, batches[1].batch_time.milliseconds), (1, batches[1].batch_time.milliseconds),
    ]
    groups = {group for _, _, group, _ in seen}
    assert len(groups) == len(seen)  # one group per output operation of each batch
    for op, t, group, description in seen[:4]:
        assert f"-{t}-" in group
        # Spark's formatBatchTime: with milliseconds, as batches of 0.2 s are shorter than a second
        clock_time = time.strftime("%H:%M:%S", time.localtime(t / 1000)) + f".{t % 1000:03d}"
        assert description == f"Streaming job from [output operation {op}, batch time {clock_time}]"
        assert list(spark_context.statusTracker().getJobIdsForGroup(group)), f"no Spark job ran in group {group}"
    assert all(not b.failed for b in batches)


def test_the_job_group_hook_lives_as_long_as_a_running_context(contexts: Any, spark_context: Any) -> None:
    """The py4j client carries the job-group hook while a context runs jobs, and its own send_command again after the stop."""
    client = spark_context._gateway._gateway_client
    assert "send_command" not in vars(client)  # nothing left behind by earlier tests
    ssc, recorder = contexts()
    ssc.queueStream([[1, 2]]).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    recorder.wait_for_batches(1)
    assert "send_command" in vars(client)
    ssc.stop(stopSparkContext=False)
    assert "send_command" not in vars(client)
    assert spark_context.parallelize([1, 2, 3]).sum() == 6  # py4j still works without it


def test_an_output_that_reads_its_rdds_jvm_rdd_gets_it_made_at_generation_from_its_second_batch(spark_context: Any) -> None:
    """collect reads a map's JVM RDD: the first job makes it, and from then on it reaches foreachRDD made at generation
    (as pyspark's generation does); outputs unchanged. One batch at a time, on a manual clock."""
    from scheduler import ManualClock

    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, 1, clock=clock)
    seen: list[tuple[bool, list[int]]] = []
    ssc.queueStream([[1, 2], [3], [4]]).map(lambda x: x * 10).foreachRDD(
        lambda rdd: seen.append((rdd._jrdd_val is not None, rdd.collect())))
    assert run_dstream_batches(ssc, clock, 3) == []
    assert seen == [(False, [10, 20]), (True, [30]), (True, [40])]


def test_an_empty_default_list_is_no_default_as_in_pyspark(spark_context: Any) -> None:
    """pyspark tests `if default`: queueStream(..., default=[]) gives empty batches one empty partition (not one per
    core), and queueStream([], default=[]) is refused (pyspark fails with a bare IndexError)."""
    from scheduler import ManualClock

    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, 1, clock=clock)
    seen: list[tuple[int, list[int]]] = []
    ssc.queueStream([[1, 2]], default=[]).foreachRDD(lambda rdd: seen.append((rdd.getNumPartitions(), rdd.collect())))
    with pytest.raises(IndexError) as refused:
        ssc.queueStream([], default=[])
    assert str(refused.value) == ("list index out of range: queueStream needs at least one RDD or list, or a default "
                                  "that is not empty")
    assert run_dstream_batches(ssc, clock, 3) == []
    assert seen[1:] == [(1, []), (1, [])] and seen[0][1] == [1, 2]


def test_an_output_that_derives_a_new_rdd_never_gets_a_jvm_rdd_made_for_it(spark_context: Any) -> None:
    """count pipelines onto the map's parents and never reads the map's JVM RDD: none is made, in any batch."""
    from scheduler import ManualClock

    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, 1, clock=clock)
    seen: list[tuple[bool, int, bool]] = []
    ssc.queueStream([[1, 2], [3], [4, 5, 6]]).map(lambda x: x * 10).foreachRDD(
        lambda rdd: seen.append((rdd._jrdd_val is not None, rdd.count(), rdd._jrdd_val is not None)))
    assert run_dstream_batches(ssc, clock, 3) == []
    assert seen == [(False, 2, False), (False, 1, False), (False, 3, False)]


def test_an_rdd_whose_function_cannot_be_pickled_fails_its_output_operation_as_before(contexts: Any) -> None:
    """Making the JVM RDD at generation fails quietly; the job makes it again and fails the output operation with pickle's error."""
    ssc, recorder = contexts()
    lock = threading.Lock()  # cannot be pickled: neither can a function holding it
    ssc.queueStream([[1]]).map(lambda x: (x, lock)).foreachRDD(lambda rdd: rdd.collect())
    ssc.start()
    batch = recorder.wait_for_batches(1)[0]
    ssc.stop(stopSparkContext=False)
    reason = batch.output_operation_infos[0].failure_reason or ""
    assert batch.failed and "Could not serialize object" in reason, reason


def test_concurrent_jobs_run_the_output_operations_of_a_batch_as_parallel_spark_jobs(contexts: Any, tmp_path: Path) -> None:
    """With concurrentJobs=2 two output operations' Spark tasks are running at the same moment (a rendezvous in the tasks)."""
    ssc, recorder = contexts(0.2, concurrentJobs=2)
    rendezvous = str(tmp_path)

    def meet(me: str, other: str) -> Callable[[Any], Any]:
        def task(rows: Any) -> Any:
            # Runs in a Spark task: announce this job, then wait for the other job's task.
            import os as _os
            import time as _time

            open(_os.path.join(rendezvous, me), "w").close()
            deadline = _time.monotonic() + 60
            while not _os.path.exists(_os.path.join(rendezvous, other)):
                if _time.monotonic() > deadline:
                    raise RuntimeError(f"{me}: the other output operation's job never ran alongside")
                _time.sleep(0.01)
            return [me]
        return task

    results: list[tuple[Any, list[str]]] = []  # (batch time, what the job returned)
    stream = ssc.queueStream([[0]], oneAtATime=True, default=None)
    stream.foreachRDD(lambda t, rdd: results.append((t, rdd.coalesce(1).mapPartitions(meet("a", "b")).collect())))
    stream.foreachRDD(lambda t, rdd: results.append((t, rdd.coalesce(1).mapPartitions(meet("b", "a")).collect())))
    ssc.start()
    first = recorder.wait_for_batches(1)[0]
    ssc.stop(stopSparkContext=False)

    assert not first.failed, [o.failure_reason for o in first.output_operation_infos.values()]
    # The next batch's jobs may start while this one's run (two job threads): pick the first batch's.
    first_time = min(t for t, _ in results)
    assert sorted(got for t, got in results if t == first_time) == [["a"], ["b"]]
    ops = first.output_operation_infos
    assert ops[0].start_time is not None and ops[1].start_time is not None
    assert ops[1].start_time < ops[0].end_time  # type: ignore[operator]


def test_an_immediate_stop_cancels_the_running_spark_job_and_returns_promptly(contexts: Any, tmp_path: Path) -> None:
    """stop() during a long Spark action cancels the batch's job group: the action fails as cancelled; stop returns promptly."""
    ssc, recorder = contexts(0.2)
    started, release = str(tmp_path / "started"), str(tmp_path / "release")
    outcome: dict[str, BaseException] = {}
    action_ended = threading.Event()

    block = blocking_partitions(started, release)

    def long_action(rdd: Any) -> None:
        if outcome or action_ended.is_set():
            return
        try:
            rdd.coalesce(1).mapPartitions(block).count()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            action_ended.set()

    ssc.queueStream([[1]]).foreachRDD(long_action)
    try:
        ssc.start()
        wait_until(lambda: os.path.exists(started), "the long Spark task to start")
        began = time.monotonic()
        ssc.stop(stopSparkContext=False)
        stop_took = time.monotonic() - began
        assert action_ended.wait(WAIT_S), "the cancelled Spark action never returned"
    finally:
        open(release, "w").close()  # never leave a Python worker spinning
    assert stop_took < 2.0 + 8.0  # 2 s grace for running jobs (as Spark), then cancel; slack for a busy machine
    assert "cancelled" in str(outcome.get("error", "")).lower(), outcome
    assert "aiodstream-" in str(outcome["error"])  # the job group of the batch was what got cancelled
    [abandoned] = recorder.batches  # the batch is finalised as failed; the queued ones are dropped
    assert "was abandoned by an immediate stop" in (abandoned.output_operation_infos[0].failure_reason or "")


def test_an_immediate_stop_abandons_a_batch_whose_generation_hangs(contexts: Any) -> None:
    """A transform function (it runs as the batch is generated, on the graph's thread) that blocks for good: stop()
    abandons the generation after the 2 s grace for running work and returns while the function still blocks."""
    ssc, _ = contexts(0.2)
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()
    times: list[int] = []

    def hang_on_the_second_batch(t: Any, rdd: Any) -> Any:
        times.append(int(t.timestamp() * 1000))
        if len(times) == 2:
            entered.set()
            release.wait(2 * WAIT_S)  # longer than the test waits for the stop
            returned.set()
        return rdd

    ssc.queueStream([[1], [2], [3]]).transform(hang_on_the_second_batch).foreachRDD(lambda rdd: rdd.count())
    stopped = threading.Event()
    try:
        ssc.start()
        assert entered.wait(WAIT_S), "the second batch was never generated"
        threading.Thread(target=lambda: (ssc.stop(stopSparkContext=False), stopped.set()), daemon=True).start()
        assert stopped.wait(WAIT_S), "stop() waited for the hung generation"
        assert not returned.is_set() and ssc.getState() == "STOPPED" and len(times) == 2
    finally:
        release.set()


# -- sources --


class LineServer:
    """A TCP server on localhost for the socket stream: each connection gets the next script of lines."""

    def __init__(self, scripts: list[list[str]], *, listen: bool = True) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.scripts = scripts
        self.served = 0
        self.released = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        if listen:
            self.listen()

    def listen(self) -> None:
        self.sock.listen()
        self._thread.start()

    def _serve(self) -> None:
        for i, lines in enumerate(self.scripts):
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall("".join(f"{line}\n" for line in lines).encode())
                self.served += 1
                if i == len(self.scripts) - 1:
                    self.released.wait(WAIT_S)  # keep the last connection open until the test ends

    def close(self) -> None:
        self.released.set()
        self.sock.close()


def test_socket_stream_counts_records_per_batch_and_reconnects_after_the_server_drops_it(contexts: Any) -> None:
    """Lines from a real TCP connection reach batches and BatchInfo.numRecords; after the server closes, the receiver reconnects."""
    server = LineServer([[f"first {i}" for i in range(5)], [f"second {i}" for i in range(3)]])
    ssc, recorder = contexts(0.2)
    got: list[str] = []
    ssc.socketTextStream("127.0.0.1", server.port, restartDelay=0.1).foreachRDD(lambda rdd: got.extend(rdd.collect()))
    try:
        ssc.start()
        batches = recorder.wait_for_records(8)
        ssc.stop(stopSparkContext=False)
    finally:
        server.close()

    assert got == [f"first {i}" for i in range(5)] + [f"second {i}" for i in range(3)]
    assert sum(b.num_records for b in batches) == 8
    assert all(b.stream_id_to_input_info[0].num_records == b.num_records for b in batches)
    receiver_events = [e for e in recorder.events if isinstance(e, (ReceiverStarted, ReceiverStopped, ReceiverError))]
    kinds = [type(e).__name__ for e in receiver_events]
    assert kinds[:3] == ["ReceiverStarted", "ReceiverStopped", "ReceiverStarted"]
    assert kinds[-1] == "ReceiverStopped"
    restart = receiver_events[1].receiver_info
    assert (restart.stream_id, restart.name, restart.active) == (0, "SocketReceiver-0", False)
    assert restart.last_error_message == "Restarting receiver with delay 100ms: Socket data stream had no more data"
    assert receiver_events[-1].receiver_info.last_error_message == "Stopped by driver"


def test_socket_stream_reports_a_refused_connection_as_a_receiver_error_and_retries(contexts: Any) -> None:
    """While nothing listens, each attempt posts ReceiverError; once the server listens, lines flow."""
    server = LineServer([["hello", "world"]], listen=False)
    ssc, recorder = contexts(0.2)
    got: list[str] = []
    ssc.socketTextStream("127.0.0.1", server.port, restartDelay=0.05).foreachRDD(lambda rdd: got.extend(rdd.collect()))
    try:
        ssc.start()
        recorder.wait_for(lambda evs: any(type(e) is ReceiverError for e in evs), "a ReceiverError")
        server.listen()
        recorder.wait_for_records(2)
        ssc.stop(stopSparkContext=False)
    finally:
        server.close()

    assert got == ["hello", "world"]
    error = recorder.of_type(ReceiverError)[0].receiver_info
    assert error.last_error_message == f"Error connecting to 127.0.0.1:{server.port}"
    assert "ConnectionRefusedError" in error.last_error or "OSError" in error.last_error
    assert error.last_error_time is not None


def test_a_line_over_the_bound_drops_the_connection_and_the_receiver_connects_again(contexts: Any,
                                                                                   spark_context: Any) -> None:
    """spark.aiodstream.receiver.maxLineLength=10: the lines before a longer one are kept, the rest of that connection is
    dropped with a ReceiverError naming the bound, and the next connection's lines flow."""
    server = LineServer([["a", "x" * 50, "lost"], ["b"]])
    got: list[str] = []
    with spark_conf(spark_context, spark__aiodstream__receiver__maxLineLength="10"):
        ssc, recorder = contexts(0.2)
        ssc.socketTextStream("127.0.0.1", server.port, restartDelay=0.05).foreachRDD(lambda rdd: got.extend(rdd.collect()))
    try:
        ssc.start()
        recorder.wait_for_records(2)
        ssc.stop(stopSparkContext=False)
    finally:
        server.close()

    assert got == ["a", "b"]
    error = recorder.of_type(ReceiverError)[0].receiver_info
    assert error.last_error_message == "Error receiving data"
    assert ("LineTooLongError: a line of 50 characters is longer than spark.aiodstream.receiver.maxLineLength (10)"
            in error.last_error)


@pytest.mark.parametrize("where", ["local", "ftp"])
def test_a_socket_receiver_on_an_executor_writes_blocks_that_the_batches_read(contexts: Any, tmp_path: Path, where: str,
                                                                              request: pytest.FixtureRequest) -> None:
    """placement='executor': a Spark task receives, writes blocks into the checkpoint's WAL, and each line reaches one batch
    in order; with the checkpoint on a local path, and on ftp:// (the task writes and the batches read through fsspec)."""
    lines = [f"line {i}" for i in range(2000)]
    server = LineServer([lines])
    ssc, recorder = contexts(0.5)
    if where == "ftp":
        ftp = request.getfixturevalue("ftp_server")
        ssc.checkpoint(ftp.uri("ck"))
        on_disk = ftp.root / "ck"
    else:
        ssc.checkpoint(str(tmp_path / "ck"))
        on_disk = tmp_path / "ck"
    ssc.remember(600)  # the log keeps what remembered batches cover: every block stays for the check below
    got: list[str] = []
    stream = ssc.socketTextStream("127.0.0.1", server.port, restartDelay=0.1, placement="executor")
    stream.foreachRDD(lambda rdd: got.extend(rdd.collect()))
    try:
        ssc.start()
        batches = recorder.wait_for_records(len(lines))
        ssc.stop(stopSparkContext=False, stopGraceFully=True)
    finally:
        server.close()

    assert got == lines
    assert sum(b.num_records for b in batches) == len(lines)
    started = recorder.of_type(ReceiverStarted)[0].receiver_info
    assert (started.name, started.active, started.executor_id) == ("SocketReceiver-0", True, "driver")  # local mode's executor
    assert started.location == socket.gethostname()  # reported by the task (this machine's executor)
    assert recorder.of_type(ReceiverStopped)[-1].receiver_info.last_error_message == "Stopped by driver"
    # The driver's own receiver path never held a line: nothing was buffered or allocated on it.
    assert len(stream._buffer) == 0 and not stream._allocated  # type: ignore[attr-defined]
    # Every line went through a block the executor wrote into the write-ahead log, in order.
    log = on_disk / "sources" / "0"
    blocks = sorted(int(name) for name in os.listdir(log) if name.isdigit())
    assert blocks == list(range(len(blocks)))
    assert [line for entry in blocks for line in read_block_file(str(log / str(entry)))] == lines


def test_a_receiver_on_an_executor_is_heard_on_every_address_of_the_drivers_bind_name(
        contexts: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bind name may resolve to two addresses (Fedora's localhost: ::1 and 127.0.0.1), and anyio then opens a listener
    on each, on one port: the control channel serves all of them, whichever the task's connection reaches (lane M1:
    only the first was served, and a task reaching the other waited for its challenge until it timed out, forever)."""
    from anyio.abc import SocketAttribute
    from anyio.streams.stapled import MultiListener

    open_listener = anyio.create_tcp_listener

    async def two_addresses(*, local_host: str | None = None, local_port: int = 0, **kwargs: Any) -> Any:
        first = await open_listener(local_host="::1", local_port=local_port, **kwargs)  # not the task's address
        port = first.listeners[0].extra(SocketAttribute.local_port)
        second = await open_listener(local_host="127.0.0.1", local_port=port, **kwargs)  # spark.driver.host's
        return MultiListener([*first.listeners, *second.listeners])

    monkeypatch.setattr(anyio, "create_tcp_listener", two_addresses)
    lines = [f"line {i}" for i in range(200)]
    server = LineServer([lines])
    ssc, recorder = contexts(0.5)
    ssc.checkpoint(str(tmp_path / "ck"))
    got: list[str] = []
    ssc.socketTextStream("127.0.0.1", server.port, restartDelay=0.1, placement="executor").foreachRDD(
        lambda rdd: got.extend(rdd.collect()))
    try:
        ssc.start()
        recorder.wait_for_records(len(lines))
        ssc.stop(stopSparkContext=False, stopGraceFully=True)
    finally:
        server.close()
    assert got == lines
    assert not recorder.of_type(ReceiverError)  # the task reached the channel the first time


def test_a_receiver_on_an_executor_needs_a_shared_checkpoint_and_a_known_placement(contexts: Any) -> None:
    """Without a checkpoint the start is refused (the blocks go into its WAL); an unknown placement is refused at once."""
    ssc, _ = contexts(0.5)
    with pytest.raises(ValueError, match="a receiver's placement must be 'driver' or 'executor', got 'gpu'"):
        ssc.socketTextStream("127.0.0.1", 9, placement="gpu")
    ssc.socketTextStream("127.0.0.1", 9, placement="executor").foreachRDD(lambda rdd: rdd.count())
    with pytest.raises(InvalidPipelineError, match=r"a receiver on an executor writes its blocks into the checkpoint's "
                                                   r"write-ahead log .* give StreamingContext.checkpoint\(\) a directory every "
                                                   r"executor reaches \(a shared path, or a URI such as hdfs://\)$"):
        ssc.start()


def logged_receiver_offsets(checkpoint: Path) -> list[int]:
    """Every receiver log offset ({"logOffset": N}) the checkpoint's offsets log holds."""
    found = []
    for name in os.listdir(checkpoint / "offsets"):
        if name.isdigit():
            for line in (checkpoint / "offsets" / name).read_text().splitlines()[2:]:
                offset = json.loads(line) if line.startswith("{") else None
                if isinstance(offset, dict) and "logOffset" in offset:
                    found.append(offset["logOffset"])
    return found


def test_strangers_at_a_receivers_control_port_neither_block_its_task_nor_reach_the_offsets_log(
        contexts: Any, tmp_path: Path) -> None:
    """placement='executor': a stranger who connects first and says nothing does not take the task's place; one who
    forges block reports ('B 0 5', a huge entry) is dropped after the challenge: the real task's lines reach the batches
    exactly, and every offset logged names a block the task wrote."""
    lines = [f"line {i}" for i in range(300)]
    server = LineServer([lines])
    ssc, recorder = contexts(0.5)
    ssc.checkpoint(str(tmp_path / "ck"))
    ssc.remember(600)  # every block stays for the check below
    got: list[str] = []
    stream = ssc.socketTextStream("127.0.0.1", server.port, restartDelay=0.1, placement="executor")
    stream.foreachRDD(lambda rdd: got.extend(rdd.collect()))
    strangers: list[socket.socket] = []
    try:
        ssc.start()
        wait_until(lambda: stream.control_port is not None, "the control channel to listen")  # type: ignore[attr-defined]
        port = stream.control_port  # type: ignore[attr-defined]
        silent = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)  # first, before the task (it is a Spark job)
        forger = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        strangers += [silent, forger]
        forger.sendall(b"H evil\nS\nB 0 5\nB 1000000000000 1\n")
        heard = b""
        while chunk := forger.recv(4096):
            heard += chunk
        batches = recorder.wait_for_records(len(lines))
        ssc.stop(stopSparkContext=False, stopGraceFully=True)
    finally:
        server.close()
        for stranger in strangers:
            stranger.close()

    assert len(heard) == 4 + 32  # the challenge, then the door closed: its "hello" was not one
    assert got == lines and sum(b.num_records for b in batches) == len(lines)
    blocks = sorted(int(n) for n in os.listdir(tmp_path / "ck" / "sources" / "0") if n.isdigit())
    assert blocks == list(range(len(blocks)))
    offsets = logged_receiver_offsets(tmp_path / "ck")
    assert offsets and max(offsets) == blocks[-1]
    assert not recorder.of_type(ReceiverError)


FUZZ_MEMORY_BOUND = 16 << 20
"""The driver's peak Python allocations while the fuzz corpus is sent at a control port (it pushes 32 MiB at it)."""


@pytest.mark.skipif(os.environ.get("AIODSTREAM_RECEIVER_FUZZ") != "all",
                    reason="about 5 s: AIODSTREAM_RECEIVER_FUZZ=all runs it (the strangers test is the default run's case)")
def test_a_fuzzed_control_port_changes_nothing_in_a_running_receiver(contexts: Any, spark_context: Any,
                                                                    tmp_path: Path) -> None:
    """The coordinator's fuzz corpus (malformed, nested, oversized, slow and idle hellos, a flood beyond the cap, random
    bytes) at an executor receiver's control port while its task runs: every connection is closed, the driver's
    allocations stay bounded, the task stays connected, and its lines reach the batches exactly."""
    import subprocess
    import sys
    import tracemalloc

    lines = [f"line {i}" for i in range(500)]
    server = LineServer([lines])
    got: list[str] = []
    with spark_conf(spark_context, spark__network__auth__rpcTimeout="1s",
                    spark__aiodstream__network__maxUnauthenticatedConnections="8"):
        ssc, recorder = contexts(0.5)
        stream = ssc.socketTextStream("127.0.0.1", server.port, restartDelay=0.1, placement="executor")
    stream.foreachRDD(lambda rdd: got.extend(rdd.collect()))
    ssc.checkpoint(str(tmp_path / "ck"))
    try:
        ssc.start()
        recorder.wait_for(lambda evs: any(type(e) is ReceiverStarted for e in evs), "the task to connect")
        tracemalloc.start()
        try:
            fuzz = subprocess.run([sys.executable, "-m", "tests.streaming.continuous.fuzz_child", str(stream.control_port),
                                   "25"], cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                                  timeout=WAIT_S, check=True)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        batches = recorder.wait_for_records(len(lines))
        ssc.stop(stopSparkContext=False, stopGraceFully=True)
    finally:
        server.close()

    print(f"driver allocation peak during the fuzz: {peak} bytes")
    assert int(fuzz.stdout) == 44  # every connection of the corpus was closed by the driver
    assert peak < FUZZ_MEMORY_BOUND, f"driver allocations peaked at {peak} bytes"
    assert got == lines and sum(b.num_records for b in batches) == len(lines)
    assert not recorder.of_type(ReceiverError)  # the task was never disturbed


def test_a_receiver_task_breaking_the_report_rules_is_dropped_before_anything_reaches_the_offsets_log(
        contexts: Any, spark_context: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task that proved the token but reports a huge block number, then one that skips a block, then one that falls
    silent past spark.network.timeout: each connection is dropped with the reason (ReceiverError) and the receiver
    restarts with a new token (the old one is refused); the batches hold exactly the blocks written and reported in
    order, and the offsets log names no other."""
    from streaming.inputs import SocketInputDStream
    from streaming.network import HelloRefusedError, connect
    from streaming.recovery import BlockLog

    launches: list[Any] = []

    def task(self: Any, spec: Any, group: str) -> None:  # instead of the Spark job: a task in this process
        launches.append(spec)
        if len(launches) == 2:  # a task of the earlier launch, with its token, is refused at this launch's door
            with pytest.raises(HelloRefusedError):
                connect(spec.driver_host, spec.driver_port, launches[0].token, "receiver", {"stream": spec.stream_id})
        log, entry = BlockLog(spec.log_dir), spec.first_entry
        records, last = {1: (["a", "b"], f"B {entry + 10**12} 1"), 2: (["c"], f"B {entry + 2} 1"), 3: (["d"], "")}.get(
            len(launches), (["e"], None))
        with connect(spec.driver_host, spec.driver_port, spec.token, "receiver", {"stream": spec.stream_id}) as sock:
            log.write(entry, records)
            sock.sendall(f"H here\nS\nB {entry} {len(records)}\n".encode())
            if last is not None:  # then break a rule, or fall silent
                sock.sendall(f"{last}\n".encode() if last else b"")
                sock.settimeout(WAIT_S)
                assert sock.recv(4096) == b""  # dropped by the driver
                return
            sock.settimeout(spec.heartbeat_ms / 1000)
            heard = b""
            while b"stop\n" not in heard:
                try:
                    chunk = sock.recv(4096)
                except TimeoutError:
                    sock.sendall(b"P\n")
                    continue
                assert chunk, "the driver dropped a task that kept the rules"
                heard += chunk
            sock.sendall(b"X\n")

    monkeypatch.setattr(SocketInputDStream, "_run_job", task)
    got: list[str] = []
    with spark_conf(spark_context, spark__network__timeout="3s"):
        ssc, recorder = contexts(0.5)
        ssc.socketTextStream("127.0.0.1", 9, restartDelay=0.05, placement="executor").foreachRDD(
            lambda rdd: got.extend(rdd.collect()))
    ssc.checkpoint(str(tmp_path / "ck"))
    ssc.remember(600)
    ssc.start()
    recorder.wait_for_records(5)
    ssc.stop(stopSparkContext=False, stopGraceFully=True)

    assert got == ["a", "b", "c", "d", "e"] and len(launches) == 4
    assert [spec.first_entry for spec in launches] == [0, 1, 2, 3]
    errors = [e.receiver_info for e in recorder.of_type(ReceiverError)]
    assert [e.last_error_message for e in errors] == ["The receiver's task broke the control protocol"] * 2 + [
        "The receiver's task sent nothing within spark.network.timeout (3 s)"]
    assert "block 1 was next, not 1000000000000; got b'B 1000000000000 1'" in errors[0].last_error
    assert "block 2 was next, not 3; got b'B 3 1'" in errors[1].last_error
    offsets = set(logged_receiver_offsets(tmp_path / "ck"))
    assert offsets <= {0, 1, 2, 3} and max(offsets) == 3  # block numbers that were written and reported, nothing else


def test_file_stream_reads_each_new_file_once_and_ignores_old_and_hidden_ones(contexts: Any, tmp_path: Path) -> None:
    """textFileStream takes files moved in after it started, once each, a small file as one partition; old, hidden and
    pre-existing files are skipped."""
    (tmp_path / "before.txt").write_text("before\n")
    ssc, recorder = contexts(0.2)
    got: list[str] = []
    partitions: list[int] = []

    def output(rdd: Any) -> None:
        lines = rdd.collect()
        got.extend(lines)
        if lines:
            partitions.append(rdd.getNumPartitions())

    ssc.textFileStream(str(tmp_path)).foreachRDD(output)
    ssc.start()

    def move_in(name: str, text: str, *, mtime: float | None = None) -> str:
        staged = tmp_path / f".{name}.tmp"
        staged.write_text(text)
        if mtime is not None:
            os.utime(staged, (mtime, mtime))
        staged.rename(tmp_path / name)
        return f"file:{tmp_path / name}"

    def files_seen() -> list[str]:
        return [f for b in recorder.batches for f in b.stream_id_to_input_info[0].metadata["files"]]

    first = move_in("one.txt", "a\nb\n")
    move_in("stale.txt", "stale\n", mtime=time.time() - 3600)
    (tmp_path / ".hidden").write_text("hidden\n")
    recorder.wait_for(lambda evs: first in files_seen(), "one.txt in a batch")
    second = move_in("two.txt", "c\n")
    recorder.wait_for(lambda evs: second in files_seen(), "two.txt in a batch")
    batches_then = len(recorder.batches)
    recorder.wait_for_batches(batches_then + 2)  # later batches do not take the files again
    ssc.stop(stopSparkContext=False)

    assert files_seen() == [first, second]
    assert sorted(got) == ["a", "b", "c"]
    assert partitions == [1, 1]  # Spark's FileInputDStream reads a file in splits of a block: a small file is one
    info = next(b for b in recorder.batches if b.stream_id_to_input_info[0].metadata["files"]).stream_id_to_input_info[0]
    # pyspark reports 0 records for file streams; ours counts the lines the batch read.
    assert info.num_records == 2 and info.metadata_description == first


def test_a_window_shorter_than_its_slide_over_a_file_stream_reads_the_files_of_the_batches_it_skips(
        spark_context: Any, tmp_path: Path) -> None:
    """window(1, 2) reads the file stream at every second batch; the files that arrived at the batches between go to
    the next window (Spark lists the directory when the window asks for its RDD), not lost: each is read once."""
    from scheduler import ManualClock

    base = 1_800_000_000_000
    clock = ManualClock(base)
    watched = tmp_path / "in"
    watched.mkdir()
    for k in range(1, 7):  # file k is modified half a second before batch k: listed from batch k on
        path = watched / f"f{k}.txt"
        path.write_text(f"b{k}\n")
        os.utime(path, ((base + k * 1000 - 500) / 1000,) * 2)
    ssc = StreamingContext(spark_context, 1, clock=clock)
    windows: list[tuple[int, list[str]]] = []
    ssc.textFileStream(str(watched)).window(1, 2).foreachRDD(
        lambda t, rdd: windows.append((int(t.timestamp() * 1000) - base, sorted(rdd.collect()))))
    assert run_dstream_batches(ssc, clock, 6) == []
    assert windows == [(2000, ["b1", "b2"]), (4000, ["b3", "b4"]), (6000, ["b5", "b6"])]


@pytest.mark.parametrize("reduced", [False, True], ids=["window", "inverse-reduced window"])
def test_a_window_shorter_than_its_slide_over_a_queue_stream_takes_the_items_in_turn(spark_context: Any, tmp_path: Path,
                                                                                      reduced: bool) -> None:
    """window(1, 2) computes the queue at every second batch; pyspark dequeues an item only when the queue's RDD is
    computed, so each window gets the next item. Items were dequeued at every batch, so every other one was lost; the
    same for an inverse-reduced window (pyspark 4.3: [(1, 1)], [(0, 2)], [(1, 3)])."""
    from scheduler import ManualClock

    base = 1_800_000_000_000
    clock = ManualClock(base)
    ssc = StreamingContext(spark_context, 1, clock=clock)
    ssc.checkpoint(str(tmp_path))  # the inverse-reduced window checkpoints its RDDs
    windows: list[tuple[int, list[Any]]] = []
    queue = ssc.queueStream([[k] for k in range(1, 7)], oneAtATime=True)
    stream = (queue.map(lambda x: (x % 2, x)).reduceByKeyAndWindow(lambda a, b: a + b, lambda a, b: a - b, 1, 2)
              if reduced else queue.window(1, 2))
    stream.foreachRDD(lambda t, rdd: windows.append((int(t.timestamp() * 1000) - base, rdd.collect())))
    assert run_dstream_batches(ssc, clock, 6) == []
    expected = [[(1, 1)], [(0, 2)], [(1, 3)]] if reduced else [[1], [2], [3]]
    assert windows == list(zip([2000, 4000, 6000], expected, strict=True))


def test_binary_records_stream_reads_fixed_length_records_through_a_hadoop_uri(contexts: Any, tmp_path: Path) -> None:
    """binaryRecordsStream on a file: URI (listed through Hadoop's FileSystem) splits new files into recordLength-byte records."""
    ssc, recorder = contexts(0.2)
    got: list[bytes] = []
    ssc.binaryRecordsStream(f"file://{tmp_path}", 4).foreachRDD(lambda rdd: got.extend(rdd.collect()))
    ssc.start()
    staged = tmp_path / ".r.bin"
    staged.write_bytes(b"abcdefghijkl")
    staged.rename(tmp_path / "r.bin")
    recorder.wait_for(lambda evs: any(b.stream_id_to_input_info[0].metadata["files"] for b in recorder.batches), "r.bin in a batch")
    ssc.stop(stopSparkContext=False)
    assert got == [b"abcd", b"efgh", b"ijkl"]


def test_a_missing_directory_gives_empty_batches(contexts: Any, tmp_path: Path) -> None:
    """textFileStream on a directory that does not exist warns and produces empty batches; the context keeps running."""
    ssc, recorder = contexts(0.2)
    ssc.textFileStream(str(tmp_path / "missing")).foreachRDD(lambda rdd: None)
    ssc.start()
    batches = recorder.wait_for_batches(2)
    ssc.stop(stopSparkContext=False)
    assert all(not b.failed and b.stream_id_to_input_info[0].metadata["files"] == [] for b in batches)


def test_async_source_items_reach_batches_and_a_full_buffer_holds_the_source_back(contexts: Any) -> None:
    """Items of an async generator become records; with maxBufferedRecords=5 no batch gets more than 5; exhaustion stops the receiver."""
    ssc, recorder = contexts(0.2)
    got: list[int] = []

    async def numbers() -> Any:
        for i in range(23):
            yield i

    ssc.asyncIterableStream(numbers(), maxBufferedRecords=5).foreachRDD(lambda rdd: got.extend(rdd.collect()))
    ssc.start()
    batches = recorder.wait_for_records(23)
    recorder.wait_for(lambda evs: any(type(e) is ReceiverStopped for e in evs), "ReceiverStopped")
    ssc.stop(stopSparkContext=False)
    assert got == list(range(23))
    assert max(b.num_records for b in batches) <= 5
    stopped = recorder.of_type(ReceiverStopped)[0].receiver_info
    assert (stopped.name, stopped.last_error_message) == ("AsyncIterableReceiver-0", "Async source exhausted")


def test_a_failing_async_source_made_by_a_factory_is_restarted(contexts: Any) -> None:
    """A source factory whose iterator raises posts ReceiverError, then is iterated afresh after the restart delay."""
    ssc, recorder = contexts(0.2)
    got: list[str] = []
    runs = 0

    async def flaky() -> Any:
        nonlocal runs
        runs += 1
        yield f"run{runs}"
        if runs == 1:
            raise ConnectionResetError("upstream went away")

    ssc.asyncIterableStream(flaky, restartDelay=0).foreachRDD(lambda rdd: got.extend(rdd.collect()))
    ssc.start()
    recorder.wait_for_records(2)
    ssc.stop(stopSparkContext=False)
    assert got == ["run1", "run2"]
    kinds = [type(e).__name__ for e in recorder.events if isinstance(e, (ReceiverStarted, ReceiverStopped, ReceiverError))]
    assert kinds == ["ReceiverStarted", "ReceiverError", "ReceiverStopped", "ReceiverStarted", "ReceiverStopped"]
    error = recorder.of_type(ReceiverError)[0].receiver_info
    assert error.last_error_message == "Error receiving data from the async source"
    assert "ConnectionResetError: upstream went away" in error.last_error


# -- the async API inside a host application --


async def host_app(spark_context: Any, log: list[str]) -> None:
    """An async app: embeds a context with an async source, an async sink and a blocking Spark job, beside a ticker."""
    job_running, ticked_during_job = threading.Event(), threading.Event()
    sunk: list[int] = []
    recorder = EventRecorder()

    async def source() -> Any:
        for i in range(6):
            yield i

    async def sink(rdd: Any) -> None:
        sunk.extend(await anyio.to_thread.run_sync(rdd.collect))

    def blocking_job(rdd: Any) -> None:
        if ticked_during_job.is_set():
            return
        rdd.collect()
        job_running.set()  # this worker thread now holds the batch; the host loop must keep running
        if not ticked_during_job.wait(WAIT_S):
            raise AssertionError("the host loop did not tick while a Spark job was running")

    async def ticker() -> None:
        ticks = 0
        while not ticked_during_job.is_set():
            await anyio.sleep(0.01)
            if job_running.is_set():
                ticks += 1
                if ticks >= 5:
                    ticked_during_job.set()

    async with StreamingContext(spark_context, 0.2) as ssc:
        ssc.addStreamingListener(recorder)
        stream = ssc.asyncIterableStream(source())
        stream.foreachRDD(sink)
        stream.foreachRDD(blocking_job)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            await ssc.start_async()
            log.append(ssc.getState())
            with anyio.fail_after(WAIT_S):
                await recorder.wait_for(lambda evs: sum(e.batch_info.num_records for e in evs if type(e) is BatchCompleted) >= 6)
            await ssc.stop_async()
        log.append(ssc.getState())
    failures = [e.output_operation_info.failure_reason for e in recorder.of_type(OutputOperationCompleted)
                if e.output_operation_info.failure_reason]
    assert failures == []
    assert ticked_during_job.is_set()
    assert sunk == list(range(6))
    log.append("done")


def test_the_async_api_runs_inside_an_asyncio_application(spark_context: Any) -> None:
    """In asyncio.run, 'async with StreamingContext' runs batches while the host's own tasks keep running."""
    log: list[str] = []
    asyncio.run(host_app(spark_context, log))
    assert log == ["ACTIVE", "STOPPED", "done"]
    assert StreamingContext.getActive() is None


def test_the_async_api_runs_inside_a_trio_application(spark_context: Any) -> None:
    """In trio.run, the same program runs unchanged: async source, async sink, Spark jobs off the loop."""
    import trio

    log: list[str] = []
    trio.run(host_app, spark_context, log)
    assert log == ["ACTIVE", "STOPPED", "done"]
    assert StreamingContext.getActive() is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_context_started_with_start_refuses_the_async_api_and_still_stops(spark_context: Any, backend: str) -> None:
    """stop_async() on a context start() runs on its own loop hung for good (asyncio) or failed inside anyio (trio);
    'async with' on it flipped it to async mode first, so that stop() then refused it. Both are refused now."""
    ssc = StreamingContext(spark_context, 0.2)
    ssc.queueStream([[1]], default=[0]).foreachRDD(lambda rdd: None)
    ssc.start()
    try:
        async def host() -> None:
            with anyio.fail_after(WAIT_S):
                with pytest.raises(StreamingStateError, match=r"^this context was started with start\(\): cannot stop it "
                                                              r"with stop_async\(\); use ssc\.stop\(\)"):
                    await ssc.stop_async()
                with pytest.raises(StreamingStateError, match=r"^this context was started with start\(\): cannot run it "
                                                              r"in 'async with'"):
                    async with ssc:
                        pass
                with pytest.raises(StreamingStateError, match=r"^this context was started with start\(\): cannot wait for "
                                                              r"it with await_termination_async\(\)"):
                    await ssc.await_termination_async(0)

        anyio.run(host, backend=backend)
        assert ssc.getState() == "ACTIVE"
    finally:
        ssc.stop(stopSparkContext=False)
    assert ssc.getState() == "STOPPED"


@pytest.mark.parametrize("backend", BACKENDS)
def test_awaiting_a_context_in_async_with_blocks_neither_the_loop_nor_another_thread_for_good(spark_context: Any,
                                                                                              backend: str) -> None:
    """awaitTermination() on the host's loop waited on an event only an unstarted stop sets: the loop blocked and the
    context could never stop. It is refused there; from another thread it waits for the runtime on the host's loop."""
    stopped: list[bool] = []

    ssc = StreamingContext(spark_context, 0.2)

    async def host() -> None:
        async with ssc:
            ssc.queueStream([[1]], default=[0]).foreachRDD(lambda rdd: None)
            await ssc.start_async()
            with pytest.raises(StreamingStateError, match=r"^this context was entered with 'async with': use "
                                                          r"'await ssc\.await_termination_async\(\)'$"):
                ssc.awaitTermination()
            with anyio.fail_after(WAIT_S):
                async with anyio.create_task_group() as tg:
                    async def waiter() -> None:
                        stopped.append(await anyio.to_thread.run_sync(ssc.awaitTerminationOrTimeout, -1))

                    tg.start_soon(waiter)
                    await ssc.stop_async()

    anyio.run(host, backend=backend)
    assert stopped == [True]
    assert ssc.awaitTerminationOrTimeout(1) is True  # once stopped, on any thread: it only reports


def test_job_threads_run_each_job_in_its_group_and_leave_the_caller_untouched(spark_context: Any) -> None:
    """SparkJobThreads: the job's Spark jobs carry its group and description; the next job on the thread gets its own;
    the calling thread's properties never change; a job's exception reaches the caller."""
    from streaming.spark import SparkJobThreads

    def inside() -> tuple[str, str, int]:
        return (spark_context.getLocalProperty("spark.jobGroup.id"), spark_context.getLocalProperty("spark.job.description"),
                spark_context.parallelize([1, 2], 1).count())

    threads = SparkJobThreads(1)
    try:
        assert threads.submit(spark_context, "g-one", "batch one", inside).result() == ("g-one", "batch one", 2)
        assert threads.submit(spark_context, "g-two", "batch two", inside).result() == ("g-two", "batch two", 2)
        assert list(spark_context.statusTracker().getJobIdsForGroup("g-two"))
        assert spark_context.getLocalProperty("spark.jobGroup.id") is None  # this thread was never in a group

        def boom() -> None:
            raise ValueError("job failed")

        with pytest.raises(ValueError, match="job failed"):
            threads.submit(spark_context, "g-three", "batch three", boom).result()
    finally:
        threads.shutdown()


def test_a_job_thread_sets_its_group_only_before_its_first_py4j_call(spark_context: Any) -> None:
    """A job that never calls Spark costs no py4j round trip; one that does sets its group first, once,
    even when its first call only builds an RDD and its Spark job comes later."""
    from streaming.spark import SparkJobThreads

    client = spark_context._gateway._gateway_client
    threads = SparkJobThreads(1, name="group-hook-test")
    calls: list[tuple[str, str]] = []
    try:
        threads.submit(spark_context, "g-warm", "warm up", lambda: None).result()  # installs the hook, starts the thread
        hooked = client.send_command

        def counting(*args: Any, **kwargs: Any) -> Any:
            # Wraps the hook: the job's own first call enters here first, and the hook's
            # setJobGroup runs to its end inside it, before that call is sent.
            mine = threading.current_thread().name.startswith("group-hook-test")
            method = str(args[0]).split("\n")[2] if args else ""
            if mine:
                calls.append(("enter", method))
            try:
                return hooked(*args, **kwargs)
            finally:
                if mine:
                    calls.append(("exit", method))

        client.send_command = counting
        try:
            assert threads.submit(spark_context, "g-none", "no Spark", lambda: 42).result() == 42
            assert calls == []  # not even setJobGroup

            def build_then_run() -> int:
                rdd = spark_context.parallelize(range(10), 2)  # py4j calls, no Spark job yet
                return rdd.map(lambda x: x * 2).sum()

            assert threads.submit(spark_context, "g-late", "late job", build_then_run).result() == 90
            assert calls.count(("enter", "setJobGroup")) == 1
            first = calls[0][1]
            assert calls[:4] == [("enter", first), ("enter", "setJobGroup"), ("exit", "setJobGroup"), ("exit", first)]
        finally:
            client.send_command = hooked
        assert list(spark_context.statusTracker().getJobIdsForGroup("g-late"))
        assert not list(spark_context.statusTracker().getJobIdsForGroup("g-none"))
    finally:
        threads.shutdown()


def test_run_spark_puts_an_async_output_operations_spark_calls_in_the_batchs_job_group(spark_context: Any) -> None:
    """Inside an async foreachRDD, run_spark runs the call on a job thread in the batch's group; outside, in a plain thread."""
    from scheduler import ManualClock, Time
    from streaming import run_spark
    from streaming.spark import job_description

    seen: list[tuple[str | None, str | None, int]] = []

    def inside(rdd: Any) -> tuple[str | None, str | None, int]:
        return (spark_context.getLocalProperty("spark.jobGroup.id"), spark_context.getLocalProperty("spark.job.description"),
                rdd.count())

    async def sink(rdd: Any) -> None:
        seen.append(await run_spark(inside, rdd))

    async def main() -> None:
        clock = ManualClock(0)
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            ssc.queueStream([[1, 2, 3]]).foreachRDD(sink)
            await ssc.start_async()
            await advance(ssc.runtime, clock)
            await ssc.stop_async()
        assert (await run_spark(inside, spark_context.parallelize([1], 1)))[:2] == (None, None)

    anyio.run(main)
    [(group, description, count)] = seen
    assert group is not None and group.startswith("aiodstream-") and "-1000-" in group
    assert description == job_description(Time(1000), 0)
    assert count == 3


class spark_conf:  # noqa: N801 - used as a context manager, like contextlib's
    """Set SparkConf entries of the running SparkContext for a test; restore them after."""

    def __init__(self, sc: Any, **settings: str) -> None:
        self._conf = sc._conf
        self._settings = {key.replace("__", "."): value for key, value in settings.items()}
        self._old: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for key, value in self._settings.items():
            self._old[key] = self._conf.get(key, None)
            self._conf.set(key, value)

    def __exit__(self, *exc: object) -> None:
        for key, value in self._old.items():
            if value is None:
                self._conf._jconf.remove(key)
            else:
                self._conf.set(key, value)


def endless() -> Any:
    async def numbers() -> Any:
        i = 0
        while True:
            yield i
            i += 1
    return numbers()


def test_receiver_max_rate_caps_what_a_receiver_stores_per_second(contexts: Any, spark_context: Any) -> None:
    """spark.streaming.receiver.maxRate=300: an endless source delivers at most 300 records per second of wall time."""
    with spark_conf(spark_context, spark__streaming__receiver__maxRate="300"):
        ssc, recorder = contexts(0.2)
        ssc.asyncIterableStream(endless()).foreachRDD(lambda rdd: None)
        began = time.monotonic()
        ssc.start()
        recorder.wait_for_records(400)
        ssc.stop(stopSparkContext=False)
        elapsed = time.monotonic() - began
    received = sum(b.num_records for b in recorder.batches)
    assert 400 <= received <= 300 * elapsed + 1


def test_backpressure_sets_the_receivers_rate_from_completed_batches(contexts: Any, spark_context: Any) -> None:
    """With spark.streaming.backpressure.enabled, a RateController per receiver publishes PID estimates (>= minRate)."""
    with spark_conf(spark_context, spark__streaming__backpressure__enabled="true",
                    spark__streaming__backpressure__pid__minRate="50"):
        ssc, recorder = contexts(0.2)
        stream = ssc.asyncIterableStream(endless())
        stream.foreachRDD(lambda rdd: rdd.count())
        ssc.start()
        recorder.wait_for(lambda evs: stream.rate_limiter().rate is not None, "a published rate")
        ssc.stop(stopSparkContext=False)
    assert stream.rate_limiter().rate >= 50


def test_backpressure_rates_reach_a_receiver_on_an_executor(contexts: Any, spark_context: Any, tmp_path: Path) -> None:
    """The RateController's estimates go over the control connection to the receiver's task, which applies each and says
    so (its pacing is Pacer's, tested without Spark in test_receiver)."""
    # Records in many batches (the PID estimator's first batch with records only sets its baseline): a connection
    # per 500 lines, reconnected after 50 ms.
    server = LineServer([[f"line {c}-{i}" for i in range(500)] for c in range(100)])
    with spark_conf(spark_context, spark__streaming__backpressure__enabled="true",
                    spark__streaming__backpressure__pid__minRate="50"):
        ssc, recorder = contexts(0.2)
        ssc.checkpoint(str(tmp_path / "ck"))
        stream = ssc.socketTextStream("127.0.0.1", server.port, restartDelay=0.05, placement="executor")
        stream.foreachRDD(lambda rdd: rdd.count())
        try:
            ssc.start()
            assert stream.executor_rate is None  # no limit until the first estimate
            recorder.wait_for(lambda evs: stream.executor_rate is not None, "a rate applied by the task")
            ssc.stop(stopSparkContext=False)
        finally:
            server.close()
    assert stream.executor_rate is not None and stream.executor_rate >= 50  # a PID estimate, at least minRate


def test_an_unknown_rate_estimator_is_refused_at_start_with_sparks_message(contexts: Any, spark_context: Any) -> None:
    """spark.streaming.backpressure.rateEstimator other than pid: "Unknown rate estimator: <name>"."""
    from scheduler import InvalidPipelineError

    with spark_conf(spark_context, spark__streaming__backpressure__enabled="true",
                    spark__streaming__backpressure__rateEstimator="linear"):
        ssc, _ = contexts(0.2)
        ssc.asyncIterableStream(endless()).foreachRDD(lambda rdd: None)
        with pytest.raises(InvalidPipelineError, match=r"^Unknown rate estimator: linear$"):
            ssc.start()


# -- the host's event loop never waits on py4j --


class Py4JOnThread:
    """Records the py4j calls made from one thread (wraps the process's py4j client while active)."""

    def __init__(self, sc: Any) -> None:
        self._client = sc._gateway._gateway_client
        self.thread: int | None = None
        self.calls: list[str] = []

    def __enter__(self) -> Py4JOnThread:
        inner = self._client.send_command

        def spy(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == self.thread:
                frames = [f"{frame.filename.rsplit('/', 2)[-2:]}:{frame.lineno}" for frame in traceback.extract_stack()[-8:-1]]
                self.calls.append(" <- ".join(reversed(frames)))
            return inner(*args, **kwargs)

        self._inner = inner
        self._client.send_command = spy
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.send_command = self._inner


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_program_makes_no_py4j_call_on_the_event_loop(spark_context: Any, tmp_path: Path, backend: str) -> None:
    """Entering, building every kind of stream, starting, running batches and an immediate stop that cancels a running
    Spark job: all py4j calls happen off the host's loop (settings read on entry, parallelize and checkpoint dir at start
    or generation, cancellation from a thread), watermarks, mapGroupsWithState and transformWithState included."""
    from scheduler import Duration, ManualClock
    from streaming.state import StatefulProcessor

    incoming, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    incoming.mkdir()
    started, release = tmp_path / "started", tmp_path / "release"
    results: dict[str, list[Any]] = {"state": [], "window": [], "values": [], "files": [], "cancelled": [], "groups": [], "tws": []}

    block = blocking_partitions(started, release)

    def running_sum(key: int, values: Any, state: Any) -> tuple[int, int]:
        state.update((state.getOption or 0) + sum(values))
        return (key, state.get)

    class RunningSum(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.total = handle.getValueState("total", "total long")

        def handleInputRows(self, key: int, rows: Any, timerValues: Any) -> Any:  # noqa: N803
            self.total.update((self.total.get() or 0) + sum(rows))
            yield (key, self.total.get())

    # A file, not a threading.Event: the context is checkpointed, so its functions must pickle
    # (as on pyspark, a graph that cannot be saved refuses to start).
    action_ended = tmp_path / "action-ended"

    def long_action(t: Any, rdd: Any) -> None:
        if rdd.isEmpty():
            return
        try:
            rdd.coalesce(1).mapPartitions(block).count()
        except Exception as exc:
            results["cancelled"].append(str(exc))
        finally:
            action_ended.touch()

    async def words() -> Any:
        for line in ["a b", "b c"]:
            yield line

    async def values_sink(t: Any, rdd: Any) -> None:
        results["values"].append(sorted(await run_spark(rdd.collect)))

    async def main(spy: Py4JOnThread) -> None:
        spy.thread = threading.get_ident()
        clock = ManualClock(0)
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            ssc.checkpoint(str(checkpoint))
            numbers = ssc.queueStream([[1, 2], [3], [4]], default=[0])
            numbers.map(lambda x: (x % 2, x)).updateStateByKey(lambda vs, s: sum(vs) + (s or 0), initialRDD=[(0, 100)]) \
                .foreachRDD(lambda rdd: results["state"].append(sorted(rdd.collect())))
            numbers.map(lambda x: (x, 1)).reduceByKeyAndWindow(lambda a, b: a + b, lambda a, b: a - b, 2, 1) \
                .foreachRDD(lambda rdd: results["window"].append(sorted(rdd.collect())))
            numbers.withWatermark(lambda x: x * 1000, "1 second").map(lambda x: (x % 2, x)) \
                .mapGroupsWithState(running_sum, numPartitions=2) \
                .foreachRDD(lambda rdd: results["groups"].append(sorted(rdd.collect())))
            numbers.map(lambda x: (x % 2, x)).transformWithState(RunningSum(), "Update", "None", numPartitions=2) \
                .foreachRDD(lambda rdd: results["tws"].append(sorted(rdd.collect())))
            ssc.asyncIterableStream(words()).flatMap(str.split).countByValue().foreachRDD(values_sink)
            ssc.textFileStream(str(incoming)).foreachRDD(lambda rdd: results["files"].append(rdd.count()))
            ssc.queueStream([[], [], [], [7]]).foreachRDD(long_action)
            await ssc.start_async()
            for n in range(3):
                # Modified inside the coming batch's interval on the manual clock, so that batch selects it.
                path = incoming / f"f{n}.txt"
                path.write_text("x\ny\n" * (n + 1))
                os.utime(path, ns=((n * 1000 + 500) * 1_000_000,) * 2)
                await advance(ssc.runtime, clock)
            clock.advance(1000)  # the long action's batch: stop while its Spark task runs
            await anyio.to_thread.run_sync(wait_until, started.exists, "the long Spark task to start")
            ssc.runtime.abandon_after = Duration(0)  # the grace for running jobs is on the manual clock
            try:
                await ssc.stop_async(stopGraceFully=False)
            finally:
                release.touch()

    with Py4JOnThread(spark_context) as spy:
        anyio.run(main, spy, backend=backend)
        wait_until(action_ended.exists, "the cancelled Spark action to return")
    assert spy.calls == []
    # The program ran for real: state, windows, an async source and sink, a file stream.
    assert results["state"][:3] == [[(0, 102), (1, 1)], [(0, 102), (1, 4)], [(0, 106), (1, 4)]]  # seeded by initialRDD
    assert results["window"][:2] == [[(1, 1), (2, 1)], [(1, 1), (2, 1), (3, 1)]]
    assert results["groups"][:3] == [[(0, 2), (1, 1)], [(1, 4)], [(0, 6)]]  # a watermark and a state store, on Spark
    assert results["tws"][:3] == [[(0, 2), (1, 1)], [(1, 4)], [(0, 6)]]  # a StatefulProcessor on its state store
    word_counts: dict[str, int] = {}
    for batch in results["values"]:
        for word, count in batch:
            word_counts[word] = word_counts.get(word, 0) + count
    assert word_counts == {"a": 1, "b": 2, "c": 1}  # every record of the async source, counted once
    assert results["files"][:3] == [2, 4, 6]  # each batch read exactly its file
    assert len(results["cancelled"]) == 1 and "cancelled" in results["cancelled"][0].lower()


@pytest.mark.parametrize("text", ["200ms", "5s", " 2 S ", "1500us", "-1500us", "3m", "2min", "1h", "1d", "15", "-7",
                                  "0", "9223372036854775807", "9223372036854775808", "1x", "s", "", "1.5s", "10 ms", "1e3"])
@pytest.mark.parametrize("unit", ["ms", "s"])
def test_time_strings_parse_as_sparks_javautils_does(spark_context: Any, text: str, unit: str) -> None:
    """time_string_as agrees with the JVM's JavaUtils.timeStringAs: the value, or a refusal with Spark's message."""
    from py4j.protocol import Py4JJavaError

    from scheduler import InvalidDurationError
    from streaming.spark import time_string_as

    java_utils = spark_context._jvm.org.apache.spark.network.util.JavaUtils
    time_unit = getattr(spark_context._jvm.java.util.concurrent.TimeUnit, {"ms": "MILLISECONDS", "s": "SECONDS"}[unit])
    try:
        expected: int | str = java_utils.timeStringAs(text, time_unit)
    except Exception as exc:  # a Py4JJavaError, or pyspark's converted form once a SparkSession exists in the process
        java = exc.java_exception if isinstance(exc, Py4JJavaError) else getattr(exc, "_origin", None)
        assert java is not None, f"not an exception from the JVM: {exc!r}"
        expected = str(java.getMessage())
    if isinstance(expected, int):
        assert time_string_as(text, unit, "some.key") == expected
    else:
        with pytest.raises(InvalidDurationError) as refused:
            time_string_as(text, unit, "some.key")
        assert str(refused.value) == f"some.key: {expected}"


def test_spark_settings_are_read_once_per_context(spark_context: Any) -> None:
    """A context reads its Spark settings once: later changes to the SparkConf do not reach it (Spark reads conf at start)."""
    ssc = StreamingContext(spark_context, 1)
    with spark_conf(spark_context, spark__streaming__blockInterval="300ms"):
        first = ssc._spark.settings()
        assert first.get("spark.streaming.blockInterval") == "300ms"
        assert first.default_parallelism == spark_context.defaultParallelism
    assert ssc._spark.settings() is first
    assert StreamingContext(spark_context, 1)._spark.settings().get("spark.streaming.blockInterval") is None
    with pytest.raises(KeyError, match="not read by the streaming layer"):
        first.get("spark.master")


def test_a_given_sessions_runtime_conf_gives_the_sql_settings_first(spark_context: Any) -> None:
    """spark.conf.set on the classic SparkSession a context is given wins for spark.sql.*; unset there, the SparkConf's."""
    from pyspark.sql import SparkSession

    retain, recent = "spark.sql.streaming.minBatchesToRetain", "spark.sql.streaming.numRecentProgressUpdates"
    spark = SparkSession(spark_context).newSession()  # a SQLConf of its own: nothing leaks to other tests
    spark.conf.set(retain, "2")
    with spark_conf(spark_context, spark__sql__streaming__minBatchesToRetain="50",
                    spark__sql__streaming__numRecentProgressUpdates="7"):  # set after the session: not in its conf
        settings = StreamingContext(spark, 1)._spark.settings()
        assert (settings.get(retain), settings.get(recent)) == ("2", "7")
        assert StreamingContext(spark_context, 1)._spark.settings().get(retain) == "50"


# -- several contexts in one process --


def collector(into: list[int]) -> Callable[[Any], Any]:
    """An async output operation appending each batch's elements to ``into``."""
    async def sink(rdd: Any) -> None:
        into.extend(await run_spark(rdd.collect))
    return sink


async def two_pipelines(spark_context: Any) -> tuple[list[int], list[str], int]:
    """Two async contexts on one SparkContext, active at the same time, each with its own input and output."""
    seen: dict[str, list[int]] = {"evens": [], "odds": []}
    recorders = {name: EventRecorder() for name in seen}
    async with StreamingContext(spark_context, 0.2) as evens, StreamingContext(spark_context, 0.3) as odds:
        for name, ssc, items in (("evens", evens, [[0, 2], [4]]), ("odds", odds, [[1], [3, 5]])):
            ssc.addStreamingListener(recorders[name])

            ssc.queueStream(items).foreachRDD(collector(seen[name]))
        await evens.start_async()
        await odds.start_async()
        active = StreamingContext.getActiveContexts()
        states = [c.getState() for c in active]
        with anyio.fail_after(WAIT_S):
            for recorder in recorders.values():
                await recorder.wait_for(lambda evs: sum(type(e) is BatchCompleted for e in evs) >= 2)
        await evens.stop_async()
        await odds.stop_async()
    assert active == [evens, odds]
    return sorted(seen["evens"] + seen["odds"]), states, len(active)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_service_runs_several_contexts_on_one_spark_context(spark_context: Any, backend: str) -> None:
    """Async contexts are not exclusive: two run at once, each with its own graph, runtime and batches."""
    values, states, count = anyio.run(two_pipelines, spark_context, backend=backend)
    assert values == [0, 1, 2, 3, 4, 5]
    assert (states, count) == (["ACTIVE", "ACTIVE"], 2)
    assert StreamingContext.getActiveContexts() == []


ONE_ACTIVE = r"^Only one StreamingContext may be started in this JVM\. Currently running StreamingContext was started at"


def test_an_exclusive_context_keeps_pysparks_one_active_context_rule(spark_context: Any) -> None:
    """exclusive=True (the default of start()) refuses a second active context, and any start beside it, with pyspark's error."""
    async def main() -> None:
        async with StreamingContext(spark_context, 0.2) as first, \
                StreamingContext(spark_context, 0.2, exclusive=True) as second:
            first.queueStream([[1]]).foreachRDD(lambda rdd: None)
            second.queueStream([[1]]).foreachRDD(lambda rdd: None)
            await first.start_async()
            with pytest.raises(StreamingStateError, match=ONE_ACTIVE):
                await second.start_async()
            assert StreamingContext.getActiveContexts() == [first]
            await first.stop_async()
            await second.start_async()  # alone now: allowed
            third = StreamingContext(spark_context, 0.2)
            third.queueStream([[1]]).foreachRDD(lambda rdd: None)
            async with third:
                with pytest.raises(StreamingStateError, match=ONE_ACTIVE):
                    await third.start_async()
            await second.stop_async()

    anyio.run(main)
    assert StreamingContext.getActive() is None


@pytest.mark.spark
def test_a_stop_from_inside_a_foreach_rdd_function_stops_the_context(contexts: Any) -> None:
    """ssc.stop() called by an output function, on its job's thread: the stop would wait for that job, which waits for
    the stop; it runs on a thread of its own instead, the function returns, and the context stops."""
    ssc, _ = contexts()
    returned = threading.Event()

    def output(rdd: Any) -> None:
        rdd.count()
        ssc.stop(stopSparkContext=False)
        returned.set()

    ssc.queueStream([[1], [2], [3]]).foreachRDD(output)
    ssc.start()
    assert ssc.awaitTerminationOrTimeout(120), "the context did not stop"  # a hang guard
    assert returned.is_set() and ssc.getState() == "STOPPED"
