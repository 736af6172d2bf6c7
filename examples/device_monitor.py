"""Device monitor with ``transformWithState`` and time-to-live: state that forgets devices that stop reporting.

Each device's processor keeps its last reading in a ``ValueState`` and its recent readings in a
``ListState``, both with a time-to-live of three batch intervals of processing time: a value
written at batch time t is gone at exactly t + ttl, each list element on its own, and only a write
extends it. So the average covers the readings of the last three intervals, and a processing-time
timer set three intervals after each reading finds the last reading gone, and reports the device
offline, once the device has been silent that long. ``pump`` reports every batch, ``fan`` for the
first three batches, ``door`` once.

    python examples/device_monitor.py --batches 8 --interval 0.5
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from typing import Any, Iterator

from pyspark.sql import SparkSession

from streaming import StreamingContext, StreamingListener
from streaming.state import ExpiredTimerInfo, StatefulProcessor, StatefulProcessorHandle, TimerValues


def readings(batch: int) -> list[tuple[str, int]]:
    """Batch ``batch``'s readings ``(device, value)``."""
    out = [("pump", 10 + batch)]
    if batch < 3:
        out.append(("fan", 100 * (batch + 1)))
    if batch == 1:
        out.append(("door", 1))
    return out


class Monitor(StatefulProcessor):
    """One device: its last reading and the average of its recent ones; offline once its last reading expired."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.last = handle.getValueState("last", "value long", ttlDurationMs=self.ttl_ms)
        self.recent = handle.getListState("recent", "value long", ttlDurationMs=self.ttl_ms)

    def handleInputRows(self, device: str, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[str]:  # noqa: N803
        values = [value for _, value in rows]
        was_online = self.last.exists()
        self.last.update(values[-1])
        self.recent.appendList(values)
        recent = list(self.recent.get())
        for expiry in list(self.handle.listTimers()):
            self.handle.deleteTimer(expiry)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + self.ttl_ms)
        status = "reporting" if was_online else "online"
        yield f"{device} {status}: last {values[-1]}, average {sum(recent) / len(recent):g} of {len(recent)}"

    def handleExpiredTimer(self, device: str, timerValues: TimerValues,  # noqa: N803
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[str]:  # noqa: N803
        if not self.last.exists():  # written at expiry - ttl: gone at exactly the timer's time
            yield f"{device} offline: silent for 3 intervals, {len(list(self.recent.get()))} readings left"


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
    reported: list[tuple[int, str]] = []
    ttl_ms = round(3 * interval * 1000)
    with tempfile.TemporaryDirectory(prefix="aiodstream-devices-") as checkpoint:
        spark = SparkSession.builder.remote(remote).getOrCreate() if remote else None  # Spark Connect, or none
        ssc = StreamingContext(spark, interval)  # without a session: an embedded local Spark
        ssc.checkpoint(checkpoint)  # the state stores live here
        stopper = StopAfter(batches)
        ssc.addStreamingListener(stopper)
        stream = ssc.queueStream([readings(i) for i in range(batches)], oneAtATime=True, default=[])
        reports = stream.map(lambda r: (r[0], r)).transformWithState(Monitor(ttl_ms), "Update", "ProcessingTime")
        batch_times: list[Any] = []

        def collect(time: Any, rdd: Any) -> None:  # every batch, in order: its number is how many came before
            batch_times.append(time)
            reported.extend((len(batch_times) - 1, line) for line in sorted(rdd.collect()))

        reports.foreachRDD(collect)
        ssc.start()
        stopper.done.wait()
        ssc.stop(stopSparkContext=True, stopGraceFully=True)
        progress = list(ssc.runtime.recent_progress)  # every batch's, the last one's included
    shown = [(batch, line) for batch, line in reported if batch < batches]  # a late stop may have run one more
    for batch, line in shown:
        print(f"batch {batch}: {line}")
    evicted = sum(p.state_operators[0].custom_metrics.get("numValuesRemovedDueToTTLExpiry", 0)
                  for p in progress if p.state_operators and p.batch_id < batches)
    print(f"{len(shown)} reports in {batches} batches; {evicted} values removed by their time-to-live")


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
