"""The demo job: a word count on an embedded local Spark, printing each batch with its three delays.

Sentences arrive from an async source; every batch counts their words with a Spark job
(``reduceByKey``), and a listener prints the batch's record count, scheduling, processing and
total delay. After ``--batches`` batches it stops gracefully and exits. Starting Spark takes a few
seconds; ``--interval-ms`` and ``--seed`` change the run.
"""

from __future__ import annotations

import argparse
import logging
import random
from operator import add
from typing import Any

import anyio

from listeners import BatchCompleted, StreamingListener
from streaming import StreamingContext

WORDS = "the quick brown fox jumps over the lazy dog while the cat naps".split()


class PrintBatches(StreamingListener):
    """Prints one line per completed batch and signals when enough have completed."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.done = anyio.Event()
        self.seen = 0
        self.failed = 0

    def on_batch_completed(self, event: BatchCompleted) -> None:
        info = event.batch_info
        self.seen += 1
        self.failed += info.failed
        print(
            f"batch {info.batch_time}: {info.num_records:4d} records | "
            f"scheduling {info.scheduling_delay} | processing {info.processing_delay} | total {info.total_delay}"
        )
        if self.seen >= self.wanted:
            self.done.set()


async def main(batches: int, interval_ms: int, seed: int) -> None:
    rng = random.Random(seed)

    async def sentences() -> Any:
        while True:
            for _ in range(rng.randint(2, 6)):
                yield " ".join(rng.choices(WORDS, k=8))
            await anyio.sleep(interval_ms / 4000)

    def show_top(time: Any, rdd: Any) -> None:  # runs in a worker thread, inside the batch's Spark job group
        top = sorted(rdd.collect(), key=lambda kv: (-kv[1], kv[0]))[:3]
        print(f"  word count @ {time:%H:%M:%S.%f}"[:-3] + ": " + ", ".join(f"{w}={n}" for w, n in top))

    printer = PrintBatches(batches)
    async with StreamingContext(batchDuration=interval_ms / 1000) as ssc:  # embedded local Spark
        ssc.addStreamingListener(printer)
        words = ssc.asyncIterableStream(sentences).flatMap(str.split).map(lambda w: (w, 1))
        words.transform(lambda rdd: rdd.reduceByKey(add)).foreachRDD(show_top)
        await ssc.start_async()
        await printer.done.wait()
        await ssc.stop_async(stopGraceFully=True)
    print(f"done: {printer.seen} batches completed, {printer.failed} failed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--log", action="store_true",
                        help="also show the engine's log (one line per batch) on stderr; it is silent unless the host asks")
    args = parser.parse_args()
    if args.log:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        anyio.run(main, args.batches, args.interval_ms, args.seed)
    except KeyboardInterrupt:  # Ctrl-C: leaving `async with` stopped the context; exit as the shell expects, quietly
        raise SystemExit(130) from None
