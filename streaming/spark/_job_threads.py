"""SparkJobThreads: the threads output-operation jobs run on, each job in its batch's Spark job group.

Spark Streaming runs each job on a ``JobScheduler`` thread-pool thread (``spark.streaming.concurrentJobs``).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

import anyio.to_thread

from ._job_groups import JobGroupHook, Label, job_group_hook

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["JobThreads", "SparkJobThreads"]

T = TypeVar("T")


class JobThreads(Protocol):
    """The threads output-operation jobs run on, each job's Spark work labelled with its batch's group.

    On a classic SparkContext the label is a Spark job group (:class:`SparkJobThreads`); on Spark
    Connect it is an operation tag of the session (:class:`ConnectJobThreads`).
    """

    def submit(self, sc: SparkContext, group: Label, description: Label, func: Callable[..., T], *args: Any) -> Future[T]:
        """Start ``func(*args)`` on a job thread, its Spark work labelled ``group`` (queued while every thread is busy)."""
        ...

    async def run(self, sc: SparkContext, group: Label, description: Label, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` on a job thread as :meth:`submit` starts it, awaited without blocking the event loop
        (a cancelled caller stops waiting at once; the running call goes on)."""
        ...

    def shutdown(self) -> None:
        """Let the threads end once their current jobs do (a running job is not waited for)."""
        ...


class SparkJobThreads:
    """Threads that only run output-operation jobs, each job's Spark calls in its batch's Spark job group.

    A job group is a property of the JVM thread paired with the Python thread that submits the
    Spark job. These threads run nothing but jobs, and each job's group is set before its first
    py4j call (see :class:`JobGroupHook`): a group left from an earlier job never labels another
    job's Spark work, and a job that makes no Spark call costs no py4j round trip. The pool holds
    the process's py4j hook from its first job until :meth:`shutdown`.

    Args:
        size: how many jobs may run at once (the context's ``concurrentJobs``).
        name: the threads' name prefix.
        hook: the job-group hook to hold (the process's one by default).
    """

    def __init__(self, size: int, name: str = "aiodstream-job", *, hook: JobGroupHook = job_group_hook) -> None:
        """Create the pool; its threads start on first use."""
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)
        self._hook = hook
        self._holding = False
        self._lock = threading.Lock()

    def submit(self, sc: SparkContext, group: Label, description: Label, func: Callable[..., T], *args: Any) -> Future[T]:
        """Start ``func(*args)`` on a job thread in ``group`` (queued while every thread is busy).

        ``group`` and ``description`` may be functions making the text: called on the job thread
        before the job's first py4j call, not at all by a job that makes none.

        Raises:
            RuntimeError: the pool was shut down.
        """
        if not self._holding:  # the first job: hold the hook from now until shutdown
            with self._lock:
                if not self._holding:
                    self._hook.acquire(sc)
                    self._holding = True
        return self._executor.submit(self._hook.run_in_group, sc, group, description, func, args)

    async def run(self, sc: SparkContext, group: Label, description: Label, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` as :meth:`submit` starts it, awaited from a worker thread (a cancelled caller stops waiting)."""
        future = self.submit(sc, group, description, func, *args)
        return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)

    def shutdown(self) -> None:
        """Stop the threads once their current jobs end (a job still running is not waited for) and let go of the hook.

        A job abandoned by an immediate stop keeps running; its group was set at its first py4j
        call, so only Spark calls it starts after the last pool lets go of the hook go ungrouped.
        """
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            if self._holding:
                self._holding = False
                self._hook.release()
