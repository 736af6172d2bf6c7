"""Stateful word count: a running count of every word seen so far, kept with ``updateStateByKey``.

Each batch takes the next group of lines from a queue; the state (word -> count since the start)
lives in checkpointed RDDs, as in pyspark's ``stateful_network_wordcount.py``. It stops by itself
after ``--batches`` batches and prints the final running counts.

    python examples/stateful_wordcount.py --batches 4 --interval 1
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from typing import Any, Iterable

from streaming import StreamingContext, StreamingListener

LINES = [
    "a rose is a rose",
    "is a rose a rose",
    "the rose is red",
    "a red red rose",
    "roses are red",
    "violets are blue",
]


class StopAfter(StreamingListener):
    """Signals once ``wanted`` batches have completed."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.completed = 0
        self.done = threading.Event()

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803 - pyspark's names
        self.completed += 1
        if self.completed >= self.wanted:
            self.done.set()


def update(new_values: Iterable[int], running: int | None) -> int:
    """The new running count of a word: this batch's occurrences plus the count so far."""
    return sum(new_values) + (running or 0)


def main(batches: int, interval: float, remote: str | None = None) -> None:
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    if remote:  # a Spark Connect session: the same program, no SparkContext in this process
        sc: Any = SparkSession.builder.remote(remote).getOrCreate()
    else:
        sc = SparkContext.getOrCreate(SparkConf().setMaster("local[2]").setAppName("StatefulWordCount")
                                      .set("spark.ui.showConsoleProgress", "false"))
        sc.setLogLevel("WARN")
    with tempfile.TemporaryDirectory(prefix="aiodstream-checkpoint-") as checkpoint:
        ssc = StreamingContext(sc, interval)
        ssc.checkpoint(checkpoint)  # updateStateByKey needs a checkpoint directory, as in Spark
        stopper = StopAfter(batches)
        ssc.addStreamingListener(stopper)
        queued = [[LINES[i % len(LINES)]] for i in range(batches)]
        final: dict[str, int] = {}

        running = (ssc.queueStream(queued).flatMap(str.split).map(lambda word: (word, 1))
                   .updateStateByKey(update))

        def show(time: Any, rdd: Any) -> None:
            state = dict(rdd.collect())
            final.clear()
            final.update(state)
            print(f"{time:%H:%M:%S}", " ".join(f"{w}={n}" for w, n in sorted(state.items())))

        running.foreachRDD(show)
        ssc.start()
        if not stopper.done.wait(timeout=batches * interval + 120):
            raise SystemExit(f"only {stopper.completed} of {batches} batches completed in time")
        ssc.stop(stopSparkContext=True, stopGraceFully=True)

    print("final:", " ".join(f"{w}={n}" for w, n in sorted(final.items())))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=6, help="stop after this many batches")
    parser.add_argument("--interval", type=float, default=1.0, help="batch interval in seconds")
    parser.add_argument("--remote", help="run on this Spark Connect server (sc://host:port) instead of an embedded local Spark")
    args = parser.parse_args()
    try:
        main(args.batches, args.interval, args.remote)
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, quietly
        raise SystemExit(130) from None
