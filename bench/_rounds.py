"""Alternating ours/pyspark rounds for ``bench_vs_pyspark``: each run's batches with the CPU the run spent, and ratio spreads.

A run's CPU is read at two batch completions (after the warm-up batches and at the last one):
the driver's (this Python process, every thread) and the process tree's by part (this process, the
JVM it launched without its JIT compiler threads, those threads, and the JVM's Python workers, from
``/proc``; :func:`cpu_parts`), each divided by the batches between; the total is the parts' sum.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

__all__ = ["BYTES", "PARTS", "TIMES", "cpu_now", "cpu_parts", "cpu_spent", "floor_summary", "ratio_spread",
           "spark_work_per_batch", "summarize_rounds"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


PARTS = ("driver", "jvm", "jvm_jit", "python_workers")
"""Where a run's CPU goes (:func:`cpu_parts`): this Python process, the JVM it launched (``jvm_jit``: its JIT compiler
threads; ``jvm``: the rest), and the JVM's Python workers (pyspark's daemon and the workers it forks); a process
elsewhere in the tree counts in ``driver``. The JIT keeps compiling Spark's code for hundreds of batches after the JVM
starts, on the same cores as the tasks: its share says how warm the JVM was."""


def _process_table() -> tuple[dict[int, list[int]], dict[int, tuple[int, int]], dict[int, str]] | None:
    """Per process: its children, (own ticks, reaped children's ticks) and its command name, from ``/proc``; None off Linux."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    children: dict[int, list[int]] = {}
    ticks: dict[int, tuple[int, int]] = {}
    comms: dict[int, str] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                head, _, rest = f.read().rpartition(")")
        except OSError:
            continue  # gone meanwhile
        fields = rest.split()
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: ppid
        ticks[pid] = (int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]))  # utime+stime, cutime+cstime
        comms[pid] = head.partition("(")[2]
    return children, ticks, comms


def _tree_cpu_parts(root: int) -> dict[str, float] | None:
    """CPU seconds of ``root``'s process tree by part (:data:`PARTS`), each with its reaped children's; None off Linux."""
    table = _process_table()
    return None if table is None else _parts_of(root, *table, jit=_jit_ticks)


def _jit_ticks(pid: int) -> int:
    """CPU ticks of a JVM's JIT compiler threads (HotSpot names them ``C1 CompilerThread<n>``, ``C2 ...``)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                head, _, rest = f.read().rpartition(")")
        except OSError:
            continue
        if "CompilerThre" in head:
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])
    return total


def _parts_of(root: int, children: dict[int, list[int]], ticks: dict[int, tuple[int, int]], comms: dict[int, str],
              jit: Callable[[int], int] | None = None) -> dict[str, float]:
    """:func:`_tree_cpu_parts` over a process table (:func:`_process_table`'s); ``jit(pid)``: a JVM's JIT threads' ticks."""
    parts = dict.fromkeys(PARTS, 0.0)
    stack = [(root, "driver")]
    while stack:
        pid, part = stack.pop()
        own, reaped = ticks.get(pid, (0, 0))
        parts[part] += (own + reaped) / _TICK
        if part == "jvm" and jit is not None:
            compiled = jit(pid) / _TICK
            parts["jvm"] -= compiled
            parts["jvm_jit"] += compiled
        for child in children.get(pid, ()):
            if part == "driver" and comms.get(child) == "java":
                stack.append((child, "jvm"))
            elif part in ("jvm", "python_workers"):
                stack.append((child, "python_workers"))  # the JVM's children: pyspark's daemon and its workers
            else:
                stack.append((child, part))
    return parts


def cpu_parts() -> dict[str, float] | None:
    """CPU seconds so far of this process (every thread), its JVM and their Python workers (:data:`PARTS`), or None off Linux."""
    return _tree_cpu_parts(os.getpid())


def _tree_cpu_seconds(root: int) -> float | None:
    """User + system CPU seconds of ``root`` and its descendants (with their reaped children), from ``/proc``; None off Linux."""
    parts = _tree_cpu_parts(root)
    return None if parts is None else sum(parts.values())


def cpu_now() -> tuple[float, float | None]:
    """(driver CPU seconds, total CPU seconds of the driver, its JVM and their Python workers, or None) now."""
    return time.process_time(), _tree_cpu_seconds(os.getpid())


def cpu_spent(before: dict[str, float] | None, after: dict[str, float] | None, batches: int) -> dict[str, float] | None:
    """CPU milliseconds per batch of each part (:data:`PARTS`) between two :func:`cpu_parts` readings, or None."""
    if before is None or after is None or batches <= 0:
        return None
    return {part: round((after[part] - before[part]) / batches * 1000, 1) for part in PARTS}


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
        for part in PARTS:  # where the process tree's CPU went, per batch (runs without the split leave it out)
            t_part, o_part = ((run.get("cpu_parts_ms_per_batch") or {}).get(part) for run in (t, o))
            if t_part is not None and o_part is not None:
                row.setdefault("cpu_parts_ms_per_batch", {})[part] = {"pyspark": t_part, "ours": o_part}
                row[f"{part}_cpu_ratio"] = round(o_part / t_part, 3) if t_part else None
        if "cpu_parts_ms_per_batch" in row:  # the program's own CPU: the JIT's share depends on how warm the JVM was
            t_work, o_work = (sum(v[who] for k, v in row["cpu_parts_ms_per_batch"].items() if k != "jvm_jit")
                              for who in ("pyspark", "ours"))
            row["cpu_without_jit_ratio"] = round(o_work / t_work, 3) if t_work else None
        row["load_1m"] = {"pyspark": t["load_1m"], "ours": o["load_1m"]}  # at the end of each run
        per_round.append(row)
    out: dict[str, Any] = {"rounds": per_round}
    for name, key in (("ratio", "ratio"), ("driver_cpu_ratio", "driver_cpu_ms_per_batch_ratio"),
                      ("total_cpu_ratio", "total_cpu_ms_per_batch_ratio"), ("cpu_without_jit_ratio", "cpu_without_jit_ratio"),
                      *((f"{part}_cpu_ratio", f"{part}_cpu_ratio") for part in PARTS)):
        values = [r[key] for r in per_round if r.get(key) is not None]
        if values:
            out[name] = ratio_spread(values)
    return out


TIMES = ("processing_ms", "spark_jobs_span_ms", "outside_spark_jobs_ms", "stages_span_ms", "task_run_ms", "task_cpu_ms")
"""Where a batch's processing time goes (:func:`spark_work_per_batch`): the engine's processing delay; the span of the
batch's Spark jobs (first submission to last completion, Spark's clock); the processing delay outside that span (the
engine's own time around the jobs); the stages' spans added up; the tasks' run time and CPU time added up."""


BYTES = ("shuffle_write_bytes", "shuffle_read_bytes", "result_bytes")
"""What a batch's Spark work moved (:func:`spark_work_per_batch`, when its stages carry them): the bytes its shuffles wrote
and read (the same serializer and partitions write the same bytes) and the bytes its tasks' results sent to the driver."""


def spark_work_per_batch(jobs: list[dict[str, Any]], processing: dict[int, int] | None = None) -> dict[str, Any]:
    """The Spark work a run's batches did, per batch: medians over the batches, and the shape of one median batch.

    ``jobs``: one per Spark job, ``{"batch": batch time ms, "stages": [{"tasks": completed tasks (0: skipped),
    "python_rdds": PythonRDDs in the stage}]}``, a run stage optionally with :data:`BYTES` (added up per batch).
    A stage's task runs one Python worker per PythonRDD in it (pyspark pipelines Python functions into one PythonRDD,
    but not across an RDD it did not build), so ``python_worker_tasks`` sums tasks times PythonRDDs: how many Python
    worker runs the batch cost.

    With each job's ``submitted`` and ``completed`` (ms), each run stage's ``span_ms``, ``task_run_ms`` and
    ``task_cpu_ms``, and ``processing`` (batch time -> the engine's processing delay), also the medians of
    :data:`TIMES` over the batches that have them all.
    """
    per_batch: dict[int, dict[str, Any]] = {}
    for job in jobs:
        b = per_batch.setdefault(job["batch"], {"jobs": 0, "stages": 0, "skipped_stages": 0, "tasks": 0,
                                                "python_worker_tasks": 0, "shape": [], "times": []})
        b["jobs"] += 1
        b["times"].append(job)
        for stage in job["stages"]:
            if stage["tasks"]:
                b["stages"] += 1
            else:
                b["skipped_stages"] += 1
            b["tasks"] += stage["tasks"]
            b["python_worker_tasks"] += stage["tasks"] * stage["python_rdds"]
            for key in BYTES:
                if key in stage:
                    b[key] = b.get(key, 0) + stage[key]
        b["shape"].append([[s["tasks"], s["python_rdds"]] for s in job["stages"] if s["tasks"]])
    if not per_batch:
        return {"batches": 0}
    batches = [per_batch[t] for t in sorted(per_batch)]
    out: dict[str, Any] = {"batches": len(batches)}
    for key in ("jobs", "stages", "skipped_stages", "tasks", "python_worker_tasks"):
        out[key] = statistics.median(b[key] for b in batches)
    for key in BYTES:
        if all(key in b for b in batches):
            out[key] = statistics.median(b[key] for b in batches)
    typical = [b for b in batches if b["python_worker_tasks"] == out["python_worker_tasks"]] or batches
    out["shape_of_one_batch"] = sorted(typical[-1]["shape"])  # per job, per stage run: [tasks, PythonRDDs]
    timed = [row for t in sorted(per_batch) if (row := _batch_times(per_batch[t]["times"], (processing or {}).get(t)))]
    if timed:
        out["times_ms"] = {key: statistics.median(row[key] for row in timed) for key in TIMES}
    return out


def _batch_times(jobs: list[dict[str, Any]], processing: int | None) -> dict[str, float] | None:
    """One batch's :data:`TIMES`, or None when its processing delay or a time of its jobs is missing."""
    stages = [s for job in jobs for s in job["stages"] if s["tasks"]]
    if processing is None or any(job.get("submitted") is None or job.get("completed") is None for job in jobs) \
            or any(s.get("span_ms") is None for s in stages):
        return None
    span = max(job["completed"] for job in jobs) - min(job["submitted"] for job in jobs)
    return {"processing_ms": processing, "spark_jobs_span_ms": span, "outside_spark_jobs_ms": processing - span,
            "stages_span_ms": sum(s["span_ms"] for s in stages), "task_run_ms": sum(s["task_run_ms"] for s in stages),
            "task_cpu_ms": round(sum(s["task_cpu_ms"] for s in stages), 1)}


def floor_summary(rounds: list[dict[str, Any]], median_of: Callable[[list[dict[str, int]]], float],
                  target: float) -> dict[str, Any]:
    """How much of each engine's processing delay is the program's own Spark work: ``spark_alone``, round by round.

    ``rounds``: per round, ``{"pyspark": run, "ours": run, "spark_alone": run}`` (the same Spark jobs without an
    engine, :func:`bench.bench_vs_pyspark.run_alone`). Per round, the floor's median delay over each engine's
    (``share``) and each engine's milliseconds above it; summarised as median-of-rounds spreads. ``ratio_at_floor``
    is the floor over pyspark's delay: the ratio ours would get with nothing but the Spark work in its batches, so
    the lowest it can reach without doing less Spark work than the program asks for; ``target_reachable`` says
    whether its quartiles lie at most at ``target`` (True), above it (False), or on both sides (None: not resolved).
    The same for CPU without the JIT compiler (the program's own CPU, the process tree's: :data:`PARTS`), when the
    runs have it.
    """
    per_round: list[dict[str, Any]] = []
    for pair in rounds:
        floor = median_of(pair["spark_alone"]["batches"])
        row: dict[str, Any] = {"spark_alone_ms": floor}
        for engine in ("pyspark", "ours"):
            delay = median_of(pair[engine]["batches"])
            row[f"{engine}_ms"] = delay
            row[f"{engine}_share"] = round(floor / delay, 3) if delay else None
            row[f"{engine}_ms_above"] = delay - floor
        row["ratio_at_floor"] = row["pyspark_share"]
        cpu = {who: _cpu_without_jit(pair[who]) for who in ("pyspark", "ours", "spark_alone")}
        if all(v for v in cpu.values()):
            row["cpu_without_jit_ms"] = cpu
            row["cpu_ratio_at_floor"] = round(cpu["spark_alone"] / cpu["pyspark"], 3)
        per_round.append(row)
    out: dict[str, Any] = {"rounds": per_round,
                           "spark_alone_ms_median": statistics.median(r["spark_alone_ms"] for r in per_round)}
    for key in ("pyspark_share", "ours_share", "ratio_at_floor", "cpu_ratio_at_floor"):
        values = [r[key] for r in per_round if r.get(key) is not None]
        if values:
            out[key] = ratio_spread(values)
    for engine in ("pyspark", "ours"):
        out[f"{engine}_ms_above_median"] = statistics.median(r[f"{engine}_ms_above"] for r in per_round)
    at_floor = out.get("ratio_at_floor")
    out["target_reachable"] = (None if at_floor is None or at_floor["iqr"][0] <= target < at_floor["iqr"][1]
                               else at_floor["iqr"][1] <= target)
    return out


def _cpu_without_jit(run: dict[str, Any]) -> float | None:
    """A run's process-tree CPU per batch without the JIT compiler's threads, or None without the split."""
    parts = run.get("cpu_parts_ms_per_batch")
    return None if not parts else sum(v for k, v in parts.items() if k != "jvm_jit")
