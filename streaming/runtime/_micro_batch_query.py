"""What makes a micro-batch run a query: its tracker, bus reports, trigger-driven runs, death cause (Spark's ``MicroBatchExecution``).

The :class:`StreamingRuntime` holds a tracker when it has a checkpoint, a Once or AvailableNow
trigger, or progress tracking; these are the pieces of that query side that need none of its state.
"""

from __future__ import annotations

import os
import time as _time
import uuid
from typing import Callable, Mapping

import anyio
import anyio.to_thread

from listeners import QueryIdle, QueryProgress, StreamingListenerBus
from scheduler import (
    Checkpoint,
    CheckpointPath,
    Clock,
    Duration,
    InvalidPipelineError,
    JobFailedError,
    JobGraph,
    JobScheduler,
    MicroBatchTracker,
    ProgressKeeper,
    ReplayableGraph,
    RunPlan,
    StreamingQueryException,
    StreamingQueryProgress,
    SystemClock,
    Time,
    Trigger,
    as_checkpoint_path,
    read_query_options,
    task_checkpoint_path,
    uri_scheme,
)

from ._core import RuntimeCore
from ._manager import QueryRegistration

__all__ = ["BusReports", "death_cause", "drive_triggers", "error_class_of", "located", "open_query", "query_tracker",
           "wait_no_new_data"]


class BusReports:
    """The tracker's progress reports, posted to the listener bus as query events."""

    def __init__(self, bus: StreamingListenerBus) -> None:
        """Reports posted to ``bus``."""
        self._bus = bus

    async def on_query_progress(self, progress: StreamingQueryProgress) -> None:
        """Post ``QueryProgress``."""
        await self._bus.post(QueryProgress(progress))

    def wants_progress(self) -> bool:
        """Whether a listener of the bus handles ``QueryProgress``."""
        return self._bus.wants(QueryProgress)

    def progress_keeper(self) -> ProgressKeeper | None:
        """The bus's progress log once a view keeps the reports (it then keeps them for the run), else ``None``."""
        bus = self._bus
        return bus.progress_log() if bus.keeps_progress() else None

    async def on_query_idle(self, query_id: uuid.UUID, run_id: uuid.UUID, timestamp: str) -> None:
        """Post ``QueryIdle``."""
        await self._bus.post(QueryIdle(query_id, run_id, timestamp))


def located(location: str | os.PathLike[str] | CheckpointPath | None) -> str | os.PathLike[str] | CheckpointPath | None:
    """A runtime's checkpoint location: a URI of a scheme other than ``file:`` (``s3://``, ``memory://``) as fsspec
    reaches it, as a task does (it was a local directory named after the URI, the remote store never written).

    Raises:
        ValueError: fsspec has no implementation for the scheme (its package not installed).
    """
    if location is None or isinstance(location, CheckpointPath) or uri_scheme(os.fspath(location)) in ("", "file"):
        return location
    return task_checkpoint_path(location)


def query_tracker(graph: JobGraph, batch_duration: Duration, clock: Clock, bus: StreamingListenerBus, *,
                  checkpoint_location: str | os.PathLike[str] | CheckpointPath | None, trigger: Trigger,
                  options: Mapping[str, object] | None, track_progress: bool, name: str | None,
                  concurrent_jobs: int = 1) -> MicroBatchTracker | None:
    """The tracker of a run that is a query (a checkpoint, a Once or AvailableNow trigger, options or progress tracking), else ``None``.

    ``options`` are Spark-named progress-tracking options, and ``spark.sql.streaming.multipleWatermarkPolicy``
    (``min``, the default, or ``max``): the policy of a fresh checkpoint (a restart keeps the one it recorded).

    Raises:
        InvalidPipelineError: the graph is not replayable, or a bad option (an unknown watermark policy with
            Spark's ``INVALID_CONF_VALUE`` message).
    """
    if checkpoint_location is None and trigger is Trigger.PROCESSING_TIME and not options and not track_progress:
        return None
    if not isinstance(graph, ReplayableGraph):
        raise InvalidPipelineError(
            f"checkpointing, triggers and progress need a graph with replayable input (such as a Pipeline of "
            f"ListSource or DirectorySource sources); {type(graph).__name__} is not one"
        )
    tracking, policies = read_query_options(options)
    policy = policies[-1] if policies else "min"
    if tracking.async_progress_tracking_enabled and concurrent_jobs > 1:
        # A re-run widened over batches the sparse log never held runs under the newest one's time, which a sink that
        # skips times it already wrote skips whole: a batch before it that had not finished lost its records.
        raise InvalidPipelineError(
            f"async progress tracking needs one job at a time (concurrentJobs 1, got {concurrent_jobs}): with several, "
            "a batch logged after one that had not finished could make the restart skip the earlier one's output")
    return MicroBatchTracker(
        graph,
        batch_duration,
        clock=clock,
        checkpoint=None if checkpoint_location is None else Checkpoint(checkpoint_location),
        options=tracking,
        watermark_policy=policy,
        trigger=trigger,
        name=name,
        listener=BusReports(bus),
        # Critical-path statistics at sub-millisecond precision when time is real.
        stopwatch=_time.perf_counter_ns if isinstance(clock, SystemClock) else None,
    )


async def open_query(tracker: MicroBatchTracker, registration: QueryRegistration, name: str | None,
                     checkpoint_location: str | os.PathLike[str] | CheckpointPath | None, default_first: Time) -> RunPlan:
    """Claim the query's name and checkpoint, open its tracker there, then claim its id; where the run starts.

    Raises:
        InvalidPipelineError: another active query has the name.
        ConcurrentCheckpointUpdateError: another query holds the checkpoint.
        StreamingStateError: another active query has the id (a copy of its checkpoint).
        CheckpointError: the checkpoint cannot be resumed.
    """
    registration.claim_name(name)
    claim = None
    if checkpoint_location is not None:
        # Claimed before the checkpoint is touched: opening it clears temp files, which must not
        # happen under a query that is writing there (in this process or another).
        claim = await anyio.to_thread.run_sync(registration.claim_checkpoint, as_checkpoint_path(checkpoint_location),
                                               tracker.run_id)
    plan = await tracker.open(default_first, claim=claim)
    assert tracker.query_id is not None
    registration.claim_id(tracker.query_id)  # a copy of an active query's checkpoint has its id: refused
    return plan


async def drive_triggers(scheduler: JobScheduler, tracker: MicroBatchTracker, trigger: Trigger, plan: RunPlan,
                         failed: Callable[[], bool]) -> JobFailedError | None:
    """Once and AvailableNow: generate batches back to back on consecutive grid times until a check finds no new data.

    The logged batches re-run first. Returns the failure of a check (the caller reports it),
    else ``None``; either way the run is then over and the caller stops it.
    """
    try:
        await scheduler.wait_until_idle()  # the logged batches re-run first
        # Spark's Once re-runs an uncommitted batch and stops: no new data that run.
        if not (trigger is Trigger.ONCE and plan.reschedule):
            while not failed() and await tracker.check_for_new_data():
                scheduler.generate_batch(tracker.next_trigger_time())
                await scheduler.wait_until_idle()
                if trigger is Trigger.ONCE:
                    break
    except Exception as exc:
        error = JobFailedError(f"Error triggering batches: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return error
    return None


def death_cause(tracker: MicroBatchTracker, error: JobFailedError) -> StreamingQueryException:
    """The ``StreamingQueryException`` a failed job or batch terminates the query with, naming the batch's offsets."""
    offsets = None if error.batch_time_ms is None else tracker.rendered_offsets(Time(error.batch_time_ms))
    start, end = offsets if offsets is not None else (None, None)
    return StreamingQueryException(tracker.query_id, tracker.run_id, error, start_offset=start, end_offset=end,
                                   job_id=error.job_id, batch_time_ms=error.batch_time_ms)


# Spark 4.x wraps whatever a foreachBatch function raises in this error class; an output
# operation's job is our foreachBatch.
_OUTPUT_FUNCTION_ERROR = "FOREACH_BATCH_USER_FUNCTION_ERROR"


def error_class_of(error: BaseException | None) -> str | None:
    """Spark's ``errorClassOnException``: Spark's class for a failed output function, else the original's condition."""
    if error is None:
        return None
    if isinstance(error, StreamingQueryException) and error.job_id is not None:
        return _OUTPUT_FUNCTION_ERROR
    original = error.__cause__ if isinstance(error, StreamingQueryException) and error.__cause__ is not None else error
    get_condition = getattr(original, "getCondition", None)
    if callable(get_condition):
        try:
            condition = get_condition()
        except Exception:  # a py4j-backed exception whose JVM is gone
            return None
        return condition if isinstance(condition, str) else None
    return None


async def wait_no_new_data(tracker: MicroBatchTracker, core: RuntimeCore, sequence: int) -> None:
    """``process_all_available``'s wait: until a batch planned after plan number ``sequence`` found nothing new and every
    batch before it finished, or the runtime stopped.

    Both wake-ups are taken before each check: a change between the check and the wait (which
    begins in tasks of its own, after a yield) still wakes it.

    Raises:
        JobFailedError: a job or batch generation failed (also one that failed earlier).
    """
    while True:
        events = (tracker.changed_event(), core.changed_event())
        core.raise_error()
        if tracker.no_new_data_since(sequence) or core.stopped:
            return
        async with anyio.create_task_group() as tg:

            async def one(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            for event in events:
                tg.start_soon(one, event)
