"""transformWithState for plain-Python pipelines: no Spark, the same store and rules as the DStream operator."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from scheduler import InvalidPipelineError, ManualClock, Seconds, StreamingQueryException
from streaming import Batch, ListSource, Pipeline, StreamingRuntime
from streaming.state import (
    TRANSFORM_WITH_STATE_OPERATOR,
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    TransformWithStateError,
)
from tests.streaming.tws.tws_support import Early
from tests.support import advance, run_pipeline_for

pytestmark = pytest.mark.anyio

MINUTE = 60_000
GAP = 30 * MINUTE
CLICKS = [("ada", 1 * MINUTE), ("bob", 2 * MINUTE), ("ada", 5 * MINUTE), ("cy", 40 * MINUTE),
          ("ada", 55 * MINUTE), ("bob", 3 * MINUTE), ("eve", 20 * MINUTE), ("dee", 95 * MINUTE), ("cy", 96 * MINUTE)]


class Sessions(StatefulProcessor):
    """A session per user in a value state; an event-time timer closes it 30 minutes after its last click."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.session = handle.getValueState("session", "count long, first long, last long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        count, first, last = self.session.get() or (0, None, None)
        if last is not None:
            self.handle.deleteTimer(last + GAP)
        for _, at in rows:
            count += 1
            first = at if first is None else min(first, at)
            last = at if last is None else max(last, at)
        self.session.update((count, first, last))
        self.handle.registerTimer(last + GAP)
        return iter(())

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,  # noqa: N803
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Any]:  # noqa: N803
        count, first, last = self.session.get()
        self.session.clear()
        yield (key, count, first, last)


def program(closed: list[Any], processor: StatefulProcessor | None = None) -> Pipeline:
    p = Pipeline()
    p.add_source(ListSource(CLICKS, max_per_batch=2), name="clicks")
    p.add_watermark("clicks", lambda click: click[1], "10 minutes")
    name = p.add_transform_with_state("clicks", processor or Sessions(), "Update", "EventTime",
                                      key=lambda click: click[0])

    def out(batch: Batch) -> None:
        closed.extend((batch.time.milliseconds, *row) for row in batch.inputs[name])

    p.add_output(out, name="out")
    return p


# Batches of two clicks; the watermark after each: 0, 30, 45, 85, 86 min (max - 10 min, never back).
# Batch 3 moves bob's timer from 32 to 33 min in its data pass. Batch 4 (eviction watermark 45) fires
# bob's; eve's 20-minute click is late (at or before batch 2's watermark, 30) and dropped. Batch 5
# (watermark 85): cy's click at 96 moved her 70-minute timer first, so it does not fire; ada's timer
# is exactly at the watermark (55 + 30) and fires (GroupState's rule, strictly before, would not).
EXPECTED = [(4_000, "bob", 2, 2 * MINUTE, 3 * MINUTE), (5_000, "ada", 3, 1 * MINUTE, 55 * MINUTE)]


async def test_event_time_timers_fire_at_the_watermark_and_late_clicks_are_dropped(tmp_path: Path,
                                                                                   clock: ManualClock) -> None:
    """Two clicks per batch: sessions close once the watermark reaches last + 30 min (at or before); a late click is dropped."""
    closed: list[Any] = []
    async with StreamingRuntime(program(closed), Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
        await rt.start()
        await advance(rt, clock, 6_000)
        progress = rt.recent_progress
        await rt.stop()
    assert closed == EXPECTED
    operators = [p.state_operators[0] for p in progress]
    assert {op.operator_name for op in operators} == {TRANSFORM_WITH_STATE_OPERATOR}
    assert [op.num_rows_dropped_by_watermark for op in operators] == [0, 0, 0, 1, 0, 0]
    assert [op.num_rows_total for op in operators] == [4, 6, 6, 6, 4, 4]  # a value row and a timer row per open session
    assert [op.custom_metrics.get("numExpiredTimers", 0) for op in operators] == [0, 0, 0, 1, 1, 0]


async def test_a_restart_resumes_the_state_the_timers_and_the_watermark(tmp_path: Path) -> None:
    """Stopped after three batches and restarted: the same sessions close in the same batches as without the stop."""
    closed: list[Any] = []
    await run_pipeline_for(program(closed), tmp_path / "ck", 0, 3_000)
    assert closed == []
    await run_pipeline_for(program(closed), tmp_path / "ck", 3_000, 3_000)
    assert closed == EXPECTED


async def test_event_time_without_a_watermark_runs_on_a_watermark_of_0(tmp_path: Path, clock: ManualClock) -> None:
    """As in pyspark 4.3: no withWatermark, time mode EventTime: the handlers see watermark 0 and a timer at 0 fires in
    the batch that registered it."""
    seen: list[Any] = []
    p = Pipeline()
    p.add_source(ListSource(["a"]), name="s")
    name = p.add_transform_with_state("s", Early(), "Update", "EventTime", key=lambda r: r)
    p.add_output(lambda batch: seen.extend(batch.inputs[name]), name="out")
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
        await rt.start()
        await advance(rt, clock, 1_000)
        await rt.stop()
    assert seen == [("a", "rows", 0), ("a", "fired", 0)]


class ListSessions(Sessions):
    """Sessions whose ``session`` variable is a list state: incompatible with a checkpoint Sessions wrote."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.session = handle.getListState("session", "count long, first long, last long")  # type: ignore[assignment]


async def test_a_restart_with_an_incompatible_processor_fails_its_first_batch(tmp_path: Path) -> None:
    """A restart whose processor changed a variable's kind: the first batch fails with Spark's error class."""
    closed: list[Any] = []
    clock = ManualClock(0)
    async with StreamingRuntime(program(closed), Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
        await rt.start()
        await advance(rt, clock, 1_000)
        await rt.stop()
    schema = (tmp_path / "ck" / "stateful" / "state" / "0" / "schema").read_text()
    clock = ManualClock(1_000)
    with pytest.raises(StreamingQueryException, match=r"terminated with exception: \[STATE_STORE_INVALID_VARIABLE_TYPE_"
                                                      r"CHANGE\] Cannot change session to ListState between query "
                                                      r"restarts\. ") as failed:
        async with StreamingRuntime(program(closed, ListSessions()), Seconds(1), clock=clock,
                                    checkpoint_location=tmp_path / "ck") as rt:
            await rt.start()
            await advance(rt, clock, 1_000)
            await rt.await_termination()
    assert isinstance(failed.value.__cause__, TransformWithStateError) and closed == []
    assert (tmp_path / "ck" / "stateful" / "state" / "0" / "schema").read_text() == schema


def test_bad_arguments_are_refused_when_the_operator_is_added() -> None:
    """Not a processor, a key that is not a function, a name in use: refused with a clear error."""
    p = Pipeline()
    p.add_source(ListSource([1]), name="s")
    with pytest.raises(InvalidPipelineError, match="statefulProcessor must be an instance of a StatefulProcessor"):
        p.add_transform_with_state("s", object(), "Update", "None", key=lambda r: r)
    with pytest.raises(InvalidPipelineError, match=r"^key must be a function of a record, got None$"):
        p.add_transform_with_state("s", Sessions(), "Update", "None", key=None)  # type: ignore[arg-type]
    p.add_transform_with_state("s", Sessions(), "Update", "None", key=lambda r: r)
    with pytest.raises(InvalidPipelineError, match=r"an input named 's\.state' is already registered"):
        p.add_transform_with_state("s", Sessions(), "Update", "None", key=lambda r: r)


class Seeded(StatefulProcessor):
    """A running total per key, seeded by the initial state (several rows of a key are summed)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.getValueState("total", "total long")

    def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> None:  # noqa: N803
        self.total.update((self.total.get() or 0) + initialState)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        total = (self.total.get() or 0) + sum(n for _, n in rows)
        self.total.update(total)
        yield (key, total)


async def test_the_initial_state_seeds_the_first_batch_only(tmp_path: Path, clock: ManualClock) -> None:
    """(key, row) pairs reach handleInitialState in batch 0 only, every row of a key, before that key's records."""
    seen: list[Any] = []
    p = Pipeline()
    p.add_source(ListSource([("x", 1), ("y", 2), ("x", 3)], max_per_batch=2), name="s")
    name = p.add_transform_with_state("s", Seeded(), "Update", "None", key=lambda r: r[0],
                                      initialState=[("x", 10), ("x", 5), ("z", 100)])
    p.add_output(lambda batch: seen.append(sorted(batch.inputs[name])), name="out")
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
        await rt.start()
        await advance(rt, clock, 2_000)
        await rt.stop()
    assert seen == [[("x", 16), ("y", 2)], [("x", 19)]]


async def test_available_now_ends_with_a_batch_without_data_that_fires_the_timers_the_watermark_passed(
        tmp_path: Path) -> None:
    """Spark's no-data batch in event-time mode: cy's click at 60 min moves the watermark to 50 min in the last data
    batch, past ada's and bob's timers (31 and 32 min), which fire in one more batch without input."""
    from streaming import Trigger

    closed: list[Any] = []
    p = Pipeline()
    p.add_source(ListSource([("ada", 1 * MINUTE), ("bob", 2 * MINUTE), ("cy", 60 * MINUTE)], max_per_batch=2),
                 name="clicks")
    p.add_watermark("clicks", lambda click: click[1], "10 minutes")
    name = p.add_transform_with_state("clicks", Sessions(), "Update", "EventTime", key=lambda click: click[0])
    p.add_output(lambda batch: closed.extend(sorted((batch.time.milliseconds, *row) for row in batch.inputs[name])),
                 name="out")
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(500), checkpoint_location=tmp_path / "ck",
                                trigger=Trigger.AVAILABLE_NOW) as rt:
        await rt.start()
        assert await rt.await_termination()
        assert [(e.batch_id, e.num_input_rows) for e in rt.recent_progress if e.state_operators] == [(0, 2), (1, 1), (2, 0)]
    assert closed == [(3_000, "ada", 1, 1 * MINUTE, 1 * MINUTE), (3_000, "bob", 1, 2 * MINUTE, 2 * MINUTE)]
