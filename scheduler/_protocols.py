"""The seams between the scheduler and what it drives: the job graph, batch hooks, and listeners.

``JobGraph`` is Spark's ``DStreamGraph`` seen from the scheduler; ``BatchHook`` is where
checkpointing and source commits attach; ``JobSchedulerListener`` is how the listener bus hears
about batches without the scheduler importing it.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import anyio
import anyio.abc

from ._input_info import InputInfoTracker
from ._job import Job
from ._job_set import JobSet
from ._time import Time

__all__ = ["BatchHook", "JobGraph", "JobSchedulerListener", "ReceivingGraph"]


@runtime_checkable
class JobGraph(Protocol):
    """What the JobGenerator asks of a pipeline each batch."""

    def start(self, zero_time: Time, input_infos: InputInfoTracker) -> None:
        """Freeze the graph; batches are ``zero_time + k * batch_duration`` for ``k >= 1``."""
        ...

    async def allocate_input(self, time: Time) -> None:
        """Assign everything received so far to batch ``time`` (receiver input)."""
        ...

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        """Build one job per output operation that has work for ``time``, in registration order."""
        ...

    def clear_metadata(self, time: Time) -> None:
        """Forget per-batch state older than the graph's remember window, as of ``time``."""
        ...

    async def stop(self) -> None:
        """Stop input streams; called once, first thing when the scheduler stops.

        Input stops before the last tick (Spark stops its receivers first), so that whatever was
        received up to the stop still lands in the final batch of a graceful stop.
        """
        ...


@runtime_checkable
class ReceivingGraph(JobGraph, Protocol):
    """A graph with receivers: tasks that take in data between batches (sockets, async iterables)."""

    async def run_receivers(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run every receiver until :meth:`stop`; report ready once all have started."""
        ...


@runtime_checkable
class BatchHook(Protocol):
    """Per-batch callbacks for checkpointing and source commits.

    Both run on the JobGenerator's task, one at a time. ``batch_completed`` is called in
    batch-time order, even when ``concurrent_jobs > 1`` lets a later batch finish first.
    """

    async def batch_generated(self, time: Time, pending_times: Sequence[Time]) -> None:
        """The JobSet for ``time`` was submitted (Spark's first ``DoCheckpoint``)."""
        ...

    async def batch_completed(self, time: Time) -> None:
        """Every job of ``time`` succeeded and every earlier batch has been finalised."""
        ...


class JobSchedulerListener(Protocol):
    """Receives the scheduler's batch and job transitions (implemented by the listener bus).

    Each method must take what it needs from its argument before its first ``await``: the job
    set keeps changing afterwards.
    """

    async def on_batch_submitted(self, job_set: JobSet) -> None:
        """A non-empty JobSet was submitted."""
        ...

    async def on_batch_started(self, job_set: JobSet) -> None:
        """The first job of the batch is about to start (no job has a start time yet)."""
        ...

    async def on_job_started(self, job: Job, job_set: JobSet) -> None:
        """``job`` started."""
        ...

    async def on_job_completed(self, job: Job, job_set: JobSet) -> None:
        """``job`` ended, successfully or not."""
        ...

    async def on_batch_completed(self, job_set: JobSet) -> None:
        """The last job of the batch ended (posted even when jobs failed)."""
        ...
