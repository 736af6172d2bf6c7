"""Kafka ingest: the records per second a job sustains from Kafka's direct stream, beside the socket receiver's, in one run.

All on one local[2] SparkContext with 1 s batches; one JSON object is printed (progress goes to
stderr), with the machine's load average beside each figure.

**Sustained**, the same test on both sides: at an offered rate R, after ``--warmup`` batches,
``--batches`` batches in a row each took in R records (at least 95% of R on average), their mean
processing time stayed below the 1 s interval, the last one's scheduling delay was below the
interval (no queue of batches formed) and none failed. The highest sustained rate is searched by
doubling from ``--rate-start`` until a rate fails, then by ``--bisect`` bisection steps; the
machine is shared, so a rate fails only when ``1 + --retries`` tries in a row fail. The two
``count()`` searches take turns, one rate each, so that both sides see the same drift of load.

**Offered rate**, the same lines on both sides (1,000 distinct lines of 8 words from 1,000):

* socket: ``ssc.socketTextStream`` (the receiver on the driver, ``maxBufferedRecords`` raised so
  the receiver's buffer never throttles), fed by a writer process sending R lines/s over TCP in
  20 ms ticks; its own rate and CPU seconds per second are printed with each step.
* Kafka: ``KafkaUtils.createDirectStream`` from offset 0 of a ``--partitions`` topic, with
  ``spark.streaming.kafka.maxRatePerPartition`` = R / partitions: a writer process holds the
  broker (``MockKafkaCluster``, librdkafka's mock cluster) and pre-fills every record the step
  reads before the stream starts, so each batch drains exactly R records of a
  backlog and no producer runs during the measured window. The producer's own rate is printed.
  The mock keeps about 5 MB per partition and answers a fetch with one producer batch, so the
  producer writes large zstd-compressed batches (the repeated lines compress about 12 to 1;
  librdkafka decompresses in C, off the GIL): see ``docs/benchmarks.md``. A rate whose backlog
  the mock cannot hold (about 1.4 million records a partition) is reported as not measured and
  counts as a failure in the search (``first_not_measurable_records_per_s``).

Measures:

* ``reader_floor``: ``RangeReader`` alone, one thread reading one partition's range of
  ``--floor-records`` records (median of 5), and the same ranges counted by a plain Spark job
  (one task per partition, no streaming engine): what this machine allows.
* ``count``: the highest sustained rate of ``count()`` on each side; ``ratio`` Kafka / socket.
  Target: Kafka at least 250,000 records/s.
* ``word_count``: the same search for a word count (flatMap, map, reduceByKey, collect) on
  Kafka; then, at its highest sustained rate, one run with two outputs over the same batches
  (``count()``, then the word count) splits each batch's time into reading and the word count's
  own work. The processing, not the ingest, is the limit when the word count's rate is well
  below ``count()``'s and reading is a small share of its batch time.

Takes 5-10 minutes. Run: ``python -m bench.bench_kafka`` (``--help`` for the options; the ``-m`` form
is needed: the writers live in ``bench/_kafka_writers.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from operator import add
from typing import Any, Callable, Generator, Iterator

from bench._kafka_writers import ROOT, TOPIC, WORDS_PER_LINE, Writer, WriterError, make_lines
from bench.bench_vs_pyspark import load, ratio, run_program

INTERVAL_MS = 1000
MAX_RATE_KEY = "spark.streaming.kafka.maxRatePerPartition"


# -- the floor: RangeReader alone, and a plain Spark job over the same ranges --


def read_ranges(bootstrap: str, ranges: list[tuple[str, int, int, int]]) -> Iterator[int]:
    """A Spark task: the number of records of its ranges, read with ``RangeReader`` (as a direct stream's task)."""
    from streaming.kafka import OffsetRange
    from streaming.kafka._reader import RangeReader, executor_config

    with RangeReader(executor_config({"bootstrap.servers": bootstrap}, group_id="spark-executor-bench")) as reader:
        n = 0
        for topic, partition, start, end in ranges:
            for _ in reader.read(OffsetRange(topic, partition, start, end)):
                n += 1
        yield n


def reader_floor(sc: Any, records: int, partitions: int, repeats: int = 5) -> dict[str, Any]:
    """``RangeReader`` in this thread over one partition's range, and a Spark job counting every partition's range."""
    from streaming.kafka import OffsetRange
    from streaming.kafka._reader import RangeReader, executor_config

    writer = Writer("--kafka", str(records * partitions), "--partitions", str(partitions))
    try:
        bootstrap = writer.info["bootstrap"]
        one: list[float] = []
        cpu: list[float] = []
        with RangeReader(executor_config({"bootstrap.servers": bootstrap}, group_id="bench-floor")) as reader:
            for _ in range(repeats):
                wall, began = time.perf_counter(), time.process_time()
                n = sum(1 for _ in reader.read(OffsetRange(TOPIC, 0, 0, records)))
                wall = time.perf_counter() - wall
                if n != records:
                    raise RuntimeError(f"read {n} records of {records}")
                one.append(n / wall)
                cpu.append((time.process_time() - began) / wall)
        ranges = [[(TOPIC, p, 0, records)] for p in range(partitions)]
        job: list[float] = []
        for _ in range(repeats):
            began = time.perf_counter()
            total = sc.parallelize(ranges, partitions).mapPartitions(lambda it: read_ranges(bootstrap, [r for rs in it for r in rs])).sum()
            job.append(time.perf_counter() - began)
            if total != records * partitions:
                raise RuntimeError(f"the Spark job counted {total} records of {records * partitions}")
    finally:
        writer.stop()
    job_s = statistics.median(job)
    return {"one_thread_records_per_s": round(statistics.median(one)), "one_thread_runs": [round(x) for x in one],
            "one_thread_cpu_per_wall": round(statistics.median(cpu), 2), "records_per_range": records,
            "spark_job_ms_median": round(job_s * 1000, 1), "spark_job_records": records * partitions,
            "spark_job_records_per_s": round(records * partitions / job_s), "partitions": partitions,
            "producer_rate": writer.info["producer_rate"], "load_average": load()}


def timed_count(records: Iterator[Any]) -> Iterator[tuple[int, float, float]]:
    """A Spark task: count its records (reading them: the Kafka RDD's task runs in this same worker), timing it inside the worker."""
    wall, cpu = time.perf_counter(), time.process_time()
    n = sum(1 for _ in records)
    yield n, time.perf_counter() - wall, time.process_time() - cpu


def profile_batch(sc: Any, rate: int, partitions: int, repeats: int = 5) -> dict[str, Any]:
    """Where one batch's time goes at ``rate``: the driver's planning, the job, and inside its tasks, reading and counting.

    The batch is a Kafka RDD over one batch's ranges (``KafkaUtils.createRDD``, the direct
    stream's own RDD and task code), counted ``repeats`` times over fresh ranges, without a
    streaming engine. Per task: wall and CPU seconds inside the worker (the consumer's own
    threads, which fetch and decompress, are in the worker's CPU too).
    """
    from streaming.kafka import KafkaUtils, OffsetRange

    per_partition = rate // partitions
    writer = Writer("--kafka", str(per_partition * partitions * repeats), "--partitions", str(partitions))
    try:
        params = {"metadata.broker.list": writer.info["bootstrap"]}
        runs = []
        for i in range(repeats):
            ranges = [OffsetRange(TOPIC, p, i * per_partition, (i + 1) * per_partition) for p in range(partitions)]
            began = time.perf_counter()
            rdd = KafkaUtils.createRDD(sc, params, ranges)
            planned = time.perf_counter()
            tasks = rdd.mapPartitions(timed_count).collect()
            ended = time.perf_counter()
            if sum(n for n, _, _ in tasks) != per_partition * partitions:
                raise RuntimeError(f"counted {sum(n for n, _, _ in tasks)} of {per_partition * partitions}")
            runs.append({"plan_ms": (planned - began) * 1000, "job_ms": (ended - planned) * 1000,
                         "task_wall_ms": [w * 1000 for _, w, _ in tasks], "task_cpu_ms": [c * 1000 for _, _, c in tasks]})
    finally:
        writer.stop()
    warm = runs[1:] or runs  # the first run creates each worker's consumer

    def median(key: str) -> float:
        return round(statistics.median(statistics.mean(r[key]) if isinstance(r[key], list) else r[key] for r in warm), 1)

    task_wall = median("task_wall_ms")
    return {"rate": per_partition * partitions, "partitions": partitions, "records_per_task": per_partition,
            "driver_plan_ms_median": median("plan_ms"), "plan_ms": [round(r["plan_ms"], 1) for r in runs],
            "job_ms_median": median("job_ms"), "job_ms": [round(r["job_ms"], 1) for r in runs],
            "task_wall_ms_median": task_wall, "task_cpu_ms_median": median("task_cpu_ms"),
            "task_records_per_s": round(per_partition / task_wall * 1000) if task_wall else None,
            "job_minus_tasks_per_core_ms": round(median("job_ms") - task_wall * partitions / 2, 1),
            "first_run_creates_consumers": True, "load_average": load()}


# -- the programs: each records what its batches took in --


def count_program(seen: list[int]) -> Callable[[Any], None]:
    """``count()`` of every batch's records (an output whose job reads them all and returns one number)."""
    def build(stream: Any) -> None:
        stream.foreachRDD(lambda rdd: seen.append(rdd.count()) and None)
    return build


def word_count_program(seen: list[int]) -> Callable[[Any], None]:
    """The word count of every batch's lines, collected; ``seen`` gets the lines it covered (words / 8)."""
    def build(lines: Any) -> None:
        counts = lines.flatMap(lambda line: line.split(" ")).map(lambda w: (w, 1)).reduceByKey(add)
        counts.foreachRDD(lambda rdd: seen.append(sum(c for _, c in rdd.collect()) // WORDS_PER_LINE) and None)
    return build


def split_program(seen: list[int]) -> Callable[[Any], None]:
    """Two outputs over the same batches, one after the other: ``count()`` (the reading alone), then the word count."""
    def build(lines: Any) -> None:
        count_program(seen)(lines)
        word_count_program([])(lines)
    return build


def kafka_values(stream: Any) -> Any:
    """The lines of a direct stream's ``(key, value)`` records."""
    return stream.map(lambda kv: kv[1])


# -- running one step --


def assess(batches: list[dict[str, Any]], seen: list[int], rate: int, warmup: int) -> dict[str, Any]:
    """Whether ``rate`` was sustained (the module's definition) over the batches after ``warmup``."""
    measured = batches[warmup:]
    taken = seen[warmup:len(batches)]
    processing = [b["processing"] for b in measured]
    mean_taken = statistics.mean(taken) if taken else 0
    mean_processing = statistics.mean(processing)
    ok = (len(taken) == len(measured) and mean_taken >= 0.95 * rate and mean_processing < INTERVAL_MS
          and measured[-1]["scheduling"] < INTERVAL_MS and not any(b["failed"] for b in measured))
    ops = [statistics.mean(op) for op in zip(*(b["ops_ms"] for b in measured), strict=True)]
    return {"rate": rate, "records_per_batch_mean": round(mean_taken), "processing_ms": processing,
            "output_ms_mean": [round(op, 1) for op in ops],
            "processing_ms_mean": round(mean_processing, 1), "scheduling_ms": [b["scheduling"] for b in measured],
            "failed_batches": sum(1 for b in measured if b["failed"]),
            "first_failure": next((b["failure"] for b in measured if b.get("failure")), None), "sustained": ok}


def socket_step(sc: Any, program: Callable[[list[int]], Callable[[Any], None]], rate: int, args: argparse.Namespace) -> dict[str, Any]:
    """One rate on the socket receiver."""
    writer = Writer("--socket", str(rate))
    seen: list[int] = []
    wanted = args.warmup + args.batches
    try:
        batches = run_program("ours", sc, INTERVAL_MS / 1000, wanted, lambda ssc: program(seen)(ssc.socketTextStream(
            "127.0.0.1", writer.info["port"], maxBufferedRecords=max(2 * rate, 100_000))), timeout=args.timeout)
    finally:
        stats = writer.stop()
    step = assess(batches, seen, rate, args.warmup)
    step.update({"writer": stats, "load_average": load()})
    return step


def kafka_step(sc: Any, program: Callable[[list[int]], Callable[[Any], None]], rate: int, args: argparse.Namespace) -> dict[str, Any]:
    """One rate on the direct stream: a backlog from offset 0, taken at ``maxRatePerPartition`` = rate / partitions."""
    from streaming.kafka import KafkaUtils, TopicAndPartition

    partitions = args.partitions
    per_partition = rate // partitions
    rate = per_partition * partitions
    wanted = args.warmup + args.batches
    try:  # exactly the records the measured batches take: later batches are not waited for
        writer = Writer("--kafka", str(rate * wanted), "--partitions", str(partitions))
    except WriterError as error:
        return {"rate": rate, "sustained": False, "not_measured": str(error), "processing_ms_mean": None,
                "records_per_batch_mean": 0, "load_average": load()}
    previous = sc._conf.get(MAX_RATE_KEY, None)
    sc._conf.set(MAX_RATE_KEY, str(per_partition))  # read when the stream is created (the context reads sc's conf)
    seen: list[int] = []

    def build(ssc: Any) -> None:
        stream = KafkaUtils.createDirectStream(ssc, [TOPIC], {"metadata.broker.list": writer.info["bootstrap"]},
                                               fromOffsets={TopicAndPartition(TOPIC, p): 0 for p in range(partitions)})
        program(seen)(kafka_values(stream) if program is not count_program else stream)

    try:
        batches = run_program("ours", sc, INTERVAL_MS / 1000, wanted, build, timeout=args.timeout)
    finally:
        sc._conf.set(MAX_RATE_KEY, previous or "0")  # 0: no cap
        writer.stop()
    step = assess(batches, seen, rate, args.warmup)
    step.update({"writer": {key: writer.info[key] for key in ("records", "prefill_s", "producer_rate", "producer_cpu_s_per_s")},
                 "load_average": load()})
    return step


Step = Callable[[int], dict[str, Any]]


class RateSearch:
    """One side's search for its highest sustained rate, one attempt at a time (so that two sides can alternate).

    Doubling from ``start`` until a rate fails (or passes ``top``), then ``bisect`` bisection
    steps (in thousands) between the last success and the first failure. The machine is
    shared, so a failed rate is tried ``retries`` more times: it fails only if every try does.
    """

    def __init__(self, name: str, step: Step, start: int, top: int, bisect: int, retries: int = 1) -> None:
        """Plan the search; nothing runs until :meth:`advance`."""
        self.name, self._step, self._retries = name, step, retries
        self.steps: list[dict[str, Any]] = []
        self.first_failed: int | None = None
        self._plan = self._rates(start, top, bisect)
        self._next: int | None = next(self._plan, None)

    @property
    def done(self) -> bool:
        """Whether the search has no rate left to try."""
        return self._next is None

    def _rates(self, start: int, top: int, bisect: int) -> Generator[int, bool, None]:
        good, bad = 0, None
        rate = start
        while rate <= top:
            if (yield rate):
                good = rate
                rate *= 2
            else:
                bad = rate
                break
        for _ in range(bisect if bad is not None else 0):
            middle = (good + bad) // 2 // 1000 * 1000 if good else bad // 2
            if middle <= good or middle >= bad:
                break
            if (yield middle):
                good = middle
            else:
                bad = middle
        self.first_failed = bad

    def _attempt(self, rate: int) -> bool:
        for _ in range(1 + self._retries):
            result = self._step(rate)
            self.steps.append(result)
            print(f"  {self.name} {rate}/s: sustained={result['sustained']} processing_ms_mean={result['processing_ms_mean']} "
                  f"records_per_batch_mean={result['records_per_batch_mean']} load={result['load_average']}",
                  file=sys.stderr, flush=True)
            if result["sustained"] or "not_measured" in result:
                return bool(result["sustained"])
        return False

    def advance(self) -> None:
        """Try the next rate (with its retries)."""
        if self._next is None:
            return
        sustained = self._attempt(self._next)
        try:
            self._next = self._plan.send(sustained)
        except StopIteration:
            self._next = None

    def summary(self) -> dict[str, Any]:
        """The highest sustained rate, the first failed and the first not measurable one, every step, the load now."""
        best = max((s for s in self.steps if s["sustained"]), key=lambda s: s["rate"], default=None)
        unmeasured = min((s["rate"] for s in self.steps if "not_measured" in s), default=None)
        return {"max_sustained_records_per_s": best["rate"] if best else 0,
                "first_failed_records_per_s": self.first_failed, "first_not_measurable_records_per_s": unmeasured,
                "at_max": best, "steps": self.steps, "load_average": load()}


def search(name: str, step: Step, start: int, top: int, bisect: int, retries: int = 1) -> dict[str, Any]:
    """One side's :class:`RateSearch` run to its end; its summary."""
    one = RateSearch(name, step, start, top, bisect, retries)
    while not one.done:
        one.advance()
    return one.summary()


def alternate(*searches: RateSearch) -> None:
    """Run the searches to their ends taking turns, one rate each (the machine's load drifts: each side sees the same)."""
    while not all(s.done for s in searches):
        for one in searches:
            one.advance()


def split_at(sc: Any, rate: int, args: argparse.Namespace) -> dict[str, Any]:
    """At ``rate``: each batch's time split into reading (its ``count()``) and the word count over the same records."""
    step = kafka_step(sc, split_program, rate, args)
    reading, word_count = step["output_ms_mean"]
    return {"rate": step["rate"], "reading_ms_mean": reading, "word_count_ms_mean": word_count,
            "word_count_own_work_ms_mean": round(word_count - reading, 1),
            "reading_share_of_word_count": ratio(reading, word_count), "step": step, "load_average": load()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the Kafka topic (tasks per batch)")
    parser.add_argument("--warmup", type=int, default=2, help="batches left out of each step")
    parser.add_argument("--batches", type=int, default=6, help="measured batches per step")
    parser.add_argument("--rate-start", type=int, default=50_000)
    parser.add_argument("--rate-top", type=int, default=3_200_000)
    parser.add_argument("--socket-rate-top", type=int, default=1_600_000,
                        help="the socket search's top: a receiver's batch is one task holding its records, and at "
                             "3,200,000 lines the driver's 1 GB JVM heap ran out serialising it")
    parser.add_argument("--bisect", type=int, default=2, help="bisection steps after the doubling")
    parser.add_argument("--retries", type=int, default=1, help="further tries of a failed rate before it counts as failed")
    parser.add_argument("--profile-rate", type=int, default=250_000, help="records per batch of the profile")
    parser.add_argument("--floor-records", type=int, default=100_000, help="records per partition of the reader floor")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a step may take")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--only", nargs="*", default=["floor", "profile", "socket_count", "kafka_count", "word_count"])
    args = parser.parse_args()
    # Spark's Python workers run this interpreter with this checkout first on the path (they read the Kafka ranges).
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    conf = (SparkConf().setMaster(args.master).setAppName("bench_kafka").set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false").set("spark.default.parallelism", "2"))
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    sc.parallelize(make_lines(0, 1000), 2).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add).collect()  # warm up workers

    out: dict[str, Any] = {"load_average_before": load(), "cpus": os.cpu_count(), "master": args.master,
                           "interval_ms": INTERVAL_MS, "partitions": args.partitions,
                           "sustained": "records per batch >= 95% of the offered rate, mean processing < interval, "
                                        "last scheduling delay < interval, no failed batch, over the measured batches"}
    began = time.monotonic()
    if "floor" in args.only:
        out["reader_floor"] = reader_floor(sc, args.floor_records, args.partitions)
        print(f"reader_floor: {out['reader_floor']}", file=sys.stderr, flush=True)
    if "profile" in args.only:
        out["profile"] = profile_batch(sc, args.profile_rate, args.partitions)
        print(f"profile: {out['profile']}", file=sys.stderr, flush=True)
    count: dict[str, Any] = {}
    sides = []
    if "socket_count" in args.only:
        sides.append(("socket_receiver", RateSearch("socket count", lambda r: socket_step(sc, count_program, r, args),
                                                    args.rate_start, args.socket_rate_top, args.bisect, args.retries)))
    if "kafka_count" in args.only:
        sides.append(("kafka_direct", RateSearch("kafka count", lambda r: kafka_step(sc, count_program, r, args),
                                                 args.rate_start, args.rate_top, args.bisect, args.retries)))
    alternate(*(one for _, one in sides))
    count = {side: one.summary() for side, one in sides}
    if count:
        kafka_top = count.get("kafka_direct", {}).get("max_sustained_records_per_s", 0)
        socket_top = count.get("socket_receiver", {}).get("max_sustained_records_per_s", 0)
        out["count"] = {**count, "ratio_kafka_to_socket": ratio(kafka_top, socket_top),
                        "target_kafka_records_per_s": 250_000, "met": kafka_top >= 250_000, "load_average": load()}
    if "word_count" in args.only:
        wc = search("kafka word count", lambda r: kafka_step(sc, word_count_program, r, args),
                    args.rate_start, args.rate_top, args.bisect, args.retries)
        top = wc["max_sustained_records_per_s"]
        summary: dict[str, Any] = {"kafka_direct": wc, "split_at_max": split_at(sc, top, args) if top else None}
        count_top = out.get("count", {}).get("kafka_direct", {}).get("max_sustained_records_per_s")
        summary["ratio_count_to_word_count"] = ratio(count_top, top) if count_top else None
        summary["load_average"] = load()
        out["word_count"] = summary
    out["load_average_after"] = load()
    out["seconds"] = round(time.monotonic() - began, 1)
    sc.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
