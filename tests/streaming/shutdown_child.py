"""A pyspark-style program for the shutdown test: one batch whose output operation takes seconds.

Usage: shutdown_child.py <marker-directory> <stopGracefullyOnShutdown: true|false>
"""

from __future__ import annotations

import os
import sys
import time


def main(markers: str, graceful: str) -> None:
    """Run until stopped; the output operation writes ``started``, works 3 s, then writes ``done``."""
    from pyspark import SparkConf, SparkContext

    from streaming import StreamingContext

    conf = (SparkConf().setMaster("local[2]").setAppName("shutdown-child").set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false").set("spark.streaming.stopGracefullyOnShutdown", graceful))
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    ssc = StreamingContext(sc, 0.5)

    def slow(rdd: object) -> None:
        if os.path.exists(os.path.join(markers, "started")):
            return  # only the first batch works
        open(os.path.join(markers, "started"), "w").close()
        time.sleep(3)
        open(os.path.join(markers, "done"), "w").close()

    ssc.queueStream([[1, 2, 3]]).foreachRDD(slow)
    ssc.start()
    ssc.awaitTermination()
    print("awaitTermination returned", ssc.getState(), flush=True)
    ssc.stop(stopSparkContext=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
