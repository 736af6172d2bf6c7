"""What a Spark Connect RDD checkpoint (the state's, every checkpoint interval) costs, on this machine's disk and on ftp://.

Prints one JSON object. One local Spark with Spark's Connect plugin (``bench_connect.start_spark``) and an FTP server
on 127.0.0.1 in this process (``tests.ftp``). Each round checkpoints a FrameRDD of ``--values`` key-value pairs in
``--partitions`` partitions (the server's Python workers write one file per partition, then the RDD is read back from
them by the count) and counts it; the checkpoint directory alternates between a local directory and the FTP server,
the one going first alternating by round, with the 1-minute load beside each figure. Figures: wall time and the
process tree's CPU (this process, the JVM, its Python workers, the FTP server's threads) of ``checkpoint + count``,
and the same count without a checkpoint (what the checkpoint adds is the difference).

``--where local`` measures only the local directory, so that the same command runs on a tree whose Connect
checkpoints were Parquet written by the server (before issue 30's third pass) for a before/after figure.

Not part of the test suite. Run (about 2 minutes on a quiet two-core machine):
``PYTHONPATH=$PWD python bench/bench_connect_checkpoint.py`` (``--rounds 5 --values 200000 --partitions 4``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._rounds import cpu_now
from bench.bench_connect import start_spark


def measure(ctx: Any, values: list[tuple[int, int]], partitions: int, directory: str | None) -> dict[str, float]:
    """Wall and process-tree CPU seconds of ``count`` over a fresh FrameRDD, checkpointed in ``directory`` first
    (``None``: not checkpointed)."""
    rdd = ctx.parallelize(values, partitions).map(lambda kv: kv)
    if directory is not None:
        ctx.setCheckpointDir(directory)
        rdd.checkpoint()
    load = os.getloadavg()[0]
    _, cpu_before = cpu_now()
    began = time.perf_counter()
    counted = rdd.count()
    wall = time.perf_counter() - began
    _, cpu_after = cpu_now()
    if counted != len(values):
        raise RuntimeError(f"counted {counted} of {len(values)} values")
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return {"wall_s": round(wall, 3), "cpu_s": None if cpu is None else round(cpu, 2), "load": round(load, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--values", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--where", choices=("both", "local"), default="both")
    args = parser.parse_args()
    sc, session = start_spark()
    from streaming.connect import FrameContext

    ctx = FrameContext(session)
    values = [(i % 5000, i) for i in range(args.values)]
    base = Path(tempfile.mkdtemp(prefix="bench-connect-checkpoint-"))
    places = ["local"] if args.where == "local" else ["local", "ftp"]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in [*places, "none"]}
    ftp: Any = None
    if "ftp" in places:
        import logging

        from tests.ftp import FtpServer

        logging.basicConfig(level=logging.WARNING)  # a root handler: pyftpdlib then adds none of its own at INFO

        ftp = FtpServer(base / "ftp")
    try:
        measure(ctx, values, args.partitions, None)  # warm-up: Python workers, plan caches
        for index in range(args.rounds + 1):
            order = places if index % 2 == 0 else places[::-1]
            for place in [*order, "none"]:
                directory = None if place == "none" else (
                    str(base / f"local-{index}") if place == "local" else ftp.uri(f"ck-{index}"))
                figure = measure(ctx, values, args.partitions, directory)
                if index:  # round 0 warms up each place
                    results[place].append(figure)
    finally:
        if ftp is not None:
            ftp.close()
    summary = {place: {"median_wall_s": statistics.median(r["wall_s"] for r in rounds),
                       "median_cpu_s": statistics.median(r["cpu_s"] for r in rounds if r["cpu_s"] is not None),
                       "rounds": rounds} for place, rounds in results.items()}
    print(json.dumps({"values": args.values, "partitions": args.partitions, "results": summary}, indent=1))
    session.stop()
    sc.stop()


if __name__ == "__main__":
    main()
