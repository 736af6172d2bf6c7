"""Run every benchmark under bench/ in turn; each prints its own JSON."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent

if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        sys.argv = [str(script)]
        runpy.run_path(str(script), run_name="__main__")
