"""What the engine observes of a run on Spark Connect: a recorded trace, and each batch's input row counts.

Each test runs a few batches on a manual clock (no sleeps) on the test run's Connect session.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from streaming.simulation import read_trace
from tests.support import capture_events, run_dstream_batches

pytestmark = pytest.mark.connect


def test_record_trace_on_connect_writes_the_batches_without_spark_jobs(connect_session: Any, tmp_path: Path) -> None:
    """record_trace runs on Connect: every batch and its output operations are in the trace, the server's master and
    application in its header; the server's Spark jobs are not (said once, as a warning)."""
    clock = ManualClock(0)
    ssc = StreamingContext(connect_session, 1, clock=clock)
    ssc.queueStream([["a b"], ["c"], ["d e f"]]).flatMap(str.split).count().foreachRDD(lambda rdd: rdd.collect())
    ssc.record_trace(tmp_path / "run.jsonl")
    with capture_events(logging.WARNING) as events:
        assert run_dstream_batches(ssc, clock, 3) == []
    trace = read_trace(tmp_path / "run.jsonl")
    assert [b.batch_time.milliseconds for b in trace.completed_batches] == [1000, 2000, 3000]
    assert all(sorted(b.output_operation_infos) == [0] for b in trace.completed_batches)
    assert trace.meta["master"] == connect_session.conf.get("spark.master")
    assert trace.meta["app_id"] == connect_session.conf.get("spark.app.id") and trace.meta["app_id"]
    assert trace.meta["default_parallelism"] >= 1
    assert trace.spark_jobs == {} or not any(trace.spark_jobs.values())
    warned = [e for e in events if str(e["event"]).startswith("trace without Spark jobs")]
    assert len(warned) == 1 and "Spark Connect" in str(warned[0])


def test_rows_of_queued_rdds_dataframes_and_files_are_counted_on_connect(connect_session: Any, tmp_path: Path) -> None:
    """numInputRows per source on Connect, as on classic: a parallelized FrameRDD by its length (also through map), a
    Connect DataFrame, a file and a persisted filtered FrameRDD by the rows the batch's queries read (observed metrics;
    two outputs read them and they count once); a FrameRDD whose values a Python function still makes goes uncounted
    (0): observing it would split its pipeline."""
    incoming = tmp_path / "in"
    incoming.mkdir()
    clock = ManualClock(0)
    ssc = StreamingContext(connect_session, 1, clock=clock)
    sc = ssc.sparkContext
    queued = ssc.queueStream([sc.parallelize(range(7), 3), connect_session.range(5).toDF("n"),
                              sc.parallelize([1, 2], 2).map(lambda x: x + 1), sc.parallelize(range(6), 2).filter(lambda x: x % 2).cache(),
                              sc.parallelize(range(4), 2).filter(lambda x: x % 2), []])
    files = ssc.textFileStream(str(incoming))
    both = queued.map(lambda v: 1).union(files.map(lambda v: 1))
    both.foreachRDD(lambda rdd: rdd.count())
    values: list[list[Any]] = []
    queued.foreachRDD(lambda rdd: values.append(rdd.collect()))
    (incoming / "a.txt").write_text("1\n2\n3\n4\n")
    os.utime(incoming / "a.txt", ns=(500_000_000, 500_000_000))
    assert run_dstream_batches(ssc, clock, 6) == []
    assert values[2:5] == [[2, 3], [1, 3, 5], [1, 3]]  # an observed RDD holds the same values
    rows = [[(s.description, s.numInputRows) for s in p.sources] for p in ssc.recentProgress]
    assert rows[:6] == [[("Queue stream [0]", 7), ("File stream [1]", 4)],
                        [("Queue stream [0]", 5), ("File stream [1]", 0)],
                        [("Queue stream [0]", 2), ("File stream [1]", 0)],
                        [("Queue stream [0]", 3), ("File stream [1]", 0)],
                        [("Queue stream [0]", 0), ("File stream [1]", 0)],
                        [("Queue stream [0]", 0), ("File stream [1]", 0)]]
