"""End-to-end latency of continuous mode Kafka -> Kafka, both hops, beside a raw producer -> consumer hop on the same broker.

Four processes, so no two parts share a GIL: librdkafka's mock cluster (with a retention that
keeps the newest ``--keep`` records of each partition, see :func:`broker`), a paced producer,
the continuous query (``KafkaContinuousSource -> KafkaContinuousSink``, ``Continuous("1 second")``,
a checkpoint directory so the offsets and commits logs are written with fsync, tasks on threads
of that process: ``ThreadTaskLauncher``),
and this process, which consumes the output topic. Each record's value is the wall-clock time
(``time.time()``) at which the producer handed it to its client; latency is the time a consumer
of the output topic has it minus that stamp: produce, broker, the query's read, its produce,
broker, the consumer's fetch. Records stamped in the first ``--warmup`` seconds are left out.

``raw_hop`` is the same producer and consumer with nothing in between (one hop through the
broker): what the machine allows one hop, so two hops cost at least about twice that.

Every consumer (the query's tasks and this process) runs with ``fetch.wait.max.ms=1``
(``--fetch-wait-ms``): the mock broker holds a fetch for the whole wait even when records arrive
meanwhile (measured: p50 of one hop 1.5 ms at 1 ms, 8 ms at 10 ms, 58 ms at 100 ms), where a real
broker answers as soon as it has a record, so on a real cluster the wait adds no latency.
The target (issue 27): p99 <= 10 ms at 10,000 records/s. Load averages are printed beside each
run. Run: ``python -m bench.bench_kafka_continuous`` (``--help`` for the options).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 2
CONSUMER: dict[str, Any] = {}  # the fetch wait is set by --fetch-wait-ms


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages now."""
    return [round(x, 2) for x in os.getloadavg()]


def summary(values: list[float]) -> dict[str, Any]:
    """p50, p99, max (nearest rank) and count of ``values``, in ms."""
    if not values:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None, "n": 0}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return round(ordered[max(1, min(len(ordered), math.ceil(q * len(ordered)))) - 1], 3)

    return {"p50_ms": rank(0.5), "p99_ms": rank(0.99), "max_ms": round(ordered[-1], 3), "n": len(ordered)}


def spawn(*args: str, stdin: bool = False) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.PIPE if stdin else None)


# -- the child processes --


def produce(bootstrap: str, topic: str, rate: int, seconds: float) -> None:
    """Paced producer: ``rate`` records/s over the partitions in 1 ms ticks, each value its send time."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **{"linger.ms": 0}})
    start = time.monotonic()
    sent = 0
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        while sent < due:
            producer.produce(topic, str(time.time()).encode(), partition=sent % PARTITIONS)
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    producer.flush()
    print(sent, flush=True)


def engine(bootstrap: str, in_topic: str, out_topic: str, checkpoint: str, fetch_wait_ms: str, host_gc_freeze: str) -> None:
    """The query: the input topic's records, unchanged, to the output topic, until a line on stdin.

    With ``host_gc_freeze`` "1" the process (the host, under ``ThreadTaskLauncher``) freezes its
    heap once the query runs, as a service may do after its start-up: the collector's full passes
    then skip what lived at start (the host's choice; the library does not do it).
    """
    import gc

    import anyio
    import anyio.to_thread

    from streaming.continuous import Continuous, ContinuousExecution, ContinuousStream, ThreadTaskLauncher
    from streaming.kafka import KafkaContinuousSink, KafkaContinuousSource

    params = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": int(fetch_wait_ms)}

    async def run() -> None:
        plan = ContinuousStream(KafkaContinuousSource(in_topic, params)).to(KafkaContinuousSink(params, topic=out_topic))
        async with ContinuousExecution(plan, Continuous("1 second"), launcher=ThreadTaskLauncher(),
                                       checkpoint_location=checkpoint) as query:
            await query.start()
            if host_gc_freeze == "1":
                gc.collect()
                gc.freeze()
            print("started", flush=True)
            cpu, wall = time.process_time(), time.monotonic()
            await anyio.to_thread.run_sync(sys.stdin.readline)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            await query.stop(graceful=True)
            stats = query.statistics()
            # The query process's CPU (every thread: tasks, librdkafka's, the driver) per second of the run.
            print(json.dumps({"epochs": stats.epochs_committed, "rows": stats.input_rows,
                              "cpu_seconds_per_second": round(cpu / wall, 3)}), flush=True)

    anyio.run(run)


def broker(topics: list[str], keep: int) -> None:
    """The mock cluster with ``topics``, trimming each partition to its newest ``keep`` records every 50 ms, until stdin closes.

    The trim is retention, and it matters here: the mock broker finds a fetch's records by
    walking the partition's message sets from the first (librdkafka's ``FIXME: Maintain an
    index``), so a fetch costs more the longer the log, and a log grown by a run at 10,000
    records/s slows every hop after it.
    """
    import threading

    from confluent_kafka import Consumer, TopicPartition

    from streaming.kafka.testing import MockKafkaCluster

    with MockKafkaCluster() as cluster:
        for topic in topics:
            cluster.create_topic(topic, PARTITIONS)
        print(cluster.bootstrap_servers, flush=True)
        done = threading.Event()
        watcher = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "bench-retention"})

        def trim() -> None:
            while not done.wait(0.05):
                for topic in topics:
                    for p in range(PARTITIONS):
                        low, high = watcher.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                        if high - low > 2 * keep:
                            cluster.delete_records(topic, p, high - keep)

        thread = threading.Thread(target=trim, daemon=True)
        thread.start()
        sys.stdin.read()
        done.set()
        thread.join()
        watcher.close()


# -- this process --


def consume(bootstrap: str, consume_from: str, start_producer: Any, warmup: float) -> list[float]:
    """Latencies (ms) of the records on ``consume_from`` stamped ``warmup`` s after the producer started, until all arrived.

    The consumer is positioned at each partition's end before the producer starts, so it sees
    every record the producer sends (and only those).
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, **CONSUMER})
    ends = [consumer.get_watermark_offsets(TopicPartition(consume_from, p), timeout=30)[1] for p in range(PARTITIONS)]
    consumer.assign([TopicPartition(consume_from, p, ends[p]) for p in range(PARTITIONS)])
    began = time.time()
    producer = start_producer()
    latencies: list[float] = []
    seen = 0
    total: int | None = None
    cut = began + warmup
    give_up = math.inf
    while (total is None or seen < total) and time.monotonic() < give_up:
        first = consumer.poll(0.1)
        if first is None:
            if total is None and producer.poll() is not None:
                total = int(producer.stdout.read().split()[-1])
                give_up = time.monotonic() + 60  # a hang guard: records lost would never arrive
            continue
        batch = [first, *consumer.consume(1000, 0)]
        now = time.time()
        for message in batch:
            if message.error() is not None:
                continue
            seen += 1
            stamp = float(message.value())
            if stamp >= cut:
                latencies.append((now - stamp) * 1000.0)
    consumer.close()
    if total is None or seen < total:
        raise RuntimeError(f"{seen} of {total} records arrived on {consume_from}")
    return latencies


def hop(bootstrap: str, produce_to: str, consume_from: str, rate: int, seconds: float, warmup: float) -> dict[str, Any]:
    """One paced run: records produced to ``produce_to``, their latency read off ``consume_from``."""
    before = load()

    def start_producer() -> subprocess.Popen[str]:
        return spawn(__file__, "--produce", bootstrap, produce_to, str(rate), str(seconds))

    latencies = consume(bootstrap, consume_from, start_producer, warmup)
    return {"records_per_second": rate, "load_average": before, "latency": summary(latencies), "load_average_after": load()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=int, nargs="*", default=[10_000, 1_000], help="records/s produced, one run each")
    parser.add_argument("--seconds", type=float, default=13.0, help="seconds of producing per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="first seconds of each run left out")
    parser.add_argument("--fetch-wait-ms", type=int, default=1,
                        help="fetch.wait.max.ms of every consumer (the query's tasks' default): how long the broker holds an empty fetch")
    parser.add_argument("--only", nargs="*", default=["raw", "continuous"])
    parser.add_argument("--keep", type=int, default=5_000, help="records the broker keeps per partition (its retention)")
    parser.add_argument("--host-gc-freeze", action="store_true",
                        help="the query's process calls gc.collect() then gc.freeze() once the query runs (a host's tuning)")
    args = parser.parse_args(argv)
    CONSUMER["fetch.wait.max.ms"] = args.fetch_wait_ms
    out: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load_average_at_start": load(),
                           "seconds": args.seconds, "warmup_s": args.warmup, "epoch_interval": "1 second",
                           "launcher": "ThreadTaskLauncher", "partitions": PARTITIONS, "fetch_wait_ms": args.fetch_wait_ms,
                           "retention_records_per_partition": args.keep, "host_gc_freeze": args.host_gc_freeze,
                           "raw_hop": {}, "kafka_to_kafka": {}}
    topics = [f"{kind}-{i}" for i in range(len(args.rates)) for kind in ("raw", "in", "out")]  # fresh topics for each run
    cluster = spawn(__file__, "--broker", str(args.keep), *topics, stdin=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-kafka-continuous-"))
    query: subprocess.Popen[str] | None = None
    try:
        assert cluster.stdout is not None
        bootstrap = cluster.stdout.readline().strip()
        for i, rate in enumerate(args.rates):  # each rate: the raw hop, then the query, back to back at the same load
            if "raw" in args.only:
                out["raw_hop"][str(rate)] = run = hop(bootstrap, f"raw-{i}", f"raw-{i}", rate, args.seconds, args.warmup)
                print(f"  raw hop at {rate}/s: {run['latency']}", file=sys.stderr, flush=True)
            if "continuous" in args.only:
                query = spawn(__file__, "--engine", bootstrap, f"in-{i}", f"out-{i}", str(tmp / f"ck-{i}"),
                              str(args.fetch_wait_ms), "1" if args.host_gc_freeze else "0", stdin=True)
                assert query.stdout is not None and query.stdin is not None and query.stdout.readline().strip() == "started"
                out["kafka_to_kafka"][str(rate)] = run = hop(bootstrap, f"in-{i}", f"out-{i}", rate, args.seconds, args.warmup)
                query.stdin.write("stop\n")
                query.stdin.flush()
                run["query"] = json.loads(query.stdout.readline())
                query.wait(60)
                print(f"  continuous Kafka -> Kafka at {rate}/s: {run['latency']}", file=sys.stderr, flush=True)
    finally:
        if cluster.stdin is not None:
            cluster.stdin.close()  # the broker process ends
        for child in (query, cluster):
            if child is not None and child.poll() is None:
                try:
                    child.wait(30)
                except subprocess.TimeoutExpired:
                    child.terminate()
                    child.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    out["ratios"], out["targets"] = {}, {}
    for rate in map(str, args.rates):
        raw, both = out["raw_hop"].get(rate), out["kafka_to_kafka"].get(rate)
        if raw and both:
            for q in ("p50_ms", "p99_ms"):
                out["ratios"][f"two_hops_{q[:3]}_over_raw_hop_{q[:3]}_at_{rate}"] = _ratio(both["latency"][q], raw["latency"][q])
    at_target = out["kafka_to_kafka"].get("10000")
    if at_target:
        p99 = at_target["latency"]["p99_ms"]
        out["targets"]["kafka_to_kafka_p99_at_most_10_ms_at_10000"] = p99 is not None and p99 <= 10.0
    out["load_average_at_end"] = load()
    print(json.dumps(out, indent=2))
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else float(f"{a / b:.4g}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--produce"]:
        produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    elif sys.argv[1:2] == ["--broker"]:
        broker(sys.argv[3:], int(sys.argv[2]))
    elif sys.argv[1:2] == ["--engine"]:
        engine(*sys.argv[2:8])
    else:
        main()
