"""An inverse-reduced window in a graph getOrCreate restored reduces every window from scratch, as Spark's does."""

from __future__ import annotations

from operator import add, sub
from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from tests.support import advance

pytestmark = pytest.mark.spark

WORDS = [["a", "b"], ["a"], [], [], [], [], ["b"], []]


def windows(sc: Any, directory: Path, restored: bool) -> dict[int, list[tuple[str, int]]]:
    """The 5-slide windows of WORDS' counts, incrementally (five slides) unless the graph counts as ``restored``."""
    out: dict[int, list[tuple[str, int]]] = {}

    async def main() -> None:
        clock = ManualClock(0)
        async with StreamingContext(sc, 1, clock=clock) as ssc:
            ssc.checkpoint(str(directory))
            pairs = ssc.queueStream(WORDS, default=[]).map(lambda w: (w, 1))
            pairs.reduceByKeyAndWindow(add, sub, 5, 1).foreachRDD(
                lambda t, rdd: out.__setitem__(int(t.timestamp() * 1000), sorted(rdd.collect())))
            ssc._graph.restored_from_checkpoint = restored
            await ssc.start_async()
            await advance(ssc.runtime, clock, 1000, times=len(WORDS))
            await ssc.stop_async(stopSparkContext=False)

    anyio.run(main)
    return out


def test_a_restored_graph_reduces_each_window_from_scratch_so_keys_at_zero_leave_it(spark_context: Any,
                                                                                     tmp_path: Path) -> None:
    """Spark's PythonReducedWindowedDStream keeps its inverse in a transient field: after getOrCreate restored the graph
    it is null, every window is reduced from scratch, and a key whose count the inverse brought to 0 is gone, where the
    incremental window keeps it at 0 (lane K1: a program without filterFunc printed ('a', 0) after a restart)."""
    incremental = windows(spark_context, tmp_path / "a", restored=False)
    scratch = windows(spark_context, tmp_path / "b", restored=True)
    assert (incremental[6000], incremental[7000]) == ([("a", 1), ("b", 0)], [("a", 0), ("b", 1)])
    assert (scratch[6000], scratch[7000]) == ([("a", 1)], [("b", 1)])
    assert sorted(scratch) == sorted(incremental) == list(range(1000, 9000, 1000))
    for t in incremental:  # otherwise the same windows: the zeros aside
        assert [kv for kv in incremental[t] if kv[1]] == scratch[t]


def test_get_or_create_marks_the_graph_it_restored(spark_context: Any, tmp_path: Path) -> None:
    """The graph getOrCreate rebuilds from the checkpoint's saved calls says so; a program's own graph does not."""
    async def first() -> None:
        clock = ManualClock(0)
        async with StreamingContext(spark_context, 1, clock=clock) as ssc:
            ssc.checkpoint(str(tmp_path))
            ssc.queueStream([["a"]], default=[]).map(lambda w: (w, 1)).reduceByKeyAndWindow(add, sub, 5, 1).pprint()
            assert not ssc._graph.restored_from_checkpoint
            await ssc.start_async()
            await advance(ssc.runtime, clock, 1000, times=1)
            await ssc.stop_async(stopSparkContext=False)

    anyio.run(first)

    def setup() -> StreamingContext:
        raise AssertionError("the saved graph is restored: setup must not run")

    restored = StreamingContext.getOrCreate(str(tmp_path), setup)
    try:
        assert restored._graph.restored_from_checkpoint
    finally:
        restored.stop(stopSparkContext=False)
