"""Glue to PySpark: the embedded local Spark, batch-time conversions, job groups.

PySpark is imported lazily, so ``import streaming`` stays cheap and the pure runtime needs no Java.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import attrs

from scheduler import Duration, InvalidDurationError, Time

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = [
    "EMBEDDED_SPARK_CONF",
    "SparkJobThreads",
    "batch_datetime",
    "embedded_spark_context",
    "job_description",
    "run_in_job_group",
    "run_spark",
    "seconds_to_duration",
    "user_frame",
]

T = TypeVar("T")

EMBEDDED_SPARK_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "aiodstream",
    "spark.ui.showConsoleProgress": "false",
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "2",
}

_embedded_lock = threading.Lock()


def embedded_spark_context(extra_conf: dict[str, str] | None = None) -> SparkContext:
    """The active SparkContext, or a new local one with :data:`EMBEDDED_SPARK_CONF` defaults.

    Starting Spark takes seconds and blocks: call it from a worker thread in async code.
    """
    from pyspark import SparkConf, SparkContext

    with _embedded_lock:
        active = SparkContext._active_spark_context
        if active is not None:
            return active
        conf = SparkConf()
        for key, value in {**EMBEDDED_SPARK_CONF, **(extra_conf or {})}.items():
            if not conf.contains(key):
                conf.set(key, value)
        sc = SparkContext.getOrCreate(conf)
        sc.setLogLevel("WARN")
        return sc


def seconds_to_duration(seconds: Any, what: str) -> Duration:
    """pyspark's ``Duration(int(seconds * 1000))``, refusing what pyspark would silently mangle."""
    if isinstance(seconds, Duration):
        return seconds
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidDurationError(
            f"{what} must be a number of seconds (int or float), got {type(seconds).__name__} {seconds!r}; pass e.g. 1 or 0.5"
        )
    ms = int(seconds * 1000)
    if ms <= 0:
        raise InvalidDurationError(f"{what} must be a positive number of seconds, got {seconds!r}; pass e.g. 1 or 0.5")
    return Duration(ms)


def batch_datetime(time: Time) -> datetime:
    """The batch time as pyspark hands it to user functions: a naive local ``datetime``."""
    return datetime.fromtimestamp(time.milliseconds / 1000)


def job_description(time: Time, output_op_id: int) -> str:
    """The Spark UI description of a streaming job, as Spark Streaming words it."""
    return f"Streaming job from [output operation {output_op_id}, batch time {batch_datetime(time):%H:%M:%S}]"


def run_in_job_group(sc: SparkContext, group: str, description: str, func: Callable[..., T], *args: Any) -> T:
    """Call ``func(*args)`` with this thread's Spark jobs in ``group``, described by ``description``.

    Cancelling the group (``sc.cancelJobGroup(group)``) interrupts those jobs' tasks. The group is
    cleared afterwards, since worker threads are pooled and later run unrelated Spark calls.
    Two py4j round trips in all: they are most of the engine's cost for a cheap output operation.
    """
    sc.setJobGroup(group, description, True)
    try:
        return func(*args)
    finally:
        jsc = sc._jsc
        if jsc is not None:
            jsc.clearJobGroup()  # group id, description and interrupt flag, in one call


class SparkJobThreads:
    """Threads that only run output-operation jobs, each job in its batch's Spark job group.

    A job group is a property of the JVM thread paired with the Python thread that submits the
    Spark job. Pooled threads also run other Spark calls, so :func:`run_in_job_group` must clear
    the group after each job: two py4j round trips per job, most of a cheap job's cost. These
    threads run nothing but jobs, each of which sets its own group first, so a group left from
    the previous job never labels anything else, and clearing is not needed: one round trip.

    Args:
        size: how many jobs may run at once (the context's ``concurrentJobs``).
        name: the threads' name prefix.
    """

    def __init__(self, size: int, name: str = "aiodstream-job") -> None:
        """Create the pool; its threads start on first use."""
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)

    def run(self, sc: SparkContext, group: str, description: str, func: Callable[..., T], *args: Any) -> T:
        """Run ``func(*args)`` on a job thread in ``group`` and wait for it (blocking; call it from a worker thread)."""
        return self._executor.submit(self._in_group, sc, group, description, func, args).result()

    @staticmethod
    def _in_group(sc: SparkContext, group: str, description: str, func: Callable[..., T], args: tuple[Any, ...]) -> T:
        sc.setJobGroup(group, description, True)
        return func(*args)

    def shutdown(self) -> None:
        """Stop the threads once their current jobs end (a job still running is not waited for)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


@attrs.frozen
class BatchJob:
    """The Spark side of the output-operation job running now: where its Spark calls go, in which group."""

    sc: SparkContext
    group: str
    description: str
    threads: SparkJobThreads


current_batch_job: contextvars.ContextVar[BatchJob | None] = contextvars.ContextVar("aiodstream_batch_job", default=None)
"""Set while an ``async def`` output operation runs, for :func:`run_spark`."""


async def run_spark(func: Callable[..., T], *args: Any) -> T:
    """Run a blocking Spark call from an ``async def`` output operation, without blocking the event loop.

    Inside an async ``foreachRDD`` function the call runs on one of the context's job threads in
    the batch's Spark job group, like a plain output operation's work: the Spark UI names its jobs
    after the batch, and an immediate stop cancels them. Anywhere else it simply runs in a worker
    thread. For example::

        async def publish(time, rdd):
            rows = await run_spark(rdd.collect)
            await send(rows)

        stream.foreachRDD(publish)

    Calls made at the same time from one output operation take turns on the job threads
    (``concurrentJobs`` of them).
    """
    import anyio.to_thread

    job = current_batch_job.get()
    if job is None:
        return await anyio.to_thread.run_sync(func, *args)
    return await anyio.to_thread.run_sync(job.threads.run, job.sc, job.group, job.description, func, *args)


def user_frame() -> inspect.FrameInfo | None:
    """The innermost stack frame outside this package: where the user's code called in (Spark's call site)."""
    here = __file__.rsplit("/", 1)[0]
    for frame in inspect.stack(context=0)[1:]:
        if not frame.filename.startswith(here):
            return frame
    return None
