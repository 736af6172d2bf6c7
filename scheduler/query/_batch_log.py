"""BatchLog: a micro-batch run's offsets and commits logs: entries written now or by the async writer, what is on disk, purging.

Spark's ``MicroBatchExecution`` log handling (``offsetLog``, ``commitLog``, ``purge``) and the single
background writer of ``AsyncProgressTrackingMicroBatchExecution``.
"""

from __future__ import annotations

import bisect
import collections
from typing import Awaitable, Callable

import anyio
import anyio.abc
import anyio.to_thread
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._protocols import ReplayableGraph
from .._watermark import WATERMARK_POLICY_KEY, WatermarkTracker
from ._checkpoint import ASYNC_TRACKED_KEY, FROM_START_KEY, STATE_VERSION_KEY, BatchGrid, Checkpoint
from ._claims import concurrent_log_update_error
from ._metadata_log import CommitMetadata, OffsetSeq, OffsetSeqMetadata
from ._planned_batch import PlannedBatch

__all__ = ["BatchLog", "PurgePlan"]

# Spark's async writer queue: "one for offset commit and one for completion commit".
_ASYNC_QUEUE = 2

PurgePlan = tuple[int, list[int], list[int]]
"""What to purge: the threshold batch id, the offsets entries and the commits entries below it."""


@attrs.frozen
class _Write:
    kind: str  # "offsets" or "commits"
    batch: PlannedBatch


class BatchLog:
    """Writes a run's offsets and commits entries and keeps track of which are on disk.

    Synchronous tracking writes each entry at once on a worker thread; async tracking queues it
    for one background writer (:meth:`run`), first in first out, two writes deep. After a failed
    write nothing later reaches the disk. The purge keeps ``minBatchesToRetain`` entries and
    every entry a re-run or the graph's state may still need.
    """

    def __init__(self, checkpoint: Checkpoint, graph: ReplayableGraph, grid: BatchGrid, watermarks: WatermarkTracker, *,
                 retain: int, offset_ids: list[int], commit_ids: list[int], uncommitted: set[int],
                 stats: collections.Counter[str], fail: Callable[[BaseException, str], None], failed: Callable[[], bool],
                 changed: Callable[[], None], after_commit: Callable[[PlannedBatch], Awaitable[None]],
                 async_tracked: bool = False) -> None:
        """The logs of ``checkpoint`` as the run's opening found them (entries on disk, uncommitted ones); with
        ``async_tracked`` every offsets entry says it was written with async progress tracking (``ASYNC_TRACKED_KEY``)."""
        self._checkpoint = checkpoint
        self._async_tracked = async_tracked
        self._graph = graph
        self._grid = grid
        self._watermarks = watermarks
        self._retain = retain
        self._offsets = list(offset_ids)
        self._commits = list(commit_ids)
        self._uncommitted = set(uncommitted)
        self._stats = stats
        self._fail = fail
        self._failed = failed
        self._changed = changed
        self._after_commit = after_commit
        self._send: MemoryObjectSendStream[_Write] | None = None
        self._writer_done: anyio.Event | None = None

    # -- the async writer --

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the background writer until :meth:`close`."""
        send, receive = anyio.create_memory_object_stream[_Write](_ASYNC_QUEUE)
        self._send = send
        self._writer_done = anyio.Event()
        try:
            await self._write_all(receive, task_status)
        finally:
            self._writer_done.set()

    async def _write_all(self, receive: MemoryObjectReceiveStream[_Write], task_status: anyio.abc.TaskStatus[None]) -> None:
        async with receive:
            task_status.started()
            async for write in receive:
                if self._failed():
                    continue  # after a failed write nothing later may reach the disk out of order
                try:
                    await self._write_now(write)
                except Exception as exc:
                    self._fail(exc, f"async {write.kind} write for batch {write.batch.batch_id} failed")

    async def close(self) -> None:
        """Finish the queued async writes (each is short) and stop the writer; idempotent."""
        if self._send is not None:
            self._send.close()
        if self._writer_done is not None:
            with anyio.CancelScope(shield=True):
                await self._writer_done.wait()

    async def submit(self, kind: str, batch: PlannedBatch) -> None:
        """Queue a write for the async writer; waits while it is two writes behind (back-pressure)."""
        assert self._send is not None, "async tracking needs MicroBatchTracker.run() running"
        self._stats["writes_submitted"] += 1
        await self._send.send(_Write(kind, batch))

    async def _write_now(self, write: _Write) -> None:
        batch = write.batch
        try:
            if write.kind == "offsets":
                await anyio.to_thread.run_sync(self._add_offsets, batch)
                self._offsets_durable(batch)
            else:
                purge = self._commit_durable(batch)
                await anyio.to_thread.run_sync(self._add_commit, batch, purge)
                await self._after_commit(batch)
        finally:
            self._stats["writes_done"] += 1
            self._changed()

    # -- synchronous writes --

    async def write_offsets(self, batch: PlannedBatch) -> None:
        """Write ``batch``'s offsets entry now (on a worker thread); a failure stops every later batch, and is raised."""
        try:
            await anyio.to_thread.run_sync(self._add_offsets, batch)
        except BaseException as exc:
            self._fail(exc, f"writing the offsets of batch {batch.batch_id} failed")
            raise
        batch.offsets_issued = True
        self._offsets_durable(batch)

    async def write_commit(self, batch: PlannedBatch) -> None:
        """Write ``batch``'s commit now (with what the purge drops); a failure stops every later batch, and is raised."""
        purge = self._commit_durable(batch)
        try:
            await anyio.to_thread.run_sync(self._add_commit, batch, purge)
        except BaseException as exc:
            self._fail(exc, f"writing the commit of batch {batch.batch_id} failed")
            raise

    def committed_through(self, batch_id: int) -> bool:
        """Whether every batch up to ``batch_id`` is committed on disk (the inputs may release what precedes its end)."""
        return not self._uncommitted or batch_id < min(self._uncommitted)

    # -- blocking writes (worker threads) --

    def _entry(self, batch: PlannedBatch) -> OffsetSeq:
        conf = self._grid.conf()
        if self._watermarks.enabled:
            conf[WATERMARK_POLICY_KEY] = self._watermarks.policy
        if self._async_tracked:
            conf[ASYNC_TRACKED_KEY] = "true"
        if batch.state_version is not None:
            conf[STATE_VERSION_KEY] = str(batch.state_version)
        if batch.batch_id and all(offset is None for offset in batch.start):  # a re-run needs no entry before it
            conf[FROM_START_KEY] = "true"
        return OffsetSeq(batch.end, OffsetSeqMetadata(batch.watermarks.eviction_ms, batch.time.milliseconds, conf))

    def _add_offsets(self, batch: PlannedBatch) -> None:
        if not self._checkpoint.offsets.add(batch.batch_id, self._entry(batch)):
            raise concurrent_log_update_error(batch.batch_id, self._checkpoint.offsets.path_of(batch.batch_id))

    def _add_commit(self, batch: PlannedBatch, purge: PurgePlan | None) -> None:
        if not self._checkpoint.commits.add(batch.batch_id, CommitMetadata(batch.next_watermark_ms)):
            raise concurrent_log_update_error(batch.batch_id, self._checkpoint.commits.path_of(batch.batch_id))
        if purge is not None:
            # In the same worker-thread call as the commit: one thread hop per batch, not two.
            self._checkpoint.purge(*purge)

    # -- what is on disk --

    def _offsets_durable(self, batch: PlannedBatch) -> None:
        bisect.insort(self._offsets, batch.batch_id)
        self._uncommitted.add(batch.batch_id)
        self._stats["durable_offsets"] += 1

    def _commit_durable(self, batch: PlannedBatch) -> PurgePlan | None:
        # Bookkeeping for a commit about to be written, and what to purge along with it. Done
        # before the write: if the write fails, the tracker stops every later batch anyway.
        bisect.insort(self._commits, batch.batch_id)
        self._uncommitted.discard(batch.batch_id)
        self._stats["durable_commits"] += 1
        plan = self._purge_plan()
        if plan is not None:
            threshold, offsets, commits = plan
            del self._offsets[: bisect.bisect_left(self._offsets, threshold)]
            del self._commits[: bisect.bisect_left(self._commits, threshold)]
            self._stats["purged"] += len(offsets) + len(commits)
        return plan

    def _purge_plan(self) -> PurgePlan | None:
        """What to purge now (computed on the event loop, deleted in a thread), or ``None``."""
        keep = self._retain + 1
        disk, committed = self._offsets, self._commits
        if len(committed) <= keep or not disk:  # the newest committed entries count (batches logged ahead of
            return None                          # their run, after down time, say, are not yet history)
        threshold = committed[-keep]
        # A batch that may still be re-run, or whose input the graph needs to rebuild its state,
        # needs its own entry and the one before it (its start).
        needed = [b for b in (min(self._uncommitted, default=None), self._graph.oldest_needed_batch()) if b is not None]
        if needed:
            oldest = min(needed)
            i = bisect.bisect_left(disk, oldest)
            threshold = min(threshold, disk[i - 1] if i > 0 else oldest)
        if threshold <= disk[0] and (not self._commits or threshold <= self._commits[0]):
            return None
        offsets = [b for b in disk if b < threshold]
        commits = [b for b in self._commits if b < threshold]
        return threshold, offsets, commits
