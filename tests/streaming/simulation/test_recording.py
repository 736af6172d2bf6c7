"""Recording a real run for the simulator: the trace's structure and invariants, never its speed.

A short run on the test session's SparkContext (and, for ``aiodstream calibrate --program``, in
child processes) is recorded and read back: every batch present, on the interval's grid, its
times in order, the events of one batch telling one story, each output operation's Spark jobs
inside it. How long anything took is not checked: that is the machine's, and
``bench/bench_fidelity.py`` measures it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from listeners import BatchCompleted, BatchStarted, BatchSubmitted, OutputOperationCompleted, OutputOperationStarted, StreamingStarted
from streaming._cli import main as cli
from streaming.simulation import Trace, read_trace

pytestmark = pytest.mark.spark

INTERVAL_MS = 200


def check_batches(trace: Trace, batches: int) -> None:
    """At least ``batches`` batches on the interval's grid, none missing, each batch's times in order, its operations inside it.

    The batch limit stops the context at once: with concurrent jobs, up to ``concurrentJobs - 1``
    batches still running then (behind one that completed) are abandoned, and missing.
    """
    done = trace.completed_batches
    assert len(done) >= batches
    assert trace.batch_interval is not None
    interval = trace.batch_interval.milliseconds
    times = [b.batch_time.milliseconds for b in done]
    assert times[0] % interval == 0 and len(set(times)) == len(times)
    grid = range(times[0], times[-1] + interval, interval)
    assert set(times) <= set(grid)
    assert len(grid) - len(times) <= (trace.concurrent_jobs or 1) - 1
    for batch in done:
        assert batch.output_operation_infos
        assert batch.processing_start_time is not None and batch.processing_end_time is not None
        assert batch.batch_time <= batch.submission_time <= batch.processing_start_time <= batch.processing_end_time
        for op in batch.output_operation_infos.values():
            assert op.start_time is not None and op.end_time is not None and op.failure_reason is None
            assert batch.processing_start_time <= op.start_time <= op.end_time <= batch.processing_end_time


def check_events(trace: Trace) -> None:
    """The run starts first; each batch is submitted, started, its operations run, then completed, with the same times throughout."""
    assert type(trace.events[0]) is StreamingStarted
    seen: dict[int, list[str]] = {}
    first: dict[tuple[int, str], Any] = {}
    for event in trace.events:
        if isinstance(event, (BatchSubmitted, BatchStarted, BatchCompleted)):
            info = event.batch_info
            seen.setdefault(info.batch_time.milliseconds, []).append(type(event).__name__)
            first.setdefault((info.batch_time.milliseconds, "submitted"), info.submission_time)
            if info.processing_start_time is not None:
                first.setdefault((info.batch_time.milliseconds, "started"), info.processing_start_time)
        elif isinstance(event, (OutputOperationStarted, OutputOperationCompleted)):
            op = event.output_operation_info
            seen.setdefault(op.batch_time.milliseconds, []).append(f"{type(event).__name__}:{op.id}")
            first.setdefault((op.batch_time.milliseconds, f"op {op.id}"), op.start_time)
    for batch in trace.completed_batches:
        t = batch.batch_time.milliseconds
        ops = sorted(batch.output_operation_infos)
        story = seen[t]
        assert story[:2] == ["BatchSubmitted", "BatchStarted"] and story[-1] == "BatchCompleted"
        assert sorted(story[2:-1]) == sorted([f"OutputOperationStarted:{op}" for op in ops]
                                             + [f"OutputOperationCompleted:{op}" for op in ops])
        for op in ops:
            assert story.index(f"OutputOperationStarted:{op}") < story.index(f"OutputOperationCompleted:{op}")
            assert first[(t, f"op {op}")] == batch.output_operation_infos[op].start_time
        assert (first[(t, "submitted")], first[(t, "started")]) == (batch.submission_time, batch.processing_start_time)


def check_spark_jobs(trace: Trace) -> None:
    """Every completed operation has its Spark jobs, each with stages and tasks, inside the operation's own times."""
    for batch in trace.completed_batches:
        for op, info in batch.output_operation_infos.items():
            jobs = trace.spark_jobs[(batch.batch_time.milliseconds, op)]
            assert jobs and all(job.stages for job in jobs)
            tasks = [t for job in jobs for stage in job.stages for t in stage.tasks]
            assert tasks and all(t.duration_ms >= t.run_ms >= 0 for t in tasks)
            assert info.start_time is not None and info.end_time is not None
            # The jobs ran inside their operation: Spark's clock and ours are the same wall clock,
            # each read to the millisecond, so a few ms of rounding either side and no more.
            submitted = [job.submitted_ms for job in jobs]
            completed = [job.completed_ms for job in jobs]
            assert None not in submitted and None not in completed
            assert info.start_time.milliseconds - 5 <= min(submitted)  # type: ignore[type-var]
            assert max(completed) <= info.end_time.milliseconds + 5  # type: ignore[type-var]
            for job in jobs:
                for task in (t for stage in job.stages for t in stage.tasks):
                    assert job.submitted_ms - 5 <= task.launch_ms <= job.completed_ms + 5  # type: ignore[operator]


@pytest.mark.timeout(300)
def test_record_trace_writes_every_batch_with_its_operations_spark_jobs_and_stops_after_the_batches(
        spark_context: Any, tmp_path: Path) -> None:
    """record_trace(batches=6): the context stops itself; the trace holds six batches on the grid, in order, with their Spark jobs."""
    from streaming import StreamingContext

    sc = spark_context
    ssc = StreamingContext(sc, INTERVAL_MS / 1000)
    queue = [sc.parallelize([f"x y {i}"] * 40, 2) for i in range(40)]
    words = ssc.queueStream(queue).flatMap(str.split)
    words.map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b, 2).foreachRDD(lambda rdd: rdd.collect())
    words.count().foreachRDD(lambda rdd: rdd.collect())
    ssc.record_trace(tmp_path / "run.jsonl", batches=6)
    ssc.start()
    assert ssc.awaitTerminationOrTimeout(120)  # a hang guard: the batch limit stops it
    ssc.stop(stopSparkContext=False)
    trace = read_trace(tmp_path / "run.jsonl")
    assert trace.meta["master"] == sc.master and trace.batch_interval is not None
    assert (trace.batch_interval.milliseconds, trace.concurrent_jobs, trace.sequential_batches) == (INTERVAL_MS, 1, False)
    check_batches(trace, 6)
    assert all(sorted(b.output_operation_infos) == [0, 1] for b in trace.completed_batches)
    check_events(trace)
    check_spark_jobs(trace)
    assert len({job.job_id for jobs in trace.spark_jobs.values() for job in jobs}) >= 2 * len(trace.completed_batches)


def test_record_trace_refuses_bad_arguments_and_a_started_context(spark_context: Any, tmp_path: Path) -> None:
    """A non-positive batch limit, and a call after start, are errors."""
    from scheduler import StreamingStateError
    from streaming import StreamingContext

    ssc = StreamingContext(spark_context, 0.2)
    with pytest.raises(ValueError, match="batches"):
        ssc.record_trace(tmp_path / "t.jsonl", batches=0)
    ssc.queueStream([spark_context.parallelize([1])]).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    try:
        with pytest.raises(StreamingStateError, match="before the context starts"):
            ssc.record_trace(tmp_path / "t.jsonl")
    finally:
        ssc.stop(stopSparkContext=False)


@pytest.mark.timeout(300)
def test_the_calibrate_command_records_an_unchanged_program(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """aiodstream calibrate --program: one child run per concurrency, each a whole trace with Spark jobs, then the report."""
    program = Path(__file__).parent / "fidelity" / "tiny_program.py"
    status = cli(["calibrate", "--program", str(program), "--master", "local[2]", "--concurrency", "1,2",
                  "--batches", "6", "--warmup", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    for jobs in (1, 2):
        trace = read_trace(tmp_path / f"tiny_program-c{jobs}.jsonl")
        assert trace.concurrent_jobs == jobs and trace.meta["master"] == "local[2]"
        check_batches(trace, 6)
        check_events(trace)
        check_spark_jobs(trace)
    assert out.count("processing median") == 2 and "calibrated on" in out


@pytest.mark.timeout(300)
def test_a_trace_records_that_a_watermarked_program_runs_its_batches_one_after_another(
        spark_context: Any, tmp_path: Path) -> None:
    """With a watermark a program's batches are sequential whatever concurrentJobs says: the header says so, and the
    replay model holds each tick as the engine did."""
    from streaming import StreamingContext
    from streaming.simulation import model_from_trace

    sc = spark_context
    ssc = StreamingContext(sc, INTERVAL_MS / 1000)
    queue = [sc.parallelize([i], 1) for i in range(10)]
    ssc.queueStream(queue).withWatermark(lambda n: n * 1000, "1 second").foreachRDD(lambda rdd: rdd.count())
    ssc.record_trace(tmp_path / "run.jsonl", batches=2)
    ssc.start()
    assert ssc.awaitTerminationOrTimeout(120)
    ssc.stop(stopSparkContext=False)
    trace = read_trace(tmp_path / "run.jsonl")
    assert trace.sequential_batches and model_from_trace(trace).sequential_batches
