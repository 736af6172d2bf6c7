"""TTL on a DStream replays what pyspark 4.3 did in the oracle's TTL probe, on manual processing times.

pyspark runs TTL only in time mode "ProcessingTime" on the wall clock, so its run cannot be a
test; this one replays the timeline of a run of it (a 1 s trigger, TTL 8 s): keys ``r``
and ``w`` write a value, a list element and a map entry (TTL 8 s); 6 s later ``r`` only reads,
``w`` rewrites its value, appends an element and writes one old and one new map entry. pyspark
showed ``r`` entirely gone and ``w``'s first element gone (per element) at the first batch past
the first writes' expiry, the rest of ``w`` gone past the second writes' expiry, and counted
each value, element and entry removed. Here the batches fall on both expiries exactly (Spark's
``batch time >= expiry``). A timer re-armed every batch reports each key's state. The same
timeline runs on classic Spark and on Spark Connect, with the same expected outputs and counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import anyio
import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from streaming.state import StatefulProcessor
from tests.support import advance, connect_opt_in

pytestmark = pytest.mark.spark

INTERVAL_MS = 1000
TTL_MS = 8000


class Watch(StatefulProcessor):
    """A value, a list and a map with a TTL; rows are commands; every batch a timer reports the key's state."""

    def init(self, handle: Any) -> None:
        """The three variables, with a TTL of :data:`TTL_MS`."""
        self.handle = handle
        self.value = handle.getValueState("v", "s string", TTL_MS)
        self.list = handle.getListState("l", "s string", TTL_MS)
        self.map = handle.getMapState("m", "k string", "s string", TTL_MS)

    def state(self) -> tuple[Any, ...]:
        """What the key holds."""
        return self.value.get(), list(self.list.get()), sorted(self.map.iterator())

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N803
        """Run the commands (``v X``, ``l X``, ``m K X``, ``read``), re-arm the timer, report."""
        for row in rows:
            op, *args = row.split()
            if op == "v":
                self.value.update(args[0])
            elif op == "l":
                self.list.appendValue(args[0])
            elif op == "m":
                self.map.updateValue(args[0], args[1])
        for expiry in list(self.handle.listTimers()):
            self.handle.deleteTimer(expiry)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1)
        yield (key, "input", *self.state())

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:  # noqa: N803
        """Re-arm the timer, report."""
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1)
        yield (key, "timer", *self.state())


def run(spark: Any, directory: Path, batches: list[list[str]]) -> tuple[dict[int, list[Any]], list[Any]]:
    """``batches`` (rows ``key:command``) one per second from 1 s on, on ``spark`` (a SparkContext or a Connect
    session); outputs by batch time, and the progress."""
    outputs: dict[int, list[Any]] = {}
    clock = ManualClock(0)
    ssc = StreamingContext(spark, INTERVAL_MS / 1000, clock=clock)
    sc = ssc.sparkContext
    stream = ssc.queueStream([sc.parallelize(b, 2) for b in batches], oneAtATime=True, default=sc.emptyRDD())
    pairs = stream.map(lambda line: (line.split(":")[0], line.split(":")[1]))
    result = pairs.transformWithState(Watch(), "Append", "ProcessingTime", numPartitions=2)
    result.foreachRDD(lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
    ssc.checkpoint(str(directory))

    async def drive() -> None:
        async with ssc:
            await ssc.start_async()
            await ssc.runtime.wait_until_idle()
            await advance(ssc.runtime, clock, INTERVAL_MS, times=len(batches))
            await ssc.stop_async(stopSparkContext=False)

    anyio.run(drive)
    return outputs, ssc.runtime.recent_progress


@pytest.fixture(scope="module", params=["classic", pytest.param("connect", marks=[
    pytest.mark.connect,
    connect_opt_in("16 batches on Connect; the default run covers transformWithState on Connect with the seeded "
                   "conformance program")])])
def timeline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[int, list[Any]], list[Any]]:
    """The probe's timeline run once per engine (classic Spark, then Spark Connect, whose server's Python workers hold
    the state): keys write at 1 s; at 7 s r reads and w writes again; batches until 16 s."""
    spark = request.getfixturevalue("spark_context" if request.param == "classic" else "connect_session")
    first = ("v r0", "l e0", "m k0 0")
    batches: list[list[str]] = [[] for _ in range(16)]
    batches[0] = [f"{key}:{command}" for key in "rw" for command in first]  # at 1 s: expiry 9 s
    batches[6] = ["r:read", "w:v w1", "w:l e1", "w:m k0 0b", "w:m k1 1"]  # at 7 s: w's writes expire at 15 s
    return run(spark, tmp_path_factory.mktemp("ttl") / "ck", batches)


def test_the_ttl_timeline_pyspark_showed(timeline: tuple[dict[int, list[Any]], list[Any]]) -> None:
    """Reads keep nothing; writes extend per value, element and entry; gone at exactly t + ttl; removals counted."""
    outputs, progress = timeline
    held = ("r0", ["e0"], [("k0", "0")])
    rewritten = ("w1", ["e0", "e1"], [("k0", "0b"), ("k1", "1")])
    gone = (None, [], [])
    expected: dict[int, list[Any]] = {1000: [("r", "input", *held), ("w", "input", *held)]}
    for second in range(2, 17):
        r_state = held if second < 9 else gone
        w_state = held if second < 7 else rewritten if second < 9 else ("w1", ["e1"], rewritten[2]) if second < 15 else gone
        kind = "input" if second == 7 else "timer"
        expected[second * 1000] = [("r", kind, *r_state), ("w", kind, *w_state)]
    assert outputs == expected
    metrics = [p.state_operators[0].custom_metrics for p in progress]
    assert [m["numValuesRemovedDueToTTLExpiry"] for m in metrics] == [0] * 8 + [4] + [0] * 5 + [4, 0]


def test_ttl_variables_are_counted_apart(timeline: tuple[dict[int, list[Any]], list[Any]]) -> None:
    """A variable with a TTL counts in num*StateWithTTLVars instead of num*StateVars (per partition, as pyspark)."""
    metrics = [p.state_operators[0].custom_metrics for p in timeline[1]]
    assert {(m["numValueStateWithTTLVars"], m["numValueStateVars"], m["numListStateWithTTLVars"],
             m["numMapStateWithTTLVars"]) for m in metrics} == {(2, 0, 2, 2)}
