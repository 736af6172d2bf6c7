"""Kafka on Spark Connect: KafkaUtils.createDirectStream, createRDD and write_to_kafka on a Connect session give the
classic engine's output.

Each program runs twice, on the shared SparkContext and on the test run's Connect session (the
same JVM: its Connect server's Python workers reach the mock broker on 127.0.0.1), each against
its own topic holding the same records; the outputs must be equal, batch by batch, and equal to
what the records say.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from operator import add
from typing import Any

import pytest

from scheduler import ManualClock
from streaming import StreamingContext, StreamingListener
from streaming.kafka import KafkaUtils
from tests.streaming.kafka.test_dstream_direct import INTERVAL_MS, batch_ms, params, run

pytestmark = [pytest.mark.spark, pytest.mark.connect]

Produce = Callable[[str], None]
"""Produces a step's records into the topic named."""


def on_both(spark_context: Any, connect_session: Any, kafka_cluster: Any, kafka_topic: str, partitions: int,
            program: Callable[[Any, str, ManualClock], tuple[StreamingContext, dict[Any, Any]]],
            steps: Sequence[Produce | None]) -> dict[Any, Any]:
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
    """The direct stream's word count: each batch reads exactly the records produced before its tick, on both engines;
    a window over the stream reads its batches' ranges again; each batch's input rows are its ranges' sizes."""
    def program(spark: Any, topic: str, clock: ManualClock) -> tuple[StreamingContext, dict[Any, Any]]:
        outputs: dict[Any, Any] = {}
        ssc = StreamingContext(spark, INTERVAL_MS / 1000, clock=clock)
        stream = KafkaUtils.createDirectStream(ssc, [topic], params(kafka_cluster))
        counts = stream.map(lambda kv: kv[1]).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add)
        counts.foreachRDD(lambda t, rdd: outputs.__setitem__(batch_ms(t), sorted(rdd.collect())))
        windowed = stream.map(lambda kv: kv[1]).window(2 * INTERVAL_MS / 1000, INTERVAL_MS / 1000)  # re-reads the last two batches' ranges
        windowed.foreachRDD(lambda t, rdd: outputs.setdefault("window", {}).__setitem__(batch_ms(t), sorted(rdd.collect())))
        ssc.addStreamingListener(InputRows(outputs))
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
        "rows": {1000: 3, 2000: 2, 3000: 0, 4000: 2},  # the ranges' sizes: counted on the driver, on Connect too
        "window": {1000: ["a b", "b", "c"], 2000: ["a a", "a b", "b", "c", "d"], 3000: ["a a", "d"], 4000: ["a", "b"]},
    }


class InputRows(StreamingListener):
    """Keeps each completed batch's input row count under ``outputs["rows"]``."""

    def __init__(self, outputs: dict[Any, Any]) -> None:
        super().__init__()
        self.rows = outputs.setdefault("rows", {})

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803 (pyspark's name)
        info = batchCompleted.batchInfo()
        self.rows[info.batchTime().milliseconds()] = info.numRecords()


def test_a_checkpointed_word_count_into_a_transactional_sink_writes_each_count_once_across_a_restart(
        spark_context: Any, connect_session: Any, kafka_cluster: Any, kafka_topic: str, tmp_path: Any) -> None:
    """Kafka in, write_to_kafka(transactional=True) out, ssc.checkpoint: batch 2's second output fails after the sink
    committed it; the resumed program re-runs batch 2 from its logged ranges (the sink's markers skip it) and reads on.
    The output topic holds each batch's counts once, the same on both engines."""
    from streaming.kafka import close_writers, write_to_kafka
    from tests.streaming.kafka.test_sinks_writer import read_committed

    outputs = []
    for engine, spark in (("classic", spark_context), ("connect", connect_session)):
        source, sink, markers = (f"{kafka_topic}-{engine}{suffix}" for suffix in ("", "-out", "-markers"))
        kafka_cluster.create_topic(source, 2)
        kafka_cluster.create_topic(sink, 3)
        kafka_cluster.create_topic(markers, 1)
        kafka_cluster.produce(source, ["a b", "b"], partition=0)
        kafka_cluster.produce(source, ["c"], partition=1)
        checkpoint = str(tmp_path / engine)
        seen: list[int] = []

        def program(spark: Any, run_clock: ManualClock, fail_at: int | None, source: str = source, sink: str = sink,
                    markers: str = markers, checkpoint: str = checkpoint, seen: list[int] = seen) -> Callable[[], StreamingContext]:
            def crash(time: Any, rdd: Any) -> None:
                seen.append(batch_ms(time))
                if batch_ms(time) == fail_at:
                    raise RuntimeError("simulated crash after the sink committed")

            def setup() -> StreamingContext:
                ssc = StreamingContext(spark, INTERVAL_MS / 1000, clock=run_clock)
                lines = KafkaUtils.createDirectStream(ssc, [source], params(kafka_cluster)).map(lambda kv: kv[1])
                counts = lines.flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add)
                write_to_kafka(counts, sink, kafka_cluster.config(), key=lambda kv: kv[0], value=lambda kv: f"{kv[0]}={kv[1]}",
                               transactional=True, sink_id=sink, marker_topic=markers)
                counts.foreachRDD(crash)
                ssc.checkpoint(checkpoint)
                return ssc
            return setup

        clock = ManualClock(0)
        run(program(spark, clock, 2000)(), clock, [None, lambda source=source: kafka_cluster.produce(source, ["d a"], partition=1)])
        kafka_cluster.produce(source, ["e"], partition=0)  # while down
        again = ManualClock(clock.now())
        run(StreamingContext.getOrCreate(checkpoint, program(spark, again, None), restoreGraph=False), again, [None])
        assert seen == [1000, 2000, 2000, 3000], engine  # batch 2 ran again after the restart
        outputs.append({p: sorted(rows) for p, rows in read_committed(kafka_cluster, sink).items()})
        close_writers()
    classic, connect = outputs
    assert connect == classic
    assert sorted(value for rows in classic.values() for _, value in rows) == [
        b"a=1", b"a=1", b"b=2", b"c=1", b"d=1", b"e=1"]


def test_offset_ranges_message_handler_commits_and_max_rate_on_connect_match_classic(
        spark_context: Any, connect_session: Any, kafka_cluster: Any, kafka_topic: str) -> None:
    """maxRatePerPartition=3 (a session setting on Connect): offsetRanges() in foreachRDD and transform are the ranges whose
    records the batch read (messageHandler sees partition and offset); commitAsync commits their ends; as on classic."""
    from tests.streaming.kafka.test_dstream_direct import group_offsets
    from tests.streaming.test_spark_integration import spark_conf

    def program(spark: Any, topic: str, clock: ManualClock) -> tuple[StreamingContext, dict[int, Any]]:
        outputs: dict[int, Any] = {}
        kafka_cluster.produce(topic, [f"p0-{i}" for i in range(7)], partition=0)
        kafka_cluster.produce(topic, ["p1-0", "p1-1"], partition=1)
        with spark_conf(spark_context, spark__streaming__kafka__maxRatePerPartition="3"), session_conf(connect_session, RATE, "3"):
            ssc = StreamingContext(spark, INTERVAL_MS / 1000, clock=clock)
            stream = KafkaUtils.createDirectStream(ssc, [topic], params(kafka_cluster, group_id=topic),
                                                   messageHandler=lambda m: (m.partition, m.offset, m.message))

        def keep(time: Any, rdd: Any) -> Any:
            outputs[-batch_ms(time)] = spans(rdd.offsetRanges())
            return rdd

        def output(time: Any, rdd: Any) -> None:
            outputs[batch_ms(time)] = (spans(rdd.offsetRanges()), sorted(rdd.collect()))
            stream.commitAsync(rdd.offsetRanges(), lambda offsets, error: outputs.setdefault(0, []).append(
                (sorted((tp.partition, off) for tp, off in offsets.items()), error)))

        stream.transform(keep).foreachRDD(lambda rdd: None)
        stream.foreachRDD(output)
        return ssc, outputs

    outputs = on_both(spark_context, connect_session, kafka_cluster, kafka_topic, 2, program, [None, None, None, None])
    assert outputs[0] == [([(0, 3), (1, 2)], None), ([(0, 6), (1, 2)], None), ([(0, 7), (1, 2)], None)]
    assert {t: outputs[t][0] for t in (1000, 2000, 3000, 4000)} == {
        1000: [(0, 0, 3), (1, 0, 2)], 2000: [(0, 3, 6), (1, 2, 2)], 3000: [(0, 6, 7), (1, 2, 2)], 4000: [(0, 7, 7), (1, 2, 2)]}
    for ranges, records in (outputs[t] for t in (1000, 2000, 3000, 4000)):
        assert records == sorted((p, o, f"p{p}-{o}") for p, first, until in ranges for o in range(first, until))
    assert all(outputs[-t] == outputs[t][0] for t in (1000, 2000, 3000, 4000))
    assert group_offsets(kafka_cluster, f"{kafka_topic}-connect", f"{kafka_topic}-connect", 2) == [7, 2]


def test_create_rdd_on_a_connect_context_reads_the_ranges_as_classic(
        spark_context: Any, connect_session: Any, kafka_cluster: Any, kafka_topic: str) -> None:
    """KafkaUtils.createRDD(ssc.sparkContext, ...) on Connect: one partition per range, the same records in each, offsetRanges()."""
    from streaming.kafka import OffsetRange

    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, ["a", "b", "c"], partition=0)
    kafka_cluster.produce(kafka_topic, ["d", "e"], partition=1)
    ranges = [OffsetRange(kafka_topic, 1, 0, 2), OffsetRange(kafka_topic, 0, 1, 3)]
    frames = StreamingContext(connect_session, 1).sparkContext
    rdds = [KafkaUtils.createRDD(sc, params(kafka_cluster), ranges) for sc in (spark_context, frames)]
    assert [rdd.glom().collect() for rdd in rdds] == [[[(None, "d"), (None, "e")], [(None, "b"), (None, "c")]]] * 2
    assert rdds[1].offsetRanges() == ranges
    assert not hasattr(rdds[1].map(lambda kv: kv), "offsetRanges")  # derived RDDs have none, as on classic


RATE = "spark.streaming.kafka.maxRatePerPartition"


def spans(ranges: list[Any]) -> list[tuple[int, int, int]]:
    """Each range's partition, first and next offset (the topic differs between the engines' runs)."""
    return [(r.partition, r.fromOffset, r.untilOffset) for r in ranges]


@contextlib.contextmanager
def session_conf(session: Any, key: str, value: str) -> Iterator[None]:
    """``key`` set on the Connect session while the block runs (read by contexts made meanwhile)."""
    session.conf.set(key, value)
    try:
        yield
    finally:
        session.conf.unset(key)

