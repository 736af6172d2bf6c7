"""What the tasks' report channel on Spark Connect costs per batch: the tasks' writes, the driver's peek and take.

Without Spark: the report writer a task gets (``ReportedStats.sink``) is called in this process for each
partition of a batch, then the driver peeks (the keyed state's own output) and takes (the progress) the
batch's merged numbers, as the engine does. Three places: the private folder of ``/tmp`` (without a
checkpoint), a place under a local checkpoint directory, and (``--ftp``, needs pyftpdlib) one under an
``ftp://`` checkpoint served from a thread of this process (its server's CPU counts here too). Figures are
CPU microseconds per batch (process time) and wall microseconds, median of alternating rounds, load printed.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_task_reports.py [--batches 300] [--partitions 2] [--rounds 5] [--ftp]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from streaming.connect import CheckpointReports, ReportFolder
from streaming.dstream._batch_stats import ReportedStats
from streaming.state import StateOperatorStats


def _state(partition: int) -> StateOperatorStats:
    return StateOperatorStats(10, 3, 0, 1, 0, 0, 0, 1, partitions=1 << partition, custom_metrics={"numTimeoutsFired": 1})


def run(stats: ReportedStats, batches: int, partitions: int) -> dict[str, float]:
    """Per batch: every partition's state record, then a peek and a take; CPU and wall in us."""
    sink = stats.sink
    task_cpu = driver_cpu = 0.0
    wall = time.perf_counter()
    for batch in range(1000, 1000 * (batches + 1), 1000):
        start = time.process_time()
        for partition in range(partitions):
            sink.add_partition(batch, partition, _state(partition))
        middle = time.process_time()
        stats.peek(batch)
        stats.take(batch)
        task_cpu += middle - start
        driver_cpu += time.process_time() - middle
    wall = time.perf_counter() - wall
    return {"task_cpu_us": task_cpu / batches * 1e6, "driver_cpu_us": driver_cpu / batches * 1e6,
            "wall_us": wall / batches * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ftp", action="store_true", help="also a checkpoint on ftp:// (pyftpdlib, in this process)")
    args = parser.parse_args()
    with ExitStack() as stack:
        root = Path(tempfile.mkdtemp(prefix="bench-task-reports-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
        stack.callback(shutil.rmtree, root, True)
        places: dict[str, Callable[[], Any]] = {
            "private_tmp_folder": ReportFolder,
            "local_checkpoint": lambda: CheckpointReports(str(root / "ck")),
        }
        if args.ftp:
            from tests.ftp import FtpServer

            server = stack.enter_context(FtpServer(root / "ftp"))
            places["ftp_checkpoint"] = lambda: CheckpointReports(server.uri("ck"))
        figures: dict[str, list[dict[str, float]]] = {name: [] for name in places}
        names = list(places)
        for index in range(args.rounds):
            order = names if index % 2 == 0 else names[::-1]
            for name in order:
                batches = args.batches if name != "ftp_checkpoint" else max(args.batches // 10, 10)
                figures[name].append(run(ReportedStats(places[name]()), batches, args.partitions))
                print(f"round {index} {name}: {figures[name][-1]} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        result = {
            name: {key: round(statistics.median(f[key] for f in rounds), 1) for key in rounds[0]}
            for name, rounds in figures.items()
        }
        result["settings"] = {"batches": args.batches, "partitions": args.partitions, "rounds": args.rounds,
                              "load_1min": round(os.getloadavg()[0], 1)}
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
