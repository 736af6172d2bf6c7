"""The process the continuous crash tests kill: append-only files to a file sink, continuous, checkpointed.

Usage: ``python tests/streaming/continuous/crash_child.py IN0 IN1 OUT CHECKPOINT STOPFILE [spark|threads]``.

Reads the two files (one partition each) from their byte offsets, upper-cases the lines that do
not end in ``7``, and writes them with the epoch-committing FileSink, in 150 ms epochs (``spark``,
the default: a getOrCreate program on Spark) or 20 ms epochs (``threads``: a ContinuousExecution
whose tasks are threads of this process, no JVM). It kills itself at a chosen moment:

- ``AIODSTREAM_CONTINUOUS_KILL=<point>:<epoch>``, in that epoch's commit on the driver:
  ``before-sink`` (the tasks' files written, nothing renamed) or ``after-sink`` (the sink
  committed, the commits log not yet);
- ``AIODSTREAM_KILL_AT=offsets-linked`` (:func:`tests.crash.install_kill_point`): the
  ``AIODSTREAM_KILL_AFTER``-th offsets entry this run writes is in place, its epoch not
  committed (``offsets-temp``: written, not linked; ``commits-temp``/``commits-linked`` likewise).

Each epoch the sink commits is appended to ``<OUT>/../sink-commits.log`` (an epoch the sink had
already committed is not). Prints ``started`` once running; stops gracefully once STOPFILE exists.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from streaming.continuous import FileSink
from tests.crash import child_spark_context, install_kill_point, run_until_stopped


class KillingFileSink(FileSink):
    """The file sink, dying at a chosen moment of one epoch's commit, and noting each epoch it commits."""

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:
        point, _, at = os.environ.get("AIODSTREAM_CONTINUOUS_KILL", "").partition(":")
        due = bool(at) and epoch >= int(at)
        if due and point == "before-sink":
            os.kill(os.getpid(), signal.SIGKILL)
        already = self.has_committed(epoch)
        super().commit_epoch(epoch, messages)
        if not already:
            with open(Path(self.path).parent / "sink-commits.log", "a") as log:
                log.write(f"{epoch}\n")
        if due and point == "after-sink":
            os.kill(os.getpid(), signal.SIGKILL)


def keep(line: str) -> bool:
    return not line.endswith("7")


def main(in0: str, in1: str, out: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the program on Spark until ``stop_file`` appears."""
    from streaming import StreamingContext
    from streaming.continuous import Continuous, FileSource

    sc = child_spark_context("continuous-crash-child")

    def setup() -> StreamingContext:
        ssc = StreamingContext(sc, Continuous("150 milliseconds"))
        ssc.continuousStream(FileSource([in0, in1])).filter(keep).map(str.upper).writeTo(KillingFileSink(out))
        ssc.checkpoint(checkpoint)
        return ssc

    run_until_stopped(checkpoint, setup, stop_file)


async def main_threads(in0: str, in1: str, out: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the query with its tasks on threads until ``stop_file`` appears, then stop gracefully."""
    import anyio

    from scheduler import Seconds
    from streaming.continuous import Continuous, ContinuousExecution, ContinuousStream, FileSource, ThreadTaskLauncher

    plan = ContinuousStream(FileSource([in0, in1])).filter(keep).map(str.upper).to(KillingFileSink(out))
    options = {"spark.sql.streaming.continuous.executorPollIntervalMs": 5}
    # A loaded machine may need more than the default 10 epochs for the last epoch's commit: the stop is
    # to complete it (a timed-out graceful stop goes on as an immediate one, leaving that epoch's task files).
    async with ContinuousExecution(plan, Continuous(20), launcher=ThreadTaskLauncher(), checkpoint_location=checkpoint,
                                   options=options, graceful_stop_timeout=Seconds(60)) as query:
        await query.start()
        print("started", flush=True)
        while not await anyio.Path(stop_file).exists() and query.exception() is None:
            with anyio.move_on_after(0.05):
                await query.wait_for_epoch(query.last_committed_epoch + 1)
        await query.stop(graceful=True)
        if query.exception() is not None:
            raise query.exception()  # type: ignore[misc]


if __name__ == "__main__":
    ck = os.path.abspath(sys.argv[4])
    install_kill_point(lambda target: os.path.basename(os.path.dirname(target))
                       if os.path.dirname(os.path.dirname(os.path.abspath(target))) == ck else None)
    if sys.argv[6:7] == ["threads"]:
        import logging

        import anyio

        level = os.environ.get("AIODSTREAM_CRASH_LOG_LEVEL")  # the engine's log on stderr, for debugging a failing run
        logging.basicConfig(level=int(level) if level else logging.WARNING, stream=sys.stderr)

        anyio.run(main_threads, *sys.argv[1:6])
    else:
        main(*sys.argv[1:6])
