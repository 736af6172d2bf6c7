"""transformWithState: cost per batch against keys held, against pyspark's transformWithStateInPandas, and TTL eviction.

Prints one JSON object, the machine's load beside each part. The workload: every key holds a
``ListState`` of its 10 most recent values; a batch brings one value for each of ``--touched``
keys (a spread of the held ones), and the processor reads the key's list, appends the value,
keeps the last 10, writes the list back and outputs ``(key, sum of the list)``. Both engines
start from an initial state giving every held key 10 values (one initial row per key holding
them), applied in batch 0; only the steady batches after it are timed.

(a) ``rounds`` (default): on one embedded local[2] Spark, ``--rounds`` alternating rounds of
    three engines, each resuming its own checkpoint (seeded once, before the rounds): ours with
    ``--large`` keys held, ours with ``--small``, and pyspark's ``transformWithStateInPandas``
    (RocksDB state store, Structured Streaming) with ``--small``. A round feeds each engine one
    warm-up batch and ``--batches`` steady ones, one JSON file of ``--touched`` rows per batch
    (both engines read the same kind of files: ours a ``textFileStream``, pyspark a file source
    taking one file per trigger). Per round: each engine's median per batch (ours: the batch's
    processing delay from BatchInfo; pyspark: its progress's ``addBatch``, and beside it
    ``triggerExecution``) and the CPU of the whole process tree (driver, JVM, Python workers)
    per steady batch, and the ratios ``keys_held`` = ours large / ours small (target at most 1.5)
    and ``vs_pyspark`` = ours small / pyspark (target at most 0.5), with their median over the
    rounds and spread (``bench._rounds.ratio_spread``).
(b) ``ttl`` (no Spark): the operator's partition runner alone (``run_transform_batch`` on one
    state store partition, processing time on a manual batch clock). ``--ttl-held`` values with
    a long TTL are held; ``E`` values with a short TTL are written in earlier batches so that each
    measured batch (no input) evicts ``E`` of them. Median ms per batch for each ``E`` in
    ``--ttl-expiring`` and each held count in ``--ttl-held``: the cost must follow ``E``, not the
    values held.
(c) ``runner`` (no Spark): the list workload through ``run_transform_batch`` on one partition,
    ``--large`` and ``--small`` keys held: median ms per steady batch and their ratio, i.e. what
    the operator itself adds per batch; ``--profile`` also prints where a large batch's time goes
    (cProfile, top functions by cumulative time).

Not part of the test suite. Run from the repository root:
``python -m bench.bench_transform_state [--only rounds ttl runner] [--rounds 3] [--batches 6]``.
The seed of ``--large`` (10 million list elements) takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
RECENT = 10
"""Values each key's list holds."""
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages now."""
    return [round(x, 2) for x in os.getloadavg()]


def batch_keys(batch: int, held: int, touched: int) -> list[int]:
    """The keys batch ``batch`` touches: a spread of ``touched`` of the ``held`` ones, shifted each batch."""
    step = max(1, held // touched)
    return [(batch * 7919 + i * step) % held for i in range(touched)]


def initial_values(key: int) -> tuple[int, ...]:
    """The 10 values key ``key`` starts with."""
    return tuple(range(key, key + RECENT))


def batch_lines(batch: int, held: int, touched: int) -> str:
    """Batch ``batch``'s JSON lines: one ``{"key", "value"}`` row per touched key, the value being the batch number."""
    return "".join(json.dumps({"key": k, "value": batch}) + "\n" for k in batch_keys(batch, held, touched))


def to_pair(line: str) -> tuple[int, int]:
    """A JSON line as ours takes it: ``(key, value)``."""
    row = json.loads(line)
    return row["key"], row["value"]


# -- the processors (the same logic on both engines) --


def ours_processor(ttl_ms: int | None = None) -> Any:
    """Our ``StatefulProcessor`` keeping each key's 10 most recent values (a list state, with ``ttl_ms`` if given)."""
    from streaming import StatefulProcessor

    class RecentValues(StatefulProcessor):  # type: ignore[misc]
        """The last 10 values of a key; outputs ``(key, their sum)`` per batch with input."""

        def init(self, handle: Any) -> None:
            self.recent = handle.getListState("recent", "value long", ttl_ms)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N803
            values = list(self.recent.get())
            values.extend(rows)
            values = values[-RECENT:]
            self.recent.put(values)
            yield key, sum(values)

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N803
            for values in initialState:
                self.recent.put(list(values))

        def close(self) -> None:
            pass

    return RecentValues()


def pyspark_processor() -> Any:
    """pyspark's ``StatefulProcessor`` (pandas frames) with the same logic as :func:`ours_processor`."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class RecentValues(StatefulProcessor):  # type: ignore[misc]
        """The last 10 values of a key; outputs one ``(key, total)`` row per batch with input."""

        def init(self, handle: Any) -> None:
            self.recent = handle.getListState("recent", "value long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N803
            values = [v for (v,) in self.recent.get()]
            for pdf in rows:
                values.extend(int(v) for v in pdf["value"])
            values = values[-RECENT:]
            self.recent.put([(v,) for v in values])
            yield pd.DataFrame({"key": [key[0]], "total": [sum(values)]})

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N803
            for values in initialState["values"]:
                self.recent.put([(int(v),) for v in values])

        def close(self) -> None:
            pass

    return RecentValues()


# -- the engines on Spark --


class OursEngine:
    """Our ``DStream.transformWithState`` over a ``textFileStream``, resuming its checkpoint at each :meth:`run`."""

    name = "ours"

    def __init__(self, sc: Any, root: Path, held: int, touched: int, interval: float) -> None:
        self.sc, self.held, self.touched, self.interval = sc, held, touched, interval
        self.checkpoint, self.watched, self.staging = root / "ck", root / "in", root / "staging"
        self.watched.mkdir(parents=True)
        self.staging.mkdir()
        self.next_batch = 1  # the file number; batch 0 is the seed
        self.seed_ms: int | None = None

    def _setup(self) -> Any:
        from streaming import StreamingContext

        ssc = StreamingContext(self.sc, self.interval)
        initial = self.sc.range(self.held, numSlices=4).map(lambda k: (k, initial_values(k)))
        pairs = ssc.textFileStream(str(self.watched)).map(to_pair)
        totals = pairs.transformWithState(ours_processor(), "update", "None", initialState=initial)
        totals.foreachRDD(lambda rdd: rdd.filter(lambda kv: kv[1] < 0).count())
        return ssc

    def _context(self, listener: Any) -> Any:
        from streaming import StreamingContext

        ssc = StreamingContext.getOrCreate(str(self.checkpoint), self._setup, restoreGraph=False)
        ssc.addStreamingListener(listener)
        return ssc

    def seed(self) -> None:
        """Run batch 0 alone (it applies the initial state) and stop."""
        listener = _Batches()
        ssc = self._context(listener)
        ssc.start()
        try:
            listener.wait_for(lambda b: True, 3600)
        finally:
            ssc.stop(stopSparkContext=False, stopGraceFully=False)
        self.seed_ms = listener.batches[0]["processing_ms"]

    def run(self, batches: int) -> dict[str, Any]:
        """One warm-up batch and ``batches`` steady ones, one file each; per-batch processing delays and CPU."""
        from bench._rounds import cpu_now

        listener = _Batches()
        ssc = self._context(listener)
        ssc.start()
        delays: list[int] = []
        try:
            cpu: list[tuple[float, float | None]] = []
            for index in range(batches + 1):
                number = self.next_batch
                self.next_batch += 1
                staged = self.staging / f"part-{number:05d}.json"
                staged.write_text(batch_lines(number, self.held, self.touched))
                target = self.watched / staged.name
                os.replace(staged, target)  # whole, with a fresh modification time
                found = listener.wait_for(lambda b, path=target.name: any(f.endswith(path) for f in b["files"]), 600)
                if index == 0:
                    cpu.append(cpu_now())  # after the warm-up batch
                else:
                    delays.append(found["processing_ms"])
            cpu.append(cpu_now())
        finally:
            ssc.stop(stopSparkContext=False, stopGraceFully=False)
        return _run_result(delays, cpu, {"batches_before_data": listener.count_before_files()})


class PysparkEngine:
    """pyspark's ``transformWithStateInPandas`` (RocksDB) over a file source, one file per trigger, resuming its checkpoint."""

    name = "pyspark"

    def __init__(self, spark: Any, root: Path, held: int, touched: int) -> None:
        self.spark, self.held, self.touched = spark, held, touched
        self.checkpoint, self.files = root / "ck", root / "files"
        self.files.mkdir(parents=True)
        self.next_batch = 0
        self.seed_ms: int | None = None

    def _add_file(self) -> None:
        number = self.next_batch
        self.next_batch += 1
        staged = self.files.parent / f".part-{number:05d}.json"
        staged.write_text(batch_lines(number, self.held, self.touched))
        os.replace(staged, self.files / staged.name[1:])

    def _start(self) -> Any:
        initial = (self.spark.range(self.held, numPartitions=4)
                   .selectExpr("id AS key", f"sequence(id, id + {RECENT - 1}) AS values").groupBy("key"))
        source = self.spark.readStream.schema("key long, value long").option("maxFilesPerTrigger", 1).json(str(self.files))
        totals = source.groupBy("key").transformWithStateInPandas(pyspark_processor(), "key long, total long", "update",
                                                                   "None", initialState=initial)
        return (totals.writeStream.outputMode("update").format("noop")
                .option("checkpointLocation", str(self.checkpoint)).start())

    def seed(self) -> None:
        """Run batch 0 (one file; it applies the initial state) and stop."""
        self._add_file()
        query = self._start()
        try:
            query.processAllAvailable()
            self.seed_ms = query.recentProgress[-1]["durationMs"].get("triggerExecution")
        finally:
            query.stop()

    def run(self, batches: int) -> dict[str, Any]:
        """One warm-up batch and ``batches`` steady ones, one file each; per-batch ``addBatch`` (and trigger) ms and CPU."""
        from bench._rounds import cpu_now

        self._add_file()
        query = self._start()
        try:
            query.processAllAvailable()  # the warm-up batch (the state store reopened)
            cpu = [cpu_now()]
            for _ in range(batches):
                self._add_file()
            query.processAllAvailable()
            cpu.append(cpu_now())
            progress = [p for p in query.recentProgress if p["numInputRows"] > 0][1:]
        finally:
            query.stop()
        if len(progress) != batches:
            raise RuntimeError(f"pyspark ran {len(progress)} steady batches with input, expected {batches}")
        result = _run_result([p["durationMs"].get("addBatch", 0) for p in progress], cpu, {})
        result["trigger_ms"] = [p["durationMs"].get("triggerExecution", 0) for p in progress]
        result["trigger_ms_median"] = statistics.median(result["trigger_ms"])
        operator = progress[-1]["stateOperators"][0]
        result["operator"] = {"operatorName": operator["operatorName"], "numRowsTotal": operator["numRowsTotal"]}
        return result


class _Batches:
    """A listener keeping each completed batch's time, processing delay and files; waits for a batch by predicate."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []
        self._changed = threading.Condition()

    def __call__(self, event: Any) -> None:
        info = getattr(event, "batch_info", None)
        if info is None or type(event).__name__ != "BatchCompleted":
            return
        files = [f for i in info.stream_id_to_input_info.values() for f in i.metadata.get("files", ())]
        with self._changed:
            self.batches.append({"time": info.batch_time.milliseconds, "processing_ms": info.processing_delay.milliseconds,
                                 "files": files, "failed": info.failed})
            self._changed.notify_all()

    def wait_for(self, wanted: Any, timeout: float) -> dict[str, Any]:
        """The first completed batch ``wanted`` accepts, once there is one."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for batch in self.batches:
                    if batch["failed"]:
                        raise RuntimeError(f"batch {batch['time']} failed")
                    if wanted(batch):
                        return batch
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no wanted batch in {timeout} s ({len(self.batches)} completed)")
                self._changed.wait(left)

    def count_before_files(self) -> int:
        """Batches that completed before the first one with a file (a restart's down-time batches among them)."""
        return next((n for n, b in enumerate(self.batches) if b["files"]), len(self.batches))


def _run_result(delays: list[int], cpu: list[tuple[float, float | None]], extra: dict[str, Any]) -> dict[str, Any]:
    (_, t0), (_, t1) = cpu
    total = None if t0 is None or t1 is None else round((t1 - t0) * 1000 / len(delays), 1)
    return {"ms": delays, "ms_median": statistics.median(delays), "cpu_ms_per_batch": total, "load_1m": load()[0], **extra}


def run_rounds(args: argparse.Namespace) -> dict[str, Any]:
    """Seed every engine once, then alternate rounds; per-round medians, CPU and the two ratios."""
    from pyspark.sql import SparkSession

    from bench._rounds import ratio_spread
    from streaming.spark import embedded_spark_context

    sc = embedded_spark_context({"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4",
                                 "spark.default.parallelism": "4"})
    sc.setLogLevel("ERROR")
    spark = SparkSession(sc)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    out: dict[str, Any] = {"load_average_before": load()}
    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-tws-") as tmp:
        engines: dict[str, Any] = {}
        if "ours" in args.engines:
            engines["ours_small"] = OursEngine(sc, Path(tmp) / "ours_small", args.small, args.touched, args.interval)
            engines["ours_large"] = OursEngine(sc, Path(tmp) / "ours_large", args.large, args.touched, args.interval)
        if "pyspark" in args.engines:
            engines["pyspark_small"] = PysparkEngine(spark, Path(tmp) / "pyspark_small", args.small, args.touched)
        seeds: dict[str, Any] = {}
        for name, engine in engines.items():
            began = time.perf_counter()
            engine.seed()
            seeds[name] = {"wall_s": round(time.perf_counter() - began, 1), "batch0_ms": engine.seed_ms, "load_1m": load()[0]}
        out["seed"] = seeds
        rounds: list[dict[str, Any]] = []
        names = list(engines)
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            runs = {name: engines[name].run(args.batches) for name in order}
            row: dict[str, Any] = {"order": order, **runs}
            if "ours_small" in runs:
                small = runs["ours_small"]["ms_median"]
                row["keys_held_ratio"] = round(runs["ours_large"]["ms_median"] / small, 3)
                if "pyspark_small" in runs:
                    row["vs_pyspark_ratio"] = round(small / runs["pyspark_small"]["ms_median"], 3)
                    row["vs_pyspark_trigger_ratio"] = round(small / runs["pyspark_small"]["trigger_ms_median"], 3)
                    theirs, ours = runs["pyspark_small"]["cpu_ms_per_batch"], runs["ours_small"]["cpu_ms_per_batch"]
                    row["vs_pyspark_cpu_ratio"] = round(ours / theirs, 3) if ours and theirs else None
            rounds.append(row)
            print(json.dumps({"round": r, **{k: v for k, v in row.items() if "ratio" in k}}), file=sys.stderr, flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
    out["rounds"] = rounds
    for ratio in ("keys_held_ratio", "vs_pyspark_ratio", "vs_pyspark_trigger_ratio", "vs_pyspark_cpu_ratio"):
        values = [row[ratio] for row in rounds if row.get(ratio) is not None]
        if values:
            out[ratio] = ratio_spread(values)
    out["targets"] = {"keys_held_ratio": 1.5, "vs_pyspark_ratio": 0.5}
    out["quantity"] = (f"median per steady batch ({args.batches} a round after one warm-up), {args.touched} keys touched "
                       f"of {args.small} or {args.large} held, each holding a list of {RECENT} values, 4 partitions; "
                       "ours: BatchInfo processing delay; pyspark: progress addBatch (trigger: triggerExecution); "
                       "CPU: the process tree's per steady batch")
    out["load_average_after"] = load()
    sc.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=10_000, help="keys held in the small runs (and pyspark's)")
    parser.add_argument("--large", type=int, default=1_000_000, help="keys held in the large run")
    parser.add_argument("--touched", type=int, default=1_000, help="keys each batch touches")
    parser.add_argument("--batches", type=int, default=6, help="steady batches per engine and round (after one warm-up)")
    parser.add_argument("--interval", type=float, default=2.0, help="our batch interval in seconds")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--engines", nargs="*", default=["ours", "pyspark"])
    parser.add_argument("--only", nargs="*", default=["rounds", "ttl", "runner"])
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT))
    out: dict[str, Any] = {"cpus": os.cpu_count()}
    if "rounds" in args.only:
        out["rounds"] = run_rounds(args)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
