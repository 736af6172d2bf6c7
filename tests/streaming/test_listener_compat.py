"""pyspark-style listeners on the bus: only the callbacks a listener overrides are subscribed (and so sent to its thread)."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from pyspark.streaming.listener import StreamingListener as PySparkListener

from listeners import BatchCompleted, BatchInfo, BatchStarted, StreamingListenerBus
from scheduler import Job, JobSet, Time
from streaming import StreamingListener
from streaming._listener_compat import PySparkListenerAdapter
from tests.anyio_support import BACKENDS, run


def info() -> BatchInfo:
    job = Job(Time(1000), lambda: None, name="op")
    return BatchInfo.from_job_set(JobSet(Time(1000), [job], Time(1000)))


class OnlyCompleted(PySparkListener):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.times: list[int] = []

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803 (pyspark's name)
        self.times.append(batchCompleted.batchInfo().batchTime().milliseconds())


class Ours(StreamingListener):
    def onBatchStarted(self, batchStarted: Any) -> None:  # noqa: N803 (pyspark's name)
        pass


def test_only_overridden_callbacks_are_subscribed() -> None:
    """pyspark's own base class and ours: an inherited no-op callback subscribes nothing; a duck-typed one counts."""

    class Duck:
        def onBatchSubmitted(self, event: Any) -> None:
            pass

    assert [n for n in vars(PySparkListenerAdapter(OnlyCompleted())) if n.startswith("on_")] == ["on_batch_completed"]
    assert [n for n in vars(PySparkListenerAdapter(Ours())) if n.startswith("on_")] == ["on_batch_started"]
    assert [n for n in vars(PySparkListenerAdapter(Duck())) if n.startswith("on_")] == ["on_batch_submitted"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_bus_delivers_a_pyspark_listener_only_its_events(backend: str) -> None:
    """Started and completed events posted: the listener gets the completed one, and the bus counts one delivery."""
    listener = OnlyCompleted()

    async def body() -> None:
        bus = StreamingListenerBus()
        bus.add_listener(PySparkListenerAdapter(listener), name="pyspark")
        async with anyio.create_task_group() as tg:
            await tg.start(bus.run)
            await bus.post(BatchStarted(info()))
            await bus.post(BatchCompleted(info()))
            await bus.wait_delivered()
            bus.close()
        stats = bus.statistics().listeners[0]
        assert (stats.delivered, stats.failed) == (2, 0)  # both accepted; only one reached a callback

    run(backend, body)
    assert listener.times == [1000]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_async_camel_case_callback_is_awaited_on_the_loop(backend: str) -> None:
    """`async def onBatchCompleted` on our pyspark-style StreamingListener (an async service's natural way to write it)
    is awaited on the event loop, as a snake_case `async def` callback is; it was called on a thread and its coroutine
    dropped unawaited."""
    seen: list[tuple[int, bool]] = []

    class AsyncOurs(StreamingListener):
        async def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803 (pyspark's name)
            await anyio.lowlevel.checkpoint()
            seen.append((batchCompleted.batchInfo().batchTime().milliseconds(), threading.get_ident() == loop_thread))

    loop_thread = threading.get_ident()

    async def body() -> None:
        bus = StreamingListenerBus()
        bus.add_listener(PySparkListenerAdapter(AsyncOurs()), name="async-pyspark")
        async with anyio.create_task_group() as tg:
            await tg.start(bus.run)
            await bus.post(BatchCompleted(info()))
            await bus.wait_delivered()
            bus.close()
        assert bus.statistics().listeners[0].failed == 0

    run(backend, body)
    assert seen == [(1000, True)]


def test_every_getter_of_a_pyspark_event_is_a_method_as_on_the_java_objects_py4j_shows() -> None:
    """onStreamingStarted's time() and every JavaBatchInfo / JavaOutputOperationInfo / JavaStreamInputInfo getter are calls."""
    from listeners import StreamingStarted
    from streaming._listener_compat import _Event

    started = _Event(StreamingStarted(Time(1234)))
    assert started.time() == 1234
    batch = _Event(BatchCompleted(info())).batchInfo()
    for getter in ("batchTime", "streamIdToInputInfo", "submissionTime", "processingStartTime", "processingEndTime",
                   "schedulingDelay", "processingDelay", "totalDelay", "numRecords", "outputOperationInfos"):
        getattr(batch, getter)()
    operation = batch.outputOperationInfos()[0]
    assert [operation.batchTime().milliseconds(), operation.id(), operation.name()] == [1000, 0, "op"]
    for getter in ("description", "startTime", "endTime", "failureReason"):
        getattr(operation, getter)()


def test_a_batch_time_compares_and_hashes_as_pyspark_s_py4j_time_does() -> None:
    """batchTime() views of one time are equal dict keys; hashCode, toString and str are the JVM's (values read from Spark 4.3)."""
    from scheduler import Duration
    from streaming._listener_compat import _Event

    batch = _Event(BatchCompleted(info())).batchInfo()
    started = {batch.batchTime(): "started"}
    assert started[batch.outputOperationInfos()[0].batchTime()] == "started"
    jvm_hash_codes = {0: -460579980, 1: -213076403, 1000: 1028042801, -5: 1886624670, 2**31 - 1: -841635819,
                      2**31: 1868637916, 1_750_000_000_000: -1342549109, -1_750_000_000_000: -1677328189}
    assert {ms: _java_time(ms).hashCode() for ms in jvm_hash_codes} == jvm_hash_codes
    assert hash(_java_time(1000)) == 1028042801
    t, later = _java_time(1000), _java_time(2000)
    assert [t.toString(), str(t), t.milliseconds()] == ["1000 ms", "1000 ms", 1000]
    assert [t.equals(_java_time(1000)), t.equals(later), t.equals(1000), t == 1000, t != later] == [True, False, False, False, True]
    assert [t.less(later), t.lessEq(t), t.greater(later), t.greaterEq(t)] == [True, True, False, True]
    assert [t.isMultipleOf(Duration(500)), t.isMultipleOf(Duration(300)), t.plus(Duration(1000)) == later] == [True, False, True]
    assert [t.min(later), t.max(later)] == [t, later]
    # minus: a Duration for a time (pyspark's gives "1000 ms" for this), a time for a Duration
    assert [str(later.minus(t)), later.minus(Duration(1000)) == t] == ["1000 ms", True]


def _java_time(ms: int) -> Any:
    from streaming._listener_compat import JavaTime

    return JavaTime(Time(ms))


def test_a_callback_set_on_a_listener_instance_is_subscribed_and_called() -> None:
    """StreamingListener() with onBatchCompleted assigned on the instance: that event reaches it, as pyspark's does."""
    got: list[int] = []
    listener = StreamingListener()
    listener.onBatchCompleted = lambda event: got.append(event.batchInfo().batchTime().milliseconds())  # type: ignore[method-assign, assignment]
    adapter = PySparkListenerAdapter(listener)
    assert [n for n in vars(adapter) if n.startswith("on_")] == ["on_batch_completed"]
    adapter.on_batch_completed(BatchCompleted(info()))
    assert got == [1000]


def test_add_streaming_listener_refuses_what_is_not_a_listener_at_the_call() -> None:
    """ssc.addStreamingListener(42) before start: refused at once (it used to fail only at start, deep in the bus)."""
    from streaming import StreamingContext

    ssc = StreamingContext(None, 1)
    with pytest.raises(TypeError, match="a listener must be a StreamingListener, an object with on_\\* callbacks, or a callable"):
        ssc.addStreamingListener(42)
    ssc.addStreamingListener(StreamingListener())  # pyspark's interface, adapted: still accepted
    with pytest.raises(ValueError, match="listener 42 is not registered"):
        ssc.removeStreamingListener(42)  # the refused one was not kept
