"""The examples run to completion on a small fixed number of batches, so they cannot rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_example(name: str, *args: str, timeout: float = 120) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_demo_prints_batches_with_delays_and_exits() -> None:
    """The demo runs three batches on the wall clock, prints each with its delays, and exits by itself."""
    out = run_example("demo.py", "--batches", "3", "--interval-ms", "50")
    lines = [line for line in out.splitlines() if line.startswith("batch ")]
    assert len(lines) >= 3
    assert all("scheduling" in line and "processing" in line and "total" in line for line in lines)
    assert "0 failed" in out
