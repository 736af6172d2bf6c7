"""The process the continuous crash test kills: a getOrCreate continuous program, append-only files to a file sink.

Usage: ``python tests/streaming/continuous/crash_child.py IN0 IN1 OUT CHECKPOINT STOPFILE``.

Reads the two files (one partition each) from their byte offsets, upper-cases the lines that do
not end in ``7``, and writes them with the epoch-committing FileSink, in 150 ms epochs. With
``AIODSTREAM_CONTINUOUS_KILL=<point>:<epoch>`` it SIGKILLs itself at that point of that epoch's
commit on the driver: ``before-sink`` (the tasks' files written, nothing renamed) or
``after-sink`` (the sink committed, the commits log not yet). Prints ``started`` once running.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from streaming.continuous import FileSink


class KillingFileSink(FileSink):
    """The file sink, dying at a chosen moment of one epoch's commit."""

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:
        point, _, at = os.environ.get("AIODSTREAM_CONTINUOUS_KILL", "").partition(":")
        due = bool(at) and epoch >= int(at)
        if due and point == "before-sink":
            os.kill(os.getpid(), signal.SIGKILL)
        super().commit_epoch(epoch, messages)
        if due and point == "after-sink":
            os.kill(os.getpid(), signal.SIGKILL)


def keep(line: str) -> bool:
    return not line.endswith("7")


def main(in0: str, in1: str, out: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the program until ``stop_file`` appears."""
    from streaming import StreamingContext
    from streaming.continuous import Continuous, FileSource
    from tests.streaming.dstream_crash_child import run_until_stopped, spark_context

    sc = spark_context("continuous-crash-child")

    def setup() -> StreamingContext:
        ssc = StreamingContext(sc, Continuous("150 milliseconds"))
        ssc.continuousStream(FileSource([in0, in1])).filter(keep).map(str.upper).writeTo(KillingFileSink(out))
        ssc.checkpoint(checkpoint)
        return ssc

    run_until_stopped(checkpoint, setup, stop_file)


if __name__ == "__main__":
    main(*sys.argv[1:6])
