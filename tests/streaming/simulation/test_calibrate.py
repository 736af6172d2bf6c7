"""Calibration from recorded Spark jobs: what is fitted, the replay of the recorded run, and the report.

The traces here are written by hand (a few batches whose every time is chosen), so each fitted
number is known exactly; the fidelity test (``test_fidelity.py``) checks the same pipeline on
recorded real Spark runs (``data/fidelity``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from listeners import BatchCompleted, BatchInfo, OutputOperationInfo
from scheduler import Duration, StreamInputInfo, Time
from streaming._cli import main as cli
from streaming.simulation import (
    ClusterModel,
    Comparison,
    DelayError,
    ModelError,
    SparkJob,
    SparkStage,
    SparkTask,
    Trace,
    TracedStages,
    TracedTimes,
    TraceRecorder,
    calibrate,
    cluster_from_trace,
    read_trace,
    simulate,
)

INTERVAL = 1000
META = {"master": "local[2]", "default_parallelism": 2, "cpus": 2}


def _job(start: int, stages: list[tuple[int, list[int]]], job_id: int = 0) -> SparkJob:
    """A job whose stage ``i`` launches its tasks at ``start + offset_i`` with the given slot times."""
    built = []
    for i, (offset, durations) in enumerate(stages):
        launch = start + offset
        tasks = [SparkTask(launch, d, max(0, d - 5)) for d in durations]
        built.append(SparkStage(i, launch, launch + max(durations), tasks))
    return SparkJob(job_id, start, max(s.last_end_ms or 0 for s in built), built)


def _batch(k: int, op_start: int, op_end: int, submitted_after: int = 20) -> BatchInfo:
    t = (k + 1) * INTERVAL
    op = OutputOperationInfo(Time(t), 0, "collect", "", Time(t + op_start), Time(t + op_end), None)
    return BatchInfo(Time(t), {0: StreamInputInfo(0, 100)}, Time(t + submitted_after), Time(t + op_start), Time(t + op_end),
                     {0: op})


def _trace(meta: dict[str, Any] | None = None) -> Trace:
    """Four batches of one operation: a job of two stages (two tasks each) plus driver time around it.

    Batch k: submitted 20 ms after its time; the operation runs from there; its job's stage 0
    launches 10 ms in (tasks 100 and 80 ms), stage 1 launches 8 ms after stage 0's last task
    ends (tasks 50 and 60 ms); the operation ends 12 + k ms after the job. So the operation
    takes 10 + 100 + 8 + 60 + 12 + k = 190 + k ms, of which 100 + 8 + 60 is its stages alone.
    """
    events: list[Any] = []
    jobs = {}
    for k in range(4):
        t = (k + 1) * INTERVAL
        start = t + 20
        job = _job(start + 10, [(0, [100, 80]), (108, [50, 60])], job_id=k)
        jobs[(t, 0)] = (job,)
        events.append(BatchCompleted(_batch(k, 20, 20 + 190 + k)))
    return Trace(Duration(INTERVAL), 1, meta or META, tuple(events), jobs)


def test_the_fit_splits_each_operation_into_replayed_tasks_stage_gaps_and_driver_overhead() -> None:
    """Stage gap 8 ms (the median); driver overhead per batch 190 + k - (100 + 8 + 60) = 22 + k ms."""
    cal = calibrate(_trace(), warmup=1)
    assert cal.stage_overhead_ms == 8
    assert cal.operation_overheads_ms == (24.0,)  # median of 23, 24, 25 (batch 0 is the warm-up)
    assert cal.generation_ms == 20
    out = cal.model.outputs[0]
    assert out.stages == TracedStages([((100, 80), (50, 60))] * 4, cycle_from=1)
    assert out.overhead == TracedTimes([22, 23, 24, 25], cycle_from=1)
    assert cal.model.cluster == ClusterModel(1, 2, stage_overhead_ms=8, driver_threads=1)
    assert cal.model.costs.generation == TracedTimes([20, 20, 20, 20], cycle_from=1)


def test_replaying_the_calibration_run_gives_its_own_delays_back() -> None:
    """Same configuration, same work: every operation takes its recorded 190 + k ms, and batches start on time."""
    cal = calibrate(_trace(), warmup=0)
    batches = simulate(cal.model).batches
    assert [b.processing_delay.milliseconds for b in batches] == [190, 191, 192, 193]  # type: ignore[union-attr]
    assert [b.submission_time.milliseconds - b.batch_time.milliseconds for b in batches] == [20] * 4
    comparison = cal.compare(_trace())
    assert comparison.worst() == 0.0
    assert [d.name for d in comparison.delays] == ["processing median", "processing p95", "scheduling median",
                                                   "scheduling p95"]


def test_a_replay_cycles_over_the_batches_after_the_warm_up() -> None:
    """Batch k replays recorded batch k, then batches from cycle_from on, again and again."""
    work = TracedTimes([90, 10, 20, 30], cycle_from=1)
    from streaming.simulation import BatchContext

    picks = [work.sample(BatchContext(k, Time(0), Duration(1), 0), None) for k in range(9)]  # type: ignore[arg-type]
    assert picks == [90, 10, 20, 30, 10, 20, 30, 10, 20]


def test_predictions_keep_the_work_and_change_the_configuration() -> None:
    """predict() changes concurrency and cluster only; the fitted stage gap follows the new cluster."""
    cal = calibrate(_trace(), warmup=1)
    model = cal.predict(concurrent_jobs=3, cluster=ClusterModel(1, 4, cpus=2))
    assert model.concurrent_jobs == 3
    assert model.cluster == ClusterModel(1, 4, cpus=2, stage_overhead_ms=8)
    with_overrides = cal.compare(_trace(), cores=1)
    assert with_overrides.cluster.slots == 1
    assert model.outputs == cal.model.outputs


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ({"master": "local[4]", "cpus": 2}, ClusterModel(1, 4, driver_threads=1)),
        ({"master": "local", "cpus": 8}, ClusterModel(1, 1, driver_threads=1)),
        ({"master": "spark://127.0.0.1:7077", "default_parallelism": 6, "cpus": 2}, ClusterModel(1, 6)),
        ({"master": "local[*]", "default_parallelism": 8, "cpus": 8}, ClusterModel(1, 8, driver_threads=1)),
    ],
)
def test_the_cluster_comes_from_the_trace_header(meta: dict[str, Any], expected: ClusterModel) -> None:
    """local[N] is N slots with the driver's work one job at a time; a cluster master has its parallelism in slots."""
    assert cluster_from_trace(_trace(meta)) == expected


def test_calibration_refuses_what_it_cannot_fit() -> None:
    """No Spark jobs, a missing operation's jobs, nothing after the warm-up, an unknown master, another interval."""
    trace = _trace()
    with pytest.raises(ModelError, match="no Spark jobs"):
        calibrate(Trace(trace.batch_interval, 1, META, trace.events, {}))
    missing = dict(trace.spark_jobs)
    del missing[(3000, 0)]
    with pytest.raises(ModelError, match=r"spark_jobs\[3000, 0\]"):
        calibrate(Trace(trace.batch_interval, 1, META, trace.events, missing))
    with pytest.raises(ModelError, match="after the 4 warm-up batches"):
        calibrate(trace, warmup=4)
    with pytest.raises(ModelError, match="master"):
        cluster_from_trace(_trace({"master": "yarn"}))
    other = Trace(Duration(500), 1, META, trace.events, trace.spark_jobs)
    with pytest.raises(ModelError, match="interval"):
        calibrate(trace, warmup=0).compare(other)


def _write(path: Path, trace: Trace) -> None:
    with TraceRecorder(path, batch_interval=trace.batch_interval, concurrent_jobs=trace.concurrent_jobs,
                       meta=trace.meta) as recorder:
        for event in trace.events:
            recorder(event)
        for (batch, op), jobs in trace.spark_jobs.items():
            recorder.write_spark_jobs(Time(batch), op, jobs)


def test_spark_jobs_round_trip_through_a_trace_file(tmp_path: Path) -> None:
    """Written with write_spark_jobs, read back by read_trace: the same jobs, stages and tasks."""
    trace = _trace()
    _write(tmp_path / "run.jsonl", trace)
    back = read_trace(tmp_path / "run.jsonl")
    assert back.spark_jobs == trace.spark_jobs
    assert back.completed_batches == trace.completed_batches


def test_a_malformed_spark_jobs_line_is_named(tmp_path: Path) -> None:
    """A SparkJobs line without its jobs, or with a broken task, names the line."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"event":"SparkJobs","batch_time":1000,"output_op_id":0}\n')
    with pytest.raises(ModelError, match=r"line 1\.jobs"):
        read_trace(path)
    path.write_text('{"event":"SparkJobs","batch_time":1000,"output_op_id":0,"jobs":[{"job_id":1,"stages":'
                    '[{"stage_id":0,"tasks":[[1,2]]}]}]}\n')
    with pytest.raises(ModelError, match="line 1"):
        read_trace(path)


def test_the_calibrate_command_reports_every_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """aiodstream calibrate A B: fitted on A, each run's four delays measured and simulated; --json the same as data."""
    _write(tmp_path / "a.jsonl", _trace())
    _write(tmp_path / "b.jsonl", _trace())
    assert cli(["calibrate", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--warmup", "1"]) == 0
    text = capsys.readouterr().out
    assert "stage overhead 8 ms, operation overheads 24 ms, generation 20 ms" in text
    assert text.count("processing median") == 2
    assert cli(["calibrate", str(tmp_path / "a.jsonl"), "--warmup", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fitted"]["stage_overhead_ms"] == 8
    delays = report["runs"][0]["delays"]
    assert [d["measured_ms"] for d in delays] == [191.0, 193.0, 0.0, 0.0]
    assert [d["simulated_ms"] for d in delays] == [191.0, 193.0, 0.0, 0.0]


def test_the_calibrate_command_names_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No traces, a missing file, a trace without Spark jobs, a bad concurrency list: exit 2 with the reason."""
    assert cli(["calibrate"]) == 2
    assert "give traces" in capsys.readouterr().err
    assert cli(["calibrate", str(tmp_path / "none.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    trace = _trace()
    _write(tmp_path / "bare.jsonl", Trace(trace.batch_interval, 1, META, trace.events, {}))
    assert cli(["calibrate", str(tmp_path / "bare.jsonl")]) == 2
    assert "no Spark jobs" in capsys.readouterr().err
    assert cli(["calibrate", "--program", "p.py", "--concurrency", "0,x"]) == 2
    assert "--concurrency" in capsys.readouterr().err
    assert cli(["calibrate", "--program", "p.py", "--out", str(tmp_path / "bare.jsonl")]) == 2
    assert capsys.readouterr().err == (f"aiodstream calibrate: error: cannot create the folder {tmp_path / 'bare.jsonl'} "
                                       "for --out: it is a file, not a folder\n")


@pytest.mark.parametrize("line", ["from pyspark.streaming import StreamingContext",
                                  "from pyspark.streaming import *",
                                  "import pyspark.streaming"])
def test_a_program_still_on_pyspark_streaming_is_refused_before_it_runs(
        tmp_path: Path, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Its context reads no spark.aiodstream.* setting: the recorded run would never stop (lane M3: calibrate waited
    silently for good). The command says which line to change, and starts nothing; aiodstream's import passes the check."""
    program = tmp_path / "wordcount.py"
    use = "pyspark.streaming.StreamingContext(sc, 1)" if line.startswith("import") else "StreamingContext(sc, 1)"
    program.write_text(f"import sys\n{line}\nssc = {use}\nsys.exit(7)\n")
    assert cli(["calibrate", "--program", str(program), "--batches", "3", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"aiodstream calibrate: error: program: {program} takes its StreamingContext from pyspark.streaming "
                          f"(line {2 if not line.startswith('import') else 3})"), err
    assert "change the import to `from streaming import StreamingContext`" in err
    program.write_text("import sys\nfrom streaming import StreamingContext\nsys.exit(7)\n")
    assert cli(["calibrate", "--program", str(program), "--batches", "3", "--out", str(tmp_path)]) == 2
    assert "exited with status 7" in capsys.readouterr().err  # ran: past the check


def test_a_comparisons_table_gives_the_difference_beside_the_relative_error() -> None:
    """A 1 ms delay simulated as 0 ms reads "-100 %" alone: the table says it is 1 ms; an unmeasured delay has no error."""
    delays = (DelayError("processing median", 40.0, 44.0), DelayError("processing p95", 1.0, 0.0),
              DelayError("scheduling p95", 0.0, 3.0))
    rows = Comparison("run", 1, ClusterModel(1, 2), 10, delays).format().splitlines()
    assert rows[1].split() == ["delay", "measured", "simulated", "error", "difference"]
    assert rows[2].split()[2:] == ["40", "ms", "44", "ms", "+10", "%", "+4", "ms"]
    assert rows[3].split()[2:] == ["1", "ms", "0", "ms", "-100", "%", "-1", "ms"]
    assert rows[4].split()[2:] == ["0", "ms", "3", "ms", "-", "+3", "ms"]
