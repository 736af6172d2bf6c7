"""DStream.transformWithState on Spark (local[2]) with a manual clock: state, timers, progress, restart, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from scheduler import InvalidPipelineError, ManualClock
from streaming import StreamingContext
from streaming.state import (
    TRANSFORM_WITH_STATE_OPERATOR,
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    TransformWithStateError,
)
from tests.streaming.tws.tws_support import Early
from tests.support import run_dstream_batches

pytestmark = pytest.mark.spark

INTERVAL_MS = 1000


class Tally(StatefulProcessor):
    """Per key: a count (value state), the rows (list state), a count per row (map state); 2.5 s after its last
    batch with input, a processing-time timer reports what the key holds and clears it."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "count long")
        self.rows = handle.getListState("rows", "row string")
        self.per_row = handle.getMapState("perRow", "row string", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        batch = list(rows)
        total = (self.count.get() or 0) + len(batch)
        self.count.update(total)
        self.rows.appendList(batch)
        for row in batch:
            self.per_row.updateValue(row, (self.per_row.getValue(row) or 0) + 1)
        for expiry in list(self.handle.listTimers()):
            self.handle.deleteTimer(expiry)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 2_500)
        yield (key, "count", total)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,  # noqa: N803
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Any]:  # noqa: N803
        yield (key, "idle", expiredTimerInfo.getExpiryTimeInMs(), list(self.rows.get()), sorted(self.per_row.iterator()))
        self.count.clear()
        self.rows.clear()
        self.per_row.clear()


def run(sc: Any, directory: Path, batches: list[list[str]], *, processor: StatefulProcessor | None = None,
        resume: bool = False, clock_start: int = 0, drive: int | None = None, initial: Any = None,
        ) -> tuple[dict[int, list[Any]], list[Any], list[BaseException]]:
    """Run ``processor`` (default :class:`Tally`) over the queue ``batches`` (rows ``key:row``) for ``drive`` batches."""
    outputs: dict[int, list[Any]] = {}
    clock = ManualClock(clock_start)

    def setup() -> StreamingContext:
        ssc = StreamingContext(sc, INTERVAL_MS / 1000, clock=clock)
        stream = ssc.queueStream([sc.parallelize(b, 2) for b in batches], oneAtATime=True, default=sc.emptyRDD())
        pairs = stream.map(lambda line: (line.split(":")[0], line.split(":")[1]))
        out = pairs.transformWithState(processor or Tally(), "Update", "ProcessingTime", initialState=initial,
                                       numPartitions=2)
        out.foreachRDD(lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
        ssc.checkpoint(str(directory))
        return ssc

    ssc = StreamingContext.getOrCreate(str(directory), setup, restoreGraph=False) if resume else setup()
    errors = run_dstream_batches(ssc, clock, len(batches) if drive is None else drive)
    return outputs, ssc.runtime.recent_progress, errors


def test_value_list_and_map_state_and_processing_time_timers_across_batches(spark_context: Any, tmp_path: Path) -> None:
    """x at 1 s and 2 s (timer 4.5 s, the 3.5 s one deleted), y at 1 s (timer 3.5 s): y idles at 4 s, x at 5 s, with
    what they held; a due timer fires at the first batch time at or after it; empty batches run."""
    outputs, progress, errors = run(spark_context, tmp_path / "ck", [["x:a", "y:b", "x:a"], ["x:c"], [], [], [], []])
    assert errors == []
    assert outputs == {
        1000: [("x", "count", 2), ("y", "count", 1)],
        2000: [("x", "count", 3)],
        3000: [],
        4000: [("y", "idle", 3500, ["b"], [("b", 1)])],
        5000: [("x", "idle", 4500, ["a", "a", "c"], [("a", 2), ("c", 1)])],
        6000: [],
    }
    operators = [p.state_operators for p in progress]
    assert all(len(ops) == 1 and ops[0].operator_name == TRANSFORM_WITH_STATE_OPERATOR for ops in operators)
    assert [ops[0].num_state_store_instances for ops in operators] == [2] * 6
    # rows: x (count, 2 list elements, 1 map entry, 1 timer) + y (count, 1, 1, 1) = 9; x then 1 more element and entry;
    # y idles at 4 s (x keeps 7), x at 5 s
    assert [ops[0].num_rows_total for ops in operators] == [9, 11, 11, 7, 0, 0]
    metrics = [ops[0].custom_metrics for ops in operators]
    assert [m.get("numExpiredTimers", 0) for m in metrics] == [0, 0, 0, 1, 1, 0]
    assert [m.get("numRegisteredTimers", 0) for m in metrics] == [2, 1, 0, 0, 0, 0]
    assert [m.get("numValueStateVars", 0) for m in metrics] == [2] * 6  # one per partition's processor
    assert [m.get("numListStateVars", 0) for m in metrics] == [2] * 6
    assert [m.get("numMapStateVars", 0) for m in metrics] == [2] * 6
    assert progress[0].json_value()["stateOperators"][0]["customMetrics"]["numRegisteredTimers"] == 2


def test_the_state_and_its_timers_survive_a_restart_from_the_checkpoint(spark_context: Any, tmp_path: Path) -> None:
    """Stopped after two batches and resumed with getOrCreate: the count goes on and the timer registered before fires."""
    directory = tmp_path / "ck"
    rows = [["x:a"], ["x:b"], ["x:c"], [], [], []]
    first, _, errors = run(spark_context, directory, rows, drive=2)
    assert errors == [] and first == {1000: [("x", "count", 1)], 2000: [("x", "count", 2)]}
    second, _, errors = run(spark_context, directory, rows, resume=True, clock_start=2000, drive=4)
    assert errors == []
    assert second == {3000: [("x", "count", 3)], 4000: [], 5000: [],
                      6000: [("x", "idle", 5500, ["a", "b", "c"], [("a", 1), ("b", 1), ("c", 1)])]}


class Seeded(StatefulProcessor):
    """A running total per key, seeded by the initial state (several rows of a key are summed)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.getValueState("total", "total long")

    def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> None:  # noqa: N803
        self.total.update((self.total.get() or 0) + initialState)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        total = (self.total.get() or 0) + sum(len(row) for row in rows)
        self.total.update(total)
        yield (key, total)


def test_the_initial_state_seeds_the_first_batch_only(spark_context: Any, tmp_path: Path) -> None:
    """A list of (key, row) pairs reaches handleInitialState in batch 0 (before that key's input), and never again."""
    outputs, _, errors = run(spark_context, tmp_path / "ck", [["x:a"], ["x:bb", "z:c"], ["y:d"]], processor=Seeded(),
                             initial=[("x", 10), ("y", 100)])
    assert errors == []
    assert outputs == {1000: [("x", 11)], 2000: [("x", 13), ("z", 1)], 3000: [("y", 101)]}


class Renamed(StatefulProcessor):
    """Tally's ``count`` made a list state: incompatible with a checkpoint Tally wrote."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getListState("count", "count long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        yield from ()


def test_a_restart_with_an_incompatible_processor_is_refused_and_keeps_the_state(spark_context: Any, tmp_path: Path) -> None:
    """Resumed with a processor whose variable changed kind: Spark's error class, no batch runs, the schema is kept."""
    directory = tmp_path / "ck"
    _, _, errors = run(spark_context, directory, [["x:a"]], drive=1)
    assert errors == []
    schema = (directory / "stateful" / "state" / "0" / "schema").read_text()
    outputs, _, errors = run(spark_context, directory, [["x:a"], ["x:b"]], processor=Renamed(), resume=True,
                             clock_start=1000, drive=1)
    assert outputs == {}
    assert len(errors) == 1 and "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE" in str(errors[0])
    assert (directory / "stateful" / "state" / "0" / "schema").read_text() == schema


def test_bad_arguments_and_a_missing_checkpoint_are_refused(spark_context: Any) -> None:
    """Not a processor, an unknown time mode or output mode (Spark's classes), an RDD as the initial state: refused at
    the call; no checkpoint directory: at start."""
    ssc = StreamingContext(spark_context, 1, clock=ManualClock(0))
    pairs = ssc.queueStream([[("a", "b")]])
    with pytest.raises(InvalidPipelineError, match=r"^statefulProcessor must be an instance of a StatefulProcessor"):
        pairs.transformWithState(lambda key, rows: rows, "Update", "None")
    with pytest.raises(TransformWithStateError, match=r"^\[STATEFUL_PROCESSOR_UNKNOWN_TIME_MODE\] Unknown time mode "
                                                      r"Sometimes\. "):
        pairs.transformWithState(Tally(), "Update", "Sometimes")
    with pytest.raises(TransformWithStateError, match=r"^\[STREAMING_OUTPUT_MODE\.INVALID\] Invalid streaming output "
                                                      r"mode: Sometimes\. "):
        pairs.transformWithState(Tally(), "Sometimes", "None")
    with pytest.raises(InvalidPipelineError, match=r"^initialState of transformWithState must be \(key, row\) pairs in a "
                                                   r"list, not an RDD: .*; pass initialState=rdd\.collect\(\)$"):
        pairs.transformWithState(Tally(), "Update", "None", initialState=spark_context.parallelize([("a", 1)]))
    pairs.transformWithState(Tally(), "Append", "ProcessingTime").pprint()
    with pytest.raises(InvalidPipelineError, match="The checkpoint directory has not been set"):
        ssc.start()
    ssc.stop(stopSparkContext=False)


class Flaky(Tally):
    """Tally that raises on key x's second row while a marker file exists."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        import os

        batch = list(rows)
        if key == "x" and (self.count.get() or 0) + len(batch) == 2 and os.path.exists(self.marker):
            raise RuntimeError("flaky processor")
        yield from super().handleInputRows(key, iter(batch), timerValues)


def test_a_raising_processor_fails_its_batch_and_a_restart_reruns_it_with_the_state_intact(
        spark_context: Any, tmp_path: Path) -> None:
    """The processor raises in batch 2 (while a marker exists): the batch fails with Spark's user-function error class,
    nothing of it is committed; resumed, it runs again from batch 1's state and the outputs are as if nothing failed."""
    directory, marker = tmp_path / "ck", tmp_path / "fail"
    marker.touch()
    rows = [["x:a"], ["x:b", "y:c"], []]
    first, _, errors = run(spark_context, directory, rows, processor=Flaky(str(marker)), drive=2)
    assert first == {1000: [("x", "count", 1)]}
    assert len(errors) == 1 and "[TRANSFORM_WITH_STATE_USER_FUNCTION_ERROR]" in str(errors[0])
    assert "RuntimeError: flaky processor" in str(errors[0])
    marker.unlink()
    second, _, errors = run(spark_context, directory, rows, processor=Flaky(str(marker)), resume=True,
                            clock_start=2000, drive=1)
    assert errors == []
    assert second == {2000: [("x", "count", 2), ("y", "count", 1)], 3000: []}


def test_event_time_without_a_watermark_runs_on_a_watermark_of_0(spark_context: Any, tmp_path: Path) -> None:
    """As in pyspark 4.3: no withWatermark, time mode EventTime: the handlers see watermark 0 and a timer at 0 fires in
    the batch that registered it."""
    outputs: dict[int, list[Any]] = {}
    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = ssc.queueStream([spark_context.parallelize(["a"], 1)], oneAtATime=True, default=spark_context.emptyRDD())
    stream.map(lambda r: (r, r)).transformWithState(Early(), "Update", "EventTime", numPartitions=2).foreachRDD(
        lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
    ssc.checkpoint(str(tmp_path / "ck"))
    assert run_dstream_batches(ssc, clock, 1) == []
    assert outputs == {1000: [("a", "fired", 0), ("a", "rows", 0)]}


def test_a_restart_with_flat_map_groups_with_state_on_its_state_is_refused(spark_context: Any, tmp_path: Path) -> None:
    """Resumed with flatMapGroupsWithState where transformWithState kept its state: Spark's error class before the
    state is read (its rows would be unpickled as the other operator's), and the checkpoint's files are as they were."""
    directory = tmp_path / "ck"
    _, _, errors = run(spark_context, directory, [["x:a"]], drive=1)
    assert errors == []
    state = directory / "stateful"
    files = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    outputs: dict[int, list[Any]] = {}
    clock = ManualClock(1000)

    def setup() -> StreamingContext:
        ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
        stream = ssc.queueStream([spark_context.parallelize(["x:b"], 2)], oneAtATime=True, default=spark_context.emptyRDD())
        pairs = stream.map(lambda line: (line.split(":")[0], line.split(":")[1]))
        out = pairs.flatMapGroupsWithState(lambda key, values, state: [(key, len(list(values)))], numPartitions=2)
        out.foreachRDD(lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), rdd.collect()))
        ssc.checkpoint(str(directory))
        return ssc

    ssc = StreamingContext.getOrCreate(str(directory), setup, restoreGraph=False)
    errors = run_dstream_batches(ssc, clock, 1)
    assert outputs == {}
    assert len(errors) == 1 and "[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA]" in str(errors[0])
    assert f"OperatorName: {TRANSFORM_WITH_STATE_OPERATOR})]; Stateful operators in current batch: [(OperatorId: 0 -> " \
           "OperatorName: flatMapGroupsWithState)]" in str(errors[0])
    assert {p: p.read_bytes() for p in state.rglob("*") if p.is_file()} == files
