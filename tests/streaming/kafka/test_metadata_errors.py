"""A topic whose metadata fails for a while (no leader, a broker moving) is not a deleted topic (mock broker, no Spark).

Taken for gone, its partitions would leave the logged offsets and come back as new partitions,
read again from their first record (the DStream and the micro-batch source), or a reader would
skip the rest of its range, or a query with ``failOnDataLoss`` would fail for nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from streaming.kafka._client import KafkaClusterView, MetadataUnavailableError
from streaming.kafka._offsets import OffsetRange
from streaming.kafka._reader import RangeReader

LEADER_NOT_AVAILABLE = 5
TOPIC_AUTHORIZATION_FAILED = 29


@pytest.fixture
def view(kafka_cluster: Any) -> Any:
    made = KafkaClusterView(kafka_cluster.config(), timeout_s=30)
    yield made
    made.close()


def test_a_topic_whose_metadata_has_no_leader_for_a_while_is_asked_again_and_keeps_its_partitions(
        kafka_cluster: Any, kafka_topic: str, view: Any) -> None:
    """A retriable error is asked again (here it clears at the first pause): the same partitions, never ``None``."""
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.set_topic_error(kafka_topic, LEADER_NOT_AVAILABLE)
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        kafka_cluster.set_topic_error(kafka_topic, 0)  # the leader is back

    view._sleep = pause
    assert view.partitions([kafka_topic]) == {kafka_topic: [0, 1]}
    assert len(pauses) == 1


def test_a_topic_whose_metadata_keeps_failing_is_an_error_not_a_topic_gone(kafka_cluster: Any, kafka_topic: str) -> None:
    """Past the view's timeout a retriable error is raised; an error that asking again cannot mend (authorization) at
    once; a topic the cluster does not have is still ``None``."""
    kafka_cluster.create_topic(kafka_topic, 1)
    short = KafkaClusterView(kafka_cluster.config(), timeout_s=0.3)
    try:
        kafka_cluster.set_topic_error(kafka_topic, LEADER_NOT_AVAILABLE)
        with pytest.raises(MetadataUnavailableError, match=f"the metadata of topic '{kafka_topic}' failed") as raised:
            short.partitions([kafka_topic])
        assert raised.value.retriable
        kafka_cluster.set_topic_error(kafka_topic, TOPIC_AUTHORIZATION_FAILED)
        pauses: list[float] = []
        short._sleep = pauses.append
        with pytest.raises(MetadataUnavailableError) as raised:
            short.partitions([kafka_topic])
        assert not raised.value.retriable and pauses == []
        kafka_cluster.set_topic_error(kafka_topic, 0)
        assert short.partitions([kafka_topic, kafka_topic + "-absent"]) == {kafka_topic: [0], kafka_topic + "-absent": None}
    finally:
        kafka_cluster.set_topic_error(kafka_topic, 0)
        short.close()


def test_a_range_reader_takes_a_failing_topic_metadata_for_no_answer_and_a_deleted_topic_for_gone(
        kafka_cluster: Any, kafka_topic: str) -> None:
    """The reader's check for a partition gone (a deleted topic gives an assigned consumer no error) says gone only when
    the metadata says the topic is not there."""
    kafka_cluster.create_topic(kafka_topic, 1)
    reader = RangeReader(kafka_cluster.config(**{"group.id": "metadata-errors"}))
    rng = OffsetRange(kafka_topic, 0, 0, 5)
    try:
        assert reader._partition_exists(rng)
        kafka_cluster.set_topic_error(kafka_topic, LEADER_NOT_AVAILABLE)
        assert reader._partition_exists(rng)
        kafka_cluster.set_topic_error(kafka_topic, 0)
        assert not reader._partition_exists(OffsetRange(kafka_topic, 1, 0, 5))
        kafka_cluster.delete_topic(kafka_topic)
        assert not reader._partition_exists(rng)
    finally:
        kafka_cluster.set_topic_error(kafka_topic, 0)
        reader.close()


def test_unreachable_brokers_are_no_answer_to_a_readers_check_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """With its broker down, the metadata request fails (librdkafka's transport error, raised by the client): that is no
    answer, as a topic's failing metadata is, so a reader's range reads on until its poll timeout, and a continuous
    source's partition check asks again later (both call ``partitions_now``); it used to escape as a raw
    ``confluent_kafka.KafkaException`` and fail the batch, or end the continuous query, after 30 s."""
    from streaming.kafka import _client
    from streaming.kafka.testing import MockKafkaCluster

    monkeypatch.setattr(_client, "METADATA_REQUEST_TIMEOUT_S", 1.0)
    with MockKafkaCluster() as cluster:
        cluster.create_topic("down", 1)
        reader = RangeReader(cluster.config(**{"group.id": "metadata-errors"}))
        rng = OffsetRange("down", 0, 0, 5)
        try:
            assert reader._partition_exists(rng)
            cluster.set_broker_up(1, False)
            with pytest.raises(MetadataUnavailableError, match="the metadata of topic 'down' failed") as raised:
                _client.partitions_now(reader._consumer, "down")
            assert raised.value.retriable
            assert reader._partition_exists(rng)  # no answer: read on
            cluster.set_broker_up(1, True)
        finally:
            reader.close()
