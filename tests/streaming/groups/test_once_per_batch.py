"""A stateful batch runs its state once per partition however many jobs read it, without caching its RDD."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from streaming.state import GroupState, once_per_batch
from tests.support import run_dstream_batches


def test_a_run_finds_only_the_outputs_its_own_token_kept(tmp_path: Path) -> None:
    """Nothing before a keep; the kept outputs for the same token; nothing for another (a batch generated again) but
    the run before it."""
    working_copy = tmp_path / "abc.sqlite"
    with once_per_batch(working_copy, "3-a") as kept:
        assert kept.outputs is None
        kept.keep([("k", 1), ("j", 2)])
    with once_per_batch(working_copy, "3-a") as kept:
        assert kept.outputs == [("k", 1), ("j", 2)]
    with once_per_batch(working_copy, "3-b") as kept:
        assert kept.outputs is None
        kept.keep([])
    with once_per_batch(working_copy, "3-b") as kept:
        assert kept.outputs == []
    with once_per_batch(working_copy, "3-a") as kept:
        assert kept.outputs == [("k", 1), ("j", 2)]  # the run before the newest is kept too
    with once_per_batch(working_copy, "4-c") as kept:
        kept.keep(["c"])
    with once_per_batch(working_copy, "3-a") as kept:
        assert kept.outputs is None  # the two newest runs' outputs are kept, no more
    with once_per_batch(working_copy, "3-b") as kept:
        assert kept.outputs == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc.outputs", "abc.outputs-lock", "abc.outputs-previous"]


def test_a_second_task_of_the_partition_waits_for_the_first_to_leave(tmp_path: Path) -> None:
    """While one task holds the partition's record, another descriptor cannot lock it; once it leaves, one can."""
    working_copy = tmp_path / "abc.sqlite"
    inside, leave = threading.Event(), threading.Event()

    def first() -> None:
        with once_per_batch(working_copy, "0-x") as kept:
            inside.set()
            leave.wait()
            kept.keep(["out"])

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(30)
    fd = os.open(working_copy.with_suffix(".outputs-lock"), os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        leave.set()
        thread.join(30)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    with once_per_batch(working_copy, "0-x") as kept:
        assert kept.outputs == ["out"]


def test_a_writer_killed_before_its_rename_leaves_nothing_behind_the_next_keep(tmp_path: Path) -> None:
    """A task killed between writing its outputs and renaming them: the next keep takes its place, no file piles up."""
    working_copy = tmp_path / "abc.sqlite"
    pid = os.fork()
    if pid == 0:  # the killed task: its outputs written, the process gone before the rename
        try:
            with once_per_batch(working_copy, "4-a") as kept:
                os.replace = lambda *_: os._exit(0)  # type: ignore[assignment]
                kept.keep(["lost"])
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(os.listdir(tmp_path)) == 2  # the lock and the killed writer's temporary file
    with once_per_batch(working_copy, "4-b") as kept:
        assert kept.outputs is None
        kept.keep(["kept"])
    assert sorted(os.listdir(tmp_path)) == ["abc.outputs", "abc.outputs-lock"]
    with once_per_batch(working_copy, "4-b") as kept:
        assert kept.outputs == ["kept"]


def count_values(key: str, values: Iterator[int], state: GroupState) -> Iterator[tuple[str, int]]:
    """The running count of a key."""
    state.update((state.getOption or 0) + sum(values))
    yield (key, state.get)


@pytest.mark.spark
def test_every_job_reading_the_state_gets_one_run_of_it_and_the_rdd_is_not_cached(spark_context: Any,
                                                                                   tmp_path: Path) -> None:
    """A take, a collect and a count in one output, and a second output: each key's function runs once a batch."""
    sc = spark_context
    clock = ManualClock(0)
    ssc = StreamingContext(sc, 1, clock=clock)
    calls = sc.accumulator(0)

    def counted(key: str, values: Iterator[int], state: GroupState) -> Iterator[tuple[str, int]]:
        calls.add(1)
        return count_values(key, values, state)

    stream = ssc.queueStream([sc.parallelize(b, 2) for b in (["a", "b", "c", "d"], ["a", "c"])], oneAtATime=True)
    counts = stream.map(lambda k: (k, 1)).flatMapGroupsWithState(counted, "update", "NoTimeout", numPartitions=3)
    seen: list[Any] = []

    def first(rdd: Any) -> None:
        seen.append((rdd.is_cached, len(rdd.take(1)), sorted(rdd.collect()), rdd.count()))

    counts.foreachRDD(first)
    counts.foreachRDD(lambda rdd: seen.append(sorted(rdd.map(lambda kv: kv[1]).collect())))
    ssc.checkpoint(str(tmp_path / "ck"))
    assert run_dstream_batches(ssc, clock, 2) == []
    assert seen == [
        (False, 1, [("a", 1), ("b", 1), ("c", 1), ("d", 1)], 4), [1, 1, 1, 1],
        (False, 1, [("a", 2), ("c", 2)], 2), [2, 2],
    ]
    assert calls.value == 6
    progress = ssc.runtime.recent_progress
    assert [p.state_operators[0].num_rows_updated for p in progress] == [4, 2]
    assert [p.state_operators[0].num_state_store_instances for p in progress] == [3, 3]
