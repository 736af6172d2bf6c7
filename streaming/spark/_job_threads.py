"""SparkJobThreads: the threads output-operation jobs run on, each job in its batch's Spark job group.

Spark Streaming runs each job on a ``JobScheduler`` thread-pool thread (``spark.streaming.concurrentJobs``).
"""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

from scheduler import WorkerThreads

from ._job_groups import JobGroupHook, Label, job_group_hook
from ._local_properties import SavedProperties

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
        properties: the local properties each job runs with (a fresh copy per job, the thread's own
            back after it: see :class:`SavedProperties`); ``None``: the threads' own, as they are.
    """

    def __init__(self, size: int, name: str = "aiodstream-job", *, hook: JobGroupHook = job_group_hook,
                 properties: SavedProperties | None = None) -> None:
        """Create the pool; its threads start on first use."""
        # The event loop waits for a job through the loop's own future, one wake-up each way
        # (WorkerThreads): a third of what an executor's future and wrap_future cost a no-op batch.
        self._threads = WorkerThreads(size, name)
        self._hook = hook
        self._properties = properties
        self._holding = False
        self._lock = threading.Lock()

    def _hold_hook(self, sc: SparkContext) -> None:
        if not self._holding:  # the first job: hold the hook from now until shutdown
            with self._lock:
                if not self._holding:
                    self._hook.acquire(sc)
                    self._holding = True

    async def run(self, sc: SparkContext, group: Label, description: Label, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` on a job thread in ``group`` (queued while every thread is busy); its result.

        ``group`` and ``description`` may be functions making the text: called on the job thread
        before the job's first py4j call, not at all by a job that makes none. A cancelled caller
        stops waiting at once: a job already running goes on in its thread (an immediate stop
        cancels its Spark job group), a job still queued is dropped.

        Raises:
            RuntimeError: the pool was shut down.
        """
        if not self._holding:
            self._hold_hook(sc)
        # In the calling task's context (as anyio's to_thread): code on the job thread sees whose job it runs.
        return await self._threads.run(contextvars.copy_context().run, self._hook.run_in_group, sc, group, description,
                                       func, args, self._properties)

    def submit(self, sc: SparkContext, group: Label, description: Label, func: Callable[..., T], *args: Any) -> Future[T]:
        """Start ``func(*args)`` on a job thread in ``group`` and return its future, for callers that are not event-loop
        tasks (see :meth:`run`).

        Raises:
            RuntimeError: the pool was shut down.
        """
        self._hold_hook(sc)
        return self._threads.submit(self._hook.run_in_group, sc, group, description, func, args, self._properties)

    def shutdown(self) -> None:
        """Stop the threads once their current jobs end (a job still running is not waited for; a queued one is dropped
        and its caller gets a cancellation) and let go of the hook.

        A job abandoned by an immediate stop keeps running; its group was set at its first py4j
        call, so only Spark calls it starts after the last pool lets go of the hook go ungrouped.
        """
        self._threads.shutdown()
        with self._lock:
            if self._holding:
                self._holding = False
                self._hook.release()
