"""``spark.aiodstream.stateStore.fsync`` reaches the state store of every task of a DStream's stateful operator."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from streaming.dstream._keyed_state import STATE_STORE_DIRECTORY, STATE_STORE_FSYNC_KEY
from streaming.state import GroupState
from tests.support import run_dstream_batches

pytestmark = pytest.mark.spark


def run_with(sc: Any, directory: Path, setting: str | None) -> set[tuple[str, bool]]:
    """Two batches of mapGroupsWithState with the setting as given (None: unset); each call's key and its store's fsync."""
    root = str(directory / STATE_STORE_DIRECTORY)

    def flushes(key: str, values: Iterator[str], state: GroupState) -> tuple[str, bool]:
        from pyspark import TaskContext

        from streaming.state import StateStoreProvider

        state.update(sum(1 for _ in values))
        context = TaskContext.get()
        assert context is not None
        return (key, StateStoreProvider.shared(root, 0, context.partitionId()).fsync)  # the task's own provider

    seen: list[tuple[str, bool]] = []
    conf = sc._conf
    previous = conf.get(STATE_STORE_FSYNC_KEY, None)
    if setting is None:
        sc._jsc.sc().conf().remove(STATE_STORE_FSYNC_KEY)
    else:
        conf.set(STATE_STORE_FSYNC_KEY, setting)
    try:
        clock = ManualClock(0)
        ssc = StreamingContext(sc, 1, clock=clock)
        stream = ssc.queueStream([sc.parallelize(["a", "b", "c"], 2), sc.parallelize(["a", "d"], 2)], oneAtATime=True)
        stream.map(lambda k: (k, k)).mapGroupsWithState(flushes, "NoTimeout", numPartitions=2).foreachRDD(
            lambda rdd: seen.extend(rdd.collect()))
        ssc.checkpoint(str(directory))
        assert run_dstream_batches(ssc, clock, 2) == []
    finally:
        if previous is None:
            sc._jsc.sc().conf().remove(STATE_STORE_FSYNC_KEY)
        else:
            conf.set(STATE_STORE_FSYNC_KEY, previous)
    return set(seen)


def test_the_setting_reaches_every_task_and_is_on_by_default(spark_context: Any, tmp_path: Path) -> None:
    """Unset: every task's store of both batches flushes; " False ": none does; "true" again (after "False"): all do."""
    keys = {"a", "b", "c", "d"}
    assert run_with(spark_context, tmp_path / "unset", None) == {(k, True) for k in keys}
    assert run_with(spark_context, tmp_path / "off", " False ") == {(k, False) for k in keys}
    assert run_with(spark_context, tmp_path / "on", "true") == {(k, True) for k in keys}
