"""Batch total delay of a checkpointed one-output DStream program, with and without async progress tracking, beside Spark.

aiodstream: a StreamingContext on local[2] with a checkpoint, a queue of ten-record lists (one per
batch) and one output operation (``rdd.count()``), at a 200 ms interval; per batch the total
delay (BatchInfo, Spark's definition: processing end minus submission, so the offsets write
before submission and the commit after processing are outside it), the progress report's
triggerExecution (trigger start to commit written: every phase, comparable to Spark's) and the
critical-path log time (walCommit + commitOffsets), in three modes: synchronous tracking, async
tracking with Spark's default 1000 ms durable interval, and async with interval 0 (every entry
durable, off the critical path).

Spark: in the same process and SparkContext, a Structured Streaming rate source to the noop
sink with a checkpoint, the same trigger interval, with and without asyncProgressTrackingEnabled; its
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

from bench.bench_checkpoint import critical_path, spark_session
from bench.bench_checkpoint import spark as spark_phases
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
        tracker = ssc.runtime.tracker
        assert tracker is not None
        return {  # per-batch samples, pooled over rounds by the caller
            "total_delay_ms": [i.total_delay.milliseconds for i in infos if i.total_delay is not None],
            "processing_delay_ms": [i.processing_delay.milliseconds for i in infos if i.processing_delay is not None],
            "scheduling_delay_ms": [i.scheduling_delay.milliseconds for i in infos if i.scheduling_delay is not None],
            "walCommit_ms": [p.durationMs.get("walCommit", 0) for p in progress],
            "commitOffsets_ms": [p.durationMs.get("commitOffsets", 0) for p in progress],
            "triggerExecution_ms": [p.durationMs.get("triggerExecution", 0) for p in progress],
            "critical_path_log_ms": [ns / 1e6 for ns in critical_path(tracker, warmup + batches)[warmup:warmup + batches]],
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100, help="measured batches per aiodstream mode")
    parser.add_argument("--warmup", type=int, default=10, help="batches left out at the start of each run")
    parser.add_argument("--interval-ms", type=int, default=200, help="batch interval (Spark's trigger too)")
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
        ours(sc, None, args.warmup, args.warmup, args.interval_ms / 1000)  # warms Spark's workers up; discarded
        runs: dict[str, list[dict[str, list[float]]]] = {name: [] for name in modes}
        for _ in range(args.rounds):  # alternated, so that load from elsewhere falls on every mode alike
            for name, options in modes.items():
                runs[name].append(ours(sc, options, args.batches, args.warmup, args.interval_ms / 1000))
        result["aiodstream"] = {}
        for name, rounds in runs.items():
            pooled: dict[str, Any] = {"batches": sum(len(r["total_delay_ms"]) for r in rounds)}
            for key in rounds[0]:
                pooled[key.replace("_ms", "_median_ms")] = median([x for r in rounds for x in r[key]])
            pooled["round_total_delay_medians_ms"] = [median(r["total_delay_ms"]) for r in rounds]
            result["aiodstream"][name] = pooled
        result["spark"] = {
            "version": session.version,
            "trigger_ms": args.interval_ms,
            "sync": spark_phases(False, args.spark_triggers, 5, session, args.interval_ms),
            "async": spark_phases(True, args.spark_triggers, 5, session, args.interval_ms),
        }
    finally:
        session.stop()
    for key in ("total_delay_median_ms", "triggerExecution_median_ms"):
        sync_value = result["aiodstream"]["sync"][key]
        async_value = result["aiodstream"]["async_interval_1000ms"][key]
        if sync_value and async_value:
            result[f"{key.replace('_median_ms', '')}_async_over_sync"] = round(async_value / sync_value, 3)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
