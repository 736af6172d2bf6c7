"""Continuous processing on real Spark (local[2]): DStream programs end to end, the foreach contract, refusals, stops.

Each program runs inside ``async with StreamingContext(sc, Continuous(...))`` on asyncio and on
trio; the tests wait for committed epochs (domain events), never for time to pass.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
import pytest

from scheduler import InvalidPipelineError
from streaming import StatefulProcessor, StreamingContext
from streaming.continuous import Continuous, ContinuousExecution, FileSink, FileSource, MemorySink
from tests.anyio_support import BACKENDS

pytestmark = pytest.mark.spark

GUARD_S = 90


def run(backend: str, body: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        with anyio.fail_after(GUARD_S):
            await body()

    anyio.run(guarded, backend=backend)


def query_of(ssc: StreamingContext) -> ContinuousExecution:
    runtime = ssc.runtime
    assert isinstance(runtime, ContinuousExecution)
    return runtime


def keep(row: Any) -> bool:
    return row.value % 3 != 1


def transform(row: Any) -> tuple[int, int]:
    return row.value, row.value * row.value


def expected_rows(values: list[int]) -> list[tuple[int, int]]:
    return [transform(_Row(v)) for v in values if keep(_Row(v))]


class _Row:
    def __init__(self, value: int) -> None:
        self.value = value


def source_values(rows: list[tuple[int, int]], partitions: int = 2) -> dict[int, list[int]]:
    by_partition: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for value, _ in rows:
        by_partition[value % partitions].append(value)
    return by_partition


def assert_prefix_of_each_partition(rows: list[tuple[int, int]], partitions: int = 2) -> None:
    """Each partition's output is exactly what its first N rate rows give: nothing lost, nothing twice, in order."""
    for p, values in source_values(rows, partitions).items():
        assert values, f"partition {p} wrote nothing"
        top = max(values)
        assert values == [v for v in range(p, top + 1, partitions) if keep(_Row(v))], f"partition {p}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_map_filter_program_runs_continuously_and_commits_epochs_in_order(spark_context: Any, backend: str) -> None:
    """rate -> filter -> map -> memory sink: every committed row exactly once, epochs in order, progress per epoch."""
    sink = MemorySink()

    async def body() -> None:
        async with StreamingContext(spark_context, Continuous("200 milliseconds"), queryName=f"map-filter-{backend}") as ssc:
            ssc.rateStream(rowsPerSecond=500, numPartitions=2).filter(keep).map(transform).writeTo(sink)
            await ssc.start_async()
            query = query_of(ssc)
            await query.wait_for_epoch(query.last_committed_epoch + 4)
            await ssc.stop_async(stopGraceFully=True)
            assert ssc.status["message"] == "Stopped"
            epochs = sink.epochs()
            assert list(epochs) == list(range(len(epochs)))
            rows = sink.rows()
            assert_prefix_of_each_partition(rows)
            progress = ssc.recentProgress
            ids = [p["batchId"] for p in progress]
            assert ids and ids == list(range(ids[0], ids[0] + len(ids)))  # consecutive epochs, the newest retained
            if ids[0] == 0:  # a loaded machine may commit more epochs than the progress ring keeps (Spark's 100)
                # The rate source's rows, filtered ones included, as the epochs' input counts say.
                read = sum(p["numInputRows"] for p in progress)
                tops = {p: max(v) for p, v in source_values(rows).items()}
                assert read >= sum(len(range(p, tops[p] + 1, 2)) for p in tops)
            assert progress[-1]["sink"]["numOutputRows"] == -1
            assert progress[-1]["sources"][0]["description"] == "RateStreamV2[rowsPerSecond=500, numPartitions=2]"

    run(backend, body)


class FileWriter:
    """A pyspark-style ForeachWriter: one file per partition and epoch, a marker line at close."""

    def __init__(self, directory: str, skip_partition: int | None = None) -> None:
        self.directory = directory
        self.skip_partition = skip_partition
        self.file: Any = None

    def open(self, partition_id: int, epoch_id: int) -> bool:
        if partition_id == self.skip_partition:
            return False
        self.file = open(f"{self.directory}/{partition_id}-{epoch_id}.txt", "w")
        return True

    def process(self, row: Any) -> None:
        self.file.write(f"{row.value}\n")

    def close(self, error: BaseException | None) -> None:
        if self.file is not None:
            self.file.write(f"closed {error}\n")
            self.file.close()
            self.file = None


def test_foreach_writer_is_opened_per_partition_and_epoch_and_closed_at_its_end(spark_context: Any, tmp_path: Path) -> None:
    """open(partition, epoch) / process(row) / close(None) per epoch, in the tasks; a False open skips the rows."""

    async def body() -> None:
        async with StreamingContext(spark_context, Continuous("200 milliseconds")) as ssc:
            ssc.rateStream(rowsPerSecond=200, numPartitions=2).foreach(FileWriter(str(tmp_path), skip_partition=1))
            await ssc.start_async()
            query = query_of(ssc)
            await query.wait_for_epoch(query.last_committed_epoch + 3)
            await ssc.stop_async(stopGraceFully=True)
            last = query.last_committed_epoch
        values = []
        for epoch in range(last + 1):
            lines = (tmp_path / f"0-{epoch}.txt").read_text().splitlines()
            assert lines[-1] == "closed None", epoch
            values += [int(v) for v in lines[:-1]]
            assert not (tmp_path / f"1-{epoch}.txt").exists()
        assert values == list(range(0, 2 * len(values), 2)) and values

    run("asyncio", body)


def refuse(spark_context: Any, build: Callable[[StreamingContext], None], message: str) -> None:
    ssc = StreamingContext(spark_context, Continuous("1 second"))
    build(ssc)
    with pytest.raises(InvalidPipelineError) as raised:
        ssc.start()
    assert str(raised.value) == message
    assert ssc.getState() == "STOPPED"


def rate(ssc: StreamingContext) -> Any:
    return ssc.rateStream(10)


class Passing(StatefulProcessor):
    """Passes each key's rows on."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N803
        return rows


@pytest.mark.parametrize(("build", "message"), [
    (lambda ssc: rate(ssc).map(lambda r: (r.value, 1)).reduceByKey(lambda a, b: a + b).pprint(),
     "Continuous processing does not support reduceByKey operations."),
    (lambda ssc: rate(ssc).window(2, 1).pprint(), "Continuous processing does not support window operations."),
    (lambda ssc: rate(ssc).count().pprint(), "Continuous processing does not support count operations."),
    (lambda ssc: rate(ssc).transform(lambda rdd: rdd).pprint(), "Continuous processing does not support transform operations."),
    (lambda ssc: rate(ssc).repartition(4).pprint(), "Continuous processing does not support repartition operations."),
    (lambda ssc: rate(ssc).map(lambda r: (r.value, 1)).updateStateByKey(lambda new, old: 1).pprint(),
     "Continuous processing does not support updateStateByKey operations."),
    (lambda ssc: rate(ssc).withWatermark(lambda r: r.timestamp, "1 second").pprint(),
     "Continuous processing does not support withWatermark operations."),
    (lambda ssc: rate(ssc).map(lambda r: (r.value, r)).mapGroupsWithState(lambda k, rows, state: k).pprint(),
     "Continuous processing does not support mapGroupsWithState operations."),
    (lambda ssc: rate(ssc).map(lambda r: (r.value, r)).transformWithState(Passing(), "Append", "None").pprint(),
     "Continuous processing does not support transformWithState operations."),
    (lambda ssc: rate(ssc).join(rate(ssc)).pprint(), "Continuous processing does not support join operations."),
    (lambda ssc: rate(ssc).foreachRDD(lambda rdd: None), "'foreachBatch' is not supported with continuous trigger"),
    (lambda ssc: rate(ssc).saveAsTextFiles("/tmp/never"), "'foreachBatch' is not supported with continuous trigger"),
    (lambda ssc: ssc.queueStream([[1]]).pprint(), "Data source queueStream does not support continuous processing."),
    (lambda ssc: ssc.textFileStream("/tmp/never").pprint(), "Data source textFileStream does not support continuous processing."),
    (lambda ssc: rate(ssc).map(lambda r: r), "requirement failed: No output operations registered, so nothing to execute"),
    (lambda ssc: (rate(ssc).pprint(), rate(ssc).pprint()),
     "a continuous context runs one output operation, got 2; write each output with its own context (several contexts "
     "may run on one SparkContext)"),
    (lambda ssc: ssc.rateStream(10, numPartitions=3).pprint(),
     "a continuous query runs one long-running task per input partition, all at once: 3 partitions need 3 task slots, "
     "and Spark has 2 (defaultParallelism); use fewer partitions or give Spark more cores"),
], ids=["reduceByKey", "window", "count", "transform", "repartition", "updateStateByKey", "withWatermark",
        "mapGroupsWithState", "transformWithState", "join", "foreachRDD", "saveAsTextFiles", "queueStream", "textFileStream", "no-output",
        "two-outputs", "too-many-partitions"])
def test_unsupported_programs_are_refused_at_start_with_sparks_messages(spark_context: Any, build: Any, message: str) -> None:
    """Anything but narrow operations, continuous inputs and one continuous output is refused when the context starts."""
    refuse(spark_context, build, message)


def test_continuous_outputs_and_inputs_need_a_continuous_trigger(spark_context: Any) -> None:
    """foreach/writeTo and rateStream in a micro-batch context fail at the call, saying what to do."""
    ssc = StreamingContext(spark_context, 1)
    with pytest.raises(InvalidPipelineError, match=r"^continuous inputs are read by continuous processing: create the "
                                                   r"context with a trigger, StreamingContext\(sc, Continuous\('1 second'\)\)$"):
        ssc.rateStream(10)
    stream = ssc.queueStream([[1]])
    with pytest.raises(InvalidPipelineError, match=r"^foreach\(\) is an output of continuous processing"):
        stream.foreach(print)
    with pytest.raises(InvalidPipelineError, match=r"^writeTo\(\) is an output of continuous processing"):
        stream.writeTo(MemorySink())


def test_a_socket_line_past_the_bound_setting_fails_the_continuous_query(spark_context: Any) -> None:
    """socketTextStream reads spark.aiodstream.receiver.maxLineLength (here 10) into its SocketSource; the Spark task that
    reads a longer line fails the query with LineTooLongError naming the setting and the address."""
    from pyspark.errors import StreamingQueryException as PySparkStreamingQueryException

    from tests.streaming.continuous.test_socket_source import serving_a_long_line
    from tests.streaming.test_spark_integration import spark_conf

    server = socket.create_server(("127.0.0.1", 0))
    address = server.getsockname()

    async def body() -> None:
        with spark_conf(spark_context, spark__aiodstream__receiver__maxLineLength="10"):
            ssc = StreamingContext(spark_context, Continuous("200 milliseconds"))
            ssc.socketTextStream(*address).writeTo(MemorySink())
        async with ssc:
            await ssc.start_async()
            with pytest.raises(PySparkStreamingQueryException) as raised:
                await ssc.await_termination_async()
            assert re.search(r"LineTooLongError: a line of at least \d+ characters is longer than spark\.aiodstream\.receiver\."
                             rf"maxLineLength \(10\): the continuous query reading {re.escape(address[0])}:{address[1]} fails ",
                             str(raised.value))

    try:
        with serving_a_long_line(server, GUARD_S):
            run("asyncio", body)
    finally:
        server.close()


def test_a_bad_foreach_writer_is_refused_at_the_call_with_pysparks_message(spark_context: Any) -> None:
    """A writer without a callable process is refused as pyspark refuses it."""
    ssc = StreamingContext(spark_context, Continuous("1 second"))
    with pytest.raises(InvalidPipelineError, match=r"^Provided object does not have a 'process' method$"):
        ssc.rateStream(10).foreach(object())


def append(path: Path, lines: list[str]) -> None:
    with open(path, "a") as f:
        f.writelines(f"{line}\n" for line in lines)


@pytest.mark.parametrize("graceful", [True, False], ids=["graceful", "immediate"])
def test_stop_in_the_middle_of_an_epoch(spark_context: Any, tmp_path: Path, graceful: bool) -> None:
    """Graceful: the epoch in progress is committed. Immediate: it is not, and the restart re-reads it; nothing twice."""
    source = tmp_path / "in.txt"
    out = tmp_path / "out"
    lines = [f"line-{i}" for i in range(200)]
    source.write_text("".join(f"{line}\n" for line in lines[:100]))

    async def one_run(more: list[str], stop_gracefully: bool) -> tuple[int, int]:
        async with StreamingContext(spark_context, Continuous("150 milliseconds")) as ssc:
            ssc.checkpoint(str(tmp_path / "ckpt"))
            ssc.continuousStream(FileSource([source])).map(str.upper).writeTo(FileSink(out))
            ssc._checkpoint.recovering = True  # resume from the checkpoint, as getOrCreate does
            await ssc.start_async()
            query = query_of(ssc)
            await query.wait_for_epoch(query.last_committed_epoch + 2)
            await anyio.to_thread.run_sync(append, source, more)  # rows arrive while the stop comes
            before = query.last_committed_epoch
            await ssc.stop_async(stopGraceFully=stop_gracefully)
            return before, query.last_committed_epoch

    async def body() -> None:
        before, after = await one_run(lines[100:150], graceful)
        committed = list(FileSink.read_committed(out))
        assert committed == [line.upper() for line in lines[: len(committed)]]
        if graceful:
            assert after > before and len(committed) == 150  # the epoch in progress was closed and committed
        else:
            assert after == before or after == before + 1  # at most an epoch that was already complete
        await one_run(lines[150:], True)  # a graceful stop this time: everything read is committed
        committed = list(FileSink.read_committed(out))
        assert committed == [line.upper() for line in lines]  # exactly once across the stop

    run("asyncio", body)


def test_a_pyspark_query_listener_hears_every_epoch_and_the_manager_lists_the_query(spark_context: Any) -> None:
    """onQueryStarted before start returns, onQueryProgress per epoch (pyspark's objects), onQueryTerminated; streams.active."""
    from pyspark.sql.streaming import StreamingQueryListener

    from streaming import streams

    heard: list[tuple[str, Any]] = []

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            heard.append(("started", str(event.id)))

        def onQueryProgress(self, event: Any) -> None:
            heard.append(("progress", event.progress.batchId))

        def onQueryIdle(self, event: Any) -> None:
            heard.append(("idle", None))

        def onQueryTerminated(self, event: Any) -> None:
            heard.append(("terminated", event.exception))

    async def body() -> None:
        async with StreamingContext(spark_context, Continuous("200 milliseconds"), queryName="heard") as ssc:
            ssc.addStreamingListener(Listener())
            ssc.rateStream(50).writeTo(MemorySink())
            await ssc.start_async()
            assert heard == [("started", ssc.id)] and ssc.id is not None
            assert "heard" in [q.name for q in streams.active]
            query = query_of(ssc)
            await query.wait_for_epoch(2)
            await ssc.stop_async(stopGraceFully=True)
            assert "heard" not in [q.name for q in streams.active]

    run("asyncio", body)
    progress = [batch for kind, batch in heard if kind == "progress"]
    assert progress == list(range(len(progress))) and len(progress) >= 3
    assert heard[-1] == ("terminated", None)
