"""Several contexts on one SparkContext: each checkpoints its RDDs in its own directory (Spark keeps one per SparkContext)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler import InvalidPipelineError, ManualClock
from streaming import StreamingContext
from tests.support import advance

pytestmark = pytest.mark.spark


def _running_total(new: list[int], old: int | None) -> int:
    return sum(new) + (old or 0)


def test_a_context_checkpoints_its_rdds_in_its_own_directory_after_another_set_the_spark_contexts(
        spark_context: Any, tmp_path: Path) -> None:
    """A's state RDDs go under A's checkpoint although B, started after it, set the SparkContext's directory last
    (which stays B's)."""
    first, second = tmp_path / "A", tmp_path / "B"
    clock_a, clock_b = ManualClock(0), ManualClock(0)
    states: list[list[Any]] = []
    directories: list[str | None] = []

    async def main() -> None:
        async with StreamingContext(spark_context, 1, clock=clock_a) as a, StreamingContext(spark_context, 1, clock=clock_b) as b:
            a.checkpoint(str(first))
            state = a.queueStream([[("k", 1)]], default=[("k", 1)]).updateStateByKey(_running_total)
            state.checkpoint(1)
            state.foreachRDD(lambda rdd: states.append(rdd.collect()))
            b.checkpoint(str(second))
            b.queueStream([[1]], default=[1]).foreachRDD(lambda rdd: None)
            await a.start_async()
            await b.start_async()
            directories.append(spark_context.getCheckpointDir())
            await advance(a.runtime, clock_a, 1000, times=3)
            directories.append(spark_context.getCheckpointDir())
            await a.stop_async()
            await b.stop_async()

    anyio.run(main)
    assert states == [[("k", 1)], [("k", 2)], [("k", 3)]]
    assert list(first.glob("*/rdd-*")) and not list(second.glob("*/rdd-*"))
    assert directories[0] is not None and Path(directories[0].removeprefix("file:")).parent == second
    assert directories[1] == directories[0]


def test_a_stateful_context_without_a_checkpoint_is_refused_though_another_context_set_one(
        spark_context: Any, tmp_path: Path) -> None:
    """A running context's checkpoint() does not let another context's stateful streams pass Spark's start check: its
    RDD checkpoints would go into that context's directory (Spark has one context at a time)."""

    async def main() -> None:
        async with StreamingContext(spark_context, 1, clock=ManualClock(0)) as a, \
                StreamingContext(spark_context, 1, clock=ManualClock(0)) as b:
            a.checkpoint(str(tmp_path / "A"))
            a.queueStream([[1]], default=[1]).foreachRDD(lambda rdd: None)
            await a.start_async()
            b.queueStream([[("k", 1)]]).updateStateByKey(_running_total).foreachRDD(lambda rdd: None)
            with pytest.raises(InvalidPipelineError, match=r"^requirement failed: The checkpoint directory has not been set\. "
                                                           r"Please set it by StreamingContext\.checkpoint\(\)\.$"):
                await b.start_async()
            await a.stop_async()

    anyio.run(main)


def test_a_stateful_context_after_a_stopped_one_uses_the_directory_it_left_as_spark_does(
        spark_context: Any, tmp_path: Path) -> None:
    """Spark's notebook pattern: A checkpoints, runs and stops (the SparkContext kept); B, without checkpoint(), runs an
    updateStateByKey: Spark's start check finds the SparkContext's directory A set, and B's state RDDs go there
    (lane K1: B was refused, where pyspark 4.3 runs it)."""
    states: list[list[Any]] = []

    async def main() -> None:
        clock_a, clock_b = ManualClock(0), ManualClock(0)
        async with StreamingContext(spark_context, 1, clock=clock_a) as a:
            a.checkpoint(str(tmp_path / "A"))
            a.queueStream([[("k", 1)]], default=[("k", 1)]).updateStateByKey(_running_total).foreachRDD(lambda rdd: None)
            await a.start_async()
            await advance(a.runtime, clock_a, 1000, times=2)
            await a.stop_async()
        left = list((tmp_path / "A").glob("*/rdd-*"))
        async with StreamingContext(spark_context, 1, clock=clock_b) as b:
            state = b.queueStream([[("k", 1)]], default=[("k", 1)]).updateStateByKey(_running_total)
            state.checkpoint(1)
            state.foreachRDD(lambda rdd: states.append(rdd.collect()))
            await b.start_async()
            await advance(b.runtime, clock_b, 1000, times=3)
            await b.stop_async()
        assert set((tmp_path / "A").glob("*/rdd-*")) > set(left)  # B's state RDDs, in the directory A left

    anyio.run(main)
    assert states == [[("k", 1)], [("k", 2)], [("k", 3)]]
