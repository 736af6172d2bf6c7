"""Sweeps map the stable region; plots are written as valid PNG files."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from scheduler import Milliseconds, Seconds
from streaming.simulation import Constant, ModelError, OutputModel, SimulationModel, plot_run, plot_sweep, simulate, sweep

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MODEL = SimulationModel(Seconds(1), [OutputModel("a", Constant(700)), OutputModel("b", Constant(500))], duration=Seconds(30))


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR" and data[-8:-4] == b"IEND"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture(scope="module")
def grid() -> object:
    """A D/D/c sweep: 1.2 s of work per batch over three intervals and two concurrencies."""
    return sweep(MODEL, [Milliseconds(500), Seconds(1), Seconds(2)], [1, 2])


def test_the_stable_region_follows_utilisation(grid: object) -> None:
    """A configuration is stable exactly when 1.2 s of work fits into concurrency times the interval."""
    region = grid.stable_region()  # type: ignore[attr-defined]
    assert region == {Milliseconds(500): None, Seconds(1): 2, Seconds(2): 1}
    point = grid.point(Seconds(1), 2)  # type: ignore[attr-defined]
    assert point.summary.utilisation == pytest.approx(0.6) and point.summary.batches == 30
    assert grid.point(Milliseconds(500), 1).summary.batches == 60  # type: ignore[attr-defined]  # same horizon


def test_the_table_shows_the_grid_and_each_point(grid: object) -> None:
    """The printed table has one grid row per interval and marks unstable cells with their utilisation."""
    lines = grid.format_table().splitlines()  # type: ignore[attr-defined]
    assert lines[1].split() == ["interval", "|", "jobs=1", "jobs=2"]
    assert lines[3].split() == ["500", "ms", "|", "UNSTABLE", "2.40", "UNSTABLE", "1.20"]
    assert lines[5].split()[:3] == ["2", "s", "|"] and "UNSTABLE" not in lines[5]
    assert sum(line.strip().startswith(("500 ms", "1 s", "2 s")) for line in lines) == 3 + 6


def test_a_sweep_needs_values() -> None:
    """An empty list of intervals is refused with the field named."""
    with pytest.raises(ModelError, match=r"^intervals: must hold at least one batch interval$"):
        sweep(MODEL, [], [1])


def test_run_and_sweep_plots_are_png_files(tmp_path: Path, grid: object) -> None:
    """plot_run and plot_sweep write PNG images of a sensible size."""
    run_png = plot_run(simulate(MODEL), tmp_path / "run.png")
    sweep_png = plot_sweep(grid, tmp_path / "sweep.png")  # type: ignore[arg-type]
    assert _png_size(run_png) == (1000, 650)
    width, height = _png_size(sweep_png)
    assert width > 300 and height > 200
