"""The Kafka source options and data-loss texts shared by the three engines: one rule, the same answer in each."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from scheduler import InvalidPipelineError
from streaming.kafka import KafkaContinuousSource, KafkaSource, TopicAndPartition
from streaming.kafka._data_loss import added_partition, added_partitions, offset_changed, partitions_gone, scala_set
from streaming.kafka._direct import fail_on_data_loss
from streaming.kafka._source_options import StartingOffsets, option_flag, subscribe_topics

PARAMS = {"bootstrap.servers": "127.0.0.1:9"}
EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
ENGINES: list[Callable[..., Any]] = [
    lambda subscribe, **options: KafkaSource(PARAMS, subscribe, **options),
    lambda subscribe, **options: KafkaContinuousSource(subscribe, PARAMS, **options),
]


def test_data_loss_details_are_sparks_words() -> None:
    """The details every engine reports (an added partition only if it does not start at 0); sets print as Scala prints them, sorted."""
    t0, t1 = TopicAndPartition("t", 0), TopicAndPartition("t", 1)
    assert scala_set([t1, t0]) == "Set(t-0, t-1)"
    assert added_partition(t1, 5) == "Added partition t-1 starts from 5 instead of 0. Some data may have been missed"
    assert added_partitions({t1: 5, t0: 0, TopicAndPartition("s", 0): 2}) == [added_partition(TopicAndPartition("s", 0), 2),
                                                                            added_partition(t1, 5)]
    assert partitions_gone({t1, t0}) == "Set(t-0, t-1) are gone. Some data may have been missed"
    assert offset_changed(t0, 9, 4) == "Partition t-0's offset was changed from 9 to 4, some data may have been missed"


@pytest.mark.parametrize(("value", "topics"), [
    ("a, b,,a ", ("a", "b")),
    (["b", " a", ""], ("b", "a")),
    (("x",), ("x",)),
])
def test_subscribe_is_sparks_comma_text_and_a_list_reads_as_the_text_it_joins_to(value: Any, topics: tuple[str, ...]) -> None:
    """Trimmed, empty names dropped, each topic once in the order given."""
    assert subscribe_topics(value) == topics


@pytest.mark.parametrize("make", ENGINES)
@pytest.mark.parametrize(("subscribe", "error", "message"), [
    ([" ", ""], InvalidPipelineError, "No topics to subscribe to as specified value for option 'subscribe' is ' ,'"),
    (["t", 3], TypeError, "subscribe must be a comma-separated str or a list of topic names, got ['t', 3]"),
])
def test_both_sources_refuse_a_bad_subscribe_alike(make: Callable[..., Any], subscribe: Any, error: type[Exception],
                                                    message: str) -> None:
    """The Pipeline and the continuous source give the same error for the same bad subscribe."""
    with pytest.raises(error) as caught:
        make(subscribe)
    assert type(caught.value) is error and str(caught.value) == message


@pytest.mark.parametrize("make", ENGINES)
@pytest.mark.parametrize(("starting", "shown"), [
    ("soon", "soon"),
    ('{"t":{"0":-3}}', '{"t":{"0":-3}}'),
    ({"": {"0": 1}}, '{"": {"0": 1}}'),
    ({"t": {"0": object}}, "{\"t\": {\"0\": \"<class 'object'>\"}}"),
])
def test_both_sources_refuse_a_bad_starting_offsets_alike(make: Callable[..., Any], starting: Any, shown: str) -> None:
    """Spark's "Expected e.g." message, from either source, for text, JSON and dicts alike."""
    with pytest.raises(InvalidPipelineError) as caught:
        make("t", startingOffsets=starting)
    assert str(caught.value) == f"Expected e.g. {EXAMPLE}, got {shown}"


def test_starting_offsets_json_with_no_partition_fails_where_spark_checks_it() -> None:
    """``{}`` parses (as in Spark) and then fails the every-partition rule, naming both sets."""
    starting = StartingOffsets.parse("{}")
    assert starting == StartingOffsets("specific", {}) and str(starting) == "{}"
    with pytest.raises(InvalidPipelineError) as caught:
        starting.check_partitions([TopicAndPartition("t", 0)])
    assert str(caught.value) == ("If startingOffsets contains specific offsets, you must specify all TopicPartitions.\n"
                                 "Use -1 for latest, -2 for earliest, if you don't care.\n"
                                 "Specified: Set() Assigned: Set(t-0)")


@pytest.mark.parametrize(("value", "flag"), [
    (True, True), (False, False), ("true", True), (" FALSE ", False), ("True", True),
    ("maybe", None), ("", None), (1, None), (None, None),
])
def test_a_flag_option_is_a_bool_or_true_false_text(value: object, flag: bool | None) -> None:
    """What the DStream's kafkaParams and the continuous source take for failOnDataLoss; None for anything else."""
    assert option_flag(value) is flag


def test_the_dstream_and_the_continuous_source_read_failOnDataLoss_alike() -> None:
    """The same inputs give the same flag; a bad one is refused by each with its own message (where it was given)."""
    for value, flag in (("false", False), (" True", True), (False, False)):
        assert fail_on_data_loss({"failOnDataLoss": value}) is flag
        assert KafkaContinuousSource("t", PARAMS, failOnDataLoss=value).fail_on_data_loss is flag
    assert fail_on_data_loss({}) is True
    with pytest.raises(ValueError) as direct:
        fail_on_data_loss({"failOnDataLoss": 1})
    assert str(direct.value) == "kafkaParams' failOnDataLoss must be 'true' or 'false', got 1"
    with pytest.raises(InvalidPipelineError) as continuous:
        KafkaContinuousSource("t", PARAMS, failOnDataLoss=1)  # type: ignore[arg-type]
    assert str(continuous.value) == 'For input string: "1" (failOnDataLoss must be true or false)'
