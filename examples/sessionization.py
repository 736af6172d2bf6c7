"""Sessionization: click sessions that close 30 minutes of event time after a user's last click.

``flatMapGroupsWithState`` with an event-time timeout under a watermark: each user's session
counts clicks and remembers its first and last click; a click sets the session's timeout to
30 minutes after its last click, and the session is reported closed once the watermark (the
latest click seen, minus 10 minutes of allowed lateness) passes that. A click that arrives after
the watermark has passed it is dropped as late. The clicks come from a queue, ten minutes of
event time per batch: user ``ada`` keeps clicking, ``bob`` stops after the second batch,
``cy`` clicks once. State lives in the checkpoint directory, in a state store per partition.

    python examples/sessionization.py --batches 8 --interval 0.5
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import threading
from typing import Any, Iterator

from pyspark.sql import SparkSession

from streaming import StreamingContext, StreamingListener
from streaming.state import GroupState, GroupStateTimeout

MINUTE = 60_000
START = datetime.datetime(2026, 11, 24, 9, 0, tzinfo=datetime.timezone.utc)


def clicks(batch: int) -> list[tuple[str, datetime.datetime]]:
    """The clicks of one batch: ten minutes of event time, ada every batch, bob in the first two, cy once."""
    at = START + datetime.timedelta(minutes=10 * batch)
    out = [("ada", at + datetime.timedelta(minutes=2)), ("ada", at + datetime.timedelta(minutes=7))]
    if batch < 2:
        out.append(("bob", at + datetime.timedelta(minutes=5)))
    if batch == 1:
        out.append(("cy", at + datetime.timedelta(minutes=1)))
    if batch == 5:
        out.append(("bob", START + datetime.timedelta(minutes=3)))  # very late: dropped
    return out


def session(user: str, events: Iterator[tuple[str, datetime.datetime]], state: GroupState) -> Iterator[str]:
    """Count a user's clicks; report the session when it times out."""
    if state.hasTimedOut:
        count, first, last = state.get
        state.remove()
        yield f"session closed: {user}, {count} click(s), {first:%H:%M}-{last:%H:%M}"
        return
    count, first, last = state.getOption or (0, None, None)
    for _, at in events:
        count += 1
        first = at if first is None else min(first, at)
        last = at if last is None else max(last, at)
    state.update((count, first, last))
    state.setTimeoutTimestamp(last + datetime.timedelta(minutes=30))


class StopAfter(StreamingListener):
    """Signals once ``wanted`` batches have completed."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.completed = 0
        self.done = threading.Event()

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803 - pyspark's names
        self.completed += 1
        if self.completed >= self.wanted:
            self.done.set()


def main(batches: int, interval: float, remote: str | None = None) -> None:
    reported: list[str] = []
    with tempfile.TemporaryDirectory(prefix="aiodstream-sessions-") as checkpoint:
        spark = SparkSession.builder.remote(remote).getOrCreate() if remote else None  # Spark Connect, or none
        ssc = StreamingContext(spark, interval)  # without a session: an embedded local Spark
        ssc.checkpoint(checkpoint)  # the state store lives here
        stopper = StopAfter(batches)
        ssc.addStreamingListener(stopper)
        stream = ssc.queueStream([clicks(i) for i in range(batches)], oneAtATime=True, default=[])
        closed = (stream.withWatermark(lambda click: click[1], "10 minutes")
                  .map(lambda click: (click[0], click))
                  .flatMapGroupsWithState(session, "append", GroupStateTimeout.EventTimeTimeout))
        closed.foreachRDD(lambda rdd: reported.extend(rdd.collect()))
        ssc.start()
        stopper.done.wait()
        ssc.stop(stopSparkContext=True, stopGraceFully=True)
    for line in reported:
        print(line)
    print(f"{len(reported)} sessions closed in {batches} batches")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--interval", type=float, default=0.5, help="batch interval in seconds")
    parser.add_argument("--remote", help="run on this Spark Connect server (sc://host:port) instead of an embedded local Spark")
    args = parser.parse_args()
    try:
        main(args.batches, args.interval, args.remote)
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, quietly
        raise SystemExit(130) from None
