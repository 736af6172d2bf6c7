"""The process the DStream crash test kills: a checkpointed file-stream program made by getOrCreate.

Usage: ``python tests/streaming/dstream_crash_child.py IN OUT CHECKPOINT STOPFILE``.

Every 2 s batch saves its lines to ``OUT/lines-<ms>`` and the running count of all lines so far
(``updateStateByKey``) to ``OUT/count-<ms>``. It stops gracefully once ``STOPFILE`` exists
(or after ``MAX_RUN_S``), unless it is killed first. It prints ``started`` once the context
runs, so the test knows when to write input.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable

MAX_RUN_S = 180


def spark_context(app_name: str) -> Any:
    """The child's local[2] Spark, or the test cluster's (the engine's log on stderr if AIODSTREAM_CRASH_LOG_LEVEL says so)."""
    level = os.environ.get("AIODSTREAM_CRASH_LOG_LEVEL")
    if level is not None:  # the engine's log on stderr, for debugging a failing run
        logging.basicConfig(level=int(level), stream=sys.stderr)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import aiodstream's task code
    from pyspark import SparkConf, SparkContext

    conf = (SparkConf().setMaster("local[2]").setAppName(app_name).set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false"))
    manager = os.environ.get("AIODSTREAM_CRASH_FILE_MANAGER")
    if manager:  # the checkpoint through Hadoop's FileSystem API (the crash test's hadoop variant)
        conf.set("spark.aiodstream.checkpoint.fileManager", manager)
    from tests.cluster import APP_CONF, MASTER_VARIABLE

    master = os.environ.get(MASTER_VARIABLE)
    if master:  # the crash test run on the test cluster (tests/streaming/test_cluster.py)
        conf.setMaster(master).setAll(list(APP_CONF.items()))
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    return sc


def run_until_stopped(checkpoint: str, setup: Callable[[], Any], stop_file: str) -> None:
    """getOrCreate, start, say ``started``, run until ``stop_file`` appears (or MAX_RUN_S), stop gracefully."""
    from streaming import StreamingContext

    ssc = StreamingContext.getOrCreate(checkpoint, setup)
    ssc.start()
    print("started", flush=True)
    for _ in range(MAX_RUN_S * 5):
        if os.path.exists(stop_file) or ssc.awaitTerminationOrTimeout(0.2):
            break
    ssc.stop(stopSparkContext=True, stopGraceFully=True)
    print("stopped", flush=True)


def main(in_dir: str, out_dir: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the program until ``stop_file`` appears."""
    from streaming import StreamingContext

    sc = spark_context("dstream-crash-child")

    def setup() -> StreamingContext:
        ssc = StreamingContext(sc, 2)
        lines = ssc.textFileStream(in_dir)
        lines.saveAsTextFiles(f"{out_dir}/lines")
        counts = lines.map(lambda line: ("lines", 1)).updateStateByKey(lambda new, old: sum(new) + (old or 0))
        counts.checkpoint(4)
        counts.saveAsTextFiles(f"{out_dir}/count")
        ssc.checkpoint(checkpoint)
        return ssc

    run_until_stopped(checkpoint, setup, stop_file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
