"""Summaries of a run's batches: delay percentiles, queue length over time and stability.

Spark's ``StatsReportListener`` prints delay distributions; this adds what capacity planning
asks: is the delay bounded, and if not, how fast does the backlog grow and when would it drain.
"""

from __future__ import annotations

import bisect
import math
from typing import Any, Sequence

import attrs

from listeners import BatchInfo
from scheduler import Duration, Time

__all__ = ["LAG_GROWTH_TOLERANCE", "DelayStats", "QueuePoint", "Summary", "format_duration", "nearest_rank", "queue_lengths"]


def format_duration(ms: float) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 10 s``, ``2 h 3 min``: a duration for people."""
    if ms < 1000:
        return f"{ms:.0f} ms" if ms == int(ms) or ms >= 10 else f"{ms:.1f} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.0f} s" if ms % 1000 == 0 else f"{s:.1f} s"
    minutes, sec = divmod(round(s), 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def nearest_rank(ordered: Sequence[int], q: float) -> int:
    """The ``q`` quantile of sorted, non-empty ``ordered`` by the nearest-rank method: a value it really holds."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@attrs.frozen
class DelayStats:
    """The distribution of one delay over a run, in milliseconds.

    Percentiles use the nearest-rank method, so each is a delay some batch really had.
    """

    count: int
    mean_ms: float
    p50_ms: int
    p90_ms: int
    p95_ms: int
    p99_ms: int
    max_ms: int

    @classmethod
    def of(cls, values_ms: Sequence[int]) -> DelayStats:
        """The statistics of ``values_ms`` (all zero when empty)."""
        if not values_ms:
            return cls(0, 0.0, 0, 0, 0, 0, 0)
        ordered = sorted(values_ms)
        n = len(ordered)
        return cls(n, sum(ordered) / n, nearest_rank(ordered, 0.50), nearest_rank(ordered, 0.90),
                   nearest_rank(ordered, 0.95), nearest_rank(ordered, 0.99), ordered[-1])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return attrs.asdict(self)


@attrs.frozen
class QueuePoint:
    """The scheduler's queue just after the batch of ``time`` was submitted.

    Attributes:
        time: the batch time.
        waiting: batches submitted whose first job has not started (the scheduling backlog).
        pending: batches submitted that have not completed.
    """

    time: Time
    waiting: int
    pending: int


def queue_lengths(batches: Sequence[BatchInfo]) -> tuple[QueuePoint, ...]:
    """How many batches were waiting and pending at each batch's submission, from BatchInfos alone.

    Batches must be completed and in batch-time order (as :class:`SimulationResult` keeps them).
    """
    waiting, pending = _queue_counts(batches, with_pending=True)
    return tuple(QueuePoint(b.batch_time, w, p) for b, w, p in zip(batches, waiting, pending, strict=True))


def _queue_counts(batches: Sequence[BatchInfo], *, with_pending: bool) -> tuple[list[int], list[int]]:
    # Waiting (and pending) counts at each submission, as plain ints: a summary needs only the
    # waiting ones, not a QueuePoint per batch.
    starts, ends = [], []
    for b in batches:
        start, end = b.processing_start_time, b.processing_end_time
        if start is None or end is None:
            raise ValueError("queue_lengths needs completed batches (every BatchInfo with start and end times)")
        starts.append(start.milliseconds)
        ends.append(end.milliseconds)
    starts.sort()
    ends.sort()
    right = bisect.bisect_right
    submissions = [b.submission_time.milliseconds for b in batches]
    waiting = [k - right(starts, t) for k, t in enumerate(submissions, 1)]
    pending = [k - right(ends, t) for k, t in enumerate(submissions, 1)] if with_pending else []
    return waiting, pending


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


LAG_GROWTH_TOLERANCE = 10.0
"""How fast (ms per s of run time) a batch's lag behind its batch time may grow in a run :class:`Summary` calls stable:
1%, what a job queue 1% over its capacity gains."""


@attrs.frozen
class Summary:
    """What a run says about a configuration.

    Attributes:
        batches: completed batches.
        batch_interval: the batch interval.
        concurrent_jobs: the scheduler's job concurrency.
        scheduling_delay: processing start minus submission.
        processing_delay: processing end minus processing start.
        total_delay: processing end minus submission.
        utilisation: over the second half of the run, the jobs' busy time divided by what
            ``concurrent_jobs`` workers can do in that time (``sum(job durations) /
            (concurrent_jobs * batches * interval)``). The JobScheduler is a FIFO queue of jobs
            with ``concurrent_jobs`` servers, so its delay stays bounded exactly when this is below 1.
        stable: ``utilisation < 1`` and, when the run models engine costs, ``lag_growth`` at most
            ``LAG_GROWTH_TOLERANCE``. At a utilisation of 1 or more the backlog grows without bound (at
            exactly 1, any variability in the work makes it grow); the lag catches what utilisation does
            not count: the engine's own costs (generation, synchronous checkpoints, a listener holding
            the scheduler's posts). Without them the lag's slope is only the queue's noise (and a
            failure's down time), so it is not judged.
        delay_growth: least-squares slope of the scheduling delay over the second half of the run,
            in milliseconds of delay gained per second of run time (about ``(utilisation - 1) *
            1000`` when the jobs are too many, about 0 when stable).
        lag_growth: the same slope of each batch's lag, its processing end minus its batch time:
            about 0 when stable, whatever holds the batches up.
        max_waiting: the most batches ever waiting to start.
        waiting_at_end: batches waiting when the last batch was submitted (the backlog at the end).
        drain_time: from the last batch time until the last batch completed: how long the backlog
            left at the end takes to drain once no more input arrives.
    """

    batches: int
    batch_interval: Duration
    concurrent_jobs: int
    scheduling_delay: DelayStats
    processing_delay: DelayStats
    total_delay: DelayStats
    utilisation: float
    stable: bool
    delay_growth: float
    lag_growth: float
    max_waiting: int
    waiting_at_end: int
    drain_time: Duration

    @classmethod
    def from_batches(cls, batches: Sequence[BatchInfo], batch_interval: Duration, concurrent_jobs: int, *,
                     engine_costs: bool = False) -> Summary:
        """Summarise completed batches (in batch-time order) of a run with this configuration (``engine_costs``: the
        run modelled the engine's own costs, whose overload only the lag's growth shows)."""
        # Delays straight from the integer times (BatchInfo's delay properties build a Duration each).
        sched, proc, total, ends = [], [], [], []
        for b in batches:
            started, ended = b.processing_start_time, b.processing_end_time
            if started is None or ended is None:
                raise ValueError("a summary needs completed batches (every BatchInfo with its delays)")
            submitted, start_ms, end_ms = b.submission_time.milliseconds, started.milliseconds, ended.milliseconds
            sched.append(start_ms - submitted)
            proc.append(end_ms - start_ms)
            total.append(end_ms - submitted)
            ends.append(end_ms)
        half = batches[len(batches) // 2 :]
        interval_ms = batch_interval.milliseconds
        work = sum(
            op.end_time.milliseconds - op.start_time.milliseconds
            for b in half
            for op in b.output_operation_infos.values()
            if op.start_time is not None and op.end_time is not None
        )
        capacity = concurrent_jobs * interval_ms * len(half)
        utilisation = work / capacity if capacity else 0.0
        seconds = [b.batch_time.milliseconds / 1000 for b in half]
        growth = _slope(seconds, sched[len(batches) // 2 :])
        lag_growth = _slope(seconds, [end - b.batch_time.milliseconds for b, end in zip(half, ends[len(batches) // 2 :],
                                                                                         strict=True)])
        waiting, _ = _queue_counts(batches, with_pending=False)
        drain = Duration(0)
        if batches:
            drain = Duration(max(ends) - batches[-1].batch_time.milliseconds)
        return cls(
            batches=len(batches),
            batch_interval=batch_interval,
            concurrent_jobs=concurrent_jobs,
            scheduling_delay=DelayStats.of(sched),
            processing_delay=DelayStats.of(proc),
            total_delay=DelayStats.of(total),
            utilisation=utilisation,
            stable=utilisation < 1.0 and not (engine_costs and lag_growth > LAG_GROWTH_TOLERANCE),
            delay_growth=growth,
            lag_growth=lag_growth,
            max_waiting=max(waiting, default=0),
            waiting_at_end=waiting[-1] if waiting else 0,
            drain_time=drain,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (durations in milliseconds)."""
        return {
            "batches": self.batches,
            "batch_interval_ms": self.batch_interval.milliseconds,
            "concurrent_jobs": self.concurrent_jobs,
            "scheduling_delay": self.scheduling_delay.to_dict(),
            "processing_delay": self.processing_delay.to_dict(),
            "total_delay": self.total_delay.to_dict(),
            "utilisation": self.utilisation,
            "stable": self.stable,
            "delay_growth_ms_per_s": self.delay_growth,
            "lag_growth_ms_per_s": self.lag_growth,
            "max_waiting": self.max_waiting,
            "waiting_at_end": self.waiting_at_end,
            "drain_time_ms": self.drain_time.milliseconds,
        }

    def format(self) -> str:
        """The report as text, for a terminal or a notebook cell."""
        interval = self.batch_interval.milliseconds
        lines = [
            f"{self.batches} batches of {format_duration(interval)} "
            f"({format_duration(self.batches * interval)} simulated), concurrent jobs: {self.concurrent_jobs}",
            "",
            f"{'delay':<12}{'mean':>11}{'p50':>11}{'p90':>11}{'p95':>11}{'p99':>11}{'max':>11}",
        ]
        for label, st in (("scheduling", self.scheduling_delay), ("processing", self.processing_delay), ("total", self.total_delay)):
            cells = [st.mean_ms, st.p50_ms, st.p90_ms, st.p95_ms, st.p99_ms, st.max_ms]
            lines.append(f"{label:<12}" + "".join(f"{format_duration(c):>11}" for c in cells))
        lines.append("")
        lines.append(f"utilisation: {self.utilisation:.3f} (job time / capacity, second half of the run)")
        lines.append(f"queue: at most {self.max_waiting} batches waiting to start; {self.waiting_at_end} waiting at the end")
        if self.stable:
            lines.append("STABLE: the delay stays bounded.")
        elif self.utilisation >= 1.0 and self.delay_growth < 0.5:  # at capacity, no steady rate (rounds to 0 ms)
            lines.append("UNSTABLE: at capacity, the jobs take all the time there is: any variation in them, or any cost "
                         "of the engine's own, makes the scheduling delay drift up, at no steady rate.")
        elif self.utilisation >= 1.0:
            per_batch = self.delay_growth * interval / 1000
            lines.append(
                f"UNSTABLE: scheduling delay grows by {format_duration(max(self.delay_growth, 0.0))} per second "
                f"({format_duration(max(per_batch, 0.0))} per batch)."
            )
        else:
            per_batch = self.lag_growth * interval / 1000
            lines.append(
                f"UNSTABLE: the jobs fit, but the engine's own costs hold the batches up: each ends "
                f"{format_duration(self.lag_growth)} later after its batch time per second "
                f"({format_duration(per_batch)} per batch)."
            )
        lines.append(
            f"drain: the work left at the end completes {format_duration(self.drain_time.milliseconds)} "
            "after the last batch time, if no more input arrives."
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

