"""Fraud rules per card with ``transformWithState``: recent transactions, counts per merchant, an event-time timer.

Each card's processor keeps a ``ListState`` of its transactions of the last ten minutes of event
time and a ``MapState`` counting its transactions per merchant. It raises a velocity alert when
three or more transactions fall within ten minutes, and a repeat alert when one merchant reaches
three; an event-time timer, 30 minutes after the card's last transaction, reports the card quiet
and clears its state once the watermark (the latest transaction seen, minus five minutes) passes
it. A transaction at or before the previous batch's watermark is late and dropped. Each batch is
ten minutes of event time: card ``4111`` shops once a batch for four batches, ``4222`` makes three
quick purchases at one bar and one more, and the transit card ``9999`` rides every batch.

    python examples/fraud_detection.py --batches 8 --interval 0.5
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from typing import Any, Iterator

from pyspark.sql import SparkSession

from streaming import StreamingContext, StreamingListener
from streaming.state import ExpiredTimerInfo, StatefulProcessor, StatefulProcessorHandle, TimerValues

MINUTE = 60_000
START_MS = 1_795_000_000_000  # event time of the first batch's start
WINDOW = 10 * MINUTE
QUIET = 30 * MINUTE


def transactions(batch: int) -> list[tuple[str, str, float, int]]:
    """Batch ``batch``'s transactions ``(card, merchant, amount, event time ms)``: ten minutes of event time."""
    at = START_MS + batch * 10 * MINUTE
    out = [("9999", f"transit-{batch}", 2.5, at + 9 * MINUTE)]
    if batch < 4:
        out.append(("4111", f"shop-{batch % 3}", 20.0 + batch, at + 1 * MINUTE))
    if batch == 1:
        out += [("4222", "bar", 15.0, at + m * MINUTE) for m in (2, 3, 4)]
    if batch == 2:
        out.append(("4222", "kiosk", 9.0, at + 1 * MINUTE))
    if batch == 5:
        out.append(("4111", "shop-9", 999.0, START_MS + 2 * MINUTE))  # an hour late: dropped
    return out


class FraudRules(StatefulProcessor):
    """The rules of one card: velocity, repeated merchant, and a quiet report by event time."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.recent = handle.getListState("recent", "at long, merchant string, amount double")
        self.per_merchant = handle.getMapState("perMerchant", "merchant string", "count long")

    def handleInputRows(self, card: str, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[str]:  # noqa: N803
        new = sorted(((at, merchant, amount) for _, merchant, amount, at in rows))
        held = list(self.recent.get())
        if held:
            self.handle.deleteTimer(held[-1][0] + QUIET)
        newest = new[-1][0]
        recent = [t for t in held + new if t[0] > newest - WINDOW]
        self.recent.put(recent)
        self.handle.registerTimer(newest + QUIET)
        if len(recent) >= 3:
            yield f"ALERT velocity: card {card} made {len(recent)} transactions within 10 minutes"
        for _, merchant, _ in new:
            count = (self.per_merchant.getValue(merchant) or 0) + 1
            self.per_merchant.updateValue(merchant, count)
            if count == 3:
                yield f"ALERT repeat: card {card} paid {merchant} 3 times"

    def handleExpiredTimer(self, card: str, timerValues: TimerValues,  # noqa: N803
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[str]:  # noqa: N803
        counts = dict(self.per_merchant.iterator())
        yield f"card {card} quiet: {sum(counts.values())} transactions at {len(counts)} merchants"
        self.recent.clear()
        self.per_merchant.clear()


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
    with tempfile.TemporaryDirectory(prefix="aiodstream-fraud-") as checkpoint:
        spark = SparkSession.builder.remote(remote).getOrCreate() if remote else None  # Spark Connect, or none
        ssc = StreamingContext(spark, interval)  # without a session: an embedded local Spark
        ssc.checkpoint(checkpoint)  # the state stores live here
        stopper = StopAfter(batches)
        ssc.addStreamingListener(stopper)
        stream = ssc.queueStream([transactions(i) for i in range(batches)], oneAtATime=True, default=[])
        alerts = (stream.withWatermark(lambda t: t[3], "5 minutes")
                  .map(lambda t: (t[0], t))
                  .transformWithState(FraudRules(), "Append", "EventTime"))
        batch_times: list[Any] = []

        def collect(time: Any, rdd: Any) -> None:  # every batch, in order: its number is how many came before
            batch_times.append(time)
            reported.extend((len(batch_times) - 1, line) for line in sorted(rdd.collect()))

        alerts.foreachRDD(collect)
        ssc.start()
        stopper.done.wait()
        ssc.stop(stopSparkContext=True, stopGraceFully=True)
    shown = [(batch, line) for batch, line in reported if batch < batches]  # a late stop may have run one more
    for batch, line in shown:
        print(f"batch {batch}: {line}")
    print(f"{len(shown)} reports in {batches} batches")


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
