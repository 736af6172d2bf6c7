"""The process the DStream crash test kills: a checkpointed file-stream program made by getOrCreate.

Usage: ``python tests/streaming/dstream_crash_child.py IN OUT CHECKPOINT STOPFILE``.

Every 2 s batch saves its lines to ``OUT/lines-<ms>`` and the running count of all lines so far
(``updateStateByKey``) to ``OUT/count-<ms>``. It stops gracefully once ``STOPFILE`` exists
(or after ``tests.crash.MAX_RUN_S``), unless it is killed first. It prints ``started`` once the context
runs, so the test knows when to write input.
"""

from __future__ import annotations

import sys

from tests.crash import child_spark_context, run_until_stopped


def main(in_dir: str, out_dir: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the program until ``stop_file`` appears."""
    from streaming import StreamingContext

    sc = child_spark_context("dstream-crash-child")

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
