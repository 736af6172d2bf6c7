"""How late a host's own task wakes while a context runs Spark work beside it on the same event loop.

An asyncio host runs a ticker that sleeps 5 ms and records how late each wake-up is, in three
phases: alone (what this machine gives an idle loop); beside the same word count run by plain
PySpark from a thread of the host, every 0.5 s, with no streaming engine at all (what this
machine allows a host that does Spark work in its process: the floor); and beside a
``StreamingContext`` inside ``async with`` running that word count over queued 2,000-line
batches every 0.5 s on an embedded local[2] Spark. Prints one JSON object: lateness p50, p99 and
max in ms per phase, the batches run, and the machine's load average, with the garbage collector's pauses per generation in each phase
(a full collection stalls every thread of the process, whoever allocated). Targets while the word
count runs: p99 <= 5 ms, max <= 20 ms; the floor says how much of that is the engine's.

Not part of the test suite. Run: ``python bench/bench_host_loop.py [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import sys
import time
from operator import add
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TICK_S = 0.005
VOCABULARY = [f"w{i}" for i in range(1000)]


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


class GcPauses:
    """The garbage collector's pauses in this process, by generation (a stall no engine code causes directly)."""

    def __init__(self) -> None:
        self.pauses_ms: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses_ms[info["generation"]].append((time.perf_counter() - self._started) * 1000)

    def take(self) -> dict[str, Any]:
        out = {f"gen{g}": {"count": len(p), "max_ms": round(max(p), 2) if p else 0.0} for g, p in self.pauses_ms.items()}
        self.pauses_ms = {0: [], 1: [], 2: []}
        return out


GC = GcPauses()
FREEZE = False  # --gc-freeze


def summary(lateness_ms: list[float]) -> dict[str, Any]:
    return {"ticks": len(lateness_ms), "p50_ms": round(statistics.median(lateness_ms), 2),
            "p99_ms": round(percentile(lateness_ms, 0.99), 2), "max_ms": round(max(lateness_ms), 2),
            "gc_pauses": GC.take()}


async def ticker(seconds: float) -> list[float]:
    """Sleep 5 ms at a time for ``seconds``; each wake-up's lateness in ms (GC pauses counted from here on)."""
    GC.take()
    lateness = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        asked = time.perf_counter()
        await asyncio.sleep(TICK_S)
        lateness.append((time.perf_counter() - asked - TICK_S) * 1000)
    return lateness


async def beside_word_count(sc: Any, seconds: float, lines: int) -> tuple[list[float], int]:
    from streaming import StreamingContext

    rng = random.Random(7)
    batches = [[" ".join(rng.choices(VOCABULARY, k=8)) for _ in range(lines)] for _ in range(int(seconds / 0.5) + 20)]
    done = 0

    def output(rdd: Any) -> None:
        nonlocal done
        rdd.collect()
        done += 1

    async with StreamingContext(sc, 0.5) as ssc:
        if FREEZE:
            gc.freeze()
        counts = ssc.queueStream(batches).flatMap(lambda line: line.split(" ")).map(lambda w: (w, 1)).reduceByKey(add)
        counts.foreachRDD(output)
        await ssc.start_async()
        await asyncio.sleep(2)  # warm up: Python workers, py4j connections
        lateness = await ticker(seconds)
        await ssc.stop_async()
    return lateness, done


async def beside_plain_pyspark(sc: Any, seconds: float, lines: int) -> tuple[list[float], int]:
    """The floor: the word count of each batch, every 0.5 s, by plain PySpark on one thread of the host."""
    import threading

    rng = random.Random(7)
    batches = [[" ".join(rng.choices(VOCABULARY, k=8)) for _ in range(lines)] for _ in range(int(seconds / 0.5) + 20)]
    stop = threading.Event()
    done = 0

    def work() -> None:
        nonlocal done
        next_at = time.monotonic()
        for batch in batches:
            if stop.is_set():
                return
            sc.parallelize(batch).flatMap(lambda line: line.split(" ")).map(lambda w: (w, 1)).reduceByKey(add).collect()
            done += 1
            next_at += 0.5
            stop.wait(max(0.0, next_at - time.monotonic()))

    if FREEZE:
        gc.freeze()
    thread = threading.Thread(target=work, name="plain-pyspark", daemon=True)
    thread.start()
    await asyncio.sleep(2)  # the same warm-up
    lateness = await ticker(seconds)
    stop.set()
    await asyncio.get_running_loop().run_in_executor(None, thread.join)
    return lateness, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each phase ticks")
    parser.add_argument("--lines", type=int, default=2000, help="lines per batch")
    parser.add_argument("--switch-interval-ms", type=float, default=None,
                        help="sys.setswitchinterval for the run (Python's default: 5 ms): how long a thread holding "
                             "the GIL keeps it from the event loop's thread at most")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() once Spark and the batches exist (what a latency-sensitive host does after "
                             "start-up): full collections then skip everything allocated before")
    args = parser.parse_args()
    global FREEZE
    FREEZE = args.gc_freeze
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    sys.path.insert(0, str(ROOT))
    gc.callbacks.append(GC)
    from streaming.spark import embedded_spark_context

    sc = embedded_spark_context({"spark.ui.enabled": "false"})
    sc.setLogLevel("ERROR")
    out: dict[str, Any] = {"load_average_before": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
                           "tick_ms": TICK_S * 1000, "switch_interval_ms": sys.getswitchinterval() * 1000,
                           "gc_freeze": FREEZE}
    out["idle_loop"] = summary(asyncio.run(ticker(args.seconds)))
    floor, floor_batches = asyncio.run(beside_plain_pyspark(sc, args.seconds, args.lines))
    out["beside_plain_pyspark_floor"] = {**summary(floor), "batches": floor_batches, "lines_per_batch": args.lines}
    lateness, batches = asyncio.run(beside_word_count(sc, args.seconds, args.lines))
    out["beside_word_count"] = {**summary(lateness), "batches": batches, "lines_per_batch": args.lines,
                                "targets": {"p99_ms": 5, "max_ms": 20}}
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    sc.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
