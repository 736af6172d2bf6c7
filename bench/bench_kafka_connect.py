"""Kafka's direct stream on aiodstream over classic Spark and over Spark Connect, on one local Spark, in one run.

Prints one JSON object. One local Spark serves both engines (``bench_connect.start_spark``: the
SparkContext runs the classic engine and carries Spark's Connect plugin, whose session runs the
Connect engine), so both use the same JVM, executors and Python workers. The broker is librdkafka's
mock cluster in this process; before any run, one ``--partitions`` topic is filled with the
batches' lines (``--lines`` per batch, 8 words each, spread evenly), and every run reads it from
offset 0 with ``spark.streaming.kafka.maxRatePerPartition`` set so that each 1 s batch drains
exactly ``--lines`` records of that backlog. Measures, in alternating rounds (the engine going
first alternates), each with the 1-minute load beside it, over the batches after two warm-up
ones: the median processing delay (ms), and the CPU per batch (ms) of this process (the driver
and the mock broker) and in total (with the JVM and its Python workers: the figure a loaded
machine leaves most stable), for:

* ``count``: ``rdd.count()`` of each batch: reading the ranges (one task per partition).
* ``word_count``: map to the value, flatMap, map, reduceByKey and collect.

and each program's ratios Connect / classic per round, of processing and of total CPU (median,
min, max over rounds). Both engines' outputs are checked to be the same for every batch.

``split_per_job`` (``--no-split`` leaves it out): outside the streaming engine, the CPU per job
(driver / JVM / Python workers, ms) of ``KafkaUtils.createRDD(...).count()`` over one batch's
records and of the same count over as many ``parallelize``d lines, on each engine: what Connect
adds with Kafka against what it adds without.

Not part of the test suite. Run (about 3-4 minutes on a quiet two-core machine):
``PYTHONPATH=$PWD python bench/bench_kafka_connect.py`` (``--rounds 3 --batches 10 --lines 5000 --partitions 4``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from operator import add
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_connect import start_spark  # noqa: E402  (one local Spark carrying the Connect plugin)
from bench.bench_vs_pyspark import make_lines, run_measured  # noqa: E402

RATE_KEY = "spark.streaming.kafka.maxRatePerPartition"


def fill(cluster: Any, topic: str, partitions: int, batches: int, lines: int) -> None:
    """The topic holding ``batches`` batches of ``lines`` lines, each batch's lines spread evenly over the partitions."""
    cluster.create_topic(topic, partitions)
    per: list[list[str]] = [[] for _ in range(partitions)]
    for batch in range(batches):
        for index, line in enumerate(make_lines(batch, lines)):
            per[index % partitions].append(line)
    for partition, values in enumerate(per):
        cluster.produce(topic, values, partition=partition)


def count_program(cluster: Any, topic: str, seen: list[Any]) -> Callable[[Any], None]:
    def build(ssc: Any) -> None:
        stream = _stream(ssc, cluster, topic)
        stream.foreachRDD(lambda rdd: seen.append(rdd.count()))
    return build


def word_count_program(cluster: Any, topic: str, seen: list[Any]) -> Callable[[Any], None]:
    def build(ssc: Any) -> None:
        words = _stream(ssc, cluster, topic).map(lambda kv: kv[1]).flatMap(lambda line: line.split(" "))
        words.map(lambda w: (w, 1)).reduceByKey(add).foreachRDD(lambda rdd: seen.append(sorted(rdd.collect())))
    return build


def _stream(ssc: Any, cluster: Any, topic: str) -> Any:
    from streaming.kafka import KafkaUtils

    return KafkaUtils.createDirectStream(ssc, [topic], {"bootstrap.servers": cluster.bootstrap_servers,
                                                        "auto.offset.reset": "earliest"})


def measured(spark: Any, batches: int, build: Callable[[Any], None]) -> dict[str, float | None]:
    """Over ``batches`` 1 s batches after two warm-up ones: the median processing delay (ms), and the CPU per batch (ms)
    of this process (the driver, and the mock broker's threads) and of it with its JVM and their Python workers."""
    run = run_measured("aiodstream", spark, 1.0, batches + 2, build, timeout=600, skip=2)
    failure = next((batch["failure"] for batch in run["batches"] if batch["failure"]), None)
    if failure:
        raise RuntimeError(f"a batch failed: {failure}")
    return {"processing_ms": float(statistics.median(batch["processing"] for batch in run["batches"])),
            "driver_cpu_ms": run["driver_cpu_ms_per_batch"], "total_cpu_ms": run["total_cpu_ms_per_batch"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=10, help="measured batches per run (two warm-up batches more)")
    parser.add_argument("--lines", type=int, default=5000, help="records per batch")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--split", action=argparse.BooleanOptionalAction, default=True,
                        help="also split one batch's count job's CPU by process, with and without Kafka (split_per_job)")
    args = parser.parse_args()
    if args.lines % args.partitions:
        parser.error("--lines must be a multiple of --partitions (each batch drains the same records on every partition)")
    from streaming.kafka.testing import MockKafkaCluster

    sc, session = start_spark()
    rate = str(args.lines // args.partitions)
    sc._conf.set(RATE_KEY, rate)  # read by the classic engine's contexts
    session.conf.set(RATE_KEY, rate)  # read by the Connect engine's, from the session
    engines = {"classic": sc, "connect": session}
    result: dict[str, Any] = {"rounds": args.rounds, "batches": args.batches, "lines": args.lines, "partitions": args.partitions}
    with MockKafkaCluster() as cluster:
        fill(cluster, "lines", args.partitions, args.batches + 2 + 2, args.lines)  # two spare batches: a run may plan one more
        print(f"topic filled: {(args.batches + 4) * args.lines} records", file=sys.stderr, flush=True)
        for name, program in (("count", count_program), ("word_count", word_count_program)):
            rounds = []
            outputs: dict[str, list[Any]] = {}
            for index in range(args.rounds):
                order = ["classic", "connect"] if index % 2 == 0 else ["connect", "classic"]
                figures = {}
                for engine in order:
                    seen: list[Any] = []
                    figures[engine] = measured(engines[engine], args.batches, program(cluster, "lines", seen))
                    outputs.setdefault(engine, seen[: args.batches + 2])
                    print(f"{name} round {index} {engine}: {figures[engine]} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
                rounds.append({**{f"{engine}_{key}": value for engine in ("classic", "connect") for key, value in figures[engine].items()},
                               "ratio": _ratio(figures, "processing_ms"), "cpu_ratio": _ratio(figures, "total_cpu_ms"),
                               "load_1min": round(os.getloadavg()[0], 1), "first": order[0]})
            if outputs["classic"] != outputs["connect"]:
                raise RuntimeError(f"{name}: the engines' outputs differ")
            result[name] = {"rounds": rounds}
            for key in ("ratio", "cpu_ratio"):
                ratios = [r[key] for r in rounds if r[key] is not None]
                if ratios:
                    result[name].update({f"{key}_median": statistics.median(ratios), f"{key}_min": min(ratios), f"{key}_max": max(ratios)})
        if args.split:
            from streaming import StreamingContext

            result["split_per_job"] = split_jobs(sc, StreamingContext(session, 1).sparkContext, cluster, "lines",
                                                 args.partitions, args.lines)
    session.stop()
    sc.stop()
    print(json.dumps(result, indent=2))


def _process_cpu() -> dict[str, float]:
    """CPU seconds so far of this process, of its children (the JVM) and of their descendants (the Python workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            children.setdefault(int(fields[1]), []).append(int(name))
            cpu[int(name)] = (int(fields[11]) + int(fields[12])) / tick
    me = os.getpid()
    found = {"driver": cpu.get(me, 0.0), "jvm": 0.0, "workers": 0.0}
    for jvm in children.get(me, []):
        found["jvm"] += cpu.get(jvm, 0.0)
        stack = list(children.get(jvm, []))
        while stack:
            pid = stack.pop()
            found["workers"] += cpu.get(pid, 0.0)
            stack.extend(children.get(pid, []))
    return found


def split_jobs(sc: Any, frames: Any, cluster: Any, topic: str, partitions: int, lines: int, jobs: int = 10) -> dict[str, Any]:
    """CPU (ms) per job, split driver / JVM / Python workers, of ``createRDD(...).count()`` over one batch's records and of
    the same count over as many ``parallelize``d lines (no Kafka), on each engine: what Connect adds, with and without Kafka.

    Live processes only: a Python worker that exits during the jobs takes its CPU with it (rerun when a figure is negative).
    """
    from streaming.kafka import KafkaUtils, OffsetRange

    per = lines // partitions
    ranges = [OffsetRange(topic, p, 0, per) for p in range(partitions)]
    data = make_lines(0, lines)
    params = {"bootstrap.servers": cluster.bootstrap_servers}
    programs: dict[str, Callable[[], Any]] = {
        "classic_kafka": lambda: KafkaUtils.createRDD(sc, params, ranges).count(),
        "connect_kafka": lambda: KafkaUtils.createRDD(frames, params, ranges).count(),
        "classic_list": lambda: sc.parallelize(data, partitions).count(),
        "connect_list": lambda: frames.parallelize(data, partitions).count(),
    }
    result: dict[str, Any] = {}
    for name, job in programs.items():
        for _ in range(3):  # warm: workers started, their consumers connected
            job()
        before = _process_cpu()
        for _ in range(jobs):
            job()
        after = _process_cpu()
        result[name] = {key: round((after[key] - before[key]) / jobs * 1000, 1) for key in before}
        result[name]["load_1min"] = round(os.getloadavg()[0], 1)
        print(f"split {name}: {result[name]}", file=sys.stderr, flush=True)
    return result


def _ratio(figures: dict[str, dict[str, float | None]], key: str) -> float | None:
    """Connect's figure over classic's (None when either is unknown)."""
    connect, classic = figures["connect"][key], figures["classic"][key]
    return None if connect is None or not classic else round(connect / classic, 3)


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"# {time.perf_counter() - began:.0f} s", file=sys.stderr)
