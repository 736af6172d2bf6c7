"""A StreamingContext's public API called from places other than the program's main line: its own jobs, listener
callbacks, another thread's event loop, while it stops. Each is answered (or refused with a clear error), never hung.

On the test run's shared local Spark; every wait is on an event of the engine, with a hang guard.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler import LOGGER_ROOT, event_fields
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
