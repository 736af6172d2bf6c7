"""flatMapGroupsWithState on Spark Connect gives pyspark's applyInPandasWithState output, batch by batch.

The programs and events of :mod:`.test_conformance`, run by the same driver over the test run's
Connect session: the state stores live under the checkpoint as on classic Spark, opened by the
server's Python workers, and the tasks' numbers and event-time statistics reach the driver as
report files instead of accumulators. The default run takes the program with event-time
timeouts under a watermark (both channels) and mapGroupsWithState's restart from its state
store; ``AIODSTREAM_CONNECT=all`` runs every program and the heartbeat program's progress.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.streaming.groups import test_dstream_groups as classic
from tests.streaming.groups.reference import PROGRAMS
from tests.streaming.groups.test_conformance import EVENTS, pyspark_outputs, run_ours
from tests.support import connect_opt_in, connect_params

pytestmark = pytest.mark.connect

DEFAULT_PROGRAMS = ["sessions"]
"""Run by default: sessions closed by event-time timeouts, which needs the watermark's statistics and the state's."""


def test_the_default_programs_are_programs() -> None:
    """Every program run by default is one of the conformance programs."""
    assert set(DEFAULT_PROGRAMS) <= set(PROGRAMS)


@pytest.mark.parametrize("program", connect_params(sorted(PROGRAMS), DEFAULT_PROGRAMS))
def test_the_same_output_per_batch_on_connect(spark_context: Any, connect_session: Any, tmp_path: Path, program: str) -> None:
    """applyInPandasWithState's outputs, per input batch, from a Connect session."""
    theirs = pyspark_outputs(spark_context, program)
    ours = run_ours(connect_session, tmp_path / "ck", program, EVENTS)
    assert any(theirs), "the reference produced nothing: the comparison would prove nothing"
    assert [[tuple(row) for row in batch] for batch in ours] == theirs


@connect_opt_in("the restart test runs the same program by default")
def test_processing_time_timeouts_and_progress_on_connect(connect_session: Any, tmp_path: Path) -> None:
    """mapGroupsWithState's heartbeat program of :mod:`.test_dstream_groups` on Connect: the same outputs, and the
    same state numbers in the progress (rows held, timeouts fired, state store instances) from the tasks' reports."""
    classic.test_processing_time_timeouts_fire_in_the_first_batch_strictly_after_them(connect_session, tmp_path)


def test_the_state_survives_a_restart_on_connect(connect_session: Any, tmp_path: Path) -> None:
    """Stopped after two batches and resumed with getOrCreate on Connect: the count goes on from the state store,
    whose partition count the checkpoint keeps, and the timeout still fires."""
    classic.test_the_state_survives_a_restart_from_the_checkpoint(connect_session, tmp_path)


@connect_opt_in("transformWithState's default Connect test has initial state")
def test_an_initial_state_on_connect(connect_session: Any, tmp_path: Path) -> None:
    """flatMapGroupsWithState's initialState (a list, parallelized on the Connect session): batch 0 starts from it."""
    from scheduler import ManualClock
    from streaming import StreamingContext
    from tests.support import run_dstream_batches

    def total(key: str, values: Any, state: Any) -> list[tuple[str, int]]:
        state.update((state.getOption or 0) + sum(values))
        return [(key, state.get)]

    outputs: dict[int, list[Any]] = {}
    clock = ManualClock(0)
    ssc = StreamingContext(connect_session, 1, clock=clock)
    spark = ssc.sparkContext
    stream = ssc.queueStream([spark.parallelize([("a", 1), ("b", 2)], 2), spark.parallelize([("a", 1)], 2)], oneAtATime=True)
    result = stream.flatMapGroupsWithState(total, "update", "NoTimeout", numPartitions=2, initialState=[("a", 10), ("z", 5)])
    result.foreachRDD(lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
    ssc.checkpoint(str(tmp_path / "ck"))
    assert run_dstream_batches(ssc, clock, 2) == []
    assert outputs == {1000: [("a", 11), ("b", 2), ("z", 5)], 2000: [("a", 12)]}


def test_the_state_advances_when_no_output_reads_it(connect_session: Any, tmp_path: Path) -> None:
    """Outputs that never read the operator: its own output runs every partition's state on Connect (a count), once per
    batch, and the tasks' reports give the progress its numbers."""
    from scheduler import ManualClock
    from streaming import StreamingContext
    from tests.support import run_dstream_batches

    clock = ManualClock(0)
    ssc = StreamingContext(connect_session, 1, clock=clock)
    spark = ssc.sparkContext
    stream = ssc.queueStream([spark.parallelize(b, 2) for b in (["a", "b", "c"], ["a"])], oneAtATime=True)
    stream.map(lambda k: (k, 1)).flatMapGroupsWithState(classic.count_values, "update", "NoTimeout", numPartitions=2)
    seen: list[list[Any]] = []
    stream.foreachRDD(lambda rdd: seen.append(sorted(rdd.collect())))
    ssc.checkpoint(str(tmp_path / "ck"))
    assert run_dstream_batches(ssc, clock, 2) == []
    assert seen == [["a", "b", "c"], ["a"]]
    operators = [p.state_operators[0] for p in ssc.runtime.recent_progress]
    assert [(op.num_rows_total, op.num_rows_updated, op.num_state_store_instances) for op in operators] == [(3, 3, 2), (3, 1, 2)]


def test_a_server_that_does_not_see_the_report_place_fails_the_batch(connect_session: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks' report place is not where the server's workers look (a server on another disk, here a place the driver
    names but never made): the tasks fail naming it and the fix, instead of the progress and watermark standing still."""
    from scheduler import ManualClock
    from streaming import StreamingContext
    from streaming.connect import ReportFolder
    from streaming.dstream import _batch_stats
    from tests.support import run_dstream_batches

    class Elsewhere(ReportFolder):
        @property
        def place(self) -> str:
            return str(tmp_path / "elsewhere")  # what the driver made on a disk the server's workers do not see

    monkeypatch.setattr(_batch_stats, "report_store", lambda env: Elsewhere())
    clock = ManualClock(0)
    ssc = StreamingContext(connect_session, 1, clock=clock)
    stream = ssc.queueStream([ssc.sparkContext.parallelize(["a", "b"], 2)], oneAtATime=True)
    counts = stream.map(lambda k: (k, 1)).flatMapGroupsWithState(classic.count_values, "update", "NoTimeout", numPartitions=2)
    counts.foreachRDD(lambda rdd: rdd.collect())
    ssc.checkpoint(str(tmp_path / "ck"))
    errors = run_dstream_batches(ssc, clock, 1)
    assert len(errors) == 1
    assert f"the task report directory {tmp_path / 'elsewhere'} is not on this Python worker's file system" in str(errors[0])
    assert not (tmp_path / "elsewhere").exists()  # no report written where nobody reads
