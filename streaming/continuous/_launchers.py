"""Where a continuous query's long-running tasks run: Spark's executors, or threads of this process.

``SparkTaskLauncher`` submits one Spark job with a task per partition, in its own job group so an
immediate stop cancels it; ``ThreadTaskLauncher`` runs the same task code on worker threads, for
programs and tests without Spark.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import anyio
import anyio.to_thread

from scheduler import InvalidPipelineError, library_logger

from ..spark import cancel_job_group, driver_bind_address, driver_host, run_in_job_group
from ._protocol import CoordinatorClient
from ._task import TASK_RETRY_MESSAGE, ContinuousTaskRetryError, TaskSpec, run_task, run_tasks

__all__ = ["SparkTaskLauncher", "TaskLauncher", "ThreadTaskLauncher"]


class TaskLauncher(Protocol):
    """Runs a continuous query's tasks until they end."""

    def driver_host(self) -> str:
        """The address at which the tasks reach the driver's coordinator."""

    def bind_address(self) -> str:
        """The interface the driver's coordinator listens on (blocking)."""

    def check(self, num_partitions: int) -> None:
        """Refuse a query that cannot run all its tasks at once (blocking)."""

    async def run(self, specs: Sequence[TaskSpec], group: str) -> None:
        """Run every task until all ended; raise what made one fail.

        A launcher whose ``run`` also takes ``failed`` (a keyword) is given a function to call at
        the first task failure, before the other tasks ended: the query then fails at once.
        """

    def cancel(self, group: str) -> None:
        """Stop the tasks now (an immediate stop); ``run`` then returns or raises soon."""


class ThreadTaskLauncher:
    """Runs each task on a worker thread of this process (no Spark needed).

    A thread cannot be interrupted: an immediate stop closes the coordinator, and each task ends
    at its next epoch poll, when it finds the connection closed.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        """Tasks reach the coordinator at ``host``."""
        self._host = host

    def driver_host(self) -> str:
        """Where the threads connect."""
        return self._host

    def bind_address(self) -> str:
        """Where the coordinator listens: the host the threads connect to."""
        return self._host

    def check(self, num_partitions: int) -> None:
        """Threads are never short."""

    async def run(self, specs: Sequence[TaskSpec], group: str, failed: Callable[[Exception], None] | None = None) -> None:
        """One thread per task, until every thread ended; the first task's failure is raised (and given to ``failed`` at once).

        At the first failure the other tasks' connections to the driver are ended, as Spark kills
        a failed job's other tasks: each thread ends at its next call to the driver (after the
        rows it is writing), and only then does this return. Cancelled (the query gave up on its
        tasks after ``abandon_after``), the waits for the threads are abandoned.
        """
        limiter = anyio.CapacityLimiter(max(1, len(specs)))
        failures: list[Exception] = []
        clients: list[CoordinatorClient] = []
        async with anyio.create_task_group() as tg:
            for spec in specs:
                tg.start_soon(self._one, spec, limiter, failures, clients, failed)
        if failures:
            raise failures[0]

    @staticmethod
    async def _one(spec: TaskSpec, limiter: anyio.CapacityLimiter, failures: list[Exception],
                   clients: list[CoordinatorClient], failed: Callable[[Exception], None] | None) -> None:
        try:
            await anyio.to_thread.run_sync(run_task, spec, clients, limiter=limiter, abandon_on_cancel=True)
        except Exception as exc:
            failures.append(exc)
            for client in list(clients):
                client.abort()  # the other tasks end at their next call to the driver
            if failed is not None and len(failures) == 1:
                failed(exc)

    def cancel(self, group: str) -> None:
        """Nothing to cancel: the closed coordinator ends the threads."""


class SparkTaskLauncher:
    """Runs the tasks as one Spark job, a task per partition, on Spark's executors.

    Every task must run at the same time (they exchange epochs with the driver), so the query
    needs a task slot per partition. The job runs in its own job group; an immediate stop cancels
    the group (Spark interrupts the tasks) and abandons the waiting thread.
    """

    def __init__(self, spark_context: Callable[[], Any]) -> None:
        """Use the SparkContext ``spark_context()`` returns (called off the event loop)."""
        self._spark_context = spark_context
        self._log = library_logger("aiodstream.continuous", component="SparkTaskLauncher")

    def driver_host(self) -> str:
        """``spark.driver.host``, where executors reach this process (blocking: a py4j call)."""
        return driver_host(self._spark_context())

    def bind_address(self) -> str:
        """``spark.driver.bindAddress``, else ``spark.driver.host``: where Spark's driver listens (blocking: py4j calls)."""
        return driver_bind_address(self._spark_context())

    def check(self, num_partitions: int) -> None:
        """Refuse more partitions than Spark has task slots (blocking)."""
        slots = int(self._spark_context().defaultParallelism)
        if num_partitions > slots:
            raise InvalidPipelineError(
                f"a continuous query runs one long-running task per input partition, all at once: {num_partitions} "
                f"partitions need {num_partitions} task slots, and Spark has {slots} (defaultParallelism); use fewer "
                "partitions or give Spark more cores")

    async def run(self, specs: Sequence[TaskSpec], group: str) -> None:
        """Submit the job from a worker thread and wait for it without blocking the loop.

        The thread waits for the whole run of the query, so it is not one of the host's: anyio's
        default limiter (40 threads, shared by the host's own ``to_thread`` calls and, for
        example, a web framework's synchronous handlers) would lose a token per running query.
        """
        await anyio.to_thread.run_sync(self._run_job, list(specs), group, abandon_on_cancel=True,
                                       limiter=anyio.CapacityLimiter(1))

    def _run_job(self, specs: list[TaskSpec], group: str) -> None:
        sc = self._spark_context()
        try:
            run_in_job_group(sc, group, f"continuous query: {len(specs)} long-running tasks",
                             lambda: sc.parallelize(specs, len(specs)).mapPartitions(run_tasks).collect())
        except Exception as exc:
            if TASK_RETRY_MESSAGE in str(exc):
                raise ContinuousTaskRetryError() from exc
            raise

    def cancel(self, group: str) -> None:
        """Cancel the job group, from a thread of its own (the caller is the event loop)."""
        cancel_job_group(self._spark_context(), group)
