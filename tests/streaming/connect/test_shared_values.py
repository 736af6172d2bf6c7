"""Broadcast variables and accumulators on Spark Connect (FrameContext) against pyspark's on the classic SparkContext."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
from pyspark.accumulators import AccumulatorParam

pytestmark = pytest.mark.connect


class ListParam(AccumulatorParam):  # type: ignore[misc]
    """A custom parameter: lists, concatenated."""

    def zero(self, value: list[Any]) -> list[Any]:
        return []

    def addInPlace(self, value1: list[Any], value2: list[Any]) -> list[Any]:
        value1.extend(value2)
        return value1


def _counted(sc: Any) -> tuple[int, float, list[int], list[int]]:
    """Three accumulators added to in a map, a foreach over a shuffle and on the driver, read after each action."""
    total = sc.accumulator(0)
    weights = sc.accumulator(0.5)
    seen = sc.accumulator([], ListParam())
    total.add(100)  # the driver adds too

    def counted(x: int) -> int:
        total.add(x)
        seen.add([x])
        return x

    kept = sc.parallelize(range(20), 4).map(counted).filter(lambda x: x % 3 == 0).collect()
    after_first = total.value

    def weigh(kv: tuple[int, int]) -> None:
        nonlocal weights
        weights += kv[1] * 0.25

    sc.parallelize([(i % 3, 1) for i in range(12)], 3).reduceByKey(lambda a, b: a + b).foreach(weigh)
    return after_first, weights.value, sorted(seen.value), kept


def test_accumulators_sum_what_every_partition_added_as_on_classic(spark_context: Any, frame_context: Any) -> None:
    """Sums across partitions (a map, then a shuffle's reduce side), a float and a custom parameter: as pyspark's."""
    classic = _counted(spark_context)
    connect = _counted(frame_context)
    assert connect == classic
    assert classic[:3] == (100 + sum(range(20)), 0.5 + 12 * 0.25, list(range(20)))


def test_a_task_may_add_but_not_read_an_accumulator(frame_context: Any) -> None:
    """Reading ``value`` in a task fails the job, as pyspark's does; the driver's value is untouched by it."""
    counter = frame_context.accumulator(7)

    def peek(x: int) -> int:
        return int(counter.value) + x

    with pytest.raises(Exception, match=r"Accumulator\.value cannot be accessed inside tasks"):
        frame_context.parallelize([1, 2], 2).map(peek).collect()
    assert counter.value == 7
    counter += 3
    assert counter.value == 10
    with pytest.raises(TypeError, match="No default accumulator param"):
        frame_context.accumulator("text")


def test_a_failed_task_adds_nothing(frame_context: Any) -> None:
    """A partition whose function raises reports none of its additions; the next job's tasks report theirs."""
    counter = frame_context.accumulator(0)

    def fail_on_three(x: int) -> int:
        counter.add(1)
        if x == 3:
            raise ValueError("three")
        return x

    with pytest.raises(Exception, match="three"):
        frame_context.parallelize([0, 1, 2, 3], 1).map(fail_on_three).collect()
    assert counter.value == 0
    frame_context.parallelize([0, 1, 2], 2).foreach(lambda x: counter.add(1))
    assert counter.value == 3


def test_the_report_directory_is_private(connect_session: Any) -> None:
    """Without a checkpoint directory the reports go to a folder of this machine's /tmp; the driver unpickles what is in
    it, so only this user may write there."""
    from streaming.connect import FrameContext

    context = FrameContext(connect_session)
    counter = context.accumulator(0)
    context.parallelize([1, 2, 3], 2).foreach(lambda x: counter.add(x))
    assert counter.value == 6
    directory = context._shared.place()
    assert directory.startswith(tempfile.gettempdir())
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700


def test_with_a_checkpoint_directory_the_reports_go_under_it(connect_session: Any, tmp_path: Path) -> None:
    """After setCheckpointDir (which ssc.checkpoint calls) the tasks report under <dir>/task-reports, which the server's
    executors reach wherever they run; additions sent before it still count, and each place goes with its context."""
    import gc

    def run() -> list[Path]:
        from streaming.connect import FrameContext

        context = FrameContext(connect_session)
        counter = context.accumulator(0)
        context.parallelize([1, 2], 2).foreach(lambda x: counter.add(x))
        context.setCheckpointDir(str(tmp_path / "ck"))
        context.parallelize([10, 20, 30], 3).map(lambda x: counter.add(x) or x).collect()
        assert counter.value == 63
        places = list((tmp_path / "ck" / "task-reports").iterdir())
        assert len(places) == 1 and list(places[0].iterdir()) == []  # read and removed by the fold
        return places

    places = run()
    gc.collect()
    assert not places[0].exists()


def test_a_broadcast_value_is_read_in_tasks_as_on_classic(spark_context: Any, frame_context: Any) -> None:
    """Tasks read ``.value`` (a filter's exclude list, a lookup table); unpersist keeps it usable, as pyspark's."""
    def run(sc: Any) -> list[Any]:
        excluded = sc.broadcast({"the", "fox"})
        table = sc.broadcast({"quick": 1, "lazy": 2})
        words = sc.parallelize("the quick brown fox jumps over the lazy dog".split(), 3)
        kept = words.filter(lambda w: w not in excluded.value).map(lambda w: (w, table.value.get(w, 0))).collect()
        excluded.unpersist()
        again = words.filter(lambda w: w in excluded.value).count()
        return [kept, again, sorted(excluded.value)]

    assert run(frame_context) == run(spark_context)


def test_a_destroyed_broadcast_is_not_sent_again(frame_context: Any) -> None:
    """After ``destroy`` a job using the broadcast fails while its function is pickled."""
    excluded = frame_context.broadcast([1])
    excluded.destroy()
    with pytest.raises(Exception, match="after it was destroyed"):
        frame_context.parallelize([1, 2], 1).filter(lambda x: x in excluded.value).collect()
