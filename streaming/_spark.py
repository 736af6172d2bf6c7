"""Glue to PySpark: the embedded local Spark, batch-time conversions, job groups.

PySpark is imported lazily, so ``import streaming`` stays cheap and the pure runtime needs no Java.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import anyio
import anyio.to_thread
import attrs
import structlog

from scheduler import Duration, InvalidDurationError, Time
from scheduler._streams import on_asyncio

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = [
    "EMBEDDED_SPARK_CONF",
    "SparkJobThreads",
    "batch_datetime",
    "cancel_job_group",
    "embedded_spark_context",
    "job_description",
    "run_spark",
    "seconds_to_duration",
    "STREAMING_SETTINGS",
    "SparkSettings",
    "time_string_as",
    "user_frame",
    "wait_for_thread",
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


STREAMING_SETTINGS = (
    "spark.streaming.concurrentJobs",
    "spark.streaming.gracefulStopTimeout",
    "spark.streaming.receiverRestartDelay",
    "spark.streaming.blockInterval",
    "spark.streaming.receiver.maxRate",
    "spark.streaming.backpressure.enabled",
    "spark.streaming.backpressure.initialRate",
    "spark.streaming.backpressure.rateEstimator",
    "spark.streaming.backpressure.pid.proportional",
    "spark.streaming.backpressure.pid.integral",
    "spark.streaming.backpressure.pid.derived",
    "spark.streaming.backpressure.pid.minRate",
    "spark.streaming.fileStream.minRememberDuration",
    "spark.streaming.minRememberDuration",
)
"""The Spark configuration keys the streaming layer reads."""


@attrs.frozen
class SparkSettings:
    """What a StreamingContext reads from its SparkContext, fetched once (py4j calls: blocking).

    A context inside ``async with`` fetches them in a worker thread on entry, so building
    streams on the event loop makes no py4j call; otherwise on first need.

    Attributes:
        default_parallelism: ``sc.defaultParallelism``.
        conf: the :data:`STREAMING_SETTINGS` that are set, as strings.
    """

    default_parallelism: int
    conf: dict[str, str]

    @classmethod
    def read(cls, sc: SparkContext) -> SparkSettings:
        """Read the settings from ``sc``: one py4j round trip per key (``sc.getConf()`` takes two per entry)."""
        conf = {}
        for key in STREAMING_SETTINGS:
            value = sc._conf.get(key, None)
            if value is not None:
                conf[key] = str(value)
        return cls(sc.defaultParallelism, conf)

    def get(self, key: str, default: str | None = None) -> str | None:
        """The setting ``key`` (one of :data:`STREAMING_SETTINGS`), ``default`` when unset."""
        if key not in STREAMING_SETTINGS:
            raise KeyError(f"{key} is not read by the streaming layer; add it to STREAMING_SETTINGS")
        return self.conf.get(key, default)


_TIME_UNITS_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "min": 60_000_000,
                  "h": 3_600_000_000, "d": 86_400_000_000}
_TIME_STRING = re.compile(r"(-?[0-9]+)([a-z]+)?")
_LONG_MAX = 2**63 - 1


def time_string_as(value: str, unit: str, key: str) -> int:
    """Spark's ``JavaUtils.timeStringAs(value, unit)`` without the JVM: ``"5s"`` in ``"ms"`` is 5000.

    A number without a suffix is in ``unit``; suffixes are us, ms, s, m, min, h and d; the result
    is truncated toward zero and saturates at Java's long range, as Java's ``TimeUnit.convert``.

    Raises:
        InvalidDurationError: ``value`` is not a time string (Spark's message, after ``key``).
    """
    spark_error = ("Time must be specified as seconds (s), milliseconds (ms), microseconds (us), minutes (m or min), "
                   "hour (h), or day (d). E.g. 50s, 100ms, or 250us.")
    lower = value.lower().strip()
    found = _TIME_STRING.fullmatch(lower)
    if found is None:
        raise InvalidDurationError(f"{key}: {spark_error}\nFailed to parse time string: {value}")
    number, suffix = int(found.group(1)), found.group(2)
    if not -_LONG_MAX - 1 <= number <= _LONG_MAX:
        raise InvalidDurationError(f'{key}: {spark_error}\nFor input string: "{found.group(1)}"')
    if suffix is not None and suffix not in _TIME_UNITS_US:
        raise InvalidDurationError(f'{key}: {spark_error}\nInvalid suffix: "{suffix}"')
    source, target = _TIME_UNITS_US[suffix or unit], _TIME_UNITS_US[unit]
    micros = number * source
    converted = abs(micros) // target * (1 if micros >= 0 else -1)  # truncated toward zero
    return max(-_LONG_MAX - 1, min(_LONG_MAX, converted))


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


_job_thread = threading.local()
"""On a job thread, ``pending``: the (context, group, description) to set before its next py4j call."""

_hook_lock = threading.Lock()


def _install_job_group_hook(sc: SparkContext) -> None:
    """Make a job thread's pending job group take effect just before that thread's next py4j call.

    A Spark job group is a local property of the JVM thread paired with the Python thread (pinned
    thread mode), read when a Spark job is submitted. Every Spark job a Python thread submits goes
    through a py4j call from that thread, so setting the group right before the first such call is
    as good as setting it when the job starts, and a job that never calls Spark (a no-op or a
    purely local output operation) costs no round trip at all. The hook wraps ``send_command`` of
    the process's py4j client (one per process, shared by every SparkContext); threads with nothing
    pending pay one thread-local lookup per py4j call.
    """
    gateway = sc._gateway
    if gateway is None:
        raise RuntimeError("PySpark has no py4j gateway: is the SparkContext stopped?")
    client = gateway._gateway_client
    if getattr(client, "_aiodstream_job_groups", False):  # installed already: no lock on every job's path
        return
    with _hook_lock:
        if getattr(client, "_aiodstream_job_groups", False):
            return
        send = client.send_command

        def send_command(*args: Any, **kwargs: Any) -> Any:
            pending = getattr(_job_thread, "pending", None)
            if pending is not None:
                _job_thread.pending = None  # first: setJobGroup's own call comes back through here
                context, group, description = pending
                context.setJobGroup(group, description, True)
            return send(*args, **kwargs)

        client.send_command = send_command
        client._aiodstream_job_groups = True


class SparkJobThreads:
    """Threads that only run output-operation jobs, each job's Spark calls in its batch's Spark job group.

    A job group is a property of the JVM thread paired with the Python thread that submits the
    Spark job. These threads run nothing but jobs, and each job's group is set before its first
    py4j call (see :func:`_install_job_group_hook`): a group left from an earlier job never labels
    another job's Spark work, and a job that makes no Spark call costs no py4j round trip.

    Args:
        size: how many jobs may run at once (the context's ``concurrentJobs``).
        name: the threads' name prefix.
    """

    def __init__(self, size: int, name: str = "aiodstream-job") -> None:
        """Create the pool; its threads start on first use."""
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)

    def submit(self, sc: SparkContext, group: str, description: str, func: Callable[..., T], *args: Any) -> Future[T]:
        """Start ``func(*args)`` on a job thread in ``group`` (queued while every thread is busy)."""
        _install_job_group_hook(sc)
        return self._executor.submit(self._in_group, sc, group, description, func, args)

    @staticmethod
    def _in_group(sc: SparkContext, group: str, description: str, func: Callable[..., T], args: tuple[Any, ...]) -> T:
        _job_thread.pending = (sc, group, description)
        try:
            return func(*args)
        finally:
            _job_thread.pending = None

    def shutdown(self) -> None:
        """Stop the threads once their current jobs end (a job still running is not waited for)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def cancel_job_group(sc: SparkContext, group: str) -> threading.Thread:
    """Have Spark cancel the jobs of ``group`` from a short-lived thread, which is returned.

    The caller, the event loop at an immediate stop, does not wait for the py4j call; the stop
    joins the thread later, from a worker thread.
    """

    def cancel() -> None:
        try:
            sc.cancelJobGroup(group)
        except Exception as exc:  # best effort: Spark may be stopping too
            structlog.get_logger("aiodstream.streaming").bind(component="SparkJobThreads").warning(
                "cancelling a Spark job group failed", group=group, error=repr(exc))

    thread = threading.Thread(target=cancel, name="aiodstream-cancel", daemon=True)
    thread.start()
    return thread


async def wait_for_thread(future: Future[T], *, abandon_on_cancel: bool) -> T:
    """The result of ``future``, run by one of this package's threads, without blocking the event loop.

    The future wakes the event loop when it completes (asyncio: through ``wrap_future``; trio:
    through the run's token): one wake-up, where a worker thread waiting on it (anyio's
    ``to_thread``) would cost a second thread switch each way. With ``abandon_on_cancel`` a
    cancelled caller stops waiting at once (work already running goes on; work still queued is
    dropped); without, it waits for the thread to finish.
    """
    if on_asyncio():
        if abandon_on_cancel:
            return await asyncio.wrap_future(future)
        with anyio.CancelScope(shield=True):
            return await asyncio.wrap_future(future)
    return await _wait_on_trio(future, abandon_on_cancel)


async def _wait_on_trio(future: Future[T], abandon_on_cancel: bool) -> T:
    import trio

    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def wake(_: Future[T]) -> None:
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:  # the run ended while the thread worked: nobody waits
            pass

    future.add_done_callback(wake)
    if abandon_on_cancel:
        try:
            await done.wait()
        except trio.Cancelled:
            future.cancel()  # dropped if still queued; running work goes on
            raise
    else:
        with anyio.CancelScope(shield=True):
            await done.wait()
    return future.result()


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
    job = current_batch_job.get()
    if job is None:
        return await anyio.to_thread.run_sync(func, *args)
    return await wait_for_thread(job.threads.submit(job.sc, job.group, job.description, func, *args), abandon_on_cancel=True)


def user_frame() -> inspect.FrameInfo | None:
    """The innermost stack frame outside this package: where the user's code called in (Spark's call site)."""
    here = __file__.rsplit("/", 1)[0]
    for frame in inspect.stack(context=0)[1:]:
        if not frame.filename.startswith(here):
            return frame
    return None
