"""KafkaSource on the mock broker: per-batch contents, read limits, new partitions, data loss, restarts, threads."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import CheckpointError, ManualClock, Milliseconds, Seconds, StreamingQueryException
from streaming import Batch, FileSink, Pipeline, StreamingRuntime
from streaming.kafka import KafkaDataLossError, KafkaError, KafkaRecord, KafkaSource, TopicAndPartition
from streaming.kafka._offsets import parse_partition_offsets
from streaming.kafka._source_plan import rate_limit
from tests.support import advance, capture_events

pytestmark = pytest.mark.anyio

INSTRUCTION_TRUE = (
    "Some data may have been lost because they are not available in Kafka any more; either the data was aged out by "
    "Kafka or the topic may have been deleted before all the data in the topic was processed. If you don't want your "
    'streaming query to fail on such cases, set the source option "failOnDataLoss" to "false".')
INSTRUCTION_FALSE = INSTRUCTION_TRUE.replace("If you don't want", "If you want").replace('"false"', '"true"')


def tp(topic: str, partition: int) -> TopicAndPartition:
    return TopicAndPartition(topic, partition)


def values(records: Any) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of each record, in the order given."""
    return [(r.partition, r.offset, r.value) for r in records]


def produce(cluster: Any, topic: str, partition: int, n: int, first: int = 0) -> None:
    cluster.produce(topic, [f"{partition}:{i}" for i in range(first, first + n)], partition=partition)


def source(cluster: Any, topics: Any, **options: Any) -> KafkaSource:
    options.setdefault("startingOffsets", "earliest")
    options.setdefault("value_decoder", bytes.decode)
    return KafkaSource(cluster.config(), topics, **options)


async def read_reporting_loss(src: KafkaSource, start: Any, end: Any, detail: str, fail: bool) -> Any:
    """``src.read(start, end)`` reporting the loss ``detail``: with ``fail`` Spark's error (``None`` returned), else its
    warning, once, and the records."""
    if fail:
        with pytest.raises(KafkaDataLossError) as caught:
            await src.read(start, end)
        assert str(caught.value) == detail + INSTRUCTION_TRUE
        return None
    with capture_events() as events:
        records = await src.read(start, end)
    assert [e["event"] for e in events if e["log_level"] == "warning"] == [detail + INSTRUCTION_FALSE]
    return records


class Recorder:
    """An output operation recording (batch time, [(partition, offset, value)]) and failing at chosen batch times."""

    def __init__(self, fail_at: set[int] | None = None) -> None:
        self.seen: list[tuple[int, list[tuple[int, int, str]]]] = []
        self.fail_at = fail_at or set()

    async def __call__(self, batch: Batch) -> None:
        if batch.time.milliseconds in self.fail_at:
            raise RuntimeError(f"boom at {batch.time.milliseconds}")
        self.seen.append((batch.time.milliseconds, values(batch.inputs["kafka"])))


def pipeline(src: KafkaSource, out: Recorder) -> Pipeline:
    p = Pipeline()
    p.add_source(src, name="kafka")
    p.add_output(out, name="out")
    return p


def ids_of(ck: Path, log: str) -> list[int]:
    """The batch ids in one of the checkpoint's logs."""
    return sorted(int(p.name) for p in (ck / log).iterdir() if p.name.isdigit())


def logged_offsets(ck: Path, batch_id: int) -> str:
    """The source's line of an offsets-log entry (Spark's layout: version, metadata, one line per source)."""
    return (ck / "offsets" / str(batch_id)).read_text().splitlines()[2]


async def test_each_batch_holds_exactly_its_ranges_over_several_partitions(kafka_cluster: Any, kafka_topic: str,
                                                                           tmp_path: Path, clock: ManualClock) -> None:
    """Batches give every partition's new records, partition by partition in offset order, and log Spark's offsets JSON."""
    kafka_cluster.create_topic(kafka_topic, 3)
    for partition, n in enumerate((2, 3, 1)):
        produce(kafka_cluster, kafka_topic, partition, n)
    out = Recorder()
    ck = tmp_path / "ck"
    async with StreamingRuntime(pipeline(source(kafka_cluster, [kafka_topic]), out), Seconds(1), clock=clock,
                                checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock)
        produce(kafka_cluster, kafka_topic, 2, 2, first=1)
        produce(kafka_cluster, kafka_topic, 0, 1, first=2)
        await advance(rt, clock)
        await advance(rt, clock)  # nothing new: an empty batch on the DStream grid
        await rt.stop()
    assert out.seen == [
        (1000, [(0, 0, "0:0"), (0, 1, "0:1"), (1, 0, "1:0"), (1, 1, "1:1"), (1, 2, "1:2"), (2, 0, "2:0")]),
        (2000, [(0, 2, "0:2"), (2, 1, "2:1"), (2, 2, "2:2")]),
        (3000, []),
    ]
    assert logged_offsets(ck, 0) == f'{{"{kafka_topic}":{{"0":2,"1":3,"2":1}}}}'
    assert logged_offsets(ck, 1) == f'{{"{kafka_topic}":{{"0":3,"1":3,"2":3}}}}'


async def test_records_carry_topic_partition_offset_key_timestamp_and_headers(kafka_cluster: Any, kafka_topic: str) -> None:
    """A KafkaRecord holds the raw key, the decoded value, the timestamp and its kind (CreateTime), and the headers."""
    kafka_cluster.create_topic(kafka_topic, 1)
    kafka_cluster.produce(kafka_topic, [b"v"], partition=0, keys=[b"k"], timestamps_ms=[1_700_000_000_123])
    async with source(kafka_cluster, kafka_topic, includeHeaders=True) as src:
        end = await src.plan_offset(None, await src.latest_offset())
        records = await src.read(None, end)
    assert records == [KafkaRecord(kafka_topic, 0, 0, b"k", "v", 1_700_000_000_123, 0, ())]


async def test_max_offsets_per_trigger_splits_the_limit_over_partitions_by_lag(kafka_cluster: Any, kafka_topic: str) -> None:
    """Lags 10, 5 and 1 under a limit of 8 give 5, 2 and 1 (rounded down, a share below one rounded up), as Spark does."""
    kafka_cluster.create_topic(kafka_topic, 3)
    for partition, n in enumerate((10, 5, 1)):
        produce(kafka_cluster, kafka_topic, partition, n)
    async with source(kafka_cluster, kafka_topic, maxOffsetsPerTrigger=8) as src:
        latest = await src.latest_offset()
        end = await src.plan_offset(None, latest)
        assert end == f'{{"{kafka_topic}":{{"0":5,"1":2,"2":1}}}}'
        first = await src.read(None, end)
        following = await src.plan_offset(end, latest)  # lags 5, 3, 0: 8 * 5/8 and 8 * 3/8
        assert following == f'{{"{kafka_topic}":{{"0":10,"1":5,"2":1}}}}'
        assert await src.plan_offset(following, latest) == following  # nothing left: the start itself
        second = await src.read(end, following)
    assert values(first) == [(0, i, f"0:{i}") for i in range(5)] + [(1, 0, "1:0"), (1, 1, "1:1"), (2, 0, "2:0")]
    assert values(second) == [(0, i, f"0:{i}") for i in range(5, 10)] + [(1, i, f"1:{i}") for i in range(2, 5)]


def test_rate_limit_gives_a_new_partition_its_share_from_its_first_offset() -> None:
    """A partition missing from the start counts its lag from its first offset; one with nothing to read keeps its end."""
    a0, a1, a2 = tp("a", 0), tp("a", 1), tp("a", 2)
    end = rate_limit(6, {a0: 10, a1: 7}, {a0: 20, a1: 7, a2: 25}, {a2: 5})
    assert end == {a0: 12, a1: 7, a2: 9}  # lags 10 and 20 of 30: 2 and 4; a1 has none


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10_000), st.lists(st.tuples(st.integers(0, 1_000), st.integers(0, 5_000)), min_size=1, max_size=8))
def test_rate_limit_never_passes_the_end_nor_the_limit_and_always_moves(limit: int, spans: list[tuple[int, int]]) -> None:
    """Every share stays within its partition's range; all shares sum to at most the limit plus one per partition; a lag moves."""
    start = {tp("t", i): begin for i, (begin, _) in enumerate(spans)}
    until = {tp("t", i): begin + lag for i, (begin, lag) in enumerate(spans)}
    end = rate_limit(limit, start, until, {})
    assert set(end) == set(until)
    assert all(start[p] <= end[p] <= until[p] for p in end)
    assert sum(end[p] - start[p] for p in end) <= limit + len(end)  # a share below one is rounded up
    lag = sum(until[p] - start[p] for p in end)
    assert (sum(end[p] - start[p] for p in end) > 0) == (lag > 0)
    if lag <= limit:
        assert sum(end[p] - start[p] for p in end) >= min(lag, limit) - len(end)  # rounding down loses < 1 per partition


async def test_a_partition_added_mid_run_is_read_from_its_first_offset(kafka_cluster: Any, kafka_topic: str,
                                                                       tmp_path: Path, clock: ManualClock) -> None:
    """After the topic grows from 2 to 3 partitions, the next batch reads the new one from offset 0."""
    kafka_cluster.create_topic(kafka_topic, 2)
    produce(kafka_cluster, kafka_topic, 0, 1)
    produce(kafka_cluster, kafka_topic, 1, 1)
    out = Recorder()
    ck = tmp_path / "ck"
    async with StreamingRuntime(pipeline(source(kafka_cluster, kafka_topic), out), Seconds(1), clock=clock,
                                checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock)
        kafka_cluster.add_partitions(kafka_topic, 3)
        produce(kafka_cluster, kafka_topic, 2, 2)
        produce(kafka_cluster, kafka_topic, 1, 1, first=1)
        await advance(rt, clock)
        await rt.stop()
    assert out.seen == [(1000, [(0, 0, "0:0"), (1, 0, "1:0")]), (2000, [(1, 1, "1:1"), (2, 0, "2:0"), (2, 1, "2:1")])]
    assert logged_offsets(ck, 1) == f'{{"{kafka_topic}":{{"0":1,"1":2,"2":2}}}}'


@pytest.mark.parametrize("fail", [True, False])
async def test_a_deleted_topic_is_reported_and_the_others_read(kafka_cluster: Any, kafka_topic: str, fail: bool) -> None:
    """Partitions that are gone give Spark's "are gone" message; with failOnDataLoss=false the other topic is still read."""
    other = kafka_topic + "-b"
    kafka_cluster.create_topic(kafka_topic, 1)
    kafka_cluster.create_topic(other, 2)
    async with source(kafka_cluster, [kafka_topic, other], failOnDataLoss=fail) as src:
        start = await src.plan_offset(None, await src.latest_offset())
        assert start is None  # all empty: no batch yet
        produce(kafka_cluster, kafka_topic, 0, 1)
        produce(kafka_cluster, other, 1, 1)
        start = await src.plan_offset(None, await src.latest_offset())
        await src.read(None, start)
        kafka_cluster.delete_topic(other)
        produce(kafka_cluster, kafka_topic, 0, 1, first=1)
        end = await src.plan_offset(start, await src.latest_offset())
        assert end == f'{{"{kafka_topic}":{{"0":2}}}}'
        detail = f"Set({other}-0, {other}-1) are gone. Some data may have been missed. "
        records = await read_reporting_loss(src, start, end, detail, fail)
    assert records is None or values(records) == [(0, 1, "0:1")]


@pytest.mark.parametrize("fail", [True, False])
async def test_the_only_topic_deleted_is_reported_and_its_new_records_are_read_from_its_start(
        kafka_cluster: Any, kafka_topic: str, fail: bool) -> None:
    """With no subscribed partition left the end is empty, as in Spark: a batch runs and reports the partitions gone
    (it planned none, so nothing was reported, and a topic made again later was read from the old offsets on); then
    the topic made again is new partitions, read from their first record."""
    async with source(kafka_cluster, kafka_topic + "-absent") as absent:
        assert await absent.plan_offset(None, await absent.latest_offset()) is None  # from an empty start: no batch
    kafka_cluster.create_topic(kafka_topic, 2)
    produce(kafka_cluster, kafka_topic, 0, 3)
    async with source(kafka_cluster, kafka_topic, failOnDataLoss=fail) as src:
        start = await src.plan_offset(None, await src.latest_offset())
        kafka_cluster.delete_topic(kafka_topic)
        end = await src.plan_offset(start, await src.latest_offset())
        assert end == "{}"
        detail = f"Set({kafka_topic}-0, {kafka_topic}-1) are gone. Some data may have been missed. "
        if await read_reporting_loss(src, start, end, detail, fail) is None:
            return
        kafka_cluster.create_topic(kafka_topic, 1)
        produce(kafka_cluster, kafka_topic, 0, 5)
        later = await src.plan_offset(end, await src.latest_offset())
        records = await src.read(end, later)
    assert values(records) == [(0, n, f"0:{n}") for n in range(5)]


@pytest.mark.parametrize("fail", [True, False])
async def test_an_added_partition_that_lost_its_first_records(kafka_cluster: Any, kafka_topic: str, fail: bool) -> None:
    """A new partition whose first offset is not 0 is Spark's "Added partition ... starts from" loss."""
    kafka_cluster.create_topic(kafka_topic, 1)
    produce(kafka_cluster, kafka_topic, 0, 1)
    async with source(kafka_cluster, kafka_topic, failOnDataLoss=fail) as src:
        start = await src.plan_offset(None, await src.latest_offset())
        kafka_cluster.add_partitions(kafka_topic, 2)
        produce(kafka_cluster, kafka_topic, 1, 3)
        kafka_cluster.delete_records(kafka_topic, 1, 2)
        end = await src.plan_offset(start, await src.latest_offset())
        detail = f"Added partition {kafka_topic}-1 starts from 2 instead of 0. Some data may have been missed. "
        records = await read_reporting_loss(src, start, end, detail, fail)
    assert records is None or values(records) == [(1, 2, "1:2")]


@pytest.mark.parametrize("fail", [True, False])
async def test_offsets_that_went_backwards(kafka_cluster: Any, kafka_topic: str, fail: bool) -> None:
    """A topic deleted and made again with fewer records: Spark's "offset was changed" loss; the partition is skipped."""
    kafka_cluster.create_topic(kafka_topic, 2)
    produce(kafka_cluster, kafka_topic, 0, 3)
    async with source(kafka_cluster, kafka_topic, failOnDataLoss=fail) as src:
        start = await src.plan_offset(None, await src.latest_offset())
        kafka_cluster.delete_topic(kafka_topic)
        kafka_cluster.create_topic(kafka_topic, 2)
        produce(kafka_cluster, kafka_topic, 0, 1)
        produce(kafka_cluster, kafka_topic, 1, 1)
        end = await src.plan_offset(start, await src.latest_offset())
        assert end == f'{{"{kafka_topic}":{{"0":1,"1":1}}}}'
        detail = f"Partition {kafka_topic}-0's offset was changed from 3 to 1, some data may have been missed. "
        records = await read_reporting_loss(src, start, end, detail, fail)
    assert records is None or values(records) == [(1, 0, "1:0")]


async def test_a_restart_rereads_exactly_the_uncommitted_batch(kafka_cluster: Any, kafka_topic: str, tmp_path: Path) -> None:
    """With startingOffsets=latest, a first batch left uncommitted re-runs after a restart with its own records, not newer ones."""
    kafka_cluster.create_topic(kafka_topic, 2)
    produce(kafka_cluster, kafka_topic, 0, 2)  # before the query starts: never read
    ck = tmp_path / "ck"
    first = Recorder(fail_at={1000})
    clock = ManualClock(0)
    src = source(kafka_cluster, kafka_topic, startingOffsets="latest", maxOffsetsPerTrigger=3)
    async with StreamingRuntime(pipeline(src, first), Seconds(1), clock=clock, checkpoint_location=ck,
                                stop_on_failure=False) as rt:
        await rt.start()
        produce(kafka_cluster, kafka_topic, 0, 2, first=2)
        produce(kafka_cluster, kafka_topic, 1, 2)
        await advance(rt, clock)
        await rt.stop()
    assert first.seen == []
    assert (ck / "sources" / "0" / "0").read_text() == f'v1\n{{"{kafka_topic}":{{"0":2,"1":0}}}}'
    logged = logged_offsets(ck, 0)
    assert logged == f'{{"{kafka_topic}":{{"0":3,"1":1}}}}'  # lags 2 and 2 under a limit of 3: 1.5 each, rounded down
    produce(kafka_cluster, kafka_topic, 1, 1, first=2)

    again = Recorder()
    clock = ManualClock(1500)
    src = source(kafka_cluster, kafka_topic, startingOffsets="latest", maxOffsetsPerTrigger=3)
    async with StreamingRuntime(pipeline(src, again), Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await rt.wait_until_idle()
        await advance(rt, clock)
        await rt.stop()
    assert again.seen == [(1000, [(0, 2, "0:2"), (1, 0, "1:0")]), (2000, [(0, 3, "0:3"), (1, 1, "1:1"), (1, 2, "1:2")])]
    assert logged_offsets(ck, 0) == logged


@pytest.mark.parametrize("fail", [True, False])
async def test_a_rerun_whose_records_aged_out_while_down(kafka_cluster: Any, kafka_topic: str, tmp_path: Path,
                                                         fail: bool) -> None:
    """Records of the logged batch deleted before the restart: the re-run fails the query, or reads what is left."""
    kafka_cluster.create_topic(kafka_topic, 1)
    produce(kafka_cluster, kafka_topic, 0, 4)
    ck = tmp_path / "ck"
    clock = ManualClock(0)
    async with StreamingRuntime(pipeline(source(kafka_cluster, kafka_topic), Recorder(fail_at={1000})), Seconds(1),
                                clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock)
        await rt.stop()
    kafka_cluster.delete_records(kafka_topic, 0, 3)
    out = Recorder()
    src = source(kafka_cluster, kafka_topic, failOnDataLoss=fail)
    detail = f"Cannot fetch offset 0 (GroupId: {src.reader_group_id}, TopicPartition: {kafka_topic}-0). "
    with capture_events() as events:
        async with StreamingRuntime(pipeline(src, out), Seconds(1), clock=ManualClock(1500), checkpoint_location=ck) as rt:
            await rt.start()
            await rt.wait_until_idle()
            if fail:
                with pytest.raises(StreamingQueryException) as info:
                    await rt.await_termination(Milliseconds(0))
                cause = info.value.__cause__
                assert isinstance(cause, KafkaDataLossError)
                assert str(cause) == detail + INSTRUCTION_TRUE
            await rt.stop()
    if fail:
        assert out.seen == []
        return
    assert out.seen == [(1000, [(0, 3, "0:3")])]
    assert [e["event"] for e in events if e["log_level"] == "warning"] == [detail + INSTRUCTION_FALSE]


async def test_without_a_checkpoint_latest_is_taken_at_the_first_batch(kafka_cluster: Any, kafka_topic: str,
                                                                        clock: ManualClock) -> None:
    """With no checkpoint, startingOffsets=latest is resolved when the first batch is planned (Spark's first trigger)."""
    kafka_cluster.create_topic(kafka_topic, 1)
    produce(kafka_cluster, kafka_topic, 0, 2)
    out = Recorder()
    async with StreamingRuntime(pipeline(source(kafka_cluster, kafka_topic, startingOffsets="latest"), out), Seconds(1),
                                clock=clock) as rt:
        await rt.start()
        await advance(rt, clock)
        produce(kafka_cluster, kafka_topic, 0, 1, first=2)
        await advance(rt, clock)
        await rt.stop()
    assert out.seen == [(1000, []), (2000, [(0, 2, "0:2")])]


async def test_without_a_checkpoint_latest_is_fixed_before_the_first_batchs_end(kafka_cluster: Any, kafka_topic: str) -> None:
    """The engine asks for the latest offsets before it plans the first batch: records written in between are after the
    start (Spark resolves the initial offsets first), not a false data loss that fails the query."""
    kafka_cluster.create_topic(kafka_topic, 1)
    produce(kafka_cluster, kafka_topic, 0, 2)
    src = source(kafka_cluster, kafka_topic, startingOffsets="latest")
    try:
        limit = await src.latest_offset()  # the engine's first question for a batch
        produce(kafka_cluster, kafka_topic, 0, 3, first=2)  # written before the batch is planned
        end = await src.plan_offset(None, limit)
        assert values(await src.read(None, end)) == []
        later = await src.plan_offset(end, await src.latest_offset())
        assert values(await src.read(end, later)) == [(0, 2, "0:2"), (0, 3, "0:3"), (0, 4, "0:4")]
    finally:
        await src.aclose()


async def test_kafka_to_a_file_sink_holds_every_record_once_across_a_restart(kafka_cluster: Any, kafka_topic: str,
                                                                            tmp_path: Path) -> None:
    """A batch whose file was written but which failed before its commit re-runs after a restart; no record twice or lost."""
    kafka_cluster.create_topic(kafka_topic, 2)
    for partition in (0, 1):
        produce(kafka_cluster, kafka_topic, partition, 3)
    ck, out = tmp_path / "ck", tmp_path / "out"

    def run_pipeline(fail_at: set[int]) -> Pipeline:
        p = Pipeline()
        p.add_source(source(kafka_cluster, kafka_topic, maxOffsetsPerTrigger=4), name="kafka")
        p.add_output(FileSink(out, format=lambda r: r.value, skip_empty=True), name="sink")
        p.add_output(Recorder(fail_at), name="after")  # runs after the sink: a failure leaves the batch's file uncommitted
        return p

    clock = ManualClock(0)
    async with StreamingRuntime(run_pipeline({2000}), Seconds(1), clock=clock, checkpoint_location=ck,
                                stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, times=2)
        await rt.stop()
    assert sorted(p.name for p in out.iterdir()) == ["batch-1000.txt", "batch-2000.txt"] and ids_of(ck, "commits") == [0]
    produce(kafka_cluster, kafka_topic, 0, 1, first=3)
    clock = ManualClock(2500)
    async with StreamingRuntime(run_pipeline(set()), Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await rt.wait_until_idle()
        await advance(rt, clock)
        await rt.stop()
    files = {p.name: p.read_text().splitlines() for p in out.iterdir()}
    assert files == {"batch-1000.txt": ["0:0", "0:1", "1:0", "1:1"], "batch-2000.txt": ["0:2", "1:2"], "batch-3000.txt": ["0:3"]}
    assert ids_of(ck, "commits") == [0, 1, 2]


async def test_a_restart_with_other_topics_is_refused(kafka_cluster: Any, kafka_topic: str, tmp_path: Path) -> None:
    """The checkpoint records the subscribed topics; another subscription cannot resume it."""
    kafka_cluster.create_topic(kafka_topic, 1)
    ck = tmp_path / "ck"
    async with StreamingRuntime(pipeline(source(kafka_cluster, kafka_topic), Recorder()), Seconds(1),
                                clock=ManualClock(0), checkpoint_location=ck) as rt:
        await rt.start()
        await rt.stop()
    other = source(kafka_cluster, [kafka_topic, kafka_topic + "-b"])
    with pytest.raises(CheckpointError) as caught:
        async with StreamingRuntime(pipeline(other, Recorder()), Seconds(1), clock=ManualClock(0), checkpoint_location=ck) as rt:
            await rt.start()
    await other.aclose()
    b = f"{kafka_topic}-b"
    assert str(caught.value) == (
        f"cannot resume from {ck}: source 'kafka' (source 0 of the offsets log) was 'KafkaV2[Subscribe[{kafka_topic}]]' "
        f"(kind 'KafkaSource', subscribe [{kafka_topic!r}]) when the checkpoint was written and is "
        f"'KafkaV2[Subscribe[{kafka_topic}, {b}]]' (kind 'KafkaSource', subscribe [{kafka_topic!r}, {b!r}]) now; its "
        "logged offsets belong to that source: restart with the same sources in the same order, or use a new checkpoint "
        "directory")


async def test_batch_ends_are_committed_to_the_consumer_group(kafka_cluster: Any, kafka_topic: str, tmp_path: Path,
                                                              clock: ManualClock) -> None:
    """With commit_to_group, the group's committed offsets follow each committed batch's end."""
    import confluent_kafka

    kafka_cluster.create_topic(kafka_topic, 2)
    produce(kafka_cluster, kafka_topic, 0, 3)
    produce(kafka_cluster, kafka_topic, 1, 1)
    group = f"g-{kafka_topic}"
    src = KafkaSource(kafka_cluster.config(group_id=group), kafka_topic, startingOffsets="earliest", commit_to_group=True)
    async with StreamingRuntime(pipeline(src, Recorder()), Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
        await rt.start()
        await advance(rt, clock)
        await rt.stop()
    consumer = confluent_kafka.Consumer(kafka_cluster.config(group_id=group))
    try:
        committed = consumer.committed([confluent_kafka.TopicPartition(kafka_topic, p) for p in (0, 1)], timeout=30)
    finally:
        consumer.close()
    assert [(c.partition, c.offset) for c in committed] == [(0, 3), (1, 1)]


async def test_every_client_call_runs_off_the_event_loop_thread(kafka_cluster: Any, kafka_topic: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata, offsets, reads and group commits all happen in worker threads, never on the loop's thread."""
    import confluent_kafka
    import confluent_kafka.admin

    calls: list[tuple[str, int]] = []

    class Consumer(confluent_kafka.Consumer):  # type: ignore[misc]
        def consume(self, *args: Any, **kwargs: Any) -> Any:
            calls.append(("consume", threading.get_ident()))
            return super().consume(*args, **kwargs)

        def commit(self, *args: Any, **kwargs: Any) -> Any:
            calls.append(("commit", threading.get_ident()))
            return super().commit(*args, **kwargs)

    def recorded(name: str) -> Any:
        original = getattr(confluent_kafka.admin.AdminClient, name)

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append((name, threading.get_ident()))
            return original(self, *args, **kwargs)

        return call

    monkeypatch.setattr(confluent_kafka, "Consumer", Consumer)
    for method in ("list_topics", "list_offsets"):
        monkeypatch.setattr(confluent_kafka.admin.AdminClient, method, recorded(method))
    kafka_cluster.create_topic(kafka_topic, 2)
    produce(kafka_cluster, kafka_topic, 0, 2)
    produce(kafka_cluster, kafka_topic, 1, 2)
    loop_thread = threading.get_ident()
    async with KafkaSource(kafka_cluster.config(group_id=f"g-{kafka_topic}"), kafka_topic, startingOffsets="earliest",
                           maxOffsetsPerTrigger=10, commit_to_group=True) as src:
        end = await src.plan_offset(None, await src.latest_offset())
        assert len(await src.read(None, end)) == 4
        await src.commit(end)
    assert {name for name, _ in calls} == {"consume", "commit", "list_topics", "list_offsets"}
    assert loop_thread not in {thread for _, thread in calls}


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"subscribe": " , "}, ValueError, "No topics to subscribe to as specified value for option 'subscribe' is ' , '"),
    ({"subscribe": 3}, TypeError, "subscribe must be a comma-separated str or a list of topic names, got 3"),
    ({"startingOffsets": "soon"}, ValueError,
     'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got soon'),
    ({"startingOffsets": '{"t":{"0":-3}}'}, ValueError,
     'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got {"t":{"0":-3}}'),
    ({"startingOffsets": {"u": {"0": 1}}}, ValueError,
     "startingOffsets names topics that are not subscribed: ['u']; subscribed: ['t']"),
    ({"startingOffsets": {"t": {-1: 0}}}, ValueError,
     'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got {"t": {"-1": 0}}'),
    ({"startingOffsets": '{"t":{"\u00b2":0}}'}, ValueError,  # a digit to str.isdigit, not to int()
     'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got {"t":{"\u00b2":0}}'),
    ({"maxOffsetsPerTrigger": 0}, ValueError, "maxOffsetsPerTrigger must be a positive int or None, got 0"),
    ({"failOnDataLoss": "false"}, TypeError, "failOnDataLoss must be True or False, got 'false'"),
    ({"value_decoder": "utf-8"}, TypeError,
     "value_decoder must be a function of the raw bytes (or None for the bytes), got 'utf-8'"),
    ({"reader_threads": 0}, ValueError, "reader_threads must be a positive int, got 0"),
    ({"kafkaParams": {}}, ValueError, "Must specify metadata.broker.list or bootstrap.servers"),
    ({"kafkaParams": {"bootstrap.servers": "b:9092", "enable.auto.commit": "false"}}, ValueError,
     "Kafka option 'enable.auto.commit' is not supported"),
    ({"kafkaParams": {"bootstrap.servers": "b:9092", "auto.offset.reset": "smallest"}}, ValueError,
     "Kafka option 'auto.offset.reset' is not supported by KafkaSource, got 'smallest'; set startingOffsets to "
     "'earliest' or 'latest' instead (it applies when a query starts without a checkpoint; a restart resumes where "
     "the checkpoint left off)"),
    ({"commit_to_group": True}, ValueError,
     "commit_to_group=True needs 'group.id' in kafkaParams: the consumer group the processed offsets are committed to"),
    # Refused here, not by the first batch's client with a raw confluent_kafka.KafkaException (a typo, a bad value), or
    # after the metadata's timeout (a list of brokers, made a str).
    ({"kafkaParams": {"bootstrap.servers": "b:9092", "sesion.timeout.ms": "100"}}, ValueError,
     "kafkaParams: No such configuration property: \"sesion.timeout.ms\""),
    ({"kafkaParams": {"bootstrap.servers": "b:9092", "fetch.wait.max.ms": "abc"}}, ValueError,
     "kafkaParams: Invalid value for configuration property \"fetch.wait.max.ms\""),
    ({"kafkaParams": {"bootstrap.servers": ["b:9092", "c:9092"]}}, TypeError,
     "kafkaParams values must be str, int, float or bool: bootstrap.servers is list ['b:9092', 'c:9092'] (several "
     "brokers go in one comma-separated str)"),
])
def test_bad_options_are_refused_with_the_rule_and_the_value(options: dict[str, Any], error: type[Exception],
                                                             message: str) -> None:
    """Each bad option raises its own message (Spark's where Spark has one)."""
    arguments: dict[str, Any] = {"kafkaParams": {"bootstrap.servers": "b:9092"}, "subscribe": "t", **options}
    with pytest.raises(error) as caught:
        KafkaSource(**arguments)
    assert str(caught.value) == message


async def test_starting_offsets_must_name_every_partition(kafka_cluster: Any, kafka_topic: str) -> None:
    """Given offsets that leave a partition out: Spark's message naming both sets; -1 and -2 resolve to latest and earliest."""
    kafka_cluster.create_topic(kafka_topic, 2)
    produce(kafka_cluster, kafka_topic, 0, 2)
    produce(kafka_cluster, kafka_topic, 1, 3)
    async with source(kafka_cluster, kafka_topic, startingOffsets={kafka_topic: {"0": 1}}) as src:
        with pytest.raises(ValueError) as caught:
            await src.plan_offset(None, await src.latest_offset())
    assert str(caught.value) == (
        "If startingOffsets contains specific offsets, you must specify all TopicPartitions.\n"
        "Use -1 for latest, -2 for earliest, if you don't care.\n"
        f"Specified: Set({kafka_topic}-0) Assigned: Set({kafka_topic}-0, {kafka_topic}-1)")
    async with source(kafka_cluster, kafka_topic, startingOffsets=f'{{"{kafka_topic}":{{"0":-1,"1":-2}}}}') as src:
        latest = await src.latest_offset()
        end = await src.plan_offset(None, latest)
        records = await src.read(None, end)
    assert parse_partition_offsets(end) == {tp(kafka_topic, 0): 2, tp(kafka_topic, 1): 3}
    assert values(records) == [(1, 0, "1:0"), (1, 1, "1:1"), (1, 2, "1:2")]


async def test_a_null_key_or_value_stays_none_and_never_reaches_a_decoder(kafka_cluster: Any, kafka_topic: str) -> None:
    """A tombstone (a null value) and a keyless record, with the docs' ``value_decoder=bytes.decode`` and a key decoder:
    ``None`` as Spark's null column (the batch failed with a TypeError on every run)."""
    kafka_cluster.create_topic(kafka_topic, 1)
    kafka_cluster.produce(kafka_topic, ["live", None], partition=0)
    async with source(kafka_cluster, kafka_topic, key_decoder=bytes.decode) as src:
        end = await src.plan_offset(None, await src.latest_offset())
        records = await src.read(None, end)
    assert [(r.offset, r.key, r.value) for r in records] == [(0, None, "live"), (1, None, None)]


async def test_a_stop_does_not_wait_for_a_cluster_that_does_not_answer(kafka_cluster: Any, kafka_topic: str,
                                                                       clock: ManualClock,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning asks the cluster view in a thread, for up to its metadata timeout when no broker answers: the stop
    leaves the question and ends (it waited for the answer)."""
    import anyio
    import anyio.to_thread

    from streaming.kafka._client import KafkaClusterView

    armed, entered, release, returned = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    partitions = KafkaClusterView.partitions

    def unanswered(self: Any, topics: Any) -> Any:
        answer = partitions(self, topics)  # asked with the client the view held then; it comes late
        if armed.is_set() and not entered.is_set():  # once, after the first batch
            entered.set()
            release.wait(60)  # a broker slow to answer
            returned.set()
        return answer

    refused = threading.Event()
    check_open = KafkaSource._check_open

    def checking(self: Any) -> None:
        try:
            check_open(self)
        except KafkaError:
            refused.set()
            raise

    kafka_cluster.create_topic(kafka_topic, 1)
    monkeypatch.setattr(KafkaClusterView, "partitions", unanswered)
    monkeypatch.setattr(KafkaSource, "_check_open", checking)
    src = source(kafka_cluster, [kafka_topic])
    try:
        # abandon_after 0: the stop gives a hung generation no time on the manual clock (Spark's 2 s, on a clock the
        # test would have to move once the stop waits on it).
        async with StreamingRuntime(pipeline(src, Recorder()), Seconds(1), clock=clock,
                                    track_progress=True, abandon_after=Milliseconds(0)) as rt:
            await rt.start()
            await advance(rt, clock)  # a first batch as usual: the source has its view
            armed.set()
            clock.advance(Seconds(1))
            assert await anyio.to_thread.run_sync(entered.wait, 60), "no batch asked the cluster"
            await rt.stop()
        assert not returned.is_set(), "the stop waited for the cluster's answer"
    finally:
        release.set()
    # The answer comes after the stop: the abandoned question (the batch's latest offsets) makes no new client for the
    # rest of its work (it made one that nothing closed).
    assert await anyio.to_thread.run_sync(refused.wait, 60), "the question went on after its source was closed"
    assert src._view is None
