"""EpochCommitter: a continuous query's commit path, in epoch order (Spark's ``ContinuousExecution.commit`` and progress).

It performs the coordinator's actions one at a time: an epoch's offsets entry, then (once every
partition committed) the sink's commit and the commits entry, then the epoch's progress report.
Its inbox is bounded by ``epochBacklogQueueSize``: a sink slower than the epochs fails the query.
"""

from __future__ import annotations

import collections
import threading
import time as _time
import uuid
from typing import Any, Awaitable, Callable, Mapping

import anyio

from listeners import QueryProgress, StreamingListenerBus
from scheduler import (
    Checkpoint,
    Clock,
    CommitMetadata,
    Duration,
    OffsetSeq,
    ProgressRing,
    SinkProgress,
    SourceProgress,
    StreamingError,
    StreamingQueryProgress,
    concurrent_log_update_error,
    format_timestamp,
)

from ._coordinator import EPOCH_QUEUE_EXCEEDED, AddOffsets, BacklogExceeded, CommitEpoch, CoordinatorAction
from ._options import BACKLOG, ContinuousOptions
from ._plan import ContinuousPlan

__all__ = ["EpochCommitter", "IllegalStateError"]


class IllegalStateError(StreamingError, RuntimeError):
    """Spark's ``IllegalStateException``, which stops a continuous query whose epoch backlog overflowed."""


class EpochCommitter:
    """Performs the coordinator's actions in order and keeps what they produced (epochs committed, progress).

    Lifecycle: :meth:`run` in the query's task group; :meth:`enqueue` from the coordinator's
    server; :meth:`close` once nothing more may arrive, then :meth:`wait_done`.

    Attributes:
        last_committed_epoch: the newest epoch whose commit was performed (sink and commits log), -1 before any.
        committed: epochs committed in this run.
        input_rows: rows read by the epochs committed in this run.
        no_new_data_at: the value of ``committed`` when an epoch last committed with no new data (-1: never).
        no_new_data_epoch: the newest epoch that committed with no new data (-1: none).
        commit_ms: per committed epoch (the latest 10,000): ms from its last partition message to its commits entry.
        progress: the recent epochs' progress reports.
    """

    def __init__(self, plan: ContinuousPlan, checkpoint: Checkpoint | None, options: ContinuousOptions, *, clock: Clock,
                 bus: StreamingListenerBus, query_id: uuid.UUID, run_id: uuid.UUID, name: str | None, first_epoch: int,
                 first_offsets: list[str] | None, fail: Callable[[BaseException], None], changed: Callable[[], None],
                 set_status: Callable[[str], None], stopping: Callable[[], bool], log: Any) -> None:
        """A committer for one run, resuming after epoch ``first_epoch - 1`` (whose merged offsets are ``first_offsets``)."""
        self._plan = plan
        self._checkpoint = checkpoint
        self._options = options
        self._clock = clock
        self._bus = bus
        self._query_id = query_id
        self._run_id = run_id
        self._name = name
        self._fail = fail
        self._changed = changed
        self._set_status = set_status
        self._stopping = stopping
        self._log = log
        # Two actions per epoch (its offsets entry, its commit); see enqueue.
        self._send, self._receive = anyio.create_memory_object_stream[CoordinatorAction](2 * options.epoch_backlog_queue_size)
        self._done = anyio.Event()
        self._began = False
        self._discard = False
        # A sink's commit runs on a thread that nothing can interrupt: a stop may abandon it (abandon). Under the
        # gate its thread and the stop decide, once, whether its epoch's commits entry is still written: never after
        # the abandon, and an abandon never lets go of a call past that point (its write of the checkpoint ends, and
        # the wait with it). A thread abandoned in the sink calls ``_on_end`` (the checkpoint's release) as it ends.
        self._gate = threading.Lock()
        self._abandoned = False
        self._in_call = False  # a sink's commit runs on its thread
        self._past_gate = False  # that call decided to write its commits entry
        self._on_end: Callable[[], None] | None = None
        self._sink_call: anyio.CancelScope | None = None
        self._epoch_started: dict[int, int] = {}
        self._epoch_offsets: dict[int, list[str]] = {}
        if first_offsets is not None:
            self._epoch_offsets[first_epoch - 1] = first_offsets
        self._epoch_walcommit: dict[int, int] = {}
        self._complete_at: dict[int, float] = {}  # epoch -> when its last report or commit arrived
        self.last_committed_epoch = first_epoch - 1
        self.committed = 0
        self.input_rows = 0
        self.no_new_data_at = -1
        self.no_new_data_epoch = -1
        self.commit_ms: collections.deque[float] = collections.deque(maxlen=10_000)
        self.progress = ProgressRing(options.num_recent_progress_updates)

    def epoch_started(self, epoch: int, at_ms: int) -> None:
        """Epoch ``epoch`` opened at ``at_ms`` on the query's clock (its progress measures from then)."""
        self._epoch_started[epoch] = at_ms

    # -- the inbox --

    def enqueue(self, actions: list[CoordinatorAction], arrived: float) -> None:
        """Queue the coordinator's actions, in order; never waits.

        The queue holds at most ``epochBacklogQueueSize`` epochs (two actions each): a sink slower
        than the epochs fails the query with Spark's message for the epoch queue rather than
        growing without bound. Waiting for room instead would stall every task's polls behind the
        sink. The coordinator's own backlog failure is not queued: it fails the query at once,
        even while a stuck sink holds the performer.
        """
        send = self._send
        for action in actions:
            if isinstance(action, BacklogExceeded):  # at once: not behind a sink that may be what is stuck
                self._fail(IllegalStateError(action.message))
                return
            if isinstance(action, CommitEpoch):  # the epoch became complete now
                self._complete_at[action.epoch] = arrived
            try:
                send.send_nowait(action)
            except anyio.WouldBlock:  # the failure stops the coordinator's writes: nothing more is queued
                queued = send.statistics().current_buffer_used
                self._fail(IllegalStateError(
                    f"{EPOCH_QUEUE_EXCEEDED}: {queued} actions of complete epochs wait for the sink's commit and the "
                    f"checkpoint's writes ({BACKLOG} is {self._options.epoch_backlog_queue_size} epochs); make the sink "
                    "keep up with the trigger interval, lengthen the interval, or raise the setting"))
                return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the run is tearing down: nothing more is performed

    @property
    def idle(self) -> bool:
        """Whether nothing is queued."""
        return self._send.statistics().current_buffer_used == 0

    def discard(self) -> None:
        """Perform nothing more (a failure, an immediate stop): what is not committed stays so."""
        self._discard = True

    def close(self) -> None:
        """Accept nothing more; :meth:`run` ends once it went through what is queued (if it never began, it is done)."""
        self._send.close()
        if not self._began:  # a start that failed before its task ran (its group closed or cancelled first)
            self._done.set()

    async def wait_done(self) -> None:
        """Wait until :meth:`run` has ended."""
        await self._done.wait()

    async def wait_last_epoch(self, final: int, tasks_ended: Callable[[], bool], changed: Callable[[], Awaitable[None]],
                              failed: Callable[[], bool]) -> None:
        """A graceful stop's wait: until the epoch before ``final`` (the stop's own) is committed, or the tasks ended and
        nothing they sent is left to perform; or the query failed. ``changed`` waits for the next change."""
        while self.last_committed_epoch < final - 1 and not failed():
            if tasks_ended() and self.idle:
                return
            await changed()

    async def finish(self, abandon_after: Duration) -> None:
        """:meth:`close`, then wait for :meth:`run` to end; a sink's commit still in progress after ``abandon_after``
        (real time) is abandoned (:meth:`abandon`), with a warning."""
        self.close()
        with anyio.move_on_after(abandon_after.seconds):
            await self._done.wait()
        if not self._done.is_set() and self.abandon():
            self._log.warning("the sink's commit did not end in time; abandoned, its epoch stays uncommitted and the "
                              "checkpoint stays claimed until its thread ends")
        await self._done.wait()

    def abandon(self) -> bool:
        """Perform nothing more and stop waiting for a sink's commit in progress (its thread runs on, unwaited).

        Its epoch's commits entry is then never written: a restart commits the epoch again. A call that already
        decided to write it is not abandoned (its write ends, then :meth:`run` does). Returns whether a sink's
        commit was abandoned.
        """
        self._discard = True
        with self._gate:
            self._abandoned = True
            past_gate = self._past_gate
        call = self._sink_call
        if past_gate or call is None:
            return False
        call.cancel()
        return True

    def release_when_abandoned_call_ends(self, release: Callable[[], None]) -> bool:
        """If an abandoned sink's commit still runs on its thread, that thread calls ``release`` as it ends (blocking,
        there) and this returns True; else False, and the caller releases.

        The checkpoint's claim goes this way: until the abandoned commit ends, a restart (in this process or
        another) is refused, so the commit cannot write into a sink the next run already reads or clears.
        """
        with self._gate:
            if self._in_call and self._abandoned:
                self._on_end = release
                return True
        return False

    def _pass_gate(self) -> bool:
        # On the sink's thread, after its commit: whether its epoch's commits entry is still to be written.
        with self._gate:
            self._past_gate = not self._abandoned
            return self._past_gate

    # -- performing, in order --

    async def run(self) -> None:
        """Perform the queued actions in order until :meth:`close`; a failed action fails the query."""
        self._began = True
        try:
            async with self._receive as receive:
                async for action in receive:
                    # After a failure or an immediate stop nothing more is written: an epoch queued
                    # behind a failed one must not commit (a restart would skip the failed one).
                    if self._discard:
                        continue
                    try:
                        await self._perform(action)
                    except Exception as exc:
                        self._fail(exc)
        finally:
            self._done.set()

    async def _perform(self, action: CoordinatorAction) -> None:
        if isinstance(action, AddOffsets):
            merged = self._merge(action.offsets)
            started = _time.perf_counter()
            if self._checkpoint is not None:
                checkpoint = self._checkpoint
                if not await anyio.to_thread.run_sync(checkpoint.offsets.add, action.epoch, OffsetSeq(tuple(merged))):
                    # The start dropped every entry after the last commit: another writer made this one.
                    raise concurrent_log_update_error(action.epoch, checkpoint.offsets.path_of(action.epoch))
            self._epoch_walcommit[action.epoch] = round((_time.perf_counter() - started) * 1000)
            self._epoch_offsets[action.epoch] = merged
            return
        assert isinstance(action, CommitEpoch)
        await self._commit(action)

    def _merge(self, offsets: Mapping[int, Any]) -> list[str]:
        merged = []
        partition = 0
        for source in self._plan.sources:
            merged.append(source.merge_offsets([offsets[p] for p in range(partition, partition + source.num_partitions)]))
            partition += source.num_partitions
        return merged

    async def _commit(self, action: CommitEpoch) -> None:
        epoch = action.epoch
        plan = self._plan
        self._set_status(f"Committing epoch {epoch}")
        arrival = self._complete_at.pop(epoch, None)
        checkpoint, retain = self._checkpoint, self._options.min_batches_to_retain

        def commit() -> tuple[float, float] | None:
            with self._gate:
                if self._abandoned:
                    return None  # abandoned before its thread took it: nothing is written
                self._in_call = True
                self._past_gate = False
            try:
                started = _time.perf_counter()
                plan.sink.commit_epoch(epoch, action.messages)  # the sink first: a crash between keeps the data
                sink_done = _time.perf_counter()
                if not self._pass_gate():
                    return None  # the stop went on without this commit: the epoch stays uncommitted
                if checkpoint is not None:
                    if not checkpoint.commits.add(epoch, CommitMetadata(0)):
                        raise concurrent_log_update_error(epoch, checkpoint.commits.path_of(epoch))
                    if retain <= epoch:
                        threshold = epoch + 1 - retain
                        checkpoint.offsets.purge(threshold)
                        checkpoint.commits.purge(threshold)
                return (sink_done - started) * 1000, (_time.perf_counter() - sink_done) * 1000
            finally:
                with self._gate:
                    self._in_call = False
                    on_end, self._on_end = self._on_end, None
                if on_end is not None:
                    try:
                        on_end()
                    except Exception:  # nobody waits for this thread: the failure is logged here
                        self._log.exception("releasing the checkpoint after an abandoned sink commit failed")

        # Shielded, as a thread call that waits for its thread is: only abandon() ends the wait early.
        timed = None
        with anyio.CancelScope(shield=True) as self._sink_call:
            timed = await anyio.to_thread.run_sync(commit, abandon_on_cancel=True)
        self._sink_call = None
        if timed is None:
            return
        sink_ms, log_ms = timed
        self.commit_ms.append((_time.perf_counter() - arrival) * 1000 if arrival is not None else sink_ms + log_ms)
        self.committed += 1
        self.input_rows += sum(action.rows.values())
        self.last_committed_epoch = epoch
        if self._epoch_offsets.get(epoch - 1) == self._epoch_offsets.get(epoch):  # Spark's noNewData
            self.no_new_data_at = self.committed
            self.no_new_data_epoch = epoch
        await self._report(action, round(sink_ms), round(log_ms))
        if not self._stopping():
            self._set_status("Running")
        self._changed()

    async def _report(self, action: CommitEpoch, sink_ms: int, log_ms: int) -> None:
        epoch = action.epoch
        end_ms = self._clock.now().milliseconds
        started = self._epoch_started.pop(epoch, end_ms)
        length_s = max(1, end_ms - started) / 1000
        sources = []
        partition = 0
        start_offsets = self._epoch_offsets.get(epoch - 1)
        end_offsets = self._epoch_offsets.get(epoch, [])
        for index, source in enumerate(self._plan.sources):
            rows = sum(action.rows.get(p, 0) for p in range(partition, partition + source.num_partitions))
            partition += source.num_partitions
            end = end_offsets[index] if index < len(end_offsets) else None
            sources.append(SourceProgress(repr(source), None if start_offsets is None else start_offsets[index], end, end,
                                          rows, rows / length_s, rows / length_s))
        progress = StreamingQueryProgress(
            self._query_id, self._run_id, self._name, format_timestamp(started), epoch, end_ms - started,
            {"walCommit": self._epoch_walcommit.pop(epoch, 0), "addBatch": sink_ms, "commitOffsets": log_ms,
             "triggerExecution": end_ms - started},
            tuple(sources), SinkProgress(self._plan.sink.description(), -1))
        for old in [e for e in self._epoch_offsets if e < epoch - 1]:
            del self._epoch_offsets[old]
        self.progress.add(progress)
        self._log.info("epoch committed", epoch=epoch, rows=progress.num_input_rows, commit_ms=round(self.commit_ms[-1], 3))
        await self._bus.post(QueryProgress(progress))
