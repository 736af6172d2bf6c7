"""The Kafka sink's writer on librdkafka's mock cluster (in this process): idempotent against transactional throughput, a
transactional batch's fixed cost per task, a re-run's skip, and the first marker read of a process.

Prints one JSON object, the load average beside each figure. The mock broker shares this
process and its cores, so absolute figures are the client's and the mock's together; the
ratios (transactional over idempotent) are the point.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any, Callable

from streaming.kafka import close_writers
from streaming.kafka._markers import MarkerStore, MarkerValue, marker_key
from streaming.kafka._writer import sink_settings, write_records
from streaming.kafka.testing import MockKafkaCluster


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def median_ms(fn: Callable[[int], Any], rounds: int) -> float:
    """The median wall time of ``fn(i)`` over ``rounds`` calls, in ms."""
    samples = []
    for i in range(rounds):
        start = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(samples), 3)


def main() -> None:
    """Run the measurements and print them."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000, help="records per throughput run")
    parser.add_argument("--batch", type=int, default=20_000, help="records per transactional batch")
    parser.add_argument("--rounds", type=int, default=50, help="calls per fixed-cost median")
    parser.add_argument("--markers", type=int, default=2_000, help="markers in the partition for the first-read cost")
    args = parser.parse_args()
    payload = [b"x" * 100 for _ in range(args.batch)]
    out: dict[str, Any] = {"cpus": os.cpu_count(), "records": args.records, "record_bytes": 100,
                           "batch_records": args.batch}
    with MockKafkaCluster() as cluster:
        cluster.create_topic("out", 4)
        cluster.create_topic("markers", 1)
        params = cluster.config()
        idem = sink_settings("out", params, value=bytes)
        txn = sink_settings("out", params, value=bytes, transactional=True, sink_id="bench", marker_topic="markers")
        write_records(idem, 0, None, payload[:10])  # connect and warm up both writers
        write_records(txn, 0, 0, payload[:10])

        batches = args.records // args.batch
        for name, settings in (("idempotent", idem), ("transactional", txn)):
            before = load()
            start = time.perf_counter()
            for b in range(batches):
                write_records(settings, 0, 1_000 + b, payload)
            seconds = time.perf_counter() - start
            out[f"{name}_records_per_s"] = {"value": round(batches * args.batch / seconds), "load": before}
        out["transactional_over_idempotent_throughput"] = round(
            out["transactional_records_per_s"]["value"] / out["idempotent_records_per_s"]["value"], 3)

        one = payload[:1]
        before = load()
        out["idempotent_one_record_ms"] = {"value": median_ms(lambda i: write_records(idem, 1, None, one), args.rounds),
                                           "load": before}
        before = load()
        out["transactional_one_record_batch_ms"] = {
            "value": median_ms(lambda i: write_records(txn, 1, 100_000 + i, one), args.rounds), "load": before}
        before = load()
        out["rerun_skip_ms"] = {"value": median_ms(lambda i: write_records(txn, 1, 100_000 + i, one), args.rounds),
                                "load": before}
        out["transactional_over_idempotent_fixed_cost"] = round(
            out["transactional_one_record_batch_ms"]["value"] / out["idempotent_one_record_ms"]["value"], 2)

        # Other tasks' markers in the same partition (written plainly: thousands of transactional producers in one
        # process is not what the sink makes, which keeps one per task index it runs).
        cluster.produce("markers", [MarkerValue((1,)).encode()] * args.markers, partition=0,
                        keys=[marker_key("other", i).encode() for i in range(args.markers)])
        close_writers()
        store = MarkerStore(params, "markers")
        before = load()
        start = time.perf_counter()
        store.marker(marker_key("bench", 0))
        first = (time.perf_counter() - start) * 1000
        read = store.records_read
        start = time.perf_counter()
        store.marker(marker_key("bench", 0))
        again = (time.perf_counter() - start) * 1000
        out["first_marker_read"] = {"ms": round(first, 1), "records_read": read, "load": before}
        out["later_marker_read"] = {"ms": round(again, 2), "records_read": store.records_read - read}
        store.close()
        close_writers()
    out["load_average_at_end"] = load()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
