"""examples/capacity_planning.py runs to completion into a given folder, so it cannot rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_capacity_planning_example_prints_the_region_and_writes_plots(tmp_path: Path) -> None:
    """With default arguments it prints the stable-region table and a recommendation, and writes both PNGs."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "capacity_planning.py"), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Stable region over 5 min simulated per point")
    assert "concurrent_jobs=1: shortest stable interval 1 s" in result.stdout
    assert "concurrent_jobs=2: shortest stable interval 500 ms" in result.stdout
    for name in ("sweep.png", "best.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
