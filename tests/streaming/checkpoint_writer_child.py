"""A second driver process for the one-writer tests: a checkpointed Pipeline query that pauses between batches.

Usage: ``python tests/streaming/checkpoint_writer_child.py CHECKPOINT``. Runs batch 1 of a
ListSource pipeline on a manual clock, prints ``ready <pid> <run id>``, waits for a line on
stdin, runs batches 2 and 3, stops, and prints ``outputs <json>`` (batch time, records).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import anyio.to_thread

from scheduler import ManualClock, Seconds
from streaming import Batch, ListSource, Pipeline, StreamingRuntime
from tests.support import advance


async def main(location: str) -> None:
    """Run the query on ``location`` until stdin says go, then two more batches."""
    seen: list[tuple[int, list[Any]]] = []

    async def record(batch: Batch) -> None:
        seen.append((batch.time.milliseconds, list(batch.inputs["in"])))

    pipeline = Pipeline()
    pipeline.add_source(ListSource(list("abcdef"), max_per_batch=2), name="in")
    pipeline.add_output(record, name="out")
    clock = ManualClock(0)
    async with StreamingRuntime(pipeline, Seconds(1), clock=clock, checkpoint_location=location) as runtime:
        await runtime.start()
        await advance(runtime, clock)
        assert runtime.tracker is not None
        print("ready", os.getpid(), runtime.tracker.run_id, flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        await advance(runtime, clock, times=2)
        await runtime.stop()
    print("outputs", json.dumps(seen), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
