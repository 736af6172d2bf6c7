"""A program started with spark-submit, or with plain ``python``: the embedded SparkContext it gets."""

from __future__ import annotations

import json

import anyio

from streaming import StreamingContext


async def main() -> None:
    async with StreamingContext(batchDuration=1) as ssc:  # no SparkContext given: the embedded one
        sc = ssc.sparkContext
        print(json.dumps({"master": sc.master, "app": sc.appName, "parallelism": sc.defaultParallelism,
                          "progress": sc.getConf().get("spark.ui.showConsoleProgress")}))


if __name__ == "__main__":
    anyio.run(main)
