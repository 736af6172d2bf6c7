"""The simulator predicts real Spark runs: record, calibrate on one configuration, predict the others.

Real runs of a word count and of a program with three outputs (``fidelity/programs.py``) are
recorded on ``local[2]`` and ``local[4]`` (a child process per master) with concurrentJobs 1, 2
and 3. The model is calibrated on ``local[2]`` with two concurrent jobs, then each other
configuration is simulated and its median and p95 processing and scheduling delays are compared
with the measured ones. (Calibrated on one concurrent job instead, the three-output program's
prediction for ``local[2]`` with three is 13-16 % fast: under that much contention the real tasks
run about 12 % longer, which the model does not know; a middle configuration carries part of
that into the work it replays.) A delay of a few milliseconds cannot be matched to a fraction of
itself (the real engine hands a job to a thread in about a millisecond, the model in none), so
each error is taken relative to the measurement or to 10 % of the batch interval, whichever is
larger.

Two modes, because the measurement is only as steady as the machine:

* ``AIODSTREAM_FIDELITY=full`` records the whole matrix and checks the issue's target, 15 %
  (about eight minutes). ``bench/bench_fidelity.py`` prints the same matrix with the machine's
  load and its run-to-run spread (one configuration recorded twice).
* By default (CI), the calibration and the configuration that exercises the model most (local[2]
  with 3 concurrent jobs: three jobs' tasks compete for two slots), about two and a half
  minutes, within 25 %. On a shared 2-core
  machine a p95 over 60 batches moves 12-16 % between two recordings of the same configuration,
  so 15 % would fail a correct model on a busy CI machine (it did: -17 % on one p95). The
  default check stays sharp: a model blind to slot contention misses by more than 25 %, and a
  test below shows it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streaming._cli import main as cli
from streaming.simulation import Comparison, calibrate, read_trace
from tests.streaming.simulation.fidelity.programs import INTERVALS
from tests.streaming.simulation.fidelity.run import trace_name

pytestmark = pytest.mark.spark

TARGET = 0.15  # the target, checked on the whole matrix with AIODSTREAM_FIDELITY=full
DEFAULT_TOLERANCE = 0.25  # the default run's: what a shared machine's run-to-run spread leaves room for
FLOOR = 0.10  # of the batch interval
CALIBRATION = ("local[2]", 2)
FULL = os.environ.get("AIODSTREAM_FIDELITY", "").strip().lower() == "full"
TOLERANCE = TARGET if FULL else DEFAULT_TOLERANCE
MATRIX = {"local[2]": (1, 2, 3), "local[4]": (1, 2, 3)} if FULL else {"local[2]": (2, 3)}
PROGRAMS = tuple(INTERVALS)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every run of the matrix, recorded: one child process (one SparkContext) per master."""
    out = tmp_path_factory.mktemp("fidelity")
    for master, levels in MATRIX.items():
        subprocess.run(
            [sys.executable, "-m", "tests.streaming.simulation.fidelity.run", master, str(out),
             "--concurrency", ",".join(str(c) for c in levels)],
            cwd=ROOT, check=True, capture_output=True, timeout=600,
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
        )
    return out


def _comparison(recorded: Path, program: str, master: str, jobs: int) -> Comparison:
    calibration = calibrate(read_trace(recorded / trace_name(program, *CALIBRATION)))
    return calibration.compare(read_trace(recorded / trace_name(program, master, jobs)), label=f"{program} {master} c{jobs}")


CASES = [pytest.param(program, master, jobs, id=f"{program}-{master}-c{jobs}")
         for program in PROGRAMS for master, levels in MATRIX.items() for jobs in levels if (master, jobs) != CALIBRATION]


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("program", "master", "jobs"), CASES)
def test_the_calibrated_model_predicts_each_configuration(recorded: Path, program: str, master: str, jobs: int) -> None:
    """Median and p95 processing and scheduling delays within the tolerance (of the measurement, at least 10 % of the interval)."""
    comparison = _comparison(recorded, program, master, jobs)
    print(comparison.format())
    floor_ms = FLOOR * INTERVALS[program] * 1000
    assert comparison.batches >= 50
    assert all(d.measured_ms > 0 for d in comparison.delays if d.name.startswith("processing"))
    bad = [d for d in comparison.delays if not d.within(TOLERANCE, floor_ms)]
    assert not bad, comparison.format()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("program", PROGRAMS)
def test_the_calibration_run_is_predicted_like_the_others(recorded: Path, program: str) -> None:
    """The calibration's own configuration, re-simulated (its waits for slots re-created, not replayed): within the tolerance too."""
    comparison = _comparison(recorded, program, *CALIBRATION)
    print(comparison.format())
    assert comparison.worst(FLOOR * INTERVALS[program] * 1000) <= TOLERANCE, comparison.format()


@pytest.mark.timeout(900)
def test_a_model_blind_to_slot_contention_fails_the_check(recorded: Path) -> None:
    """The check is sharp: with a slot for every task, the three-output program on local[2] with 3 jobs is predicted far too fast."""
    calibration = calibrate(read_trace(recorded / trace_name("three_outputs", *CALIBRATION)))
    run = read_trace(recorded / trace_name("three_outputs", "local[2]", 3))
    blind = calibration.compare(run, label="three_outputs local[2] c3, a slot per task", cores=12)
    print(blind.format())
    median = blind.delays[0]
    assert median.name == "processing median"
    assert median.error < -TOLERANCE, blind.format()


@pytest.mark.timeout(300)
def test_record_trace_adds_every_operations_spark_jobs_and_stops_after_the_batches(spark_context: Any, tmp_path: Path) -> None:
    """record_trace(batches=6): the context stops itself; every batch's operations have their Spark jobs and tasks."""
    from streaming import StreamingContext

    sc = spark_context
    ssc = StreamingContext(sc, 0.2)
    queue = [sc.parallelize([f"x y {i}"] * 40, 2) for i in range(40)]
    words = ssc.queueStream(queue).flatMap(str.split)
    words.map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b, 2).foreachRDD(lambda rdd: rdd.collect())
    words.count().foreachRDD(lambda rdd: rdd.collect())
    ssc.record_trace(tmp_path / "run.jsonl", batches=6)
    ssc.start()
    assert ssc.awaitTerminationOrTimeout(60)
    ssc.stop(stopSparkContext=False)
    trace = read_trace(tmp_path / "run.jsonl")
    done = trace.completed_batches
    assert len(done) >= 6
    assert trace.meta["master"] == sc.master and trace.batch_interval is not None
    for batch in done:
        for op in batch.output_operation_infos:
            jobs = trace.spark_jobs[(batch.batch_time.milliseconds, op)]
            assert jobs and all(job.stages for job in jobs)
            tasks = [t for job in jobs for stage in job.stages for t in stage.tasks]
            assert tasks and all(t.duration_ms >= t.run_ms >= 0 for t in tasks)
            info = batch.output_operation_infos[op]
            assert info.start_time is not None and info.end_time is not None
            # The jobs ran inside their operation (Spark's and our clocks are the same clock, ms apart).
            assert info.start_time.milliseconds - 5 <= jobs[0].submitted_ms  # type: ignore[operator]
            assert jobs[-1].completed_ms <= info.end_time.milliseconds + 5  # type: ignore[operator]
    assert len({job.job_id for jobs in trace.spark_jobs.values() for job in jobs}) >= 2 * len(done)


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
    """aiodstream calibrate --program: one child run per concurrency, each a trace with Spark jobs, then the report."""
    program = Path(__file__).parent / "fidelity" / "tiny_program.py"
    status = cli(["calibrate", "--program", str(program), "--master", "local[2]", "--concurrency", "1,2",
                  "--batches", "6", "--warmup", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    for jobs in (1, 2):
        trace = read_trace(tmp_path / f"tiny_program-c{jobs}.jsonl")
        assert trace.concurrent_jobs == jobs and trace.meta["master"] == "local[2]"
        assert len(trace.completed_batches) >= 6 and len(trace.spark_jobs) >= 6
    assert out.count("processing median") == 2 and "calibrated on" in out
