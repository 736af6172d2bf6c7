"""FrameRDD against pyspark's RDD on one Spark: the same word count (parallelize, flatMap, map,
reduceByKey, collect) on a classic SparkContext and, through its Connect plugin, on a FrameContext.

Alternating rounds; per run: wall seconds, the driver's CPU seconds (this process), the whole tree's
CPU (this process, its JVM and the Python workers) and, for Connect, the client's gRPC calls (plan
analyses and executions). Prints one JSON object with the load average beside each figure.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_frames.py --lines 1000 --rounds 7    # ~2 min on a quiet machine
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from operator import add
from typing import Any

from bench._rounds import cpu_now


def start(partitions: int) -> tuple[Any, Any]:
    """A local SparkContext carrying a Connect server, and a Connect session on it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql.connect.session import SparkSession

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    conf = SparkConf().setMaster("local[2]").setAppName("bench-frames")
    for key, value in {
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.default.parallelism": str(partitions), "spark.sql.shuffle.partitions": str(partitions),
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
    }.items():
        conf.set(key, value)
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    return sc, SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create()


class CallCounter:
    """Counts the Connect client's plan analyses and executions (each one gRPC round trip or more)."""

    def __init__(self, client: Any) -> None:
        self.analyses = 0
        self.executions = 0
        analyze, execute = client._analyze, client._execute_and_fetch_as_iterator

        def counted_analyze(*args: Any, **kwargs: Any) -> Any:
            self.analyses += 1
            return analyze(*args, **kwargs)

        def counted_execute(*args: Any, **kwargs: Any) -> Any:
            self.executions += 1
            return execute(*args, **kwargs)

        client._analyze, client._execute_and_fetch_as_iterator = counted_analyze, counted_execute


def word_count(ctx: Any, lines: list[str], partitions: int) -> list[Any]:
    """The measured job."""
    return ctx.parallelize(lines, partitions).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add).collect()


def run(ctx: Any, lines: list[str], partitions: int, counter: CallCounter | None) -> dict[str, Any]:
    """One timed word count."""
    before = (counter.analyses, counter.executions) if counter else (0, 0)
    wall, (driver, tree) = time.perf_counter(), cpu_now()
    result = word_count(ctx, lines, partitions)
    driver_after, tree_after = cpu_now()
    out = {"wall_s": round(time.perf_counter() - wall, 4), "driver_cpu_s": round(driver_after - driver, 4),
           "tree_cpu_s": None if tree is None or tree_after is None else round(tree_after - tree, 4),
           "load": round(os.getloadavg()[0], 2), "words": len(result)}
    if counter:
        out["analyses"], out["executions"] = counter.analyses - before[0], counter.executions - before[1]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    sc, session = start(args.partitions)
    from streaming.connect import FrameContext

    frames = FrameContext(session)
    counter = CallCounter(session.client)
    lines = [f"w{i % 97} w{i % 13} w{i % 5} common" for i in range(args.lines)]
    assert sorted(word_count(frames, lines, args.partitions)) == sorted(word_count(sc, lines, args.partitions))  # warm both
    rounds = []
    for i in range(args.rounds):
        order = [("classic", sc, None), ("connect", frames, counter)]
        if i % 2:
            order.reverse()
        rounds.append({name: run(ctx, lines, args.partitions, c) for name, ctx, c in order})
    median = {key: {name: statistics.median(r[name][key] for r in rounds) for name in ("classic", "connect")}
              for key in ("wall_s", "driver_cpu_s")}
    ratio = statistics.median(r["connect"]["wall_s"] / r["classic"]["wall_s"] for r in rounds)
    print(json.dumps({"lines": args.lines, "partitions": args.partitions, "median": median,
                      "connect_over_classic_wall": round(ratio, 3), "rounds": rounds}, indent=1))
    session.stop()
    sc.stop()


if __name__ == "__main__":
    main()
