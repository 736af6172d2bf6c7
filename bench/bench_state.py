"""Stateful processing: cost per batch against keys held, against pyspark's applyInPandasWithState, and store commits.

Prints one JSON object (with the machine's load beside each part), on an embedded local[2] Spark:

(a) ``keys_held``: the median processing delay per batch (BatchInfo, wall clock) of a keyed
    running count touching ``--touched`` keys per batch, with ``--small`` and with ``--large``
    keys held (seeded by the first batch), for ``flatMapGroupsWithState`` and for
    ``updateStateByKey`` measured the same way; the ratio large / small for each (target for
    ours: <= 1.5).
(b) ``vs_pyspark``: the same keyed workload (``--small`` keys held, ``--touched`` touched per
    batch, the same JSON files read by both) through pyspark's ``applyInPandasWithState``
    (Structured Streaming, ``addBatch`` of each batch's progress) and through ours (processing
    delay); the ratio of medians (target: <= 0.5).
(c) ``store_commits``: the state store's commit time per partition and batch in the large run,
    median and p99 (from the batches' progress).
(d) ``remote_store`` (``--only remote_store``): the ``--small`` groups run with its checkpoint on
    the local disk and on an FTP server on 127.0.0.1 (Hadoop on the driver, fsspec in the tasks:
    the path a checkpoint on ``hdfs://`` or an object store takes), median processing delay and
    commit time per partition for each, and their ratios.
(f) ``floor`` (default): ``--rounds`` alternating rounds, on the same SparkContext, of the keyed
    running count through ``flatMapGroupsWithState`` (``--large`` keys held, ``--touched``
    touched per batch) and of a plain ``reduceByKey`` of the same records (the same queued RDDs,
    the same user output): per side the median processing delay of the steady batches and the
    CPU of the whole process tree (driver, JVM, Python workers) per batch, each round's ratio
    stateful / floor, their median and spread (target: at most 2), and the stateful median over
    ``applyInPandasWithState``'s median when ``vs_pyspark`` ran too (target: at most 0.25).
(e) ``store_direct`` (``--only store_direct``): the state store alone, no Spark: one partition
    holding ``--large`` keys, ``--batches`` batches each loading the next version, touching
    ``--touched`` keys and committing; min and median ms per batch (what a batch pays the store,
    including the working copy's check against the checkpoint's delta), and of the load alone.

Not part of the test suite. Run: ``python bench/bench_state.py [--large 1000000] [--batches 8] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def count_clicks(key: str, values: Iterator[int], state: Any) -> Iterator[tuple[str, int]]:
    """The running count of a key: what both engines compute."""
    total = (state.getOption or 0) + sum(values)
    state.update(total)
    yield (key, total)


def batch_keys(batch: int, held: int, touched: int) -> list[int]:
    """Batch 0 touches every held key (the seed); later batches a spread of ``touched`` of them."""
    if batch == 0:
        return list(range(held))
    step = max(1, held // touched)
    return [(batch * 7919 + i * step) % held for i in range(touched)]


def tree_cpu_s() -> float:
    """CPU seconds of this process and all its descendants (the JVM, pyspark's daemon and workers), reaped ones included."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                fields = file.read().rpartition(")")[2].split()
        except OSError:
            continue  # gone since the listing
        children.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    total, stack = 0, [os.getpid()]
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / ticks


class Delays:
    """Processing delays of completed batches, the process tree's CPU at each completion, and a wake-up after ``wanted``."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.delays_ms: list[int] = []
        self.cpu_s: list[float] = []
        self.progress: list[Any] = []
        self.done = threading.Event()

    def __call__(self, event: Any) -> None:
        info = getattr(event, "batch_info", None)
        if info is None or type(event).__name__ != "BatchCompleted":
            return
        self.delays_ms.append(info.processing_delay.milliseconds)
        self.cpu_s.append(tree_cpu_s())
        if len(self.delays_ms) >= self.wanted:
            self.done.set()

    def cpu_ms_per_batch(self, first: int) -> float:
        """The process tree's CPU per batch (ms) from completion ``first - 1`` to the last (idle time between batches included)."""
        return round((self.cpu_s[-1] - self.cpu_s[first - 1]) * 1000 / (len(self.cpu_s) - first), 1)


def run_ours(sc: Any, kind: str, held: int, touched: int, batches: int, interval: float,
             location: str | None = None) -> dict[str, Any]:
    """Batches of (key, 1) pairs through flatMapGroupsWithState or updateStateByKey; per-batch processing delays.

    The checkpoint is a fresh temporary directory, or ``location`` (any URI).
    """
    from streaming import StreamingContext

    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-state-") as temporary:
        checkpoint = location or temporary
        ssc = StreamingContext(sc, interval)
        delays = Delays(batches)
        ssc.addStreamingListener(delays)
        queue = [sc.parallelize([(k, 1) for k in batch_keys(b, held, touched)], 4) for b in range(batches)]
        pairs = ssc.queueStream(queue, oneAtATime=True)
        if kind == "groups":
            counts = pairs.flatMapGroupsWithState(count_clicks, "update", "NoTimeout", numPartitions=4)
        elif kind == "reduce_by_key":  # the floor: the same records, the same output, no state
            counts = pairs.reduceByKey(lambda a, b: a + b, 4)
        else:
            counts = pairs.updateStateByKey(lambda new, old: sum(new) + (old or 0), numPartitions=4)
        counts.foreachRDD(lambda rdd: rdd.filter(lambda kv: kv[1] > 10**9).count())
        ssc.checkpoint(checkpoint)
        ssc.start()
        delays.done.wait()
        progress = list(ssc.runtime.recent_progress)
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    steady = delays.delays_ms[2:batches]  # batch 0 seeds the keys, batch 1 warms up
    commits = [p.state_operators[0].commit_time_ms / max(1, p.state_operators[0].num_state_store_instances)
               for p in progress if p.state_operators][2:]
    return {"kind": kind, "held": held, "touched": touched, "seed_batch_ms": delays.delays_ms[0],
            "steady_batches": len(steady), "processing_ms_median": statistics.median(steady),
            "processing_ms": steady, "commit_ms_per_partition": commits, "cpu_ms_per_batch": delays.cpu_ms_per_batch(2)}


def run_store_direct(held: int, touched: int, batches: int) -> dict[str, Any]:
    """Load, touch ``touched`` keys, commit: per batch on one partition of the store holding ``held`` keys."""
    import pickle

    from streaming.state import NO_TIMESTAMP, StateStoreProvider

    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-store-") as temporary:
        provider = StateStoreProvider(Path(temporary) / "ck", 0, 0, snapshot_every=10**9)
        store = provider.load(0)
        for k in range(held):
            store.put(pickle.dumps(k), pickle.dumps(1), NO_TIMESTAMP)
        store.commit()
        times: list[float] = []
        loads: list[float] = []
        for b in range(1, batches + 1):
            started = time.perf_counter()
            store = provider.load(b)
            loads.append((time.perf_counter() - started) * 1000)
            for k in batch_keys(b, held, touched):
                key = pickle.dumps(k)
                row = store.get(key)
                store.put(key, pickle.dumps(pickle.loads(row[0]) + 1 if row and row[0] else 1), NO_TIMESTAMP)
            store.commit()
            times.append((time.perf_counter() - started) * 1000)
        provider.close()
    steady = loads[1:]  # the first load after the seed reads (and, since the working copy is proven, hashes) its delta
    return {"held": held, "touched": touched, "batches": batches, "batch_ms_min": round(min(times), 3),
            "batch_ms_median": round(statistics.median(times), 3), "batch_ms": [round(t, 3) for t in times],
            "load_ms_min": round(min(steady), 3), "load_ms_median": round(statistics.median(steady), 3)}


def write_files(directory: Path, held: int, touched: int, batches: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for b in range(batches):
        lines = "".join(json.dumps({"key": f"k{k}", "ts_ms": 0, "value": 1}) + "\n" for k in batch_keys(b, held, touched))
        (directory / f"part-{b:05d}.json").write_text(lines)


def run_pyspark(sc: Any, files: Path, batches: int) -> list[int]:
    """applyInPandasWithState over the files, one per trigger; each batch's addBatch in ms."""
    import pandas as pd
    from pyspark.sql import SparkSession

    def count(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        total = state.get[0] if state.exists else 0
        for pdf in pdfs:
            total += int(pdf["value"].sum())
        state.update((total,))
        yield pd.DataFrame({"key": [key[0]], "total": [total]})

    spark = SparkSession(sc)
    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-ref-") as checkpoint:
        df = spark.readStream.schema("key string, ts_ms long, value long").option("maxFilesPerTrigger", 1).json(str(files))
        query = (df.groupBy("key").applyInPandasWithState(count, "key string, total long", "total long", "update",
                                                          "NoTimeout")
                 .writeStream.outputMode("update").format("noop").option("checkpointLocation", checkpoint).start())
        try:
            query.processAllAvailable()
            durations = [p["durationMs"].get("addBatch", 0) for p in query.recentProgress if p["numInputRows"] > 0]
        finally:
            query.stop()
    return durations[:batches]


def run_ours_files(sc: Any, files: Path, batches: int, interval: float) -> list[int]:
    """Our operator over the same JSON files (a file stream taking them one per batch); processing delays."""
    from streaming import StreamingContext

    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-files-") as tmp:
        watched = Path(tmp) / "in"
        watched.mkdir()
        ssc = StreamingContext(sc, interval)
        delays = Delays(batches + 1)
        ssc.addStreamingListener(delays)
        pairs = ssc.textFileStream(str(watched)).map(json.loads).map(lambda row: (row["key"], row["value"]))
        counts = pairs.flatMapGroupsWithState(count_clicks, "update", "NoTimeout", numPartitions=4)
        counts.foreachRDD(lambda rdd: rdd.filter(lambda kv: kv[1] > 10**9).count())
        ssc.checkpoint(str(Path(tmp) / "ck"))
        ssc.start()
        names = sorted(files.iterdir())
        for index, name in enumerate(names):
            # one file per batch: moved in once the batch before it completed
            while len(delays.delays_ms) < index + 1:
                time.sleep(0.01)
            os.link(name, watched / name.name)
        delays.done.wait()
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    return delays.delays_ms[1:batches + 1]


def run_floor(sc: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Alternating rounds of the stateful count and of reduceByKey over the same records on ``sc``; medians, CPU, ratios."""
    rounds: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        load = [round(x, 2) for x in os.getloadavg()]
        stateful = run_ours(sc, "groups", args.large, args.touched, args.batches, args.interval)
        floor = run_ours(sc, "reduce_by_key", args.large, args.touched, args.batches, args.interval)
        rounds.append({"stateful_ms_median": stateful["processing_ms_median"], "floor_ms_median": floor["processing_ms_median"],
                       "ratio": round(stateful["processing_ms_median"] / floor["processing_ms_median"], 3),
                       "stateful_cpu_ms": stateful["cpu_ms_per_batch"], "floor_cpu_ms": floor["cpu_ms_per_batch"],
                       "cpu_ratio": round(stateful["cpu_ms_per_batch"] / floor["cpu_ms_per_batch"], 3),
                       "stateful_ms": stateful["processing_ms"], "floor_ms": floor["processing_ms"],
                       "load_average_before": load, "load_average_after": [round(x, 2) for x in os.getloadavg()]})
    ratios = [r["ratio"] for r in rounds]
    stateful_all = [ms for r in rounds for ms in r["stateful_ms"]]
    floor_all = [ms for r in rounds for ms in r["floor_ms"]]
    return {
        "quantity": f"processing delay per steady batch (batches 2..{args.batches - 1}), {args.large} keys held, "
                    f"{args.touched} touched per batch, 4 partitions: flatMapGroupsWithState against reduceByKey of the same "
                    "records and output on the same SparkContext, alternating rounds; CPU: the process tree's per batch",
        "rounds": rounds,
        "stateful": {"processing_ms_median": statistics.median(stateful_all)},
        "floor": {"processing_ms_median": statistics.median(floor_all)},
        "ratio_median_of_rounds": round(statistics.median(ratios), 3), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "ratio_of_all_batches": round(statistics.median(stateful_all) / statistics.median(floor_all), 3),
        "cpu_ratio_median_of_rounds": round(statistics.median(r["cpu_ratio"] for r in rounds), 3),
        "target_ratio": 2.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=10_000, help="keys held in the small run")
    parser.add_argument("--large", type=int, default=1_000_000, help="keys held in the large run")
    parser.add_argument("--touched", type=int, default=1_000, help="keys each batch touches")
    parser.add_argument("--batches", type=int, default=8, help="batches per run (2 warm-up ones included)")
    parser.add_argument("--interval", type=float, default=2.0, help="batch interval in seconds")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of floor (stateful, reduceByKey)")
    parser.add_argument("--only", nargs="*", default=["keys_held", "vs_pyspark", "floor"])
    parser.add_argument("--kinds", nargs="*", default=["groups", "update_state_by_key"],
                        help="what keys_held runs (groups: flatMapGroupsWithState)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT))
    from streaming.spark import embedded_spark_context

    if args.only == ["store_direct"]:
        load = [round(x, 2) for x in os.getloadavg()]
        part = run_store_direct(args.large, args.touched, args.batches)
        part["load_average_before"], part["load_average_after"] = load, [round(x, 2) for x in os.getloadavg()]
        print(json.dumps({"cpus": os.cpu_count(), "store_direct": part}, indent=2))
        return
    sc = embedded_spark_context({"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"})
    sc.setLogLevel("ERROR")
    out: dict[str, Any] = {"cpus": os.cpu_count()}
    if "keys_held" in args.only:
        load = [round(x, 2) for x in os.getloadavg()]
        runs = {(kind, size): run_ours(sc, kind, size, args.touched, args.batches, args.interval)
                for kind in args.kinds for size in (args.small, args.large)}
        part: dict[str, Any] = {"load_average_before": load}
        for kind in args.kinds:
            small, large = runs[(kind, args.small)], runs[(kind, args.large)]
            part[kind] = {"small": small, "large": large,
                          "ratio_large_over_small": round(large["processing_ms_median"] / small["processing_ms_median"], 3)}
        part["target_ratio_groups"] = 1.5
        commits = runs[("groups", args.large)]["commit_ms_per_partition"] if "groups" in args.kinds else []
        out["keys_held"] = part
        out["store_commits"] = {"held": args.large, "median_ms": statistics.median(commits) if commits else None,
                                "p99_ms": percentile(commits, 0.99) if commits else None, "samples": len(commits)}
        out["keys_held"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if "vs_pyspark" in args.only:
        load = [round(x, 2) for x in os.getloadavg()]
        with tempfile.TemporaryDirectory(prefix="aiodstream-bench-files-") as tmp:
            files = Path(tmp) / "files"
            write_files(files, args.small, args.touched, args.batches)
            theirs = run_pyspark(sc, files, args.batches)
            ours = run_ours_files(sc, files, args.batches, args.interval)
        steady_theirs, steady_ours = theirs[2:], ours[2:]
        out["vs_pyspark"] = {
            "quantity": "median processing per batch (pyspark: addBatch; ours: BatchInfo processing delay), "
                        f"{args.small} keys held, {args.touched} touched per batch, batches 2..{args.batches - 1}",
            "pyspark_ms": steady_theirs, "ours_ms": steady_ours,
            "pyspark_median_ms": statistics.median(steady_theirs), "ours_median_ms": statistics.median(steady_ours),
            "ratio": round(statistics.median(steady_ours) / statistics.median(steady_theirs), 3), "target_ratio": 0.5,
            "load_average_before": load, "load_average_after": [round(x, 2) for x in os.getloadavg()],
        }
    if "floor" in args.only:
        out["floor"] = run_floor(sc, args)
        if "vs_pyspark" in out:
            theirs = out["vs_pyspark"]["pyspark_median_ms"]
            out["floor"]["stateful_over_pyspark"] = round(out["floor"]["stateful"]["processing_ms_median"] / theirs, 3)
            out["floor"]["target_stateful_over_pyspark"] = 0.25
    if "remote_store" in args.only:
        sys.path.insert(0, str(ROOT))
        from tests.ftp import FtpServer

        load = [round(x, 2) for x in os.getloadavg()]
        local = run_ours(sc, "groups", args.small, args.touched, args.batches, args.interval)
        with tempfile.TemporaryDirectory(prefix="aiodstream-bench-ftp-") as served, FtpServer(Path(served)) as ftp:
            remote = run_ours(sc, "groups", args.small, args.touched, args.batches, args.interval, ftp.uri("ck"))
        out["remote_store"] = {
            "quantity": f"flatMapGroupsWithState, {args.small} keys held, {args.touched} touched per batch, 4 partitions: "
                        "median processing delay and median commit time per partition, batches 2.., checkpoint on the "
                        "local disk and on FTP (127.0.0.1)",
            "local": {"processing_ms_median": local["processing_ms_median"],
                      "commit_ms_median": statistics.median(local["commit_ms_per_partition"])},
            "ftp": {"processing_ms_median": remote["processing_ms_median"],
                    "commit_ms_median": statistics.median(remote["commit_ms_per_partition"])},
            "load_average_before": load, "load_average_after": [round(x, 2) for x in os.getloadavg()],
        }
        out["remote_store"]["processing_ratio_ftp_over_local"] = round(
            remote["processing_ms_median"] / local["processing_ms_median"], 3)
    sc.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
