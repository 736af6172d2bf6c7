"""The seams between the scheduler and what it drives: the job graph, batch hooks, and listeners.

``JobGraph`` is Spark's ``DStreamGraph`` seen from the scheduler; ``ReplayableGraph`` is a graph
whose input can be read again by offsets; ``BatchPlanner`` decides and logs each batch's input
before its jobs exist; ``BatchHook`` is where per-batch callbacks attach;
``JobSchedulerListener`` is how the listener bus hears about batches without the scheduler
importing it.
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence, runtime_checkable

import anyio
import anyio.abc
import attrs

from ._input_info import InputInfoTracker
from ._job import Job
from ._job_set import JobSet
from ._state_progress import StateOperatorProgress
from ._time import Time
from ._watermark import BatchWatermarks, EventTimeStats

__all__ = [
    "BatchHook",
    "BatchPlanner",
    "CountingGraph",
    "JobGraph",
    "JobSchedulerListener",
    "Offset",
    "ReceivingGraph",
    "RecoveredBatch",
    "ReplayableGraph",
    "ReplayableInput",
]

Offset = str | None
"""A source's position as its own one-line JSON text (``"5"``, ``{"files":3,...}``), or ``None`` for none yet.

Offsets are opaque to the engine: it stores them in the offsets log (``-`` for ``None``) and
hands them back to the graph; only equality is used (equal text means no new data).
"""


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
class CountingGraph(JobGraph, Protocol):
    """A graph some of whose inputs learn their row counts only by running the batch (files, queued RDDs).

    The scheduler asks once a batch's jobs have all ended, before ``BatchCompleted`` and the
    batch's progress are built; the counts replace what those inputs reported at generation.
    """

    def counted_input_rows(self, time: Time) -> Mapping[int, int]:
        """Input stream id -> rows the batch's jobs read from it, for the inputs counted while running."""
        ...


@runtime_checkable
class ReceivingGraph(JobGraph, Protocol):
    """A graph with receivers: tasks that take in data between batches (sockets, async iterables)."""

    async def run_receivers(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run every receiver until :meth:`stop`; report ready once all have started."""
        ...


@attrs.frozen
class ReplayableInput:
    """One replayable input of a graph: its input stream id (as in its ``StreamInputInfo``) and a description."""

    stream_id: int
    description: str
    reports_latest: bool = True
    """Whether its latest offset, asked before a batch is planned, is what is available (Spark's
    ``reportLatestOffset``); an input that finds its data while planning (a file listing, a receiver's blocks) says no,
    and progress shows its ``latestOffset`` as null, as Spark's file source does."""


@attrs.frozen
class RecoveredBatch:
    """A batch found in the offsets log at a restart: its id, time and input range ``(start, end]``.

    Either one without a commit (run again with the same time and input) or a committed one
    whose range a graph may need to rebuild windows and state over the batches before the restart.
    """

    batch_id: int
    time: Time
    start: tuple[Offset, ...]
    end: tuple[Offset, ...]
    watermark_ms: int = 0
    """The watermark the batch ran with (its offsets entry's ``batchWatermarkMs``)."""
    late_watermark_ms: int = 0
    """The previous batch's watermark: the batch's late-event watermark."""
    state_version: int | None = None
    """The state version the batch loads (it commits the next), when its offsets entry recorded one other than its id."""


@runtime_checkable
class ReplayableGraph(JobGraph, Protocol):
    """A job graph whose every input can be read again, by offset range, after a restart.

    Each batch covers, for every input, the range ``(start, end]`` between two offsets. The
    engine asks the graph where the input ends now (:meth:`latest_offsets`) and where the next
    batch should end (:meth:`plan_offsets`), writes that to the offsets log, and only then tells
    the graph the batch's range (:meth:`set_batch_offsets`) and generates its jobs, which must
    read exactly that range. A restart re-runs a logged batch by calling
    :meth:`set_batch_offsets` with the logged range again.

    The order of :meth:`replayable_inputs` is the order of offset lines in the log; it must stay
    the same across restarts.

    Optionally, ``input_pending()`` says whether the batch just planned without new input saw input
    that a later batch time takes (a DStream file stream's file newer than a late batch): such a
    batch does not count as one that found nothing new (``process_all_available``). Optionally,
    ``output_names()`` names the graph's output operations: an idle trigger's progress names them as
    its sink before any batch of the run has run.
    """

    def replayable_inputs(self) -> Sequence[ReplayableInput]:
        """The graph's inputs in offset-log order; called after :meth:`start`.

        Raises:
            InvalidPipelineError: some input cannot be replayed (a plain function, a socket
                without a write-ahead log).
        """
        ...

    @property
    def is_stateful(self) -> bool:
        """Whether batches carry state to later batches (async progress tracking refuses those)."""
        ...

    def async_unsupported_sinks(self) -> Sequence[str]:
        """Names of the outputs that do not declare support for async progress tracking.

        Async tracking may run a batch again with other input after a failure (at least once);
        Spark allows it only for sinks that tolerate that. An output declares it with a truthy
        ``supports_async_progress_tracking`` attribute.
        """
        ...

    async def latest_offsets(self) -> Sequence[Offset]:
        """Where each input ends now: everything available, ignoring read limits."""
        ...

    async def plan_offsets(self, start: Sequence[Offset], limit: Sequence[Offset], time: Time) -> Sequence[Offset]:
        """Where batch ``time``, starting at ``start``, ends: at most ``limit``, within each input's read limit.

        An input that decides its batches by time (a file stream takes the files modified up
        to the batch time; a receiver takes what it wrote to its log by then) may go past
        ``limit``, which is only a snapshot of :meth:`latest_offsets`; whatever it decides must
        be durable before it returns, since the offsets log entry written next points into it.
        """
        ...

    def set_batch_offsets(self, time: Time, start: Sequence[Offset], end: Sequence[Offset]) -> None:
        """Batch ``time`` covers ``(start, end]`` of each input; ``generate_jobs(time)`` follows."""
        ...

    async def commit_offsets(self, end: Sequence[Offset]) -> None:
        """Every batch up to ``end`` is committed: inputs may release what precedes it."""
        ...

    async def recover(self, zero_time: Time, history: Sequence[RecoveredBatch], first_batch_id: int) -> None:
        """Called once per start, before :meth:`start`: the zero time, the committed batches still logged, the first batch to run.

        A graph opens what it keeps beside the logs here (and may refuse a checkpoint written
        by another program, raising ``CheckpointError``); one whose batches depend on earlier
        ones (windows, state) uses the ranges of the batches before ``first_batch_id`` to rebuild
        them, and refuses a checkpoint whose log no longer covers what it needs. ``history`` is
        empty and ``first_batch_id`` 0 on a first start.
        """
        ...

    def oldest_needed_batch(self) -> int | None:
        """The oldest batch whose offsets entry the graph still needs to rebuild its state after a restart, or ``None``.

        The engine's purge keeps that entry and the one before it (its start), whatever
        ``minBatchesToRetain`` says.
        """
        ...

    async def prepare_commit(self, time: Time, batch_id: int) -> None:
        """Batch ``time`` succeeded and is about to be committed: make its state durable (if any) first."""
        ...

    def watermark_delays(self) -> Sequence[int]:
        """The delay threshold (ms) of each watermarked input, in a stable order; empty without watermarks."""
        ...

    def set_batch_watermarks(self, time: Time, watermarks: BatchWatermarks) -> None:
        """Batch ``time`` runs with these watermarks; called with :meth:`set_batch_offsets`, before ``generate_jobs(time)``."""
        ...

    def set_batch_state_version(self, time: Time, version: int) -> None:
        """Batch ``time``'s stateful operators load state version ``version`` and commit ``version + 1``.

        Called with :meth:`set_batch_offsets`, for a stateful graph, only when the version is not
        the batch's id: a batch of a Once or AvailableNow run takes the id of its time on the grid,
        and those skip (a run half a minute after the last), while state versions count the
        batches that ran. A graph that cannot follow raises ``CheckpointError``.
        """
        ...

    def event_time_stats(self, time: Time) -> Sequence[EventTimeStats | None]:
        """After batch ``time``'s jobs succeeded: what each watermarked input saw (``None``: no rows), then forgotten."""
        ...

    def state_operators(self, time: Time) -> Sequence[StateOperatorProgress]:
        """After batch ``time``'s jobs succeeded: what each stateful operator did (for its progress), then forgotten."""
        ...


@runtime_checkable
class BatchPlanner(Protocol):
    """Decides and logs each batch's input before its jobs exist, and records each batch's end.

    The JobGenerator calls it on its own task, one batch at a time: :meth:`plan_batch` before the
    graph generates a batch, :meth:`batch_finished` in batch-time order once its jobs ended,
    before any :class:`BatchHook`. This is where the offsets write-ahead log and the commits
    log attach (Structured Streaming's ``constructNextBatch`` and ``markMicroBatchEnd``).
    """

    async def plan_batch(self, time: Time) -> None:
        """Prepare batch ``time`` (decide and log its input); raising skips the batch and is reported."""
        ...

    async def batch_finished(self, job_set: JobSet, succeeded: bool) -> None:
        """Every job of ``job_set`` ended and every earlier batch is finalised."""
        ...

    @property
    def sequential_batches(self) -> bool:
        """Whether a batch may be planned only once the batch before it finished (read after every batch).

        Structured Streaming's rule, needed when what a batch runs with depends on how the one
        before it ended (an event-time watermark): the generator holds the timer's ticks meanwhile.
        """
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
