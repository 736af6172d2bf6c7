"""The process the crash test kills: a directory-to-FileSink pipeline, checkpointed, on the system clock.

Usage: ``python tests/streaming/crash_child.py IN OUT CHECKPOINT run|drain INTERVAL_MS asyncio|trio``.

``run`` processes on the batch grid until it is killed (or for at most ``MAX_RUN_S``); ``drain``
uses the AvailableNow trigger and exits once everything is processed. With
``AIODSTREAM_KILL_AT=<point>`` and ``AIODSTREAM_KILL_AFTER=<n>`` it SIGKILLs itself at the
n-th time it reaches that point, having first noted the point in ``kills.log`` of
``AIODSTREAM_KILL_LOG`` (:func:`tests.crash.install_kill_point`).
The points are moments inside file writes that a kill from outside would rarely hit:

- ``offsets-temp`` / ``commits-temp`` / ``sink-temp``: a temp file is written, not yet linked;
- ``offsets-linked``: the offsets entry is in place, no job of the batch has run;
- ``sink-linked``: the batch's output is in place, its commit is not;
- ``commits-linked``: the commit is in place, the purge and the next batch are not.

``AIODSTREAM_CRASH_LOG_LEVEL=20`` shows the engine's info logs on stderr, for debugging.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Callable

import anyio

from tests.crash import install_kill_point

MAX_RUN_S = 20


def kind_of(out: Path) -> Callable[[str], str | None]:
    """The kill points' names for a file put at ``target``: ``sink`` in OUT, ``offsets``/``commits`` in the checkpoint."""

    def kind(target: str) -> str | None:
        parent = Path(target).parent
        if parent == out:
            return "sink"
        return parent.name if parent.name in ("offsets", "commits") else None

    return kind


async def main(source: Path, out: Path, checkpoint: Path, mode: str, interval_ms: int) -> None:
    from streaming import DirectorySource, FileSink, Milliseconds, Pipeline, StreamingRuntime, Trigger

    pipeline = Pipeline()
    pipeline.add_source(DirectorySource(source), name="in")
    pipeline.add_output(FileSink(out), name="sink")
    trigger = Trigger.AVAILABLE_NOW if mode == "drain" else Trigger.PROCESSING_TIME
    async with StreamingRuntime(pipeline, Milliseconds(interval_ms), checkpoint_location=checkpoint, trigger=trigger,
                                name="crash-test") as rt:
        await rt.start()
        print("started", flush=True)
        if mode == "drain":
            await rt.await_termination()
        else:
            with anyio.move_on_after(MAX_RUN_S):
                await rt.await_termination()
            await rt.stop()


if __name__ == "__main__":
    # Errors go to stderr (a file the test shows on failure); stdout only says "started".
    logging.basicConfig(level=int(os.environ.get("AIODSTREAM_CRASH_LOG_LEVEL", logging.ERROR)), stream=sys.stderr)
    source, out, checkpoint = (Path(a) for a in sys.argv[1:4])
    install_kill_point(kind_of(out))
    anyio.run(main, source, out, checkpoint, sys.argv[4], int(sys.argv[5]), backend=sys.argv[6])
