"""KafkaUtils.createDirectStream on the mock broker and real Spark: exact batches, offsetRanges(), commits.

Each program runs on a ManualClock: records are produced, then the clock moves one interval and
the batch planned at that tick reads exactly what the partitions held when it was planned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import add
from typing import Any

import anyio
import anyio.to_thread
import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from streaming.kafka import KafkaUtils, OffsetRange
from tests.anyio_support import BACKENDS
from tests.support import advance

pytestmark = pytest.mark.spark

INTERVAL_MS = 1000

Step = Callable[[], None] | None


def batch_ms(time: Any) -> int:
    return round(time.timestamp() * 1000)


def run(ssc: StreamingContext, clock: ManualClock, steps: Sequence[Step], backend: str = "asyncio") -> None:
    """Start ``ssc``; for each step run it (in a thread: it produces), then move one interval and wait for the batch."""
    async def drive() -> None:
        async with ssc:
            await ssc.start_async()
            await ssc.runtime.wait_until_idle()
            for step in steps:
                if step is not None:
                    await anyio.to_thread.run_sync(step)
                await advance(ssc.runtime, clock, INTERVAL_MS)
            await ssc.stop_async(stopSparkContext=False)

    anyio.run(drive, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_word_count_over_three_partitions_gives_each_batch_exactly_its_records(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock, backend: str) -> None:
    """Records produced before a batch's tick are that batch's; counts per batch are exact, nothing read twice."""
    kafka_cluster.create_topic(kafka_topic, 3)
    kafka_cluster.produce(kafka_topic, ["a b", "b"], partition=0)
    kafka_cluster.produce(kafka_topic, ["c"], partition=2)
    outputs: dict[int, list[tuple[str, int]]] = {}
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = KafkaUtils.createDirectStream(ssc, [kafka_topic], {"metadata.broker.list": kafka_cluster.bootstrap_servers,
                                                                "auto.offset.reset": "smallest"})
    counts = stream.map(lambda kv: kv[1]).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add)
    counts.foreachRDD(lambda t, rdd: outputs.__setitem__(batch_ms(t), sorted(rdd.collect())))
    run(ssc, clock, [
        None,
        lambda: kafka_cluster.produce(kafka_topic, ["a a", "d"], partition=1),
        None,
        lambda: (kafka_cluster.produce(kafka_topic, ["b"], partition=0), kafka_cluster.produce(kafka_topic, ["a"], partition=2)),
    ], backend)
    assert outputs == {
        1000: [("a", 1), ("b", 2), ("c", 1)],
        2000: [("a", 2), ("d", 1)],
        3000: [],
        4000: [("a", 1), ("b", 1)],
    }
