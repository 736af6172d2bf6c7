"""PNG plots of a run's delays over time and of a sweep's stable region (matplotlib, Agg).

Figures are drawn on matplotlib's Agg canvas directly, never through ``pyplot``: the library
neither changes the host's backend (a notebook keeps its inline one) nor leaves figures open.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from listeners import BatchInfo

from ._report import format_duration, queue_lengths
from ._simulator import SimulationResult
from ._sweep import SweepResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_run", "plot_sweep", "run_figure", "sweep_figure"]


def _require_matplotlib() -> None:
    """Raise a clear error when the optional matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("plots need matplotlib, an optional dependency: pip install 'aiodstream[plot]'",
                                  name="matplotlib") from exc


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def run_figure(run: SimulationResult | Sequence[BatchInfo], *, title: str | None = None) -> Figure:
    """A figure of scheduling, processing and total delay per batch, and the queue below it."""
    _require_matplotlib()
    batches = run.batches if isinstance(run, SimulationResult) else tuple(run)
    fig = _figure(10, 6.5)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    xs = [b.batch_time.milliseconds / 1000 for b in batches]
    for label, attr, style in (
        ("total delay", "total_delay", "-"),
        ("scheduling delay", "scheduling_delay", "-"),
        ("processing delay", "processing_delay", ":"),
    ):
        ys = [getattr(b, attr).milliseconds / 1000 for b in batches]
        top.plot(xs, ys, style, label=label, linewidth=1)
    top.set_ylabel("delay (s)")
    top.legend(loc="upper left")
    top.grid(True, alpha=0.3)
    if isinstance(run, SimulationResult):
        s = run.summary
        verdict = "stable" if s.stable else f"UNSTABLE, +{format_duration(max(0.0, s.delay_growth, s.lag_growth))} per s"
        top.set_title(
            title or f"{s.batches} batches of {format_duration(s.batch_interval.milliseconds)}, "
            f"{s.concurrent_jobs} concurrent jobs, utilisation {s.utilisation:.2f} ({verdict})"
        )
    elif title:
        top.set_title(title)
    queue = queue_lengths(batches)
    bottom.step(xs, [p.waiting for p in queue], where="post", linewidth=1, label="batches waiting")
    bottom.set_ylabel("queue")
    bottom.set_xlabel("batch time (s)")
    bottom.grid(True, alpha=0.3)
    return fig


def plot_run(run: SimulationResult | Sequence[BatchInfo], path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Write :func:`run_figure` as a PNG to ``path`` and return the path."""
    path = Path(path)
    run_figure(run, title=title).savefig(path, format="png")
    return path


def sweep_figure(result: SweepResult, *, title: str | None = None) -> Figure:
    """A grid of intervals by concurrency, coloured by p95 total delay; unstable cells are marked."""
    _require_matplotlib()
    from matplotlib.colors import LogNorm

    fig = _figure(1.8 + 1.6 * len(result.concurrency), 1.4 + 0.7 * len(result.intervals))
    ax = fig.subplots()
    grid = []
    for interval in result.intervals:
        row = []
        for c in result.concurrency:
            s = result.point(interval, c).summary
            row.append(max(s.total_delay.p95_ms, 1) / 1000 if s.stable else math.nan)
        grid.append(row)
    finite = [v for row in grid for v in row if not math.isnan(v)]
    norm = LogNorm(vmin=min(finite), vmax=max(max(finite), min(finite) * 1.01)) if finite else None
    image = ax.imshow(grid, cmap="viridis_r", norm=norm, aspect="auto")
    ax.set_facecolor("#d9d9d9")
    for i, interval in enumerate(result.intervals):
        for j, c in enumerate(result.concurrency):
            s = result.point(interval, c).summary
            text = format_duration(s.total_delay.p95_ms) if s.stable else f"unstable\nutil {s.utilisation:.2f}"
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="black" if not s.stable else "white")
    ax.set_xticks(range(len(result.concurrency)), [str(c) for c in result.concurrency])
    ax.set_yticks(range(len(result.intervals)), [format_duration(i.milliseconds) for i in result.intervals])
    ax.set_xlabel("concurrent jobs")
    ax.set_ylabel("batch interval")
    ax.set_title(title or f"p95 total delay over {format_duration(result.horizon.milliseconds)} per point")
    if finite:
        fig.colorbar(image, ax=ax, label="p95 total delay (s)")
    return fig


def plot_sweep(result: SweepResult, path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Write :func:`sweep_figure` as a PNG to ``path`` and return the path."""
    path = Path(path)
    sweep_figure(result, title=title).savefig(path, format="png")
    return path
