"""MicroBatchTracker: plans, logs and commits every batch of a replayable graph, and reports progress.

The exactly-once half of Structured Streaming's ``MicroBatchExecution`` and ``ProgressReporter``
on the DStream batch grid: a batch's input is decided and written to the offsets log before any
job of it runs; its commit is written once all its jobs succeeded, in batch order; a restart
re-runs what was logged and not committed. With async progress tracking (Spark's
``AsyncProgressTrackingMicroBatchExecution``) the writes go to one background writer instead.
"""

from __future__ import annotations

import collections
import functools
import uuid
from typing import Callable, Sequence

import anyio
import anyio.abc
import anyio.to_thread
import attrs

from .._change_signal import ChangeSignal
from .._clock import Clock
from .._errors import InvalidPipelineError, StreamingStateError
from .._job_set import JobSet
from .._logging import library_logger
from .._protocols import Offset, RecoveredBatch, ReplayableGraph, ReplayableInput
from .._time import Duration, Time
from .._watermark import WATERMARK_POLICY_KEY, BatchWatermarks, WatermarkTracker, parse_watermark_policy
from ._batch_log import BatchLog
from ._checkpoint import BatchGrid, Checkpoint, CheckpointState
from ._claims import CheckpointClaim
from ._failed_batches import FailedBatches
from ._planned_batch import PlannedBatch, checked_offsets, once_end
from ._progress import StreamingQueryProgress, StreamingQueryStatus
from ._progress_reporter import ProgressReporter, QueryProgressListener
from ._query_options import ProgressTrackingOptions, Trigger

__all__ = ["MicroBatchTracker", "MicroBatchTrackerStatistics", "RunPlan", "runs_batches_sequentially"]

STATEFUL_ASYNC_MESSAGE = "Stateful streaming queries does not support async progress tracking at this moment."

# The watermarks of every batch of a query without watermarked inputs (frozen: one shared value).
_NO_WATERMARKS = BatchWatermarks(0, 0)
_CRITICAL_PATH_KEPT = 1_000  # about 40 KB a query (it was 100,000: some 4 MB); the benches measure fewer batches


def _run_policy(state: CheckpointState, configured: str) -> str:
    """The configured watermark policy on a fresh start, else what the newest offsets entry recorded, ``min`` if none
    (Spark's ``OffsetSeqMetadata.setSessionConf``); raises ``InvalidPipelineError`` for a recorded non-policy."""
    if state.latest_batch_id is None:
        return configured
    return parse_watermark_policy(state.watermark_policy or "min")


@attrs.frozen
class RunPlan:
    """Where a run starts: the grid, the first new batch time, and the logged batches to re-run first."""

    zero_time: Time
    first_batch: Time
    reschedule: tuple[Time, ...]


def runs_batches_sequentially(graph: ReplayableGraph) -> bool:
    """Whether ``graph``'s batches run one after another, each planned once the one before it finished: with a
    watermarked input (a batch's watermark comes from the batch before) or when the graph says so (an optional
    ``sequential_batches`` of its own: a state-store operator)."""
    return bool(graph.watermark_delays()) or _graph_sequential(graph)


def _graph_sequential(graph: object) -> bool:
    return bool(getattr(graph, "sequential_batches", False))


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
            (by the stopwatch), newest last; the last 1,000 batches (for bench/).
    """

    def __init__(self, graph: ReplayableGraph, batch_duration: Duration, *, clock: Clock, checkpoint: Checkpoint | None = None,
                 options: ProgressTrackingOptions | None = None, trigger: Trigger = Trigger.PROCESSING_TIME, name: str | None = None,
                 listener: QueryProgressListener | None = None, stopwatch: Callable[[], int] | None = None,
                 watermark_policy: str = "min") -> None:
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
            stopwatch: a nanosecond counter for the critical-path statistics; default: the clock, in whole ms.
            watermark_policy: ``min`` or ``max`` (``multipleWatermarkPolicy``); a restart keeps the one it recorded.

        Raises:
            InvalidPipelineError: async progress tracking with a Once or AvailableNow trigger.
        """
        self.options = options or ProgressTrackingOptions()
        self.options.check_trigger(trigger)
        self._trigger = trigger
        self._watermark_policy = parse_watermark_policy(watermark_policy)
        self.watermarks = WatermarkTracker(())
        # Set by open(): whether an input is watermarked, and (without) the watermark, which then never moves.
        self._watermarked = False
        self._fixed_watermark_ms = 0
        self._state_version: int | None = None  # the state version the next new batch loads, for a stateful graph
        self._last_batch_watermark = 0  # the newest planned batch's watermark: the next one's late-event watermark
        self._graph = graph
        self.batch_duration = batch_duration
        self._clock = clock
        self.checkpoint = checkpoint
        self.trigger = trigger
        self.name = name
        self._stopwatch = stopwatch or (lambda: clock.now().milliseconds * 1_000_000)
        self._async = self.options.async_progress_tracking_enabled
        self.query_id: uuid.UUID | None = None
        self.run_id = uuid.uuid4()
        self.grid: BatchGrid | None = None
        self.state: CheckpointState | None = None
        self._inputs: tuple[ReplayableInput, ...] = ()
        self._getting_offsets = "Getting offsets from no sources"  # the status message of planning, set by open()
        self._last_end: tuple[Offset, ...] = ()
        self._last_planned: Time | None = None
        self._target: tuple[Offset, ...] | None = None  # AvailableNow: where the run stops
        self._recovered: dict[Time, RecoveredBatch] = {}
        # Planned and not finished, by batch time in milliseconds (an int hashes in C, a Time in Python).
        self._planned: dict[int, PlannedBatch] = {}
        self._failure: BaseException | None = None
        self._sequence = 0
        self._no_data_mark = 0  # the sequence number after the newest trigger found to have no new data
        # The graph's optional input_pending (a DStream graph's), asked after a batch planned without new input.
        self._input_pending: Callable[[], bool] | None = getattr(graph, "input_pending", None)
        self._changed = ChangeSignal()
        self._log = library_logger("aiodstream.scheduler", component="MicroBatchTracker", query=name)
        self._progress = ProgressReporter(self.options, name, listener, self._changed.notify, self._log,
                                          getattr(graph, "output_names", None))
        self.failed_batches = FailedBatches(self._log, checkpointed=checkpoint is not None, synchronous=not self._async)
        self._batch_log: BatchLog | None = None  # the offsets and commits logs, with a checkpoint, once open
        self._last_durable_issue: int | None = None
        self._stats = collections.Counter[str]()
        self.critical_path_ns: collections.deque[int] = collections.deque(maxlen=_CRITICAL_PATH_KEPT)

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
        self._progress.set_status("Initializing sources")
        self._inputs = tuple(self._graph.replayable_inputs())
        self._getting_offsets = f"Getting offsets from {', '.join(i.description for i in self._inputs) or 'no sources'}"
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
        self.watermarks = WatermarkTracker(self._graph.watermark_delays(), _run_policy(state, self._watermark_policy), state.watermark_ms)
        if self.watermarks.enabled and self.watermarks.policy != self._watermark_policy:
            self._log.warning("watermark policy restored from the checkpoint", setting=WATERMARK_POLICY_KEY,
                              configured=self._watermark_policy, restored=self.watermarks.policy)
        self._watermarked = self.watermarks.enabled
        self._fixed_watermark_ms = self.watermarks.current_ms
        self._last_batch_watermark = state.late_watermark_ms
        self._state_version = state.next_state_version if self._graph.is_stateful else None  # the next new batch's
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
            if self._async or state.async_tracked:
                # Batch times after the newest entry may have run without a trace (their output written): never again.
                first = max(first, self.grid.next_time_after(self._clock.now()))
        if self.checkpoint is not None:
            self._batch_log = BatchLog(
                self.checkpoint, self._graph, self.grid, self.watermarks, retain=self.options.min_batches_to_retain,
                offset_ids=list(state.offset_ids), commit_ids=list(state.commit_ids),
                uncommitted={b.batch_id for b in state.rerun}, stats=self._stats, fail=self._fail,
                failed=lambda: self._failure is not None, changed=self._notify, after_commit=self._after_commit,
                async_tracked=self._async)
        self._recovered = {b.time: b for b in state.rerun}
        if state.rerun:
            first_id = state.rerun[0].batch_id
        else:
            first_id = 0 if state.latest_batch_id is None else state.latest_batch_id + 1
        await self._graph.recover(self.grid.zero_time, state.history, first_id)
        if self.trigger is Trigger.AVAILABLE_NOW:
            self._target = tuple(await self._graph.latest_offsets())
        self._progress.set_status("Waiting for next trigger")
        self._log.info("query opened", query_id=str(self.query_id), run_id=str(self.run_id), first_batch=first.milliseconds,
                       rerun=[b.batch_id for b in state.rerun], created=state.created)
        return RunPlan(self.grid.zero_time, first, tuple(b.time for b in state.rerun))

    # -- the async writer --

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the background log writer until :meth:`close` (returns at once without async tracking or a checkpoint)."""
        if not self._async or self._batch_log is None:
            task_status.started()
            return
        await self._batch_log.run(task_status=task_status)

    async def close(self) -> None:
        """Finish the queued async writes (each is short) and stop the writer; idempotent."""
        if self._batch_log is not None:
            await self._batch_log.close()

    async def flush(self) -> None:
        """Wait until every async write queued so far has been written (or has failed)."""
        target = self._stats["writes_submitted"]
        while self._stats["writes_done"] < target and self._failure is None:
            await self.changed_event().wait()

    def _fail(self, exc: BaseException, what: str) -> None:
        if self._failure is None:
            self._failure = exc
        self._log.error(what, exc_info=exc)
        self._notify()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    # -- BatchPlanner: before a batch's jobs exist --

    async def plan_batch(self, time: Time) -> None:
        """Decide batch ``time``'s input, log it, and hand the range to the graph (a re-run batch's logged range, unwritten).

        Raises:
            Exception: whatever the graph or the log raised; a log failure (or a failed async
                write before it) is raised again for every later batch, so no batch runs
                without its offsets on disk.
        """
        if self._failure is not None:  # _raise_failure(), inline: every batch of every context passes here
            raise self._failure
        grid = self.grid
        if grid is None:
            raise StreamingStateError("MicroBatchTracker.plan_batch() before open()")
        clock = self._clock
        now = clock.now().milliseconds
        self._sequence += 1
        recovered = self._recovered.pop(time, None) if self._recovered else None
        if recovered is not None:
            # The logged watermarks: a re-run judges its data exactly as the first run did.
            watermarks = BatchWatermarks(recovered.watermark_ms, recovered.late_watermark_ms)
            batch = PlannedBatch(recovered.batch_id, time, recovered.start, recovered.end, None, now,
                                 self._progress.trigger_started(now), self._sequence, True, True, watermarks, offsets_issued=True,
                                 state_version=recovered.state_version)
            self._last_batch_watermark = recovered.watermark_ms
            batch.planned_at = now
            self._planned[time.milliseconds] = batch
            self._graph.set_batch_offsets(time, batch.start, batch.end)
            if recovered.state_version is not None:
                self._graph.set_batch_state_version(time, recovered.state_version)
            self._hand_watermarks(time, watermarks)
            self._stats["planned"] += 1
            self._progress.set_status("Processing new data", True, True)
            return
        batch_id = grid.batch_id_of(time)
        start = self._last_end
        progress = self._progress
        progress.set_status(self._getting_offsets, progress.data_available, True)
        graph = self._graph
        latest = checked_offsets(await graph.latest_offsets(), len(self._inputs), graph, "latest_offsets")
        if self.trigger is Trigger.ONCE:
            end = once_end(start, latest)  # Once ignores read limits, as in Spark
        else:
            limit = self._target if self._target is not None else latest
            end = checked_offsets(await graph.plan_offsets(start, limit, time), len(self._inputs), graph, "plan_offsets")
        planned_at = clock.now().milliseconds
        has_data = end != start
        # Batch N runs with the watermark that the batches finished so far produced, and drops
        # late rows by batch N - 1's: both go into its offsets entry before anything runs.
        current = self.watermarks.current_ms if self._watermarked else self._fixed_watermark_ms
        late = self._last_batch_watermark
        watermarks = BatchWatermarks(current, late) if current or late else _NO_WATERMARKS
        batch = PlannedBatch(batch_id, time, start, end, latest, now, progress.trigger_started(now), self._sequence,
                             has_data, False, watermarks)
        self._last_batch_watermark = current
        if not has_data and self._input_pending is not None:
            batch.input_pending = self._input_pending()
        if self._state_version is not None:  # a stateful graph: its version, recorded where it is not the batch id
            if self._state_version != batch_id:
                batch.state_version = self._state_version
            self._state_version += 1
        durations = batch.durations
        durations["latestOffset"] = planned_at - now
        if self._batch_log is not None:  # in memory there is nothing to write, nor to time
            progress.set_status("Writing offsets to log", has_data, True)
            tick = self._stopwatch()
            await self._log_offsets(batch)
            elapsed = self._stopwatch() - tick
            batch.critical_ns += elapsed
            self._stats["wal_ns"] += elapsed
            batch.planned_at = clock.now().milliseconds
        else:
            batch.planned_at = planned_at
        durations["walCommit"] = batch.planned_at - planned_at
        self._last_end = end
        self._last_planned = time
        self._planned[time.milliseconds] = batch
        graph.set_batch_offsets(time, start, end)
        if batch.state_version is not None:
            graph.set_batch_state_version(time, batch.state_version)
        if watermarks is not _NO_WATERMARKS or self._watermarked:  # _hand_watermarks(), inline
            graph.set_batch_watermarks(time, watermarks)
        self._stats["planned"] += 1
        progress.set_status("Processing new data" if has_data else "Processing a batch without new data", has_data, True)

    def _hand_watermarks(self, time: Time, watermarks: BatchWatermarks) -> None:
        # Without watermarked inputs (and with both watermarks 0, what a graph answers for a batch it was not told
        # about) nothing is handed over: batch_finished takes back only what was handed over.
        if self._watermarked or watermarks.eviction_ms or watermarks.late_ms:
            self._graph.set_batch_watermarks(time, watermarks)

    async def _log_offsets(self, batch: PlannedBatch) -> None:
        log = self._batch_log
        if log is None:
            return
        if not self._async:
            await log.write_offsets(batch)
            return
        now = self._clock.now().milliseconds
        interval = self.options.async_progress_tracking_checkpoint_interval_ms
        if interval == 0 or self._last_durable_issue is None or now - self._last_durable_issue >= interval:
            self._last_durable_issue = now
            batch.offsets_issued = True
            await log.submit("offsets", batch)

    # -- BatchPlanner: after a batch's jobs ended --

    async def batch_finished(self, job_set: JobSet, succeeded: bool) -> None:
        """Commit a batch whose jobs all succeeded (in batch order) and report its progress; a failed one: FailedBatches."""
        batch = self._planned.pop(job_set.time.milliseconds, None)
        if batch is None:
            return
        if not succeeded:
            self._stats["failed"] += 1
            taken = self.failed_batches.note(batch, job_set)
            seen = self._graph.event_time_stats(batch.time)  # what the graph kept for its commit is let go
            if taken and self._watermarked:  # its records reach the state (the operators catch up): so the watermark
                self.watermarks.update(tuple(seen))
            self._graph.state_operators(batch.time)
        if not succeeded or self.failed_batches.holds(batch.batch_id):
            self._progress.set_status("Waiting for next trigger", self._progress.data_available, bool(self._planned))
            self._notify()
            return
        clock = self._clock
        committing_at = clock.now().milliseconds
        watermarked = self._watermarked
        graph = self._graph
        if watermarked:
            # What this batch saw moves the watermark the next batch to be planned runs with;
            # its commit records it (nextBatchWatermarkMs).
            seen = tuple(graph.event_time_stats(batch.time))
            self.watermarks.update(seen)
            for stats in seen:
                if stats is not None:
                    batch.event_time = stats.merge(batch.event_time)
            batch.next_watermark_ms = self.watermarks.current_ms
        else:
            if batch.watermarks.eviction_ms or batch.watermarks.late_ms:
                graph.event_time_stats(batch.time)  # no watermarked input: only takes back what plan_batch handed over
            batch.next_watermark_ms = self._fixed_watermark_ms
        batch.state_operators = tuple(graph.state_operators(batch.time))
        if self.checkpoint is not None:
            # State first: a commit promises that a restart never runs this batch again, so the
            # state it produced must be readable by then.
            await graph.prepare_commit(batch.time, batch.batch_id)
        log = self._batch_log
        if log is not None:  # in memory there is nothing to write, nor to time
            tick = self._stopwatch()
            if not self._failure:
                if not self._async:
                    await self.failed_batches.pass_over(batch.batch_id, batch.watermarks.eviction_ms, log.write_commit)
                    await log.write_commit(batch)
                elif batch.offsets_issued:
                    # Spark's rule: a durable commit where the offsets were written durably. That includes
                    # the first batch of a run: a re-run's offsets are an earlier run's entry, a new one's
                    # are written at once. A later batch without an entry gets none, even when it is the
                    # first to succeed (a commit without offsets would make the checkpoint unreadable).
                    await log.submit("commits", batch)
            elapsed = self._stopwatch() - tick
            batch.critical_ns += elapsed
            self._stats["commit_ns"] += elapsed
        if self.checkpoint is None:
            await graph.commit_offsets(batch.end)  # in memory: nothing is replayed, inputs may let go
        elif not self._async and not self._failure:
            await self._after_commit(batch)
        end_at = clock.now().milliseconds
        durations = batch.durations
        durations["commitOffsets"] = end_at - committing_at
        # Generating the batch's RDDs and jobs (Spark's queryPlanning: planning the batch's query).
        planning = job_set.submission_time.milliseconds - batch.planned_at
        durations["queryPlanning"] = planning if planning > 0 else 0
        started, ended = job_set.processing_start, job_set.processing_end
        if started is not None and ended is not None:
            durations["addBatch"] = ended.milliseconds - started.milliseconds
        durations["triggerExecution"] = end_at - batch.trigger_start
        self._stats["committed"] += 1
        self.critical_path_ns.append(batch.critical_ns)
        if not batch.has_data and not batch.input_pending:
            self._no_data_mark = max(self._no_data_mark, batch.sequence)
        self._progress.set_status("Waiting for next trigger", batch.has_data, bool(self._planned))
        assert self.query_id is not None
        await self._progress.report_batch(batch, job_set, end_at, self._inputs, self.query_id, self.run_id, watermarked)

    async def _after_commit(self, batch: PlannedBatch) -> None:
        assert self._batch_log is not None
        if self._batch_log.committed_through(batch.batch_id):
            # Every batch up to this one is committed: the inputs may release what precedes its end.
            await self._graph.commit_offsets(batch.end)

    @property
    def sequential_batches(self) -> bool:
        """Whether a batch is planned only after the one before it finished: :func:`runs_batches_sequentially` of the
        graph, known once the tracker opened (its watermarks are set then)."""
        return self.watermarks.enabled or _graph_sequential(self._graph)

    # -- progress --

    @property
    def last_progress(self) -> StreamingQueryProgress | None:
        """The newest progress entry, or ``None``."""
        return self._progress.ring.last

    @property
    def recent_progress(self) -> list[StreamingQueryProgress]:
        """The buffered progress entries, oldest first (at most ``numRecentProgressUpdates - 1``)."""
        return self._progress.ring.recent()

    @property
    def status(self) -> StreamingQueryStatus:
        """What the query is doing now."""
        return self._progress.status

    def set_status(self, message: str) -> None:
        """Set the status message with both flags false (stop, failure)."""
        self._progress.set_status(message)

    # -- trigger-driven runs (once, available-now) --

    def next_trigger_time(self) -> Time:
        """The batch time of the next trigger-driven batch: the next grid time after now, after the last batch."""
        assert self.grid is not None, "next_trigger_time() before open()"
        last, now = self._last_planned, self.grid.next_time_after(self._clock.now())
        return now if last is None else max(last + self.batch_duration, now)

    async def check_for_new_data(self) -> bool:
        """Whether a trigger now would run a batch: new input, or (AvailableNow) a watermark that a batch of this run moved
        past its own for an operator that times out by it; else record an idle trigger (Spark's rules).

        The idle trigger gets a progress entry (at most one per ``noDataProgressEventInterval``) and,
        once something was recorded in this run, an idle report to the listener."""
        self._raise_failure()
        start_ms = self._clock.now().milliseconds
        self._progress.set_status(self._getting_offsets, False, True)
        latest = checked_offsets(await self._graph.latest_offsets(), len(self._inputs), self._graph, "latest_offsets")
        if self.trigger is Trigger.ONCE:
            end = once_end(self._last_end, latest)
        else:
            limit = self._target if self._target is not None else latest
            end = checked_offsets(await self._graph.plan_offsets(self._last_end, limit, self.next_trigger_time()), len(self._inputs),
                                   self._graph, "plan_offsets")
        if end != self._last_end or (self._target is not None and self._sequence and getattr(self._graph, "evicts_on_watermark",
                                     False) and self.watermarks.current_ms > self._last_batch_watermark):  # Spark's no-data batch
            return True
        end_ms = self._clock.now().milliseconds
        self._no_data_mark = max(self._no_data_mark, self._sequence + 1)
        assert self.grid is not None and self.query_id is not None
        await self._progress.idle_trigger(start_ms, end_ms, self.grid.batch_id_of(self.next_trigger_time()), self._inputs,
                                          self._last_end, latest, self.query_id, self.run_id)
        self._notify()
        return False

    # -- waiting --

    def _notify(self) -> None:
        self._changed.notify()

    def changed_event(self) -> anyio.Event:
        """The event set when the tracker next reports something (progress, an idle trigger, a failure)."""
        return self._changed.armed()

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
        batch = self._planned.get(time.milliseconds)
        return None if batch is None else (_render(batch.start), _render(batch.end))

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


def _render(offsets: Sequence[Offset]) -> str:
    return "[" + ", ".join("-" if o is None else o for o in offsets) + "]"
