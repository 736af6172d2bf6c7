"""Stateful processing: cost per batch against keys held, against pyspark's applyInPandasWithState, and store commits.

Prints one JSON object (with the machine's load beside each part), on an embedded local[2] Spark:

(a) ``keys_held``: the median processing delay per batch (BatchInfo, wall clock) of a keyed
    running count touching ``--touched`` keys per batch, with ``--small`` and with ``--large``
    keys held (seeded by the first batch), for ``flatMapGroupsWithState`` and for
    ``updateStateByKey`` measured the same way; the ratio large / small for each (target for
    ours: <= 1.5).
(b) ``vs_pyspark``: the same keyed workload, ``--large`` keys held on both sides, ``--touched``
    touched per batch, the same JSON files read by both, 4 partitions: pyspark's
    ``applyInPandasWithState`` (Structured Streaming, noop sink, one file per trigger, a query per
    round with ``availableNow``; its ``addBatch`` and ``triggerExecution``) and ours (processing
    delay; one batch per file on a stepped clock, so nothing of ours runs between its batches; the
    file is one partition, so each batch runs its 4 state partitions in one task, no shuffle) in
    ``--rounds`` alternating rounds of ``--vs-batches`` batches each, after each side's seed
    batch; per round the medians, the process tree's CPU per batch and the ratios, then their
    median and spread (target: at most 0.25). pyspark's seed is written through Spark's own store
    in seconds (``bench/_pyspark_state_seed.py``; ``--pyspark-seed operator``: through the
    operator, ~1.4 ms of CPU a key) and its state is checked before and after the rounds.
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
    stateful / floor, their median and spread (target: at most 2). ``--compare-fsync`` adds, in
    each round, the stateful count with ``spark.aiodstream.stateStore.fsync=false`` (commits not
    flushed, Spark's durability) and its ratios.
(g) ``ours_alone`` (``--only ours_alone``): ``vs_pyspark``'s side of ours alone (the same seed and
    files, ``--rounds`` rounds of ``--vs-batches``), to compare two trees of ours run alternately.
(e) ``store_direct`` (``--only store_direct``): the state store alone, no Spark: one partition
    holding ``--large`` keys, ``--batches`` batches each loading the next version, touching
    ``--touched`` keys and committing; min and median ms per batch (what a batch pays the store,
    including the working copy's check against the checkpoint's delta), and of the load alone.

Not part of the test suite. Run: ``python bench/bench_state.py [--large 1000000] [--batches 8] [--rounds 3]``
(``docs/benchmarks.md`` gives the run times).
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


JSON_SCHEMA = "key string, ts_ms long, value long"
"""The rows both sides of ``vs_pyspark`` read."""


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


def cpu_ms_per(spent_s: float, batches: int) -> float | None:
    """``spent_s`` of the process tree's CPU as ms per batch; None when it went backwards.

    A process leaves the tree with its CPU when it is reaped outside it or by a parent ignoring
    SIGCHLD (an idle pyspark worker exiting, say): a round that lost more than it spent has no figure.
    """
    return round(spent_s * 1000 / batches, 1) if spent_s >= 0 else None


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

    def cpu_ms_per_batch(self, first: int) -> float | None:
        """The process tree's CPU per batch (ms) from completion ``first - 1`` to the last (idle time between batches included)."""
        return cpu_ms_per(self.cpu_s[-1] - self.cpu_s[first - 1], len(self.cpu_s) - first)


FSYNC_KEY = "spark.aiodstream.stateStore.fsync"


def run_ours(sc: Any, kind: str, held: int, touched: int, batches: int, interval: float,
             location: str | None = None, fsync: bool | None = None) -> dict[str, Any]:
    """Batches of (key, 1) pairs through flatMapGroupsWithState or updateStateByKey; per-batch processing delays.

    The checkpoint is a fresh temporary directory, or ``location`` (any URI). ``fsync`` sets
    ``spark.aiodstream.stateStore.fsync`` on ``sc``'s live conf for this context (read when it is made).
    """
    from streaming import StreamingContext

    if fsync is not None:
        sc._conf.set(FSYNC_KEY, "true" if fsync else "false")
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


def run_store_direct(held: int, touched: int, batches: int, fsync: bool = True) -> dict[str, Any]:
    """Load, touch ``touched`` keys, commit: per batch on one partition of the store holding ``held`` keys."""
    import pickle

    from streaming.state import NO_TIMESTAMP, StateStoreProvider

    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-store-") as temporary:
        provider = StateStoreProvider(Path(temporary) / "ck", 0, 0, snapshot_every=10**9, fsync=fsync)
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


class SteppedClock:
    """The wall clock's pace while a batch runs, standing still between batches until the bench steps it to the next tick.

    Our side then runs exactly the batches the bench asks for, one at a time, with real processing
    delays (BatchInfo's), and runs nothing (no idle batches) while pyspark's round runs. Only the
    batch timer sleeps on the clock. Made and used on the bench's event loop.
    """

    def __init__(self) -> None:
        import anyio

        self._base_ms = time.time_ns() // 1_000_000
        self._since_ns: int | None = None  # when the clock last started running; None: standing still
        self._stepped = anyio.Event()
        self.deadline_ms: int | None = None
        """The tick the timer sleeps on (the next batch's time)."""

    def now(self) -> Any:
        from scheduler import Time

        if self._since_ns is None:
            return Time(self._base_ms)
        return Time(self._base_ms + (time.monotonic_ns() - self._since_ns) // 1_000_000)

    def stand_still(self) -> None:
        self._base_ms, self._since_ns = self.now().milliseconds, None

    def run_from(self, ms: int) -> None:
        """Jump to ``ms`` (not backwards) and run at the wall clock's pace."""
        import anyio

        self._base_ms, self._since_ns = max(ms, self.now().milliseconds), time.monotonic_ns()
        stepped, self._stepped = self._stepped, anyio.Event()
        stepped.set()

    async def sleep_until(self, deadline: Any) -> Any:
        import anyio

        self.deadline_ms = deadline.milliseconds
        while (now := self.now()).milliseconds < deadline.milliseconds:
            if self._since_ns is None:
                await self._stepped.wait()
            else:
                with anyio.move_on_after((deadline.milliseconds - now.milliseconds) / 1000):
                    await self._stepped.wait()
        await anyio.lowlevel.checkpoint()
        return now

    async def sleep(self, duration: Any) -> Any:
        return await self.sleep_until(self.now() + duration)


class FileBatches:
    """Our batches' processing delays by the file each read (the listener's side of :func:`run_ours_rounds`)."""

    def __init__(self) -> None:
        self.by_file: dict[str, int] = {}

    def __call__(self, event: Any) -> None:
        if type(event).__name__ != "BatchCompleted":
            return
        info = event.batch_info
        for input_info in info.stream_id_to_input_info.values():
            for path in input_info.metadata.get("files", ()):
                self.by_file[os.path.basename(path)] = info.processing_delay.milliseconds


def place(source: Path, directory: Path, mtime_ms: int) -> None:
    """Copy ``source`` into ``directory`` (a copy per side: each side's file has its own modification time, ``mtime_ms``)."""
    target = directory / source.name
    shutil.copyfile(source, target)
    os.utime(target, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


class OursSide:
    """Our flatMapGroupsWithState over a watched directory, on a :class:`SteppedClock`: one batch per file, when asked."""

    def __init__(self, sc: Any, root: Path, interval_ms: int) -> None:
        from streaming import StreamingContext

        self.watched = root / "ours-in"
        self.watched.mkdir()
        self.clock = SteppedClock()
        self.ssc = StreamingContext(sc, interval_ms / 1000, clock=self.clock)
        self.batches = FileBatches()
        self.ssc.addStreamingListener(self.batches)
        pairs = self.ssc.textFileStream(str(self.watched)).map(json.loads).map(lambda row: (row["key"], row["value"]))
        counts = pairs.flatMapGroupsWithState(count_clicks, "update", "NoTimeout", numPartitions=4)
        counts.foreachRDD(lambda rdd: rdd.filter(lambda kv: kv[1] > 10**9).count())
        self.ssc.checkpoint(str(root / "ours-ck"))

    async def run(self, files: list[Path], warmup: int) -> dict[str, Any]:
        """One batch per file, each alone; the processing delays and the process tree's CPU per batch after ``warmup``."""
        import anyio.lowlevel

        runtime = self.ssc.runtime
        cpu: list[float] = []
        for f in files:
            await runtime.wait_until_idle()
            while self.clock.deadline_ms is None:  # the timer's first sleep, right after start
                await anyio.lowlevel.checkpoint()
            tick = self.clock.deadline_ms
            place(f, self.watched, tick)
            cpu.append(tree_cpu_s())
            self.clock.run_from(tick)
            await runtime.wait_until_idle()
            self.clock.stand_still()
        cpu.append(tree_cpu_s())
        delays = [self.batches.by_file[f.name] for f in files]
        measured = len(files) - warmup
        return {"processing_ms": delays[warmup:],
                "cpu_ms_per_batch": cpu_ms_per(cpu[-1] - cpu[warmup], measured) if measured else None}


class PysparkSide:
    """applyInPandasWithState over a watched directory, one file per trigger.

    A query per round (``availableNow``), so nothing of it runs between rounds.
    """

    def __init__(self, sc: Any, root: Path, store: str) -> None:
        from pyspark.sql import SparkSession
        from pyspark.sql.streaming import StreamingQueryListener

        self.spark = SparkSession(sc)
        if store == "rocksdb":
            self.spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        self.watched = root / "theirs-in"
        self.watched.mkdir()
        self.checkpoint = root / "theirs-ck"
        progress: list[tuple[float, dict[str, Any]]] = []
        arrived = threading.Condition()
        self.progress, self.arrived = progress, arrived

        class Recorder(StreamingQueryListener):
            """Each batch's progress with the process tree's CPU when it arrives."""

            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                p = event.progress
                if p.numInputRows > 0:
                    with arrived:
                        progress.append((tree_cpu_s(), dict(p.durationMs)))
                        arrived.notify_all()

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self.spark.streams.addListener(Recorder())

    def run(self, files: list[Path], warmup: int) -> dict[str, Any]:
        """A query over ``files`` (one per trigger) until they are all read; each batch's addBatch and triggerExecution."""
        import pandas as pd

        def count(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
            total = state.get[0] if state.exists else 0
            for pdf in pdfs:
                total += int(pdf["value"].sum())
            state.update((total,))
            yield pd.DataFrame({"key": [key[0]], "total": [total]})

        now_ms = time.time_ns() // 1_000_000
        for i, f in enumerate(files):
            place(f, self.watched, now_ms - len(files) + i)  # in order: the source takes the oldest first
        with self.arrived:
            self.progress.clear()
        df = self.spark.readStream.schema(JSON_SCHEMA).option("maxFilesPerTrigger", 1).json(
            str(self.watched))
        query = (df.groupBy("key").applyInPandasWithState(count, "key string, total long", "total long", "update",
                                                          "NoTimeout")
                 .writeStream.outputMode("update").format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(self.checkpoint)).start())
        query.awaitTermination()
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.progress) >= len(files), timeout=60):
                raise RuntimeError(f"pyspark reported {len(self.progress)} batches of {len(files)}")
            got = list(self.progress)
        measured = len(files) - warmup
        return {"add_batch_ms": [d.get("addBatch", 0) for _, d in got[warmup:]],
                "trigger_ms": [d.get("triggerExecution", 0) for _, d in got[warmup:]],
                "cpu_ms_per_batch": cpu_ms_per(got[-1][0] - got[warmup - 1][0], measured) if warmup and measured else None}


def write_round_files(directory: Path, held: int, touched: int, rounds: int, per_round: int) -> tuple[Path, list[list[Path]]]:
    """The seed file (every held key) and each round's files (``touched`` keys each), JSON lines both sides read."""
    directory.mkdir(parents=True, exist_ok=True)

    def write(name: str, batch: int) -> Path:
        path = directory / name
        path.write_text("".join(json.dumps({"key": f"k{k}", "ts_ms": 0, "value": 1}) + "\n"
                                for k in batch_keys(batch, held, touched)))
        return path

    seed = write("part-seed.json", 0)
    return seed, [[write(f"part-{r:03d}-{i:03d}.json", 1 + r * per_round + i) for i in range(per_round)]
                  for r in range(rounds)]


def run_vs_pyspark(sc: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Alternating rounds of applyInPandasWithState and of ours over the same files, ``--large`` keys held on both sides."""
    import anyio
    import anyio.to_thread

    from bench._pyspark_state_seed import seed_by_store, state_summary
    from bench._rounds import ratio_spread

    per_round = args.vs_batches
    rounds: list[dict[str, Any]] = []
    seeds: dict[str, dict[str, float]] = {}
    checks: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-vs-") as tmp:
        root = Path(tmp)
        seed, round_files = write_round_files(root / "files", args.large, args.touched, args.rounds, per_round)
        theirs = PysparkSide(sc, root, args.pyspark_store)

        async def driver() -> None:
            sc._conf.set(FSYNC_KEY, "false" if args.ours_unflushed else "true")  # read when our context is made
            ours = OursSide(sc, root, 10_000)  # a virtual interval longer than any steady batch
            async with ours.ssc:
                await ours.ssc.start_async()
                for side in ("pyspark", "ours"):
                    started, cpu = time.perf_counter(), tree_cpu_s()
                    if side == "ours":
                        await ours.run([seed], 0)
                    elif args.pyspark_seed == "store":
                        await anyio.to_thread.run_sync(
                            seed_by_store, theirs.spark, JSON_SCHEMA, seed, theirs.checkpoint, lambda files: theirs.run(files, 0))
                    else:
                        await anyio.to_thread.run_sync(theirs.run, [seed], 0)
                    seeds[side] = {"wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(tree_cpu_s() - cpu, 1)}
                held = await anyio.to_thread.run_sync(state_summary, theirs.spark, theirs.checkpoint)
                if held != {"keys": args.large, "total": args.large}:
                    raise RuntimeError(f"pyspark's seeded state holds {held}, not {args.large} keys of count 1")
                for r, files in enumerate(round_files):
                    row: dict[str, Any] = {"load_average_before": [round(x, 2) for x in os.getloadavg()]}
                    for side in (("pyspark", "ours") if r % 2 == 0 else ("ours", "pyspark")):
                        if side == "ours":
                            row["ours"] = await ours.run(files, args.vs_warmup)
                        else:
                            row["pyspark"] = await anyio.to_thread.run_sync(theirs.run, files, args.vs_warmup)
                    row["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
                    rounds.append(row)
                await ours.ssc.stop_async(stopSparkContext=False)
                counted = await anyio.to_thread.run_sync(state_summary, theirs.spark, theirs.checkpoint)
                expected = {"keys": args.large, "total": args.large + args.touched * per_round * args.rounds}
                if counted != expected:
                    raise RuntimeError(f"pyspark's state after the rounds holds {counted}, not {expected}")
                checks["pyspark_state_after_rounds"] = counted

        anyio.run(driver)
    for row in rounds:
        ours_ms = statistics.median(row["ours"]["processing_ms"])
        row["ours_ms_median"] = ours_ms
        row["pyspark_add_batch_ms_median"] = statistics.median(row["pyspark"]["add_batch_ms"])
        row["pyspark_trigger_ms_median"] = statistics.median(row["pyspark"]["trigger_ms"])
        row["ratio"] = round(ours_ms / row["pyspark_add_batch_ms_median"], 3)
        row["ratio_to_trigger"] = round(ours_ms / row["pyspark_trigger_ms_median"], 3)
        if row["ours"]["cpu_ms_per_batch"] and row["pyspark"]["cpu_ms_per_batch"]:
            row["cpu_ratio"] = round(row["ours"]["cpu_ms_per_batch"] / row["pyspark"]["cpu_ms_per_batch"], 3)
    ours_all = [ms for r in rounds for ms in r["ours"]["processing_ms"]]
    theirs_all = [ms for r in rounds for ms in r["pyspark"]["add_batch_ms"]]
    return {
        "quantity": f"processing per steady batch, {args.large} keys held on both sides, {args.touched} touched per batch "
                    f"from the same JSON files, 4 partitions, {args.rounds} alternating rounds of {per_round} batches "
                    f"({args.vs_warmup} warm-up): ours BatchInfo's processing delay (flatMapGroupsWithState, one batch "
                    "at a time on a stepped clock) against pyspark's addBatch (applyInPandasWithState, noop sink, "
                    f"one file per trigger, a query per round with availableNow, {args.pyspark_store} store); "
                    "CPU: the process tree's per batch",
        "ours_unflushed": args.ours_unflushed, "seed": seeds, "pyspark_seed": args.pyspark_seed, "checks": checks, "rounds": rounds,
        "ours_median_ms": statistics.median(ours_all), "pyspark_add_batch_median_ms": statistics.median(theirs_all),
        "ratio": ratio_spread([r["ratio"] for r in rounds]),
        "ratio_to_trigger": ratio_spread([r["ratio_to_trigger"] for r in rounds]),
        "cpu_ratio": ratio_spread([r["cpu_ratio"] for r in rounds if "cpu_ratio" in r]) if any("cpu_ratio" in r for r in rounds) else None,
        "ratio_of_all_batches": round(statistics.median(ours_all) / statistics.median(theirs_all), 3),
        "target_ratio": 0.25,
    }


def run_ours_alone(sc: Any, args: argparse.Namespace) -> dict[str, Any]:
    """``vs_pyspark``'s side of ours without pyspark's: the same seed and files, ``--rounds`` rounds of ``--vs-batches``.

    For comparing two trees of ours (run it on each, alternating) without pyspark's batches,
    whose times swing with the load far more than ours, in between.
    """
    import anyio

    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-ours-") as tmp:
        root = Path(tmp)
        seed, round_files = write_round_files(root / "files", args.large, args.touched, args.rounds, args.vs_batches)

        async def driver() -> None:
            sc._conf.set(FSYNC_KEY, "false" if args.ours_unflushed else "true")
            ours = OursSide(sc, root, 10_000)
            async with ours.ssc:
                await ours.ssc.start_async()
                await ours.run([seed], 0)
                for files in round_files:
                    load = [round(x, 2) for x in os.getloadavg()]
                    row = await ours.run(files, args.vs_warmup)
                    rounds.append({"load_average_before": load, **row,
                                   "processing_ms_median": statistics.median(row["processing_ms"])})
                await ours.ssc.stop_async(stopSparkContext=False)

        anyio.run(driver)
    return {
        "quantity": f"ours' processing delay per steady batch as in vs_pyspark ({args.large} keys held, {args.touched} "
                    f"touched, one JSON file a batch), {args.rounds} rounds of {args.vs_batches} batches ({args.vs_warmup} "
                    "warm-up); CPU: the process tree's per batch",
        "ours_unflushed": args.ours_unflushed, "rounds": rounds,
        "processing_ms_median": statistics.median(ms for r in rounds for ms in r["processing_ms"]),
        "cpu_ms_per_batch_median_of_rounds": statistics.median(c) if (c := [r["cpu_ms_per_batch"] for r in rounds
                                                                             if r["cpu_ms_per_batch"]]) else None,
    }


def run_floor(sc: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Alternating rounds of the stateful count and of reduceByKey over the same records on ``sc``; medians, CPU, ratios.

    With ``--compare-fsync`` each round also runs the stateful count with
    ``spark.aiodstream.stateStore.fsync=false`` (commits not flushed, Spark's durability), the three in an
    order that turns round by round.
    """
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        load = [round(x, 2) for x in os.getloadavg()]
        sides = ["stateful", "floor", "stateful_unflushed"] if args.compare_fsync else ["stateful", "floor"]
        sides = sides[r % len(sides):] + sides[:r % len(sides)]
        ran: dict[str, dict[str, Any]] = {}
        for side in sides:
            if side == "floor":
                ran[side] = run_ours(sc, "reduce_by_key", args.large, args.touched, args.batches, args.interval)
            else:
                ran[side] = run_ours(sc, "groups", args.large, args.touched, args.batches, args.interval,
                                     fsync=side != "stateful_unflushed")  # true: the default, set again
        stateful, floor = ran["stateful"], ran["floor"]
        if "stateful_unflushed" in ran:
            unflushed = ran["stateful_unflushed"]
            fsync_part: dict[str, Any] = {
                "unflushed_ms_median": unflushed["processing_ms_median"], "unflushed_cpu_ms": unflushed["cpu_ms_per_batch"],
                "unflushed_ms": unflushed["processing_ms"],
                "unflushed_over_stateful": round(unflushed["processing_ms_median"] / stateful["processing_ms_median"], 3),
                "unflushed_ratio_to_floor": round(unflushed["processing_ms_median"] / floor["processing_ms_median"], 3)}
        else:
            fsync_part = {}
        rounds.append({"order": sides, **fsync_part,
                       "stateful_ms_median": stateful["processing_ms_median"], "floor_ms_median": floor["processing_ms_median"],
                       "ratio": round(stateful["processing_ms_median"] / floor["processing_ms_median"], 3),
                       "stateful_cpu_ms": stateful["cpu_ms_per_batch"], "floor_cpu_ms": floor["cpu_ms_per_batch"],
                       "cpu_ratio": round(stateful["cpu_ms_per_batch"] / floor["cpu_ms_per_batch"], 3)
                       if stateful["cpu_ms_per_batch"] and floor["cpu_ms_per_batch"] else None,
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
        "cpu_ratio_median_of_rounds": round(statistics.median(cpu), 3) if (cpu := [r["cpu_ratio"] for r in rounds
                                                                                   if r["cpu_ratio"]]) else None,
        "target_ratio": 2.0,
        **({"unflushed_over_stateful_median_of_rounds": round(statistics.median(r["unflushed_over_stateful"] for r in rounds), 3),
            "unflushed": {"processing_ms_median": statistics.median(ms for r in rounds for ms in r["unflushed_ms"])}}
           if args.compare_fsync else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=10_000, help="keys held in the small run")
    parser.add_argument("--large", type=int, default=1_000_000, help="keys held in the large run")
    parser.add_argument("--touched", type=int, default=1_000, help="keys each batch touches")
    parser.add_argument("--batches", type=int, default=8, help="batches per run (2 warm-up ones included)")
    parser.add_argument("--interval", type=float, default=2.0, help="batch interval in seconds")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of floor (stateful, reduceByKey)")
    parser.add_argument("--vs-batches", type=int, default=6, help="batches per side and round of vs_pyspark")
    parser.add_argument("--vs-warmup", type=int, default=1, help="of which warm-up (not measured), at least 1")
    parser.add_argument("--pyspark-store", choices=["hdfs", "rocksdb"], default="hdfs",
                        help="applyInPandasWithState's state store (hdfs: Spark's default, in memory)")
    parser.add_argument("--pyspark-seed", choices=["store", "operator"], default="store",
                        help="how pyspark's side gets its --large keys (store: Spark's store written by a streaming "
                             "aggregation, seconds; operator: applyInPandasWithState over the seed, ~1.4 ms of CPU a key)")
    parser.add_argument("--driver-memory", default="4g",
                        help="the JVM's heap (Spark's default is 1g): pyspark's default store keeps its state on that "
                             "heap, two versions of it, and with 1,000,000 keys on 1g it spent 10-30 s a batch "
                             "collecting garbage, then failed out of memory; ours keeps its state in SQLite files")
    parser.add_argument("--compare-fsync", action="store_true",
                        help="floor: also run the stateful count with spark.aiodstream.stateStore.fsync=false in each round")
    parser.add_argument("--ours-unflushed", action="store_true",
                        help="vs_pyspark: our side does not flush its state store commits (spark.aiodstream.stateStore.fsync=false, "
                             "Spark's durability on a local disk)")
    parser.add_argument("--only", nargs="*", default=["keys_held", "vs_pyspark", "floor"])
    parser.add_argument("--kinds", nargs="*", default=["groups", "update_state_by_key"],
                        help="what keys_held runs (groups: flatMapGroupsWithState)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.driver_memory:
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"  # read at the JVM's launch
    sys.path.insert(0, str(ROOT))
    from streaming.spark import embedded_spark_context

    if args.only == ["store_direct"]:
        load = [round(x, 2) for x in os.getloadavg()]
        cpu = time.process_time()
        part = run_store_direct(args.large, args.touched, args.batches)
        part["cpu_s"] = round(time.process_time() - cpu, 3)
        part["load_average_before"], part["load_average_after"] = load, [round(x, 2) for x in os.getloadavg()]
        out = {"cpus": os.cpu_count(), "store_direct": part}
        if args.compare_fsync:  # the same with commits not flushed (no fsync), after
            cpu = time.process_time()
            unflushed = run_store_direct(args.large, args.touched, args.batches, fsync=False)
            unflushed["cpu_s"] = round(time.process_time() - cpu, 3)
            unflushed["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
            out["store_direct_unflushed"] = unflushed
        print(json.dumps(out, indent=2))
        return
    sc = embedded_spark_context({"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"})
    sc.setLogLevel("ERROR")
    out: dict[str, Any] = {"cpus": os.cpu_count(), "driver_memory": sc.getConf().get("spark.driver.memory", "1g")}
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
        out["vs_pyspark"] = run_vs_pyspark(sc, args)
    if "ours_alone" in args.only:
        out["ours_alone"] = run_ours_alone(sc, args)
    if "floor" in args.only:
        out["floor"] = run_floor(sc, args)
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
