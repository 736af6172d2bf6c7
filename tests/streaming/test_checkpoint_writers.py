"""One writer per checkpoint across driver processes (a Pipeline query) and for StreamingContexts on real Spark.

A refused start must leave the running query's checkpoint byte for byte as it was (every file
hashed before and after) and the running query must go on to its exact outputs.
"""

from __future__ import annotations

import json
import os
import socket
import time as _time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from scheduler import LOCK_FILE, ConcurrentCheckpointUpdateError, JobFailedError, ManualClock, Seconds
from streaming import ListSource, Pipeline, StreamingContext, StreamingRuntime
from tests.anyio_support import BACKENDS, raises_exactly
from tests.crash import Children, spawn
from tests.support import advance, checkpoint_held_by_another_process, file_digests

PIPELINE_CHILD = Path(__file__).with_name("checkpoint_writer_child.py")


def refusal(checkpoint: Path, pid: str, run: str | None = None) -> str:
    """The message a start gets while a process ``pid`` of this host holds ``checkpoint``."""
    who = f"run {run}, pid {pid}" if run is not None else f"pid {pid}"
    return (f"Multiple streaming queries are concurrently using {checkpoint}: another process holds it ({who}, on host "
            f"{socket.gethostname()}; lock file {checkpoint}/{LOCK_FILE}); stop that query first, or use another "
            "checkpoint location")


@pytest.mark.anyio
async def test_a_second_driver_process_is_refused_and_the_first_goes_on(tmp_path: Path) -> None:
    """Two drivers, one Pipeline checkpoint: the second start is refused with Spark's message, the first runs to exact output."""
    ck = tmp_path / "ck"
    with Children() as children:
        child = children.add(spawn([str(PIPELINE_CHILD), str(ck)], stdin=True))
        assert child.stdout is not None and child.stdin is not None
        with anyio.fail_after(60):
            word, pid, run = (await anyio.to_thread.run_sync(child.stdout.readline)).split()
        assert word == "ready"
        before = file_digests(ck)
        assert "offsets/0" in before and "commits/0" in before
        pipeline = Pipeline()
        pipeline.add_source(ListSource(list("xyz")), name="in")
        pipeline.add_output(lambda batch: None, name="out")
        async with StreamingRuntime(pipeline, Seconds(1), clock=ManualClock(0), checkpoint_location=ck) as second:
            with raises_exactly(ConcurrentCheckpointUpdateError, refusal(ck, pid, run)):
                await second.start()
        assert file_digests(ck) == before
        child.stdin.write("go\n")
        child.stdin.flush()
        with anyio.fail_after(60):
            word, outputs = (await anyio.to_thread.run_sync(child.stdout.readline)).split(" ", 1)
            assert await anyio.to_thread.run_sync(child.wait) == 0
        assert word == "outputs"
        assert json.loads(outputs) == [[1000, ["a", "b"]], [2000, ["c", "d"]], [3000, ["e", "f"]]]


def words_program(sc: Any, ssc: StreamingContext, outputs: dict[int, list[str]]) -> None:
    """Upper-cased words of a queue of three batches, collected per batch time."""
    def record(time: Any, rdd: Any) -> None:
        outputs[int(time.timestamp() * 1000)] = sorted(rdd.collect())

    ssc.queueStream([sc.parallelize(words, 1) for words in (["a", "b"], ["c"], ["d", "e"])]).map(str.upper).foreachRDD(record)


@pytest.mark.spark
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_refused_second_streaming_context_leaves_the_live_ones_checkpoint_alone(
        spark_context: Any, tmp_path: Path, backend: str, clock: ManualClock) -> None:
    """Two StreamingContexts under async with, one checkpoint: the second start is refused, nothing moves, the first goes on."""
    ck = tmp_path / "ck"

    async def scenario() -> dict[int, list[str]]:
        outputs: dict[int, list[str]] = {}
        first = StreamingContext(spark_context, 1.0, clock=clock)
        words_program(spark_context, first, outputs)
        first.checkpoint(str(ck))
        async with first:
            await first.start_async()
            await advance(first.runtime, clock)
            before = file_digests(ck)
            assert "offsets/0" in before and "commits/0" in before
            second = StreamingContext(spark_context, 1.0, clock=ManualClock(0))
            words_program(spark_context, second, {})
            second.checkpoint(str(ck))
            async with second:
                with raises_exactly(ConcurrentCheckpointUpdateError,
                                    f"Multiple streaming queries are concurrently using {ck}: {first.runtime!r} is active on "
                                    "it in this process; stop that query first, or use another checkpoint location"):
                    await second.start_async()
            assert file_digests(ck) == before and not [p for p in ck.iterdir() if p.name.startswith("superseded-")]
            await advance(first.runtime, clock, times=2)
            await first.stop_async()
        return outputs

    assert anyio.run(scenario, backend=backend) == {1000: ["A", "B"], 2000: ["C"], 3000: ["D", "E"]}


@pytest.mark.spark
def test_a_streaming_context_is_refused_while_another_process_holds_its_checkpoint(spark_context: Any, tmp_path: Path) -> None:
    """Another driver process holds the checkpoint: start() is refused with Spark's message and changes no byte there."""
    ck = tmp_path / "ck"
    with checkpoint_held_by_another_process(ck) as (pid, _, finish):
        before = file_digests(ck)
        ssc = StreamingContext(spark_context, 1.0, clock=ManualClock(0))
        words_program(spark_context, ssc, {})
        ssc.checkpoint(str(ck))
        with raises_exactly(ConcurrentCheckpointUpdateError, refusal(ck, pid)):
            ssc.start()
        assert file_digests(ck) == before
        finish()


@pytest.mark.spark
def test_a_file_streams_log_entry_written_by_another_writer_fails_the_query_with_sparks_message(
        spark_context: Any, tmp_path: Path) -> None:
    """The file stream's next sources entry already exists: that batch fails with CONCURRENT_STREAM_LOG_UPDATE, its output never runs."""
    base = (int(_time.time() * 1000) // 1000 - 1000) * 1000  # a grid time in the recent past: the files' times fit it
    watched, ck = tmp_path / "in", tmp_path / "ck"
    watched.mkdir()

    def write_file(name: str, line: str, mtime_ms: int) -> None:
        (watched / name).write_text(f"{line}\n")
        os.utime(watched / name, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))

    async def scenario() -> tuple[dict[int, list[str]], BaseException | None]:
        outputs: dict[int, list[str]] = {}
        clock = ManualClock(base)
        ssc = StreamingContext(spark_context, 1.0, clock=clock)

        def record(time: Any, rdd: Any) -> None:
            outputs[int(time.timestamp() * 1000)] = sorted(rdd.collect())

        ssc.textFileStream(str(watched)).foreachRDD(record)
        ssc.checkpoint(str(ck))
        write_file("f1.txt", "a", base + 500)
        async with ssc:
            await ssc.start_async()
            await advance(ssc.runtime, clock)
            (ck / "sources" / "0" / "1").write_text('v1\n{"path":"elsewhere","timestamp":0,"batchId":1}')
            write_file("f2.txt", "b", base + 1500)
            await advance(ssc.runtime, clock)
            error = ssc.runtime.exception()
            await ssc.stop_async()
        return outputs, error

    outputs, error = anyio.run(scenario)
    assert outputs == {base + 1000: ["a"]}
    assert isinstance(error, JobFailedError) and error.batch_time_ms == base + 2000
    assert isinstance(error.__cause__, ConcurrentCheckpointUpdateError)
    assert str(error.__cause__) == ("Concurrent update to the log. Multiple streaming jobs detected for 1. Please make sure only "
                                    "one streaming job runs on a specific checkpoint location at a time.")
