"""SimulatedCluster: Spark's task scheduler on virtual time, the slots every simulated job shares.

Spark's counterpart is ``TaskSchedulerImpl`` with its ``Pool`` (FIFO or FAIR) over the task-set
managers of the running stages. Here the slots, the pending tasks and the running ones are plain
bookkeeping driven by timers on the :class:`~scheduler.VirtualClock` (one timer for the next task
to finish), so a job with many tasks costs no task of its own while it runs: its output
operation's job waits on one event until the cluster says its last stage is done.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
from typing import Callable, Sequence

import anyio

from scheduler import Time, TimerHandle, VirtualClock

from ._cluster_model import ClusterModel

__all__ = ["ClusterStatistics", "SimulatedCluster"]

# Work and service are measured in fractional milliseconds; a task whose remaining work is below
# this is done (processor sharing divides durations into fractions).
_EPSILON = 1e-6


class ClusterStatistics:
    """What the cluster did over a run.

    Attributes:
        tasks: tasks run to completion (re-runs after a failure count again).
        busy_ms: slot time spent running tasks, summed over the slots.
        failures: jobs that failed (each caused a restart).
        lost_tasks: tasks cut short by a restart.
        down_ms: time the context was down for restarts.
    """

    __slots__ = ("busy_ms", "down_ms", "failures", "lost_tasks", "tasks")

    def __init__(self) -> None:
        self.tasks = 0
        self.busy_ms = 0.0
        self.failures = 0
        self.lost_tasks = 0
        self.down_ms = 0

    def __repr__(self) -> str:
        return (f"<ClusterStatistics [{self.tasks} tasks | busy {self.busy_ms:.0f} ms | {self.failures} failures | "
                f"down {self.down_ms} ms]>")


class _JobRun:
    """One job on the cluster: its stages, where it is, and the event its caller waits on."""

    __slots__ = ("done", "epoch", "fails", "pending", "running", "seq", "stage", "stages")

    def __init__(self, stages: Sequence[Sequence[int]], fails: bool) -> None:
        self.seq = -1  # numbered when the cluster lets it in
        self.epoch = 0  # bumped by every restart, so a stale stage timer knows it is stale
        self.stages = stages
        self.stage = -1
        self.pending: list[int] = []  # durations of the current stage's tasks not yet launched, last first
        self.running = 0
        self.fails = fails
        self.done = anyio.Event()


class SimulatedCluster:
    """Task slots shared by the jobs of a simulated run, scheduled FIFO or FAIR as Spark does.

    :meth:`run` executes one job: its stages one after the other, each stage's tasks on free
    slots. Time passes only on ``clock``: the cluster keeps one timer there for the next task
    to end. With fewer processors than slots (``model.cpus``) running tasks share them
    equally, so each progresses at ``cpus / running`` of real speed.

    Args:
        model: slots, scheduling mode, processors and overheads.
        clock: the virtual clock of the run.
        downtime_ms: how long the context is down after a failed job.
    """

    def __init__(self, model: ClusterModel, clock: VirtualClock, *, downtime_ms: float = 0.0) -> None:
        """Build an idle cluster."""
        self.model = model
        self.statistics = ClusterStatistics()
        self._clock = clock
        self._free = model.slots
        self._fair = model.scheduling_mode == "FAIR"
        self._cpus = model.cpus if model.cpus is not None and (model.cpus < model.slots * model.task_cpu
                                                               or model.driver_on_cpus) else None
        # Without driver_on_cpus, driver work runs on its threads but does not take processors.
        self._driver_takes_cpu = model.driver_on_cpus
        self._task_cpu = model.task_cpu
        # Driver work is tracked by the cluster when it shares the tasks' processors or is
        # bounded by the driver's threads; otherwise it is a plain wait.
        self._driver_tracked = model.driver_on_cpus or model.driver_threads is not None
        # Driver work waiting for a driver thread (driver_threads), in order, and how many run.
        self._driver_threads = model.driver_threads
        self._driver_queue: collections.deque[tuple[_JobRun, float]] = collections.deque()
        self._driver_busy = 0
        self._task_overhead = model.task_overhead_ms
        self._stage_overhead = model.stage_overhead_ms
        self._job_overhead = model.job_overhead_ms
        self._downtime = downtime_ms
        self._seq = itertools.count()
        # Jobs whose current stage has tasks not yet launched, in submission order.
        self._waiting: list[_JobRun] = []
        # Jobs on the cluster (for a restart): submitted and not done.
        self._active: dict[int, _JobRun] = {}
        # Running tasks as (service at which it ends, sequence, job, slot milliseconds, holds a
        # slot). Service is the work one task has received since the start: it grows at the
        # processor-sharing rate, so the order of ends never changes while tasks run, only their
        # instants. A job's driver work (with driver_on_cpus) runs here too, holding no slot.
        self._running: list[tuple[float, int, _JobRun, float, bool]] = []
        self._service = 0.0
        self._service_at = 0  # the instant _service was last brought up to date
        self._timer: TimerHandle | None = None
        self._timer_at = -1
        self._down = False
        # Jobs that reached the cluster at this instant, and the timer that lets them in once every task due at it ran.
        self._arrivals: list[tuple[tuple[int, ...], _JobRun, bool, float]] = []
        self._admission: TimerHandle | None = None

    @property
    def free_slots(self) -> int:
        """Slots not running a task now."""
        return self._free

    @property
    def running_tasks(self) -> int:
        """Tasks running now."""
        return len(self._running)

    async def run(self, stages: Sequence[Sequence[int]], *, fails: bool = False, overhead_ms: float = 0.0,
                  order: tuple[int, ...] = ()) -> None:
        """Run one job to completion: ``stages[i]`` holds the durations (ms) of stage ``i``'s tasks.

        The job first spends the cluster's job overhead plus ``overhead_ms`` on the driver
        (no slot held), then runs its stages.

        With ``fails``, the job fails at the end of its last stage: the context goes down for
        the downtime, every job in flight loses its running tasks and starts over, and this one
        then runs again (and succeeds).

        ``order`` places the job among those that reach the cluster at the same instant (the
        simulated graph passes its batch's time and its output operation's index): they are let
        in together, in that order, once every task due at that instant ran. So the run is the
        same whatever order those tasks ran in (trio shuffles tasks woken together).
        """
        overhead = self._job_overhead + overhead_ms
        tracked = overhead > 0 and self._driver_tracked
        if overhead > 0 and not tracked:
            await self._clock.sleep_until(Time(self._clock.now().milliseconds + math.ceil(overhead)))
        job = _JobRun(stages, fails)
        self._arrivals.append((order, job, tracked, overhead))
        if self._admission is None:
            self._admission = self._clock.call_at(self._now(), self._admit)
        await job.done.wait()

    # -- bookkeeping, all synchronous: called from the clock's timers --

    def _admit(self) -> None:
        # The jobs that reached the cluster at this instant, in their order: each is numbered (FIFO and FAIR order by
        # that number), then starts on a driver thread (and the processors), or with its first stage.
        self._admission = None
        arrivals = sorted(self._arrivals, key=_arrival_order)  # stable: equal orders keep their call order
        self._arrivals = []
        for _, job, tracked, overhead in arrivals:
            job.seq = next(self._seq)
            self._active[job.seq] = job
            if tracked:  # its first stage follows its driver work
                self._advance()
                self._driver_work(job, overhead)
                self._arm()
            else:
                self._next_stage(job)

    def _now(self) -> int:
        return self._clock.now().milliseconds

    def _rate(self) -> float:
        # Processor sharing: every running entity slows by the same factor once their demand
        # (a task's share of a processor, task_cpu; driver work, a whole one) exceeds the cpus.
        cpus = self._cpus
        if cpus is None:
            return 1.0
        drivers = self._driver_busy if self._driver_takes_cpu else 0
        demand = (len(self._running) - drivers) * self._task_cpu + drivers
        return 1.0 if demand <= cpus else cpus / demand

    def _advance(self) -> None:
        # Bring the service counter to now, at the rate of the tasks that ran since.
        now = self._now()
        if now != self._service_at:
            self._service += (now - self._service_at) * self._rate()
            self._service_at = now

    def _next_stage(self, job: _JobRun) -> None:
        job.stage += 1
        if job.stage == len(job.stages):
            self._finish(job)
            return
        durations = list(job.stages[job.stage])
        if not durations:  # an empty stage ends at once
            self._next_stage(job)
            return
        durations.reverse()
        job.pending = durations
        self._waiting.append(job)
        self._advance()
        self._dispatch()
        self._arm()

    def _finish(self, job: _JobRun) -> None:
        if job.fails:
            job.fails = False  # the re-run after the restart succeeds
            self._restart()
            return
        del self._active[job.seq]
        job.done.set()

    def _dispatch(self) -> None:
        # Offer free slots to pending tasks: FIFO to the earliest job, FAIR to the job with the
        # fewest running tasks (the earliest on a tie), as Spark's pools order task sets.
        waiting = self._waiting
        if self._down:
            return
        while self._free and waiting:
            if self._fair:
                job = min(waiting, key=_fair_key)
            else:
                job = waiting[0]
            slot_ms = job.pending.pop() + self._task_overhead
            if not job.pending:
                waiting.remove(job)
            job.running += 1
            self._free -= 1
            heapq.heappush(self._running, (self._service + slot_ms, next(self._seq), job, slot_ms, True))

    def _arm(self) -> None:
        # One timer, for the instant the first running task ends (rounded up to the clock's ms).
        running = self._running
        if not running:
            deadline = -1
        else:
            remaining = running[0][0] - self._service
            deadline = self._service_at + max(0, math.ceil(remaining / self._rate() - _EPSILON))
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline >= 0:
            self._timer = self._clock.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = -1
        # Before the rate changes, credit every running task with the service until now.
        self._advance()
        running = self._running
        done = self._service + _EPSILON
        stats = self.statistics
        stage_done: list[_JobRun] = []
        driver_done: list[_JobRun] = []
        while running and running[0][0] <= done:
            _, _, job, slot_ms, holds_slot = heapq.heappop(running)
            if not holds_slot:  # driver work done: the job's next stage may start
                driver_done.append(job)
                self._release_driver_thread()
                continue
            self._free += 1
            stats.tasks += 1
            stats.busy_ms += slot_ms
            job.running -= 1
            if job.running == 0 and not job.pending:
                stage_done.append(job)
        self._dispatch()
        for job in driver_done:
            if self._down:  # a job failed: the restart starts every job over
                break
            self._next_stage(job)
        for job in stage_done:
            if self._down:
                break
            if self._stage_overhead > 0 and job.stage + 1 < len(job.stages):
                if self._driver_tracked:  # the DAG scheduler's work between stages, on a driver thread
                    self._driver_work(job, self._stage_overhead)
                else:
                    self._clock.call_at(self._now() + math.ceil(self._stage_overhead), _ForJob(self._next_stage, job))
            else:
                self._next_stage(job)
        self._arm()

    def _driver_work(self, job: _JobRun, ms: float) -> None:
        # Driver work runs among the tasks on the shared processors, on one of the driver's
        # threads (one: the driver's Python, under its GIL); more waits its turn.
        if self._driver_threads is not None and self._driver_busy >= self._driver_threads:
            self._driver_queue.append((job, ms))
            return
        self._driver_busy += 1
        if self._driver_takes_cpu:
            heapq.heappush(self._running, (self._service + ms, next(self._seq), job, ms, False))
        else:
            self._clock.call_at(self._now() + math.ceil(ms), _ForJob(self._driver_done, job))

    def _release_driver_thread(self) -> None:
        # A driver thread is free: the next driver work waiting for one starts.
        self._driver_busy -= 1
        if self._driver_queue:
            self._driver_work(*self._driver_queue.popleft())

    def _driver_done(self, job: _JobRun) -> None:
        # Driver work that takes no processor ended: the next waiting one starts, the job goes on.
        self._advance()
        self._release_driver_thread()
        self._next_stage(job)
        self._arm()

    def _restart(self) -> None:
        # A job failed: the context is down; work in flight is lost and starts over afterwards.
        stats = self.statistics
        stats.failures += 1
        self._advance()
        self._down = True
        down_ms = math.ceil(self._downtime)
        stats.down_ms += down_ms
        stats.lost_tasks += sum(1 for entry in self._running if entry[4])
        self._running.clear()
        self._waiting.clear()
        self._driver_queue.clear()
        self._driver_busy = 0
        self._free = self.model.slots
        for job in self._active.values():
            job.stage = -1
            job.pending = []
            job.running = 0
            job.epoch += 1
        self._clock.call_at(self._now() + down_ms, self._end_downtime)

    def _end_downtime(self) -> None:
        # Back up: every job in flight starts over from its first stage, in submission order;
        # jobs submitted while down wait in line behind them.
        self._down = False
        self._advance()
        waiting = self._waiting
        self._waiting = []
        for job in sorted(self._active.values(), key=_seq_key):
            if job.stage == -1:
                self._next_stage(job)
        self._waiting.extend(waiting)
        self._dispatch()
        self._arm()

    def __repr__(self) -> str:
        m = self.model
        return (f"<SimulatedCluster [{m.slots} slots, {m.scheduling_mode} | {len(self._running)} running | "
                f"{sum(len(j.pending) for j in self._waiting)} pending]>")


def _fair_key(job: _JobRun) -> tuple[int, int]:
    return job.running, job.seq


def _seq_key(job: _JobRun) -> int:
    return job.seq


def _arrival_order(arrival: tuple[tuple[int, ...], _JobRun, bool, float]) -> tuple[int, ...]:
    return arrival[0]


class _ForJob:
    """A timer callback that goes on with a job (its next stage, or the end of its driver work), unless a restart came first."""

    __slots__ = ("_epoch", "_go_on", "_job")

    def __init__(self, go_on: Callable[[_JobRun], None], job: _JobRun) -> None:
        self._go_on = go_on
        self._job = job
        self._epoch = job.epoch

    def __call__(self) -> None:
        if self._job.epoch == self._epoch:  # else a restart came in between and starts the job over
            self._go_on(self._job)
