"""bench._rounds: the per-round ratios of bench_vs_pyspark and the spread printed beside their median."""

from __future__ import annotations

from typing import Any

from bench._rounds import ratio_spread, spark_work_per_batch, summarize_rounds


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
