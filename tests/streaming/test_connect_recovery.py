"""Recovery on Spark Connect: state snapshots the server's workers write (a file per partition) and a getOrCreate restart.

Each program runs on a ManualClock batch by batch; one batch fails so that it is logged but never
committed (what a crash between the offsets entry and the commit leaves), the context stops, and
``getOrCreate`` resumes on the same checkpoint directory. The two runs' outputs together must equal
one uninterrupted run's on classic Spark, partition by partition (``glom``), batch time by batch time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from operator import add, sub
from pathlib import Path
from typing import Any

import pytest

from scheduler import CheckpointError, ManualClock
from streaming import StreamingContext
from tests.streaming.test_dstream_recovery import run_program
from tests.support import connect_opt_in

pytestmark = pytest.mark.connect

INTERVAL_MS = 1000
WORDS = [["a", "b"], ["a"], ["b", "c"], ["a", "a"], ["c", "b"], ["a", "c", "d"]]


class Run:
    """One program run: each output's partitions by batch time (each partition's values sorted with ``sort``), and a
    switch that fails one batch time's first output."""

    def __init__(self, fail_at: int | None = None, sort: bool = False) -> None:
        self.outputs: dict[str, dict[int, Any]] = {}
        self.fail_at = fail_at
        self.sort = sort

    def output(self, name: str) -> Callable[[Any, Any], None]:
        def record(time: Any, rdd: Any) -> None:
            ms = int(time.timestamp() * 1000)
            if ms == self.fail_at:
                raise RuntimeError(f"simulated crash in batch {ms}")
            parts = rdd.glom().collect()
            self.outputs.setdefault(name, {})[ms] = [sorted(part) for part in parts] if self.sort else parts
        return record


def stateful_program(run: Run) -> Callable[[StreamingContext], None]:
    """Running word counts (updateStateByKey) and an incremental inverse-reduced window, both checkpointed every 2 batches."""
    def build(ssc: StreamingContext) -> None:
        sc = ssc.sparkContext
        pairs = ssc.queueStream([sc.parallelize(words, 2) for words in WORDS]).map(lambda w: (w, 1))

        def update(values: list[int], state: int | None) -> int | None:
            total = (state or 0) + sum(values)
            return None if total >= 4 else total  # a key that reaches 4 is dropped

        counts = pairs.updateStateByKey(update, 3)
        counts.checkpoint(2)
        counts.foreachRDD(run.output("counts"))
        window = pairs.reduceByKeyAndWindow(add, sub, 5, 1, 2)  # five slides: reduced incrementally
        window.checkpoint(2)
        window.foreachRDD(run.output("window"))
    return build


@pytest.mark.spark
@pytest.mark.timeout(900)  # 18 Connect batches and 6 classic ones; minutes at load 40
@connect_opt_in("the initial state's and the empty partitions' snapshots resume by default (below), and keyed state "
                "from an ftp:// checkpoint (test_connect_checkpoint_uri.py)")
def test_state_and_an_inverse_window_resume_from_the_servers_snapshots_as_classic_spark_runs_them(
        connect_session: Any, spark_context: Any, tmp_path: Path) -> None:
    """Batches 1-5 run on Connect, 5 fails; the resumed run restores the snapshots of batch 4 and gives classic Spark's partitions."""
    reference = Run()
    run_program(spark_context, tmp_path / "classic", ManualClock(0), 6, stateful_program(reference), resume=False)

    first = Run(fail_at=5 * INTERVAL_MS)
    clock = ManualClock(0)
    run_program(connect_session, tmp_path / "ck", clock, 5, stateful_program(first), resume=False)
    assert sorted(first.outputs["counts"]) == [1000, 2000, 3000, 4000]
    snapshots = tmp_path / "ck" / "state" / "0"
    assert sorted(os.listdir(snapshots)) == ["2", "4", "stream.json"]  # after batches 2 and 4
    assert (snapshots / "4" / "_partitions").exists() and sorted(p.name for p in (snapshots / "4").glob("part-*")) == [
        "part-00000", "part-00001", "part-00002"]

    second = Run()
    run_program(connect_session, tmp_path / "ck", ManualClock(clock.now()), 1, stateful_program(second), resume=True)
    assert sorted(second.outputs["counts"]) == [5000, 6000]
    for name in ("counts", "window"):
        assert {**first.outputs[name], **second.outputs[name]} == reference.outputs[name], name


def test_a_snapshot_of_empty_partitions_comes_back_with_as_many(connect_session: Any, tmp_path: Path) -> None:
    """A state whose partitions are all empty is saved and read back with its number of partitions."""
    from scheduler import CheckpointPath
    from streaming.connect import FrameContext
    from streaming.dstream._snapshot_frames import load_frame_snapshot, save_frame_snapshot

    ctx = FrameContext(connect_session)
    ctx.setCheckpointDir(str(tmp_path / "rdds"))  # a restored state is checkpointed there on first use
    target = CheckpointPath.local(tmp_path / "snapshot")
    save_frame_snapshot(ctx.parallelize([("a", 1), ("b", 2)], 3).filter(lambda kv: False), target)
    assert load_frame_snapshot(ctx, target).glom().collect() == [[], [], []]


def test_a_classic_snapshot_is_not_read_on_connect(connect_session: Any, tmp_path: Path) -> None:
    """A restart on Connect from a checkpoint whose state classic Spark wrote names both kinds instead of misreading it."""
    from scheduler import CheckpointPath
    from streaming.connect import FrameContext
    from streaming.dstream import StateSnapshots

    snapshot = tmp_path / "state" / "0" / "2"
    snapshot.mkdir(parents=True)
    (snapshot / "part-00000").write_bytes(b"")
    with pytest.raises(CheckpointError) as raised:
        StateSnapshots._read(FrameContext(connect_session), CheckpointPath.local(snapshot))
    assert str(raised.value) == (
        f"the state snapshot {snapshot} was written on classic Spark and cannot be read on Spark Connect; restart the "
        "program on the same kind of Spark, or start over with a new checkpoint directory")


@pytest.mark.spark
def test_an_initial_state_given_as_a_frame_rdd_seeds_the_state(connect_session: Any, spark_context: Any, tmp_path: Path) -> None:
    """updateStateByKey's initialRDD may be a FrameRDD on Connect; the states equal classic Spark's with an RDD."""
    from tests.support import run_dstream_batches

    results: dict[str, list[Any]] = {}

    def run(spark: Any, name: str) -> None:
        clock = ManualClock(0)
        ssc = StreamingContext(spark, 1, clock=clock)
        ssc.sparkContext.setCheckpointDir(str(tmp_path / name))
        seed = ssc.sparkContext.parallelize([("a", 100), ("z", 1000)], 2)
        stream = ssc.queueStream([[("a", 1), ("b", 2)], [("a", 3)]])
        counts = stream.updateStateByKey(lambda values, state: sum(values) + (state or 0), 2, initialRDD=seed)
        counts.foreachRDD(lambda rdd: results.setdefault(name, []).append(rdd.glom().collect()))
        assert run_dstream_batches(ssc, clock, 2) == []

    run(spark_context, "classic")
    run(connect_session, "connect")
    assert results["connect"] == results["classic"]
    assert len(results["connect"]) == 2
