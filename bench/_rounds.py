"""Alternating ours/pyspark rounds for ``bench_vs_pyspark``: each run's batches with the CPU the run spent, and ratio spreads.

A run's CPU is read at two batch completions (after the warm-up batches and at the last one):
the driver's (this Python process, every thread) and the total (this process, the JVM it launched
and the JVM's Python workers, from ``/proc``), each divided by the batches between.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

__all__ = ["cpu_now", "ratio_spread", "spark_work_per_batch", "summarize_rounds"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _tree_cpu_seconds(root: int) -> float | None:
    """User + system CPU seconds of ``root`` and its descendants (with their reaped children), from ``/proc``; None off Linux."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: ppid
        ticks[pid] = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / _TICK


def cpu_now() -> tuple[float, float | None]:
    """(driver CPU seconds, total CPU seconds of the driver, its JVM and their Python workers, or None) now."""
    return time.process_time(), _tree_cpu_seconds(os.getpid())


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def ratio_spread(ratios: list[float]) -> dict[str, Any]:
    """Median of per-round ratios with its spread: quartiles, min, max, and whether the IQR is smaller than the gap to 1."""
    median = statistics.median(ratios)
    q1, q3 = _quartiles(ratios)
    return {"median": round(median, 3), "iqr": [round(q1, 3), round(q3, 3)], "min": min(ratios), "max": max(ratios),
            "resolved": (q3 - q1) < abs(1 - median)}


def summarize_rounds(rounds: list[dict[str, Any]], median_of: Callable[[list[dict[str, int]]], float]) -> dict[str, Any]:
    """Per-round figures and median-of-rounds ratios (processing delay, driver CPU, Spark CPU) of paired runs.

    ``rounds``: per round, ``{"pyspark": run, "ours": run}`` with each run as ``paired_runs`` returns it.
    """
    per_round: list[dict[str, Any]] = []
    for pair in rounds:
        t, o = pair["pyspark"], pair["ours"]
        row: dict[str, Any] = {"pyspark_ms": median_of(t["batches"]), "ours_ms": median_of(o["batches"])}
        row["ratio"] = round(row["ours_ms"] / row["pyspark_ms"], 3) if row["pyspark_ms"] else None
        for key in ("driver_cpu_ms_per_batch", "total_cpu_ms_per_batch"):
            row[f"pyspark_{key}"], row[f"ours_{key}"] = t[key], o[key]
            row[f"{key}_ratio"] = round(o[key] / t[key], 3) if o[key] is not None and t[key] else None
        row["load_1m"] = {"pyspark": t["load_1m"], "ours": o["load_1m"]}  # at the end of each run
        per_round.append(row)
    out: dict[str, Any] = {"rounds": per_round}
    for name, key in (("ratio", "ratio"), ("driver_cpu_ratio", "driver_cpu_ms_per_batch_ratio"),
                      ("total_cpu_ratio", "total_cpu_ms_per_batch_ratio")):
        values = [r[key] for r in per_round if r[key] is not None]
        if values:
            out[name] = ratio_spread(values)
    return out


def spark_work_per_batch(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The Spark work a run's batches did, per batch: medians over the batches, and the shape of one median batch.

    ``jobs``: one per Spark job, ``{"batch": batch time ms, "stages": [{"tasks": completed tasks (0: skipped),
    "python_rdds": PythonRDDs in the stage}]}``. A stage's task runs one Python worker per PythonRDD in it (pyspark
    pipelines Python functions into one PythonRDD, but not across an RDD it did not build), so ``python_worker_tasks``
    sums tasks times PythonRDDs: how many Python worker runs the batch cost.
    """
    per_batch: dict[int, dict[str, Any]] = {}
    for job in jobs:
        b = per_batch.setdefault(job["batch"], {"jobs": 0, "stages": 0, "skipped_stages": 0, "tasks": 0,
                                                "python_worker_tasks": 0, "shape": []})
        b["jobs"] += 1
        for stage in job["stages"]:
            if stage["tasks"]:
                b["stages"] += 1
            else:
                b["skipped_stages"] += 1
            b["tasks"] += stage["tasks"]
            b["python_worker_tasks"] += stage["tasks"] * stage["python_rdds"]
        b["shape"].append([[s["tasks"], s["python_rdds"]] for s in job["stages"] if s["tasks"]])
    if not per_batch:
        return {"batches": 0}
    batches = [per_batch[t] for t in sorted(per_batch)]
    out: dict[str, Any] = {"batches": len(batches)}
    for key in ("jobs", "stages", "skipped_stages", "tasks", "python_worker_tasks"):
        out[key] = statistics.median(b[key] for b in batches)
    typical = [b for b in batches if b["python_worker_tasks"] == out["python_worker_tasks"]] or batches
    out["shape_of_one_batch"] = sorted(typical[-1]["shape"])  # per job, per stage run: [tasks, PythonRDDs]
    return out
