"""An async service that consumes Kafka, keeps state, and publishes results to Kafka, exactly once.

The service takes orders from the ``orders`` topic (three partitions) with a ``Pipeline`` on the
service's own event loop, keeps each customer's running total in a state store
(``add_groups_with_state``), and publishes every changed total to ``totals`` through Kafka
transactions (one per batch, with a commit marker, so a re-run batch is not published twice).
The Kafka client's blocking calls run in worker threads; the service's own tasks (an order
feed and a heartbeat here) keep running beside the batches. Without ``--bootstrap`` it starts
librdkafka's mock cluster in this process. It stops by itself once every order it fed is in
``totals``, then reads ``totals`` back (``read_committed``) and checks the last total of each
customer against the orders it sent.

    python examples/kafka_service.py [--orders 300] [--interval 0.2] [--backend trio]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from collections import Counter
from typing import Any, Iterable

import anyio
import anyio.to_thread
import confluent_kafka

from streaming import Milliseconds, Pipeline, StreamingRuntime
from streaming.kafka import KafkaRecord, KafkaSink, KafkaSource
from streaming.kafka.testing import MockKafkaCluster

CUSTOMERS = [f"c{i}" for i in range(8)]
MARKERS = "aiodstream-sink-commits"


def running_total(customer: str, orders: Iterable[KafkaRecord], state: Any) -> Iterable[tuple[str, int]]:
    """flatMapGroupsWithState's function: add this batch's orders to the customer's total and publish it."""
    total = (state.get if state.exists else 0) + sum(order.value["cents"] for order in orders)
    state.update(total)
    yield customer, total


async def feed_orders(bootstrap: str, count: int, seed: int) -> Counter[str]:
    """Publish ``count`` orders a few at a time, as the service's clients would; returns each customer's sum."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    rng = random.Random(seed)
    sums: Counter[str] = Counter()
    for start in range(0, count, 10):
        for n in range(start, min(start + 10, count)):
            customer, cents = rng.choice(CUSTOMERS), rng.randint(100, 9_999)
            sums[customer] += cents
            producer.produce("orders", json.dumps({"id": n, "customer": customer, "cents": cents}).encode(), key=customer.encode())
        await anyio.to_thread.run_sync(producer.flush, 30)
        await anyio.sleep(0.02)
    return sums


def read_totals(bootstrap: str) -> dict[str, int]:
    """The last published total of each customer, as a read_committed consumer of ``totals`` sees them."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "report", "isolation.level": "read_committed",
                               "enable.auto.commit": False, "enable.partition.eof": True})
    partitions = sorted(consumer.list_topics(timeout=30).topics["totals"].partitions)
    consumer.assign([confluent_kafka.TopicPartition("totals", p, confluent_kafka.OFFSET_BEGINNING) for p in partitions])
    latest: dict[str, int] = {}
    at_end: set[int] = set()
    try:
        while len(at_end) < len(partitions):  # each partition reports once that it reached its end
            message = consumer.poll(30)
            if message is None:
                raise TimeoutError("reading totals: no record and no end of partition for 30 s")
            error, partition, value = message.error(), message.partition(), message.value()
            if error is not None:
                if error.name() != "_PARTITION_EOF" or partition is None:
                    raise RuntimeError(f"reading totals: {error}")
                at_end.add(partition)
                continue
            if value is None:
                raise RuntimeError(f"reading totals: a record without a value at offset {message.offset()}")
            customer, total = json.loads(value)
            latest[customer] = total
    finally:
        consumer.close()
    return latest


async def serve(bootstrap: str, orders: int, interval_ms: int, seed: int) -> None:
    heartbeats = 0

    async def heartbeat() -> None:
        nonlocal heartbeats
        while True:
            await anyio.sleep(0.05)
            heartbeats += 1

    source = KafkaSource({"bootstrap.servers": bootstrap}, ["orders"], startingOffsets="earliest",
                         maxOffsetsPerTrigger=200, value_decoder=json.loads)
    pipeline = Pipeline()
    pipeline.add_source(source, name="orders")
    totals = pipeline.add_groups_with_state("orders", running_total, key=lambda record: record.value["customer"],
                                            name="totals")
    sink = KafkaSink("totals", {"bootstrap.servers": bootstrap}, key=lambda pair: pair[0], value=json.dumps,
                     select=lambda batch: batch.inputs[totals], transactional=True, sink_id="order-totals",
                     marker_topic=MARKERS)
    pipeline.add_output(sink, name="publish")
    with tempfile.TemporaryDirectory(prefix="kafka-service-") as checkpoint:
        async with StreamingRuntime(pipeline, Milliseconds(interval_ms), checkpoint_location=checkpoint,
                                    name="order-totals") as runtime, anyio.create_task_group() as tg:
            tg.start_soon(heartbeat)
            await runtime.start()
            sums = await feed_orders(bootstrap, orders, seed)
            with anyio.fail_after(120):
                await runtime.process_all_available()
            batches = [p for p in runtime.recent_progress if p.num_input_rows]
            await runtime.stop()
            tg.cancel_scope.cancel()
    for progress in batches:
        print(f"batch {progress.batch_id}: {progress.num_input_rows} orders")
    published = await anyio.to_thread.run_sync(read_totals, bootstrap)
    verdict = "match" if published == dict(sums) else f"DIFFER: {published} vs {dict(sums)}"
    print(f"{sink.written} transactions published, {sink.skipped} skipped; the loop beat {heartbeats} times meanwhile")
    print(f"{orders} orders from {len(sums)} customers; totals in Kafka {verdict} the orders sent")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="a Kafka cluster with topics orders, totals and " + MARKERS +
                        " (default: librdkafka's mock cluster, started here)")
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.2, help="batch interval in seconds")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    interval_ms = int(args.interval * 1000)
    if args.bootstrap:
        anyio.run(serve, args.bootstrap, args.orders, interval_ms, args.seed, backend=args.backend)
        return
    with MockKafkaCluster() as cluster:
        cluster.create_topic("orders", 3)
        cluster.create_topic("totals", 3)
        cluster.create_topic(MARKERS, 1)
        anyio.run(serve, cluster.bootstrap_servers, args.orders, interval_ms, args.seed, backend=args.backend)


if __name__ == "__main__":
    try:
        main()
    except BaseException as exc:  # Ctrl-C: exit as the shell expects, quietly (on trio it comes in an exception group)
        subgroup = getattr(exc, "subgroup", None)  # an exception group's: the KeyboardInterrupts in it, or None
        if not isinstance(exc, KeyboardInterrupt) and (subgroup is None or subgroup(KeyboardInterrupt) is None):
            raise
        raise SystemExit(130) from None
