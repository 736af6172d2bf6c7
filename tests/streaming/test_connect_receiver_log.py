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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from tests.support import advance

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


def program(run: Run, items: list[str]) -> Callable[[StreamingContext], None]:
    """Word counts per batch over an async source (a receiver placed in this process)."""
    async def source() -> Any:
        for item in items:
            yield item

    def build(ssc: StreamingContext) -> None:
        ssc.asyncIterableStream(source).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b, 2).foreachRDD(run.output)
    return build


async def _drive(ssc: StreamingContext, clock: ManualClock, batches: int) -> None:
    async with ssc:
        await ssc.start_async()
        await ssc.runtime.wait_until_idle()
        await advance(ssc.runtime, clock, INTERVAL_MS, times=batches)
        await ssc.stop_async(stopSparkContext=False)


def run_program(spark: Any, directory: Path, clock: ManualClock, batches: int, build: Callable[[StreamingContext], None],
                *, resume: bool) -> None:
    def setup() -> StreamingContext:
        ssc = StreamingContext(spark, INTERVAL_MS / 1000, clock=clock)
        build(ssc)
        ssc.checkpoint(str(directory))
        return ssc

    ssc = StreamingContext.getOrCreate(str(directory), setup, restoreGraph=False) if resume else setup()
    anyio.run(_drive, ssc, clock, batches)


def crash_and_resume(spark: Any, directory: Path) -> tuple[Run, Run]:
    """Batch 1 takes the logged records a, b, a and fails; the resumed run re-runs it from the log, then batch 2 takes c."""
    first = Run(fail_at=1 * INTERVAL_MS)
    run_program(spark, directory, ManualClock(0), 1, program(first, ["a", "b", "a"]), resume=False)
    second = Run()
    run_program(spark, directory, ManualClock(INTERVAL_MS), 1, program(second, ["c"]), resume=True)
    return first, second


def test_a_driver_receiver_s_logged_blocks_replay_on_connect_exactly_once_as_on_classic_spark(
        connect_session: Any, spark_context: Any, tmp_path: Path) -> None:
    classic = crash_and_resume(spark_context, tmp_path / "classic")
    first, second = crash_and_resume(connect_session, tmp_path / "connect")

    assert first.outputs == {}
    log = tmp_path / "connect" / "sources" / "0"
    assert sorted(n for n in os.listdir(log) if n.isdigit()), "the Connect run wrote the records to the write-ahead log"
    assert second.outputs == {1000: [("a", 2), ("b", 1)], 2000: [("c", 1)]}
    assert (first.outputs, second.outputs) == (classic[0].outputs, classic[1].outputs)
    assert second.kinds == {"FrameRDD"}  # the replayed blocks run on the server, not through a SparkContext
