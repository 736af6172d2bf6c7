"""End-to-end latency of our continuous processing beside our micro-batch mode and Spark's own continuous mode.

All on one local[2] SparkContext, in one run; one JSON object is printed (progress goes to stderr),
with the machine's load average beside each result. Latency is always "arrival time minus the
row's scheduled time", in ms:

* ``ours_continuous``: ``ContinuousExecution`` (``Continuous("1 second")``, ``SparkTaskLauncher``,
  a checkpoint directory so the offsets and commits logs are written with fsync) running
  ``RateSource(R, 2) -> filter(value % 10 != 3) -> map(to (timestamp ms, value))`` into a sink whose
  partition writer records ``time.time()`` minus the row's rate timestamp *inside the task*, as the
  row reaches the writer. Rows stamped in the first ``--warmup`` seconds after the later of the two
  tasks started (opened its first writer) are left out: the rate source starts with the query and
  the tasks up to ~1-2 s later, so early rows show catch-up, reported apart (``catch_up``).
  p50/p99/max; rows received vs expected (the rows the nominal schedule stamps in the window that
  pass the filter); ``keeps_up`` as ``bench/_spark_continuous.py`` defines it (>= 99% of the rows,
  median latency of the last second less than 500 ms above the first second's); and the epoch
  commit cost, ``statistics().commit_ms`` (last partition commit at the driver -> commits entry
  written), of the epochs committed in the window. At 1,000, 10,000 and 100,000 rows/s.
* ``ours_microbatch``: the same filter/map with the DStream API (``socketTextStream`` fed by a
  thread of this process sending ``"<scheduled ms> <value>"`` lines at the rate, in 1 ms ticks);
  latency = driver time right after ``rdd.collect()`` returned in the ``foreachRDD`` output
  function minus the line's scheduled send time. Batch intervals 100, 200, 500 ms are tried in
  that order; the smallest stable one (mean processing delay below the interval, mean scheduling
  delay of the window's last quarter of batches less than an interval above its first quarter's,
  >= 95% of the lines received) is reported. At 1,000 and 10,000 rows/s.
* ``spark_continuous``: Apache Spark's continuous mode from pyspark (``bench/_spark_continuous.py``:
  rate source, Python UDF, memory sink) at the same rates; it declines above 1000 rows/s per
  partition, and that reason is printed.

Targets (``targets`` in the output): ours continuous p99 <= 10 ms at 10,000 rows/s (and keeping
up); ours continuous p50 at least 20x below our micro-batch p50 (at each rate where both ran);
epoch commit cost p50 <= 5 ms (p99 shown beside it). Takes 2-3 minutes with the defaults.
Run: ``python bench/bench_continuous.py`` (``--help`` for the options).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path
from typing import Any, Sequence

import anyio

from listeners import EventRecorder
from streaming import StreamingContext
from streaming.continuous import (
    Continuous,
    ContinuousExecution,
    ContinuousSink,
    ContinuousStream,
    PartitionWriter,
    RateSource,
    SparkTaskLauncher,
)

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 2


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages now."""
    return [round(x, 2) for x in os.getloadavg()]


def percentile(ordered: list[float] | array[float], q: float) -> float:
    """The q-quantile of sorted values by the nearest-rank method (as ``bench/_spark_continuous.py``)."""
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
    return ordered[rank - 1]


def summary(values: list[float], digits: int = 3) -> dict[str, float | int | None]:
    """p50, p99, max and count of ``values`` (None when empty)."""
    if not values:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None, "n": 0}
    ordered = sorted(values)
    return {"p50_ms": round(percentile(ordered, 0.5), digits), "p99_ms": round(percentile(ordered, 0.99), digits),
            "max_ms": round(ordered[-1], digits), "n": len(ordered)}


def between(stamps: Sequence[float], latencies: Sequence[float], start: float, end: float) -> list[float]:
    """The latencies of the rows stamped in ``[start, end)``."""
    return [lat for ts, lat in zip(stamps, latencies, strict=True) if start <= ts < end]


def keep(value: int) -> bool:
    """The pipeline's filter, the same on every engine."""
    return value % 10 != 3


def expected_rows(first_ms: float, period_ms: float, start: float, end: float, value: int = 0, step: int = 1) -> int:
    """Rows a paced source stamps in ``[start, end)`` that pass the filter.

    Row ``k`` is due at ``first_ms + k * period_ms`` and carries ``value + k * step``.
    """
    lo = max(0, math.ceil((start - first_ms) / period_ms))
    hi = max(lo, math.ceil((end - first_ms) / period_ms))
    return sum(1 for k in range(lo, hi) if keep(value + k * step))


def caught_up_ms(stamps: Sequence[float], latencies: Sequence[float], since: float, bound_ms: float = 10.0) -> float | None:
    """ms after ``since`` of the first row stamped then or later that arrived within ``bound_ms`` of its time (the backlog was gone)."""
    due = [ts for ts, lat in zip(stamps, latencies, strict=True) if ts >= since and lat < bound_ms]
    return round(min(due) - since, 1) if due else None


# -- ours, continuous --


class LatencyWriter(PartitionWriter):
    """Records, for each row, its rate timestamp and the ms it took to reach this writer (inside the task)."""

    def __init__(self, task_started_ms: float) -> None:
        self.task_started_ms = task_started_ms
        self.stamps: array[float] = array("d")
        self.latencies: array[float] = array("d")

    def write(self, row: Any) -> None:
        now_ms = time.time() * 1000.0
        self.stamps.append(row[0])
        self.latencies.append(now_ms - row[0])

    def commit(self) -> Any:
        return self.task_started_ms, self.stamps, self.latencies


class LatencySink(ContinuousSink):
    """Latencies measured in the tasks, gathered on the driver by the epoch commits.

    A task's copy notes when its first writer opened (the task started) and sends it with every
    commit message; the driver keeps every epoch's arrays.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._task_started_ms: float | None = None
        self.started_ms: dict[int, float] = {}  # driver: partition -> when its task opened its first writer
        self.messages: list[tuple[array[float], array[float]]] = []  # driver: every commit message's arrays
        self.epochs = 0

    def __getstate__(self) -> dict[str, Any]:
        return {}  # a task starts empty

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._reset()

    def open_writer(self, partition: int, epoch: int) -> PartitionWriter:
        if self._task_started_ms is None:
            self._task_started_ms = time.time() * 1000.0
        return LatencyWriter(self._task_started_ms)

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:
        with self._lock:
            for partition, (started, stamps, latencies) in messages.items():
                self.started_ms.setdefault(partition, started)
                self.messages.append((stamps, latencies))  # kept as they came: joining them here would copy on every epoch
            self.epochs += 1

    def samples(self) -> tuple[array[float], array[float]]:
        """Every row's rate timestamp and latency, as two arrays."""
        stamps, latencies = array("d"), array("d")
        with self._lock:
            for s, lat in self.messages:
                stamps.extend(s)
                latencies.extend(lat)
        return stamps, latencies

    def description(self) -> str:
        return "LatencySink"


def to_row(row: Any) -> tuple[float, int]:
    """The pipeline's map: the rate row as (timestamp in ms, value); the rate timestamp is a naive local datetime."""
    return row.timestamp.timestamp() * 1000.0, row.value


def ours_continuous(sc: Any, rate: int, seconds: float, warmup: float, grace: float, interval: str) -> dict[str, Any]:
    """Run the pipeline at ``rate`` rows/s: ``warmup`` + ``seconds`` after the tasks started, then ``grace``, then a graceful stop."""
    sink = LatencySink()
    source = RateSource(rate, PARTITIONS)
    plan = ContinuousStream(source).filter(lambda r: keep(r.value)).map(to_row).to(sink)
    directory = tempfile.mkdtemp(prefix="aiodstream-bench-continuous-")
    out: dict[str, Any] = {"rows_per_second": rate, "load_average": load()}

    async def run() -> None:
        query = ContinuousExecution(plan, Continuous(interval), launcher=SparkTaskLauncher(lambda: sc),
                                    checkpoint_location=directory, name=f"bench-continuous-{rate}")
        async with query:
            began = time.time() * 1000.0
            await query.start()
            out["start_call_ms"] = round(time.time() * 1000.0 - began, 1)
            with anyio.fail_after(60):  # both tasks committed an epoch: their start times are known
                while len(sink.started_ms) < PARTITIONS:
                    await query.wait_for_epoch(query.last_committed_epoch + 1)
                    if query.exception() is not None or not query.is_active:
                        raise RuntimeError(f"the query ended before its tasks ran: {query.exception()!r}")
            out["tasks_started"] = tasks_started = max(sink.started_ms.values())
            assert source.start_ms is not None
            out["tasks_started_after_query_start_ms"] = {p: round(t - source.start_ms) for p, t in sorted(sink.started_ms.items())}
            window = (tasks_started + warmup * 1000.0, tasks_started + (warmup + seconds) * 1000.0)
            await anyio.sleep(max(0.0, window[0] / 1000.0 - time.time()))
            first_epoch_index = len(query.statistics().commit_ms)
            await anyio.sleep(max(0.0, window[1] / 1000.0 - time.time()))
            last_epoch_index = len(query.statistics().commit_ms)
            await anyio.sleep(grace)
            stopping = time.monotonic()
            with anyio.fail_after(60):
                await query.stop(graceful=True)
            out["graceful_stop_ms"] = round((time.monotonic() - stopping) * 1000.0, 1)
            stats = query.statistics()
            out["error"] = None if query.exception() is None else repr(query.exception())
            commit_ms = stats.commit_ms[first_epoch_index:last_epoch_index]
            out["epoch_commit"] = {**summary(commit_ms), "all_epochs": summary(stats.commit_ms)}
            out["epochs_committed"] = stats.epochs_committed
            out["dropped_messages"] = stats.dropped_messages
            out["window"] = window

    try:
        anyio.run(run)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    start, end = out.pop("window")
    tasks_started = out.pop("tasks_started")
    stamps, latencies = sink.samples()
    measured = between(stamps, latencies, start, end)
    before = between(stamps, latencies, -math.inf, start)
    first_s = between(stamps, latencies, start, start + 1000.0)
    last_s = between(stamps, latencies, end - 1000.0, end)
    assert source.start_ms is not None
    period = 1000.0 * PARTITIONS / rate
    expected = sum(expected_rows(source.start_ms, period, start, end, p, PARTITIONS) for p in range(PARTITIONS))
    fraction = len(measured) / expected if expected else 0.0
    p50_first = statistics.median(first_s) if first_s else None
    p50_last = statistics.median(last_s) if last_s else None
    out.update({
        "latency": summary(measured),
        "rows": len(measured),
        "expected_rows": expected,
        "received_fraction": round(fraction, 4),
        "p50_first_s_ms": None if p50_first is None else round(p50_first, 3),
        "p50_last_s_ms": None if p50_last is None else round(p50_last, 3),
        "keeps_up": bool(fraction >= 0.99 and p50_first is not None and p50_last is not None and p50_last - p50_first < 500.0),
        "catch_up": {"rows_before_window": len(before), "max_ms": round(max(before), 1) if before else None,
                     "under_10ms_after_tasks_started_ms": caught_up_ms(stamps, latencies, tasks_started)},
        "sink_epochs": sink.epochs,
    })
    out["load_average_after"] = load()
    return out


# -- ours, micro-batch --


class LineFeeder:
    """A TCP server on a thread of this process: one connection, ``"<scheduled ms> <value>"`` lines at ``rate``/s in 1 ms ticks.

    Each line carries the time it was due (as the rate source stamps its rows), and is sent at
    the first tick at or after that time.
    """

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.started_ms: float | None = None
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="bench-line-feeder", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            break
        else:
            return
        start = time.time() * 1000.0
        self.started_ms = start
        period = 1000.0 / self.rate
        try:
            while not self._stop.is_set():
                due = int((time.time() * 1000.0 - start) / period) + 1
                if due > self.sent:
                    conn.sendall("".join(f"{start + i * period:.3f} {i}\n" for i in range(self.sent, due)).encode())
                    self.sent = due
                time.sleep(0.001)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.server.close()


def ours_microbatch_once(sc: Any, rate: int, interval_ms: int, seconds: float, warmup: float) -> dict[str, Any]:
    """The pipeline with the DStream API at one batch interval: latency at the output function, and whether it was stable."""
    feeder = LineFeeder(rate)
    stamps: list[float] = []
    latencies: list[float] = []

    def output(rdd: Any) -> None:
        rows = rdd.collect()
        now_ms = time.time() * 1000.0
        stamps.extend(ts for ts, _ in rows)
        latencies.extend(now_ms - ts for ts, _ in rows)

    out: dict[str, Any] = {"interval_ms": interval_ms, "load_average": load()}
    ssc = StreamingContext(sc, interval_ms / 1000.0)
    recorder = EventRecorder()
    ssc.addStreamingListener(recorder)
    lines = ssc.socketTextStream("127.0.0.1", feeder.port)
    lines.map(lambda line: line.split(" ")).map(lambda f: (float(f[0]), int(f[1]))).filter(lambda r: keep(r[1])).foreachRDD(output)
    try:
        ssc.start()
        deadline = time.monotonic() + 30
        while feeder.started_ms is None and time.monotonic() < deadline:
            time.sleep(0.01)
        connected = feeder.started_ms
        if connected is None:
            raise RuntimeError("the socket receiver did not connect in 30 s")
        window = (connected + warmup * 1000.0, connected + (warmup + seconds) * 1000.0)
        # The window's last lines go out in the batch after it, collected in its processing time.
        time.sleep(max(0.0, window[1] / 1000.0 - time.time()) + 3 * interval_ms / 1000.0 + 1.0)
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
        feeder.close()
    start, end = window
    measured = between(stamps, latencies, start, end)
    batches = [b for b in recorder.completed_batches if start <= b.batch_time.milliseconds < end]
    processing = [b.processing_delay.milliseconds for b in batches if b.processing_delay is not None]
    scheduling = [b.scheduling_delay.milliseconds for b in batches if b.scheduling_delay is not None]
    quarter = max(1, len(scheduling) // 4)
    growth = statistics.mean(scheduling[-quarter:]) - statistics.mean(scheduling[:quarter]) if scheduling else math.inf
    expected = expected_rows(connected, 1000.0 / rate, start, end)
    fraction = len(measured) / expected if expected else 0.0
    mean_processing = statistics.mean(processing) if processing else math.inf
    out.update({
        "latency": summary(measured),
        "rows": len(measured),
        "expected_rows": expected,
        "received_fraction": round(fraction, 4),
        "batches": len(batches),
        "processing_ms_mean": round(mean_processing, 1) if processing else None,
        "scheduling_ms_first_quarter_mean": round(statistics.mean(scheduling[:quarter]), 1) if scheduling else None,
        "scheduling_ms_last_quarter_mean": round(statistics.mean(scheduling[-quarter:]), 1) if scheduling else None,
        "stable": bool(mean_processing < interval_ms and growth < interval_ms and fraction >= 0.95),
        "load_average_after": load(),
    })
    return out


def ours_microbatch(sc: Any, rate: int, intervals: list[int], seconds: float, warmup: float) -> dict[str, Any]:
    """Try the intervals from the smallest up; the first stable one is the result."""
    tried = []
    for interval_ms in sorted(intervals):
        run = ours_microbatch_once(sc, rate, interval_ms, seconds, warmup)
        print(f"  micro-batch {rate} rows/s @ {interval_ms} ms: p50 {run['latency']['p50_ms']} ms, stable {run['stable']}",
              file=sys.stderr, flush=True)
        tried.append(run)
        if run["stable"]:
            return {"rows_per_second": rate, "smallest_stable_interval_ms": interval_ms, "latency": run["latency"], "tried": tried}
    return {"rows_per_second": rate, "smallest_stable_interval_ms": None, "latency": None, "tried": tried}


# -- Spark's continuous mode --


def spark_continuous(spark: Any, rate: int, seconds: float) -> dict[str, Any]:
    """Apache Spark's continuous mode at ``rate``, by ``bench/_spark_continuous.py``."""
    from bench._spark_continuous import measure_spark_continuous

    before = load()
    result = measure_spark_continuous(spark, rate, seconds, num_partitions=PARTITIONS)
    shown = result if result is None or "error" in result else {k: result[k] for k in ("p50_ms", "p99_ms", "max_ms", "keeps_up")}
    print(f"  Spark continuous {rate} rows/s: {shown}", file=sys.stderr, flush=True)
    return {"rows_per_second": rate, "load_average": before, "result": result, "load_average_after": load()}


# -- main --


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` to 4 significant digits (None when either is missing)."""
    return None if numerator is None or not denominator else float(f"{numerator / denominator:.4g}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds after the tasks (the receiver) started that are left out")
    parser.add_argument("--grace", type=float, default=2.0,
                        help="seconds a continuous run goes on after its window (its last epochs commit)")
    parser.add_argument("--rates", type=int, nargs="*", default=[1_000, 10_000, 100_000], help="rows/s of the continuous runs")
    parser.add_argument("--microbatch-rates", type=int, nargs="*", default=[1_000, 10_000], help="rows/s of the micro-batch runs")
    parser.add_argument("--intervals-ms", type=int, nargs="*", default=[100, 200, 500], help="micro-batch intervals tried, smallest first")
    parser.add_argument("--epoch-interval", default="1 second", help="the continuous trigger's interval")
    parser.add_argument("--only", nargs="*", default=["continuous", "microbatch", "spark"])
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    conf = (SparkConf().setMaster(f"local[{PARTITIONS}]").setAppName("bench_continuous").set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false").set("spark.driver.host", "127.0.0.1"))
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    began = time.monotonic()
    out: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load_average_at_start": load(),
                           "seconds": args.seconds, "warmup_s": args.warmup, "epoch_interval": args.epoch_interval}
    try:
        sc.parallelize(range(100), PARTITIONS).map(lambda x: x + 1).collect()  # Python workers up
        if "continuous" in args.only:
            out["ours_continuous"] = {}
            for rate in args.rates:
                run = ours_continuous(sc, rate, args.seconds, args.warmup, args.grace, args.epoch_interval)
                print(f"  continuous {rate} rows/s: {run['latency']}, keeps up {run['keeps_up']}", file=sys.stderr, flush=True)
                out["ours_continuous"][str(rate)] = run
        if "microbatch" in args.only:
            # The first context's start-up (its batches start behind while workers warm up); discarded.
            ours_microbatch_once(sc, 1_000, min(args.intervals_ms), 2.0, 1.0)
            out["ours_microbatch"] = {str(rate): ours_microbatch(sc, rate, args.intervals_ms, args.seconds, args.warmup)
                                      for rate in args.microbatch_rates}
        if "spark" in args.only:
            spark = SparkSession.builder.getOrCreate()
            out["spark_version"] = spark.version
            out["spark_continuous"] = {str(rate): spark_continuous(spark, rate, args.seconds) for rate in args.rates}
    finally:
        sc.stop()
    out["ratios"] = ratios(out)
    out["targets"] = targets(out)
    out["wall_s"] = round(time.monotonic() - began, 1)
    out["load_average_at_end"] = load()
    print(json.dumps(out, indent=2))
    return out


def _p(run: dict[str, Any] | None, key: str) -> float | None:
    latency = None if run is None else run.get("latency")
    return None if not latency else latency.get(key)


def ratios(out: dict[str, Any]) -> dict[str, Any]:
    """Ours continuous over our micro-batch (p50) at each shared rate; ours over Spark's continuous (p50, p99) at each rate both ran."""
    result: dict[str, Any] = {}
    continuous = out.get("ours_continuous", {})
    for rate, micro in out.get("ours_microbatch", {}).items():
        if rate in continuous:
            result[f"ours_continuous_p50_over_ours_microbatch_p50_at_{rate}"] = ratio(_p(continuous[rate], "p50_ms"),
                                                                                      _p(micro, "p50_ms"))
    for rate, spark in out.get("spark_continuous", {}).items():
        theirs = spark["result"] or {}
        if rate in continuous and "p50_ms" in theirs:
            result[f"ours_over_spark_continuous_p50_at_{rate}"] = ratio(_p(continuous[rate], "p50_ms"), theirs["p50_ms"])
            result[f"ours_over_spark_continuous_p99_at_{rate}"] = ratio(_p(continuous[rate], "p99_ms"), theirs["p99_ms"])
    return result


def targets(out: dict[str, Any]) -> dict[str, Any]:
    """Whether each target holds (None: not measured)."""
    continuous = out.get("ours_continuous", {})
    at_10k = continuous.get("10000")
    p99 = _p(at_10k, "p99_ms")
    result: dict[str, Any] = {
        "continuous_p99_at_10000_rows_per_s_le_10ms": {"p99_ms": p99, "keeps_up": None if at_10k is None else at_10k["keeps_up"],
                                                       "holds": None if p99 is None else bool(p99 <= 10.0 and at_10k["keeps_up"])},
    }
    factors = {}
    for key, value in out.get("ratios", {}).items():
        if key.startswith("ours_continuous_p50_over_ours_microbatch_p50_at_") and value:
            factors[key.rsplit("_", 1)[1]] = round(1 / value, 1)
    result["continuous_p50_at_least_20x_below_microbatch"] = {
        "factor_by_rate": factors, "holds": None if not factors else all(f >= 20 for f in factors.values())}
    commits = {rate: run["epoch_commit"] for rate, run in continuous.items()}
    p50s = {rate: c["p50_ms"] for rate, c in commits.items()}
    result["epoch_commit_p50_le_5ms"] = {
        "p50_ms_by_rate": p50s, "p99_ms_by_rate": {rate: c["p99_ms"] for rate, c in commits.items()},
        "holds": None if not p50s else all(v is not None and v <= 5.0 for v in p50s.values())}
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
