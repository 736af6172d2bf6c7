"""FailedBatches: the failed batches of the DStream semantics, passed over once a later batch commits.

Under the DStream semantics (``stop_on_failure`` off) a failed batch is reported and later batches
go on, as in Spark, where a failed batch is simply done. Its offsets entry stays without a commit
until a later batch commits; then its commit is written first, so the commits log has no hole.
A hole would be re-run by a restart after the later batches, out of order, and it would hold the
offsets purge and the state snapshots it needs back for as long as the query ran on (a stateful
query's checkpoint then could no longer restart at all). So a restart re-runs a failed batch
only when nothing after it committed: the query stopped or died right after it, or it failed
during a graceful stop, whose drain ends there (:meth:`keep`).

A batch whose job an immediate stop abandoned is never passed over: it did not fail, it was cut short.
"""

from __future__ import annotations

import bisect
from typing import Awaitable, Callable

from .._job_scheduler import JobAbandonedError
from .._job_set import JobSet
from .._logging import LibraryLogger
from ._planned_batch import PlannedBatch

__all__ = ["FailedBatches"]


class FailedBatches:
    """The failed batches waiting for a later batch's commit, in batch order."""

    def __init__(self, log: LibraryLogger, *, checkpointed: bool, synchronous: bool) -> None:
        """None yet. ``checkpointed``: the query has a checkpoint (else nothing is re-run: no batch waits);
        ``synchronous``: its commits are written as batches end (async progress tracking re-runs differently).
        ``log``: where each pass-over is warned about."""
        self._waiting: list[PlannedBatch] = []
        self._checkpointed, self._noted = checkpointed, checkpointed and synchronous
        self._kept = False
        self._held_after: int | None = None  # the first failed batch kept for the restart: no later one commits
        self._log = log

    def keep(self) -> bool:
        """From now on a failed batch stays uncommitted, for a restart to run it again: a graceful stop's drain ends at it.

        Returns whether the drain should end there: with a checkpoint, the restart runs that batch and
        the later ones in order; without one, later batches go on (nothing would run them again).
        """
        self._kept = self._checkpointed
        return self._checkpointed

    def note(self, batch: PlannedBatch, job_set: JobSet) -> bool:
        """``batch`` failed: it waits for a later commit, unless kept or cut short by an immediate stop.

        Returns whether its input counts as taken, as a batch that ran: it is not kept for a restart
        to run again, so what its records did to the state stays, and their event times move the
        watermark as theirs would have.
        """
        if any(isinstance(job.failure, JobAbandonedError) for job in job_set.jobs):
            return False
        if self._kept:
            held = self._held_after
            self._held_after = batch.batch_id if held is None else min(held, batch.batch_id)
            return False
        if self._noted:  # in batch order: a generation failure is finished before the batches running ahead of it
            bisect.insort(self._waiting, batch, key=lambda b: b.batch_id)
        return True

    def holds(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` must stay uncommitted: it comes after a failed batch kept for the restart (a
        batch of several running at once that finished in a drain that ended at a failure), so the restart runs
        them in order."""
        return self._held_after is not None and batch_id > self._held_after

    async def pass_over(self, batch_id: int, watermark_ms: int, write_commit: Callable[[PlannedBatch], Awaitable[None]]) -> None:
        """Before batch ``batch_id``'s commit: write the commits of the failed batches before it, oldest first."""
        waiting = self._waiting
        while waiting and waiting[0].batch_id < batch_id:
            failed = waiting.pop(0)
            failed.next_watermark_ms = watermark_ms
            await write_commit(failed)
            self._log.warning("a failed batch is passed over: a later batch committed, so a restart will not run it again "
                              "(as Spark's DStreams go on after a failed batch)", batch_id=failed.batch_id,
                              batch_time=failed.time.milliseconds)
