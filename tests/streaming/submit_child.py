"""A program started with spark-submit: its embedded SparkContext must be the one spark-submit configured."""

from __future__ import annotations

import json

import anyio

from streaming import StreamingContext


async def main() -> None:
    async with StreamingContext(batchDuration=1) as ssc:  # no SparkContext given: the embedded one
        sc = ssc.sparkContext
        print(json.dumps({"master": sc.master, "app": sc.appName, "parallelism": sc.defaultParallelism}))


if __name__ == "__main__":
    anyio.run(main)
