"""Batch total delay of a checkpointed one-output DStream program, with and without async progress tracking, beside Spark.

aiodstream: a StreamingContext on local[2] with a checkpoint, a queue of ten-record lists (one per
batch) and one output operation (``rdd.count()``), at a 100 ms interval; per batch the total
delay (BatchInfo: processing end minus batch time) and the critical-path log time (walCommit +
commitOffsets of its progress), in three modes: synchronous tracking, async tracking with
Spark's default 1000 ms durable interval, and async with interval 0 (every entry durable, off
the critical path).

Spark: in the same process and SparkContext, a Structured Streaming rate source to the noop
sink with a checkpoint, 100 ms trigger, with and without asyncProgressTrackingEnabled; its
walCommit and commitOffsets per trigger (whole milliseconds) and triggerExecution.

Prints one JSON object, with the machine's load at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

from bench.bench_checkpoint import spark as spark_phases
from bench.bench_checkpoint import spark_session
from listeners import EventRecorder


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def ours(sc: Any, options: dict[str, object] | None, batches: int, warmup: int, interval_s: float) -> dict[str, Any]:
    """Run the program for ``warmup + batches`` batches; medians of the measured ones."""
    from streaming import StreamingContext

    directory = tempfile.mkdtemp(prefix="aiodstream-bench-query-")
    try:
        ssc = StreamingContext(sc, interval_s)
        recorder = EventRecorder()
        ssc.addStreamingListener(recorder)
        records = [list(range(i * 10, i * 10 + 10)) for i in range(warmup + batches)]
        ssc.queueStream(records, default=[]).foreachRDD(lambda rdd: rdd.count())
        ssc.checkpoint(directory, options=options)
        ssc.start()
        try:
            ssc.processAllAvailable()
        finally:
            ssc.stop(stopSparkContext=False)
        infos = recorder.completed_batches[warmup:warmup + batches]
        progress = [p for p in ssc.recentProgress if warmup <= p.batchId < warmup + batches]
        return {
            "batches": len(infos),
            "total_delay_median_ms": median([i.total_delay.milliseconds for i in infos if i.total_delay is not None]),
            "processing_delay_median_ms": median([i.processing_delay.milliseconds for i in infos
                                                  if i.processing_delay is not None]),
            "scheduling_delay_median_ms": median([i.scheduling_delay.milliseconds for i in infos
                                                  if i.scheduling_delay is not None]),
            "walCommit_median_ms": median([p.durationMs.get("walCommit", 0) for p in progress]),
            "commitOffsets_median_ms": median([p.durationMs.get("commitOffsets", 0) for p in progress]),
            "critical_path_log_median_ms": median([(ns / 1e6) for ns in
                                                   list(ssc.runtime.tracker.critical_path_ns)[warmup:warmup + batches]])
            if ssc.runtime.tracker is not None else None,
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100, help="measured batches per aiodstream mode")
    parser.add_argument("--warmup", type=int, default=10, help="batches left out at the start of each run")
    parser.add_argument("--interval-ms", type=int, default=100, help="batch interval (Spark's trigger too)")
    parser.add_argument("--spark-triggers", type=int, default=30, help="measured Spark triggers per mode")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the aiodstream modes")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "interval_ms": args.interval_ms,
    }
    session = spark_session()
    sc = session.sparkContext
    modes: dict[str, dict[str, object] | None] = {
        "sync": None,
        "async_interval_1000ms": {"asyncProgressTrackingEnabled": True},
        "async_interval_0ms": {"asyncProgressTrackingEnabled": True, "asyncProgressTrackingCheckpointIntervalMs": 0},
    }
    try:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in modes}
        for _ in range(args.rounds):  # alternated, so that load from elsewhere falls on every mode alike
            for name, options in modes.items():
                runs[name].append(ours(sc, options, args.batches, args.warmup, args.interval_ms / 1000))
        result["aiodstream"] = {
            name: {key: median([r[key] for r in rounds if r[key] is not None]) if key != "batches" else
                   sum(r[key] for r in rounds) for key in rounds[0]}
            for name, rounds in runs.items()
        }
        result["aiodstream"]["round_total_delay_medians_ms"] = {
            name: [r["total_delay_median_ms"] for r in rounds] for name, rounds in runs.items()}
        result["spark"] = {
            "version": session.version,
            "sync": spark_phases(False, args.spark_triggers, 5, session),
            "async": spark_phases(True, args.spark_triggers, 5, session),
        }
    finally:
        session.stop()
    sync_delay = result["aiodstream"]["sync"]["total_delay_median_ms"]
    async_delay = result["aiodstream"]["async_interval_1000ms"]["total_delay_median_ms"]
    if sync_delay and async_delay:
        result["total_delay_async_over_sync"] = round(async_delay / sync_delay, 3)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
