"""The test broker checked as a Kafka broker: offsets, partitions, groups, transactions, and the control functions that cover its gaps."""

from __future__ import annotations

from typing import Any

import pytest

from streaming.kafka import KafkaError, TopicAndPartition
from streaming.kafka._client import KafkaClusterView
from streaming.kafka.testing import MockKafkaCluster

confluent_kafka = pytest.importorskip("confluent_kafka")


def consumer(cluster: MockKafkaCluster, group: str, **extra: Any) -> Any:
    """A consumer of ``cluster`` in ``group``, without auto-commit."""
    return confluent_kafka.Consumer(cluster.config(group_id=group, enable_auto_commit=False, **extra))


def read_all(c: Any, topic: str, partition: int, start: int, count: int) -> list[tuple[int, bytes]]:
    """``count`` records of one partition from ``start``, as ``(offset, value)``."""
    c.assign([confluent_kafka.TopicPartition(topic, partition, start)])
    out: list[tuple[int, bytes]] = []
    while len(out) < count:
        message = c.poll(30)
        assert message is not None, f"timed out after {len(out)} records"
        assert message.error() is None, message.error()
        out.append((message.offset(), message.value()))
    return out


def test_offsets_are_exact_per_partition(kafka_cluster: MockKafkaCluster, kafka_topic: str) -> None:
    """Each partition's high watermark is exactly its record count, and records come back contiguous and complete."""
    kafka_cluster.create_topic(kafka_topic, 3)
    for partition, count in enumerate((2000, 1, 777)):
        kafka_cluster.produce(kafka_topic, [f"{partition}-{i}".encode() for i in range(count)], partition=partition)
    view = KafkaClusterView(kafka_cluster.config())
    tps = [TopicAndPartition(kafka_topic, p) for p in range(3)]
    assert view.partitions([kafka_topic]) == {kafka_topic: [0, 1, 2]}
    assert view.latest_offsets(tps) == dict(zip(tps, (2000, 1, 777), strict=True))
    assert view.earliest_offsets(tps) == dict.fromkeys(tps, 0)
    rows = read_all(consumer(kafka_cluster, "reader"), kafka_topic, 0, 0, 2000)
    assert rows == [(i, f"0-{i}".encode()) for i in range(2000)]


def test_a_range_in_the_middle_reads_from_its_offset(kafka_cluster: MockKafkaCluster, kafka_topic: str) -> None:
    """Assigning a partition at an offset starts there: what a task reading its own range relies on."""
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, [str(i).encode() for i in range(100)], partition=1)
    assert read_all(consumer(kafka_cluster, "mid"), kafka_topic, 1, 37, 3) == [(37, b"37"), (38, b"38"), (39, b"39")]


def test_consumer_groups_store_committed_offsets(kafka_cluster: MockKafkaCluster, kafka_topic: str) -> None:
    """A committed offset is stored per group and read back by another consumer of the group; other groups see none."""
    kafka_cluster.create_topic(kafka_topic, 2)
    tp = confluent_kafka.TopicPartition(kafka_topic, 1, 42)
    first = consumer(kafka_cluster, f"{kafka_topic}-g")
    first.commit(offsets=[tp], asynchronous=False)
    first.close()
    again = consumer(kafka_cluster, f"{kafka_topic}-g").committed([confluent_kafka.TopicPartition(kafka_topic, 1)], timeout=30)
    other = consumer(kafka_cluster, f"{kafka_topic}-other").committed([confluent_kafka.TopicPartition(kafka_topic, 1)], timeout=30)
    assert [t.offset for t in again] == [42]
    assert [t.offset for t in other] == [confluent_kafka.OFFSET_INVALID]


def test_transactions_commit_and_abort(kafka_cluster: MockKafkaCluster, kafka_topic: str) -> None:
    """Committed transactions are read; records aborted before they were sent never arrive; commit markers take offsets."""
    kafka_cluster.create_topic(kafka_topic, 1)
    producer = confluent_kafka.Producer(kafka_cluster.config(transactional_id=f"{kafka_topic}-tx"))
    producer.init_transactions(30)
    for word, commit in (("kept-1", True), ("dropped", False), ("kept-2", True)):
        producer.begin_transaction()
        producer.produce(kafka_topic, word.encode(), partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    records = kafka_cluster.records(kafka_topic, 0)
    assert [(offset, value) for offset, _, value, _ in records] == [(0, b"kept-1"), (2, b"kept-2")]
    view = KafkaClusterView(kafka_cluster.config())
    tp = TopicAndPartition(kafka_topic, 0)
    assert view.latest_offsets([tp]) == {tp: 4}


def test_the_mock_does_not_isolate_open_transactions(kafka_cluster: MockKafkaCluster, kafka_topic: str) -> None:
    """The known gap, pinned: read_committed sees an open transaction's flushed records (a real broker hides them)."""
    kafka_cluster.create_topic(kafka_topic, 1)
    kafka_cluster.produce(kafka_topic, [b"a", b"b"], partition=0)
    producer = confluent_kafka.Producer(kafka_cluster.config(transactional_id=f"{kafka_topic}-open"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(kafka_topic, b"pending", partition=0)
    producer.flush(30)
    view = KafkaClusterView(kafka_cluster.config())
    tp = TopicAndPartition(kafka_topic, 0)
    assert view.latest_offsets([tp], committed_only=True) == {tp: 3}  # a real broker: 2 (the last stable offset)
    reader = consumer(kafka_cluster, f"{kafka_topic}-rc", isolation_level="read_committed")
    assert read_all(reader, kafka_topic, 0, 0, 3)[-1] == (2, b"pending")
    producer.abort_transaction(30)


def test_deleting_records_moves_the_log_start(kafka_cluster: MockKafkaCluster, kafka_topic: str) -> None:
    """delete_records (retention) moves a partition's first offset and makes older offsets out of range."""
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, [str(i).encode() for i in range(50)], partition=0)
    kafka_cluster.delete_records(kafka_topic, 0, 20)
    view = KafkaClusterView(kafka_cluster.config())
    tps = [TopicAndPartition(kafka_topic, p) for p in range(2)]
    assert view.earliest_offsets(tps) == dict(zip(tps, (20, 0), strict=True))
    assert view.latest_offsets(tps) == dict(zip(tps, (50, 0), strict=True))
    assert [offset for offset, _, _, _ in kafka_cluster.records(kafka_topic, 0)] == list(range(20, 50))


def test_deleting_a_topic_removes_it_from_the_metadata(kafka_cluster: MockKafkaCluster, kafka_topic: str) -> None:
    """A deleted topic is gone from the cluster's metadata, and the cluster's own producer does not bring it back.

    A client that knew the topic asks for it by name again and the mock creates it anew (4
    partitions): the shared producer, which create_topic has asked for the new topic, did so in
    one round in ten to fifty while delete_topic left it open, and in one round of a CI run's
    many when a request it sent before the delete reached the mock after it (it now never lets
    the mock create a topic). 200 rounds catch the first.
    """
    for round_ in range(200):
        topic = f"{kafka_topic}-{round_}"
        kafka_cluster.create_topic(topic, 2)
        kafka_cluster.delete_topic(topic)
        assert KafkaClusterView(kafka_cluster.config()).partitions([topic]) == {topic: None}, f"round {round_}"
        assert kafka_cluster.partition_count(topic) == 0


def test_added_partitions_keep_every_record_at_its_offset(kafka_cluster: MockKafkaCluster, kafka_topic: str) -> None:
    """The emulated CreatePartitions keeps each old partition's records, offsets, keys, timestamps and log start."""
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, [f"v{i}".encode() for i in range(30)], keys=[f"k{i}".encode() for i in range(30)],
                          timestamps_ms=[1_000 + i for i in range(30)], partition=0)
    kafka_cluster.produce(kafka_topic, [b"only"], partition=1)
    kafka_cluster.delete_records(kafka_topic, 0, 10)
    before = [kafka_cluster.records(kafka_topic, p) for p in range(2)]
    kafka_cluster.add_partitions(kafka_topic, 4)
    assert kafka_cluster.partition_count(kafka_topic) == 4
    assert [kafka_cluster.records(kafka_topic, p) for p in range(2)] == before
    assert before[0][0] == (10, b"k10", b"v10", 1_010)
    view = KafkaClusterView(kafka_cluster.config())
    tps = [TopicAndPartition(kafka_topic, p) for p in range(4)]
    assert view.earliest_offsets(tps) == dict(zip(tps, (10, 0, 0, 0), strict=True))
    assert view.latest_offsets(tps) == dict(zip(tps, (30, 1, 0, 0), strict=True))
    kafka_cluster.produce(kafka_topic, [b"new"], partition=3)
    assert kafka_cluster.records(kafka_topic, 3) == [(0, None, b"new", kafka_cluster.records(kafka_topic, 3)[0][3])]


def test_control_function_errors_are_clear(kafka_cluster: MockKafkaCluster, kafka_topic: str) -> None:
    """Creating a topic twice, adding too few partitions, or growing a missing topic say what is wrong."""
    kafka_cluster.create_topic(kafka_topic, 2)
    with pytest.raises(KafkaError, match=rf"^creating topic '{kafka_topic}': Broker: Topic already exists$"):
        kafka_cluster.create_topic(kafka_topic, 2)
    with pytest.raises(ValueError, match=rf"^'{kafka_topic}' has 2 partitions already; total must be larger, got 2$"):
        kafka_cluster.add_partitions(kafka_topic, 2)
    with pytest.raises(KafkaError, match=r"^cannot add partitions to 'no-such-topic-x': no such topic$"):
        kafka_cluster.add_partitions("no-such-topic-x", 3)
    with pytest.raises(ValueError, match=r"^partitions must be a positive int, got 0$"):
        kafka_cluster.create_topic(kafka_topic + "-z", 0)


def test_producing_to_a_missing_topic_is_refused_and_does_not_create_it(kafka_cluster: MockKafkaCluster,
                                                                        kafka_topic: str) -> None:
    """produce names a topic nobody created (or one deleted) at once, and the mock does not create it on the way."""
    with pytest.raises(KafkaError, match=rf"^producing to '{kafka_topic}': no such topic \(create it with create_topic first\)$"):
        kafka_cluster.produce(kafka_topic, [b"x"])
    assert kafka_cluster.partition_count(kafka_topic) == 0
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, [b"x"], partition=1)
    kafka_cluster.delete_topic(kafka_topic)
    with pytest.raises(KafkaError, match="no such topic"):
        kafka_cluster.produce(kafka_topic, [b"y"])
    assert kafka_cluster.partition_count(kafka_topic) == 0


def test_a_closed_cluster_refuses_work() -> None:
    """After close, control calls fail with a clear error instead of touching freed memory."""
    cluster = MockKafkaCluster()
    assert cluster.bootstrap_servers.startswith("127.0.0.1:")
    cluster.close()
    cluster.close()  # twice is fine
    with pytest.raises(KafkaError, match=r"^the mock cluster is closed$"):
        cluster.create_topic("t", 1)
    assert repr(cluster).endswith(" closed>")
