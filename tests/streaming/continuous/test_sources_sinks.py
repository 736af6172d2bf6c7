"""Continuous sources, sinks and the task loop, without Spark: readers, offsets, epoch commits, and whole runs on threads."""

from __future__ import annotations

import itertools
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler import InvalidPipelineError, Seconds, StreamingQueryException
from streaming.continuous import (
    ConsoleSink,
    Continuous,
    ContinuousExecution,
    ContinuousStream,
    ContinuousTaskRetryError,
    FileSink,
    FileSource,
    ForeachSink,
    MemorySink,
    RateSource,
    SocketSource,
    TaskSpec,
    ThreadTaskLauncher,
    run_task,
)
from tests.support import wait_until

FAR = time.monotonic() + 3600  # a read deadline that never stops a read that has data


def test_file_reader_reads_whole_lines_and_resumes_at_its_byte_offset(tmp_path: Path) -> None:
    """A partial last line waits for its newline; the offset is the byte after the last whole line; reopening resumes there."""
    path = tmp_path / "p0.txt"
    path.write_text("a\nbb\nccc")
    source = FileSource([path])
    reader = source.open_reader(0, source.initial_offset(0))
    assert reader.read(FAR) == ["a", "bb"]
    assert reader.offset() == 5
    assert reader.read(time.monotonic()) == []  # "ccc" has no newline yet
    with open(path, "a") as f:
        f.write("c\ndd\n")
    assert reader.read(FAR) == ["cccc", "dd"]
    assert reader.offset() == len("a\nbb\ncccc\ndd\n")
    reader.close()
    again = source.open_reader(0, 5)
    assert again.read(FAR) == ["cccc", "dd"]
    again.close()


def test_file_reader_waits_for_a_file_that_does_not_exist_yet(tmp_path: Path) -> None:
    """A missing file reads as empty until it appears."""
    path = tmp_path / "later.txt"
    reader = FileSource([path]).open_reader(0, 0)
    assert reader.read(time.monotonic()) == []
    path.write_text("x\n")
    assert reader.read(FAR) == ["x"]
    reader.close()


def test_socket_reader_splits_lines_across_packets_and_counts_them() -> None:
    """Lines split over several sends come out whole; the offset counts lines; the server closing ends nothing."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    source = SocketSource([("127.0.0.1", port)])
    reader = source.open_reader(0, source.initial_offset(0))
    conn, _ = server.accept()
    conn.sendall(b"hel")
    assert reader.read(time.monotonic() + 0.05) == []
    conn.sendall(b"lo\r\nwor")
    assert reader.read(FAR) == ["hello"]
    conn.sendall(b"ld\nlast without a newline")
    conn.close()
    assert reader.read(FAR) == ["world"]
    # The server closed: its last line without a newline is a line, as Java's readLine gives it (it was dropped).
    assert reader.read(FAR) == ["last without a newline"]
    assert reader.offset() == 3
    assert reader.read(time.monotonic() + 0.01) == []
    reader.close()
    server.close()


def test_rate_source_is_replayable_from_an_offset() -> None:
    """Two readers from the same offset give the same rows: values p, p+n, ... spaced n/rate seconds apart."""
    source = RateSource(rowsPerSecond=1000, numPartitions=2)
    past = time.time() * 1000 - 10_000
    first = source.open_reader(1, {"value": 1, "runTimestampMs": past}).read(FAR)[:5]
    second = source.open_reader(1, {"value": 1, "runTimestampMs": past}).read(FAR)[:5]
    assert first == second
    assert [r.value for r in first] == [1, 3, 5, 7, 9]
    gaps = [(b.timestamp - a.timestamp).total_seconds() * 1000 for a, b in itertools.pairwise(first)]
    assert gaps == pytest.approx([2.0] * 4, abs=0.01)


def test_offsets_merge_and_split_per_partition() -> None:
    """The offsets-log line is {"<partition>": offset}; a line of another partitioning is refused."""
    source = FileSource(["a", "b"])
    line = source.merge_offsets([10, 20])
    assert line == '{"0":10,"1":20}'
    assert source.split_offsets(line) == [10, 20]
    with pytest.raises(InvalidPipelineError, match="has 3 partitions, AppendOnlyFileStream"):
        source.split_offsets('{"0":1,"1":2,"2":3}')


@pytest.mark.parametrize("source, line, problem", [
    (FileSource(["a", "b"]), '{"0":-5,"1":2}', "partition 0's -5 is not a byte position"),
    (FileSource(["a", "b"]), '{"0":1,"1":"x"}', "partition 1's 'x' is not a byte position"),
    (FileSource(["a", "b"]), '{"0":true,"1":2}', "partition 0's True is not a byte position"),
    (FileSource(["a", "b"]), '{"0":{"value":0,"runTimestampMs":1.5},"1":{"value":1,"runTimestampMs":1.5}}',
     "partition 0's {'value': 0, 'runTimestampMs': 1.5} is not a byte position"),
    (SocketSource([("localhost", 9), ("localhost", 10)]), '{"0":0,"1":2.5}', "partition 1's 2.5 is not a number of lines"),
    (RateSource(10, 2), '{"0":7,"1":{"value":1,"runTimestampMs":0}}', "partition 0's 7 is not a rate offset"),
    (RateSource(10, 2), '{"0":{"value":1,"runTimestampMs":0},"1":{"value":3,"runTimestampMs":0}}',
     "has a value that is not one of partition 0's of 2 partitions"),
    (RateSource(10, 2), '{"0":{"value":0,"runTimestampMs":"now"},"1":{"value":3,"runTimestampMs":0}}',
     "has a runTimestampMs that is not a finite number"),
    (RateSource(10, 2), '{"0":{"value":0},"1":{"value":3,"runTimestampMs":0}}', "is not a rate offset"),
    (RateSource(10, 2), '{"0":{"value":0,"runTimestampMs":1' + '0' * 400 + '},"1":{"value":3,"runTimestampMs":0}}',
     "has a runTimestampMs that is not a finite number"),
])
def test_an_offset_a_source_cannot_start_at_is_refused_at_the_restart(source: Any, line: str, problem: str) -> None:
    """Each partition's offset from the checkpoint is checked before a task opens a reader at it: a clear error naming
    the partition, not a task failing later with a bare ValueError or OSError."""
    with pytest.raises(InvalidPipelineError, match=r"^the checkpoint's offset .* does not fit .*" + re.escape(problem)):
        source.split_offsets(line)


def test_offsets_a_source_can_start_at_are_taken() -> None:
    assert RateSource(10, 2).split_offsets('{"0":{"value":4,"runTimestampMs":12.5},"1":{"value":1,"runTimestampMs":3}}') == [
        {"value": 4, "runTimestampMs": 12.5}, {"value": 1, "runTimestampMs": 3}]
    assert SocketSource([("localhost", 9)]).split_offsets('{"0":0}') == [0]


ADDRESS_RULE = "a socket address must be (host, port) with a host name or address and a port in 1..65535"


@pytest.mark.parametrize(("make", "message"), [
    (lambda: RateSource(0), "Invalid value '0'. The option 'rowsPerSecond' must be positive"),
    (lambda: RateSource(10, numPartitions=-1), "Invalid value '-1'. The option 'numPartitions' must be positive"),
    (lambda: SocketSource([]), "a continuous socket source needs at least one (host, port) address"),
    (lambda: SocketSource([("h", 0)]), f"{ADDRESS_RULE}, got ('h', 0)"),
    (lambda: SocketSource([("", 9)]), f"{ADDRESS_RULE}, got ('', 9)"),
    (lambda: FileSource([]), "a continuous file source needs at least one file path"),
    (lambda: ForeachSink(object()), "Provided object does not have a 'process' method"),
    (lambda: ConsoleSink(-1), "num must be a non-negative int, got -1"),
    (lambda: ContinuousStream(object()), "Data source <object> does not support continuous processing."),  # type: ignore[arg-type]
])
def test_bad_sources_and_sinks_are_refused(make: Any, message: str) -> None:
    """Each bad argument gets a message naming the rule and the value."""
    with pytest.raises(InvalidPipelineError) as raised:
        make()
    text = str(raised.value)
    assert text == message or (message.startswith("Data source <object>") and text.startswith("Data source <object object at"))


def test_file_sink_commits_an_epoch_once_and_clears_what_later_epochs_left(tmp_path: Path) -> None:
    """Files are renamed into place and the epoch logged; a second commit is a no-op; prepare() drops uncommitted files."""
    sink = FileSink(tmp_path / "out")
    messages = {}
    for partition in (0, 1):
        writer = sink.open_writer(partition, 0)
        writer.write(f"row-{partition}")
        messages[partition] = writer.commit()
    sink.commit_epoch(0, messages)
    sink.commit_epoch(0, messages)
    assert list(FileSink.read_committed(tmp_path / "out")) == ["row-0", "row-1"]
    assert sink.latest_committed_epoch() == 0
    orphan = sink.open_writer(0, 1)
    orphan.write("never")
    orphan.commit()  # epoch 1 never commits on the driver
    (tmp_path / "out" / "part-00001-00000").write_text("never\n")  # renamed, but not logged
    sink.prepare(0)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["_epochs", "part-00000-00000", "part-00000-00001"]


def commit_epochs(sink: FileSink, epochs: range, rows_of: Any) -> None:
    """Commit each epoch with two partitions, partition p writing ``rows_of(epoch, p)``."""
    for epoch in epochs:
        messages = {}
        for partition in (0, 1):
            writer = sink.open_writer(partition, epoch)
            for row in rows_of(epoch, partition):
                writer.write(row)
            messages[partition] = writer.commit()
        sink.commit_epoch(epoch, messages)


def test_file_sink_writes_no_file_for_a_partition_without_rows_and_compacts_its_log(tmp_path: Path) -> None:
    """An idle query wrote two empty part files and one log entry per epoch, for ever (lane R1: 259,000 files a day at
    1 s epochs). Now a partition without rows writes nothing, and every 10th epoch the entries are compacted into one
    file: 25 epochs leave the files with rows, one compaction and the 5 entries after it, and read back whole."""
    sink, out = FileSink(tmp_path / "out"), tmp_path / "out"
    commit_epochs(sink, range(25), lambda epoch, partition: [f"e{epoch}"] if epoch % 7 == 0 and partition == 0 else [])
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("part-")) == [
        "part-00000-00000", "part-00007-00000", "part-00014-00000", "part-00021-00000"]
    assert sorted(p.name for p in (out / "_epochs").iterdir()) == ["19.compact", "20", "21", "22", "23", "24"]
    assert list(FileSink.read_committed(out)) == ["e0", "e7", "e14", "e21"]
    assert sink.latest_committed_epoch() == 24
    assert all(sink.has_committed(epoch) for epoch in range(25)) and not sink.has_committed(25)
    commit_epochs(sink, range(3, 4), lambda epoch, partition: ["again"])  # a compacted epoch committed again: a no-op
    assert list(FileSink.read_committed(out)) == ["e0", "e7", "e14", "e21"]
    assert len([p for p in out.iterdir() if p.name.endswith(".tmp")]) == 2  # its writers' files, left unrenamed
    sink.prepare(24)
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_file_sink_read_after_a_crash_inside_a_compaction_lists_each_file_once(tmp_path: Path) -> None:
    """Killed after writing 9.compact and before removing the entries it covers: readers take the compaction and skip
    those entries, and the next compaction removes them."""
    sink, out = FileSink(tmp_path / "out"), tmp_path / "out"
    commit_epochs(sink, range(9), lambda epoch, partition: [f"e{epoch}p{partition}"])
    kept = {p.name: p.read_bytes() for p in (out / "_epochs").iterdir()}
    commit_epochs(sink, range(9, 10), lambda epoch, partition: [f"e{epoch}p{partition}"])
    for name, data in kept.items():  # as if the removal never ran
        (out / "_epochs" / name).write_bytes(data)
    expected = [f"e{epoch}p{partition}" for epoch in range(10) for partition in (0, 1)]
    assert list(FileSink.read_committed(out)) == expected
    assert sink.latest_committed_epoch() == 9
    commit_epochs(sink, range(10, 20), lambda epoch, partition: [f"e{epoch}p{partition}"])
    assert sorted(p.name for p in (out / "_epochs").iterdir()) == ["19.compact"]
    assert list(FileSink.read_committed(out)) == expected + [f"e{e}p{p}" for e in range(10, 20) for p in (0, 1)]


def test_console_sink_prints_an_epoch_as_pprint_prints_a_batch() -> None:
    """A header naming the epoch, up to num rows across partitions, then '...' if there were more."""
    printed: list[str] = []
    sink = ConsoleSink(3, out=printed.append)
    messages = {}
    for partition, rows in ((0, ["a", "b"]), (1, ["c", "d", "e"])):
        writer = sink.open_writer(partition, 4)
        for row in rows:
            writer.write(row)
        messages[partition] = writer.commit()
    sink.commit_epoch(4, messages)
    assert printed == ["-------------------------------------------\nEpoch: 4\n-------------------------------------------\na\nb\nc\n...\n"]


def test_foreach_sink_calls_open_process_close_and_a_function_per_row() -> None:
    """The writer's open gets (partition, epoch), close gets the error; a plain function gets each row."""
    calls: list[Any] = []

    class Writer:
        def open(self, partition_id: int, epoch_id: int) -> bool:
            calls.append(("open", partition_id, epoch_id))
            return epoch_id != 9

        def process(self, row: Any) -> None:
            calls.append(("process", row))

        def close(self, error: BaseException | None) -> None:
            calls.append(("close", error))

    sink = ForeachSink(Writer())
    writer = sink.open_writer(1, 3)
    writer.write("x")
    writer.commit()
    skipped = sink.open_writer(1, 9)
    skipped.write("y")
    boom = RuntimeError("boom")
    skipped.abort(boom)
    assert calls == [("open", 1, 3), ("process", "x"), ("close", None), ("open", 1, 9), ("close", boom)]
    rows: list[Any] = []
    function = ForeachSink(rows.append).open_writer(0, 0)
    function.write(1)
    function.commit()
    assert rows == [1]


def test_a_retried_task_fails_with_sparks_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A task attempt other than the first raises Spark's ContinuousTaskRetryException message before anything runs."""
    monkeypatch.setattr("streaming.continuous._task._attempt_number", lambda: 1)
    spec = TaskSpec("127.0.0.1", 9, "t", 0, FileSource([tmp_path / "x"]), 0, 0, 0, None, MemorySink())
    with pytest.raises(ContinuousTaskRetryError, match=r"^Continuous execution does not support task retry$"):
        run_task(spec)


# -- whole runs on threads (real time, short epochs; the waits are on committed epochs) --


def keep(line: str) -> bool:
    return "skip" not in line


@pytest.mark.anyio
async def test_file_to_file_on_threads_is_exactly_once_across_a_restart(tmp_path: Path) -> None:
    """Two file partitions through filter and map to the file sink; a restart resumes at the committed offsets."""
    inputs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    expected: list[str] = []

    def append(round_: int) -> None:
        for p, path in enumerate(inputs):
            lines = [f"{p}-{round_}-{i}" + (" skip" if i == 2 else "") for i in range(5)]
            with open(path, "a") as f:
                f.write("".join(line + "\n" for line in lines))
            expected.extend(line.upper() for line in lines if keep(line))

    def plan() -> Any:
        return ContinuousStream(FileSource(inputs)).filter(keep).map(str.upper).to(FileSink(tmp_path / "out"))

    options = {"spark.sql.streaming.continuous.executorPollIntervalMs": 5}
    for round_ in range(2):
        append(round_)
        async with ContinuousExecution(plan(), Continuous(20), launcher=ThreadTaskLauncher(),
                                       checkpoint_location=tmp_path / "ck", options=options) as query:
            await query.start()
            await query.process_all_available()
            await query.stop(graceful=True)
        assert sorted(FileSink.read_committed(tmp_path / "out")) == sorted(expected)


@pytest.mark.anyio
async def test_socket_partitions_on_threads_reach_the_memory_sink() -> None:
    """Two TCP servers, one partition each, unioned: every line sent reaches the sink once, in order per partition."""
    sink = MemorySink()
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    sent = {p: [f"s{p}-{i}" for i in range(50)] for p in range(2)}

    def serve(p: int) -> None:
        conn, _ = servers[p].accept()
        with conn:
            conn.sendall("".join(line + "\n" for line in sent[p]).encode())
            time.sleep(0.5)  # keep the connection open while the query reads (a server thread, not the test)

    threads = [threading.Thread(target=serve, args=(p,), daemon=True) for p in range(2)]
    for thread in threads:
        thread.start()
    a = ContinuousStream(SocketSource([("127.0.0.1", servers[0].getsockname()[1])]))
    b = ContinuousStream(SocketSource([("127.0.0.1", servers[1].getsockname()[1])]))
    plan = a.union(b).map(lambda line: line.upper()).to(sink)
    async with ContinuousExecution(plan, Continuous(20), launcher=ThreadTaskLauncher(),
                                   options={"spark.sql.streaming.continuous.executorPollIntervalMs": 5}) as query:
        await query.start()
        with anyio.fail_after(120):  # a hang guard only: threads and sockets are slow on a busy machine
            while len(sink.rows()) < 100:
                await query.wait_for_epoch(query.last_committed_epoch + 1)
        await query.stop()
    rows = sink.rows()
    for p in range(2):
        assert [r for r in rows if r.startswith(f"S{p}")] == [line.upper() for line in sent[p]]
    assert len(query.last_progress.sources) == 2 if query.last_progress else False
    for server in servers:
        server.close()


@pytest.mark.anyio
async def test_a_failing_operation_terminates_the_query_with_its_error(tmp_path: Path) -> None:
    """A row the user's function cannot handle fails its task; the query terminates with that error as the cause."""
    path = tmp_path / "in.txt"
    path.write_text("1\n2\nx\n")
    plan = ContinuousStream(FileSource([path])).map(int).to(MemorySink())
    async with ContinuousExecution(plan, Continuous(20), launcher=ThreadTaskLauncher(),
                                   options={"spark.sql.streaming.continuous.executorPollIntervalMs": 5}) as query:
        await query.start()
        with pytest.raises(StreamingQueryException, match=r"invalid literal for int\(\) with base 10: 'x'"):
            await query.await_termination()
    assert query.status.message.startswith("Terminated with exception")


def test_rate_source_does_not_drift_over_many_rows() -> None:
    """Row k is due at start + k * period exactly: adding the period to a ~1.7e12 ms float would round it away."""
    source = RateSource(rowsPerSecond=30_000, numPartitions=2)
    start = time.time() * 1000 - 60_000
    reader = source.open_reader(0, {"value": 0, "runTimestampMs": start})
    rows = reader.read(FAR) + reader.read(FAR)
    assert len(rows) == 8192
    period = 2 * 1000 / 30_000
    assert reader.offset() == {"value": 2 * 8192, "runTimestampMs": start + 8192 * period}
    assert [r.value for r in rows[:3]] == [0, 2, 4]
    assert rows[-1].timestamp.timestamp() * 1000 == pytest.approx(start + 8191 * period, abs=0.001)


@pytest.mark.anyio
async def test_a_driver_epoch_jumping_by_several_closes_each_epoch_in_the_task(tmp_path: Path) -> None:
    """On a manual clock, three intervals in a row, faster than the task polls (the driver's epoch jumps by several
    between two polls): the task closes its epoch and each one it slept through, each opened and closed."""
    from scheduler import ManualClock, Milliseconds

    path = tmp_path / "in.txt"
    path.write_text("")
    calls: list[tuple[str, int, int]] = []
    lock = threading.Lock()

    class Recorder:
        def open(self, partition_id: int, epoch_id: int) -> bool:
            with lock:
                calls.append(("open", partition_id, epoch_id))
            self.epoch = epoch_id
            return True

        def process(self, row: Any) -> None:
            pass

        def close(self, error: BaseException | None) -> None:
            with lock:
                calls.append(("close", 0, self.epoch))

    clock = ManualClock(0)
    plan = ContinuousStream(FileSource([path])).foreach(Recorder())
    async with ContinuousExecution(plan, Continuous(1000), launcher=ThreadTaskLauncher(), clock=clock,
                                   options={"spark.sql.streaming.continuous.executorPollIntervalMs": 200}) as query:
        await query.start()
        await query.wait_for_epoch(0)  # the first tick fired at start: the task closed epoch 0
        coordinator = query.coordinator
        assert coordinator is not None
        for epoch in (2, 3, 4):  # epochs 1, 2 and 3 end, one interval each, between two polls of the task
            clock.advance(Milliseconds(1000))
            await wait_until(lambda: coordinator.current_epoch == epoch)  # noqa: B023 - read before the next step
        await query.wait_for_epoch(3)
        await query.stop()
    with lock:
        seen = list(calls)
    assert seen[: 8] == [(kind, 0, e) for e in range(4) for kind in ("open", "close")]
    assert [p.batch_id for p in query.recent_progress][:4] == [0, 1, 2, 3]


@pytest.mark.anyio
async def test_a_partition_function_that_stops_reading_early_does_not_break_the_epoch(tmp_path: Path) -> None:
    """mapPartitions taking only the first row of each epoch: the rest is read and dropped, epochs go on."""
    path = tmp_path / "in.txt"
    path.write_text("a\nb\nc\n")
    sink = MemorySink()
    plan = ContinuousStream(FileSource([path])).mapPartitions(lambda rows: itertools.islice(rows, 1)).to(sink)
    async with ContinuousExecution(plan, Continuous(20), launcher=ThreadTaskLauncher(),
                                   options={"spark.sql.streaming.continuous.executorPollIntervalMs": 5}) as query:
        await query.start()
        await query.process_all_available()
        committed = query.last_committed_epoch
        await query.wait_for_epoch(committed + 2)
        await query.stop(graceful=True)
    assert sink.rows() == ["a"]
    assert query.exception() is None and query.statistics().input_rows == 3


@pytest.mark.anyio
async def test_a_failed_thread_task_ends_the_others_before_the_query_reports_its_failure() -> None:
    """On the thread launcher, partition 0 fails while partition 1 is inside a sink call: the failure ends partition 1 at
    its next call to the driver, and the query reports its failure only once that thread has ended (its sink call
    returned), not while user code still runs (the waits for the other threads were abandoned at once)."""
    import threading

    from streaming.continuous import ContinuousSource, PartitionReader

    inside, release = threading.Event(), threading.Event()
    log: list[str] = []

    class Reader(PartitionReader):
        def __init__(self, partition: int) -> None:
            self.partition, self.reads = partition, 0

        def read(self, deadline: float) -> list[Any]:
            self.reads += 1
            if self.partition == 0 and inside.is_set():
                raise RuntimeError("partition 0 failed")
            return [self.reads] if self.partition == 1 and self.reads == 1 else []

        def offset(self) -> int:
            return self.reads

        def close(self) -> None:
            log.append(f"reader {self.partition} closed")

    class Source(ContinuousSource):
        num_partitions = 2

        def initial_offset(self, partition: int) -> int:
            return 0

        def open_reader(self, partition: int, offset: Any) -> PartitionReader:
            return Reader(partition)

    def process(row: Any) -> None:
        inside.set()
        release.wait(60)  # a hang guard: the test releases it
        log.append("process returned")

    plan = ContinuousStream(Source()).foreach(process)
    async with ContinuousExecution(plan, Continuous(20), launcher=ThreadTaskLauncher(), abandon_after=Seconds(60),
                                   options={"spark.sql.streaming.continuous.executorPollIntervalMs": 5}) as query:
        await query.start()
        await anyio.to_thread.run_sync(inside.wait, 60)
        ended: list[str] = []

        async def wait() -> None:
            with pytest.raises(StreamingQueryException, match="partition 0 failed"):
                await query.await_termination()
            ended.append("reported")
            log.append("reported")

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await wait_until(lambda: query.exception() is not None)  # the query failed at once
            await anyio.wait_all_tasks_blocked()  # and its stop waits for partition 1's thread
            assert ended == [] and "process returned" not in log
            release.set()
        assert ended == ["reported"]
        assert log.index("process returned") < log.index("reader 1 closed") < log.index("reported")


def test_each_partitions_task_writes_through_its_own_copy_of_a_writer_object() -> None:
    """Tasks on threads shared the driver's writer: partition 1's open reset what partition 0 had buffered, so rows
    were lost, duplicated and put under the wrong partition. Each partition's task gets its own copy, as Spark's do."""
    emitted: list[tuple[int, list[str]]] = []

    class Buffering:
        def open(self, partition_id: int, epoch_id: int) -> bool:
            self.partition, self.rows = partition_id, []
            return True

        def process(self, row: str) -> None:
            self.rows.append(row)

        def close(self, error: BaseException | None) -> None:
            emitted.append((self.partition, self.rows))

    sink = ForeachSink(Buffering())
    first, second = sink.open_writer(0, 0), sink.open_writer(1, 0)
    first.write("a")
    second.write("b")
    first.commit()
    second.commit()
    again = sink.open_writer(0, 1)  # the same task's next epoch: its same copy
    again.write("c")
    again.commit()
    assert emitted == [(0, ["a"]), (1, ["b"]), (0, ["c"])]

    class Locked:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def process(self, row: str) -> None: ...

    with pytest.raises(InvalidPipelineError, match=r"^the foreach writer Locked cannot be copied for each task "):
        ForeachSink(Locked()).open_writer(0, 0)
