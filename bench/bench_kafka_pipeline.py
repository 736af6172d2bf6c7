"""How fast a Pipeline's KafkaSource reads, with one reading thread and with several, and how late the loop's own task wakes meanwhile.

A mock Kafka cluster (librdkafka's, in this process) holds ``--records`` 100-byte records over
``--partitions`` partitions. Each phase reads all of them as one batch (``plan_offset`` then
``read``), ``--repeats`` times, with a fresh source: records per second (best and median), for
``reader_threads=1`` and ``=partitions`` and their ratio (what reading partitions concurrently
buys on this machine). Beside the concurrent phase a ticker sleeps 5 ms at a time and records how
late each wake-up is (p50, p99, max): the reading runs in worker threads, so the loop stays free.
Prints one JSON object, with the machine's load average before and after. The mock keeps about
5 MB per partition (older segments are dropped, moving the log start), so keep
``records / partitions * 100`` bytes below that.

Not part of the test suite. Run: ``python bench/bench_kafka_pipeline.py [--records 160000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import anyio

TICK_S = 0.005


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def read_all(config: dict[str, Any], topic: str, threads: int) -> tuple[int, float]:
    """Read the whole topic as one batch; (records, seconds)."""
    from streaming.kafka import KafkaSource

    async with KafkaSource(config, topic, startingOffsets="earliest", reader_threads=threads) as source:
        started = time.perf_counter()
        end = await source.plan_offset(None, await source.latest_offset())
        records = await source.read(None, end)
        return len(records), time.perf_counter() - started


async def ticker(stop: anyio.Event, lateness: list[float]) -> None:
    """Sleep 5 ms at a time until ``stop``; each wake-up's lateness in ms."""
    while not stop.is_set():
        asked = time.perf_counter()
        await anyio.sleep(TICK_S)
        lateness.append((time.perf_counter() - asked - TICK_S) * 1000)


async def phase(config: dict[str, Any], topic: str, threads: int, repeats: int, expected: int,
                lateness: list[float] | None = None) -> dict[str, Any]:
    rates = []
    for _ in range(repeats):
        if lateness is None:
            count, seconds = await read_all(config, topic, threads)
        else:
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(ticker, stop, lateness)
                count, seconds = await read_all(config, topic, threads)
                stop.set()
        if count != expected:
            raise SystemExit(f"read {count} records, expected {expected}")
        rates.append(count / seconds)
    return {"reader_threads": threads, "best_records_per_s": round(max(rates)),
            "median_records_per_s": round(statistics.median(rates))}


async def main(records: int, partitions: int, repeats: int) -> dict[str, Any]:
    from streaming.kafka.testing import MockKafkaCluster

    with MockKafkaCluster() as cluster:
        topic = "bench"
        cluster.create_topic(topic, partitions)
        payload = b"x" * 100
        for partition in range(partitions):
            cluster.produce(topic, [payload] * (records // partitions), partition=partition)
        expected = records // partitions * partitions
        config = cluster.config()
        load_before = os.getloadavg()[0]
        one = await phase(config, topic, 1, repeats, expected)
        lateness: list[float] = []
        many = await phase(config, topic, partitions, repeats, expected, lateness)
        load_after = os.getloadavg()[0]
    return {
        "records": expected, "partitions": partitions, "record_bytes": 100, "repeats": repeats,
        "one_thread": one, "concurrent": many,
        "concurrent_over_one_thread": round(many["best_records_per_s"] / one["best_records_per_s"], 2),
        "loop_lateness_while_reading_ms": {"ticks": len(lateness), "p50": round(statistics.median(lateness), 2),
                                           "p99": round(percentile(lateness, 0.99), 2), "max": round(max(lateness), 2)},
        "load_average_1min": {"before": round(load_before, 2), "after": round(load_after, 2)},
        "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=160_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(anyio.run(main, args.records, args.partitions, args.repeats), indent=2))
