"""pyspark 2.4's Kafka value types, the offsets log's Kafka JSON, and Kafka parameters in both spellings (no broker, no Spark)."""

from __future__ import annotations

import logging
import pickle
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import CorruptCheckpointError
from streaming.kafka import OffsetRange, TopicAndPartition, utf8_decoder
from streaming.kafka._client import client_config, offset_reset
from streaming.kafka._offsets import format_partition_offsets, parse_partition_offsets, ranges_between


def test_offset_range_reads_and_prints_as_pyspark() -> None:
    """OffsetRange keeps pyspark 2.4's attribute names, equality and text, and survives pickling."""
    r = OffsetRange("words", 2, 5, 9)
    assert (r.topic, r.partition, r.fromOffset, r.untilOffset, r.count) == ("words", 2, 5, 9, 4)
    assert str(r) == "OffsetRange(topic: words, partition: 2, range: [5 -> 9])"
    assert r == OffsetRange("words", 2, 5, 9) != OffsetRange("words", 2, 5, 10)
    assert pickle.loads(pickle.dumps(r)) == r
    assert r.topicAndPartition() == TopicAndPartition("words", 2)


def test_offset_range_refuses_bad_bounds() -> None:
    """A range ending before it starts, or negative offsets, are refused with the values named."""
    with pytest.raises(ValueError, match=r"^untilOffset 3 is before fromOffset 5 for t-0$"):
        OffsetRange("t", 0, 5, 3)
    with pytest.raises(ValueError, match=r"^fromOffset must be a non-negative int, got -1$"):
        OffsetRange("t", 0, -1, 3)
    with pytest.raises(TypeError, match=r"^partition must be a non-negative int, got '0'$"):
        TopicAndPartition("t", "0")  # type: ignore[arg-type]


def test_topic_and_partition_is_a_dict_key() -> None:
    """TopicAndPartition hashes and compares by value (fromOffsets is a dict keyed by it) and sorts by topic, then partition."""
    offsets = {TopicAndPartition("a", 1): 3}
    assert offsets[TopicAndPartition("a", 1)] == 3
    assert sorted([TopicAndPartition("b", 0), TopicAndPartition("a", 10), TopicAndPartition("a", 2)]) == \
        [TopicAndPartition("a", 2), TopicAndPartition("a", 10), TopicAndPartition("b", 0)]


def test_offsets_text_is_structured_streamings_and_canonical() -> None:
    """Offsets are logged as {"topic":{"partition":offset}}, topics and partitions in order, whatever order they came in."""
    offsets = {TopicAndPartition("b", 0): 7, TopicAndPartition("a", 10): 1, TopicAndPartition("a", 2): 23}
    text = format_partition_offsets(offsets)
    assert text == '{"a":{"2":23,"10":1},"b":{"0":7}}'
    assert parse_partition_offsets(text) == offsets
    assert parse_partition_offsets(None) == {}


@given(st.dictionaries(st.tuples(st.text("abc._-", min_size=1, max_size=5), st.integers(0, 50)), st.integers(0, 2**63 - 1)))
def test_offsets_text_round_trips(raw: dict[tuple[str, int], int]) -> None:
    """Any offsets survive the log's text unchanged."""
    offsets = {TopicAndPartition(t, p): o for (t, p), o in raw.items()}
    assert parse_partition_offsets(format_partition_offsets(offsets)) == offsets


@pytest.mark.parametrize(("text", "message"), [
    ("not json", r"^Kafka: the offsets log holds 'not json', which is not Kafka offsets JSON: "),
    ("[1]", r"""^Kafka: expected \{"topic":\{"partition":offset\}\} in the offsets log, got '\[1\]'$"""),
    ('{"t":{"x":1}}', r"""^Kafka: bad partition offset 'x': 1 for topic 't' in the offsets log \('\{"t":\{"x":1\}\}'\)$"""),
    ('{"t":{"0":-1}}', r"""^Kafka: bad partition offset '0': -1 for topic 't' in the offsets log"""),
    ('{"t":{"\u0663":1}}', r"""^Kafka: bad partition offset '٣': 1 for topic 't' in the offsets log"""),
])
def test_malformed_offsets_text_is_a_corrupt_checkpoint(text: str, message: str) -> None:
    """Malformed Kafka offsets in the log are a CorruptCheckpointError quoting the text."""
    with pytest.raises(CorruptCheckpointError, match=message):
        parse_partition_offsets(text)


def test_ranges_between_plans_one_range_per_partition() -> None:
    """One OffsetRange per partition of the end offsets, in partition order."""
    a0, a1 = TopicAndPartition("a", 0), TopicAndPartition("a", 1)
    assert ranges_between({a0: 3, a1: 0}, {a1: 4, a0: 5}) == [OffsetRange("a", 0, 3, 5), OffsetRange("a", 1, 0, 4)]


def test_utf8_decoder_keeps_none() -> None:
    """The default decoder decodes UTF-8 and passes None (a record without key) through."""
    assert utf8_decoder("é".encode()) == "é"
    assert utf8_decoder(None) is None


def test_both_spellings_of_kafka_parameters() -> None:
    """metadata.broker.list becomes bootstrap.servers, smallest/largest become earliest/latest, JVM-only keys go."""
    config = client_config({"metadata.broker.list": "h:9092", "auto.offset.reset": "smallest",
                            "zookeeper.connect": "z:2181", "group.id": "g", "fetch.message.max.bytes": 1048576})
    assert config.pop("logger") is logging.getLogger("aiodstream.kafka.client")
    assert config == {"bootstrap.servers": "h:9092", "auto.offset.reset": "earliest", "group.id": "g",
                      "fetch.message.max.bytes": 1048576}
    assert client_config({"bootstrap.servers": "h:1", "auto.offset.reset": "largest"})["auto.offset.reset"] == "latest"
    assert offset_reset({}) == "latest"


def test_bad_kafka_parameters_say_what_is_wrong() -> None:
    """No brokers, two different brokers lists, or an unknown reset policy are refused with the rule."""
    with pytest.raises(ValueError, match=r"^Must specify metadata.broker.list or bootstrap.servers$"):
        client_config({"group.id": "g"})
    twice = r"^kafkaParams give bootstrap.servers twice: metadata.broker.list='a:1' and bootstrap.servers='b:2'; give one$"
    with pytest.raises(ValueError, match=twice):
        client_config({"metadata.broker.list": "a:1", "bootstrap.servers": "b:2"})
    with pytest.raises(ValueError, match=r"^auto.offset.reset must be one of smallest, largest, earliest or latest, got 'none'$"):
        client_config({"bootstrap.servers": "a:1", "auto.offset.reset": "none"})
    with pytest.raises(TypeError, match=r"^kafkaParams must be a dict of str to str, got list$"):
        client_config([("bootstrap.servers", "a:1")])  # type: ignore[arg-type]


def test_a_worker_without_confluent_kafka_fails_its_task_naming_its_python_and_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kafka batch's task in a Python that lacks confluent-kafka (a Connect server's worker, say) fails saying whose
    Python it is and what to install there."""
    from streaming.kafka._tasks import ExecutorReading

    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # an import of it raises ImportError
    reading = ExecutorReading({"bootstrap.servers": "127.0.0.1:9", "group.id": f"missing-{id(monkeypatch)}"}, 1.0, True)
    read = reading.task(lambda message: message)
    with pytest.raises(ImportError) as raised:
        list(read(0, [OffsetRange("t", 0, 0, 1)]))
    assert str(raised.value).startswith("Kafka support needs confluent-kafka, which is not installed: ")
    assert str(raised.value).endswith(f"(in the Spark Python worker {sys.executable} reading a Kafka batch: the Python that "
                                      "runs Spark's tasks, an executor's or a Spark Connect server's, needs aiodstream[kafka] "
                                      "installed)")
