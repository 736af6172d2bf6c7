"""The process the sessionization crash test kills: a getOrCreate program closing click sessions by event time.

Usage: ``python tests/streaming/groups/sessions_crash_child.py IN OUT CHECKPOINT STOPFILE``.

Lines ``user,event_time_ms`` arrive as files in IN; a session per user closes 30 minutes of event
time after its last click (``flatMapGroupsWithState``, event-time timeout, watermark 10 minutes
behind the latest click). Every 1 s batch saves the sessions it closed to ``OUT/sessions-<ms>``
as ``user|clicks|first|last``. It prints ``started`` once running and stops gracefully once
STOPFILE exists, unless it is killed first.
"""

from __future__ import annotations

import sys
from typing import Any, Iterator

from tests.crash import child_spark_context, run_until_stopped

GAP_MS = 30 * 60_000


def session(user: str, times: Iterator[int], state: Any) -> Iterator[str]:
    """Count a user's clicks; emit the session when its timeout fires."""
    if state.hasTimedOut:
        clicks, first, last = state.get
        state.remove()
        yield f"{user}|{clicks}|{first}|{last}"
        return
    clicks, first, last = state.getOption or (0, None, None)
    for t in times:
        clicks += 1
        first = t if first is None else min(first, t)
        last = t if last is None else max(last, t)
    state.update((clicks, first, last))
    state.setTimeoutTimestamp(last + GAP_MS)


def main(in_dir: str, out_dir: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the program until ``stop_file`` appears."""
    from streaming import StreamingContext

    sc = child_spark_context("sessions-crash-child")

    def setup() -> StreamingContext:
        ssc = StreamingContext(sc, 1)
        clicks = ssc.textFileStream(in_dir).map(lambda line: (line.split(",")[0], int(line.split(",")[1])))
        closed = (clicks.withWatermark(lambda click: click[1], "10 minutes")
                  .flatMapGroupsWithState(session, "append", "EventTimeTimeout", numPartitions=2,
                                          eventTime=lambda t: t))
        closed.saveAsTextFiles(f"{out_dir}/sessions")
        ssc.checkpoint(checkpoint)
        return ssc

    run_until_stopped(checkpoint, setup, stop_file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
