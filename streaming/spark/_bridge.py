"""The bridge between the event loop and Spark's threads: waiting on a job thread, and ``run_spark`` for async jobs.

Spark Streaming's jobs block a scheduler thread; here the event loop waits for the thread instead.
"""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import anyio
import anyio.to_thread
import attrs
import sniffio

from ._job_threads import JobThreads

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["BatchJob", "current_batch_job", "run_spark", "wait_for_thread"]

T = TypeVar("T")


async def wait_for_thread(future: Future[T], *, abandon_on_cancel: bool) -> T:
    """The result of ``future``, run by one of this package's threads, without blocking the event loop.

    The future wakes the event loop when it completes (asyncio: through ``wrap_future``; trio:
    through the run's token): one wake-up, where a worker thread waiting on it (anyio's
    ``to_thread``) would cost a second thread switch each way. With ``abandon_on_cancel`` a
    cancelled caller stops waiting at once (work already running goes on; work still queued is
    dropped); without, it waits for the thread to finish.
    """
    if sniffio.current_async_library() == "asyncio":
        if abandon_on_cancel:
            return await asyncio.wrap_future(future)
        with anyio.CancelScope(shield=True):
            return await asyncio.wrap_future(future)
    return await _wait_on_trio(future, abandon_on_cancel)


async def _wait_on_trio(future: Future[T], abandon_on_cancel: bool) -> T:
    import trio  # only reached on trio, which is an optional dependency

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
    threads: JobThreads


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
    return await job.threads.run(job.sc, job.group, job.description, func, *args)
