"""A pyspark-style program for the logging test: three batches quiet, then three with the host's logging on.

Usage: logging_child.py

Phase one runs with logging unconfigured: stdout must hold only what ``pprint`` prints. Then the
program configures logging as a host would (``logging.basicConfig`` at INFO, on stderr) and runs
three more batches on a second context.
"""

from __future__ import annotations

import logging
import sys
import threading


def run_three_batches(sc: object, label: str) -> None:
    """Three queued batches through map and pprint; returns after the third completes."""
    from streaming import StreamingContext, StreamingListener

    done = threading.Event()

    class Count(StreamingListener):  # type: ignore[misc]
        seen = 0

        def onBatchCompleted(self, batchCompleted: object) -> None:  # noqa: N803 (pyspark's name)
            Count.seen += 1
            if Count.seen == 3:
                done.set()

    ssc = StreamingContext(sc, 0.5)
    ssc.addStreamingListener(Count())
    ssc.queueStream([[f"{label}-{i}-a", f"{label}-{i}-b"] for i in range(3)], oneAtATime=True).map(str.upper).pprint()
    ssc.start()
    if not done.wait(60):
        raise SystemExit("three batches did not complete within 60 s")
    ssc.stop(stopSparkContext=False, stopGraceFully=True)


def main() -> None:
    """Phase one quiet, phase two with logging configured by the host."""
    from pyspark import SparkConf, SparkContext

    conf = (SparkConf().setMaster("local[2]").setAppName("logging-child").set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false"))
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    run_three_batches(sc, "quiet")
    print("== logging on ==", flush=True)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="LOG %(levelname)s %(name)s %(message)s")
    run_three_batches(sc, "logged")
    sc.stop()


if __name__ == "__main__":
    main()
