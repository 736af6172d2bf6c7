"""Sweeps: one simulation per (batch interval, concurrent jobs) pair, and the stable region they map.

Every point simulates the same horizon with the same seed, so configurations are compared on the
same input and, batch for batch, the same drawn work (common random numbers).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Literal, Sequence

import anyio
import attrs

from scheduler import Duration

from ._model_checks import ModelError
from ._report import Summary, format_duration
from ._simulation_model import SimulationModel
from ._simulator import simulate_async

__all__ = ["SweepPoint", "SweepResult", "sweep", "sweep_async"]

SweepProgress = Callable[[int, int, SimulationModel], None]
"""Called as ``progress(done, total, model)`` before each point of a sweep runs."""


@attrs.frozen
class SweepPoint:
    """One configuration of a sweep and what its run showed."""

    batch_interval: Duration
    concurrent_jobs: int
    summary: Summary


@attrs.frozen
class SweepResult:
    """Every point of a sweep, intervals outer and concurrency inner, in the order given."""

    intervals: tuple[Duration, ...]
    concurrency: tuple[int, ...]
    horizon: Duration
    points: tuple[SweepPoint, ...]

    def point(self, batch_interval: Duration, concurrent_jobs: int) -> SweepPoint:
        """The point of one configuration."""
        for p in self.points:
            if p.batch_interval == batch_interval and p.concurrent_jobs == concurrent_jobs:
                return p
        raise KeyError((batch_interval, concurrent_jobs))

    def stable_region(self) -> dict[Duration, int | None]:
        """For each interval, the least concurrency that is stable (``None`` if none is)."""
        region: dict[Duration, int | None] = {}
        for interval in self.intervals:
            stable = [c for c in self.concurrency if self.point(interval, c).summary.stable]
            region[interval] = min(stable) if stable else None
        return region

    def format_table(self) -> str:
        """The stable region as a grid (p95 total delay where stable), then one line per point."""
        width = 16
        head = f"{'interval':>10} |" + "".join(f"{f'jobs={c}':>{width}}" for c in self.concurrency)
        lines = [
            f"Stable region over {format_duration(self.horizon.milliseconds)} simulated per point "
            "(cells: p95 total delay when stable, utilisation when not)",
            head,
            "-" * len(head),
        ]
        for interval in self.intervals:
            cells = []
            for c in self.concurrency:
                s = self.point(interval, c).summary
                cell = format_duration(s.total_delay.p95_ms) if s.stable else f"UNSTABLE {s.utilisation:.2f}"
                cells.append(f"{cell:>{width}}")
            lines.append(f"{format_duration(interval.milliseconds):>10} |" + "".join(cells))
        lines.append("")
        lines.append(
            f"{'interval':>10} {'jobs':>5} {'batches':>8} {'util':>6} {'stable':>7} {'mean sched':>11} "
            f"{'p95 total':>10} {'max total':>10} {'max queue':>10} {'growth/s':>9}"
        )
        for p in self.points:
            s = p.summary
            lines.append(
                f"{format_duration(p.batch_interval.milliseconds):>10} {p.concurrent_jobs:>5} {s.batches:>8} "
                f"{s.utilisation:>6.2f} {('yes' if s.stable else 'NO'):>7} {format_duration(s.scheduling_delay.mean_ms):>11} "
                f"{format_duration(s.total_delay.p95_ms):>10} {format_duration(s.total_delay.max_ms):>10} "
                f"{s.max_waiting:>10} {format_duration(max(0.0, s.delay_growth)):>9}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "horizon_ms": self.horizon.milliseconds,
            "points": [
                {"batch_interval_ms": p.batch_interval.milliseconds, "concurrent_jobs": p.concurrent_jobs, **p.summary.to_dict()}
                for p in self.points
            ],
        }


async def sweep_async(
    model: SimulationModel,
    intervals: Iterable[Duration],
    concurrency: Iterable[int],
    *,
    horizon: Duration | None = None,
    progress: SweepProgress | None = None,
) -> SweepResult:
    """Simulate ``model`` at every (interval, concurrency) pair, one after another.

    Args:
        model: the base model; each point changes only its interval and concurrency.
        intervals: batch intervals to try.
        concurrency: ``concurrent_jobs`` values to try.
        horizon: simulated time per point (default: the model's ``horizon``), so that points
            with different intervals cover the same stretch of input.
        progress: called before each point runs.

    Raises:
        ModelError: no intervals or no concurrency values, or one is invalid.
    """
    intervals = tuple(intervals)
    concurrency = tuple(concurrency)
    if not intervals:
        raise ModelError("intervals", "must hold at least one batch interval")
    if not concurrency:
        raise ModelError("concurrency", "must hold at least one concurrent_jobs value")
    horizon = horizon if horizon is not None else model.horizon
    points: list[SweepPoint] = []
    total = len(intervals) * len(concurrency)
    for interval in intervals:
        for c in concurrency:
            point_model = model.evolve(batch_interval=interval, concurrent_jobs=c, duration=horizon, batches=None)
            if progress is not None:
                progress(len(points), total, point_model)
            result = await simulate_async(point_model)
            points.append(SweepPoint(interval, c, result.summary))
    return SweepResult(intervals, concurrency, horizon, tuple(points))


def sweep(
    model: SimulationModel,
    intervals: Sequence[Duration],
    concurrency: Sequence[int],
    *,
    horizon: Duration | None = None,
    progress: SweepProgress | None = None,
    backend: Literal["asyncio", "trio"] = "asyncio",
) -> SweepResult:
    """:func:`sweep_async` in an event loop of its own."""
    run = functools.partial(sweep_async, model, intervals, concurrency, horizon=horizon, progress=progress)
    return anyio.run(run, backend=backend)
