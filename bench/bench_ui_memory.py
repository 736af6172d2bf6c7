"""Where the web UI's CPU goes beyond its instructions: cache misses per batch of the bare engine, under callgrind's cache model.

Prints one JSON object. Each variant runs ``bench_metrics``' bare engine (a no-op ``Pipeline`` flat
out on a manual clock, warmed up past 1,200 batches) once in a child under
``valgrind --tool=callgrind --cache-sim=yes``, counting only the measured batches, with the
simulated last level set to this machine's per-core L2 (``--l2``, default read from sysfs): a miss
there is a trip to the shared L3, or to memory when other processes have the L3. Variants: without,
metrics, the UI and its metrics with its default 1,000 retained batches, and the UI retaining 128
(``--small-retained``), which tells the cost of the retained batches from the cost of the views'
code. Per batch: instructions, first-level data misses and L2 (simulated last-level) misses.

Run: ``python bench/bench_ui_memory.py`` (about 4 minutes quiet: four children of 2,000 batches).
The counts are the simulator's, so the machine's load does not move them (printed all the same).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import bench_metrics  # noqa: E402  (the engine program and its attach, shared)

VARIANTS = {"none": "none", "metrics": "metrics", "ui": "ui", "ui_small": "ui"}  # name -> what bench_metrics attaches


def l2_bytes() -> int:
    """The per-core L2 size from sysfs (index2 of cpu0), else 1 MiB."""
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cache/index2/size").read_text().strip()
    except OSError:
        return 1 << 20
    return int(text[:-1]) * 1024 if text.endswith("K") else int(text[:-1]) * (1 << 20) if text.endswith("M") else int(text)


def child(how: str, retained: int | None, batches: int) -> None:
    """Run the engine program with ``how`` attached (the UI retaining ``retained`` batches), counting the measured batches."""
    if retained is not None:
        from streaming.ui import StreamingUI

        original = bench_metrics.attach

        def attach(target: Any, variant: str) -> None:
            if variant == "ui":
                StreamingUI(retained_batches=retained).attach(target)
            else:
                original(target, variant)

        bench_metrics.attach = attach
    anyio.run(bench_metrics.engine_cpu_per_batch, batches, how, True, None)


def counts(how: str, retained: int | None, batches: int, l2: int) -> dict[str, float]:
    """Instructions, D1 misses and L2 misses per measured batch of one variant, from a child under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--LL={l2},16,64", "--instr-atstart=no",
                        f"--callgrind-out-file={out}", sys.executable, __file__, "--child", how, "--batches", str(batches),
                        *(["--retained", str(retained)] if retained is not None else [])],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ)
        lines = out.read_text().splitlines()
    names = next(line for line in lines if line.startswith("events:")).split()[1:]
    totals = dict(zip(names, map(int, next(line for line in lines if line.startswith("totals:")).split()[1:]), strict=False))
    return {"instructions": round(totals["Ir"] / batches), "d1_misses": round((totals["D1mr"] + totals["D1mw"]) / batches, 1),
            "l2_misses": round((totals["DLmr"] + totals["DLmw"]) / batches, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2_000)
    parser.add_argument("--small-retained", type=int, default=128, help="the UI's retained batches in the ui_small variant")
    parser.add_argument("--l2", type=int, default=None, help="the simulated last level's bytes (default: this machine's L2)")
    parser.add_argument("--child", choices=("none", "metrics", "ui"), help=argparse.SUPPRESS)
    parser.add_argument("--retained", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.retained, args.batches)
        return
    l2 = args.l2 or l2_bytes()
    result: dict[str, Any] = {"batches": args.batches, "simulated_l2_bytes": l2, "load_average_at_start": bench_metrics.load()}
    for name, how in VARIANTS.items():
        retained = args.small_retained if name == "ui_small" else None
        result[name] = {**counts(how, retained, args.batches, l2), "load_average": bench_metrics.load()}
        print(f"{name}: {result[name]}", file=sys.stderr, flush=True)
    base = result["none"]
    result["over_none"] = {name: {k: round(result[name][k] - base[k], 1) for k in ("instructions", "d1_misses", "l2_misses")}
                           for name in VARIANTS if name != "none"}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
