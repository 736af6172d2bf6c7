"""The no-op Spark-backed context flat out on a manual clock, beside the thread-hop floor, for one tree or several in turn.

The program and the floor are ``bench_vs_pyspark --only noop``'s (``ours_engine_ms_per_batch`` and
``platform_thread_hops_ms``): a StreamingContext on local[2] with one no-op ``foreachRDD`` over a
``queueStream`` whose queue is empty, and two loop -> thread -> loop round trips on bare executors.
Rounds alternate engine and floor in one process; CPU time (``time.process_time``, every thread)
beside wall time, the load beside each round. Prints one JSON object.

Beside CPU time, what it holds that instruction counts do not show: user and kernel time, context
switches, and the garbage collector's runs and pauses, full collections apart. With the clock jumping
all the measured batches at once, generation runs ahead of the jobs and the queued batches reach
the collector's oldest generation: a full collection (70-370 ms on this machine, every few thousand
batches) lands in some rounds and not others. ``engine_stepped`` runs the same program with the
clock jumping ``STEP`` batches at a time (each jump's batches done before the next): the engine's
cost without that backlog, where a batch leaves nothing for the collector.

``--trees A B ...`` runs the measure in a child process per tree, alternating trees round by
round (before/after: ``--trees /path/to/main /path/to/branch``); each child imports that tree.

``--callgrind``: one engine run and one floor run under the instruction counter, each counting only
its measured batches (``valgrind --tool=callgrind --instr-atstart=no python bench/bench_noop_floor.py
--callgrind`` toggles it with ``callgrind_control`` and reads its totals, every thread's, the same
way); prints instructions per batch of both and their ratio. Instruction counts do not move with the
machine's load (about 3 minutes at 1,000 batches, most of it starting Python and Spark under valgrind).

Takes about 30 s per tree and round (Spark's start included). Run: ``python bench/bench_noop_floor.py``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def spark_context() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    conf = (SparkConf().setMaster("local[2]").setAppName("bench_noop_floor").set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false").set("spark.default.parallelism", "2"))
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    sc.parallelize([1, 2], 2).count()  # warm up the workers
    return sc


def toggle_instruments(on: bool) -> None:
    """Switch callgrind's counting on or off for this process (when run under it with ``--instr-atstart=no``)."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)


def instructions() -> int:
    """The instructions callgrind counted so far in this process, every thread's (counting must be on)."""
    out = subprocess.run(["callgrind_control", "-e", "Ir", str(os.getpid())], check=True, capture_output=True, text=True).stdout
    return sum(int(m.group(1).replace(",", "")) for m in re.finditer(r"^\s*Th\s+\d+\s+([\d,]+)\s*$", out, re.MULTILINE))


class Instructions:
    """Counts the instructions between :meth:`start` and :meth:`stop` under callgrind; does nothing when ``on`` is false."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.count = 0
        self._start = 0

    def start(self) -> None:
        if self.on:
            toggle_instruments(True)
            self._start = instructions()

    def stop(self) -> None:
        if self.on:
            self.count = instructions() - self._start  # one callgrind_control call's own cost in it: ~0.5M
            toggle_instruments(False)


class Meter:
    """What a measured stretch cost besides its instructions: wall, process CPU split into user and kernel time,
    context switches (voluntary: a thread slept to wait, e.g. for the GIL or a queue; involuntary: preempted), and
    the garbage collector's collections and pause time."""

    def __init__(self) -> None:
        self.gc_pause = 0.0
        self.gc_runs = 0
        self.gc_full_runs = 0
        self.gc_full_pause = 0.0
        self._gc_started = 0.0

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            pause = time.perf_counter() - self._gc_started
            self.gc_pause += pause
            self.gc_runs += 1
            if info["generation"] == 2:
                self.gc_full_runs += 1
                self.gc_full_pause += pause

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.wall, self.cpu = time.perf_counter() - self._wall, time.process_time() - self._cpu
        usage = resource.getrusage(resource.RUSAGE_SELF)
        gc.callbacks.remove(self._on_gc)
        self.user = usage.ru_utime - self._usage.ru_utime
        self.system = usage.ru_stime - self._usage.ru_stime
        self.voluntary = usage.ru_nvcsw - self._usage.ru_nvcsw
        self.involuntary = usage.ru_nivcsw - self._usage.ru_nivcsw


def engine(sc: Any, batches: int, count_instructions: bool = False, step: int | None = None) -> dict[str, float]:
    """Wall and CPU microseconds per batch of the no-op program, flat out on a manual clock (after 50 warm-up batches);
    with ``count_instructions`` (under callgrind) also its instructions per batch.

    ``step``: the clock jumps ``step`` batches at a time, each jump's batches done before the next
    (generation at most ``step`` batches ahead of the jobs); default: all ``batches`` in one jump, so
    generation runs ahead and up to ``batches`` queued batches reach the collector's oldest generation.
    """
    import anyio

    from scheduler import ManualClock, Seconds
    from streaming import StreamingContext

    counter = Instructions(count_instructions)

    meter = Meter()

    async def run() -> None:
        clock = ManualClock(0)
        async with StreamingContext(sc, 1, clock=clock) as ssc:
            ssc.queueStream([], default=sc.parallelize([1], 1)).foreachRDD(lambda rdd: None)
            await ssc.start_async()
            runtime: Any = ssc.runtime  # a micro-batch StreamingRuntime here
            clock.advance(Seconds(50))  # warm up: threads, py4j connections
            await runtime.wait_until_idle()
            counter.start()
            meter.start()
            if step is None:
                clock.advance(Seconds(batches))
                await runtime.wait_until_idle()
            else:
                for _ in range(batches // step):
                    clock.advance(Seconds(step))
                    await runtime.wait_until_idle()
            meter.stop()
            counter.stop()
            await ssc.stop_async()

    anyio.run(run)
    return per_batch(meter, counter, batches)


def per_batch(meter: Meter, counter: Instructions, batches: int) -> dict[str, float]:
    """Wall, CPU (user and kernel) microseconds, context switches and collections per batch, and instructions per batch
    when counted."""
    out = {"wall_us": round(meter.wall / batches * 1e6, 1), "cpu_us": round(meter.cpu / batches * 1e6, 1),
           "user_us": round(meter.user / batches * 1e6, 1), "system_us": round(meter.system / batches * 1e6, 1),
           "voluntary_switches": round(meter.voluntary / batches, 3),
           "involuntary_switches": round(meter.involuntary / batches, 3),
           "gc_runs": round(meter.gc_runs / batches, 4), "gc_pause_us": round(meter.gc_pause / batches * 1e6, 2),
           "gc_full_runs": meter.gc_full_runs, "gc_full_pause_ms": round(meter.gc_full_pause * 1e3, 2)}
    if counter.on:
        out["instructions"] = round(counter.count / batches)
    return out


def floor(rounds: int, count_instructions: bool = False) -> dict[str, float]:
    """Wall and CPU microseconds of two loop -> thread -> loop round trips (each woken by the thread's future);
    with ``count_instructions`` (under callgrind) also their instructions."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    def nothing() -> None:
        return None

    counter = Instructions(count_instructions)
    meter = Meter()

    async def run() -> None:
        first, second = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
        try:
            for _ in range(200):
                await asyncio.wrap_future(first.submit(nothing))
            counter.start()
            meter.start()
            for _ in range(rounds):
                await asyncio.wrap_future(first.submit(nothing))
                await asyncio.wrap_future(second.submit(nothing))
            meter.stop()
            counter.stop()
        finally:
            first.shutdown()
            second.shutdown()

    asyncio.run(run())
    return per_batch(meter, counter, rounds)


UNITS = ("wall_us", "cpu_us", "user_us", "system_us", "voluntary_switches", "involuntary_switches", "gc_runs",
         "gc_pause_us", "gc_full_runs", "gc_full_pause_ms")


PARTS = ("engine", "engine_stepped", "floor")

STEP = 20
"""``engine_stepped``'s clock jumps (batches): generation never more than this far ahead of the jobs."""


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the rounds, their spread, and the ratios engine / floor."""
    out: dict[str, Any] = {}
    for part in PARTS:
        for unit in UNITS:
            values = [run[part][unit] for run in runs]
            out[f"{part}_{unit}_median"] = statistics.median(values)
            out[f"{part}_{unit}_spread"] = [min(values), max(values)]
    for unit in ("wall_us", "cpu_us"):
        out[f"ratio_{unit.split('_')[0]}"] = round(out[f"engine_{unit}_median"] / out[f"floor_{unit}_median"], 2)
        out[f"ratio_stepped_{unit.split('_')[0]}"] = round(out[f"engine_stepped_{unit}_median"]
                                                          / out[f"floor_{unit}_median"], 2)
    # Each round's own ratios (engine and floor ran back to back): their spread says whether the median resolves.
    out["round_ratios_cpu"] = [round(run["engine"]["cpu_us"] / run["floor"]["cpu_us"], 2) for run in runs]
    out["round_ratios_stepped_cpu"] = [round(run["engine_stepped"]["cpu_us"] / run["floor"]["cpu_us"], 2) for run in runs]
    out["target_ratio"] = 1.2
    return out


def measure(rounds: int, batches: int) -> dict[str, Any]:
    """``rounds`` alternating engine and floor runs in this process."""
    sc = spark_context()
    runs = []
    for _ in range(rounds):
        runs.append({"engine": engine(sc, batches), "engine_stepped": engine(sc, batches, step=STEP),
                     "floor": floor(batches), "load": os.getloadavg()})
    return {"runs": runs, **summary(runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5, help="engine/floor pairs per tree and child")
    parser.add_argument("--trees", nargs="*", default=[], help="worktrees to alternate (default: this one, in process)")
    parser.add_argument("--tree-rounds", type=int, default=3, help="with --trees: how many times each tree runs")
    parser.add_argument("--callgrind", action="store_true", help="one engine run counted by callgrind (see above)")
    parser.add_argument("--import-from", default=str(ROOT), help=argparse.SUPPRESS)  # the tree a child measures
    args = parser.parse_args()
    sys.path.insert(0, args.import_from)
    if args.callgrind:
        result = engine(spark_context(), args.batches, count_instructions=True)
        base = floor(args.batches, count_instructions=True)
        print(json.dumps({"batches": args.batches, "engine": result, "floor": base,
                          "ratio_instructions": round(result["instructions"] / base["instructions"], 3),
                          "target_ratio": 1.2, "load": os.getloadavg()}))
        return
    if not args.trees:
        print(json.dumps({"tree": args.import_from, "batches": args.batches, **measure(args.rounds, args.batches)}))
        return
    by_tree: dict[str, list[dict[str, Any]]] = {tree: [] for tree in args.trees}
    for _ in range(args.tree_rounds):
        for tree in args.trees:
            child = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--batches", str(args.batches), "--rounds", str(args.rounds),
                 "--import-from", tree],
                cwd=tree, env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True, check=True)
            result = json.loads(child.stdout.strip().splitlines()[-1])
            by_tree[tree].extend(result["runs"])
            print(f"{tree}: {summary(result['runs'])}", file=sys.stderr, flush=True)
    print(json.dumps({tree: summary(runs) | {"runs": runs} for tree, runs in by_tree.items()}))


if __name__ == "__main__":
    main()
