"""JobScheduler: runs each batch's jobs on a bounded executor (Spark's ``JobScheduler``/``JobHandler``).

Jobs start in submission order on ``concurrent_jobs`` worker tasks. Job start and completion are
handled in one place (:meth:`JobScheduler._work`, :meth:`JobScheduler._finish_job`); because the
event loop is single-threaded those handlers are atomic, which is what Spark's scheduler event
loop exists to guarantee.
"""

from __future__ import annotations

import contextvars
import logging
from collections import deque
from typing import Callable, Mapping, Sequence

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import attrs

from ._clock import Clock, run_with_timeout
from ._errors import InvalidDurationError, JobFailedError, StreamingStateError
from ._input_info import InputInfoTracker, StreamInputInfo
from ._job import Job
from ._job_generator import BatchFinished, GenerateJobs, JobGenerator
from ._job_set import JobSet
from ._logging import library_logger
from ._protocols import BatchHook, BatchPlanner, CountingGraph, JobGraph, JobSchedulerListener, ReceivingGraph
from ._streams import YIELD_EVERY, Mailbox
from ._time import Duration, Milliseconds, Minutes, Time
from ._work import WorkTracker

RUNNING_JOB_GRACE: Duration = Minutes(60)
"""How long a graceful stop waits for a running job to end: Spark's graceful ``JobScheduler.stop`` gives the jobs it
submitted an hour (``jobExecutor.awaitTermination(1, HOURS)``), whatever ``spark.streaming.gracefulStopTimeout`` says."""

__all__ = ["JobAbandonedError", "JobScheduler", "JobSchedulerStatistics"]


_jobs_of: contextvars.ContextVar[JobScheduler | None] = contextvars.ContextVar("aiodstream_jobs_of", default=None)
# The scheduler whose worker runs the current code: set once in each worker task (its jobs, async or on a
# thread, see it: anyio hands a thread the task's context), never per job.


class JobAbandonedError(JobFailedError):
    """Recorded as the failure of a job that an immediate stop abandoned while it ran."""


@attrs.frozen
class JobSchedulerStatistics:
    """A snapshot of the scheduler's load, for ``repr``, tests and monitoring."""

    jobs_running: int
    jobs_queued: int
    batches_pending: int
    batches_submitted: int
    batches_completed: int
    batches_failed: int
    jobs_completed: int
    jobs_failed: int
    workers_started: int = 0
    """Worker tasks started in this run: they start as jobs find none free, at most ``concurrent_jobs``."""


ErrorReporter = Callable[[JobFailedError], None]


_TIMED_OUT = "timed out while stopping the job generator"
_REFUSED = "graceful stop ends without draining: new work was refused"


class JobScheduler:
    """Generates batches on the batch grid and runs their jobs, at most ``concurrent_jobs`` at once.

    Start it with ``first_batch = await task_group.start(scheduler.run)``; stop it with
    :meth:`stop`. Batch hooks (``BatchHook.batch_completed``) run in batch-time order even when a
    later batch completes first: a finished batch waits for every earlier one before it is
    finalised. A batch with a failed job is finalised as failed: it keeps its place in
    :meth:`pending_times` (so a checkpoint re-runs it) and its hooks are not called.
    """

    def __init__(
        self,
        graph: JobGraph,
        batch_duration: Duration,
        *,
        clock: Clock,
        listener: JobSchedulerListener | None = None,
        concurrent_jobs: int = 1,
        hooks: Sequence[BatchHook] = (),
        report_error: ErrorReporter | None = None,
        planner: BatchPlanner | None = None,
    ) -> None:
        """Wire a scheduler; nothing runs until :meth:`run`.

        Args:
            graph: the pipeline that generates jobs per batch.
            batch_duration: the batch interval.
            clock: the clock every time is read from.
            listener: told about every batch and job transition (the listener bus).
            concurrent_jobs: how many jobs may run at once (Spark's ``spark.streaming.concurrentJobs``).
            hooks: per-batch hooks (checkpointing, source commits).
            report_error: receives every job and generation failure (the context's waiter).
            planner: decides and logs each batch's input before its jobs are generated, and
                commits it once they succeed (the offsets and commits logs).
        """
        if not isinstance(batch_duration, Duration) or batch_duration.milliseconds <= 0:
            raise InvalidDurationError(
                f"batch duration must be a positive multiple of 1 ms, got {batch_duration}; pass e.g. Seconds(1)"
            )
        if type(concurrent_jobs) is not int or concurrent_jobs < 1:
            raise ValueError(f"concurrent_jobs must be a positive int, got {concurrent_jobs!r}")
        self.batch_duration = batch_duration
        self.concurrent_jobs = concurrent_jobs
        self._clock = clock
        self._listener = listener
        self._report = report_error
        self._counting: CountingGraph | None = graph if isinstance(graph, CountingGraph) else None
        self.input_info_tracker = InputInfoTracker()
        # Work that has been posted but not finished: generator messages and unfinalised batches.
        self._tracker = WorkTracker()
        self._graph = graph
        self.generator = JobGenerator(
            self.submit_job_set, self.pending_times, self._tracker, graph, clock, batch_duration, self.input_info_tracker,
            hooks, self._report_error, planner=planner,
        )
        # Submitted, not finalised, in submission (= time) order. A deque, not a dict: only its front
        # is taken, and a dict's iteration walks past every slot its deleted front entries left.
        self._job_sets: deque[JobSet] = deque()
        self._failed_times: list[Time] = []
        # Each job travels with its JobSet, so that starting and finishing it needs no lookup.
        self._jobs: Mailbox[tuple[Job, JobSet]] = Mailbox()
        self._thread_limiter = anyio.CapacityLimiter(concurrent_jobs)
        self._running: dict[Job, anyio.CancelScope] = {}
        self._cancel_hooks_called: set[Job] = set()
        self._discard_jobs = False
        self._running_changed: anyio.Event | None = None
        self._started = False
        self._finished: anyio.Event | None = None
        self._workers_ended: anyio.Event | None = None
        # The workers' group while it runs, how many more it may start (Spark's pool starts threads as jobs come), and
        # how many were started that have not yet begun taking jobs.
        self._workers: anyio.abc.TaskGroup | None = None
        self._spare_workers = concurrent_jobs
        self._starting_workers = 0
        self._stats = {"submitted": 0, "completed": 0, "failed": 0, "jobs_completed": 0, "jobs_failed": 0}
        self._log = library_logger("aiodstream.scheduler", component="JobScheduler")

    # -- lifecycle --

    async def run(
        self,
        start: Time | None = None,
        *,
        zero_time: Time | None = None,
        reschedule: Sequence[Time] = (),
        timer: bool = True,
        task_status: anyio.abc.TaskStatus[Time] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the generator, the timer and the workers until :meth:`stop` completes.

        Reports the first batch time to ``task_group.start``.

        Args:
            start: the first batch time the timer fires (default: the next multiple of the batch
                duration after now). A start in the past makes the timer fire every grid time
                from there up to now back to back: a restart's down-time batches.
            zero_time: the grid's zero time (default: one batch before ``start``); a restart
                passes the one restored from its checkpoint.
            reschedule: batch times generated before the timer's first tick, in this order
                (a restart's pending batches, re-run with their logged input).
            timer: without a timer, batches are generated only by :meth:`generate_batch`
                (trigger-driven runs: once, available-now).
        """
        if self._started:
            raise StreamingStateError("JobScheduler has already been started")
        self._started = True
        self._finished = anyio.Event()
        self._workers_ended = anyio.Event()
        try:
            first = self.generator.timer.start_time() if start is None else start
            self.generator.start_graph(first, zero_time)
            # Queued before the timer starts, so they are generated before any new batch.
            for time in reschedule:
                self.generator.post(GenerateJobs(time))
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._run_workers, self._workers_ended)
                tg.start_soon(self.generator.run_loop)
                graph = self._graph
                if isinstance(graph, ReceivingGraph):
                    await tg.start(graph.run_receivers)
                if timer:
                    await tg.start(self.generator.timer.run, first)
                self._log.info("job scheduler started", first_batch=first.milliseconds, rescheduled=len(reschedule),
                               batch_ms=self.batch_duration.milliseconds, concurrent_jobs=self.concurrent_jobs)
                task_status.started(first)
        finally:
            self._finished.set()

    async def stop(self, *, graceful: bool, timeout: Duration | None = None, abandon_after: Duration = Milliseconds(2000)) -> bool:
        """Stop generating batches and end :meth:`run`; return False if a graceful stop timed out.

        Graceful: the tick the timer is waiting for still fires, then every generated batch is
        run to completion and finalised (hooks included). ``timeout`` bounds the time without
        progress, not the whole drain: a stop behind late batches drains them as long as jobs
        keep finishing, and gives up once ``timeout`` passes with no job finished and no batch
        generated or finalised while no job runs (a running job gets :data:`RUNNING_JOB_GRACE`,
        Spark's hour); what is left then is abandoned as in an immediate stop.

        Immediate: no new batch is generated; queued jobs are dropped; running jobs get
        ``abandon_after`` to finish, then each one's ``cancel`` hook is called (Spark's job group
        is cancelled) and its waiter is cancelled. A worker thread running a blocking PySpark
        call cannot itself be cancelled: it is abandoned and finishes in the background.
        Batches that finish during the grace period are still finalised.
        """
        if not self._started or self._finished is None:
            return True
        if self._finished.is_set():
            return True
        drained = True
        # Input first, as Spark stops its receivers first: what was received so far is still
        # allocated to the last batch.
        graph_stopped = False
        try:
            await self._graph.stop()
            graph_stopped = True
        except Exception as exc:
            self._report_error("Error stopping input streams", exc, None)
        if graceful:
            self._log.info("stopping job scheduler gracefully", timeout_ms=None if timeout is None else timeout.milliseconds)
            await self.generator.timer.stop(one_more_tick=True)
            drained = await self._drain(timeout)
            if not drained:  # timed out, or new work was refused (a failed query, an immediate stop asked for meanwhile)
                log, said = (self._log.info, _REFUSED) if self._discard_jobs else (self._log.warning, _TIMED_OUT)
                log(said, timeout_ms=timeout.milliseconds if timeout else None, pending=[t.milliseconds for t in self.pending_times()])
        else:
            self._log.info("stopping job scheduler immediately")
            await self.generator.timer.stop(one_more_tick=False)
        if not drained or not graceful:
            self.refuse_new_work()
            if self._running:
                finished = await run_with_timeout(self._clock, abandon_after, self._wait_running)
                if not finished:
                    self.abandon_running()
        self._jobs.close()
        await self._wait_running()
        assert self._workers_ended is not None
        await self._workers_ended.wait()  # none is between taking a job and finishing it (a listener's post held it)
        # A generation that hangs (a graph's Spark call) gets as long as a running job, then is abandoned.
        await self.generator.close(abandon_after if not drained or not graceful else None)
        await self._finished.wait()
        self._log.info("job scheduler stopped", pending=[t.milliseconds for t in self.pending_times()],
                       input_stopped=graph_stopped)
        return drained

    def refuse_new_work(self) -> None:
        """Start no queued job and generate no batch from now on (a failed query); running jobs go on until :meth:`stop`."""
        self.generator.discard_new_batches = True
        self._discard_jobs = True
        self._tracker.advanced()  # a graceful stop's drain waiting for batches that will never run ends (see _drain)

    def abandon_running(self) -> None:
        """Cancel every running job now (its ``cancel`` hook, then its waiter)."""
        for job, scope in list(self._running.items()):
            self._cancel_job(job)
            scope.cancel()

    def _cancel_job(self, job: Job) -> None:
        if job.cancel is None or job in self._cancel_hooks_called:
            return
        self._cancel_hooks_called.add(job)
        try:
            job.cancel()
        except Exception:  # cancelling is best effort; the job is abandoned regardless
            self._log.exception("job cancel hook failed", job=str(job))

    def generate_batch(self, time: Time) -> None:
        """Generate the batch for ``time`` now, outside the timer (trigger-driven runs).

        Batches are generated in the order asked; call it only while :meth:`run` is running.
        """
        if self._finished is None or self._finished.is_set():
            raise StreamingStateError("generate_batch() needs a running JobScheduler")
        self.generator.post(GenerateJobs(time))

    # -- submission --

    async def submit_job_set(self, time: Time, jobs: Sequence[Job], infos: Mapping[int, StreamInputInfo],
                             submitted_at: Time | None = None) -> None:
        """Track the batch and queue its jobs (Spark's ``submitJobSet``). ``submitted_at``: its submission time, when
        the generator held its tick (sequential batches) and generates it only now."""
        if self._discard_jobs:
            # An immediate stop began while this batch was being generated: it is not run.
            self._log.info("batch not submitted: the scheduler is stopping immediately", batch_time=time.milliseconds)
            return
        job_set = JobSet(time, jobs, self._clock.now() if submitted_at is None else submitted_at, infos)
        self._tracker.started()
        self._job_sets.append(job_set)
        if not job_set.jobs:
            # Spark posts nothing for an empty batch and never finalises it; we post nothing but
            # still finalise it in order, so hooks (commits, cleanup) see every batch.
            self._log.debug("no jobs added", batch_time=time.milliseconds)
            self._release_finished_batches()
            return
        self._stats["submitted"] += 1
        if self._listener is not None:
            await self._listener.on_batch_submitted(job_set)
            if self._discard_jobs:  # a BLOCK post held past an immediate stop (mypy keeps the narrowing over the await)
                return  # type: ignore[unreachable]
        send = self._jobs.put_nowait
        for job in job_set.jobs:
            send((job, job_set))
        if self._spare_workers:
            self._add_workers()

    def running_batches(self) -> list[JobSet]:
        """The batches submitted and not completed (queued or processing), oldest first, as they are now.

        For a view that shows them when it is asked (the web UI): reading the scheduler's own
        batches then costs nothing per batch. A batch an immediate stop dropped stays. May be called
        from another thread: the batches are copied in one step first. Ticks the generator holds behind a sequential
        batch come last, as batches with no job yet, submitted when their tick came (``JobGenerator.held_ticks``).
        """
        running = [job_set for job_set in list(self._job_sets) if job_set.jobs and not job_set.has_completed]
        running.extend(JobSet(time, (), since) for time, since in self.generator.held_ticks())
        return running

    def pending_times(self) -> list[Time]:
        """Batches submitted but not successfully finished: unfinished ones and failed ones."""
        return sorted([*self._failed_times, *(job_set.time for job_set in self._job_sets)])

    # -- execution: job start and completion are handled here and nowhere else --

    def in_own_job(self) -> bool:
        """Whether the calling code is one of this scheduler's jobs (its task, or the thread it runs on).

        A stop made there would wait for that very job: the caller must not wait for it.
        """
        return _jobs_of.get() is self

    async def _run_workers(self, ended: anyio.Event) -> None:
        # The workers in a group of their own: a stop waits for them all to end (see stop) before it closes the generator.
        try:
            async with anyio.create_task_group() as workers:
                self._workers, self._spare_workers, self._starting_workers = workers, self.concurrent_jobs - 1, 1
                workers.start_soon(self._worker, True)
                self._add_workers()  # for jobs submitted before the group ran (a restart's re-run batches)
        finally:
            self._workers = None
            ended.set()

    def _add_workers(self) -> None:
        # A worker for each queued job none will take, up to concurrent_jobs: a huge one costs what its jobs need at once.
        wanted = min(self._jobs.unclaimed - self._starting_workers, self._spare_workers)
        if wanted > 0 and self._workers is not None:
            self._spare_workers -= wanted
            self._starting_workers += wanted
            for _ in range(wanted):
                self._workers.start_soon(self._worker, True)

    async def _worker(self, added: bool = False) -> None:
        # One cancel scope per worker, not per job: entering and leaving an anyio cancel scope
        # costs about as much as the rest of a no-op job. Abandoning a running job cancels its
        # worker's scope; the worker then finalises that job and carries on in a new scope.
        _jobs_of.set(self)  # this task's context: the jobs it runs, and the threads it runs them on
        if added:
            self._starting_workers -= 1
        while True:
            running: list[tuple[Job, JobSet]] = []
            with anyio.CancelScope() as scope:
                await self._work(scope, running)
                return
            if running:  # the job was abandoned by an immediate stop
                await self._abandoned(*running[0])

    async def _abandoned(self, job: Job, job_set: JobSet) -> None:
        job.failure = JobAbandonedError(f"job {job.id} was abandoned by an immediate stop", job_id=job.id,
                                        batch_time_ms=job.time.milliseconds)
        await self._finish_job(job, job_set)

    async def _work(self, scope: anyio.CancelScope, running: list[tuple[Job, JobSet]]) -> None:
        jobs = self._jobs
        clock = self._clock
        listener = self._listener
        handled = 0
        while True:
            try:
                entry = await jobs.get()
            except anyio.EndOfStream:
                return
            job, job_set = entry
            handled += 1
            if handled % YIELD_EVERY == 0:
                await anyio.lowlevel.checkpoint()
            if self._discard_jobs:
                self._log.debug("dropping queued job on immediate stop", job=str(job))
                continue
            # The job starts (inline: this loop is a simulation's hot path). BatchStarted is
            # posted before the job's own start time is set, as in Spark, so in that event every
            # output operation is still "not started".
            now = clock.now()
            if job_set.processing_start is None:
                job_set.processing_start = now
                if listener is not None:
                    await listener.on_batch_started(job_set)
            job.start_time = now
            if listener is not None:
                await listener.on_job_started(job, job_set)
                # An immediate stop began while a listener's post held the start (BLOCK). (mypy keeps the flag's
                # narrowing from the check above across the await; reading it, not calling, costs no call per job.)
                if self._discard_jobs:
                    await self._abandoned(job, job_set)  # type: ignore[unreachable]
                    continue
            running.append(entry)
            self._running[job] = scope
            try:
                if job.is_async:
                    await job.func()
                else:
                    result = await anyio.to_thread.run_sync(job.func, limiter=self._thread_limiter, abandon_on_cancel=True)
                    if hasattr(result, "__await__"):
                        await result  # a plain function that returned a coroutine
            except Exception as exc:
                job.failure = exc
            except anyio.get_cancelled_exc_class():
                # Cancelled from outside (the host is shutting down): the work behind the job
                # (a Spark job in a thread) does not stop with its waiter, so cancel it too.
                self._cancel_job(job)
                raise
            finally:
                # Also on cancellation (an abandon, or the host cancelling everything): a stop
                # waits for this map to empty.
                del self._running[job]
                self._cancel_hooks_called.discard(job)
                if self._running_changed is not None:
                    self._wake_running_waiters()
            running.clear()
            await self._finish_job(job, job_set)

    async def _finish_job(self, job: Job, job_set: JobSet) -> None:
        job.release()  # breaks the cycles a job's closures make with it (see Job.release)
        listener = self._listener
        completed = job_set.handle_job_completion(job, self._clock.now())
        self._tracker.advanced()  # progress, for a graceful stop's timeout
        if job.failure is not None:
            self._stats["jobs_failed"] += 1
        else:
            self._stats["jobs_completed"] += 1
        if listener is not None:
            await listener.on_job_completed(job, job_set)
        if completed:
            if self._counting is not None:
                _count_input_rows(self._counting, job_set)
            self._on_batch_completed(job_set)
            if listener is not None:
                await listener.on_batch_completed(job_set)
        if job.failure is not None and not isinstance(job.failure, JobAbandonedError):
            self._report_error(f"Error running job {job.id}", job.failure, job.time, job.id)

    def _on_batch_completed(self, job_set: JobSet) -> None:
        failed = job_set.failed
        self._stats["failed" if failed else "completed"] += 1
        if self._log.is_enabled_for(logging.INFO):  # its fields are computed only for a host that logs them
            # Completed, so both ends are set; plain ints keep this hot path cheap.
            submitted = job_set.submission_time.milliseconds
            start = job_set.processing_start.milliseconds if job_set.processing_start else submitted
            end = job_set.processing_end.milliseconds if job_set.processing_end else start
            # The one canonical line per completed batch.
            self._log.info(
                "batch completed",
                batch_time=job_set.time.milliseconds,
                scheduling_delay_ms=start - submitted,
                processing_delay_ms=end - start,
                total_delay_ms=end - submitted,
                num_records=job_set.num_records,
                jobs=len(job_set.jobs),
                failed=failed,
            )
        self._release_finished_batches()

    def _release_finished_batches(self) -> None:
        # Finalise completed batches strictly in time order: a batch that finished early waits
        # here until every earlier batch has finished, so BatchHook.batch_completed (commits,
        # checkpoints, cleanup) never sees batch N+1 before batch N.
        sets = self._job_sets
        while sets:
            job_set = sets[0]
            if not job_set.has_completed:
                return
            sets.popleft()
            time = job_set.time
            succeeded = not job_set.failed
            if not succeeded:
                self._failed_times.append(time)
            self.generator.post(BatchFinished(time, succeeded, job_set))
            self._tracker.done()

    # -- errors --

    def _report_error(self, message: str, exc: BaseException, time: Time | None, job_id: str | None = None) -> None:
        self._log.error(message, exc_info=exc, batch_time=None if time is None else time.milliseconds)
        if self._report is not None:
            err = JobFailedError(f"{message}: {type(exc).__name__}: {exc}", job_id=job_id,
                                 batch_time_ms=None if time is None else time.milliseconds)
            err.__cause__ = exc
            self._report(err)

    # -- waiting for quiescence --

    async def _drain(self, timeout: Duration | None) -> bool:
        """Wait until idle; False once ``timeout`` (:data:`RUNNING_JOB_GRACE` while a job runs) passes without progress.

        The deadline moves with progress: late batches that keep finishing are drained whatever their number.
        """
        tracker = self._tracker
        while tracker.in_flight:
            wait = max(timeout, RUNNING_JOB_GRACE) if timeout is not None and self._running else timeout
            if self._discard_jobs or not await run_with_timeout(self._clock, wait, tracker.wait_progress):
                return False  # (refused work: what is queued never runs, so the stop goes on as an immediate one)
        return True

    async def wait_until_idle(self) -> None:
        """Wait until every tick that is due has been generated, run and finalised.

        A tick is due when the clock has reached it; the timer may not have run yet (a manual
        clock's ``advance`` only wakes it), so this yields until it has, then waits for the work.
        """
        timer = self.generator.timer
        while True:
            nxt = timer.next_tick
            if nxt is not None and nxt <= self._clock.now():
                await anyio.lowlevel.checkpoint()  # the timer is woken; let it fire
                continue
            if not self._tracker.in_flight:
                return
            await self._tracker.wait_idle()  # every posted message handled, every submitted batch finalised

    def _wake_running_waiters(self) -> None:
        if self._running_changed is not None:
            self._running_changed.set()
            self._running_changed = None

    async def _wait_running(self) -> None:
        while self._running:
            if self._running_changed is None:
                self._running_changed = anyio.Event()
            await self._running_changed.wait()

    # -- introspection --

    def statistics(self) -> JobSchedulerStatistics:
        """A snapshot of running and queued work and of batch and job counts."""
        s = self._stats
        return JobSchedulerStatistics(
            jobs_running=len(self._running),
            jobs_queued=len(self._jobs),
            batches_pending=len(self._job_sets),
            batches_submitted=s["submitted"],
            batches_completed=s["completed"],
            batches_failed=s["failed"],
            jobs_completed=s["jobs_completed"],
            jobs_failed=s["jobs_failed"],
            workers_started=self.concurrent_jobs - self._spare_workers,
        )

    def __repr__(self) -> str:
        st = self.statistics()
        return (
            f"<JobScheduler [jobs: {st.jobs_running} running, {st.jobs_queued} queued | "
            f"batches: {st.batches_pending} pending, {st.batches_completed} completed, {st.batches_failed} failed]>"
        )


def _count_input_rows(graph: CountingGraph, job_set: JobSet) -> None:
    # Inputs that learn their rows by running (files, queued RDDs) replace what they
    # reported at generation, before the batch's BatchCompleted and progress are built.
    counted = graph.counted_input_rows(job_set.time)
    if not counted:
        return
    infos = dict(job_set.input_infos)
    for stream_id, rows in counted.items():
        old = infos.get(stream_id)
        infos[stream_id] = StreamInputInfo(stream_id, rows) if old is None else attrs.evolve(old, num_records=rows)
    job_set.input_infos = infos
