"""An asyncio service with a streaming context inside: async source in, async sink out.

The service receives click events on an in-process channel (standing in for a web handler or a
message consumer), counts clicks per page every batch on an embedded local Spark, and writes each
batch's counts to an async store. Its own tasks (here a heartbeat) keep running while batches
do: Spark calls go to worker threads, never to the loop. It stops by itself, gracefully, once
``--batches`` batches completed: a graceful stop also runs the batches already due (on a busy
machine the first batch's Python workers take seconds to start, and the ticks meanwhile queue
up), so more batches may be stored than asked for, as in Spark.

    python examples/async_service.py --batches 4 --interval 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import random
from datetime import datetime
from operator import add
from typing import Any

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectSendStream

from listeners import EventRecorder
from streaming import StreamingContext

PAGES = ["/", "/pricing", "/docs", "/blog", "/signup"]


class AsyncStore:
    """A stand-in for an async database client: each write awaits I/O."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, int]] = {}

    async def write(self, key: str, counts: dict[str, int]) -> None:
        await anyio.sleep(0.01)  # the network round trip
        self.rows[key] = counts


async def produce_clicks(send: MemoryObjectSendStream[dict[str, str]], seed: int) -> None:
    """Feed click events until the stream's receiver (the context's receiver) closes the channel."""
    rng = random.Random(seed)
    async with send:
        try:
            while True:
                await send.send({"user": f"u{rng.randint(1, 50)}", "page": rng.choice(PAGES)})
                await anyio.sleep(0.002)
        except anyio.BrokenResourceError:
            return  # the context stopped and closed its end


async def main(batches: int, interval: float, seed: int) -> None:
    store = AsyncStore()
    heartbeats = 0
    send, receive = anyio.create_memory_object_stream[dict[str, str]](max_buffer_size=1000)
    recorder = EventRecorder()

    async def heartbeat() -> None:
        nonlocal heartbeats
        while True:
            await anyio.sleep(0.05)
            heartbeats += 1

    async def save(time: datetime, rdd: Any) -> None:
        # An async output operation: runs on the service's loop; the Spark action goes to a thread.
        counts = dict(await anyio.to_thread.run_sync(rdd.collect))
        await store.write(f"{time:%H:%M:%S.%f}"[:-3], counts)

    async with StreamingContext(batchDuration=interval) as ssc:  # no SparkContext: an embedded local one
        ssc.addStreamingListener(recorder)
        clicks = ssc.asyncIterableStream(receive)
        clicks.map(lambda event: (event["page"], 1)).transform(lambda rdd: rdd.reduceByKey(add)).foreachRDD(save)
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce_clicks, send, seed)
            tg.start_soon(heartbeat)
            await ssc.start_async()
            with anyio.fail_after(batches * interval + 120):
                done = await recorder.wait_for_batches(batches)
            await ssc.stop_async(stopGraceFully=True)
            tg.cancel_scope.cancel()

    for info in done:
        print(f"batch {info.batch_time}: {info.num_records:5d} clicks | scheduling {info.scheduling_delay} | "
              f"processing {info.processing_delay} | total {info.total_delay}")
    for key, counts in sorted(store.rows.items()):
        print(f"stored {key}: " + " ".join(f"{page}={n}" for page, n in sorted(counts.items())))
    clicks_stored = sum(sum(c.values()) for c in store.rows.values())
    print(f"{len(store.rows)} batches stored, {clicks_stored} clicks; the loop beat {heartbeats} times meanwhile")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=5, help="stop after this many batches")
    parser.add_argument("--interval", type=float, default=1.0, help="batch interval in seconds")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    try:
        asyncio.run(main(args.batches, args.interval, args.seed))
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, quietly
        raise SystemExit(130) from None
