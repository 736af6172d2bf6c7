"""The demo job: a word count on a live batch grid, printing each batch with its three delays.

Runs on the wall clock with a short batch interval, for a fixed number of batches, then stops
gracefully and exits. ``--batches`` and ``--interval-ms`` change the run.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter

import anyio

from listeners import BatchCompleted, StreamingListener
from scheduler import Milliseconds
from streaming import Batch, Pipeline, StreamingRuntime

WORDS = "the quick brown fox jumps over the lazy dog while the cat naps".split()


class PrintBatches(StreamingListener):
    """Prints one line per completed batch and signals when enough have completed."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.done = anyio.Event()
        self.seen = 0

    def on_batch_completed(self, event: BatchCompleted) -> None:
        info = event.batch_info
        self.seen += 1
        print(
            f"batch {info.batch_time}: {info.num_records:4d} records | "
            f"scheduling {info.scheduling_delay} | processing {info.processing_delay} | total {info.total_delay}"
        )
        if self.seen >= self.wanted:
            self.done.set()


async def main(batches: int, interval_ms: int, seed: int) -> None:
    rng = random.Random(seed)
    pipeline = Pipeline()

    def lines(time: object) -> list[str]:
        return [" ".join(rng.choices(WORDS, k=8)) for _ in range(rng.randint(20, 60))]

    pipeline.add_source(lines, name="lines")

    def word_count(batch: Batch) -> None:  # runs in a worker thread, as a Spark job would
        counts = Counter(word for line in batch.inputs["lines"] for word in line.split())
        top = ", ".join(f"{w}={n}" for w, n in counts.most_common(3))
        print(f"  word count @ {batch.time}: {top}")

    pipeline.add_output(word_count, name="word_count")
    printer = PrintBatches(batches)
    async with StreamingRuntime(pipeline, Milliseconds(interval_ms), name="demo") as runtime:
        runtime.add_listener(printer)
        await runtime.start()
        await printer.done.wait()
        await runtime.stop(graceful=True)
    stats = runtime.scheduler.statistics()
    print(f"done: {stats.batches_completed} batches completed, {stats.batches_failed} failed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--interval-ms", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    anyio.run(main, args.batches, args.interval_ms, args.seed)
