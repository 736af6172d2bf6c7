"""write_to_kafka on Spark: a queue stream written to the mock broker from the executors, per batch, in both modes."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from scheduler import ManualClock, Time
from streaming import StreamingContext
from streaming.kafka import close_writers, write_to_kafka
from streaming.kafka._dstream_sink import KafkaOutput, batch_id_of
from streaming.kafka._markers import MarkerValue
from streaming.kafka._writer import sink_settings
from streaming.spark import batch_datetime
from tests.streaming.kafka.test_sinks_writer import read_committed

pytestmark = pytest.mark.timeout(300)

BATCHES = [[f"b1-{i}" for i in range(5)], [], [f"b3-{i}" for i in range(7)]]


def run(spark_context: Any, **options: Any) -> None:
    """Three 1 s batches of BATCHES (2 partitions each) through write_to_kafka, on a manual clock from 0."""

    async def body() -> None:
        clock = ManualClock(0)
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            rdds = [spark_context.parallelize(batch, 2) for batch in BATCHES]
            write_to_kafka(ssc.queueStream(rdds), options.pop("topic"), options.pop("params"), key=lambda r: r[:2],
                           **options)
            await ssc.start_async()
            for _ in BATCHES:
                clock.advance(1000)
                await ssc.runtime.wait_until_idle()
            await ssc.stop_async()

    anyio.run(body)


def by_batch(cluster: Any, topic: str) -> dict[bytes, list[bytes]]:
    """Every read_committed value of ``topic`` grouped by key (the batch label), sorted."""
    out: dict[bytes, list[bytes]] = {}
    for rows in read_committed(cluster, topic).values():
        for key, value in rows:
            assert key is not None and value is not None
            out.setdefault(key, []).append(value)
    return {key: sorted(values) for key, values in out.items()}


def expected(times: int = 1) -> dict[bytes, list[bytes]]:
    """What BATCHES give by key, each record ``times`` times."""
    return {label.encode(): sorted(r.encode() for r in batch for _ in range(times))
            for label, batch in (("b1", BATCHES[0]), ("b3", BATCHES[2]))}


@pytest.fixture
def topics(kafka_cluster: Any, kafka_topic: str) -> Any:
    """A fresh output topic of 3 partitions and a fresh one-partition marker topic (writers of this process dropped after)."""
    kafka_cluster.create_topic(kafka_topic, 3)
    kafka_cluster.create_topic(kafka_topic + "-markers", 1)
    yield kafka_topic, kafka_topic + "-markers"
    close_writers()


@pytest.mark.spark
def test_idempotent_dstream_output_writes_every_batch_and_a_rerun_again(spark_context: Any, kafka_cluster: Any,
                                                                       topics: Any) -> None:
    """Every batch's records land from the executors; running the same batches again writes them again (at least once)."""
    topic, _ = topics
    run(spark_context, topic=topic, params=kafka_cluster.config())
    assert by_batch(kafka_cluster, topic) == expected()
    run(spark_context, topic=topic, params=kafka_cluster.config())
    assert by_batch(kafka_cluster, topic) == expected(times=2)


@pytest.mark.spark
def test_transactional_dstream_output_writes_every_batch_once_even_when_rerun(spark_context: Any, kafka_cluster: Any,
                                                                             topics: Any) -> None:
    """Exactly once: a second run of the same batch times is skipped by every task's marker (the batch time)."""
    topic, markers = topics
    options = {"transactional": True, "sink_id": "dstream", "marker_topic": markers}
    run(spark_context, topic=topic, params=kafka_cluster.config(), **options)
    assert by_batch(kafka_cluster, topic) == expected()
    run(spark_context, topic=topic, params=kafka_cluster.config(), **options)
    assert by_batch(kafka_cluster, topic) == expected()
    latest = {key: MarkerValue.decode(value).batches for key, value in read_committed(kafka_cluster, markers, 1)[0]}
    # Each task committed the two batches with records once; the empty batch wrote nothing, not even a marker.
    assert latest == {b"dstream/0": (1000, 3000), b"dstream/1": (1000, 3000)}


def test_the_batch_id_is_the_batch_time_in_ms() -> None:
    """The datetime a foreachRDD function gets maps back to its batch's milliseconds."""
    assert batch_id_of(batch_datetime(Time(1_700_000_000_123))) == 1_700_000_000_123


def test_the_registered_output_survives_cloudpickle_as_a_checkpointed_graph_keeps_it() -> None:
    """The foreachRDD function holds only its settings, user lambdas included, and pickles with pyspark's cloudpickle."""
    import pickle

    from pyspark import cloudpickle

    output = KafkaOutput(sink_settings("t", {"bootstrap.servers": "127.0.0.1:1"}, key=lambda r: r[0],
                                       transactional=True, sink_id="s"))
    again = pickle.loads(cloudpickle.dumps(output))
    assert (again.settings.topic, again.settings.sink_id, again.settings.encode(("k", "v"))) == ("t", "s", (b"k", b"('k', 'v')"))


def test_write_to_kafka_needs_a_dstream() -> None:
    """Anything but a DStream is refused with its type."""
    with pytest.raises(TypeError) as caught:
        write_to_kafka([1, 2], "t", {"bootstrap.servers": "127.0.0.1:1"})  # type: ignore[arg-type]
    assert str(caught.value) == "write_to_kafka writes a DStream, got list"
