"""A StreamingContext is a query: pyspark's StreamingQuery names, the manager, query listeners, failure modes, true row counts."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import anyio
import pytest
from pyspark.errors import StreamingQueryException as PySparkStreamingQueryException
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import StreamingQueryProgress as PySparkProgress

from listeners import BatchCompleted, EventRecorder, QueryProgress, StreamingListener
from scheduler import (
    InvalidPipelineError,
    JobFailedError,
    ManualClock,
    SinkProgress,
    SourceProgress,
    StreamingQueryException,
    StreamingQueryProgress,
)
from streaming import StreamingContext, streams
from streaming._listener_compat import PySparkQueryListenerAdapter
from streaming._manager import pyspark_progress
from tests.anyio_support import BACKENDS, HANG_GUARD_S, settle
from tests.streaming.test_spark_integration import spark_conf
from tests.support import advance, run_dstream_batches

pytestmark = pytest.mark.spark


class Recording(StreamingQueryListener):  # type: ignore[misc]
    """A pyspark StreamingQueryListener that records what it is called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def onQueryStarted(self, event: Any) -> None:
        self.calls.append(("started", event))

    def onQueryProgress(self, event: Any) -> None:
        self.calls.append(("progress", event))

    def onQueryIdle(self, event: Any) -> None:
        self.calls.append(("idle", event))

    def onQueryTerminated(self, event: Any) -> None:
        self.calls.append(("terminated", event))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]


@contextlib.contextmanager
def manager_listener(listener: object) -> Iterator[None]:
    streams.addListener(listener)
    try:
        yield
    finally:
        streams.removeListener(listener)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_context_is_a_query_with_pysparks_names(spark_context: Any, backend: str, clock: ManualClock) -> None:
    """id, runId, name, isActive, status, lastProgress/recentProgress (pyspark's objects, true row counts), explain."""
    seen: list[list[int]] = []

    async def body() -> None:
        async with StreamingContext(spark_context, 1, clock=clock, queryName="numbers") as ssc:
            assert (ssc.id, ssc.runId, ssc.name, ssc.isActive, ssc.lastProgress) == (None, None, "numbers", False, None)
            assert ssc.status == {"message": "Initializing StreamExecution", "isDataAvailable": False, "isTriggerActive": False}
            ssc.queueStream([[1, 2], [3], [4, 5, 6]]).map(lambda x: x * 10).foreachRDD(lambda rdd: seen.append(rdd.collect()))
            await ssc.start_async()
            assert ssc.isActive and uuid.UUID(ssc.id) != uuid.UUID(ssc.runId)  # type: ignore[arg-type]
            assert streams.get(ssc.id) is ssc and ssc in streams.active  # type: ignore[arg-type]
            await advance(ssc.runtime, clock, times=4)
            recent = ssc.recentProgress
            assert all(isinstance(p, PySparkProgress) for p in recent)
            assert [(p.batchId, p.numInputRows) for p in recent] == [(0, 2), (1, 1), (2, 3), (3, 0)]
            last = ssc.lastProgress
            assert last is not None and last["batchId"] == 3 and last.name == "numbers"
            assert [(s.description, s.startOffset, s.endOffset) for s in recent[2].sources] == [("Queue stream [0]", "2", "3")]
            assert set(recent[0].durationMs) >= {"latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets",
                                                 "triggerExecution"}
            assert ssc.status["message"] == "Waiting for next trigger"
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                ssc.explain()
            lines = printed.getvalue().splitlines()
            assert lines[0].startswith(f"== Output operation 0: foreachRDD at {Path(__file__).name}:")
            assert lines[1:] == [
                "ForEachDStream [slide 1000 ms]",
                "+- TransformedDStream [slide 1000 ms]",
                "   +- QueueInputDStream 'Queue stream [0]' [slide 1000 ms]",
            ]
            await ssc.stop_async()
            assert not ssc.isActive and ssc.status["message"] == "Stopped" and streams.get(ssc.id) is None  # type: ignore[arg-type]
            assert ssc.exception() is None

    anyio.run(body, backend=backend)  # no real-time guard: a first Spark job may take seconds
    assert seen[:3] == [[10, 20], [30], [40, 50, 60]]


def test_rows_of_queued_rdds_and_files_are_counted_while_the_batch_runs(spark_context: Any, tmp_path: Path, clock: ManualClock) -> None:
    """numInputRows per source and BatchInfo.numRecords are the rows read, for RDD queues and file streams alike."""
    incoming = tmp_path / "in"
    incoming.mkdir()
    recorder = EventRecorder()

    async def body() -> None:
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            queue = ssc.queueStream([spark_context.parallelize(range(7), 3), spark_context.parallelize([], 1)])
            files = ssc.textFileStream(str(incoming))
            # Two outputs read the same (uncached) RDDs: each partition still counts once.
            both = queue.union(files.map(int))
            both.foreachRDD(lambda rdd: rdd.count())
            both.foreachRDD(lambda rdd: rdd.collect())
            ssc.addStreamingListener(recorder)
            await ssc.start_async()
            staged = tmp_path / "staged"
            staged.write_text("1\n2\n3\n4\n")
            os.utime(staged, (0.5, 0.5))
            os.rename(staged, incoming / "a.txt")
            await advance(ssc.runtime, clock, times=3)
            rows = [[(s.description, s.numInputRows) for s in p.sources] for p in ssc.recentProgress]
            assert rows == [[("Queue stream [0]", 7), ("File stream [1]", 4)],
                            [("Queue stream [0]", 0), ("File stream [1]", 0)],
                            [("Queue stream [0]", 0), ("File stream [1]", 0)]]
            await ssc.stop_async()

    anyio.run(body)
    batches = recorder.completed_batches
    assert [b.num_records for b in batches[:3]] == [11, 0, 0]
    [path] = batches[0].stream_id_to_input_info[1].metadata["files"]
    assert path.endswith("a.txt")


def test_the_query_id_lasts_across_restarts_on_a_checkpoint(spark_context: Any, tmp_path: Path) -> None:
    """Same checkpoint: same id, new runId; the manager no longer lists a stopped context."""
    ids: list[tuple[str | None, str | None]] = []

    def setup() -> StreamingContext:
        ssc = StreamingContext(spark_context, 0.1)
        ssc.queueStream([[1]], default=[]).foreachRDD(lambda rdd: None)
        return ssc

    for _ in range(2):
        ssc = StreamingContext.getOrCreate(str(tmp_path / "ckpt"), setup, restoreGraph=False)
        ssc.start()
        ids.append((ssc.id, ssc.runId))
        ssc.stop(stopSparkContext=False)
        assert ssc.id not in [q.id for q in streams.active]
    assert ids[0][0] == ids[1][0] and ids[0][1] != ids[1][1]


def test_a_pyspark_query_listener_on_the_manager_hears_a_sync_context(spark_context: Any) -> None:
    """onQueryStarted before start() returns; progress with pyspark's objects; terminated; awaitAnyTermination."""
    listener = Recording()
    streams.resetTerminated()
    with manager_listener(listener):
        ssc = StreamingContext(spark_context, 0.1)
        ssc.queueStream([[1, 2, 3]]).foreachRDD(lambda rdd: rdd.count())
        ssc.start()
        assert listener.kinds() == ["started"]
        started = listener.calls[0][1]
        assert (str(started.id), str(started.runId), started.name) == (ssc.id, ssc.runId, None)
        assert streams.awaitAnyTermination(0.05) is False
        ssc.processAllAvailable()
        ssc.stop(stopSparkContext=False)
        assert streams.awaitAnyTermination() is None
        assert streams.awaitAnyTermination(1) is True
    kinds = listener.kinds()
    assert kinds[0] == "started" and kinds[-1] == "terminated" and set(kinds[1:-1]) == {"progress"}
    progress = [event.progress for kind, event in listener.calls if kind == "progress"]
    assert progress[0].numInputRows == 3 and str(progress[0].id) == ssc.id
    assert [p.batchId for p in progress] == list(range(len(progress)))
    terminated = listener.calls[-1][1]
    assert (terminated.exception, terminated.errorClassOnException) == (None, None)
    streams.resetTerminated()
    assert streams.awaitAnyTermination(0) is False  # pyspark's: whether one terminated already


def test_a_listener_removed_from_the_manager_hears_nothing_more(spark_context: Any) -> None:
    """removeListener takes it off the active queries too; unknown listeners are ignored, as in pyspark."""
    listener = Recording()
    streams.removeListener(listener)  # never added: no error
    ssc = StreamingContext(spark_context, 0.1)
    ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
    ssc.start()
    streams.addListener(listener)
    assert listener in streams.listListeners()
    with pytest.raises(ValueError, match="already added"):
        streams.addListener(listener)
    ssc.processAllAvailable()
    streams.removeListener(listener)
    assert listener not in streams.listListeners()
    ssc.processAllAvailable()
    ssc.stop(stopSparkContext=False)
    assert "progress" in listener.kinds() and "terminated" not in listener.kinds()


@pytest.mark.parametrize("backend", BACKENDS)
def test_process_all_available_waits_for_a_file_a_late_batch_left_to_the_next(spark_context: Any, backend: str,
                                                                               tmp_path: Path) -> None:
    """A file stream takes a file in the first batch at or after the file's time: a batch planned late, after the call, with
    a time before the file's finds nothing new, and the wait goes on until the next batch read the file and one more
    found nothing."""
    clock = ManualClock(1_000_000)
    directory = tmp_path / "in"
    directory.mkdir()
    release = threading.Event()
    read: list[list[str]] = []

    def out(rdd: Any) -> None:
        rows = rdd.collect()
        if rows:
            release.wait(60)  # the batch that reads the file is held until the test has looked at the wait
        read.append(rows)

    class Completed(StreamingListener):
        def __init__(self) -> None:
            self.batches: list[int] = []
            self.changed = anyio.Event()

        async def on_batch_completed(self, event: BatchCompleted) -> None:
            self.batches.append(event.batch_info.batch_time.milliseconds)
            self.changed.set()
            self.changed = anyio.Event()

    async def completed(listener: Completed, count: int) -> None:
        with anyio.fail_after(60):  # a first Spark job may take seconds
            while len(listener.batches) < count:
                await listener.changed.wait()

    async def body() -> None:
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            listener = Completed()
            ssc.addStreamingListener(listener)
            ssc.textFileStream(str(directory)).foreachRDD(out)
            await ssc.start_async()
            staged = tmp_path / "a.txt"
            staged.write_text("x\ny\n")
            os.utime(staged, ns=(1_001_500_000_000, 1_001_500_000_000))  # between the first two batch times
            staged.rename(directory / "a.txt")
            done = anyio.Event()

            async def wait() -> None:
                await ssc.process_all_available_async()
                done.set()

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait)
                    await settle()
                    clock.advance(2000)  # both batches due at once: the first is planned after the call, before the file
                    await completed(listener, 1)
                    await settle()
                    assert listener.batches == [1_001_000] and read == [[]]
                    assert not done.is_set()
                    release.set()
                    await completed(listener, 2)
                    assert not done.is_set()
                    clock.advance(1000)
                    with anyio.fail_after(60):
                        await done.wait()
            finally:
                release.set()
            assert read[:2] == [[], ["x", "y"]]
            await ssc.stop_async()

    anyio.run(body, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_process_all_available_through_a_window_shorter_than_its_slide(spark_context: Any, backend: str,
                                                                       tmp_path: Path) -> None:
    """Batches that no output reads (a window of 1 s sliding by 10 s) take no file: with an empty directory the wait
    ends after one of them; with a file waiting it goes on until the batch that reads the stream took it."""
    clock = ManualClock(1_000_000)
    directory = tmp_path / "in"
    directory.mkdir()
    read: list[list[str]] = []

    async def body() -> None:
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            ssc.textFileStream(str(directory)).window(1, 10).foreachRDD(lambda rdd: read.append(rdd.collect()))
            await ssc.start_async()

            async def wait(done: anyio.Event) -> None:
                await ssc.process_all_available_async()
                done.set()

            async with anyio.create_task_group() as tg:
                done = anyio.Event()
                tg.start_soon(wait, done)
                await settle()
                clock.advance(1000)
                with anyio.fail_after(60):
                    await done.wait()  # one batch found nothing: an empty directory
                staged = tmp_path / "a.txt"
                staged.write_text("x\n")
                os.utime(staged, ns=(clock.now().milliseconds * 1_000_000,) * 2)
                staged.rename(directory / "a.txt")
                done = anyio.Event()
                tg.start_soon(wait, done)
                await settle()
                for _ in range(11):
                    await advance(ssc.runtime, clock)
                    await settle()
                    if ["x"] in read:
                        break
                    assert not done.is_set(), "returned while the file waited for the batch that reads the stream"
                assert ["x"] in read
                await advance(ssc.runtime, clock)
                with anyio.fail_after(60):
                    await done.wait()
            await ssc.stop_async()

    anyio.run(body, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_process_all_available_does_not_take_a_failed_listing_for_an_empty_directory(
        spark_context: Any, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose listing raised read no file, but cannot say none waits: the wait goes on through it until a batch
    lists the directory, reads the file there and one more finds nothing."""
    import streaming.inputs._files as files

    clock = ManualClock(1_000_000)
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "a.txt").write_text("x\n")
    os.utime(directory / "a.txt", ns=(1_000_500_000_000,) * 2)
    failing = threading.Event()
    failing.set()
    listed = files.list_local_files

    def list_local_files(path: str) -> Any:
        if failing.is_set():
            raise PermissionError(13, "Permission denied", path)
        return listed(path)

    monkeypatch.setattr(files, "list_local_files", list_local_files)
    read: list[list[str]] = []

    async def body() -> None:
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            ssc.textFileStream(str(directory)).foreachRDD(lambda rdd: read.append(rdd.collect()))
            await ssc.start_async()
            done = anyio.Event()

            async def wait() -> None:
                await ssc.process_all_available_async()
                done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await settle()
                for _ in range(2):
                    await advance(ssc.runtime, clock)
                    await settle()
                assert read == [[], []] and not done.is_set(), "returned after batches that could not list the directory"
                failing.clear()
                await advance(ssc.runtime, clock)
                assert read[2] == ["x"]
                await advance(ssc.runtime, clock)
                with anyio.fail_after(60):
                    await done.wait()
            await ssc.stop_async()

    anyio.run(body, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_batch_under_dstream_semantics_is_reported_and_later_batches_go_on(
        spark_context: Any, backend: str, clock: ManualClock) -> None:
    """The default: awaitTermination raises the job's error, later batches run, exception() is None, no death cause."""
    def fail_on_two(rdd: Any) -> None:
        if 2 in rdd.collect():
            raise ValueError("two is not allowed")

    listener = Recording()
    after: list[list[int]] = []

    async def body() -> None:
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            ssc.addStreamingListener(listener)
            q = ssc.queueStream([[1], [2], [3]])
            q.foreachRDD(fail_on_two)
            q.foreachRDD(lambda rdd: after.append(rdd.collect()))
            await ssc.start_async()
            await advance(ssc.runtime, clock, times=3)
            with pytest.raises(JobFailedError, match="two is not allowed"):
                await ssc.await_termination_async()
            with pytest.raises(JobFailedError):
                await ssc.process_all_available_async()
            assert ssc.isActive and ssc.exception() is None
            # The failed batch reported no progress; the others did.
            assert [p.batchId for p in ssc.recentProgress] == [0, 2]
            await ssc.stop_async()

    anyio.run(body, backend=backend)
    assert after == [[1], [2], [3]]
    assert listener.calls[-1][0] == "terminated" and listener.calls[-1][1].exception is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_batch_under_structured_semantics_terminates_the_query(spark_context: Any, backend: str, clock: ManualClock) -> None:
    """stopOnFailure: terminated, StreamingQueryException (ours and pyspark's), status, listener, manager, no commit."""
    listener = Recording()
    later: list[list[int]] = []

    def fail_on_two(rdd: Any) -> None:
        values = rdd.collect()
        if 2 in values:
            raise ValueError("two is not allowed")
        later.append(values)

    async def body() -> None:
        streams.resetTerminated()
        async with StreamingContext(spark_context, 1, clock=clock, stopOnFailure=True) as ssc:
            ssc.addStreamingListener(listener)
            ssc.queueStream([[1], [2], [3]]).foreachRDD(fail_on_two)
            await ssc.start_async()
            clock.advance(1000)
            clock.advance(1000)
            with pytest.raises(StreamingQueryException) as caught:
                await ssc.await_termination_async()
            assert not ssc.isActive
            error = ssc.exception()
            assert isinstance(error, PySparkStreamingQueryException) and isinstance(error, StreamingQueryException)
            # pyspark's str() leads with the error class, as the JVM's message does.
            assert str(error) == f"[STREAM_FAILED] Query [id = {ssc.id}, runId = {ssc.runId}] terminated with exception: two is not allowed"
            assert error.getCondition() == "STREAM_FAILED" and isinstance(error.cause, Exception)
            assert "two is not allowed" in str(error.cause)
            assert (error.start_offset, error.end_offset) == ("[1]", "[2]")
            assert caught.value.message == error.message and isinstance(caught.value, PySparkStreamingQueryException)
            assert ssc.status == {"message": "Terminated with exception: two is not allowed", "isDataAvailable": False,
                                  "isTriggerActive": False}
            with pytest.raises(PySparkStreamingQueryException):
                await streams.await_any_termination()
            with pytest.raises(StreamingQueryException):
                await ssc.process_all_available_async()

    anyio.run(body, backend=backend)  # no real-time guard: a first Spark job may take seconds
    streams.resetTerminated()
    assert later == [[1]]
    terminated = listener.calls[-1][1]
    assert listener.calls[-1][0] == "terminated" and "two is not allowed" in terminated.exception
    assert terminated.errorClassOnException == "FOREACH_BATCH_USER_FUNCTION_ERROR"  # Spark 4.3's, for foreachBatch
    assert [e.progress.batchId for k, e in listener.calls if k == "progress"] == [0]


def test_a_runtime_with_a_checkpoint_stops_on_failure_by_default(tmp_path: Path) -> None:
    """A runtime's default follows Structured Streaming when it has a checkpoint, DStream without."""
    from streaming import ListSource, Milliseconds, Pipeline, StreamingRuntime

    def pipeline() -> Pipeline:
        p = Pipeline()
        p.add_source(ListSource([1]), name="in")
        p.add_output(lambda batch: None, name="out")
        return p

    assert StreamingRuntime(pipeline(), Milliseconds(100), checkpoint_location=tmp_path).stop_on_failure
    assert not StreamingRuntime(pipeline(), Milliseconds(100), track_progress=True).stop_on_failure
    assert not StreamingRuntime(pipeline(), Milliseconds(100), checkpoint_location=tmp_path, stop_on_failure=False).stop_on_failure
    with pytest.raises(InvalidPipelineError, match="needs a query"):
        StreamingRuntime(pipeline(), Milliseconds(100), stop_on_failure=True)


def test_async_progress_tracking_for_a_dstream_program(spark_context: Any, tmp_path: Path) -> None:
    """Enabled through checkpoint options or a Spark setting; Spark's refusals for unsupported sinks and stateful graphs."""
    def program(ckpt: Path, options: dict[str, object] | None, output: str = "foreach") -> StreamingContext:
        ssc = StreamingContext(spark_context, 0.1)
        stream = ssc.queueStream([[1, 2], [3]], default=[])
        if output == "foreach":
            stream.foreachRDD(lambda rdd: rdd.count())
        elif output == "files":
            stream.saveAsTextFiles(str(tmp_path / "out" / "batch"))
        else:
            stream.map(lambda x: (x % 2, x)).updateStateByKey(lambda new, old: sum(new) + (old or 0)).pprint()
        ssc.checkpoint(str(ckpt), options=options)
        return ssc

    ssc = program(tmp_path / "a", {"asyncProgressTrackingEnabled": True, "asyncProgressTrackingCheckpointIntervalMs": 0})
    ssc.start()
    ssc.processAllAvailable()
    assert ssc.runtime.tracker is not None and ssc.runtime.tracker.options.async_progress_tracking_enabled
    ssc.stop(stopSparkContext=False)
    assert sorted(os.listdir(tmp_path / "a" / "commits"))

    with spark_conf(spark_context, spark__streaming__asyncProgressTrackingEnabled="true"):
        ssc = program(tmp_path / "b", None)
        assert ssc.runtime.tracker is not None and ssc.runtime.tracker.options.async_progress_tracking_enabled
        ssc.stop(stopSparkContext=False)

    ssc = program(tmp_path / "c", {"asyncProgressTrackingEnabled": "true"}, output="files")
    with pytest.raises(InvalidPipelineError, match=r"^Sink saveAsTextFiles at .* does not support async progress tracking$"):
        ssc.start()
    ssc = program(tmp_path / "d", {"asyncProgressTrackingEnabled": True}, output="state")
    with pytest.raises(InvalidPipelineError, match="Stateful streaming queries does not support async progress tracking"):
        ssc.start()
    with pytest.raises(InvalidPipelineError, match="unknown option"):
        program(tmp_path / "e", {"asyncProgressTrackingEnable": True})


def test_the_watermark_policy_is_an_option_of_checkpoint_as_documented(spark_context: Any, tmp_path: Path) -> None:
    """checkpoint()'s options take spark.sql.streaming.multipleWatermarkPolicy (it was refused as an unknown option) and
    the query's tracker runs with it; a value other than min or max is refused there, with Spark's message."""
    ssc = StreamingContext(spark_context, 0.1)
    ssc.queueStream([[1]], default=[]).foreachRDD(lambda rdd: None)
    ssc.checkpoint(str(tmp_path / "ck"), options={"spark.sql.streaming.multipleWatermarkPolicy": "MAX"})
    try:
        ssc.start()
        assert ssc.runtime.tracker is not None and ssc.runtime.tracker.watermarks.policy == "max"
    finally:
        ssc.stop(stopSparkContext=False)
    other = StreamingContext(spark_context, 0.1)
    try:
        with pytest.raises(InvalidPipelineError, match=r"^\[INVALID_CONF_VALUE.REQUIREMENT\] The value 'middle'"):
            other.checkpoint(str(tmp_path / "ck2"), options={"spark.sql.streaming.multipleWatermarkPolicy": "middle"})
    finally:
        other.stop(stopSparkContext=False)


def test_a_file_streams_latest_offset_is_null_as_sparks_file_source_reports_it(spark_context: Any, tmp_path: Path) -> None:
    """A file stream finds its files while a batch is planned: the offset it knew before (the last batch's) was reported
    as latestOffset, below the batch's endOffset. Spark's file source reports null; so does this."""
    (tmp_path / "in").mkdir()
    ssc = StreamingContext(spark_context, 0.2)
    ssc.textFileStream(str(tmp_path / "in")).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    try:
        for n in range(2):
            (tmp_path / f".f{n}").write_text("x\n" * (n + 1))
            os.rename(tmp_path / f".f{n}", tmp_path / "in" / f"f{n}.txt")
            ssc.processAllAvailable()
        sources = [json.loads(p.json)["sources"][0] for p in ssc.recentProgress if p.numInputRows]
        assert len(sources) == 2 and sources[1]["endOffset"] is not None
        assert [source["latestOffset"] for source in sources] == [None, None]
    finally:
        ssc.stop(stopSparkContext=False)


def test_a_query_listener_may_stop_its_query_as_sparks_may(spark_context: Any) -> None:
    """pyspark's StreamingQueryListener calling stop() in onQueryProgress: the query stops (the stop runs once the
    callback returned, as it waits for the listeners) and onQueryTerminated follows; it used to be refused with
    pyspark.streaming's 'Cannot stop StreamingContext within listener bus thread.'"""
    heard: list[Any] = []
    stopped = threading.Event()
    ssc = StreamingContext(spark_context, 0.1)

    class StopsIt(StreamingQueryListener):  # type: ignore[misc]
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            if not heard:
                heard.append(ssc.stop(stopSparkContext=False))  # returns at once: None

        def onQueryTerminated(self, event: Any) -> None:
            heard.append(("terminated", event.exception))
            stopped.set()

    ssc.addStreamingListener(StopsIt())
    ssc.queueStream([[1], [2]], default=[]).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    try:
        assert ssc.awaitTerminationOrTimeout(HANG_GUARD_S)
        assert stopped.wait(HANG_GUARD_S)
        assert heard == [None, ("terminated", None)] and not ssc.isActive and ssc.exception() is None
    finally:
        ssc.stop(stopSparkContext=False)


def test_a_listener_with_both_pyspark_interfaces_is_refused(spark_context: Any) -> None:
    from pyspark.streaming.listener import StreamingListener

    class Both(Recording, StreamingListener):  # type: ignore[misc]
        def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
            pass

    with pytest.raises(TypeError, match="one listener per interface"):
        StreamingContext(spark_context, 1).addStreamingListener(Both())


def test_progress_json_of_a_context_parses_as_sparks(spark_context: Any) -> None:
    """The JSON string pyspark keeps (progress.json) is the one Spark would send: parsed back, same values."""
    ssc = StreamingContext(spark_context, 0.1)
    ssc.queueStream([[1, 2]]).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    ssc.processAllAvailable()
    last = ssc.recentProgress[0]
    ssc.stop(stopSparkContext=False)
    parsed = json.loads(last.json)
    assert parsed["numInputRows"] == 2 and parsed["sources"][0]["numInputRows"] == 2 and parsed["sink"]["numOutputRows"] == -1


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_of_receiver_inputs_are_the_records_they_took(spark_context: Any, backend: str, clock: ManualClock) -> None:
    """An async-iterable stream (a receiver): numInputRows is what it received before the batch; kept in memory only."""
    async def five() -> Any:
        for i in range(5):
            yield i

    async def body() -> None:
        recorder = EventRecorder()
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            ssc.addStreamingListener(recorder)
            ssc.asyncIterableStream(five).foreachRDD(lambda rdd: rdd.count())
            await ssc.start_async()
            await recorder.wait_for(lambda events: any(type(e).__name__ == "ReceiverStopped" for e in events))
            await advance(ssc.runtime, clock, times=2)
            assert [(p.batchId, p.numInputRows) for p in ssc.recentProgress] == [(0, 5), (1, 0)]
            assert [json.loads(p.json)["sources"][0]["endOffset"] for p in ssc.recentProgress] == [{"logOffset": 0}] * 2
            await ssc.stop_async()

    anyio.run(body, backend=backend)


def test_remove_streaming_listener_takes_a_pending_or_running_listener_off(spark_context: Any) -> None:
    listener, other = Recording(), Recording()
    ssc = StreamingContext(spark_context, 0.1)
    ssc.addStreamingListener(listener)
    ssc.addStreamingListener(other)
    ssc.removeStreamingListener(listener)  # still pending: never registered
    with pytest.raises(ValueError, match="not registered"):
        ssc.removeStreamingListener(listener)
    ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
    ssc.start()
    ssc.removeStreamingListener(other)  # on the running bus, from this (non-loop) thread
    ssc.stop(stopSparkContext=False)
    assert listener.calls == [] and "terminated" not in other.kinds()


@pytest.mark.parametrize(("rate", "rendered"), [(0.15, 0.2), (1.15, 1.2), (0.35, 0.4), (2.65, 2.7), (0.25, 0.3), (0.14, 0.1),
                                               (3 / 20, 0.2), (7.0, 7.0)])
def test_rates_are_rounded_half_up_from_their_shortest_decimal_form_as_spark_renders_them(rate: float,
                                                                                         rendered: float) -> None:
    """Spark 4.3's figures (its SourceProgress built on the JVM with the same doubles): 0.15 renders as 0.2, not as the
    0.1 that rounding the double's exact binary value gives."""
    source = SourceProgress("queue", "0", "1", "1", 3, rate, rate)
    progress = StreamingQueryProgress(uuid.uuid4(), uuid.uuid4(), None, "2026-11-27T00:00:00.000Z", 1, 5,
                                      {"triggerExecution": 5}, (source,), SinkProgress("out"))
    for text in (progress.json(), progress.pretty_json()):
        assert json.loads(text)["sources"][0]["inputRowsPerSecond"] == rendered
        assert json.loads(text)["sources"][0]["processedRowsPerSecond"] == rendered


@pytest.mark.parametrize(("rows", "rate"), [(3, math.inf), (0, math.nan)])
def test_a_progress_whose_input_rate_is_not_finite_reaches_pyspark(rows: int, rate: float) -> None:
    """Batches planned in one millisecond (recovered ones) have rows/0 as input rate: Spark's JSON leaves it out, and
    pyspark's SourceProgress.fromJson failed with KeyError('inputRowsPerSecond') in lastProgress, recentProgress and a
    pyspark listener's onQueryProgress. The JVM path's double is given instead."""
    source = SourceProgress("queue", "0", "1", "1", rows, rate, 3.0)
    progress = StreamingQueryProgress(uuid.uuid4(), uuid.uuid4(), None, "2026-11-27T00:00:00.000Z", 1, 5,
                                      {"triggerExecution": 5}, (source,), SinkProgress("out"))
    assert "inputRowsPerSecond" not in json.loads(progress.json())["sources"][0]  # Spark's JSON, as Spark writes it
    converted = pyspark_progress(progress)
    assert isinstance(converted, PySparkProgress) and converted.sources[0].numInputRows == rows
    seen = converted.sources[0].inputRowsPerSecond
    assert seen == rate if rows else math.isnan(seen)
    assert converted.sources[0].processedRowsPerSecond == 3.0
    heard: list[Any] = []

    class Hears(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None: ...
        def onQueryProgress(self, event: Any) -> None:
            heard.append(event.progress.sources[0].numInputRows)
        def onQueryIdle(self, event: Any) -> None: ...
        def onQueryTerminated(self, event: Any) -> None: ...

    PySparkQueryListenerAdapter(Hears()).on_query_progress(QueryProgress(progress))
    assert heard == [rows]


def test_foreach_batch_on_a_spark_context_without_a_session_makes_the_session(spark_context: Any, clock: ManualClock,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Before any SparkSession, pyspark's RDD.toDF is a placeholder raising CALL_BEFORE_INITIALIZE: foreachBatch gets
    or makes the SparkContext's session first, so every batch reaches the function as a DataFrame."""
    from pyspark import RDD
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    def placeholder(self: Any, schema: Any = None, sampleRatio: Any = None) -> Any:  # noqa: N803  # pyspark's, as before a session
        raise PySparkRuntimeError(errorClass="CALL_BEFORE_INITIALIZE",
                                  messageParameters={"func_name": "RDD.toDF", "object": "SparkSession"})

    monkeypatch.setattr(RDD, "toDF", placeholder)
    monkeypatch.setattr(SparkSession, "_instantiatedSession", None)
    got: list[tuple[int, int]] = []
    ssc = StreamingContext(spark_context, 1, clock=clock)
    ssc.queueStream([[(1,)], [(2,), (3,)]], oneAtATime=True).foreachBatch(lambda df, batch_id: got.append((batch_id, df.count())))
    assert run_dstream_batches(ssc, clock, 2) == []
    assert got == [(0, 1), (1, 2)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_negative_timeout_waits_for_the_stop(spark_context: Any, backend: str, clock: ManualClock) -> None:
    """awaitTerminationOrTimeout(-1) waits without a bound, as pyspark's (Spark's waiter takes a negative timeout so);
    -0.0001 is 0 ms there (int(timeout * 1000)) and returns at once."""
    results: list[bool] = []

    async def body() -> None:
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
            await ssc.start_async()
            assert await ssc.await_termination_async(-0.0001) is False
            async with anyio.create_task_group() as tg:

                async def waiter() -> None:
                    results.append(await ssc.await_termination_async(-1))

                tg.start_soon(waiter)
                await advance(ssc.runtime, clock, times=3)
                assert results == []
                await ssc.stop_async()

    anyio.run(body, backend=backend)
    assert results == [True]
