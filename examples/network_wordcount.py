"""Network word count: words of the text lines read from a TCP socket, counted per batch.

A pyspark.streaming program with only the import changed. To be self-contained it starts its own
small line server on localhost (pyspark's version reads from ``nc -lk 9999``; pass ``--port`` to
read from such a server instead). It stops by itself after ``--batches`` batches.

    python examples/network_wordcount.py --batches 5 --interval 1
"""

from __future__ import annotations

import argparse
import random
import threading
from contextlib import ExitStack
from operator import add
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread

from streaming import StreamingContext, StreamingListener

WORDS = "to be or not to be that is the question whether tis nobler in the mind".split()


class LineServer:
    """Serves random lines to every client, a burst every ``tick_s`` seconds; counts the words sent."""

    def __init__(self, lines_per_tick: int, tick_s: float, seed: int) -> None:
        self.lines_per_tick = lines_per_tick
        self.tick_s = tick_s
        self.rng = random.Random(seed)
        self.words_sent = 0

    async def serve(self, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen on an ephemeral localhost port, report it, and serve until cancelled."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener:
            task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
            await listener.serve(self._feed)

    async def _feed(self, client: anyio.abc.SocketStream) -> None:
        async with client:
            while True:
                lines = [" ".join(self.rng.choices(WORDS, k=self.rng.randint(3, 9))) for _ in range(self.lines_per_tick)]
                self.words_sent += sum(len(line.split()) for line in lines)
                try:
                    await client.send("".join(f"{line}\n" for line in lines).encode())
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                await anyio.sleep(self.tick_s)


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


def main(batches: int, interval: float, port: int | None, seed: int) -> None:
    from pyspark import SparkConf, SparkContext

    sc = SparkContext.getOrCreate(SparkConf().setMaster("local[2]").setAppName("NetworkWordCount")
                                  .set("spark.ui.showConsoleProgress", "false"))
    sc.setLogLevel("WARN")
    with ExitStack() as stack:
        server = None
        if port is None:
            server = LineServer(lines_per_tick=10, tick_s=interval / 2, seed=seed)
            portal = stack.enter_context(anyio.from_thread.start_blocking_portal())
            serving, port = portal.start_task(server.serve)
            stack.callback(serving.cancel)

        ssc = StreamingContext(sc, interval)
        stopper = StopAfter(batches)
        ssc.addStreamingListener(stopper)
        totals: dict[str, int] = {}

        lines = ssc.socketTextStream("localhost", port)
        counts = lines.flatMap(lambda line: line.split(" ")).map(lambda word: (word, 1)).transform(
            lambda rdd: rdd.reduceByKey(add))

        def show_and_total(time: Any, rdd: Any) -> None:
            # One Spark job per batch; pyspark's example uses counts.pprint(), which works too.
            batch = sorted(rdd.collect(), key=lambda kv: (-kv[1], kv[0]))
            print(f"{time:%H:%M:%S.%f}"[:-3], " ".join(f"{w}={n}" for w, n in batch[:6]) or "(no words)")
            for word, n in batch:
                totals[word] = totals.get(word, 0) + n

        counts.foreachRDD(show_and_total)
        ssc.start()
        if not stopper.done.wait(timeout=batches * interval + 120):
            raise SystemExit(f"only {stopper.completed} of {batches} batches completed in time")
        ssc.stop(stopSparkContext=True, stopGraceFully=True)

    counted = sum(totals.values())
    print(f"counted {counted} words in {stopper.completed} batches"
          + ("" if server is None else f" (the server sent {server.words_sent})"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=10, help="stop after this many batches")
    parser.add_argument("--interval", type=float, default=1.0, help="batch interval in seconds")
    parser.add_argument("--port", type=int, default=None, help="read from this localhost port instead of the built-in server")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    try:
        main(args.batches, args.interval, args.port, args.seed)
    except KeyboardInterrupt:  # Ctrl-C (pyspark's handler cancels the running jobs first): exit quietly
        raise SystemExit(130) from None
