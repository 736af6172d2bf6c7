"""matplotlib and trio are optional dependencies: without them plots and the trio backend fail with a message naming what to install."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from scheduler import Seconds
from streaming._cli import main
from streaming.simulation import Constant, OutputModel, SimulationModel, plot_run, simulate


def test_a_plot_without_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """plot_run raises ModuleNotFoundError("plots need matplotlib ... pip install 'aiodstream[plot]'") when it is missing."""
    result = simulate(SimulationModel(Seconds(1), [OutputModel("a", Constant(10))], batches=3))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what a missing package looks like to import
    with pytest.raises(ModuleNotFoundError, match=r"^plots need matplotlib, an optional dependency: pip install "
                                                  r"'aiodstream\[plot\]'$") as info:
        plot_run(result, tmp_path / "run.png")
    assert info.value.name == "matplotlib"
    assert not (tmp_path / "run.png").exists()


def test_the_cli_refuses_plot_before_simulating(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """simulate --plot without matplotlib exits with the usage status and the install hint, before any work."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a))
    code = main(["simulate", "--interval", "1s", "--op", "name=a,kind=constant,value=10ms", "--duration", "10s",
                 "--plot", str(tmp_path / "p.png")])
    assert code == 2
    assert "--plot needs matplotlib, an optional dependency: pip install 'aiodstream[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_the_cli_refuses_the_trio_backend_without_trio(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """simulate --backend trio without trio installed (it is not a dependency): the usage status and what to install,
    not anyio's LookupError traceback."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trio" else real_find_spec(name, *a))
    code = main(["simulate", "--interval", "1s", "--op", "name=a,kind=constant,value=10ms", "--batches", "3",
                 "--backend", "trio"])
    assert code == 2
    assert "aiodstream simulate: error: --backend trio needs trio, which is not installed: pip install trio" in (
        capsys.readouterr().err)
