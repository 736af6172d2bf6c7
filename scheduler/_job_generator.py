"""JobGenerator: turns each tick of the batch timer into a JobSet (Spark's ``JobGenerator``).

One task processes a closed set of messages: ``GenerateJobs`` from the timer and
``BatchFinished`` from the scheduler, each kind in the order posted. Processing them on one task
is what makes batch hooks run one at a time and in batch-time order. Finished batches go ahead
of queued generations, so that commits and cleanup keep up while the timer catches up.
"""

from __future__ import annotations

from collections import deque
from typing import Awaitable, Callable, Mapping, Sequence, Union

import anyio
import anyio.lowlevel
import attrs

from ._clock import Clock, run_with_timeout
from ._input_info import InputInfoTracker, StreamInputInfo
from ._job import Job
from ._job_set import JobSet
from ._logging import library_logger
from ._protocols import BatchHook, BatchPlanner, JobGraph
from ._streams import YIELD_EVERY, Mailbox
from ._time import Duration, Time
from ._timer import RecurringTimer
from ._work import WorkTracker

__all__ = ["BatchFinished", "GenerateJobs", "GeneratorMessage", "JobGenerator"]


@attrs.frozen
class GenerateJobs:
    """Generate and submit the batch for ``time`` (posted by the timer)."""

    time: Time


@attrs.frozen
class BatchFinished:
    """Every job of ``time`` ended and every earlier batch is finalised (posted in time order)."""

    time: Time
    succeeded: bool
    job_set: JobSet | None = attrs.field(default=None, eq=False)


GeneratorMessage = Union[GenerateJobs, BatchFinished]


class JobGenerator:
    """Generates one JobSet per batch interval and runs per-batch hooks in order.

    Owned by a :class:`JobScheduler`, which starts and stops it and hands it what it needs of
    the scheduler: ``submit`` (the scheduler's ``submit_job_set``), ``pending_times`` and the work
    tracker both count in-flight work on.
    """

    def __init__(
        self,
        submit: Callable[[Time, Sequence[Job], Mapping[int, StreamInputInfo], Time | None], Awaitable[None]],
        pending_times: Callable[[], Sequence[Time]],
        work: WorkTracker,
        graph: JobGraph,
        clock: Clock,
        batch_duration: Duration,
        input_infos: InputInfoTracker,
        hooks: Sequence[BatchHook],
        report_error: Callable[[str, BaseException, Time | None], None],
        *,
        planner: BatchPlanner | None = None,
    ) -> None:
        """Wire the generator; nothing runs until :meth:`run`."""
        self._submit = submit
        self._pending_times = pending_times
        self._work = work
        self._graph = graph
        self._clock = clock
        self.batch_duration = batch_duration
        self._input_infos = input_infos
        self._hooks = tuple(hooks)
        self._report_error = report_error
        self._planner = planner
        # The batch times to generate, in order (a tick's time goes in as it is, without a
        # GenerateJobs around it: once per batch), or None: a wake-up for a BatchFinished.
        self._inbox: Mailbox[Time | None] = Mailbox()
        self._finished: deque[BatchFinished] = deque()
        self._deferred: deque[Time] = deque()  # ticks held while a sequential batch runs
        self._held_since: dict[Time, Time] = {}  # when each held tick came: its batch's submission time
        self._dropped_held: list[tuple[Time, Time]] = []  # held ticks an immediate stop dropped, with when they came
        self._in_flight: Time | None = None  # the sequential batch submitted and not finished yet
        self._graph_sequential = False  # without a planner: the graph's own sequential_batches, read at start
        self._queued_generate = 0
        self.timer = RecurringTimer(clock, batch_duration, self._on_tick, "JobGenerator")
        self.zero_time: Time | None = None
        self.last_processed_batch: Time | None = None
        self.discard_new_batches = False
        self.generated = 0
        self._handling: Time | None = None  # the batch whose generation or finishing is under way
        self._scope: anyio.CancelScope | None = None
        self._ended: anyio.Event | None = None
        self._log = library_logger("aiodstream.scheduler", component="JobGenerator")

    # -- posting (synchronous: the timer and the scheduler never wait for the generator) --

    def _on_tick(self, time: Time) -> None:
        # post(GenerateJobs(time)), without the call, the message and the type test: once per batch.
        self._work.started()
        self._queued_generate += 1
        self._inbox.put_nowait(time)

    def post(self, message: GeneratorMessage) -> None:
        """Queue ``message``; counted as in-flight work until it is handled."""
        self._work.started()
        if isinstance(message, BatchFinished):
            # Handled before any queued GenerateJobs (see run_loop); the inbox only gets a wake-up.
            self._finished.append(message)
            self._inbox.put_nowait(None)
        else:
            self._queued_generate += 1
            self._inbox.put_nowait(message.time)

    async def close(self, abandon_after: Duration | None = None) -> None:
        """No more messages: wait until the loop has handled what is queued and ended.

        After ``abandon_after`` on the clock (None: no bound) a generation or hook that has not
        returned (a graph's call into Spark that hangs) is abandoned: the loop is cancelled, and a
        call blocked on a thread is left to finish there. What is still queued is not handled.
        """
        self._inbox.close()
        ended = self._ended
        if ended is None:
            return
        if self._handling is None and not self.queued:  # idle: the loop ends at its next step
            await ended.wait()
            return
        if await run_with_timeout(self._clock, abandon_after, ended.wait):
            return
        self._log.warning("abandoned a batch's generation that did not end", batch_time=_ms(self._handling),
                          waited_ms=_ms(abandon_after), queued=self.queued)
        assert self._scope is not None
        self._scope.cancel()
        await ended.wait()

    def held_ticks(self) -> list[tuple[Time, Time]]:
        """The ticks held behind a sequential batch that still runs, oldest first, each with the time it came.

        Their batches are not generated yet, but waiting (a view lists them as queued, submitted when their tick came);
        those an immediate stop dropped stay, as a dropped batch stays among the scheduler's. May be called from another
        thread: the ticks are copied in one step first.
        """
        held = self._held_since
        return [*self._dropped_held, *((time, since) for time in list(self._deferred) if (since := held.get(time)) is not None)]

    @property
    def queued(self) -> int:
        """Messages waiting to be handled."""
        return self._queued_generate + len(self._finished)

    # -- the loop --

    def start_graph(self, first_batch: Time, zero_time: Time | None = None) -> None:
        """Start the graph with ``zero_time`` (default: one batch before ``first_batch``, a first start).

        A restart passes the zero time restored from the checkpoint, so the grid (and the batch
        ids derived from it) carries on where the previous run left it.
        """
        self.zero_time = first_batch.minus(self.batch_duration) if zero_time is None else zero_time
        self._graph.start(self.zero_time, self._input_infos)
        self._graph_sequential = bool(getattr(self._graph, "sequential_batches", False))  # a simulated graph says it

    async def run_loop(self) -> None:
        """Handle messages until :meth:`close` and the queue is empty (or :meth:`close` abandons them)."""
        self._ended = anyio.Event()
        try:
            with anyio.CancelScope() as self._scope:
                await self._handle_messages()
        finally:
            self._ended.set()

    async def _handle_messages(self) -> None:
        inbox, finished = self._inbox, self._finished
        handled = 0
        while True:
            try:
                message = await inbox.get()
            except anyio.EndOfStream:
                return
            handled += 1
            if handled % YIELD_EVERY == 0:
                await anyio.lowlevel.checkpoint()
            # Finished batches first: while the timer catches up (a restart's down-time batches,
            # a slow generator) a backlog of GenerateJobs would otherwise hold every commit,
            # cleanup and hook back until the whole backlog is generated. Each message is
            # handled in its own try, here rather than in a handler coroutine: two per batch.
            while finished:
                done = finished.popleft()
                if done.time == self._in_flight:
                    self._in_flight = None
                self._handling = done.time
                try:
                    await self._finish_batch(done)
                except Exception as exc:  # a hook or the graph misbehaved: report, keep going
                    self._report_error("Error in job generator", exc, None)
                finally:
                    self._handling = None
                    self._work.done()
            if message is not None:  # a batch time to generate (see post)
                if self._in_flight is not None or self._deferred:
                    # Held: its batch counts as submitted now, as Spark's would be (its scheduling delay shows the wait).
                    self._held_since[message] = self._clock.now()
                self._deferred.append(message)
            # With sequential batches (see BatchPlanner.sequential_batches) a tick waits until
            # the batch before it finished; otherwise each is generated as it comes.
            while self._deferred and self._in_flight is None:
                time = self._deferred.popleft()
                held_since = self._held_since.pop(time, None)
                self._queued_generate -= 1
                self._handling = time
                try:
                    if self.discard_new_batches:
                        if held_since is not None:  # listed as waiting: still listed, and so counted as dropped
                            self._dropped_held.append((time, held_since))
                    else:
                        submitted = await self._generate_jobs(time, held_since)
                        planner = self._planner
                        if submitted and (self._graph_sequential if planner is None else planner.sequential_batches):
                            self._in_flight = time
                except Exception as exc:
                    self._report_error("Error in job generator", exc, None)
                finally:
                    self._handling = None
                    self._work.done()

    async def _generate_jobs(self, time: Time, held_since: Time | None = None) -> bool:
        # Spark's order: allocate received input, generate jobs (this is where input streams
        # compute and report their input infos), collect those infos, submit, then checkpoint.
        # A planner goes first: the batch's input is decided and written to the offsets log
        # before anything reads it, so a crash at any later point re-runs the same input.
        planned = False
        try:
            if self._planner is not None:
                await self._planner.plan_batch(time)
                planned = True
            await self._graph.allocate_input(time)
            jobs = await self._graph.generate_jobs(time)
        except Exception as exc:
            self._report_error(f"Error generating jobs for time {time}", exc, time)
            if planned:  # logged, and failed with no job (Spark reports it and goes on): the planner finishes it as failed
                assert self._planner is not None
                await self._planner.batch_finished(JobSet(time, [], self._clock.now()), False)
            submitted = False
        else:
            infos = self._input_infos.get_info(time)
            self.generated += 1
            await self._submit(time, jobs, infos, held_since)
            submitted = True
        if self._hooks:
            pending = self._pending_times()
            for hook in self._hooks:
                await hook.batch_generated(time, pending)
        return submitted

    async def _finish_batch(self, message: BatchFinished) -> None:
        time, succeeded = message.time, message.succeeded
        if self._planner is not None and message.job_set is not None:
            # First, before cleanup and hooks: the commit marks the batch done for a restart.
            try:
                await self._planner.batch_finished(message.job_set, succeeded)
            except Exception as exc:
                self._report_error(f"Error finishing batch {time}", exc, time)
                succeeded = False
        if succeeded:
            self._graph.clear_metadata(time)
            for hook in self._hooks:
                await hook.batch_completed(time)
            self._input_infos.cleanup(time)
        self.last_processed_batch = time

    def __repr__(self) -> str:
        return f"<JobGenerator [zero {self.zero_time} | queued {self.queued} | last processed {self.last_processed_batch}]>"


def _ms(value: Time | Duration | None) -> int | None:
    return None if value is None else value.milliseconds
