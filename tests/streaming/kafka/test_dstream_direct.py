"""KafkaUtils.createDirectStream on the mock broker and real Spark: exact batches, offsetRanges(), commits.

Each program runs on a ManualClock: records are produced, then the clock moves one interval and
the batch planned at that tick reads exactly what the partitions held when it was planned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import add
from typing import Any

import anyio
import anyio.to_thread
import pytest

from scheduler import ManualClock
from streaming import DStream, StreamingContext
from streaming.kafka import DirectKafkaInputDStream, KafkaError, KafkaUtils, OffsetRange
from tests.anyio_support import BACKENDS, settle
from tests.support import advance

pytestmark = pytest.mark.spark

INTERVAL_MS = 1000

Step = Callable[[], None] | None


def batch_ms(time: Any) -> int:
    return round(time.timestamp() * 1000)


def run(ssc: StreamingContext, clock: ManualClock, steps: Sequence[Step], backend: str = "asyncio") -> None:
    """Start ``ssc``; for each step run it (in a thread: it produces), then move one interval and wait for the batch."""
    async def drive() -> None:
        async with ssc:
            await ssc.start_async()
            await ssc.runtime.wait_until_idle()
            for step in steps:
                if step is not None:
                    await anyio.to_thread.run_sync(step)
                await advance(ssc.runtime, clock, INTERVAL_MS)
            await ssc.stop_async(stopSparkContext=False)

    anyio.run(drive, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_word_count_over_three_partitions_gives_each_batch_exactly_its_records(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock, backend: str) -> None:
    """Records produced before a batch's tick are that batch's; counts per batch are exact, nothing read twice."""
    kafka_cluster.create_topic(kafka_topic, 3)
    kafka_cluster.produce(kafka_topic, ["a b", "b"], partition=0)
    kafka_cluster.produce(kafka_topic, ["c"], partition=2)
    outputs: dict[int, list[tuple[str, int]]] = {}
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = KafkaUtils.createDirectStream(ssc, [kafka_topic], {"metadata.broker.list": kafka_cluster.bootstrap_servers,
                                                                "auto.offset.reset": "smallest"})
    counts = stream.map(lambda kv: kv[1]).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add)
    counts.foreachRDD(lambda t, rdd: outputs.__setitem__(batch_ms(t), sorted(rdd.collect())))
    run(ssc, clock, [
        None,
        lambda: kafka_cluster.produce(kafka_topic, ["a a", "d"], partition=1),
        None,
        lambda: (kafka_cluster.produce(kafka_topic, ["b"], partition=0), kafka_cluster.produce(kafka_topic, ["a"], partition=2)),
    ], backend)
    assert outputs == {
        1000: [("a", 1), ("b", 2), ("c", 1)],
        2000: [("a", 2), ("d", 1)],
        3000: [],
        4000: [("a", 1), ("b", 1)],
    }


def params(cluster: Any, **extra: str) -> dict[str, str]:
    """kafkaParams in pyspark 2.4's spelling, reading from the start of each partition."""
    return {"metadata.broker.list": cluster.bootstrap_servers, "auto.offset.reset": "smallest",
            **{k.replace("_", "."): v for k, v in extra.items()}}


def test_offset_ranges_in_foreach_rdd_and_transform_match_the_records_read_and_max_rate_caps_each_partition(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock) -> None:
    """maxRatePerPartition=3 at 1 s batches: each range holds at most 3 records; offsetRanges() in foreachRDD and transform
    are the ranges whose records the batch read (messageHandler sees partition and offset); commitAsync commits their ends."""
    from tests.streaming.test_spark_integration import spark_conf

    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, [f"p0-{i}" for i in range(7)], partition=0)
    kafka_cluster.produce(kafka_topic, ["p1-0", "p1-1"], partition=1)
    seen: dict[int, tuple[list[OffsetRange], list[tuple[int, int, str]]]] = {}
    in_transform: dict[int, list[OffsetRange]] = {}
    committed: list[tuple[dict[Any, int], Any]] = []
    with spark_conf(spark_context, spark__streaming__kafka__maxRatePerPartition="3"):
        ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
        stream = KafkaUtils.createDirectStream(ssc, [kafka_topic], params(kafka_cluster, group_id=kafka_topic),
                                               messageHandler=lambda m: (m.partition, m.offset, m.message))

    def keep(time: Any, rdd: Any) -> Any:
        in_transform[batch_ms(time)] = rdd.offsetRanges()
        return rdd

    def output(time: Any, rdd: Any) -> None:
        seen[batch_ms(time)] = (rdd.offsetRanges(), sorted(rdd.collect()))
        stream.commitAsync(rdd.offsetRanges(), lambda offsets, error: committed.append((offsets, error)))

    stream.transform(keep).foreachRDD(lambda rdd: None)
    stream.foreachRDD(output)
    run(ssc, clock, [None, None, None, None])

    def ranges(p0: tuple[int, int], p1: tuple[int, int]) -> list[OffsetRange]:
        return [OffsetRange(kafka_topic, 0, *p0), OffsetRange(kafka_topic, 1, *p1)]

    expected = {1000: ranges((0, 3), (0, 2)), 2000: ranges((3, 6), (2, 2)), 3000: ranges((6, 7), (2, 2)), 4000: ranges((7, 7), (2, 2))}
    assert {t: r for t, (r, _) in seen.items()} == expected
    assert in_transform == expected
    for rngs, records in seen.values():
        assert records == sorted((r.partition, o, f"p{r.partition}-{o}") for r in rngs for o in range(r.fromOffset, r.untilOffset))
    # Batches 1-3 queued commits, each committed when the next batch was planned; batch 4's is still queued.
    assert [(sorted((tp.partition, off) for tp, off in offsets.items()), error) for offsets, error in committed] == [
        ([(0, 3), (1, 2)], None), ([(0, 6), (1, 2)], None), ([(0, 7), (1, 2)], None)]
    assert group_offsets(kafka_cluster, kafka_topic, kafka_topic, 2) == [7, 2]


def group_offsets(cluster: Any, group: str, topic: str, partitions: int) -> list[int]:
    """The offsets the consumer group ``group`` committed for ``topic``'s partitions."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)]
    finally:
        consumer.close()


def test_backpressure_starts_at_the_initial_rate_then_shares_the_estimated_rate_by_lag(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock) -> None:
    """initialRate 8 over lags 30 and 10 gives ranges of 6 and 2; the RateController's PID rate (16) over lags 24 and 8
    gives 12 and 4, as Spark's DirectKafkaRateController shares it."""
    import attrs

    from scheduler import Duration, RateController, StreamInputInfo, Time
    from tests.streaming.test_spark_integration import spark_conf

    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, [str(i) for i in range(30)], partition=0)
    kafka_cluster.produce(kafka_topic, [str(i) for i in range(10)], partition=1)
    seen: dict[int, list[tuple[int, int, int]]] = {}
    with spark_conf(spark_context, spark__streaming__backpressure__enabled="true", spark__streaming__backpressure__initialRate="8",
                    spark__streaming__backpressure__pid__minRate="1"):
        ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
        stream = KafkaUtils.createDirectStream(ssc, [kafka_topic], params(kafka_cluster))
    stream.foreachRDD(lambda t, rdd: seen.__setitem__(batch_ms(t), [(r.partition, r.fromOffset, r.untilOffset)
                                                                     for r in rdd.offsetRanges()]))

    @attrs.frozen
    class Info:  # what the RateController reads of a completed batch
        batch_time: Time
        processing_end_time: Time
        processing_delay: Duration
        scheduling_delay: Duration
        stream_id_to_input_info: dict[int, StreamInputInfo]

    @attrs.frozen
    class Completed:
        batch_info: Info

    def estimate() -> None:
        [controller] = [li for li in ssc.runtime.listener_bus.listeners if isinstance(li, RateController)]  # type: ignore[attr-defined]
        assert controller.stream_id == stream.id
        # 100 records/s first (calibration), then 16 records in 1 s: the PID's new rate is 100 - (100 - 16) = 16.
        for end, records in ((1500, 100), (2500, 16)):
            info = Info(Time(end - 1000), Time(end), Duration(1000), Duration(0), {stream.id: StreamInputInfo(stream.id, records)})
            controller.on_batch_completed(Completed(info))
        assert stream.latest_rate == 16  # type: ignore[attr-defined]

    run(ssc, clock, [None, estimate])
    assert seen == {1000: [(0, 0, 6), (1, 0, 2)], 2000: [(0, 6, 18), (1, 2, 6)]}


def test_a_partition_added_between_batches_is_read_from_its_first_offset(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock) -> None:
    """The topic grows from 2 to 3 partitions after batch 1; batch 2 reads the new partition from offset 0."""
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, ["a"], partition=0)
    kafka_cluster.produce(kafka_topic, ["b"], partition=1)
    seen: dict[int, tuple[list[tuple[int, int, int]], list[str]]] = {}
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = KafkaUtils.createDirectStream(ssc, [kafka_topic], params(kafka_cluster))
    stream.foreachRDD(lambda t, rdd: seen.__setitem__(batch_ms(t), (
        [(r.partition, r.fromOffset, r.untilOffset) for r in rdd.offsetRanges()], sorted(v for _, v in rdd.collect()))))

    def grow() -> None:
        kafka_cluster.add_partitions(kafka_topic, 3)
        kafka_cluster.produce(kafka_topic, ["c"], partition=2)
        kafka_cluster.produce(kafka_topic, ["d"], partition=0)

    run(ssc, clock, [None, grow])
    assert seen == {1000: ([(0, 0, 1), (1, 0, 1)], ["a", "b"]), 2000: ([(0, 1, 2), (1, 1, 1), (2, 0, 1)], ["c", "d"])}


def run_failing(ssc: StreamingContext, clock: ManualClock, steps: Sequence[Step]) -> list[str]:
    """:func:`run`, collecting the text of each failed batch's error as the context reports it."""
    errors: list[str] = []

    async def drive() -> None:
        async with ssc:
            await ssc.start_async()
            await ssc.runtime.wait_until_idle()
            for step in steps:
                if step is not None:
                    await anyio.to_thread.run_sync(step)
                await advance(ssc.runtime, clock, INTERVAL_MS)
                error = ssc.runtime.exception()
                if error is not None and str(error) not in errors:
                    errors.append(str(error))
            await ssc.stop_async(stopSparkContext=False)

    anyio.run(drive)
    return errors


@pytest.mark.parametrize("fail", [True, False])
def test_a_deleted_topic_fails_the_batch_with_sparks_message_unless_fail_on_data_loss_is_false(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock, fail: bool) -> None:
    """Deleting the topic after batch 1: Structured Streaming's "are gone" data loss; with failOnDataLoss=false the stream goes on
    and reads the topic again from offset 0 once it is created anew."""
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, ["a"], partition=0)
    seen: dict[int, list[str]] = {}
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = KafkaUtils.createDirectStream(ssc, [kafka_topic], params(kafka_cluster, failOnDataLoss=str(fail).lower()))
    stream.foreachRDD(lambda t, rdd: seen.__setitem__(batch_ms(t), sorted(v for _, v in rdd.collect())))

    def recreate() -> None:
        kafka_cluster.create_topic(kafka_topic, 2)
        kafka_cluster.produce(kafka_topic, ["b"], partition=0)

    errors = run_failing(ssc, clock, [None, lambda: kafka_cluster.delete_topic(kafka_topic), recreate])
    if fail:
        assert errors == [f"Error generating jobs for time 2000 ms: KafkaDataLossError: Set({kafka_topic}-0, {kafka_topic}-1) are gone. "
                          f"Some data may have been missed. {LOST_TRUE}"]
        # Batch 2 was never generated; batch 3 starts where batch 1 ended, which the new topic's partition 0 already reached.
        assert seen == {1000: ["a"], 3000: []}
    else:
        assert errors == []
        assert seen == {1000: ["a"], 2000: [], 3000: ["b"]}


LOST_TRUE = ("Some data may have been lost because they are not available in Kafka any more; either the data was aged out by Kafka "
             "or the topic may have been deleted before all the data in the topic was processed. If you don't want your streaming "
             'query to fail on such cases, set the source option "failOnDataLoss" to "false".')


@pytest.mark.parametrize("fail", [True, False])
def test_records_aged_out_before_a_batch_reads_them_fail_it_with_sparks_message_unless_fail_on_data_loss_is_false(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock, fail: bool) -> None:
    """Records 2-4 of a planned-to-be-read partition are deleted (retention): the task reports Spark's "Cannot fetch offset";
    with failOnDataLoss=false the batch reads what is left."""
    kafka_cluster.create_topic(kafka_topic, 1)
    kafka_cluster.produce(kafka_topic, ["a", "b"], partition=0)
    seen: dict[int, list[str]] = {}
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = KafkaUtils.createDirectStream(ssc, [kafka_topic], params(kafka_cluster, failOnDataLoss=str(fail).lower()))
    stream.foreachRDD(lambda t, rdd: seen.__setitem__(batch_ms(t), sorted(v for _, v in rdd.collect())))

    def age_out() -> None:
        kafka_cluster.produce(kafka_topic, ["c", "d", "e", "f"], partition=0)
        kafka_cluster.delete_records(kafka_topic, 0, 4)

    errors = run_failing(ssc, clock, [None, age_out])
    if fail:
        [error] = errors
        assert (f"KafkaDataLossError: Cannot fetch offset 2 (GroupId: spark-executor-aiodstream, TopicPartition: {kafka_topic}-0). "
                f"{LOST_TRUE}") in error
        assert seen == {1000: ["a", "b"]}
    else:
        assert errors == []
        assert seen == {1000: ["a", "b"], 2000: ["e", "f"]}


def test_a_checkpointed_restart_rereads_exactly_the_uncommitted_batch(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock, tmp_path: Any) -> None:
    """Batch 2's output fails (logged, never committed); records arrive while the program is down; the resumed program
    re-runs batch 2 with exactly its logged ranges, then batch 3 reads the rest. The offsets log holds Kafka's JSON."""
    checkpoint = str(tmp_path / "ck")
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, ["a", "b"], partition=0)
    kafka_cluster.produce(kafka_topic, ["c"], partition=1)

    def program(outputs: dict[int, list[str]], fail_at: int | None, run_clock: ManualClock) -> Callable[[], StreamingContext]:
        def output(time: Any, rdd: Any) -> None:
            if batch_ms(time) == fail_at:
                raise RuntimeError("simulated crash")
            outputs[batch_ms(time)] = sorted(v for _, v in rdd.collect())

        def setup() -> StreamingContext:
            ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=run_clock)
            KafkaUtils.createDirectStream(ssc, [kafka_topic], params(kafka_cluster)).foreachRDD(output)
            ssc.checkpoint(checkpoint)
            return ssc
        return setup

    first: dict[int, list[str]] = {}
    run(program(first, 2000, clock)(), clock, [None, lambda: kafka_cluster.produce(kafka_topic, ["d"], partition=1)])
    kafka_cluster.produce(kafka_topic, ["e"], partition=0)  # while down
    with open(tmp_path / "ck" / "offsets" / "1") as entry:
        assert entry.read().splitlines()[-1] == f'{{"{kafka_topic}":{{"0":2,"1":2}}}}'
    assert not (tmp_path / "ck" / "commits" / "1").exists()
    from streaming.dstream import load_recipe

    recipe = load_recipe(checkpoint)  # the graph was saved: getOrCreate's default rebuilds the stream from it
    assert recipe is not None and [c.method for c in recipe.calls] == ["inputStream", "foreachRDD"]
    rebuilt = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=ManualClock(0))
    recipe.replay(rebuilt, DStream)
    [stream] = rebuilt.runtime.graph.input_streams  # type: ignore[attr-defined]
    assert isinstance(stream, DirectKafkaInputDStream) and stream.topics == (kafka_topic,)

    second: dict[int, list[str]] = {}
    again = ManualClock(clock.now())
    resumed = StreamingContext.getOrCreate(checkpoint, program(second, None, again), restoreGraph=False)
    run(resumed, again, [None])
    assert first == {1000: ["a", "b", "c"]}
    assert second == {2000: ["d"], 3000: ["e"]}


def test_a_rate_setting_that_is_not_a_whole_number_is_refused_when_the_stream_is_made(spark_context: Any, clock: ManualClock) -> None:
    """Spark reads maxRatePerPartition with getLong; "fast" is refused at createDirectStream, naming the setting."""
    from tests.streaming.test_spark_integration import spark_conf

    with spark_conf(spark_context, spark__streaming__kafka__maxRatePerPartition="fast"):
        ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
        with pytest.raises(ValueError, match=r"^spark\.streaming\.kafka\.maxRatePerPartition must be a whole number of records "
                                             r"per second, got 'fast'$"):
            KafkaUtils.createDirectStream(ssc, ["t"], {"metadata.broker.list": "127.0.0.1:9"})


def test_a_continuous_context_refuses_the_direct_stream(spark_context: Any) -> None:
    """A direct stream makes micro-batches: under a Continuous trigger it is refused at the call, in Spark's words."""
    from scheduler import InvalidPipelineError
    from streaming.continuous import Continuous

    ssc = StreamingContext(spark_context, Continuous("1 second"))
    refused = r"^Data source KafkaUtils\.createDirectStream does not support continuous processing\.$"
    with pytest.raises(InvalidPipelineError, match=refused):
        KafkaUtils.createDirectStream(ssc, ["t"], {"metadata.broker.list": "127.0.0.1:9"})


def test_with_read_committed_each_batch_ends_where_the_executors_stop_reading(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """``isolation.level=read_committed``: the driver plans each batch to the last stable offset, as its executors read
    (Spark's consumer asks for the end with the user's isolation level); past it a task would wait for records it
    cannot read."""
    from streaming.kafka._client import KafkaClusterView

    asked: list[bool] = []
    latest = KafkaClusterView.latest_offsets

    def recording(self: Any, tps: Any, *, committed_only: bool = False) -> Any:
        asked.append(committed_only)
        return latest(self, tps, committed_only=committed_only)

    monkeypatch.setattr(KafkaClusterView, "latest_offsets", recording)
    kafka_cluster.create_topic(kafka_topic, 1)
    kafka_cluster.produce(kafka_topic, ["a", "b"], partition=0)
    outputs: dict[int, list[str]] = {}
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = KafkaUtils.createDirectStream(ssc, [kafka_topic], params(kafka_cluster, isolation_level="read_committed"))
    stream.foreachRDD(lambda t, rdd: outputs.__setitem__(batch_ms(t), sorted(rdd.values().collect())))
    run(ssc, clock, [None, lambda: kafka_cluster.produce(kafka_topic, ["c"], partition=0)])
    assert outputs == {1000: ["a", "b"], 2000: ["c"]}
    assert asked and all(asked)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_immediate_stop_does_not_wait_for_a_cluster_that_does_not_answer(
        spark_context: Any, kafka_cluster: Any, kafka_topic: str, clock: ManualClock, backend: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's planning asks the cluster in a thread, for up to its metadata timeout when no broker answers (the
    stop waited about a minute for it): the stop leaves it, and the thread closes the driver's clients when done."""
    import threading

    from streaming.kafka._client import KafkaClusterView

    entered, release, returned, closed = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    partitions, close = KafkaClusterView.partitions, KafkaClusterView.close

    def unanswered(self: Any, topics: Any) -> Any:
        entered.set()
        release.wait(60)  # a broker that does not answer
        returned.set()
        return partitions(self, topics)

    def closing(self: Any) -> None:
        close(self)
        closed.set()

    monkeypatch.setattr(KafkaClusterView, "partitions", unanswered)
    monkeypatch.setattr(KafkaClusterView, "close", closing)
    kafka_cluster.create_topic(kafka_topic, 1)
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = KafkaUtils.createDirectStream(ssc, [kafka_topic], params(kafka_cluster))
    stream.foreachRDD(lambda rdd: rdd.count())

    async def drive() -> None:
        async with ssc:
            await ssc.start_async()
            clock.advance(INTERVAL_MS)
            assert await anyio.to_thread.run_sync(entered.wait, 60), "no batch asked the cluster"
            advancing = anyio.CancelScope()

            async def stop() -> None:
                await ssc.stop_async(stopSparkContext=False)
                advancing.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(stop)
                # The immediate stop's abandon_after runs on the context's clock: moved whenever the stop waits on it,
                # until the stop ends (real time bounds this only when the stop waits for the thread: the failure).
                with anyio.move_on_after(30), advancing:
                    while True:
                        await clock.wait_for_sleepers(1)
                        clock.advance(1000)
                        await settle()
            assert not returned.is_set(), "the stop waited for the cluster's answer"

    try:
        anyio.run(drive, backend=backend)
    finally:
        release.set()
    assert closed.wait(60), "the planning thread did not close the view the stop left to it"
    # A planning call the stop left before it began makes no client and commits nothing.
    with pytest.raises(KafkaError, match=r"was stopped while this batch was being planned$"):
        stream._plan_sync(None)
    assert stream._view is None
