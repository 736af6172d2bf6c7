"""A StreamingContext's public API called from places other than the program's main line: its own jobs, listener
callbacks, another thread's event loop, while it stops. Each is answered (or refused with a clear error), never hung.

On the test run's shared local Spark; every wait is on an event of the engine, with a hang guard.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest

from listeners import BatchCompleted, BatchSubmitted, StreamingListener
from scheduler import LOGGER_ROOT, StreamingStateError, event_fields
from streaming import StreamingContext

pytestmark = pytest.mark.spark

WAIT_S = 90.0  # a hang guard only: Spark's first Python jobs can take many seconds on a loaded machine


class _Signal(logging.Handler):
    def __init__(self, event: str, signal: threading.Event) -> None:
        super().__init__(logging.DEBUG)
        self.event, self.signal = event, signal

    def emit(self, record: logging.LogRecord) -> None:
        fields = event_fields(record)
        if fields is not None and fields.get("event") == self.event:
            self.signal.set()


@contextlib.contextmanager
def on_log_event(event: str) -> Iterator[threading.Event]:
    """An Event set once the library logs ``event`` (a step of the engine no other signal marks)."""
    signal = threading.Event()
    root = logging.getLogger(LOGGER_ROOT)
    handler, previous = _Signal(event, signal), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield signal
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


@pytest.fixture
def context(spark_context: Any) -> Iterator[StreamingContext]:
    """A sync-API context with 0.2 s batches; stopped (not its SparkContext) afterwards."""
    ssc = StreamingContext(spark_context, 0.2)
    try:
        yield ssc
    finally:
        ssc.stop(stopSparkContext=False)


def test_get_active_in_a_foreach_rdd_function_during_a_graceful_stop_answers_at_once(context: StreamingContext) -> None:
    """getActive() waited for the lock the whole graceful stop held: the job asking hung until the stop gave up
    (gracefulStopTimeout), the batches left never ran and it got None. It answers at once with the stopping context
    (as Spark's, whose ACTIVATION_LOCK a stop takes only to clear it), and the stop drains."""
    job_started = threading.Event()
    found: list[StreamingContext | None] = []
    seen: list[list[int]] = []

    def output(rdd: Any) -> None:
        values = rdd.collect()
        if values == [1]:
            job_started.set()
            assert stopping.wait(WAIT_S), "the graceful stop never began"
            found.append(StreamingContext.getActive())
        seen.append(values)

    context.queueStream([[1], [2], [3]], default=[0]).foreachRDD(output)
    with on_log_event("stopping job scheduler gracefully") as stopping:
        context.start()
        assert job_started.wait(WAIT_S), "the first batch's job never started"
        context.stop(stopSparkContext=False, stopGraceFully=True)
    assert found == [context]
    assert seen[:2] == [[1], [2]]  # the batch of the tick the graceful stop fires ran too
    assert context.getState() == "STOPPED" and StreamingContext.getActive() is None


OTHER_LOOP = (r"^this context runs in 'async with' on the event loop of another thread: cannot await ssc\.{}\(\) from this "
              r"thread's loop; ")


@pytest.mark.parametrize("other", ["asyncio", "trio"])
def test_the_async_api_awaited_on_another_threads_loop_is_refused_and_the_host_goes_on(spark_context: Any,
                                                                                         other: str) -> None:
    """stop_async() from another thread's loop never returned (asyncio; the host's 'async with' exit wedged behind it)
    or failed with trio's bare TypeError; await_termination_async() there missed the stop. Each is refused at once."""
    refused: list[str] = []

    async def from_other_loop(ssc: StreamingContext) -> None:
        with anyio.fail_after(30):  # a hang guard: the refusals are immediate
            for method, call in (("stop_async", ssc.stop_async), ("await_termination_async",
                                                                   functools.partial(ssc.await_termination_async, 15)),
                                 ("process_all_available_async", ssc.process_all_available_async)):
                with pytest.raises(StreamingStateError, match=OTHER_LOOP.format(method)) as caught:
                    await call()
                refused.append(str(caught.value).rsplit("; ", 1)[1])

    async def host() -> None:
        async with StreamingContext(spark_context, 0.2) as ssc:
            ssc.queueStream([[1]], default=[0]).foreachRDD(lambda rdd: None)
            await ssc.start_async()
            await anyio.to_thread.run_sync(functools.partial(anyio.run, from_other_loop, ssc, backend=other))
            assert ssc.getState() == "ACTIVE"
            await ssc.stop_async()
        assert ssc.getState() == "STOPPED"

    anyio.run(host)
    assert refused == [
        "await it on that loop (from this thread: anyio.from_thread.run(ssc.stop_async, token=<that loop's "
        "anyio.lowlevel.current_token()>))",
        "wait in a worker thread instead: await anyio.to_thread.run_sync(ssc.awaitTermination)",
        "await it on that loop (from this thread: anyio.from_thread.run(ssc.process_all_available_async, token=<that "
        "loop's anyio.lowlevel.current_token()>))",
    ]


SAME_THREAD = "Cannot wait for a query state from the same thread that is running the query"


def test_process_all_available_in_a_foreach_rdd_function_is_refused(context: StreamingContext) -> None:
    """processAllAvailable() in one of the context's own jobs waited for that very job: the stream deadlocked silently.
    It is refused with Spark's error, and the batches go on."""
    outcomes: list[str] = []
    later = threading.Event()

    def output(rdd: Any) -> None:
        values = rdd.collect()
        if values == [1]:
            try:
                context.processAllAvailable()
                outcomes.append("returned")
            except StreamingStateError as exc:
                outcomes.append(str(exc))
        elif values == [2]:
            later.set()

    context.queueStream([[1], [2]], default=[0]).foreachRDD(output)
    context.start()
    assert later.wait(WAIT_S), "the batch after the refused wait never ran"
    assert outcomes == [SAME_THREAD]


def test_process_all_available_async_in_an_async_foreach_rdd_function_is_refused(spark_context: Any) -> None:
    """The same wait awaited by an async output function on the host's loop is refused too."""
    outcomes: list[str] = []

    async def host() -> None:
        answered = anyio.Event()
        async with StreamingContext(spark_context, 0.2) as ssc:
            async def output(rdd: Any) -> None:
                if not answered.is_set():
                    try:
                        await ssc.process_all_available_async()
                        outcomes.append("returned")
                    except StreamingStateError as exc:
                        outcomes.append(str(exc))
                    answered.set()

            ssc.queueStream([[1]], default=[0]).foreachRDD(output)
            await ssc.start_async()
            with anyio.fail_after(WAIT_S):
                await answered.wait()
            await ssc.stop_async()

    anyio.run(host)
    assert outcomes == [SAME_THREAD]


def test_an_immediate_stop_in_a_foreach_rdd_function_lets_no_queued_batch_run(context: StreamingContext) -> None:
    """ssc.stop(False, False) in a job began the stop on another thread only once the job had returned, and the next
    queued batch often ran first (4 runs of 8). The stop is begun, refusing new work, before it returns to the job."""
    queued = threading.Event()
    seen: list[list[int]] = []

    class Submitted(StreamingListener):
        submitted = 0

        def on_batch_submitted(self, event: BatchSubmitted) -> None:  # a plain def: on the listener's own thread
            self.submitted += 1
            if self.submitted == 3:  # two batches queued behind the first
                queued.set()

    def output(rdd: Any) -> None:
        values = rdd.collect()
        seen.append(values)
        if values == [1]:
            assert queued.wait(WAIT_S), "no batch was queued behind the first"
            context.stop(stopSparkContext=False, stopGraceFully=False)

    context.addStreamingListener(Submitted())
    context.queueStream([[1], [2], [3], [4]], default=[0]).foreachRDD(output)
    context.start()
    assert context.awaitTerminationOrTimeout(WAIT_S), "the context did not stop"
    assert seen == [[1]]


class _InlineWaiter(StreamingListener):
    run_on_loop = True  # called inline, on the context's event loop

    def __init__(self, ssc: StreamingContext, outcomes: list[str], answered: threading.Event) -> None:
        self.ssc, self.outcomes, self.answered = ssc, outcomes, answered

    def on_batch_completed(self, event: BatchCompleted) -> None:
        if not self.answered.is_set():
            try:
                self.outcomes.append(f"returned {self.ssc.awaitTerminationOrTimeout(3)}")
            except StreamingStateError as exc:
                self.outcomes.append(str(exc))
            self.answered.set()


class _AsyncWaiter(_InlineWaiter):
    run_on_loop = False

    async def on_batch_completed(self, event: BatchCompleted) -> None:  # type: ignore[override]
        super().on_batch_completed(event)


@pytest.mark.parametrize("listener", [_InlineWaiter, _AsyncWaiter])
def test_await_termination_on_the_contexts_event_loop_is_refused_saying_what_to_do(context: StreamingContext,
                                                                                  listener: type[_InlineWaiter]) -> None:
    """awaitTermination() in an inline or async listener callback, on the context's loop, failed with anyio's bare
    "This method cannot be called from the event loop thread": a StreamingStateError says why and what to do."""
    outcomes: list[str] = []
    answered = threading.Event()
    context.addStreamingListener(listener(context, outcomes, answered))
    context.queueStream([[1]], default=[0]).foreachRDD(lambda rdd: None)
    context.start()
    assert answered.wait(WAIT_S), "no batch completed"
    assert outcomes == [
        "Cannot wait for the StreamingContext to terminate on its event loop's thread (an inline or async listener "
        "callback): the wait would block the loop it waits for; wait from another thread (a plain 'def' listener "
        "callback runs on a thread of its own)"]
    assert context.getState() == "ACTIVE"
