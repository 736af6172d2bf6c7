"""Record the fidelity test's real runs on one master: ``python -m tests.streaming.simulation.fidelity.run MASTER OUT_DIR ...``.

One process, one SparkContext on ``MASTER``; for each program and each concurrency, a
StreamingContext records ``--batches`` batches with ``record_trace`` into
``OUT_DIR/<program>-<master>-c<N>.jsonl``. ``--again`` records some configurations a second time
at the end (``...-c<N>-again.jsonl``), for the run-to-run spread of one configuration on this
machine. A child process per master: ``local[2]`` and ``local[4]`` cannot share a JVM.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def trace_name(program: str, master: str, concurrent_jobs: int, *, again: bool = False) -> str:
    """The file a run's trace is written to (``again``: its second recording)."""
    tag = master.replace("[", "").replace("]", "").replace("*", "all")
    return f"{program}-{tag}-c{concurrent_jobs}{'-again' if again else ''}.jsonl"


def _levels(text: str) -> list[int]:
    return [int(c) for c in text.split(",") if c.strip()]


def main(argv: list[str] | None = None) -> None:
    """Record every run asked for."""
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("out", type=Path)
    parser.add_argument("--programs", default="wordcount,three_outputs")
    parser.add_argument("--concurrency", default="1,2,3")
    parser.add_argument("--again", default="", help="concurrency levels recorded a second time, after the rest")
    parser.add_argument("--batches", type=int, default=60)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    from streaming import StreamingContext
    from tests.streaming.simulation.fidelity.programs import INTERVALS, PROGRAMS, lines, warm_up

    conf = (SparkConf().setMaster(args.master).setAppName("aiodstream-fidelity")
            .set("spark.ui.enabled", "true").set("spark.ui.port", "0").set("spark.ui.showConsoleProgress", "false")
            .set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1"))
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    try:
        warm_up(sc)
        args.out.mkdir(parents=True, exist_ok=True)
        runs = [(jobs, False) for jobs in _levels(args.concurrency)] + [(jobs, True) for jobs in _levels(args.again)]
        for again in (False, True):
            for program in args.programs.split(","):
                for jobs in (j for j, a in runs if a == again):
                    ssc = StreamingContext(sc, INTERVALS[program], concurrentJobs=jobs)
                    queue = [sc.parallelize(lines(i), 2) for i in range(args.batches + 20)]
                    PROGRAMS[program](ssc.queueStream(queue))
                    ssc.record_trace(args.out / trace_name(program, args.master, jobs, again=again), batches=args.batches)
                    ssc.start()
                    ssc.awaitTermination()
                    ssc.stop(stopSparkContext=False)
    finally:
        sc.stop()


if __name__ == "__main__":
    main()
