"""MicroBatchTracker: plans, logs and commits every batch of a replayable graph, and reports progress.

The exactly-once half of Structured Streaming's ``MicroBatchExecution`` and ``ProgressReporter``
on the DStream batch grid: a batch's input is decided and written to the offsets log before any
job of it runs; its commit is written once all its jobs succeeded, in batch order; a restart
re-runs what was logged and not committed. With async progress tracking (Spark's
``AsyncProgressTrackingMicroBatchExecution``) the writes go to one background writer instead.
"""

from __future__ import annotations

import bisect
import collections
import functools
import math
import uuid
from typing import Callable, Protocol, Sequence

import anyio
import anyio.abc
import anyio.to_thread
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._clock import Clock
from .._errors import InvalidPipelineError, StreamingStateError
from .._job_set import JobSet
from .._logging import library_logger
from .._protocols import Offset, RecoveredBatch, ReplayableGraph, ReplayableInput
from .._state_progress import StateOperatorProgress
from .._time import Duration, Time
from .._watermark import WATERMARK_POLICY_KEY, BatchWatermarks, EventTimeStats, WatermarkTracker, parse_watermark_policy
from ._checkpoint import BatchGrid, Checkpoint, CheckpointState
from ._claims import CheckpointClaim, concurrent_log_update_error
from ._metadata_log import CommitMetadata, OffsetSeq, OffsetSeqMetadata
from ._progress import SinkProgress, SourceProgress, StreamingQueryProgress, StreamingQueryStatus, format_timestamp
from ._query_options import ProgressTrackingOptions, Trigger

__all__ = ["MicroBatchTracker", "MicroBatchTrackerStatistics", "QueryProgressListener", "RunPlan"]

STATEFUL_ASYNC_MESSAGE = "Stateful streaming queries does not support async progress tracking at this moment."

# Spark's async writer queue: "one for offset commit and one for completion commit".
_ASYNC_QUEUE = 2


class QueryProgressListener(Protocol):
    """Receives the tracker's progress reports (implemented by the runtime, which posts them to the bus)."""

    async def on_query_progress(self, progress: StreamingQueryProgress) -> None:
        """A batch was committed; ``progress`` describes it."""
        ...

    async def on_query_idle(self, query_id: uuid.UUID, run_id: uuid.UUID, timestamp: str) -> None:
        """A trigger found no new data and ran no batch (rate-limited as in Spark)."""
        ...


@attrs.frozen
class RunPlan:
    """Where a run starts: the grid, the first new batch time, and the logged batches to re-run first."""

    zero_time: Time
    first_batch: Time
    reschedule: tuple[Time, ...]


@attrs.frozen
class MicroBatchTrackerStatistics:
    """Counters of the tracker; the ``*_ns`` fields are time spent on the batches' critical path."""

    batches_planned: int
    batches_committed: int
    batches_failed: int
    durable_offsets_writes: int
    durable_commit_writes: int
    entries_purged: int
    wal_ns: int
    commit_ns: int


@attrs.define
class _Batch:
    batch_id: int
    time: Time
    start: tuple[Offset, ...]
    end: tuple[Offset, ...]
    latest: tuple[Offset, ...] | None
    trigger_start: int
    previous_trigger_start: int | None
    sequence: int
    has_data: bool
    rerun: bool
    watermarks: BatchWatermarks = attrs.field(factory=lambda: BatchWatermarks(0, 0))
    offsets_issued: bool = False
    next_watermark_ms: int = 0
    event_time: EventTimeStats | None = None
    state_operators: tuple[StateOperatorProgress, ...] = ()
    durations: dict[str, int] = attrs.field(factory=dict)
    critical_ns: int = 0
    planned_at: int = 0  # when the offsets were decided and logged: the batch's generation starts


@attrs.frozen
class _Write:
    kind: str  # "offsets" or "commits"
    batch: _Batch


class MicroBatchTracker:
    """The offsets write-ahead log, the commits log and progress reporting of one query run.

    It is the JobGenerator's :class:`~scheduler.BatchPlanner`: ``plan_batch`` runs before the
    graph generates a batch, ``batch_finished`` once its jobs ended, both on the generator's
    task, in batch-time order. Lifecycle: :meth:`open` (reads or creates the checkpoint), run
    :meth:`run` in a task group, then :meth:`close` once the scheduler stopped.

    Guarantees (synchronous tracking): no job of a batch starts before its offsets entry is
    on disk; a batch's commit is written only after all its jobs succeeded, after every earlier
    batch's; a write failure stops every later batch (it is raised by each one's generation).
    Async tracking keeps the ordering (one writer, first in first out) but lets batches run
    ahead of their entries: a restart resumes from the last durable entry and may re-run more.

    Without a checkpoint the tracker still plans offsets and reports progress, in memory only.

    Attributes:
        query_id: the query id (from the checkpoint; random without one), set by :meth:`open`.
        run_id: this run's id.
        critical_path_ns: per committed batch, the time spent writing its offsets and its commit
            (by the stopwatch), newest last; bounded.
    """

    def __init__(
        self,
        graph: ReplayableGraph,
        batch_duration: Duration,
        *,
        clock: Clock,
        checkpoint: Checkpoint | None = None,
        options: ProgressTrackingOptions | None = None,
        trigger: Trigger = Trigger.PROCESSING_TIME,
        name: str | None = None,
        listener: QueryProgressListener | None = None,
        stopwatch: Callable[[], int] | None = None,
        watermark_policy: str = "min",
    ) -> None:
        """Wire a tracker; nothing is read until :meth:`open`.

        Args:
            graph: the replayable graph whose batches it plans.
            batch_duration: the batch interval (the grid).
            clock: where trigger times and phase durations come from.
            checkpoint: the checkpoint directory, or ``None`` to keep everything in memory.
            options: progress-tracking options (Spark's names).
            trigger: how batches are triggered (async tracking refuses Once and AvailableNow).
            name: the query name, for progress.
            listener: receives progress and idle reports.
            stopwatch: a nanosecond counter for the critical-path statistics (the bench passes
                a monotonic one); default: the clock, in whole milliseconds.
            watermark_policy: ``min`` or ``max`` (``spark.sql.streaming.multipleWatermarkPolicy``)
                for a new checkpoint; a restart keeps the policy its checkpoint recorded.

        Raises:
            InvalidPipelineError: async progress tracking with a Once or AvailableNow trigger.
        """
        self.options = options or ProgressTrackingOptions()
        self.options.check_trigger(trigger)
        self._watermark_policy = parse_watermark_policy(watermark_policy)
        self.watermarks = WatermarkTracker(())
        self._last_batch_watermark = 0  # the newest planned batch's watermark: the next one's late-event watermark
        self._graph = graph
        self.batch_duration = batch_duration
        self._clock = clock
        self.checkpoint = checkpoint
        self.trigger = trigger
        self.name = name
        self._listener = listener
        self._stopwatch = stopwatch or (lambda: clock.now().milliseconds * 1_000_000)
        self._async = self.options.async_progress_tracking_enabled
        self.query_id: uuid.UUID | None = None
        self.run_id = uuid.uuid4()
        self.grid: BatchGrid | None = None
        self.state: CheckpointState | None = None
        self._inputs: tuple[ReplayableInput, ...] = ()
        self._last_end: tuple[Offset, ...] = ()
        self._last_planned: Time | None = None
        self._target: tuple[Offset, ...] | None = None  # AvailableNow: where the run stops
        self._recovered: dict[Time, RecoveredBatch] = {}
        self._planned: dict[Time, _Batch] = {}
        self._disk_offsets: list[int] = []
        self._disk_commits: list[int] = []
        self._uncommitted_on_disk: set[int] = set()
        self._failure: BaseException | None = None
        self._sequence = 0
        self._no_data_mark = 0  # the sequence number after the newest trigger found to have no new data
        self._changed: anyio.Event | None = None
        # Progress (Spark's ProgressReporter state).
        self._recent: collections.deque[StreamingQueryProgress] = collections.deque()
        self._last_trigger_start: int | None = None
        self._last_no_execution_progress: int | None = None  # None: Spark's Long.MinValue
        self._status = StreamingQueryStatus("Initializing StreamExecution", False, False)
        # Async tracking.
        self._send: MemoryObjectSendStream[_Write] | None = None
        self._receive: MemoryObjectReceiveStream[_Write] | None = None
        self._writer_done: anyio.Event | None = None
        self._last_durable_issue: int | None = None
        self._first_commit_done = False
        self._stats = collections.Counter[str]()
        self.critical_path_ns: collections.deque[int] = collections.deque(maxlen=100_000)
        self._log = library_logger("aiodstream.scheduler", component="MicroBatchTracker", query=name)

    # -- opening --

    async def open(self, default_first: Time, *, claim: CheckpointClaim | None = None) -> RunPlan:
        """Read (or create) the checkpoint and decide where this run starts.

        ``claim`` is the caller's claim on the checkpoint directory, held for the run (see
        :meth:`Checkpoint.open`); without one it is claimed for the opening only.

        ``default_first`` is the first batch time of a fresh start (the timer's next grid
        point). A restart resumes on the checkpoint's grid: logged batches without a commit are
        rescheduled with their logged input, and new batches start right after the newest
        logged one, so the timer generates every batch time that passed while the query was
        down (DStream's down-time batches). With async tracking, batches after the newest
        durable entry may have run without a trace, so new batches start at the next grid time
        after now instead: a batch time is never reused for different input.

        Raises:
            InvalidPipelineError: an input is not replayable, or async tracking of a stateful graph.
            CheckpointError: the checkpoint cannot be resumed (see :meth:`Checkpoint.recover`).
        """
        self._status = StreamingQueryStatus("Initializing sources", False, False)
        self._inputs = tuple(self._graph.replayable_inputs())
        if self._async and not self.options.override_sink_support_check:
            unsupported = self._graph.async_unsupported_sinks()
            if unsupported:
                raise InvalidPipelineError(f"Sink {unsupported[0]} does not support async progress tracking")
        if self._async and self._graph.is_stateful:
            raise InvalidPipelineError(STATEFUL_ASYNC_MESSAGE)
        n = len(self._inputs)
        if self.checkpoint is not None:
            state = await anyio.to_thread.run_sync(functools.partial(self.checkpoint.open, self.batch_duration, n, claim=claim))
        else:
            state = CheckpointState(uuid.uuid4(), True, None)
        self.state = state
        self.query_id = state.query_id
        self.watermarks = WatermarkTracker(self._graph.watermark_delays(), state.watermark_policy or self._watermark_policy,
                                           state.watermark_ms)
        self._last_batch_watermark = state.late_watermark_ms
        period = self.batch_duration
        if state.grid is None or state.latest_batch_id is None:
            self.grid = BatchGrid(default_first.minus(period), period)
            self._last_end = (None,) * n
            first = default_first
        else:
            self.grid = state.grid
            self._last_end = state.latest_end or (None,) * n
            self._last_planned = state.grid.time_of(state.latest_batch_id)
            first = state.grid.time_of(state.latest_batch_id + 1)
            if self._async:
                first = max(first, self._next_grid_time_after_now())
        self._disk_offsets = list(state.offset_ids)
        self._disk_commits = list(state.commit_ids)
        self._recovered = {b.time: b for b in state.rerun}
        if state.rerun:
            first_id = state.rerun[0].batch_id
        else:
            first_id = 0 if state.latest_batch_id is None else state.latest_batch_id + 1
        await self._graph.recover(self.grid.zero_time, state.history, first_id)
        self._uncommitted_on_disk = {b.batch_id for b in state.rerun}
        if self.trigger is Trigger.AVAILABLE_NOW:
            self._target = tuple(await self._graph.latest_offsets())
        self._status = StreamingQueryStatus("Waiting for next trigger", False, False)
        self._log.info("query opened", query_id=str(self.query_id), run_id=str(self.run_id), first_batch=first.milliseconds,
                       rerun=[b.batch_id for b in state.rerun], created=state.created)
        return RunPlan(self.grid.zero_time, first, tuple(b.time for b in state.rerun))

    def _next_grid_time_after_now(self) -> Time:
        assert self.grid is not None
        now, zero, period = self._clock.now().milliseconds, self.grid.zero_time.milliseconds, self.batch_duration.milliseconds
        return Time(((now - zero) // period + 1) * period + zero)

    # -- the async writer --

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the background log writer until :meth:`close` (returns at once without async tracking)."""
        if not self._async:
            task_status.started()
            return
        send, receive = anyio.create_memory_object_stream[_Write](_ASYNC_QUEUE)
        self._send, self._receive = send, receive
        self._writer_done = anyio.Event()
        try:
            async with receive:
                task_status.started()
                async for write in receive:
                    if self._failure is not None:
                        continue  # after a failed write nothing later may reach the disk out of order
                    try:
                        await self._write_now(write)
                    except Exception as exc:
                        self._fail(exc, f"async {write.kind} write for batch {write.batch.batch_id} failed")
        finally:
            self._writer_done.set()

    async def close(self) -> None:
        """Finish the queued async writes (each is short) and stop the writer; idempotent."""
        if self._send is not None:
            self._send.close()
        if self._writer_done is not None:
            with anyio.CancelScope(shield=True):
                await self._writer_done.wait()

    async def flush(self) -> None:
        """Wait until every async write queued so far has been written (or has failed)."""
        target = self._stats["writes_submitted"]
        while self._stats["writes_done"] < target and self._failure is None:
            await self.wait_changed()

    async def _submit(self, write: _Write) -> None:
        assert self._send is not None, "async tracking needs MicroBatchTracker.run() running"
        self._stats["writes_submitted"] += 1
        await self._send.send(write)  # waits while the writer is two writes behind (back-pressure)

    async def _write_now(self, write: _Write) -> None:
        batch = write.batch
        try:
            if write.kind == "offsets":
                await anyio.to_thread.run_sync(self._add_offsets, batch)
                self._on_offsets_durable(batch)
            else:
                purge = self._on_commit_durable(batch)
                await anyio.to_thread.run_sync(self._add_commit, batch, purge)
                await self._after_commit(batch)
        finally:
            self._stats["writes_done"] += 1
            self._notify()

    def _fail(self, exc: BaseException, what: str) -> None:
        if self._failure is None:
            self._failure = exc
        self._log.error(what, exc_info=exc)
        self._notify()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    # -- blocking writes (worker threads) --

    def _entry(self, batch: _Batch) -> OffsetSeq:
        assert self.grid is not None
        conf = self.grid.conf()
        if self.watermarks.enabled:
            conf[WATERMARK_POLICY_KEY] = self.watermarks.policy
        return OffsetSeq(batch.end, OffsetSeqMetadata(batch.watermarks.eviction_ms, batch.time.milliseconds, conf))

    def _add_offsets(self, batch: _Batch) -> None:
        assert self.checkpoint is not None
        if not self.checkpoint.offsets.add(batch.batch_id, self._entry(batch)):
            raise concurrent_log_update_error(batch.batch_id, self.checkpoint.offsets.path_of(batch.batch_id))

    def _add_commit(self, batch: _Batch, purge: tuple[int, list[int], list[int]] | None) -> None:
        assert self.checkpoint is not None
        if not self.checkpoint.commits.add(batch.batch_id, CommitMetadata(batch.next_watermark_ms)):
            raise concurrent_log_update_error(batch.batch_id, self.checkpoint.commits.path_of(batch.batch_id))
        if purge is not None:
            # In the same worker-thread call as the commit: one thread hop per batch, not two.
            self.checkpoint.purge(*purge)

    def _purge_plan(self) -> tuple[int, list[int], list[int]] | None:
        """What to purge now (computed on the event loop, deleted in a thread), or ``None``."""
        keep = self.options.min_batches_to_retain + 1
        disk = self._disk_offsets
        if len(disk) <= keep:
            return None
        threshold = disk[-keep]
        # A batch that may still be re-run, or whose input the graph needs to rebuild its state,
        # needs its own entry and the one before it (its start).
        needed = [b for b in (min(self._uncommitted_on_disk, default=None), self._graph.oldest_needed_batch()) if b is not None]
        if needed:
            oldest = min(needed)
            i = bisect.bisect_left(disk, oldest)
            threshold = min(threshold, disk[i - 1] if i > 0 else oldest)
        if threshold <= disk[0] and (not self._disk_commits or threshold <= self._disk_commits[0]):
            return None
        offsets = [b for b in disk if b < threshold]
        commits = [b for b in self._disk_commits if b < threshold]
        return threshold, offsets, commits

    def _apply_purge(self, plan: tuple[int, list[int], list[int]]) -> None:
        threshold, offsets, commits = plan
        del self._disk_offsets[: bisect.bisect_left(self._disk_offsets, threshold)]
        del self._disk_commits[: bisect.bisect_left(self._disk_commits, threshold)]
        self._stats["purged"] += len(offsets) + len(commits)

    # -- BatchPlanner: before a batch's jobs exist --

    async def plan_batch(self, time: Time) -> None:
        """Decide batch ``time``'s input, log it, and hand the range to the graph.

        A logged batch being re-run gets its logged range again and writes nothing.

        Raises:
            Exception: whatever the graph or the log raised; a log failure (or a failed async
                write before it) is raised again for every later batch, so no batch runs
                without its offsets on disk.
        """
        self._raise_failure()
        grid = self.grid
        if grid is None:
            raise StreamingStateError("MicroBatchTracker.plan_batch() before open()")
        now = self._clock.now().milliseconds
        self._sequence += 1
        recovered = self._recovered.pop(time, None)
        if recovered is not None:
            # The logged watermarks: a re-run judges its data exactly as the first run did.
            watermarks = BatchWatermarks(recovered.watermark_ms, recovered.late_watermark_ms)
            batch = _Batch(recovered.batch_id, time, recovered.start, recovered.end, None, now, self._last_trigger_start,
                           self._sequence, True, True, watermarks, offsets_issued=True)
            self._last_trigger_start = now
            self._last_batch_watermark = recovered.watermark_ms
            batch.planned_at = now
            self._planned[time] = batch
            self._graph.set_batch_offsets(time, batch.start, batch.end)
            self._graph.set_batch_watermarks(time, watermarks)
            self._stats["planned"] += 1
            self._status = StreamingQueryStatus("Processing new data", True, True)
            return
        batch_id = grid.batch_id_of(time)
        start = self._last_end
        self._status = StreamingQueryStatus(f"Getting offsets from {self._describe_inputs()}", self._status.is_data_available, True)
        latest = self._offsets(await self._graph.latest_offsets(), "latest_offsets")
        if self.trigger is Trigger.ONCE:
            end = latest  # Once ignores read limits, as in Spark
        else:
            limit = self._target if self._target is not None else latest
            end = self._offsets(await self._graph.plan_offsets(start, limit, time), "plan_offsets")
        planned_at = self._clock.now().milliseconds
        has_data = end != start
        # Batch N runs with the watermark that the batches finished so far produced, and drops
        # late rows by batch N - 1's: both go into its offsets entry before anything runs.
        watermarks = BatchWatermarks(self.watermarks.current_ms, self._last_batch_watermark)
        batch = _Batch(batch_id, time, start, end, latest, now, self._last_trigger_start, self._sequence, has_data, False,
                       watermarks)
        self._last_trigger_start = now
        self._last_batch_watermark = watermarks.eviction_ms
        batch.durations["latestOffset"] = planned_at - now
        self._status = StreamingQueryStatus("Writing offsets to log", has_data, True)
        tick = self._stopwatch()
        await self._log_offsets(batch)
        elapsed = self._stopwatch() - tick
        batch.critical_ns += elapsed
        self._stats["wal_ns"] += elapsed
        batch.planned_at = self._clock.now().milliseconds
        batch.durations["walCommit"] = batch.planned_at - planned_at
        self._last_end = end
        self._last_planned = time
        self._planned[time] = batch
        self._graph.set_batch_offsets(time, start, end)
        self._graph.set_batch_watermarks(time, watermarks)
        self._stats["planned"] += 1
        self._status = StreamingQueryStatus("Processing new data" if has_data else "Processing a batch without new data",
                                            has_data, True)

    def _offsets(self, offsets: Sequence[Offset], method: str) -> tuple[Offset, ...]:
        result = tuple(offsets)
        if len(result) != len(self._inputs) or not all(o is None or isinstance(o, str) for o in result):
            raise TypeError(
                f"{type(self._graph).__name__}.{method}() must return one offset (JSON text or None) per replayable input "
                f"({len(self._inputs)}), got {offsets!r}"
            )
        return result

    def _describe_inputs(self) -> str:
        return ", ".join(i.description for i in self._inputs) or "no sources"

    async def _log_offsets(self, batch: _Batch) -> None:
        if self.checkpoint is None:
            return
        if not self._async:
            try:
                await anyio.to_thread.run_sync(self._add_offsets, batch)
            except BaseException as exc:
                self._fail(exc, f"writing the offsets of batch {batch.batch_id} failed")
                raise
            batch.offsets_issued = True
            self._on_offsets_durable(batch)
            return
        now = self._clock.now().milliseconds
        interval = self.options.async_progress_tracking_checkpoint_interval_ms
        if interval == 0 or self._last_durable_issue is None or now - self._last_durable_issue >= interval:
            self._last_durable_issue = now
            batch.offsets_issued = True
            await self._submit(_Write("offsets", batch))

    def _on_offsets_durable(self, batch: _Batch) -> None:
        bisect.insort(self._disk_offsets, batch.batch_id)
        self._uncommitted_on_disk.add(batch.batch_id)
        self._stats["durable_offsets"] += 1

    # -- BatchPlanner: after a batch's jobs ended --

    async def batch_finished(self, job_set: JobSet, succeeded: bool) -> None:
        """Commit a batch whose jobs all succeeded (in batch order) and report its progress.

        A failed batch is left uncommitted: a restart runs it again.
        """
        batch = self._planned.pop(job_set.time, None)
        if batch is None:
            return
        if not succeeded:
            self._stats["failed"] += 1
            self._status = StreamingQueryStatus("Waiting for next trigger", self._status.is_data_available, bool(self._planned))
            self._notify()
            return
        committing_at = self._clock.now().milliseconds
        if self.watermarks.enabled:
            # What this batch saw moves the watermark the next batch to be planned runs with;
            # its commit records it (nextBatchWatermarkMs).
            seen = tuple(self._graph.event_time_stats(batch.time))
            self.watermarks.update(seen)
            for stats in seen:
                if stats is not None:
                    batch.event_time = stats.merge(batch.event_time)
        batch.next_watermark_ms = self.watermarks.current_ms
        batch.state_operators = tuple(self._graph.state_operators(batch.time))
        if self.checkpoint is not None:
            # State first: a commit promises that a restart never runs this batch again, so the
            # state it produced must be readable by then.
            await self._graph.prepare_commit(batch.time, batch.batch_id)
        tick = self._stopwatch()
        if self.checkpoint is not None and not self._failure:
            if not self._async:
                purge = self._on_commit_durable(batch)
                try:
                    await anyio.to_thread.run_sync(self._add_commit, batch, purge)
                except BaseException as exc:
                    self._fail(exc, f"writing the commit of batch {batch.batch_id} failed")
                    raise
            elif batch.offsets_issued or not self._first_commit_done:
                # Spark's rule: a durable commit where the offsets were written durably, and for the
                # first batch of a run (whose offsets may come from an earlier run's sparse log).
                self._first_commit_done = True
                await self._submit(_Write("commits", batch))
        elapsed = self._stopwatch() - tick
        batch.critical_ns += elapsed
        self._stats["commit_ns"] += elapsed
        if self.checkpoint is None:
            await self._graph.commit_offsets(batch.end)  # in memory: nothing is replayed, inputs may let go
        elif not self._async and not self._failure:
            await self._after_commit(batch)
        end_at = self._clock.now().milliseconds
        batch.durations["commitOffsets"] = end_at - committing_at
        # Generating the batch's RDDs and jobs (Spark's queryPlanning: planning the batch's query).
        batch.durations["queryPlanning"] = max(0, job_set.submission_time.milliseconds - batch.planned_at)
        if job_set.processing_start is not None and job_set.processing_end is not None:
            batch.durations["addBatch"] = job_set.processing_end.since(job_set.processing_start).milliseconds
        batch.durations["triggerExecution"] = end_at - batch.trigger_start
        self._stats["committed"] += 1
        self.critical_path_ns.append(batch.critical_ns)
        if not batch.has_data:
            self._no_data_mark = max(self._no_data_mark, batch.sequence)
        self._status = StreamingQueryStatus("Waiting for next trigger", batch.has_data, bool(self._planned))
        await self._report(self._progress_of(batch, job_set, end_at))

    def _on_commit_durable(self, batch: _Batch) -> tuple[int, list[int], list[int]] | None:
        # Bookkeeping for a commit about to be written, and what to purge along with it. Done
        # before the write: if the write fails, the tracker stops every later batch anyway.
        bisect.insort(self._disk_commits, batch.batch_id)
        self._uncommitted_on_disk.discard(batch.batch_id)
        self._stats["durable_commits"] += 1
        plan = self._purge_plan()
        if plan is not None:
            self._apply_purge(plan)
        return plan

    async def _after_commit(self, batch: _Batch) -> None:
        if not self._uncommitted_on_disk or batch.batch_id < min(self._uncommitted_on_disk):
            # Every batch up to this one is committed: the inputs may release what precedes its end.
            await self._graph.commit_offsets(batch.end)

    @property
    def sequential_batches(self) -> bool:
        """With watermarks, a batch is planned only after the one before it finished (its watermark comes from it)."""
        return self.watermarks.enabled

    # -- progress --

    def _rates(self, rows: int, batch: _Batch, end_at: int) -> tuple[float, float]:
        previous = batch.previous_trigger_start
        if previous is None:
            input_rate = 0.0  # first trigger of the run: Spark divides by an infinite interval
        else:
            elapsed = (batch.trigger_start - previous) / 1000
            input_rate = rows / elapsed if elapsed > 0 else (math.inf if rows else math.nan)
        processed = rows / (max(1, end_at - batch.trigger_start) / 1000)
        return input_rate, processed

    def _progress_of(self, batch: _Batch, job_set: JobSet, end_at: int) -> StreamingQueryProgress:
        sources = []
        for i, source in enumerate(self._inputs):
            info = job_set.input_infos.get(source.stream_id)
            rows = info.num_records if info is not None else 0
            input_rate, processed = self._rates(rows, batch, end_at)
            latest = batch.latest[i] if batch.latest is not None else batch.end[i]
            sources.append(SourceProgress(source.description, batch.start[i], batch.end[i], latest, rows, input_rate, processed))
        sink = SinkProgress(", ".join(job.name for job in job_set.jobs) or "no outputs")
        self._last_no_execution_progress = end_at
        assert self.query_id is not None
        event_time: dict[str, str] = {}
        if batch.event_time is not None:
            seen = batch.event_time
            event_time.update(avg=format_timestamp(seen.avg_ms), max=format_timestamp(seen.max_ms),
                              min=format_timestamp(seen.min_ms))
        if self.watermarks.enabled:
            event_time["watermark"] = format_timestamp(batch.watermarks.eviction_ms)
        return StreamingQueryProgress(
            self.query_id, self.run_id, self.name, format_timestamp(batch.trigger_start), batch.batch_id,
            end_at - batch.trigger_start, dict(batch.durations), tuple(sources), sink, event_time,
            batch_time_ms=batch.time.milliseconds, state_operators=batch.state_operators,
        )

    async def _report(self, progress: StreamingQueryProgress) -> None:
        buffer = self._recent
        buffer.append(progress)
        while len(buffer) >= self.options.num_recent_progress_updates:
            buffer.popleft()
        self._notify()
        self._log.debug("query made progress", batch_id=progress.batch_id, num_input_rows=progress.num_input_rows,
                       duration_ms=dict(progress.duration_ms))
        if self._listener is not None:
            await self._listener.on_query_progress(progress)

    @property
    def last_progress(self) -> StreamingQueryProgress | None:
        """The newest progress entry, or ``None``."""
        return self._recent[-1] if self._recent else None

    @property
    def recent_progress(self) -> list[StreamingQueryProgress]:
        """The buffered progress entries, oldest first (at most ``numRecentProgressUpdates - 1``)."""
        return list(self._recent)

    @property
    def status(self) -> StreamingQueryStatus:
        """What the query is doing now."""
        return self._status

    def set_status(self, message: str) -> None:
        """Set the status message with both flags false (stop, failure)."""
        self._status = StreamingQueryStatus(message, False, False)

    # -- trigger-driven runs (once, available-now) --

    def next_trigger_time(self) -> Time:
        """The batch time of the next trigger-driven batch: the next grid time after now, after the last batch."""
        candidate = self._next_grid_time_after_now()
        if self._last_planned is not None and self._last_planned + self.batch_duration > candidate:
            return self._last_planned + self.batch_duration
        return candidate

    async def check_for_new_data(self) -> bool:
        """Whether a trigger now would have new input; without, record an idle trigger (Spark's rules).

        The idle trigger gets a progress entry (at most one per ``noDataProgressEventInterval``) and,
        once something was recorded in this run, an idle report to the listener.
        """
        self._raise_failure()
        start_ms = self._clock.now().milliseconds
        self._status = StreamingQueryStatus(f"Getting offsets from {self._describe_inputs()}", False, True)
        latest = self._offsets(await self._graph.latest_offsets(), "latest_offsets")
        if self.trigger is Trigger.ONCE:
            end = latest
        else:
            limit = self._target if self._target is not None else latest
            end = self._offsets(await self._graph.plan_offsets(self._last_end, limit, self.next_trigger_time()), "plan_offsets")
        if end != self._last_end:
            return True
        end_ms = self._clock.now().milliseconds
        self._last_trigger_start = start_ms
        self._no_data_mark = max(self._no_data_mark, self._sequence + 1)
        self._status = StreamingQueryStatus("Waiting for data to arrive", False, False)
        interval = self.options.no_data_progress_event_interval_ms
        last = self._last_no_execution_progress
        if last is None or end_ms - interval >= last:
            assert self.grid is not None and self.query_id is not None
            next_id = self.grid.batch_id_of(self.next_trigger_time())
            sources = tuple(
                SourceProgress(s.description, self._last_end[i], self._last_end[i], latest[i], 0, 0.0, 0.0)
                for i, s in enumerate(self._inputs)
            )
            progress = StreamingQueryProgress(
                self.query_id, self.run_id, self.name, format_timestamp(start_ms), next_id, end_ms - start_ms,
                {"latestOffset": end_ms - start_ms, "triggerExecution": end_ms - start_ms}, sources, SinkProgress("no outputs"),
            )
            self._recent.append(progress)
            while len(self._recent) >= self.options.num_recent_progress_updates:
                self._recent.popleft()
            if last is not None and self._listener is not None:
                await self._listener.on_query_idle(self.query_id, self.run_id, format_timestamp(start_ms))
            self._last_no_execution_progress = end_ms
        self._notify()
        return False

    # -- waiting --

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_changed(self) -> None:
        """Wait until the tracker reports something (progress, an idle trigger, a failure)."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def no_new_data_since(self, sequence: int) -> bool:
        """Whether a trigger after plan number ``sequence`` found no new data and everything before it finished."""
        return self._no_data_mark > sequence and not any(b.sequence < self._no_data_mark for b in self._planned.values())

    @property
    def sequence(self) -> int:
        """How many batches were planned in this run."""
        return self._sequence

    def fail(self, error: BaseException) -> None:
        """The query failed (a job of a batch, under stop-on-failure): nothing is planned or committed after this."""
        if self._failure is None:
            self._failure = error
        self._notify()

    def rendered_offsets(self, time: Time) -> tuple[str, str] | None:
        """Batch ``time``'s start and end offsets as Spark renders an offset seq (``[o1, o2, -]``), if it is planned."""
        batch = self._planned.get(time)
        if batch is None:
            return None

        def render(offsets: Sequence[Offset]) -> str:
            return "[" + ", ".join("-" if o is None else o for o in offsets) + "]"

        return render(batch.start), render(batch.end)

    @property
    def failure(self) -> BaseException | None:
        """The log write failure that stopped the query's batches, if any."""
        return self._failure

    def statistics(self) -> MicroBatchTrackerStatistics:
        """A snapshot of the counters."""
        s = self._stats
        return MicroBatchTrackerStatistics(s["planned"], s["committed"], s["failed"], s["durable_offsets"], s["durable_commits"],
                                           s["purged"], s["wal_ns"], s["commit_ns"])

    def __repr__(self) -> str:
        return (f"<MicroBatchTracker {self.name or ''}[id {self.query_id} | planned {self._stats['planned']}, committed "
                f"{self._stats['committed']} | {'async' if self._async else 'sync'}]>")
