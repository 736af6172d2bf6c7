"""Kafka on Spark Connect: KafkaUtils.createDirectStream, createRDD and write_to_kafka on a Connect session give the
classic engine's output.

Each program runs twice, on the shared SparkContext and on the test run's Connect session (the
same JVM: its Connect server's Python workers reach the mock broker on 127.0.0.1), each against
its own topic holding the same records; the outputs must be equal, batch by batch, and equal to
what the records say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import add
from typing import Any

import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from streaming.kafka import KafkaUtils
from tests.streaming.kafka.test_dstream_direct import INTERVAL_MS, batch_ms, params, run

pytestmark = [pytest.mark.spark, pytest.mark.connect]

Produce = Callable[[str], None]
"""Produces a step's records into the topic named."""


def on_both(spark_context: Any, connect_session: Any, kafka_cluster: Any, kafka_topic: str, partitions: int,
            program: Callable[[Any, str, ManualClock], tuple[StreamingContext, dict[int, Any]]],
            steps: Sequence[Produce | None]) -> dict[int, Any]:
    """Run ``program(spark, topic, clock)`` on classic Spark and on Connect, each over its own topic fed by ``steps``;
    assert both outputs are equal and return them."""
    outputs = []
    for engine, spark in (("classic", spark_context), ("connect", connect_session)):
        topic = f"{kafka_topic}-{engine}"
        kafka_cluster.create_topic(topic, partitions)
        clock = ManualClock(0)
        ssc, output = program(spark, topic, clock)
        run(ssc, clock, [None if step is None else (lambda step=step, topic=topic: step(topic)) for step in steps])
        outputs.append(output)
    classic, connect = outputs
    assert connect == classic
    return classic


def test_a_word_count_over_three_partitions_gives_the_classic_batches(
        spark_context: Any, connect_session: Any, kafka_cluster: Any, kafka_topic: str) -> None:
    """The direct stream's word count: each batch reads exactly the records produced before its tick, on both engines."""
    def program(spark: Any, topic: str, clock: ManualClock) -> tuple[StreamingContext, dict[int, Any]]:
        outputs: dict[int, Any] = {}
        ssc = StreamingContext(spark, INTERVAL_MS / 1000, clock=clock)
        stream = KafkaUtils.createDirectStream(ssc, [topic], params(kafka_cluster))
        counts = stream.map(lambda kv: kv[1]).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add)
        counts.foreachRDD(lambda t, rdd: outputs.__setitem__(batch_ms(t), sorted(rdd.collect())))
        return ssc, outputs

    def first(topic: str) -> None:
        kafka_cluster.produce(topic, ["a b", "b"], partition=0)
        kafka_cluster.produce(topic, ["c"], partition=2)

    assert on_both(spark_context, connect_session, kafka_cluster, kafka_topic, 3, program, [
        first,
        lambda topic: kafka_cluster.produce(topic, ["a a", "d"], partition=1),
        None,
        lambda topic: (kafka_cluster.produce(topic, ["b"], partition=0), kafka_cluster.produce(topic, ["a"], partition=2)),
    ]) == {
        1000: [("a", 1), ("b", 2), ("c", 1)],
        2000: [("a", 2), ("d", 1)],
        3000: [],
        4000: [("a", 1), ("b", 1)],
    }
