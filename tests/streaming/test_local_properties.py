"""Spark local properties of output-operation jobs: those of the starting thread reach every job, one job's end with it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from tests.support import run_dstream_batches

pytestmark = pytest.mark.spark

WAIT_S = 90.0  # a hang guard only: Spark's first Python jobs can take many seconds on a loaded machine


def _task_properties(rdd: Any, *keys: str) -> tuple[str | None, ...]:
    """The local properties ``keys`` as the tasks of a Spark job on ``rdd`` see them."""
    from pyspark import TaskContext

    def read(_: Any) -> list[tuple[str | None, ...]]:
        context = TaskContext.get()
        assert context is not None
        return [tuple(context.getLocalProperty(key) for key in keys)]

    return tuple(rdd.mapPartitions(read).collect()[0])


class _TwoOutputs:
    """Output 0 sets two properties in its job; output 1 records what its tasks see, and says when it has two batches."""

    def __init__(self, sc: Any) -> None:
        self.sc = sc
        self.seen: list[tuple[str | None, ...]] = []
        self.two = threading.Event()

    def add_to(self, ssc: StreamingContext) -> None:
        stream = ssc.queueStream([[1]], default=[1])
        stream.foreachRDD(self.first)
        stream.foreachRDD(self.second)

    def first(self, rdd: Any) -> None:
        self.sc.setLocalProperty("aiodstream.test.leak", "set by output 0")
        self.sc.setLocalProperty("aiodstream.test.tenant", "overridden by output 0")
        rdd.count()

    def second(self, rdd: Any) -> None:
        self.seen.append(_task_properties(rdd, "aiodstream.test.tenant", "aiodstream.test.leak"))
        if len(self.seen) >= 2:
            self.two.set()


def test_jobs_run_with_the_starting_threads_properties_and_one_jobs_end_with_it(spark_context: Any) -> None:
    """As Spark's JobHandler: a property set before start() reaches every job, one an output sets does not reach the next."""
    outputs = _TwoOutputs(spark_context)
    ssc = StreamingContext(spark_context, 0.2)
    outputs.add_to(ssc)
    spark_context.setLocalProperty("aiodstream.test.tenant", "tenant-42")  # on this thread, which starts the context
    try:
        ssc.start()
        try:
            assert outputs.two.wait(WAIT_S), "two batches of output 1"
        finally:
            ssc.stop(stopSparkContext=False)
    finally:
        spark_context.setLocalProperty("aiodstream.test.tenant", None)
    assert outputs.seen[:2] == [("tenant-42", None), ("tenant-42", None)]
    assert spark_context.getLocalProperty("aiodstream.test.leak") is None  # the starting thread's own are untouched


def test_an_async_contexts_jobs_start_from_no_properties_and_one_jobs_end_with_it(spark_context: Any) -> None:
    """start_async makes no py4j call on the loop, so the loop thread's properties are not read (documented); still, what
    one job sets does not reach the next."""
    outputs = _TwoOutputs(spark_context)
    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, 1, clock=clock)
    outputs.add_to(ssc)
    spark_context.setLocalProperty("aiodstream.test.tenant", "tenant-42")  # on this thread, the loop's
    try:
        assert run_dstream_batches(ssc, clock, 2) == []
    finally:
        spark_context.setLocalProperty("aiodstream.test.tenant", None)
    assert outputs.seen == [(None, None), (None, None)]
