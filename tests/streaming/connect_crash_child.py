"""The process the Connect crash test kills: a checkpointed stateful file-stream program on Spark Connect, made by getOrCreate.

Usage: ``python tests/streaming/connect_crash_child.py IN OUT CHECKPOINT STOPFILE``, with the Connect server's
URL (``sc://host:port/;token=...;session_id=...``) in ``AIODSTREAM_CRASH_CONNECT_URL``.

The program is ``dstream_crash_child.py``'s, on a Connect session: every batch (6 s: a Connect batch costs more
server round trips, and a program that falls behind its interval never catches up) saves its lines to
``OUT/lines-<ms>`` and the running count of all lines (``updateStateByKey``, its state snapshot written by the
server every 2 batches) to ``OUT/count-<ms>``. It stops gracefully once ``STOPFILE`` exists, unless killed first,
and prints ``started`` once the context runs.
"""

from __future__ import annotations

import logging
import os
import sys

from tests.crash import run_until_stopped

MAX_RUN_S = 1200
"""How long a run may go at the most (tests.crash's three minutes are too few here: at load 40 a Connect batch takes
10 s, and a restarted run first works through the batches of its down time)."""

URL_VARIABLE = "AIODSTREAM_CRASH_CONNECT_URL"
BATCH_SECONDS = 6


def main(in_dir: str, out_dir: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the program until ``stop_file`` appears."""
    from pyspark.sql.connect.session import SparkSession

    from streaming import StreamingContext

    level = os.environ.get("AIODSTREAM_CRASH_LOG_LEVEL")
    if level is not None:  # the engine's log on stderr, for debugging a failing run
        logging.basicConfig(level=int(level), stream=sys.stderr)
    # Every run of the program joins the same server-side session (its session_id), so that it can stop the queries a
    # killed run left running there: a dead client's queries run on (a server keeps them for a reattach), and one
    # still writing a batch's files would race this run's replay of that batch.
    spark = SparkSession.builder.remote(os.environ[URL_VARIABLE]).create()
    spark.interruptAll()

    def setup() -> StreamingContext:
        ssc = StreamingContext(spark, BATCH_SECONDS)
        lines = ssc.textFileStream(in_dir)
        lines.saveAsTextFiles(f"{out_dir}/lines")
        counts = lines.map(lambda line: ("lines", 1)).updateStateByKey(lambda new, old: sum(new) + (old or 0))
        counts.checkpoint(2 * BATCH_SECONDS)
        counts.saveAsTextFiles(f"{out_dir}/count")
        ssc.checkpoint(checkpoint)
        return ssc

    run_until_stopped(checkpoint, setup, stop_file, max_run_s=MAX_RUN_S)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
