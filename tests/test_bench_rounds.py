"""bench._rounds: the per-round ratios of bench_vs_pyspark and the spread printed beside their median."""

from __future__ import annotations

from typing import Any

from bench._rounds import floor_summary, ratio_spread, spark_work_per_batch, summarize_rounds


def run(processing: list[int], driver: float, total: float | None) -> dict[str, Any]:
    """One engine's run as bench_vs_pyspark's run_measured returns it."""
    return {"batches": [{"processing": p} for p in processing], "driver_cpu_ms_per_batch": driver,
            "total_cpu_ms_per_batch": total, "load_1m": 0.5}


def median_processing(batches: list[dict[str, int]]) -> float:
    """The median processing delay of a run's batches (its middle one: odd counts only here)."""
    return float(sorted(b["processing"] for b in batches)[len(batches) // 2])


def test_the_spread_is_resolved_only_when_the_quartiles_lie_closer_together_than_the_median_to_one() -> None:
    """Quartiles 0.8-0.9 around a median of 0.85 resolve the gap of 0.15; 0.6-1.1 around 0.85 do not."""
    assert ratio_spread([0.8, 0.85, 0.9]) == {"median": 0.85, "iqr": [0.825, 0.875], "min": 0.8, "max": 0.9, "resolved": True}
    assert ratio_spread([0.6, 0.85, 1.1]) == {"median": 0.85, "iqr": [0.725, 0.975], "min": 0.6, "max": 1.1, "resolved": False}


def test_each_round_divides_ours_by_pysparks_and_the_medians_are_taken_over_rounds() -> None:
    """Per round: the ratio of median delays and of CPU per batch; a missing total CPU leaves that ratio out."""
    rounds = [{"pyspark": run([100, 200, 300], 10.0, 400.0), "ours": run([90, 180, 270], 8.0, 300.0)},
              {"pyspark": run([100, 100, 100], 10.0, None), "ours": run([120, 120, 120], 12.0, None)}]
    summary = summarize_rounds(rounds, median_processing)
    assert [(r["pyspark_ms"], r["ours_ms"], r["ratio"]) for r in summary["rounds"]] == [(200.0, 180.0, 0.9), (100.0, 120.0, 1.2)]
    assert [r["driver_cpu_ms_per_batch_ratio"] for r in summary["rounds"]] == [0.8, 1.2]
    assert [r["total_cpu_ms_per_batch_ratio"] for r in summary["rounds"]] == [0.75, None]
    assert summary["ratio"]["median"] == 1.05
    assert summary["driver_cpu_ratio"]["median"] == 1.0
    assert summary["total_cpu_ratio"] == {"median": 0.75, "iqr": [0.75, 0.75], "min": 0.75, "max": 0.75, "resolved": True}


def test_spark_work_counts_per_batch_the_jobs_stages_tasks_and_python_worker_runs() -> None:
    """A stage's tasks each run one Python worker per PythonRDD in it; skipped stages run no task; medians over batches."""
    def job(batch: int, *stages: tuple[int, int]) -> dict[str, Any]:
        return {"batch": batch, "stages": [{"tasks": t, "python_rdds": p} for t, p in stages]}

    jobs = [job(1000, (2, 1), (2, 2)), job(1000, (2, 1)),  # a shuffle whose reduce side chains two PythonRDDs; a count
            job(2000, (2, 1), (2, 1)), job(2000, (2, 1)),
            job(3000, (2, 1), (2, 1)), job(3000, (0, 1), (1, 1)), job(3000, (2, 1))]  # take's second job skips the shuffle
    work = spark_work_per_batch(jobs)
    assert (work["batches"], work["jobs"], work["stages"], work["skipped_stages"]) == (3, 2, 3, 0)
    assert (work["tasks"], work["python_worker_tasks"]) == (6, 7)  # per batch 8, 6 and 7 worker runs
    assert work["shape_of_one_batch"] == [[[1, 1]], [[2, 1]], [[2, 1], [2, 1]]]  # the median batch's: take's batch
    assert spark_work_per_batch([]) == {"batches": 0}


def test_the_process_trees_cpu_is_split_into_the_driver_its_jvm_and_the_jvms_python_workers() -> None:
    """The JVM child of the driver is ``jvm``; everything under it (daemon, workers) ``python_workers``; reaped ticks count."""
    from bench._rounds import _TICK, _parts_of

    children = {1: [2, 5], 2: [3], 3: [4]}
    ticks = {1: (10, 1), 2: (200, 0), 3: (5, 40), 4: (30, 0), 5: (7, 0)}  # (own, reaped children's)
    comms = {1: "python", 2: "java", 3: "python", 4: "python", 5: "sleep"}
    parts = _parts_of(1, children, ticks, comms)
    assert {k: round(v * _TICK) for k, v in parts.items()} == {"driver": 18, "jvm": 200, "jvm_jit": 0, "python_workers": 75}
    parts = _parts_of(1, children, ticks, comms, jit=lambda pid: 120 if pid == 2 else 999)  # only the JVM is asked
    assert {k: round(v * _TICK) for k, v in parts.items()} == {"driver": 18, "jvm": 80, "jvm_jit": 120, "python_workers": 75}


def test_cpu_spent_gives_each_parts_milliseconds_per_batch_and_nothing_without_both_readings() -> None:
    """Two readings 10 batches apart: seconds become milliseconds per batch, rounded to 0.1 ms."""
    from bench._rounds import cpu_spent

    before = {"driver": 1.0, "jvm": 2.0, "jvm_jit": 0.5, "python_workers": 3.0}
    after = {"driver": 1.1, "jvm": 2.5, "jvm_jit": 0.5, "python_workers": 3.02}
    assert cpu_spent(before, after, 10) == {"driver": 10.0, "jvm": 50.0, "jvm_jit": 0.0, "python_workers": 2.0}
    assert cpu_spent(None, after, 10) is None


def test_each_round_also_divides_each_part_of_the_cpu() -> None:
    """With the CPU split in both runs, each part gets its per-round ratio and a median-of-rounds summary."""
    def split(driver: float, jvm: float, workers: float) -> dict[str, Any]:
        return {"cpu_parts_ms_per_batch": {"driver": driver, "jvm": jvm, "jvm_jit": 0.0, "python_workers": workers}}

    rounds = [{"pyspark": {**run([100], 10.0, 60.0), **split(10, 20, 30)}, "ours": {**run([90], 5.0, 45.0), **split(5, 20, 20)}}]
    summary = summarize_rounds(rounds, median_processing)
    row = summary["rounds"][0]
    assert row["cpu_parts_ms_per_batch"]["jvm"] == {"pyspark": 20, "ours": 20}
    assert (row["driver_cpu_ratio"], row["jvm_cpu_ratio"], row["python_workers_cpu_ratio"]) == (0.5, 1.0, 0.667)
    assert row["jvm_jit_cpu_ratio"] is None  # nothing on pyspark's side to divide by
    assert row["cpu_without_jit_ratio"] == 0.75  # 45 / 60
    assert summary["cpu_without_jit_ratio"]["median"] == 0.75
    assert summary["python_workers_cpu_ratio"]["median"] == 0.667


def test_spark_work_tells_where_a_batchs_processing_time_went() -> None:
    """The jobs' span (first submission to last completion), the processing delay outside it, stages and task times."""
    def stage(tasks: int, span: int | None, run_ms: int, cpu_ms: float) -> dict[str, Any]:
        return {"tasks": tasks, "python_rdds": 1, "span_ms": span, "task_run_ms": run_ms, "task_cpu_ms": cpu_ms}

    jobs = [{"batch": 1000, "submitted": 5010, "completed": 5090, "stages": [stage(2, 50, 80, 60.0), stage(2, 20, 30, 10.0)]},
            {"batch": 1000, "submitted": 5020, "completed": 5100, "stages": [stage(2, 70, 90, 70.5)]},
            {"batch": 2000, "submitted": 6000, "completed": None, "stages": [stage(2, 30, 40, 30.0)]}]  # still running: left out
    work = spark_work_per_batch(jobs, {1000: 100, 2000: 50})
    assert work["times_ms"] == {"processing_ms": 100, "spark_jobs_span_ms": 90, "outside_spark_jobs_ms": 10,
                                "stages_span_ms": 140, "task_run_ms": 200, "task_cpu_ms": 140.5}
    assert "times_ms" not in spark_work_per_batch(jobs)  # no processing delays: no times


def test_spark_work_adds_up_the_bytes_each_batch_moved_when_its_stages_carry_them() -> None:
    """Shuffle bytes written and read and result bytes are summed per batch, medians over batches; absent, not reported."""
    def stage(write: int, read: int, result: int) -> dict[str, Any]:
        return {"tasks": 2, "python_rdds": 1, "shuffle_write_bytes": write, "shuffle_read_bytes": read, "result_bytes": result}

    jobs = [{"batch": 1000, "stages": [stage(500, 0, 10), stage(0, 500, 90)]}, {"batch": 1000, "stages": [stage(0, 0, 7)]},
            {"batch": 2000, "stages": [stage(700, 0, 10), stage(0, 700, 100)]}, {"batch": 2000, "stages": [stage(0, 0, 9)]},
            {"batch": 3000, "stages": [stage(600, 0, 10), stage(0, 600, 80)]}, {"batch": 3000, "stages": [stage(0, 0, 8)]}]
    work = spark_work_per_batch(jobs)
    assert (work["shuffle_write_bytes"], work["shuffle_read_bytes"], work["result_bytes"]) == (600, 600, 107)
    assert "shuffle_write_bytes" not in spark_work_per_batch([{"batch": 1000, "stages": [{"tasks": 2, "python_rdds": 1}]}])


def test_the_floor_is_the_share_of_each_engines_delay_that_the_same_spark_work_alone_takes() -> None:
    """Per round the floor over each engine's median delay; ratio_at_floor (floor over pyspark) decides reachability."""
    def parts(driver: float, jvm: float, jit: float, workers: float) -> dict[str, Any]:
        return {"cpu_parts_ms_per_batch": {"driver": driver, "jvm": jvm, "jvm_jit": jit, "python_workers": workers}}

    rounds = [{"pyspark": {**run([100, 100, 100], 10.0, None), **parts(10, 40, 50, 50)},
               "ours": {**run([95, 95, 95], 8.0, None), **parts(8, 35, 10, 50)},
               "spark_alone": {**run([92, 92, 92], 6.0, None), **parts(6, 34, 30, 50)}},
              {"pyspark": run([200, 200, 200], 10.0, None), "ours": run([190, 190, 190], 8.0, None),
               "spark_alone": run([190, 190, 190], 6.0, None)}]
    floor = floor_summary(rounds, median_processing, 0.9)
    first, second = floor["rounds"]
    assert (first["pyspark_share"], first["ours_share"], first["ratio_at_floor"]) == (0.92, 0.968, 0.92)
    assert (first["pyspark_ms_above"], first["ours_ms_above"]) == (8.0, 3.0)
    assert first["cpu_without_jit_ms"] == {"pyspark": 100, "ours": 93, "spark_alone": 90}
    assert first["cpu_ratio_at_floor"] == 0.9
    assert "cpu_ratio_at_floor" not in second  # runs without the CPU split
    assert floor["ratio_at_floor"]["median"] == 0.935  # rounds 0.92 and 0.95
    assert floor["spark_alone_ms_median"] == 141.0
    assert (floor["pyspark_ms_above_median"], floor["ours_ms_above_median"]) == (9.0, 1.5)
    assert floor["ratio_at_floor"]["iqr"] == [0.927, 0.942]
    assert floor["target_reachable"] is False  # both quartiles above 0.9
    assert floor_summary(rounds, median_processing, 0.95)["target_reachable"] is True  # both at most 0.95
    assert floor_summary(rounds, median_processing, 0.935)["target_reachable"] is None  # the quartiles straddle it
