"""Re-record the fidelity test's traces: ``python -m tests.streaming.simulation.fidelity.record_data``.

Records both programs on ``local[2]`` and ``local[4]`` with concurrentJobs 1, 2 and 3
(``run.py``, one child process per master, 60 batches each after a warm-up), then writes each
trace gzipped into ``tests/streaming/simulation/data/fidelity/`` with ``manifest.json``: when,
on how many processors, under which load average, at which niceness and commit. Record on a quiet
machine, or give the recording the processors first with ``--nice -20`` (as root): each master's
recording then runs in a session of its own at that niceness, and the session's autogroup too
(with the kernel's autogroups a niceness counts only against one's own session). The test holds
the model to these runs, so a run slowed by other jobs calibrates and measures that slowdown, not
the engine.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
DATA = Path(__file__).resolve().parent.parent / "data" / "fidelity"
MATRIX = {"local[2]": (1, 2, 3), "local[4]": (1, 2, 3)}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip() or "unknown"


def _record(command: list[str], nice: int) -> bool:
    """Run one master's recording in a session of its own at ``nice``; whether its autogroup took the niceness too."""
    if nice:
        command = ["nice", "-n", str(nice), *command]
    child = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, PYSPARK_PYTHON=sys.executable), start_new_session=True)
    grouped = False
    if nice:
        try:
            Path(f"/proc/{child.pid}/autogroup").write_text(f"{nice}\n")
            grouped = True
        except OSError:  # no autogroups, or not allowed: the process's own niceness still holds
            pass
    if child.wait() != 0:
        raise SystemExit(f"recording failed ({child.returncode}): {' '.join(command)}")
    return grouped


def main(argv: list[str] | None = None) -> None:
    """Record the matrix and replace the test data with it."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=60, help="batches recorded per configuration")
    parser.add_argument("--nice", type=int, default=0, help="niceness of the recording processes (negative needs root)")
    parser.add_argument("--out", type=Path, default=DATA, help="where the gzipped traces and manifest.json go")
    args = parser.parse_args(argv)
    from tests.streaming.simulation.fidelity.run import trace_name

    manifest: dict[str, Any] = {
        "command": "python -m tests.streaming.simulation.fidelity.record_data " + " ".join(argv or sys.argv[1:]),
        "recorded_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(), "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
        "batches": args.batches, "nice": args.nice, "load_average": {}, "files": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        where = Path(scratch)
        for master, levels in MATRIX.items():
            start = _load()
            command = [sys.executable, "-m", "tests.streaming.simulation.fidelity.run", master, str(where),
                       "--concurrency", ",".join(map(str, levels)), "--batches", str(args.batches)]
            grouped = _record(command, args.nice)
            manifest["load_average"][master] = {"start": start, "end": _load()}
            manifest.setdefault("autogroup_nice", {})[master] = args.nice if grouped else None
        args.out.mkdir(parents=True, exist_ok=True)
        for old in args.out.glob("*.jsonl.gz"):
            old.unlink()
        for trace in sorted(where.glob("*.jsonl")):
            with open(trace, "rb") as src, gzip.GzipFile(args.out / f"{trace.name}.gz", "wb", mtime=0) as dst:
                shutil.copyfileobj(src, dst)
            manifest["files"].append(f"{trace.name}.gz")
    expected = sorted(f"{trace_name(p, m, c)}.gz" for p in ("wordcount", "three_outputs") for m, cs in MATRIX.items() for c in cs)
    if manifest["files"] != expected:
        raise SystemExit(f"recorded {manifest['files']}, expected {expected}")
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
