"""transformWithState: cost per batch against keys held, against pyspark's transformWithStateInPandas, and TTL eviction.

Prints one JSON object, the machine's load beside each part. The workload: every key holds a
``ListState`` of its 10 most recent values; a batch brings one value for each of ``--touched``
keys (a spread of the held ones), and the processor reads the key's list, appends the value,
keeps the last 10, writes the list back and outputs ``(key, sum of the list)``. Every held key
starts with 10 values: pyspark's from an initial state (one row per key holding them), ours from
a first bulk batch (one input row per key holding them: an RDD initial state cannot go into our
checkpointed graph, whose recipe pickles the call's arguments). Only the steady batches after the
seed are timed.

(a) ``rounds`` (default): on one embedded local[2] Spark, ``--rounds`` alternating rounds (the
    order reversed every other round) of the engines, each resuming its own checkpoint (seeded
    once, before the rounds): ours with ``--large`` keys held, ours with ``--small``, pyspark's
    ``transformWithStateInPandas`` (RocksDB state store, Structured Streaming) with ``--small``,
    and with ``--engines ... floor`` ours' same input, shuffle and output with ``groupByKey``
    instead of the state. A round feeds each engine one warm-up batch and ``--batches`` steady
    ones, one JSON file of ``--touched`` rows per batch (ours reads a ``textFileStream``, pyspark
    a file source taking one file per trigger). Per round: each engine's median per batch (ours:
    the batch's processing delay from BatchInfo; pyspark: its progress's ``addBatch``, and
    beside it ``triggerExecution``), the CPU of the live process tree (driver, JVM, Python
    workers) per steady batch (ours idles between batches, pyspark runs them back to back), and
    the ratios ``keys_held`` = ours large / ours small (target at most 1.5), ``vs_pyspark`` = ours
    small / pyspark (target at most 0.5) and ``over_floor`` = ours small / floor, with their
    median over the rounds and spread (``bench._rounds.ratio_spread``). A restart of ours first
    runs the down-time batches (empty) of the time it was stopped; only batches with a file count.
(b) ``ttl`` (no Spark): the operator's partition runner alone (``run_transform_batch`` on one
    state store partition, processing time on a manual batch clock). ``--ttl-held`` values with
    a long TTL are held; ``E`` values with a short TTL are written in earlier batches so that each
    measured batch (no input) evicts ``E`` of them. Median ms of the load, the operator's pass
    (the eviction) and the commit, apart, for each ``E`` in ``--ttl-expiring`` and each held
    count in ``--ttl-held``: the eviction must follow ``E``, not the values held (no snapshots
    here: ``snapshot_every`` is out of reach, so the commit is the delta alone).
(c) ``runner`` (no Spark): the list workload through ``run_transform_batch`` on one partition
    holding a quarter of ``--large`` or of ``--small`` keys (one of 4 partitions), a quarter of
    ``--touched`` per batch: median and max ms per steady batch and the ratio of medians, i.e.
    what the operator itself costs per partition and batch (the store's default snapshot period:
    every 10th version copies the whole working copy, and the next load waits for it);
    ``--profile`` also prints where a large batch's time goes (cProfile, top functions).

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
from typing import Any, Iterable, Iterator

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


def seed_lines(held: int) -> Iterator[str]:
    """Our seed batch's JSON lines: ``{"key", "values"}`` with each held key's 10 first values."""
    for key in range(held):
        yield json.dumps({"key": key, "values": list(initial_values(key))}) + "\n"


def to_pair(line: str) -> tuple[int, Any]:
    """A JSON line as ours takes it: ``(key, value)``, or ``(key, [values])`` for a seed line."""
    row = json.loads(line)
    return row["key"], row["value"] if "value" in row else row["values"]


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
            for row in rows:
                if isinstance(row, list):  # a seed row: the key's first 10 values
                    values.extend(row)
                else:
                    values.append(row)
            values = values[-RECENT:]
            self.recent.put(values)
            yield key, sum(values)

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N803
            self.recent.put(list(initialState))  # one initial row per key: its 10 values

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

    def __init__(self, sc: Any, root: Path, held: int, touched: int, interval: float, *, floor: bool = False) -> None:
        self.sc, self.held, self.touched, self.interval, self.floor = sc, held, touched, interval, floor
        self.checkpoint, self.watched, self.staging = root / "ck", root / "in", root / "staging"
        self.watched.mkdir(parents=True)
        self.staging.mkdir()
        self.next_batch = 1  # the file number; batch 0 is the seed
        self.seed_ms: int | None = None

    def _setup(self) -> Any:
        from streaming import StreamingContext

        ssc = StreamingContext(self.sc, self.interval)
        pairs = ssc.textFileStream(str(self.watched)).map(to_pair)
        if self.floor:  # the same input, shuffle and output without state: what Spark alone costs
            totals = pairs.groupByKey(4).mapValues(lambda rows: sum(r for r in rows if not isinstance(r, list)))
        else:
            totals = pairs.transformWithState(ours_processor(), "update", "None", numPartitions=4)
        totals.foreachRDD(lambda rdd: rdd.filter(lambda kv: kv[1] < 0).count())
        return ssc

    def _context(self, listener: Any) -> Any:
        from streaming import StreamingContext

        ssc = StreamingContext.getOrCreate(str(self.checkpoint), self._setup, restoreGraph=False)
        ssc.addStreamingListener(listener)
        return ssc

    def _add_file(self, number: int, lines: Iterable[str]) -> str:
        staged = self.staging / f"part-{number:05d}.json"
        with staged.open("w") as file:
            file.writelines(lines)
        os.replace(staged, self.watched / staged.name)  # whole, with a fresh modification time
        return staged.name

    def seed(self) -> None:
        """Run the seed batch (every held key's 10 values) and stop."""
        listener = _Batches()
        ssc = self._context(listener)
        ssc.start()
        try:
            name = self._add_file(0, seed_lines(self.held))
            found = listener.wait_for(lambda b: any(f.endswith(name) for f in b["files"]), 3600)
            # The batches queued behind a long seed would be pending at the stop and re-run at the
            # next start, in the first round: let them run now.
            interval_ms = self.interval * 1000
            listener.wait_for(lambda b: b["time"] >= time.time() * 1000 - 2 * interval_ms, 3600)
        finally:
            ssc.stop(stopSparkContext=False, stopGraceFully=False)
        self.seed_ms = found["processing_ms"]

    def run(self, batches: int) -> dict[str, Any]:
        """One warm-up batch and ``batches`` steady ones, one file each; per-batch processing delays and CPU."""
        listener = _Batches()
        ssc = self._context(listener)
        ssc.start()
        delays: list[int] = []
        try:
            cpu: list[dict[int, float]] = []
            for index in range(batches + 1):
                number = self.next_batch
                self.next_batch += 1
                name = self._add_file(number, [batch_lines(number, self.held, self.touched)])
                found = listener.wait_for(lambda b, path=name: any(f.endswith(path) for f in b["files"]), 600)
                if index == 0:
                    cpu.append(cpu_now())  # after the warm-up batch
                else:
                    delays.append(found["processing_ms"])
            cpu.append(cpu_now())
            progress = list(ssc.runtime.recent_progress)
        finally:
            ssc.stop(stopSparkContext=False, stopGraceFully=False)
        extra: dict[str, Any] = {"batches_before_data": listener.count_before_files()}
        operators = [p.state_operators[0] for p in progress[-batches:] if p.state_operators]
        if operators:
            last = operators[-1]
            extra["operator"] = {"operatorName": last.operator_name, "numRowsTotal": last.num_rows_total,
                                 "commitTimeMs_median": statistics.median(o.commit_time_ms for o in operators),
                                 "customMetrics": dict(last.custom_metrics)}
        return _run_result(delays, cpu, extra)


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


def cpu_now() -> dict[int, float]:
    """CPU seconds (user + system) of this process and each live descendant (the JVM, Python workers), by pid.

    Unlike ``bench._rounds.cpu_now`` it leaves out reaped children's CPU, which lands in the
    parent's account at once when a worker exits, its whole life's worth: here a Python worker of
    one engine exiting during another's run would count for the second. A process that exits
    within the window is left out instead (its CPU is lost, not misplaced).
    """
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                fields = file.read().rpartition(")")[2].split()
        except OSError:
            continue  # gone since the listing
        children.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    mine: dict[int, float] = {}
    stack = [os.getpid()]
    while stack:
        pid = stack.pop()
        mine[pid] = cpu.get(pid, 0.0)
        stack.extend(children.get(pid, ()))
    return mine


def _run_result(delays: list[int], cpu: list[dict[int, float]], extra: dict[str, Any]) -> dict[str, Any]:
    before, after = cpu
    spent = sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())
    total = round(spent * 1000 / len(delays), 1)
    return {"ms": delays, "ms_median": statistics.median(delays), "cpu_ms_per_batch": total, "load_1m": load()[0], **extra}


def run_rounds(args: argparse.Namespace) -> dict[str, Any]:
    """Seed every engine once, then alternate rounds; per-round medians, CPU and the two ratios."""
    from pyspark.sql import SparkSession

    from bench._rounds import ratio_spread
    from streaming.spark import embedded_spark_context

    sc = embedded_spark_context({"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "4",
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
        if "floor" in args.engines:
            engines["floor_small"] = OursEngine(sc, Path(tmp) / "floor_small", args.small, args.touched, args.interval,
                                                floor=True)
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
                if "floor_small" in runs:
                    row["over_floor_ratio"] = round(small / runs["floor_small"]["ms_median"], 3)
            rounds.append(row)
            print(json.dumps({"round": r, **{k: v for k, v in row.items() if "ratio" in k}}), file=sys.stderr, flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
    out["rounds"] = rounds
    for ratio in ("keys_held_ratio", "vs_pyspark_ratio", "vs_pyspark_trigger_ratio", "vs_pyspark_cpu_ratio",
                  "over_floor_ratio"):
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


# -- the operator's partition runner alone (no Spark) --


def ttl_processor(long_ttl_ms: int, short_ttl_ms: int) -> Any:
    """A processor writing a row's key into ``held`` (long TTL) or ``short`` (short TTL), by the row; no output."""
    from streaming import StatefulProcessor

    class Expiring(StatefulProcessor):  # type: ignore[misc]
        """Two value states with a TTL each."""

        def init(self, handle: Any) -> None:
            self.held = handle.getValueState("held", "value long", long_ttl_ms)
            self.short = handle.getValueState("short", "value long", short_ttl_ms)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N803
            for kind in rows:
                (self.held if kind == "held" else self.short).update(key)
            yield from ()

        def close(self) -> None:
            pass

    return Expiring()


def run_ttl(held: int, expiring: int, batches: int, step_ms: int = 1000) -> dict[str, Any]:
    """``held`` long-lived values, then ``batches`` batches writing ``expiring`` short-lived ones each, then ``batches``
    input-free batches each evicting ``expiring``.

    Per measured batch, timed apart: the load, the operator's pass (no input: the TTL eviction)
    and the commit (the delta, its two ``fsync``s, which a busy disk makes noisy).
    """
    from streaming.state import StateStoreProvider, TransformWithStateSpec, run_transform_batch, run_transform_partition

    spec = TransformWithStateSpec(ttl_processor(10**12, batches * step_ms), "update", "ProcessingTime", False)
    start = 1_700_000_000_000
    timings: dict[str, list[float]] = {"load": [], "evict": [], "commit": [], "total": []}
    evicted: list[int] = []
    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-ttl-") as tmp:
        provider = StateStoreProvider(Path(tmp) / "ck", 0, 0, local_dir=Path(tmp) / "local", snapshot_every=10**9)
        try:
            began = time.perf_counter()
            run_transform_batch(provider, 0, ((k, "held") for k in range(held)), spec, start, -1, -1)
            seed_s = time.perf_counter() - began
            for b in range(1, batches + 1):
                first = held + (b - 1) * expiring
                run_transform_batch(provider, b, ((k, "short") for k in range(first, first + expiring)), spec,
                                    start + b * step_ms, -1, -1)
            for b in range(batches + 1, 2 * batches + 1):
                t0 = time.perf_counter()
                store = provider.load(b)
                t1 = time.perf_counter()
                result = run_transform_partition((), store, spec, start + b * step_ms, -1, -1)
                t2 = time.perf_counter()
                rows = len(store)
                store.commit()
                t3 = time.perf_counter()
                for name, ms in (("load", t1 - t0), ("evict", t2 - t1), ("commit", t3 - t2), ("total", t3 - t0)):
                    timings[name].append(ms * 1000)
                evicted.append(result.custom_metrics.get("numValuesRemovedDueToTTLExpiry", 0))
        finally:
            provider.close()
    out: dict[str, Any] = {"held": held, "expiring": expiring}
    for name, values in timings.items():
        out[f"{name}_ms_median"] = round(statistics.median(values), 3)
    out.update({"evict_ms": [round(t, 2) for t in timings["evict"]], "evicted_per_batch": evicted, "rows_after": rows,
                "seed_s": round(seed_s, 1)})
    return out


def run_ttl_part(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run_ttl` for each held count and each expiring count; the cost per evicted value beside the empty batch."""
    out: dict[str, Any] = {"load_average_before": load(), "runs": []}
    for held in args.ttl_held:
        for expiring in args.ttl_expiring:
            run = run_ttl(held, expiring, args.ttl_batches)
            run["load_1m"] = load()[0]
            out["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "evict_ms"}), file=sys.stderr, flush=True)
    by = {(r["held"], r["expiring"]): r["evict_ms_median"] for r in out["runs"]}
    for run in out["runs"]:
        if run["expiring"]:
            run["evict_us_per_value"] = round(run["evict_ms_median"] * 1000 / run["expiring"], 2)
    if len(args.ttl_held) > 1:
        low, high = min(args.ttl_held), max(args.ttl_held)
        out["evict_held_ratio_per_expiring"] = {e: round(by[(high, e)] / by[(low, e)], 3) if by[(low, e)] else None
                                                for e in args.ttl_expiring}
    out["quantity"] = ("one partition, the operator's runner alone, input-free batches each evicting `expiring` values "
                       "(short TTL) while `held` values (long TTL, in the same timeout index) stay: median ms of the "
                       f"load, the operator's pass (the eviction), the commit, over {args.ttl_batches} batches; "
                       "evict_held_ratio_per_expiring: the eviction's ms with the most held over the fewest")
    out["load_average_after"] = load()
    return out


def run_runner(held: int, touched: int, batches: int, profile: bool) -> dict[str, Any]:
    """The list workload through ``run_transform_batch`` on one partition: seed ``held`` keys, then ``batches`` batches."""
    from streaming.state import StateStoreProvider, TransformWithStateSpec, initial_rows_by_key, run_transform_batch

    spec = TransformWithStateSpec(ours_processor(), "update", "None", False)
    out: dict[str, Any] = {"held": held, "touched": touched}
    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-runner-") as tmp:
        # The operator's provider keeps the default snapshot period: every 10th batch's commit copies the
        # working copy into the checkpoint in the background, and the next load waits for that copy.
        provider = StateStoreProvider(Path(tmp) / "ck", 0, 0, local_dir=Path(tmp) / "local")
        try:
            began = time.perf_counter()
            run_transform_batch(provider, 0, (), spec, 0, -1, -1, initial_rows_by_key((k, initial_values(k)) for k in range(held)))
            out["seed_s"] = round(time.perf_counter() - began, 1)
            times: list[float] = []
            for b in range(1, batches + 1):
                records = [(k, b) for k in batch_keys(b, held, touched)]
                began = time.perf_counter()
                outputs, stats = run_transform_batch(provider, b, records, spec, 0, -1, -1)
                times.append((time.perf_counter() - began) * 1000)
                assert len(outputs) == touched, len(outputs)
            steady = times[1:]  # the first batch after the seed reads the seed's large delta to prove the working copy
            out.update({"batch_ms_median": round(statistics.median(steady), 2), "batch_ms_max": round(max(steady), 2),
                        "batch_ms": [round(t, 2) for t in steady],
                        "rows": stats.num_rows_total, "commit_ms": stats.commit_time_ms})
            if profile:
                out["profile"] = profile_batch(provider, batches + 1, held, touched, spec)
        finally:
            provider.close()
    return out


def profile_batch(provider: Any, batch: int, held: int, touched: int, spec: Any) -> list[str]:
    """One more batch under cProfile: the top functions by cumulative time, as pstats prints them."""
    import cProfile
    import io
    import pstats

    from streaming.state import run_transform_batch

    records = [(k, batch) for k in batch_keys(batch, held, touched)]
    profiler = cProfile.Profile()
    profiler.enable()
    run_transform_batch(provider, batch, records, spec, 0, -1, -1)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
    return [line for line in text.getvalue().splitlines() if line.strip()][-27:]


def run_runner_part(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run_runner` for a quarter of ``--small`` and of ``--large`` keys (one of 4 partitions), alternating rounds."""
    from bench._rounds import ratio_spread

    out: dict[str, Any] = {"load_average_before": load()}
    small, large, touched = args.small // 4, args.large // 4, max(1, args.touched // 4)
    rounds = []
    for r in range(args.runner_rounds):
        pair = {}
        for held in ((small, large) if r % 2 == 0 else (large, small)):
            pair[held] = run_runner(held, touched, args.runner_batches, args.profile and held == large and r == 0)
            pair[held]["load_1m"] = load()[0]
        rounds.append({"small": pair[small], "large": pair[large],
                       "ratio": round(pair[large]["batch_ms_median"] / pair[small]["batch_ms_median"], 3)})
    out["rounds"] = rounds
    out["ratio"] = ratio_spread([r["ratio"] for r in rounds])
    out["quantity"] = (f"one partition's share (a quarter of the keys and of the touched ones): {touched} keys touched of "
                       f"{small} or {large} held, {RECENT} list elements each; run_transform_batch alone, median ms "
                       "per steady batch (load, handlers, commit)")
    out["load_average_after"] = load()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=10_000, help="keys held in the small runs (and pyspark's)")
    parser.add_argument("--large", type=int, default=1_000_000, help="keys held in the large run")
    parser.add_argument("--touched", type=int, default=1_000, help="keys each batch touches")
    parser.add_argument("--batches", type=int, default=6, help="steady batches per engine and round (after one warm-up)")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="our batch interval in seconds (long enough for the large store's snapshots)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--engines", nargs="*", default=["ours", "pyspark"],
                        help="ours, pyspark, floor (ours' input, shuffle and output, groupByKey instead of the state)")
    parser.add_argument("--only", nargs="*", default=["rounds", "ttl", "runner"])
    parser.add_argument("--ttl-held", type=int, nargs="*", default=[10_000, 1_000_000], help="long-lived values held")
    parser.add_argument("--ttl-expiring", type=int, nargs="*", default=[0, 100, 1_000, 10_000],
                        help="values evicted per measured batch")
    parser.add_argument("--ttl-batches", type=int, default=5, help="batches writing, then batches evicting")
    parser.add_argument("--runner-rounds", type=int, default=3)
    parser.add_argument("--runner-batches", type=int, default=12, help="runner batches (a snapshot every 10th)")
    parser.add_argument("--profile", action="store_true", help="print where a large runner batch's time goes")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT))
    out: dict[str, Any] = {"cpus": os.cpu_count()}
    if "rounds" in args.only:
        out["rounds"] = run_rounds(args)
    if "ttl" in args.only:
        out["ttl"] = run_ttl_part(args)
    if "runner" in args.only:
        out["runner"] = run_runner_part(args)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
