"""The query registry and manager, and a runtime's failure modes, without Spark (plain-Python pipelines on a manual clock)."""

from __future__ import annotations

import math
import threading
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from listeners import EventRecorder, QueryTerminated
from scheduler import JobFailedError, ManualClock, Seconds, StreamingQueryException
from streaming import Batch, ListSource, Pipeline, StreamingRuntime, streams
from streaming.runtime import QueryRegistry
from tests.anyio_support import BACKENDS
from tests.support import advance

pytestmark = pytest.mark.anyio


class Out:
    """An output recording each batch's records and failing on a chosen record."""

    def __init__(self, fail_on: Any = None) -> None:
        self.seen: list[list[Any]] = []
        self.fail_on = fail_on

    async def __call__(self, batch: Batch) -> None:
        records = list(batch.inputs["in"])
        if self.fail_on in records:
            raise ValueError(f"cannot take {self.fail_on}")
        self.seen.append(records)


def pipeline(out: Out, records: list[Any]) -> Pipeline:
    p = Pipeline()
    p.add_source(ListSource(records, max_per_batch=1), name="in")
    p.add_output(out, name="out")
    return p


async def test_a_runtime_with_a_checkpoint_terminates_on_a_failed_batch(tmp_path: Path, clock: ManualClock) -> None:
    """Structured semantics: StreamingQueryException with Spark's message, the batch uncommitted, nothing after it."""
    out = Out(fail_on=2)
    recorder = EventRecorder()
    async with StreamingRuntime(pipeline(out, [1, 2, 3]), Seconds(1), clock=clock, checkpoint_location=tmp_path) as rt:
        rt.add_listener(recorder)
        await rt.start()
        clock.advance(1000)
        clock.advance(1000)
        clock.advance(1000)
        with pytest.raises(StreamingQueryException) as caught:
            await rt.await_termination()
        assert not rt.is_active
    error = caught.value
    assert str(error) == f"Query [id = {rt.id}, runId = {rt.run_id}] terminated with exception: cannot take 2"
    assert isinstance(error.__cause__, ValueError) and error.cause is error.__cause__
    assert (error.start_offset, error.end_offset, error.error_class) == ("[1]", "[2]", "STREAM_FAILED")
    assert isinstance(error, JobFailedError)  # code catching the DStream error still catches it
    assert out.seen == [[1]]
    assert sorted(p.name for p in (tmp_path / "commits").iterdir()) == ["0"]
    assert rt.status.message == "Terminated with exception: cannot take 2"  # the cause's message, as Spark's status
    [terminated] = recorder.of_type(QueryTerminated)
    assert isinstance(terminated, QueryTerminated) and terminated.exception is not None
    assert "ValueError: cannot take 2" in terminated.exception


async def test_a_runtime_that_goes_on_after_a_failure_reports_it_and_runs_later_batches(tmp_path: Path, clock: ManualClock) -> None:
    """stop_on_failure=False with a checkpoint: the DStream semantics; the stop is clean for the manager."""
    out = Out(fail_on=2)
    streams.resetTerminated()
    async with StreamingRuntime(pipeline(out, [1, 2, 3]), Seconds(1), clock=clock, checkpoint_location=tmp_path,
                                stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, times=3)
        with pytest.raises(JobFailedError) as caught:
            await rt.await_termination()
        assert not isinstance(caught.value, StreamingQueryException) and rt.is_active
        await rt.stop()
    assert out.seen == [[1], [3]]
    assert await streams.await_any_termination() is True  # terminated, and cleanly: nothing raised


async def test_the_manager_lists_and_gets_runtimes_that_track_a_query(clock: ManualClock) -> None:
    plain = StreamingRuntime(pipeline(Out(), [1]), Seconds(1), clock=clock)
    async with StreamingRuntime(pipeline(Out(), [1]), Seconds(1), clock=clock, track_progress=True, name="tracked") as rt, \
            plain:
        await rt.start()
        await plain.start()
        assert rt in streams.active and plain not in streams.active
        assert streams.get(str(rt.id)) is rt and streams.get(rt.id) is rt  # type: ignore[arg-type]
        assert streams.get(uuid.uuid4()) is None
        with pytest.raises(ValueError, match="not a query id"):
            streams.get("nope")
        await rt.stop()
        await plain.stop()
    assert rt not in streams.active


async def test_a_manager_listener_hears_every_query_and_a_removed_one_nothing_more(clock: ManualClock) -> None:
    heard: list[str] = []

    def listener(event: Any) -> None:
        heard.append(type(event).__name__)

    streams.addListener(listener)
    try:
        async with StreamingRuntime(pipeline(Out(), [1]), Seconds(1), clock=clock, track_progress=True) as rt:
            await rt.start()
            await advance(rt, clock)
            await rt.stop()
    finally:
        streams.removeListener(listener)
    assert heard[:2] == ["StreamingStarted", "QueryStarted"] and "QueryProgress" in heard and heard[-1] == "QueryTerminated"
    count = len(heard)
    async with StreamingRuntime(pipeline(Out(), [1]), Seconds(1), clock=clock, track_progress=True) as rt:
        await rt.start()
        await rt.stop()
    assert len(heard) == count


class InlineWithAsyncCallback:
    run_inline = True

    async def on_query_progress(self, event: Any) -> None:
        pass


def test_a_listener_a_bus_would_refuse_is_refused_by_add_listener_and_not_kept() -> None:
    """An inline listener with an async callback (or no listener at all) was stored and then failed every later
    query's start; it is refused at once, with the bus's message, and nothing is kept."""
    before = list(streams.listListeners())
    with pytest.raises(TypeError, match="'InlineWithAsyncCallback' runs inline"):
        streams.addListener(InlineWithAsyncCallback())
    with pytest.raises(TypeError, match="a listener must be"):
        streams.addListener(42)
    assert list(streams.listListeners()) == before


async def test_a_start_that_fails_adding_the_managers_listeners_leaves_a_stopped_runtime(
        clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while the manager's listeners are put on the bus: start() raises it, the runtime is STOPPED and a
    stop() returns (it waited for a start that never ended)."""
    async with StreamingRuntime(pipeline(Out(), [1]), Seconds(1), clock=clock, track_progress=True) as rt:
        def refuse(bus: Any) -> None:
            raise TypeError("refused listener")

        monkeypatch.setattr(rt._registration, "add_manager_listeners", refuse)
        with pytest.raises(TypeError, match="refused listener"):
            await rt.start()
        assert not rt.is_active
        with anyio.fail_after(5):
            await rt.stop()


def test_await_any_termination_follows_sparks_rules() -> None:
    """Unset until a termination; a failure is raised until reset, even after later clean terminations; timeouts."""
    registry = QueryRegistry()
    a, b = object(), object()
    assert registry.wait_any_termination(0.001) is False
    registry.claim_id(a, uuid.uuid4())  # type: ignore[arg-type]
    registry.terminated(a, None)  # type: ignore[arg-type]
    assert registry.wait_any_termination() is True
    failure = StreamingQueryException("q", "r", ValueError("boom"))
    registry.terminated(b, failure)  # type: ignore[arg-type]
    registry.terminated(a, None)  # type: ignore[arg-type]
    with pytest.raises(StreamingQueryException, match="boom"):
        registry.wait_any_termination()
    registry.reset_terminated()
    assert registry.wait_any_termination(0.001) is False


@pytest.mark.parametrize("backend", BACKENDS)
def test_await_any_termination_takes_pysparks_timeouts(backend: str) -> None:
    """0 asks whether a query terminated already and True is 1 s (pyspark's rule); a negative or non-number timeout is
    pyspark's PySparkValueError, whose message names the value's type."""
    from pyspark.errors import PySparkValueError

    registry = QueryRegistry()
    manager = type(streams)(registry)
    assert manager.awaitAnyTermination(0) is False
    assert anyio.run(manager.await_any_termination, 0, backend=backend) is False
    registry.terminated(object(), None)  # type: ignore[arg-type]
    assert (manager.awaitAnyTermination(0), manager.awaitAnyTermination(True), manager.awaitAnyTermination(0.5)) == (True,) * 3
    assert anyio.run(manager.await_any_termination, 0, backend=backend) is True
    for bad, kind in ((-1, "int"), (-0.5, "float"), ("1", "str")):
        with pytest.raises(PySparkValueError) as raised:
            manager.awaitAnyTermination(bad)  # type: ignore[arg-type]
        assert str(raised.value) == f"[VALUE_NOT_POSITIVE] Value for `timeout` must be positive, got '{kind}'."
        assert raised.value.getCondition() == "VALUE_NOT_POSITIVE"
    with pytest.raises(PySparkValueError):
        anyio.run(manager.await_any_termination, -1, backend=backend)


def test_a_waiter_on_another_thread_wakes_at_the_termination() -> None:
    registry = QueryRegistry()
    ready = threading.Event()
    results: list[bool] = []

    def wait() -> None:
        ready.set()
        results.append(registry.wait_any_termination(None))

    thread = threading.Thread(target=wait)
    thread.start()
    ready.wait()
    registry.terminated(object(), None)  # type: ignore[arg-type]
    thread.join(5)
    assert results == [True]


def test_a_cancelled_wait_returns_false() -> None:
    """What a cancelled async wait does to its worker thread: the flag is set under the lock and the wait returns."""
    registry = QueryRegistry()
    cancelled = threading.Event()
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(registry.wait_any_termination(None, cancelled)))
    thread.start()
    with registry._lock:
        cancelled.set()
        registry._lock.notify_all()
    thread.join(5)
    assert results == [False] and not thread.is_alive()


async def test_an_async_waiter_wakes_at_a_termination_on_the_loop() -> None:
    registry = QueryRegistry()
    results: list[bool] = []

    async def wait() -> None:
        results.append(await registry.wait_any_termination_async(None))

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.lowlevel.checkpoint()
        registry.terminated(object(), None)  # type: ignore[arg-type]
    assert results == [True]


async def test_a_pyspark_query_listener_gets_pysparks_event_objects_from_a_runtime(clock: ManualClock) -> None:
    """Started, progress, idle (the AvailableNow check that found no new data) and terminated, as pyspark's classes, no JVM."""
    from pyspark.sql.streaming import StreamingQueryListener
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
        StreamingQueryProgress,
    )

    from streaming import Trigger

    class Recording(StreamingQueryListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.events: list[Any] = []

        def onQueryStarted(self, event: Any) -> None:
            self.events.append(event)

        def onQueryProgress(self, event: Any) -> None:
            self.events.append(event)

        def onQueryIdle(self, event: Any) -> None:
            self.events.append(event)

        def onQueryTerminated(self, event: Any) -> None:
            self.events.append(event)

    listener = Recording()
    options = {"spark.sql.streaming.noDataProgressEventInterval": "0"}
    streams.addListener(listener)
    try:
        async with StreamingRuntime(pipeline(Out(), [1, 2]), Seconds(1), clock=clock, trigger=Trigger.AVAILABLE_NOW,
                                    options=options, name="drain") as rt:
            await rt.start()
            await rt.await_termination()
    finally:
        streams.removeListener(listener)
    kinds = [type(e) for e in listener.events]
    # Batch 1 follows batch 0 in the same millisecond (AvailableNow on a manual clock): its input rate is infinite,
    # which Spark's JSON leaves out; its progress event reaches pyspark's listener all the same.
    assert kinds == [QueryStartedEvent, QueryProgressEvent, QueryProgressEvent, QueryIdleEvent, QueryTerminatedEvent]
    assert listener.events[2].progress.batchId == 1 and listener.events[2].progress.sources[0].inputRowsPerSecond == math.inf
    started, first = listener.events[0], listener.events[1].progress
    assert (started.id, started.runId, started.name) == (rt.id, rt.run_id, "drain")
    assert isinstance(first, StreamingQueryProgress) and (first.batchId, first.numInputRows, first.name) == (0, 1, "drain")
    assert first.sources[0].numInputRows == 1
    assert listener.events[3].runId == rt.run_id and listener.events[4].exception is None
