"""Continuous mode on Kafka: the source's partitions as tasks, the producing sink, restarts and Spark's messages, on the mock broker.

The queries run their tasks on threads (``ThreadTaskLauncher``, no JVM) in real time with short
epochs; the tests wait on committed epochs (hang guards only), never on time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import anyio
import pytest

from scheduler import InvalidPipelineError, StreamingQueryException
from streaming.continuous import Continuous, ContinuousExecution, ContinuousStream, MemorySink, ThreadTaskLauncher
from streaming.kafka import KafkaContinuousSink, KafkaContinuousSource, KafkaDataLossError, KafkaError
from streaming.kafka._continuous_sink import NO_TOPIC, NO_VALUE, NULL_TOPIC
from streaming.kafka._continuous_source import KAFKA_FIELDS, PARTITIONS_CHANGED

pytestmark = pytest.mark.anyio

OPTIONS = {"spark.sql.streaming.continuous.executorPollIntervalMs": 5}
LOST = ("Some data may have been lost because they are not available in Kafka any more; either the data was aged out by "
        "Kafka or the topic may have been deleted before all the data in the topic was processed. If you don't want your "
        'streaming query to fail on such cases, set the source option "failOnDataLoss" to "false".')


def produce(cluster: Any, topic: str, partitions: int, per_partition: int, tag: str = "") -> dict[int, list[bytes]]:
    """``per_partition`` values into each partition; the values by partition."""
    sent = {p: [f"{tag}{p}-{i}".encode() for i in range(per_partition)] for p in range(partitions)}
    for p, values in sent.items():
        cluster.produce(topic, values, partition=p)
    return sent


async def run_until(plan: Any, done: Callable[[ContinuousExecution], bool], checkpoint: Path | None = None) -> ContinuousExecution:
    """Run ``plan`` on threads until ``done(query)`` after a committed epoch, then stop gracefully; the stopped query."""
    async with ContinuousExecution(plan, Continuous(20), launcher=ThreadTaskLauncher(), options=OPTIONS,
                                   checkpoint_location=checkpoint) as query:
        await query.start()
        with anyio.fail_after(120):  # a hang guard only: threads and a broker on a busy machine
            while not done(query):
                await query.wait_for_epoch(query.last_committed_epoch + 1)
        await query.stop(graceful=True)
    return query


def by_partition(rows: list[Any]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for row in rows:
        out.setdefault(row.partition, []).append(row.value)
    return out


async def test_every_partition_reaches_the_memory_sink_once_in_offset_order(kafka_cluster: Any, kafka_topic: str,
                                                                           tmp_path: Path) -> None:
    """Three partitions from earliest: each record once, in offset order per partition, as Spark's Kafka rows; the log's JSON."""
    kafka_cluster.create_topic(kafka_topic, 3)
    sent = produce(kafka_cluster, kafka_topic, 3, 40)
    sink = MemorySink()
    source = KafkaContinuousSource(kafka_topic, kafka_cluster.config(), startingOffsets="earliest")
    await run_until(ContinuousStream(source).to(sink), lambda _: len(sink.rows()) >= 120, tmp_path / "ck")
    rows = sink.rows()
    assert by_partition(rows) == sent
    assert list(rows[0].__fields__) == KAFKA_FIELDS
    assert all(r.topic == kafka_topic and r.key is None and r.timestampType == 0 for r in rows)
    assert sorted((r.partition, r.offset) for r in rows) == [(p, i) for p in range(3) for i in range(40)]
    offsets = sorted((tmp_path / "ck" / "offsets").iterdir(), key=lambda f: int(f.name))
    assert json.loads(offsets[-1].read_text().splitlines()[-1]) == {kafka_topic: {"0": 40, "1": 40, "2": 40}}


async def test_a_restart_resumes_from_the_last_committed_epochs_offsets(kafka_cluster: Any, kafka_topic: str,
                                                                       tmp_path: Path) -> None:
    """A second run on the checkpoint reads only what arrived after the first run's last commit, whatever startingOffsets says."""
    kafka_cluster.create_topic(kafka_topic, 2)
    first = produce(kafka_cluster, kafka_topic, 2, 10, "a")
    sink = MemorySink()
    plan = ContinuousStream(KafkaContinuousSource(kafka_topic, kafka_cluster.config(), startingOffsets="earliest")).to(sink)
    await run_until(plan, lambda _: len(sink.rows()) >= 20, tmp_path / "ck")
    assert by_partition(sink.rows()) == first
    second = produce(kafka_cluster, kafka_topic, 2, 7, "b")
    again = MemorySink()
    plan = ContinuousStream(KafkaContinuousSource(kafka_topic, kafka_cluster.config(), startingOffsets="earliest")).to(again)
    await run_until(plan, lambda _: len(again.rows()) >= 14, tmp_path / "ck")
    assert by_partition(again.rows()) == second


async def test_latest_starts_after_what_is_there_and_json_names_each_partitions_start(kafka_cluster: Any,
                                                                                     kafka_topic: str) -> None:
    """``latest`` skips the records already there; a JSON start gives one partition an offset and the other -2 (earliest)."""
    kafka_cluster.create_topic(kafka_topic, 2)
    produce(kafka_cluster, kafka_topic, 2, 5, "old")
    sink = MemorySink()
    source = KafkaContinuousSource([kafka_topic], kafka_cluster.config())  # latest: Spark's default
    async with ContinuousExecution(ContinuousStream(source).to(sink), Continuous(20), launcher=ThreadTaskLauncher(),
                                   options=OPTIONS) as query:
        await query.start()
        new = produce(kafka_cluster, kafka_topic, 2, 3, "new")
        with anyio.fail_after(120):
            while len(sink.rows()) < 6:
                await query.wait_for_epoch(query.last_committed_epoch + 1)
        await query.stop(graceful=True)
    assert by_partition(sink.rows()) == new
    json_sink = MemorySink()
    source = KafkaContinuousSource(kafka_topic, kafka_cluster.config(),
                                   startingOffsets=json.dumps({kafka_topic: {"0": 6, "1": -2}}))
    await run_until(ContinuousStream(source).to(json_sink), lambda _: len(json_sink.rows()) >= 10)
    assert by_partition(json_sink.rows()) == {0: [b"new0-1", b"new0-2"],
                                              1: [f"old1-{i}".encode() for i in range(5)] + new[1]}


async def test_kafka_to_kafka_writes_each_record_to_the_output_topic(kafka_cluster: Any, kafka_topic: str) -> None:
    """Records through a map into the producing sink: the output topic holds each one, with its key, in order per partition."""
    source_topic, out_topic = kafka_topic, kafka_topic + "-out"
    kafka_cluster.create_topic(source_topic, 3)
    kafka_cluster.create_topic(out_topic, 3)
    sent = produce(kafka_cluster, source_topic, 3, 30)
    sink = KafkaContinuousSink(kafka_cluster.config(), topic=out_topic)

    def upper(row: Any) -> dict[str, Any]:
        return {"key": row.value, "value": row.value.upper(), "partition": row.partition}

    plan = ContinuousStream(KafkaContinuousSource(source_topic, kafka_cluster.config(), startingOffsets="earliest")).map(upper)
    query = await run_until(plan.to(sink), lambda q: q.statistics().input_rows >= 90)
    assert query.exception() is None
    for p in range(3):
        assert [(k, v) for _, k, v, _ in kafka_cluster.records(out_topic, p)] == [(v, v.upper()) for v in sent[p]]


async def test_records_aged_out_fail_with_sparks_message_or_are_skipped_without_failOnDataLoss(
        kafka_cluster: Any, kafka_topic: str) -> None:
    """Starting before the log start: Spark's failOnDataLoss error naming the offset; with false, the rest is read."""
    kafka_cluster.create_topic(kafka_topic, 1)
    produce(kafka_cluster, kafka_topic, 1, 8)
    kafka_cluster.delete_records(kafka_topic, 0, 5)
    start = json.dumps({kafka_topic: {"0": 2}})
    source = KafkaContinuousSource(kafka_topic, kafka_cluster.config(), startingOffsets=start)
    async with ContinuousExecution(ContinuousStream(source).to(MemorySink()), Continuous(20), launcher=ThreadTaskLauncher(),
                                   options=OPTIONS) as failing:
        await failing.start()
        with pytest.raises(StreamingQueryException) as caught, anyio.fail_after(120):
            await failing.await_termination()
    cause = caught.value.__cause__
    assert isinstance(cause, KafkaDataLossError)
    assert str(cause) == f"Cannot fetch offset 2 (GroupId: {source.group_id}, TopicPartition: {kafka_topic}-0). {LOST}"
    sink = MemorySink()
    lenient = KafkaContinuousSource(kafka_topic, kafka_cluster.config(), startingOffsets=start, failOnDataLoss="false")
    await run_until(ContinuousStream(lenient).to(sink), lambda _: len(sink.rows()) >= 3)
    assert [r.value for r in sink.rows()] == [b"0-5", b"0-6", b"0-7"]


def test_an_offset_past_the_end_is_data_loss_and_without_failOnDataLoss_reads_the_partition_anew(
        kafka_cluster: Any, kafka_topic: str) -> None:
    """A partition made anew behind the query (its offset past the end): Spark's error, or (lenient) its records from the start."""
    kafka_cluster.create_topic(kafka_topic, 1)
    produce(kafka_cluster, kafka_topic, 1, 4)
    strict = KafkaContinuousSource(kafka_topic, kafka_cluster.config())
    reader = strict.open_reader(0, 50)
    try:
        with pytest.raises(KafkaDataLossError) as caught:
            deadline = time.monotonic() + 60  # a hang guard
            while time.monotonic() < deadline:
                reader.read(time.monotonic() + 0.05)
    finally:
        reader.close()
    assert str(caught.value) == f"Cannot fetch offset 50 (GroupId: {strict.group_id}, TopicPartition: {kafka_topic}-0). {LOST}"
    lenient = KafkaContinuousSource(kafka_topic, kafka_cluster.config(), failOnDataLoss=False)
    reader = lenient.open_reader(0, 50)
    rows: list[Any] = []
    try:
        deadline = time.monotonic() + 60  # a hang guard
        while len(rows) < 4 and time.monotonic() < deadline:
            rows += reader.read(time.monotonic() + 0.05)
        assert reader.offset() == 4
    finally:
        reader.close()
    assert [r.value for r in rows] == [b"0-0", b"0-1", b"0-2", b"0-3"]


class _ClientEvent:
    """A consumer error event librdkafka hands out among the records (a broker going away): retried by the client."""

    def error(self) -> Any:
        return self

    def name(self) -> str:
        return "_TRANSPORT"

    def str(self) -> str:
        return "Local: Broker transport failure"

    def fatal(self) -> bool:
        return False

    def retriable(self) -> bool:
        return True


class _WithAnEvent:
    """A consumer whose first non-empty batch of fetched records starts with a client event."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.injected = False

    def consume(self, count: int, timeout: float) -> list[Any]:
        got = self.real.consume(count, timeout)
        if got and not self.injected:
            self.injected = True
            return [_ClientEvent(), *got]
        return list(got)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_the_records_fetched_after_a_client_event_are_read(kafka_cluster: Any, kafka_topic: str) -> None:
    """A retriable client event among the fetched records is logged and skipped, not the records after it (the consumer
    has moved past them: dropped, they would be lost)."""
    kafka_cluster.create_topic(kafka_topic, 1)
    produce(kafka_cluster, kafka_topic, 1, 6)
    reader = KafkaContinuousSource(kafka_topic, kafka_cluster.config()).open_reader(0, 0)
    reader._consumer = _WithAnEvent(reader._consumer)
    rows: list[Any] = []
    try:
        deadline = time.monotonic() + 30  # a hang guard
        while len(rows) < 6 and time.monotonic() < deadline:
            rows += reader.read(time.monotonic() + 0.05)
    finally:
        reader.close()
    assert reader._consumer.injected
    assert [r.value for r in rows] == [f"0-{i}".encode() for i in range(6)]


def test_a_restart_reads_an_added_partition_from_earliest_and_reports_gone_ones(kafka_cluster: Any, kafka_topic: str) -> None:
    """The last epoch's line against today's partitions: added ones from earliest (data loss if not 0), gone ones Spark's loss."""
    kafka_cluster.create_topic(kafka_topic, 2)
    produce(kafka_cluster, kafka_topic, 2, 4)
    source = KafkaContinuousSource(kafka_topic, kafka_cluster.config())
    assert source.split_offsets(json.dumps({kafka_topic: {"0": 3}})) == [3, 0]
    with pytest.raises(KafkaDataLossError) as gone:
        source.split_offsets(json.dumps({kafka_topic: {"0": 1, "1": 2, "2": 9}}))
    assert str(gone.value) == f"Set({kafka_topic}-2) are gone. Some data may have been missed. {LOST}"
    kafka_cluster.delete_records(kafka_topic, 1, 2)
    with pytest.raises(KafkaDataLossError) as late:
        source.split_offsets(json.dumps({kafka_topic: {"0": 1}}))
    assert str(late.value) == f"Added partition {kafka_topic}-1 starts from 2 instead of 0. Some data may have been missed. {LOST}"
    lenient = KafkaContinuousSource(kafka_topic, kafka_cluster.config(), failOnDataLoss=False)
    assert lenient.split_offsets(json.dumps({kafka_topic: {"0": 1, "2": 9}})) == [1, 2]


def test_a_partition_added_while_running_stops_the_task_with_the_restart_message(kafka_cluster: Any, kafka_topic: str) -> None:
    """A reader noticing a new partition of its topics raises the message that says to restart (which then reads it)."""
    kafka_cluster.create_topic(kafka_topic, 1)
    produce(kafka_cluster, kafka_topic, 1, 2)
    source = KafkaContinuousSource(kafka_topic, kafka_cluster.config(), startingOffsets="earliest",
                                   partitionCheckIntervalMs=1, failOnDataLoss=False)
    source.check()
    reader = source.open_reader(0, source.initial_offset(0))
    try:
        kafka_cluster.add_partitions(kafka_topic, 2)
        with pytest.raises(KafkaError) as caught:
            deadline = time.monotonic() + 60  # a hang guard: the reader checks every 1 ms
            while time.monotonic() < deadline:
                reader.read(time.monotonic() + 0.01)
    finally:
        reader.close()
    assert str(caught.value) == PARTITIONS_CHANGED.format(source=repr(source), known=f"Set({kafka_topic}-0)",
                                                          now=f"Set({kafka_topic}-0, {kafka_topic}-1)")
    assert source.split_offsets(json.dumps({kafka_topic: {"0": 2}})) == [2]  # the run's partitions, until a new check()
    source.check()
    assert source.num_partitions == 2 and source.split_offsets(json.dumps({kafka_topic: {"0": 2}})) == [2, 0]


def test_json_starting_offsets_must_name_every_partition(kafka_cluster: Any, kafka_topic: str) -> None:
    """Spark's rule for a startingOffsets JSON: exactly the subscribed topics' partitions, checked when the query starts."""
    kafka_cluster.create_topic(kafka_topic, 2)
    source = KafkaContinuousSource(kafka_topic, kafka_cluster.config(), startingOffsets={kafka_topic: {"0": -2}})
    with pytest.raises(InvalidPipelineError) as caught:
        source.check()
    assert str(caught.value) == ("If startingOffsets contains specific offsets, you must specify all TopicPartitions.\n"
                                 "Use -1 for latest, -2 for earliest, if you don't care.\n"
                                 f"Specified: Set({kafka_topic}-0) Assigned: Set({kafka_topic}-0, {kafka_topic}-1)")


EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'


@pytest.mark.parametrize(("make", "message"), [
    (lambda c: KafkaContinuousSource("", c), "No topics to subscribe to as specified value for option 'subscribe' is ''"),
    (lambda c: KafkaContinuousSource(" , ", c), "No topics to subscribe to as specified value for option 'subscribe' is ' , '"),
    (lambda c: KafkaContinuousSource("t", c, startingOffsets="first"), f"Expected e.g. {EXAMPLE}, got first"),
    (lambda c: KafkaContinuousSource("t", c, startingOffsets='{"t":{"x":1}}'), f'Expected e.g. {EXAMPLE}, got {{"t":{{"x":1}}}}'),
    (lambda c: KafkaContinuousSource("t", c, failOnDataLoss="maybe"),
     'For input string: "maybe" (failOnDataLoss must be true or false)'),
    (lambda c: KafkaContinuousSource("t", c, pollTimeoutMs=0), "pollTimeoutMs must be a positive int of milliseconds, got 0"),
    (lambda c: KafkaContinuousSource("t", {}), "Must specify metadata.broker.list or bootstrap.servers"),
    (lambda c: KafkaContinuousSink({}), "Must specify metadata.broker.list or bootstrap.servers"),
    (lambda c: KafkaContinuousSink(c, topic=""), "the Kafka sink's topic must be a non-empty string or None, got ''"),
])
def test_bad_arguments_are_refused_with_sparks_messages(make: Callable[[dict[str, Any]], Any], message: str) -> None:
    """Each bad option is refused when the source or sink is made, with Spark's message where Spark has one."""
    with pytest.raises(InvalidPipelineError) as caught:
        make({"bootstrap.servers": "127.0.0.1:9"})
    assert str(caught.value) == message


@pytest.mark.parametrize(("row", "topic", "message"), [
    ({"key": b"k"}, "t", NO_VALUE),
    ({"value": b"v"}, None, NO_TOPIC),
    ({"value": b"v", "topic": None}, None, NULL_TOPIC),
    ({"value": 3}, "t", "value attribute type must be a string or binary, got int"),
])
def test_rows_the_sink_cannot_write_are_refused_with_sparks_messages(row: Any, topic: str | None, message: str) -> None:
    """A row without a value, or without a topic when the sink has none, fails its task with Spark's message."""
    writer = KafkaContinuousSink({"bootstrap.servers": "127.0.0.1:9"}, topic=topic).open_writer(0, 0)
    with pytest.raises(InvalidPipelineError) as caught:
        writer.write(row)
    assert str(caught.value) == message


def upper_value(row: Any) -> dict[str, Any]:
    return {"key": row.key, "value": row.value.upper(), "partition": row.partition}


@pytest.mark.spark
def test_kafka_to_kafka_runs_on_sparks_executors_through_the_dstream_api(spark_context: Any, kafka_cluster: Any,
                                                                          kafka_topic: str) -> None:
    """local[2]: one long-running Spark task per Kafka partition, each producing to the output topic; every record once."""
    from streaming import StreamingContext

    out_topic = kafka_topic + "-out"
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.create_topic(out_topic, 2)
    sent = produce(kafka_cluster, kafka_topic, 2, 25)
    params = kafka_cluster.config()

    async def body() -> None:
        async with StreamingContext(spark_context, Continuous("100 milliseconds")) as ssc:
            source = KafkaContinuousSource(kafka_topic, params, startingOffsets="earliest")
            ssc.continuousStream(source).map(upper_value).writeTo(KafkaContinuousSink(params, topic=out_topic))
            await ssc.start_async()
            query = ssc.runtime
            assert isinstance(query, ContinuousExecution)
            with anyio.fail_after(120):  # a hang guard: a JVM and Python workers on a busy machine
                while query.statistics().input_rows < 50:
                    await query.wait_for_epoch(query.last_committed_epoch + 1)
            await ssc.stop_async(stopSparkContext=False, stopGraceFully=True)

    anyio.run(body)
    for p in range(2):
        assert [v for _, _, v, _ in kafka_cluster.records(out_topic, p)] == [v.upper() for v in sent[p]]


def test_the_sink_takes_sparks_row_shapes_and_names_a_partition_it_cannot_write(kafka_cluster: Any, kafka_topic: str) -> None:
    """A bare value, a (key, value) pair, a dict naming its partition; a partition the topic lacks fails with the client's reason."""
    kafka_cluster.create_topic(kafka_topic, 2)
    sink = KafkaContinuousSink(kafka_cluster.config(), topic=kafka_topic)
    writer = sink.open_writer(0, 0)
    for row in ("a", (b"k", "b"), {"value": b"c", "key": "k2", "partition": 1}):
        writer.write(row)
    assert writer.commit() == 3
    assert [(k, v) for _, k, v, _ in kafka_cluster.records(kafka_topic, 1)][-1] == (b"k2", b"c")
    assert sum(len(kafka_cluster.records(kafka_topic, p)) for p in range(2)) == 3
    writer = sink.open_writer(0, 1)
    with pytest.raises(KafkaError) as caught:
        writer.write({"value": b"x", "partition": 7})
    assert str(caught.value) == (f"the Kafka sink could not send a record to {kafka_topic}-7: Unable to produce message: "
                                 "Local: Unknown partition")
    sink.close()
