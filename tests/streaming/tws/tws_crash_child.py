"""The process the transformWithState crash test kills: a getOrCreate program closing click sessions with event-time timers.

Usage: ``python tests/streaming/tws/tws_crash_child.py IN OUT CHECKPOINT STOPFILE``.

Lines ``user,event_time_ms,page`` arrive as files in IN. Per user, a StatefulProcessor keeps the
click count (value state), the click times (list state) and the clicks per page (map state); an
event-time timer 30 minutes after the user's last click (watermark 10 minutes behind the latest
click) closes the session: it is emitted and the state cleared. (A click more than 30 minutes after
the held session's last closes it in the data pass: when batches run late, one batch may hold a
session's last clicks and the next session's first.) Every 1 s batch saves the sessions
it closed to ``OUT/sessions-<ms>`` as ``user|clicks|first|last|page=n;...``. It prints ``started``
once running and stops gracefully once STOPFILE exists, unless it is killed first.
"""

from __future__ import annotations

import sys
from typing import Any, Iterator

from streaming.state import ExpiredTimerInfo, StatefulProcessor, StatefulProcessorHandle, TimerValues
from tests.crash import child_spark_context, run_until_stopped

GAP_MS = 30 * 60_000


class Sessions(StatefulProcessor):
    """A click session per user in three kinds of state, closed by an event-time timer."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.clicks = handle.getValueState("clicks", "clicks long")
        self.times = handle.getListState("times", "at long")
        self.pages = handle.getMapState("pages", "page string", "clicks long")

    def handleInputRows(self, user: str, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[str]:  # noqa: N803
        times = list(self.times.get())
        last = max(times) if times else None
        if last is not None:
            self.handle.deleteTimer(last + GAP_MS)
        for _, at, page in sorted(rows, key=lambda row: row[1]):
            if last is not None and at > last + GAP_MS:
                # the held session ended before this click: a batch that held both (after a slow batch) closes it here
                yield self.end_session(user)
                last = None
            self.clicks.update((self.clicks.get() or 0) + 1)
            self.times.appendValue(at)
            self.pages.updateValue(page, (self.pages.getValue(page) or 0) + 1)
            last = at if last is None else max(last, at)
        if last is not None:
            self.handle.registerTimer(last + GAP_MS)

    def handleExpiredTimer(self, user: str, timerValues: TimerValues,  # noqa: N803
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[str]:  # noqa: N803
        yield self.end_session(user)

    def end_session(self, user: str) -> str:
        """The held session as a line; the state cleared."""
        times = list(self.times.get())
        pages = ";".join(f"{page}={n}" for page, n in sorted(self.pages.iterator()))
        line = f"{user}|{self.clicks.get()}|{min(times)}|{max(times)}|{pages}"
        self.clicks.clear()
        self.times.clear()
        self.pages.clear()
        return line


def parse(line: str) -> tuple[str, tuple[str, int, str]]:
    """``user,at,page`` as ``(user, (user, at, page))``."""
    user, at, page = line.split(",")
    return user, (user, int(at), page)


def main(in_dir: str, out_dir: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the program until ``stop_file`` appears."""
    from streaming import StreamingContext

    sc = child_spark_context("tws-crash-child")

    def setup() -> StreamingContext:
        ssc = StreamingContext(sc, 1)
        clicks = ssc.textFileStream(in_dir).map(parse)
        closed = (clicks.withWatermark(lambda click: click[1][1], "10 minutes")
                  .transformWithState(Sessions(), "Append", "EventTime", numPartitions=2, eventTime=lambda c: c[1]))
        closed.saveAsTextFiles(f"{out_dir}/sessions")
        ssc.checkpoint(checkpoint)
        return ssc

    run_until_stopped(checkpoint, setup, stop_file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
