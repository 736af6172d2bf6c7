"""The Kafka sink's writer on the mock broker: idempotent writes, transactions with commit markers, re-runs and crashes.

Every read here is ``read_committed``, as the sink's documentation asks of its consumers.
"""

from __future__ import annotations

from typing import Any

import pytest

from streaming.kafka import KafkaError, WriteResult, close_writers, utf8_encoder
from streaming.kafka._markers import MarkerStore, MarkerValue, marker_key
from streaming.kafka._writer import sink_settings, write_records

pytestmark = pytest.mark.timeout(120)


def read_committed(cluster: Any, topic: str, partitions: int = 3) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """Every partition's (key, value) records, as a read_committed consumer sees them."""
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "sinks-check",
                            "isolation.level": "read_committed", "enable.auto.commit": False,
                            "fetch.wait.max.ms": 10})
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    try:
        for partition in range(partitions):
            tp = ck.TopicPartition(topic, partition)
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            rows: list[tuple[bytes | None, bytes | None]] = []
            consumer.assign([ck.TopicPartition(topic, partition, 0)])
            while high and consumer.position([tp])[0].offset < high:
                for message in consumer.consume(1000, 0.2):
                    assert message.error() is None
                    rows.append((message.key(), message.value()))
            out[partition] = rows
    finally:
        consumer.close()
    return out


def all_values(partitions: dict[int, list[tuple[bytes | None, bytes | None]]]) -> list[bytes | None]:
    """Every value, partition after partition."""
    return [value for rows in partitions.values() for _, value in rows]


@pytest.fixture
def topics(kafka_cluster: Any, kafka_topic: str) -> tuple[str, str]:
    """A fresh output topic of 3 partitions and a fresh one-partition marker topic."""
    kafka_cluster.create_topic(kafka_topic, 3)
    kafka_cluster.create_topic(kafka_topic + "-markers", 1)
    yield kafka_topic, kafka_topic + "-markers"
    close_writers()


def test_idempotent_records_land_complete_in_order_per_partition_with_their_keys(kafka_cluster: Any, topics: tuple[str, str]) -> None:
    """Idempotent mode: every record once, keys kept, each key's records in one partition in write order."""
    topic, _ = topics
    settings = sink_settings(topic, kafka_cluster.config(), key=lambda r: f"k{r % 4}", value=lambda r: f"v{r}")
    result = write_records(settings, 0, None, range(40))
    assert result == WriteResult(0, None, 40)
    partitions = read_committed(kafka_cluster, topic)
    found = sorted((key, value) for rows in partitions.values() for key, value in rows)
    assert found == sorted((f"k{r % 4}".encode(), f"v{r}".encode()) for r in range(40))
    for rows in partitions.values():
        for k in {key for key, _ in rows}:
            assert [v for key, v in rows if key == k] == [f"v{r}".encode() for r in range(40) if f"k{r % 4}".encode() == k]
    assert len({p for p, rows in partitions.items() for key, _ in rows if key == b"k1"}) == 1


def test_idempotent_rerun_duplicates_exactly_the_rerun_batch(kafka_cluster: Any, topics: tuple[str, str]) -> None:
    """Idempotent mode is at least once: a batch written twice is there twice, the other batch once."""
    topic, _ = topics
    settings = sink_settings(topic, kafka_cluster.config())
    write_records(settings, 0, 1000, ["a", "b"])
    write_records(settings, 0, 2000, ["c"])
    write_records(settings, 0, 2000, ["c"])
    assert sorted(all_values(read_committed(kafka_cluster, topic))) == [b"a", b"b", b"c", b"c"]


def transactional(cluster: Any, topics: tuple[str, str], sink_id: str = "q1") -> Any:
    """Settings of a transactional sink on the fixture's topics."""
    topic, markers = topics
    return sink_settings(topic, cluster.config(), transactional=True, sink_id=sink_id, marker_topic=markers)


def test_transactional_batch_run_twice_is_written_once(kafka_cluster: Any, topics: tuple[str, str]) -> None:
    """Transactional mode: the second run of a committed batch is skipped; the next batch is written."""
    topic, markers = topics
    settings = transactional(kafka_cluster, topics)
    assert write_records(settings, 0, 1000, ["a", "b"]) == WriteResult(0, 1000, 2)
    assert write_records(settings, 0, 1000, ["a", "b"]) == WriteResult(0, 1000, 0, skipped=True)
    assert write_records(settings, 0, 2000, ["c"]) == WriteResult(0, 2000, 1)
    assert sorted(all_values(read_committed(kafka_cluster, topic))) == [b"a", b"b", b"c"]
    marker = read_committed(kafka_cluster, markers, 1)[0]
    assert [(k, MarkerValue.decode(v).batches) for k, v in marker] == [(b"q1/0", (1000,)), (b"q1/0", (1000, 2000))]


def test_a_rerun_in_a_fresh_process_reads_the_marker_back_and_skips(kafka_cluster: Any, topics: tuple[str, str]) -> None:
    """The skip does not rely on the process's cache: with the writers dropped, the marker topic says the batch is done."""
    topic, _ = topics
    settings = transactional(kafka_cluster, topics)
    write_records(settings, 1, 1000, ["a"])
    close_writers()
    assert write_records(settings, 1, 1000, ["a"]).skipped
    assert write_records(settings, 0, 1000, ["b"]) == WriteResult(0, 1000, 1)  # another task's marker is its own
    assert sorted(all_values(read_committed(kafka_cluster, topic))) == [b"a", b"b"]


def test_a_crash_between_write_and_commit_leaves_nothing_and_the_rerun_writes_once(kafka_cluster: Any,
                                                                                    topics: tuple[str, str]) -> None:
    """An error before the commit aborts the transaction: read_committed sees nothing; the re-run writes the batch once.

    The records are held in the client (a long linger) until the abort drops them: the mock broker
    would return records of an aborted transaction that reached it (see the test below).
    """
    topic, markers = topics
    settings = sink_settings(topic, kafka_cluster.config(linger_ms=30_000), transactional=True, sink_id="q1",
                             marker_topic=markers)

    def crash() -> None:
        raise RuntimeError("killed before commit")

    write_records(settings, 0, 1000, ["a"])
    with pytest.raises(RuntimeError, match=r"^killed before commit$"):
        write_records(settings, 0, 2000, ["b", "c"], before_commit=crash)
    assert all_values(read_committed(kafka_cluster, topic)) == [b"a"]
    assert write_records(settings, 0, 2000, ["b", "c"]) == WriteResult(0, 2000, 2)
    assert write_records(settings, 0, 2000, ["b", "c"]).skipped
    assert sorted(all_values(read_committed(kafka_cluster, topic))) == [b"a", b"b", b"c"]


def test_the_mock_broker_shows_aborted_records_that_reached_it(kafka_cluster: Any, kafka_topic: str) -> None:
    """The mock's gap, pinned: no read_committed isolation, so an aborted transaction's sent records stay visible."""
    import confluent_kafka as ck

    kafka_cluster.create_topic(kafka_topic, 1)
    producer = ck.Producer(kafka_cluster.config(transactional_id=f"gap-{kafka_topic}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(kafka_topic, b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    assert all_values(read_committed(kafka_cluster, kafka_topic, 1)) == [b"aborted"]


def test_a_failed_transaction_is_aborted_and_the_next_batch_is_written(kafka_cluster: Any, topics: tuple[str, str]) -> None:
    """A record the client refuses fails the batch with a KafkaError naming the transaction; nothing of it is visible.

    A long linger holds the batch's first record in the client until the abort drops it (the mock shows sent ones).
    """
    topic, markers = topics
    settings = sink_settings(topic, kafka_cluster.config(linger_ms=30_000), transactional=True, sink_id="q1",
                             marker_topic=markers)
    with pytest.raises(KafkaError) as caught:
        write_records(settings, 0, 1000, ["a", "x" * 2_000_000])
    assert str(caught.value).startswith(
        f"the transaction of 'aiodstream-q1-0' writing to {topic!r} failed and was aborted: KafkaError{{code=MSG_SIZE_TOO_LARGE")
    assert write_records(settings, 0, 2000, ["b"]) == WriteResult(0, 2000, 1)
    assert all_values(read_committed(kafka_cluster, topic)) == [b"b"]


def test_batches_committed_out_of_order_are_each_remembered(kafka_cluster: Any, topics: tuple[str, str]) -> None:
    """With concurrent jobs a later batch may commit first: the earlier one is still written, then skipped on re-run."""
    topic, _ = topics
    settings = transactional(kafka_cluster, topics)
    write_records(settings, 0, 2000, ["late"])
    assert write_records(settings, 0, 1000, ["early"]) == WriteResult(0, 1000, 1)
    assert write_records(settings, 0, 1000, ["early"]).skipped
    assert sorted(all_values(read_committed(kafka_cluster, topic))) == [b"early", b"late"]


def test_an_empty_task_writes_no_transaction_and_no_marker(kafka_cluster: Any, topics: tuple[str, str]) -> None:
    """A task without records returns at once: nothing to write twice, so neither a transaction nor a marker."""
    _, markers = topics
    settings = transactional(kafka_cluster, topics)
    assert write_records(settings, 0, 1000, iter([])) == WriteResult(0, 1000, 0)
    assert read_committed(kafka_cluster, markers, 1) == {0: []}


def test_concurrent_batches_of_one_task_in_threads_both_stay_in_the_marker(kafka_cluster: Any,
                                                                          topics: tuple[str, str]) -> None:
    """Two threads writing batches of the same task (a Pipeline's concurrent jobs) take turns: the marker keeps both."""
    from concurrent.futures import ThreadPoolExecutor

    topic, markers = topics
    settings = transactional(kafka_cluster, topics)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda b: write_records(settings, 0, b, [str(b)]), [1000, 2000, 3000, 4000]))
    assert [r.records for r in results] == [1, 1, 1, 1]
    assert sorted(all_values(read_committed(kafka_cluster, topic))) == [b"1000", b"2000", b"3000", b"4000"]
    *_, (_, last) = read_committed(kafka_cluster, markers, 1)[0]
    assert MarkerValue.decode(last).batches == (1000, 2000, 3000, 4000)


def test_a_missing_marker_topic_is_an_error_that_says_how_to_create_it(kafka_cluster: Any, kafka_topic: str) -> None:
    """Transactional mode without its marker topic fails before writing, naming the topic and the command."""
    kafka_cluster.create_topic(kafka_topic, 1)
    settings = sink_settings(kafka_topic, kafka_cluster.config(), transactional=True, sink_id="q",
                             marker_topic=kafka_topic + "-none")
    try:
        with pytest.raises(KafkaError) as caught:
            write_records(settings, 0, 1000, ["a"])
    finally:
        close_writers()
    name = kafka_topic + "-none"
    assert str(caught.value).startswith(
        f"the commit-marker topic {name!r} does not exist")
    assert str(caught.value).endswith(
        f"create it compacted, e.g. kafka-topics.sh --create --topic {name} --partitions 1 --config cleanup.policy=compact")
    assert all_values(read_committed(kafka_cluster, kafka_topic, 1)) == []


def test_the_marker_store_reads_only_what_was_added_since_its_last_question(kafka_cluster: Any, topics: tuple[str, str]) -> None:
    """A second question reads the new markers only: the cost of a check is bounded by what was written since."""
    _, markers = topics
    settings = transactional(kafka_cluster, topics)
    for batch in (1000, 2000, 3000):
        write_records(settings, 0, batch, ["x"])
    store = MarkerStore(kafka_cluster.config(), markers)
    try:
        assert store.marker(marker_key("q1", 0)).batches == (1000, 2000, 3000)
        first = store.records_read
        write_records(settings, 0, 4000, ["y"])
        assert store.marker(marker_key("q1", 0)).batches == (1000, 2000, 3000, 4000)
        assert (first, store.records_read - first) == (3, 1)
    finally:
        store.close()


# -- pure --


def test_marker_value_keeps_a_window_of_recent_batches() -> None:
    """A marker remembers 64 batches; once full, anything older counts as committed, anything unseen newer does not."""
    value = MarkerValue()
    for batch in range(1, 71):
        value = value.adding(batch * 10)
    assert value.batches == tuple(range(70, 710, 10)) and value.full
    assert value.committed(10) and value.committed(700) and not value.committed(705) and not value.committed(710)
    assert MarkerValue.decode(value.encode()) == value
    assert not MarkerValue((50,)).committed(40)


def test_a_foreign_marker_record_is_refused() -> None:
    """A marker topic holding other records is an error naming the record."""
    with pytest.raises(KafkaError) as caught:
        MarkerValue.decode(b"hello")
    assert str(caught.value) == ("a commit marker is not one this sink wrote (b'hello'): Expecting value: line 1 column 1 "
                                 "(char 0); the marker topic must hold only this sink's markers")


def test_utf8_encoder() -> None:
    """The default serialiser: str(x) in UTF-8, bytes kept, None kept."""
    assert [utf8_encoder(x) for x in ("é", 3, b"\x00", None)] == ["é".encode(), b"3", b"\x00", None]


BROKERS = {"bootstrap.servers": "127.0.0.1:1"}


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"topic": ""}, TypeError, "topic must be a non-empty str, got ''"),
    ({"key": "k"}, TypeError, "key must be a function of a record returning its key (bytes, str or None), got 'k'"),
    ({"value": 1}, TypeError, "value must be a function of a record returning its value (bytes, str or None), got 1"),
    ({"kafkaParams": {}}, ValueError, "Must specify metadata.broker.list or bootstrap.servers"),
    ({"kafkaParams": {**BROKERS, "acks": "1"}}, ValueError,
     "the Kafka sink sets acks itself (idempotent, or transactional with transactional=True and sink_id=), got acks='1'; "
     "remove it from kafkaParams"),
    ({"transactional": 1}, TypeError, "transactional must be a bool, got 1"),
    ({"transactional": True}, ValueError,
     "transactional=True needs sink_id=: a name of this sink that stays the same across restarts of its query and that no "
     "other live sink uses (it keys the transactional.ids and commit markers)"),
    ({"sink_id": 7}, TypeError, "sink_id must be a str, got 7"),
    ({"sink_id": "a/b"}, ValueError, "sink_id must be a non-empty str without '/', got 'a/b'"),
    ({"marker_topic": ""}, TypeError, "marker_topic must be a non-empty str, got ''"),
])
def test_argument_errors(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    """Each bad argument is refused with the rule, the value and the fix."""
    args: dict[str, Any] = {"topic": "t", "kafkaParams": BROKERS, **kwargs}
    with pytest.raises(error) as caught:
        sink_settings(args.pop("topic"), args.pop("kafkaParams"), **args)
    assert str(caught.value) == message


def test_a_serialiser_returning_another_type_is_a_type_error() -> None:
    """A value serialiser must return bytes, str or None."""
    settings = sink_settings("t", BROKERS, value=lambda r: r)
    assert settings.encode("x") == (None, b"x")
    with pytest.raises(TypeError) as caught:
        settings.encode(3)
    assert str(caught.value) == ("the Kafka sink's value serialiser must return bytes, str or None, got int 3; return e.g. "
                                 "str(x).encode()")
