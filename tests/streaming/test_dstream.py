"""DStream API: pyspark's argument checks and error messages, fusion, persistence flags, time slices, validation at start.

The conformance suite compares outputs with pyspark's; these tests pin what it cannot: the
exact exceptions and messages, and the bookkeeping behind them. Tests that need no Spark
build streams on a context without a SparkContext (nothing here touches it).
"""

from __future__ import annotations

import os
import threading
import time as _time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from scheduler import InvalidDurationError, InvalidPipelineError, StreamingStateError, Time
from streaming import DStream, StreamingContext
from streaming.dstream import ReducedWindowedDStream, StateDStream, WindowedDStream
from streaming.dstream._arguments import time_ms as _time_to_ms
from streaming.dstream._outputs import saved_file_name as _file_name
from streaming.inputs import QueueInputDStream
from streaming.spark import batch_datetime


@pytest.fixture
def ssc() -> StreamingContext:
    """A context with 0.5 s batches and no SparkContext (streams are built, never run)."""
    return StreamingContext(None, 0.5)


@pytest.fixture
def stream(ssc: StreamingContext) -> DStream:
    """An input stream of ``ssc`` with nothing queued."""
    return QueueInputDStream(ssc._env, [], True, None)


def raises_exactly(exc_type: type[BaseException], message: str, call: Callable[[], object]) -> BaseException:
    """Run ``call`` and check that it raises ``exc_type`` with exactly ``message``."""
    with pytest.raises(exc_type) as info:
        call()
    assert str(info.value) == message
    return info.value


# -- window arguments (pyspark validates them in Python, with ValueError) --


def test_window_must_be_a_multiple_of_the_parent_slide(stream: DStream) -> None:
    """window(0.1) on 0.5 s batches raises pyspark's ValueError message."""
    err = raises_exactly(InvalidDurationError, "windowDuration must be multiple of the parent dstream's slide (batch) duration (500 ms)",
                         lambda: stream.window(0.1))
    assert isinstance(err, ValueError)


def test_window_slide_must_be_a_multiple_of_the_parent_slide(stream: DStream) -> None:
    """window(1, 0.1) on 0.5 s batches raises the slideDuration variant."""
    raises_exactly(InvalidDurationError, "slideDuration must be multiple of the parent dstream's slide (batch) duration (500 ms)",
                   lambda: stream.window(1, 0.1))


def test_reduce_by_key_and_window_validates_like_window(stream: DStream) -> None:
    """reduceByKeyAndWindow checks its durations first, with and without an inverse function."""
    message = "windowDuration must be multiple of the parent dstream's slide (batch) duration (500 ms)"
    raises_exactly(InvalidDurationError, message, lambda: stream.reduceByKeyAndWindow(max, None, 0.1, 0.5, 2))
    raises_exactly(InvalidDurationError, message, lambda: stream.reduceByKeyAndWindow(max, min, 0.1, 0.5, 2))


def test_window_slide_is_validated_against_the_windowed_streams_parent(stream: DStream) -> None:
    """A window of a window checks multiples of its parent's slide (1 s here), not of the batch."""
    slow = stream.window(1, 1)
    raises_exactly(InvalidDurationError, "windowDuration must be multiple of the parent dstream's slide (batch) duration (1000 ms)",
                   lambda: slow.window(1.5))


def test_windowed_stream_rejects_bad_durations_like_spark(stream: DStream) -> None:
    """Built directly, a WindowedDStream raises Spark's own messages."""
    from scheduler import Milliseconds

    raises_exactly(InvalidPipelineError,
                   "The window duration of windowed DStream (700 ms) must be a multiple of the slide duration of parent DStream (500 ms)",
                   lambda: WindowedDStream(stream, Milliseconds(700), Milliseconds(500)))
    raises_exactly(InvalidPipelineError,
                   "The slide duration of windowed DStream (700 ms) must be a multiple of the slide duration of parent DStream (500 ms)",
                   lambda: WindowedDStream(stream, Milliseconds(1000), Milliseconds(700)))


def test_window_durations_must_be_positive_numbers(stream: DStream) -> None:
    """A window of zero seconds is refused up front (pyspark would build a stream that cannot run)."""
    with pytest.raises(InvalidDurationError, match="windowDuration must be a positive number of seconds, got 0"):
        stream.window(0)


# -- reduceByKeyAndWindow decision table (spec 11.2) --


def test_reduce_by_key_and_window_with_inverse_is_incremental_and_must_checkpoint(stream: DStream) -> None:
    """With invFunc the result is a ReducedWindowedDStream over the per-batch reduction, which must checkpoint."""
    windowed = stream.reduceByKeyAndWindow(max, min, 2.5, 0.5, 2)
    assert isinstance(windowed, ReducedWindowedDStream)
    assert windowed.must_checkpoint
    assert windowed._slide.milliseconds == 500


def test_reduce_by_key_and_window_without_inverse_reduces_a_plain_window(stream: DStream) -> None:
    """Without invFunc it is window(...).reduceByKey(...): nothing must checkpoint, filterFunc is dropped."""
    reduced = stream.reduceByKeyAndWindow(max, None, 1.5, 1.0, 2, filterFunc=lambda kv: False)
    window = reduced._parents[0]
    assert isinstance(window, WindowedDStream)
    assert (window._window.milliseconds, window._slide.milliseconds) == (1500, 1000)
    assert not any(s.must_checkpoint for s in (reduced, window))


def test_window_slide_defaults_to_the_parent_slide(stream: DStream) -> None:
    """reduceByKeyAndWindow with an inverse and no slide slides by the parent's slide."""
    assert stream.reduceByKeyAndWindow(max, min, 2.5, None, 2)._slide.milliseconds == 500
    assert stream.window(1.5)._slide.milliseconds == 500


def test_count_by_window_uses_the_inverse_path(stream: DStream) -> None:
    """countByWindow, countByValueAndWindow and groupByKeyAndWindow all need checkpointing, as in pyspark."""
    for derived in (stream.countByWindow(1.5, 0.5), stream.countByValueAndWindow(1.5, 0.5, 2),
                    stream.groupByKeyAndWindow(1.5, 0.5, 2)):
        chain = [derived]
        while chain[-1]._parents:
            chain.append(chain[-1]._parents[0])
        assert any(isinstance(s, ReducedWindowedDStream) for s in chain)


# -- argument checks of transform, transformWith and union --


def test_transform_function_takes_one_or_two_arguments(stream: DStream) -> None:
    """transform with a three-argument function raises pyspark's AssertionError."""
    raises_exactly(AssertionError, "func should take one or two arguments", lambda: stream.transform(lambda a, b, c: a))


def test_transform_with_function_takes_two_or_three_arguments(stream: DStream) -> None:
    """transformWith with a one-argument function raises pyspark's AssertionError."""
    raises_exactly(AssertionError, "func should take two or three arguments", lambda: stream.transformWith(lambda a: a, stream))


def test_union_needs_the_same_slide(stream: DStream) -> None:
    """DStream.union of streams with different slides raises pyspark's ValueError message."""
    err = raises_exactly(InvalidPipelineError, "the two DStream should have same slide duration", lambda: stream.union(stream.window(1, 1)))
    assert isinstance(err, ValueError)


def test_context_union_checks(ssc: StreamingContext, stream: DStream) -> None:
    """ssc.union: nothing to unite, one stream returned as is, mixed slides refused."""
    raises_exactly(InvalidPipelineError, "should have at least one DStream to union", lambda: ssc.union())
    assert ssc.union(stream) is stream
    raises_exactly(InvalidPipelineError, "All DStreams should have same slide duration", lambda: ssc.union(stream, stream.window(1, 1)))


def test_context_transform_checks(ssc: StreamingContext, stream: DStream) -> None:
    """ssc.transform raises Spark's requirement messages for no streams and mixed slides."""
    raises_exactly(InvalidPipelineError, "requirement failed: List of DStreams to transform is empty", lambda: ssc.transform([], list))
    raises_exactly(InvalidPipelineError, "requirement failed: Some of the DStreams have different slide durations",
                   lambda: ssc.transform([stream, stream.window(1, 1)], list))


def test_union_of_streams_of_two_contexts_is_refused(ssc: StreamingContext, stream: DStream) -> None:
    """ssc.union of streams from two contexts raises Spark's requirement message."""
    other = QueueInputDStream(StreamingContext(None, 0.5)._env, [], True, None)
    raises_exactly(InvalidPipelineError, "requirement failed: Some of the DStreams have different contexts",
                   lambda: ssc.union(stream, other))


@pytest.mark.parametrize("combine", ["union", "join", "cogroup", "leftOuterJoin", "transformWith"])
def test_two_stream_operations_refuse_a_stream_of_another_context(stream: DStream, combine: str) -> None:
    """a.union(b) (and every two-stream operation) with b of another context is refused at the call: starting a would
    otherwise read b's input as its own."""
    other = QueueInputDStream(StreamingContext(None, 0.5)._env, [], True, None)
    call = (lambda: stream.transformWith(lambda x, y: x, other)) if combine == "transformWith" else (
        lambda: getattr(stream, combine)(other, 2) if combine != "union" else stream.union(other))
    raises_exactly(InvalidPipelineError, "requirement failed: Some of the DStreams have different contexts", call)


def test_a_pyspark_dstream_given_by_mistake_is_named_in_the_error(ssc: StreamingContext, stream: DStream) -> None:
    """A pyspark.streaming DStream where one of ours belongs: a TypeError that says so, not an AttributeError later."""
    from pyspark.streaming.dstream import DStream as PysparkDStream

    theirs = PysparkDStream.__new__(PysparkDStream)  # its type is what is checked
    message = ("{} needs a streaming.DStream, got a pyspark.streaming.dstream.DStream: a pyspark.streaming DStream cannot be "
               "combined with aiodstream's; make both with one streaming.StreamingContext")
    raises_exactly(TypeError, message.format("union"), lambda: stream.union(theirs))
    raises_exactly(TypeError, message.format("join"), lambda: stream.join(theirs, 2))
    raises_exactly(TypeError, message.format("transformWith"), lambda: stream.transformWith(lambda a, b: a, theirs))
    raises_exactly(TypeError, message.format("transform"), lambda: ssc.transform([stream, theirs], list))
    raises_exactly(TypeError, message.format("union"), lambda: ssc.union(stream, theirs))
    raises_exactly(TypeError, "union needs a streaming.DStream, got a builtins.int", lambda: stream.union(3))  # type: ignore[arg-type]


def test_context_transform_must_return_an_rdd(ssc: StreamingContext) -> None:
    """ssc.transform whose function returns None fails the batch with Spark's message."""
    source = QueueInputDStream(ssc._env, [object()], True, None)
    transformed = ssc.transform([source], lambda rdds: None)
    transformed.initialize(Time(0))
    raises_exactly(InvalidPipelineError, "Transform function must not return null. Return SparkContext.emptyRDD() instead to represent "
                   "no element as the result of transformation.", lambda: transformed._get_or_compute(Time(500)))


def test_context_transform_and_union_need_every_parent_rdd(ssc: StreamingContext) -> None:
    """ssc.transform and ssc.union fail a batch in which a parent has no RDD (Spark's messages)."""
    source = QueueInputDStream(ssc._env, [object(), object()], True, None)
    missing = source.transform(lambda rdd: None)
    transformed = ssc.transform([source, missing], lambda rdds: rdds[0])
    united = ssc.union(source, missing)
    for stream in (transformed, united):
        stream.initialize(Time(0))
    raises_exactly(StreamingStateError, "Couldn't generate RDD from parent at time 500 ms", lambda: transformed._get_or_compute(Time(500)))
    raises_exactly(StreamingStateError, "Could not generate RDD from a parent for unifying at time 500 ms",
                   lambda: united._get_or_compute(Time(500)))


def test_context_transform_gets_a_tuple_in_parent_order(ssc: StreamingContext) -> None:
    """ssc.transform's function receives the parents' RDDs as a tuple, in the order given."""
    first, second = object(), object()
    a = QueueInputDStream(ssc._env, [first], True, None)
    b = QueueInputDStream(ssc._env, [second], True, None)
    got: list[Any] = []
    transformed = ssc.transform([a, b], lambda rdds: got.append(rdds) or first)
    transformed.initialize(Time(0))
    assert transformed._get_or_compute(Time(500)) is first
    assert got == [(first, second)]


# -- fusion and persistence flags --


def test_consecutive_transforms_are_fused(stream: DStream) -> None:
    """map(f).filter(g) is one stream over the input, as in pyspark (the intermediate stream is bypassed)."""
    chained = stream.map(abs).filter(bool).glom()
    assert chained._parents == (stream,)


def test_a_cached_or_checkpointed_stream_is_not_fused_past(stream: DStream) -> None:
    """Caching or checkpointing an intermediate stream makes it a real parent of what follows."""
    cached = stream.map(abs).cache()
    assert cached.map(abs)._parents == (cached,)
    checkpointed = stream.map(abs).checkpoint(1)
    assert checkpointed.map(abs)._parents == (checkpointed,)


def test_a_fused_transform_hands_none_to_the_next_function(ssc: StreamingContext) -> None:
    """transform returning None then map fails with AttributeError, as pyspark's fused chain does."""
    source = QueueInputDStream(ssc._env, [object()], True, None)
    chained = source.transform(lambda rdd: None).map(abs)
    chained.initialize(Time(0))
    with pytest.raises(AttributeError, match="mapPartitionsWithIndex"):
        chained._get_or_compute(Time(500))


def test_a_batch_without_an_rdd_is_asked_again(ssc: StreamingContext) -> None:
    """A transform result of None is not remembered: asking for the batch again calls the function again."""
    calls: list[datetime] = []

    def nothing(t: datetime, rdd: Any) -> None:
        calls.append(t)

    source = QueueInputDStream(ssc._env, [object()], True, None)
    skipped = source.transform(nothing)
    skipped.initialize(Time(0))
    assert skipped._get_or_compute(Time(500)) is None
    assert skipped._get_or_compute(Time(500)) is None
    assert calls == [batch_datetime(Time(500))] * 2


def test_cache_persist_and_checkpoint_set_pyspark_flags(stream: DStream) -> None:
    """cache and persist set is_cached; checkpoint sets is_checkpointed and persists in memory."""
    from pyspark import StorageLevel

    a, b, c = stream.map(abs), stream.map(abs), stream.map(abs)
    assert (a.is_cached, a.is_checkpointed) == (False, False)
    assert a.cache() is a and a.is_cached and a.storage_level == StorageLevel.MEMORY_ONLY
    assert b.persist(StorageLevel.DISK_ONLY) is b and b.is_cached and b.storage_level == StorageLevel.DISK_ONLY
    assert c.checkpoint(1.5) is c and c.is_checkpointed and not c.is_cached
    assert c.checkpoint_interval is not None and c.checkpoint_interval.milliseconds == 1500
    assert c.storage_level == StorageLevel.MEMORY_ONLY


def test_a_window_persists_its_parent(stream: DStream) -> None:
    """window() persists its parent, and persisting the window persists the parent instead (Spark's override)."""
    from pyspark import StorageLevel

    parent = stream.map(abs)
    window = parent.window(1.5)
    assert parent.storage_level == StorageLevel.MEMORY_ONLY and not parent.is_cached
    window.persist(StorageLevel.DISK_ONLY)
    assert window.storage_level is None and parent.storage_level == StorageLevel.DISK_ONLY


def test_persist_and_checkpoint_after_start_are_refused(stream: DStream) -> None:
    """Once initialised (the context started), persist and checkpoint raise Spark's messages."""
    from pyspark import StorageLevel

    derived = stream.map(abs)
    derived.initialize(Time(0))
    raises_exactly(StreamingStateError, "Cannot change storage level of a DStream after streaming context has started",
                   lambda: derived.persist(StorageLevel.MEMORY_ONLY))
    raises_exactly(StreamingStateError, "Cannot change checkpoint interval of a DStream after streaming context has started",
                   lambda: derived.checkpoint(1))


class FakeRDD:
    """Just enough of an RDD for the bookkeeping: counts unpersist calls."""

    def __init__(self) -> None:
        self.unpersisted = 0

    def persist(self, level: Any) -> FakeRDD:
        return self

    def checkpoint(self) -> None:
        pass

    def unpersist(self, blocking: bool = False) -> FakeRDD:
        self.unpersisted += 1
        return self


def test_an_rdd_remembered_under_a_later_time_stays_cached(ssc: StreamingContext) -> None:
    """Forgetting a batch does not unpersist an RDD that a later batch still uses (a carried-over state)."""
    from pyspark import StorageLevel

    rdd = FakeRDD()
    source = QueueInputDStream(ssc._env, [rdd, rdd], True, None)
    source.persist(StorageLevel.MEMORY_ONLY)
    source.initialize(Time(0))
    source._get_or_compute(Time(500))
    source._get_or_compute(Time(1000))
    queued = ssc._env.graph.releases._rdds  # unpersisting is a py4j call: the graph does it off the loop
    source.clear_metadata(Time(1000))
    assert queued == [] and list(source.generated) == [Time(1000)]
    source.clear_metadata(Time(1500))
    assert queued == [rdd] and not source.generated and rdd.unpersisted == 0


# -- initialisation: checkpoint interval and remember durations --


def test_stateful_streams_checkpoint_every_ten_seconds_rounded_up_to_the_slide(ssc: StreamingContext) -> None:
    """A stream that must checkpoint gets the smallest multiple of its slide of at least 10 s, and remembers twice that."""
    slow = QueueInputDStream(StreamingContext(None, 0.3)._env, [], True, None)
    state = slow.updateStateByKey(lambda vs, s: s, 2)
    assert isinstance(state, StateDStream)
    state.initialize(Time(0))
    assert state.checkpoint_interval is not None and state.checkpoint_interval.milliseconds == 10_200
    assert state.remember_duration is not None and state.remember_duration.milliseconds == 20_400


def test_a_window_makes_its_parent_remember_the_window_too(stream: DStream) -> None:
    """A 2 s window's parent remembers the window's remember duration plus 2 s."""
    window = stream.window(2, 0.5)
    window.initialize(Time(0))
    window.remember(None)
    assert window.remember_duration is not None and window.remember_duration.milliseconds == 500
    assert stream.remember_duration is not None and stream.remember_duration.milliseconds == 2500


def test_update_state_by_key_with_a_list_initial_rdd_needs_spark_only_when_given(stream: DStream) -> None:
    """An empty initialRDD is ignored, as pyspark ignores a falsy one."""
    state = stream.updateStateByKey(lambda vs, s: s, 2, initialRDD=[])
    assert isinstance(state, StateDStream) and state._initial is None


# -- slices --


def test_slice_before_start_is_refused(stream: DStream) -> None:
    """slice on a stream that was never initialised raises."""
    with pytest.raises(StreamingStateError, match="has not been initialized"):
        stream.slice(0, 1)


def test_slice_bounds_from_datetimes_lose_their_sub_second_part() -> None:
    """A datetime bound is read at whole-second precision (pyspark's time.mktime quirk); numbers keep milliseconds."""
    moment = datetime(2024, 3, 1, 12, 30, 15, 750_000)
    whole = int(_time.mktime(moment.timetuple()) * 1000)
    assert _time_to_ms(moment) == whole
    assert whole % 1000 == 0
    assert _time_to_ms(1_700_000_000.25) == 1_700_000_000_250
    assert _time_to_ms(12) == 12_000


def test_slice_bounds_must_be_times() -> None:
    """A bound that is neither a datetime nor a number raises TypeError."""
    with pytest.raises(TypeError, match="slice bounds must be datetimes or unix seconds"):
        _time_to_ms("noon")  # type: ignore[arg-type]


def test_slice_times_are_aligned_down_and_inclusive(stream: DStream) -> None:
    """Grid times from begin to end, both included, floored to the grid; none at or before zero time."""
    stream.initialize(Time(1000))
    times = [t.milliseconds for t in stream._slice_times(Time(900), Time(2700))]
    assert times == [1000, 1500, 2000, 2500]
    assert [stream._is_time_valid(Time(ms)) for ms in times] == [False, True, True, True]


def test_saved_file_names() -> None:
    """saveAsTextFiles writes to prefix-<ms> or prefix-<ms>.suffix (an empty suffix still adds the dot)."""
    assert _file_name("out/nums", None, Time(1_700_000_000_250)) == "out/nums-1700000000250"
    assert _file_name("out/nums", "txt", Time(5)) == "out/nums-5.txt"
    assert _file_name("p", "", Time(5)) == "p-5."


def test_pyspark_private_slide_duration(stream: DStream) -> None:
    """_slideDuration is the slide in seconds, as pyspark exposes it."""
    assert stream._slideDuration == 0.5
    assert stream.window(2, 1)._slideDuration == 1.0


# -- with Spark: validation at start, saveAsTextFiles replays --


@pytest.fixture
def no_checkpoint_dir(spark_context: Any) -> Iterator[None]:
    """Unset the SparkContext's checkpoint directory for one test (Spark has no public way to)."""
    jsc = spark_context._jsc.sc()
    saved = jsc.getCheckpointDir()
    getattr(jsc, "checkpointDir_$eq")(spark_context._jvm.scala.Option.empty())
    try:
        yield
    finally:
        getattr(jsc, "checkpointDir_$eq")(saved)


def start_should_fail(sc: Any, build: Callable[[StreamingContext], None], message: str) -> None:
    """Build a graph on a new context and check that start() raises ``message`` and leaves the context stopped."""
    ssc = StreamingContext(sc, 0.5)
    build(ssc)
    try:
        raises_exactly(InvalidPipelineError, message, ssc.start)
        assert ssc.getState() == "STOPPED"
        assert StreamingContext.getActive() is None
    finally:
        ssc.stop(stopSparkContext=False)


@pytest.mark.spark
@pytest.mark.usefixtures("no_checkpoint_dir")
@pytest.mark.parametrize("op", ["updateStateByKey", "countByWindow", "reduceByKeyAndWindow", "checkpoint"])
def test_checkpointing_streams_need_a_checkpoint_directory(spark_context: Any, op: str) -> None:
    """Stateful, inverse-window and checkpointed streams fail start without a checkpoint directory (Spark's message)."""
    def build(ssc: StreamingContext) -> None:
        pairs = ssc.queueStream([[("a", 1)]]).map(lambda x: x)
        derived = {
            "updateStateByKey": lambda: pairs.updateStateByKey(lambda vs, s: s),
            "countByWindow": lambda: pairs.countByWindow(1, 0.5),
            "reduceByKeyAndWindow": lambda: pairs.reduceByKeyAndWindow(max, min, 1),
            "checkpoint": lambda: pairs.checkpoint(1),
        }[op]()
        derived.foreachRDD(lambda rdd: None)

    start_should_fail(spark_context, build,
                      "requirement failed: The checkpoint directory has not been set. Please set it by StreamingContext.checkpoint().")


@pytest.mark.spark
def test_a_plain_window_needs_no_checkpoint_directory(spark_context: Any, no_checkpoint_dir: None) -> None:
    """A window without an inverse function starts without a checkpoint directory."""
    ssc = StreamingContext(spark_context, 0.5)
    ssc.queueStream([[1]]).window(1).reduceByKeyAndWindow(max, None, 1).foreachRDD(lambda rdd: None)
    try:
        ssc.start()
        assert ssc.getState() == "ACTIVE"
    finally:
        ssc.stop(stopSparkContext=False)


@pytest.mark.spark
@pytest.mark.parametrize(
    ("interval", "message"),
    [
        (0.25, "requirement failed: The checkpoint interval for TransformedDStream has been set to 250 ms which is lower than its "
               "slide time (500 ms). Please set it to at least 500 ms."),
        (0.75, "requirement failed: The checkpoint interval for TransformedDStream has been set to  750 ms which not a multiple of "
               "its slide time (500 ms). Please set it to a multiple of 500 ms."),
    ],
)
def test_checkpoint_interval_must_suit_the_slide(spark_context: Any, tmp_path: Any, interval: float, message: str) -> None:
    """A checkpoint interval below the slide, or not a multiple of it, fails start with Spark's message (double space kept)."""
    def build(ssc: StreamingContext) -> None:
        ssc.checkpoint(str(tmp_path))
        ssc.queueStream([[1]]).map(abs).checkpoint(interval).foreachRDD(lambda rdd: None)

    start_should_fail(spark_context, build, message)


@pytest.mark.spark
def test_checkpointing_a_window_fails_for_want_of_a_storage_level(spark_context: Any, tmp_path: Any) -> None:
    """window(...).checkpoint(...) fails start: the window forwards persist to its parent (a Spark quirk kept)."""
    def build(ssc: StreamingContext) -> None:
        ssc.checkpoint(str(tmp_path))
        ssc.queueStream([[1]]).window(1).checkpoint(1).foreachRDD(lambda rdd: None)

    start_should_fail(spark_context, build,
                      "requirement failed: WindowedDStream has been marked for checkpointing but the storage level has not been set to "
                      "enable persisting. Please use DStream.persist() to set the storage level to use memory for better checkpointing "
                      "performance.")


@pytest.mark.spark
def test_context_remember_can_be_set_once(spark_context: Any) -> None:
    """ssc.remember a second time raises Spark's requirement message."""
    ssc = StreamingContext(spark_context, 0.5)
    ssc.remember(4)
    raises_exactly(InvalidPipelineError, "requirement failed: Remember duration already set as 4000 ms. Cannot set it again.",
                   lambda: ssc.remember(5))


@pytest.mark.spark
def test_save_as_text_files_skips_a_batch_already_saved(spark_context: Any, tmp_path: Any) -> None:
    """Saving the same batch twice (a replay) keeps the first files and raises nothing."""
    ssc = StreamingContext(spark_context, 0.5)
    prefix = os.path.join(str(tmp_path), "out")
    ssc.queueStream([[1]]).saveAsTextFiles(prefix, "txt")
    save = ssc._graph.output_streams[-1]._func  # type: ignore[attr-defined]
    when = batch_datetime(Time(1_700_000_000_500))
    save(when, spark_context.parallelize(["first"], 1))
    save(when, spark_context.parallelize(["second"], 1))
    with open(os.path.join(prefix + "-1700000000500.txt", "part-00000"), encoding="utf-8") as fh:
        assert fh.read() == "first\n"


@pytest.mark.spark
def test_slice_runs_alongside_generation(spark_context: Any) -> None:
    """slice from another thread while batches are generated sees each batch's one RDD (generation is locked)."""
    ssc = StreamingContext(spark_context, 0.2)
    ssc.remember(10)
    nums = ssc.queueStream([[i] for i in range(1, 6)])
    seen: list[list[int]] = []
    done = threading.Event()

    def record(t: datetime, rdd: Any) -> None:
        if len(seen) < 5:
            seen.append(sorted(x for r in nums.slice(0, t.timestamp() + 0.0005) for x in r.collect()))
        if len(seen) >= 5:
            done.set()

    nums.foreachRDD(record)
    ssc.start()
    try:
        assert done.wait(120), "five batches did not complete"
    finally:
        ssc.stop(stopSparkContext=False)
    assert seen == [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 5]]


@pytest.mark.spark
def test_state_rdds_are_checkpointed_at_the_interval(spark_context: Any, tmp_path: Any) -> None:
    """updateStateByKey with checkpoint(batch) writes each state RDD to the checkpoint directory once an output computes it."""
    ssc = StreamingContext(spark_context, 0.2)
    ssc.checkpoint(str(tmp_path))
    state = ssc.queueStream([[("a", 1)], [("a", 2)], [("b", 3)]]).updateStateByKey(lambda vs, s: (s or 0) + sum(vs))
    state.checkpoint(0.2)
    seen: list[tuple[list[tuple[str, int]], bool]] = []

    # No threading.Event in the function: the context is checkpointed, so its functions must pickle
    # (as on pyspark, a graph that cannot be saved refuses to start).
    def record(rdd: Any) -> None:
        if len(seen) < 3:
            seen.append((sorted(rdd.collect()), rdd.isCheckpointed()))

    state.foreachRDD(record)
    ssc.start()
    try:
        deadline = _time.monotonic() + 120
        while len(seen) < 3:  # filled by the job thread
            assert _time.monotonic() < deadline, "three batches did not complete"
            _time.sleep(0.01)
    finally:
        ssc.stop(stopSparkContext=False)
    assert seen == [([("a", 1)], True), ([("a", 3)], True), ([("a", 3), ("b", 3)], True)]
    assert any(name.startswith("rdd-") for _, dirs, _ in os.walk(tmp_path) for name in dirs)


def test_a_graph_without_output_operations_is_refused_with_sparks_require_message(ssc: StreamingContext, stream: DStream) -> None:
    """Spark's DStreamGraph.validate: require(outputStreams.nonEmpty, ...), so the message has the 'requirement failed: ' prefix."""
    from scheduler import InputInfoTracker

    stream.map(abs)  # a transformation is not an output operation
    raises_exactly(InvalidPipelineError, "requirement failed: No output operations registered, so nothing to execute",
                   lambda: ssc._graph.start(Time(0), InputInfoTracker()))


def test_an_output_operation_is_named_after_the_users_call_site(stream: DStream) -> None:
    """foreachRDD names its output operation 'foreachRDD at <file>:<line>' of the caller, skipping aiodstream's frames."""
    import inspect

    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    stream.foreachRDD(lambda rdd: None)
    stream.pprint()  # pprint calls foreachRDD inside aiodstream: still the user's line
    pprint_line = line + 1
    names = [s.name for s in stream._ssc._graph.output_streams]  # type: ignore[attr-defined]
    assert names == [f"foreachRDD at test_dstream.py:{line}", f"foreachRDD at test_dstream.py:{pprint_line}"]


def test_the_times_an_output_reads_a_stream_at_follow_its_windows(stream: DStream) -> None:
    """times_read: None while every time of the stream is read; with a window shorter than its slide, exactly the
    parent's times its windows hold, also through a second reader and a window over a window."""
    from streaming.dstream import times_read

    plain = stream.map(lambda x: x)
    assert times_read(stream, [plain]) is None
    short = stream.window(0.5, 1.5)  # every third batch (0.5 s batches)
    wide = stream.window(1.0, 1.0)  # every second batch, over two: every time
    over = stream.window(1.0, 1.5).window(1.5, 3.0)  # two batches every three; of those windows, one in two is read
    for node in (short, wide, over):
        node.initialize(Time(0))
    reads_short = times_read(stream, [short])
    assert reads_short is not None
    assert [t for t in range(500, 6500, 500) if reads_short(Time(t))] == [1500, 3000, 4500, 6000]
    assert times_read(stream, [wide]) is None  # no short window anywhere: every time
    both = times_read(stream, [short, wide])
    assert both is not None and all(both(Time(t)) for t in range(500, 6500, 500))
    reads_over = times_read(stream, [over])
    assert reads_over is not None
    assert [t for t in range(500, 6500, 500) if reads_over(Time(t))] == [2500, 3000, 5500, 6000]
    assert reads_short(Time(0)) is False and reads_short(Time(750)) is False  # before the first batch; off the grid
    # An inverse-reduced window reads its parent over (t - window, t] too (pyspark's PythonReducedWindowedDStream).
    reduced = stream.map(lambda x: (x, 1)).reduceByKeyAndWindow(lambda a, b: a + b, lambda a, b: a - b, 0.5, 1.5, 2)
    reduced.initialize(Time(0))
    reads_reduced = times_read(stream, [reduced])
    assert reads_reduced is not None
    assert [t for t in range(500, 6500, 500) if reads_reduced(Time(t))] == [1500, 3000, 4500, 6000]


def test_a_transform_function_that_returns_no_rdd_fails_the_batch(ssc: StreamingContext) -> None:
    """transform and transformWith returning a list (not an RDD) fail the batch's generation, as pyspark's do (it reads
    the result's _jrdd): the list reached the outputs as the batch's data; None and an empty result stay no RDD."""
    class Rdd:
        def mapPartitionsWithIndex(self, f: Any) -> Rdd:
            return self

    source = QueueInputDStream(ssc._env, [Rdd(), Rdd(), Rdd()], True, None)
    listed = source.transform(lambda rdd: [1])
    paired = source.transformWith(lambda a, b: [a, b], source)
    kept = source.transform(lambda rdd: rdd)
    nothing = source.transform(lambda rdd: None)
    for stream in (listed, paired, kept, nothing):
        stream.initialize(Time(0))
    raises_exactly(TypeError, "the transform function must return an RDD (or None), got list [1]",
                   lambda: listed._get_or_compute(Time(500)))
    with pytest.raises(TypeError, match="the transformWith function must return an RDD"):
        paired._get_or_compute(Time(500))
    assert isinstance(kept._get_or_compute(Time(500)), Rdd) and nothing._get_or_compute(Time(500)) is None


def test_a_slide_of_zero_is_refused_at_the_call(stream: DStream) -> None:
    """window(w, 0) and reduceByKeyAndWindow(..., w, 0): pyspark passes the 0 to the JVM and every batch fails dividing
    by it; here it is refused at once (it meant the batch interval). No slide at all still means the parent's."""
    for call in (lambda: stream.window(1.0, 0), lambda: stream.reduceByKeyAndWindow(max, None, 1.0, 0),
                 lambda: stream.countByWindow(1.0, 0.0), lambda: stream.reduceByWindow(max, None, 1.0, 0)):
        with pytest.raises(InvalidDurationError, match="slideDuration must be a positive number of seconds, got 0"):
            call()
    assert stream.window(1.0)._slide.milliseconds == 500


def test_a_context_on_a_stopped_spark_context_is_refused_at_once() -> None:
    """A SparkContext that was stopped (pyspark clears its _jsc): the StreamingContext is refused with a clear error,
    not built to fail at its first stream deep inside pyspark ('NoneType' object has no attribute 'sc')."""
    class StoppedSparkContext:
        _jsc = None

    with pytest.raises(StreamingStateError, match="on a SparkContext that has been stopped"):
        StreamingContext(StoppedSparkContext(), 1)  # type: ignore[arg-type]


def test_what_cannot_be_a_spark_context_is_refused_at_construction_naming_the_fix() -> None:
    """A master URL, pyspark's own StreamingContext, or sc._jsc where the SparkContext belongs: a TypeError at once that
    says what to pass, not an AttributeError at start ('str' object has no attribute 'parallelize')."""
    from py4j.java_gateway import JavaObject
    from pyspark.sql import SQLContext
    from pyspark.streaming import StreamingContext as PysparkStreamingContext

    start = ("sparkContext must be a pyspark SparkContext or SparkSession (classic or Spark Connect), or None for an "
             "embedded local Spark; got ")
    cases: list[tuple[object, str]] = [
        ("local[2]", "a string: for master 'local[2]' pass SparkContext('local[2]', appName), or None for an embedded local Spark"),
        (PysparkStreamingContext.__new__(PysparkStreamingContext), "pyspark's StreamingContext: pass its sparkContext"),
        (JavaObject.__new__(JavaObject), "a JVM object (sc._jsc?): pass the pyspark SparkContext itself"),
        (42, "builtins.int"),
        (StreamingContext(None, 1), "aiodstream's StreamingContext: pass its sparkContext"),
        (SQLContext.__new__(SQLContext), "a pyspark.sql.context.SQLContext: pass its sparkSession (or the SparkContext)"),
    ]
    for given, hint in cases:
        with pytest.raises(TypeError) as refused:
            StreamingContext(given, 1)  # type: ignore[arg-type]
        assert str(refused.value) == start + hint


def test_a_jobs_description_shows_milliseconds_when_batches_are_shorter_than_a_second() -> None:
    """Spark's UIUtils.formatBatchTime: HH:mm:ss, and HH:mm:ss.SSS under 1 s batches (two half-second batches' jobs had
    one description)."""
    from datetime import datetime

    from streaming.spark import job_description

    at = Time(int(datetime(2026, 11, 27, 16, 12, 46, 500_000).timestamp() * 1000))
    assert job_description(at, 1) == "Streaming job from [output operation 1, batch time 16:12:46]"
    assert job_description(at, 1, 500) == "Streaming job from [output operation 1, batch time 16:12:46.500]"
    assert job_description(at, 1, 1000) == "Streaming job from [output operation 1, batch time 16:12:46]"


def test_dstream_is_generic_as_pyspark_s_so_typed_programs_run_after_the_import_change() -> None:
    """pyspark's DStream is Generic[T_co]: `def f(lines: DStream[str]) -> DStream[tuple[str, int]]` evaluates its
    annotations at definition time (no `from __future__ import annotations`) and must not raise."""
    from typing import get_type_hints

    namespace: dict[str, object] = {}
    exec("def words(lines: DStream[str]) -> DStream[tuple[str, int]]:\n    return lines\n", {"DStream": DStream}, namespace)
    hints = get_type_hints(namespace["words"])
    assert hints == {"lines": DStream[str], "return": DStream[tuple[str, int]]}
