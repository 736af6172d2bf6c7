"""Heartbeat monitor: a device is reported offline after 10 seconds without a heartbeat.

``mapGroupsWithState`` with a processing-time timeout: every heartbeat moves its device's
timeout to 10 s after the batch that carried it; a device whose timeout passes with no new
heartbeat is reported offline in the first batch after that, even though no input arrives for
it (batches without input still run the timeouts). Three devices beat every batch; ``sensor-2``
stops after the second batch. Run time: about the timeout plus a few batches.

    python examples/heartbeat_monitor.py --timeout 10 --interval 1
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from typing import Any, Iterator

from pyspark.sql import SparkSession

from streaming import StreamingContext, StreamingListener
from streaming.state import GroupState, GroupStateTimeout

DEVICES = ["sensor-1", "sensor-2", "sensor-3"]


def beats(batch: int) -> list[str]:
    """The devices heard in one batch."""
    return [d for d in DEVICES if d != "sensor-2" or batch < 2]


def make_monitor(timeout_ms: int) -> Any:
    def monitor(device: str, heartbeats: Iterator[str], state: GroupState) -> tuple[str, str]:
        """One line per device per batch it is heard in, and one when it goes quiet."""
        if state.hasTimedOut:
            state.remove()
            return (device, "offline")
        state.update((state.getOption or 0) + sum(1 for _ in heartbeats))
        state.setTimeoutDuration(timeout_ms)
        return (device, f"online ({state.get} heartbeats)")

    return monitor


class OfflineWatch(StreamingListener):
    """Signals once a device was reported offline and one more batch has completed after it."""

    def __init__(self, seen: list[tuple[str, str]]) -> None:
        self.seen = seen
        self.after = 0
        self.done = threading.Event()

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803 - pyspark's names
        if any(status == "offline" for _, status in self.seen):
            self.after += 1
            if self.after >= 2:
                self.done.set()


def main(timeout_s: float, interval: float, limit_s: float, remote: str | None = None) -> None:
    seen: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="aiodstream-heartbeats-") as checkpoint:
        spark = SparkSession.builder.remote(remote).getOrCreate() if remote else None  # Spark Connect, or none
        ssc = StreamingContext(spark, interval)  # without a session: an embedded local Spark
        ssc.checkpoint(checkpoint)
        watch = OfflineWatch(seen)
        ssc.addStreamingListener(watch)
        batches = int(timeout_s / interval) + 10
        stream = ssc.queueStream([beats(i) for i in range(batches)], oneAtATime=True, default=[])
        status = (stream.map(lambda device: (device, device))
                  .mapGroupsWithState(make_monitor(int(timeout_s * 1000)), GroupStateTimeout.ProcessingTimeTimeout))
        status.foreachRDD(lambda rdd: seen.extend(rdd.collect()))
        ssc.start()
        finished = watch.done.wait(limit_s)
        ssc.stop(stopSparkContext=True, stopGraceFully=False)
    offline = [device for device, state in seen if state == "offline"]
    print(f"offline: {', '.join(offline) or 'none'}")
    print(f"still online: {', '.join(d for d in DEVICES if d not in offline)}")
    if not finished:
        raise SystemExit(f"no device went offline within {limit_s} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds of silence before a device is offline")
    parser.add_argument("--interval", type=float, default=1.0, help="batch interval in seconds")
    parser.add_argument("--limit", type=float, default=120.0, help="give up after this many seconds")
    parser.add_argument("--remote", help="run on this Spark Connect server (sc://host:port) instead of an embedded local Spark")
    args = parser.parse_args()
    try:
        main(args.timeout, args.interval, args.limit, args.remote)
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, quietly
        raise SystemExit(130) from None
