"""pyspark 2.4's KafkaUtils surface without Spark: argument checks with pyspark's and Spark's messages, message handlers' records,
and the commitAsync queue."""

from __future__ import annotations

import pickle
import re
from typing import Any

import pytest

from streaming.kafka import KafkaMessageAndMetadata, KafkaUtils, OffsetRange, TopicAndPartition, utf8_decoder
from streaming.kafka._commits import CommitQueue
from streaming.kafka._utils import CREATE_STREAM_REFUSED

BROKERS = {"metadata.broker.list": "127.0.0.1:9"}


class RecordingContext:
    """Stands for a StreamingContext: records what createDirectStream hands to ``inputStream``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def inputStream(self, factory: Any, *args: Any) -> str:
        self.calls.append((factory.__name__, *args))
        return "stream"


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: KafkaUtils.createDirectStream(None, "t", BROKERS), TypeError, "topics should be list"),
    (lambda: KafkaUtils.createDirectStream(None, ["t"], [("metadata.broker.list", "h:9")]), TypeError, "kafkaParams should be dict"),
    (lambda: KafkaUtils.createDirectStream(None, ["t"], {"group.id": "g"}), ValueError,
     "Must specify metadata.broker.list or bootstrap.servers"),
    (lambda: KafkaUtils.createDirectStream(None, ["a", "b"], BROKERS, {TopicAndPartition("a", 0): 5}), ValueError,
     "The specified topics: a b do not equal to the topic from offsets: a"),
    (lambda: KafkaUtils.createDirectStream(None, ["t"], {**BROKERS, "auto.offset.reset": "first"}), ValueError,
     "auto.offset.reset must be one of smallest, largest, earliest or latest, got 'first'"),
    (lambda: KafkaUtils.createDirectStream(None, ["t"], {**BROKERS, "failOnDataLoss": "maybe"}), ValueError,
     "kafkaParams' failOnDataLoss must be 'true' or 'false', got 'maybe'"),
    (lambda: KafkaUtils.createDirectStream(None, ["t"], BROKERS, {("t", 0): 5}), TypeError,
     "fromOffsets keys should be TopicAndPartition, got ('t', 0)"),
    (lambda: KafkaUtils.createDirectStream(None, [], BROKERS), ValueError, "topics should list one or more topic names, got []"),
    (lambda: KafkaUtils.createRDD(None, [("metadata.broker.list", "h:9")], []), TypeError, "kafkaParams should be dict"),
    (lambda: KafkaUtils.createRDD(None, BROKERS, (OffsetRange("t", 0, 0, 1),)), TypeError, "offsetRanges should be list"),
    (lambda: KafkaUtils.createStream(None, "zk:2181", "g", {"t": 1}), NotImplementedError, CREATE_STREAM_REFUSED),
])
def test_bad_arguments_are_refused_with_pysparks_or_sparks_message(call: Any, error: type[Exception], message: str) -> None:
    """Each bad call raises pyspark 2.4's exception type and message (Spark's where the JVM checked), before any I/O."""
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call()


def test_create_stream_names_the_direct_stream() -> None:
    """The refusal of the receiver API says what to use instead."""
    assert "use KafkaUtils.createDirectStream(ssc, topics, kafkaParams)" in CREATE_STREAM_REFUSED


@pytest.mark.parametrize("brokers", [{"metadata.broker.list": "h:9"}, {"bootstrap.servers": "h:9"}])
def test_either_brokers_spelling_makes_a_stream_through_the_contexts_input_seam(brokers: dict[str, str]) -> None:
    """0.8's metadata.broker.list and librdkafka's bootstrap.servers both make a stream; the context's inputStream gets the
    checked arguments (topics, params with failOnDataLoss, fromOffsets, decoders, handler)."""
    ssc = RecordingContext()
    offsets = {TopicAndPartition("t", 0): 3}
    assert KafkaUtils.createDirectStream(ssc, ["t"], {**brokers, "failOnDataLoss": "false"}, offsets) == "stream"
    assert ssc.calls == [("direct_kafka_stream", ["t"], {**brokers, "failOnDataLoss": "false"}, offsets, utf8_decoder, utf8_decoder,
                          None)]


def test_a_message_handler_reads_decoded_key_and_message_and_metadata() -> None:
    """key and message are decoded by the stream's decoders when read (pyspark 2.4's properties); the raw bytes stay."""
    m = KafkaMessageAndMetadata("t", 1, 7, b"k", b"v", 1234, value_decoder=lambda b: b.upper())
    assert (m.topic, m.partition, m.offset, m.key, m.message, m.raw_message, m.timestamp_ms) == ("t", 1, 7, "k", b"V", b"v", 1234)
    assert str(m) == "KafkaMessageAndMetadata(topic: t, partition: 1, offset: 7, key and message...)"
    copy = pickle.loads(pickle.dumps(m))  # as pyspark 2.4's: the bytes travel, the decoders do not
    assert (copy.key, copy.message, copy.timestamp_ms) == ("k", "v", 1234)
    assert KafkaMessageAndMetadata("t", 0, 0, None, None).key is None


def test_commit_queue_merges_each_partitions_highest_end_and_keeps_the_newest_calls_callback() -> None:
    """Spark's commitAll: per partition the highest untilOffset queued; the queue is empty afterwards. The callback is
    the newest call's, as Spark's ``commitCallback.set(callback)``: a call without one leaves none (lane L1: the one
    before was kept)."""
    queue = CommitQueue({**BROKERS, "group.id": "g"})

    def first(offsets: Any, error: Any) -> None: ...
    def second(offsets: Any, error: Any) -> None: ...

    queue.add([OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 0, 2)], first)
    queue.add([OffsetRange("t", 0, 5, 4 + 5)], second)
    assert queue.take() == ({TopicAndPartition("t", 0): 9, TopicAndPartition("t", 1): 2}, second)
    assert queue.take() == ({}, second)
    queue.add([OffsetRange("t", 0, 0, 3)], None)
    assert queue.take() == ({TopicAndPartition("t", 0): 3}, None)


def test_commit_async_needs_a_group_and_offset_ranges() -> None:
    """Without group.id there is no group to commit to; a list of OffsetRange is required."""
    message = ("commitAsync commits to the consumer group named by kafkaParams' group.id, and they have none; pass e.g. "
               "{'group.id': 'my-app', ...} to createDirectStream")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        CommitQueue(BROKERS).add([OffsetRange("t", 0, 0, 1)], None)
    with pytest.raises(TypeError, match=r"^offsetRanges should be a list of OffsetRange, got \[\('t', 0, 0, 1\)\]$"):
        CommitQueue({**BROKERS, "group.id": "g"}).add([("t", 0, 0, 1)], None)  # type: ignore[list-item]
