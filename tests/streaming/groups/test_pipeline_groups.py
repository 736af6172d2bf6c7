"""flatMapGroupsWithState and watermarks for plain-Python pipelines: no Spark, the same store and rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from scheduler import InvalidPipelineError, ManualClock, Seconds
from streaming import Batch, ListSource, Pipeline, StreamingRuntime
from streaming.state import EVENT_TIME_WITHOUT_WATERMARK, GroupState
from tests.anyio_support import raises_exactly
from tests.support import advance, run_pipeline_for

pytestmark = pytest.mark.anyio

MINUTE = 60_000
CLICKS = [("ada", 1 * MINUTE), ("bob", 2 * MINUTE), ("ada", 5 * MINUTE), ("cy", 40 * MINUTE),
          ("ada", 50 * MINUTE), ("bob", 3 * MINUTE), ("eve", 20 * MINUTE), ("dee", 95 * MINUTE), ("cy", 96 * MINUTE)]


def sessions(user: str, clicks: Iterator[tuple[str, int]], state: GroupState) -> Iterator[tuple[str, int, int, int]]:
    """A session per user; closed 30 minutes of event time after its last click."""
    if state.hasTimedOut:
        count, first, last = state.get
        state.remove()
        yield (user, count, first, last)
        return
    count, first, last = state.getOption or (0, None, None)
    for _, at in clicks:
        count += 1
        first = at if first is None else min(first, at)
        last = at if last is None else max(last, at)
    state.update((count, first, last))
    state.setTimeoutTimestamp(last + 30 * MINUTE)


def program(closed: list[Any]) -> Pipeline:
    p = Pipeline()
    p.add_source(ListSource(CLICKS, max_per_batch=2), name="clicks")
    p.add_watermark("clicks", lambda click: click[1], "10 minutes")
    name = p.add_groups_with_state("clicks", sessions, key=lambda click: click[0], timeout="EventTimeTimeout")

    def out(batch: Batch) -> None:
        closed.extend((batch.time.milliseconds, *row) for row in batch.inputs[name])

    p.add_output(out, name="out")
    return p


async def test_sessions_close_by_event_time_and_late_clicks_are_dropped(tmp_path: Path, clock: ManualClock) -> None:
    """Two clicks per batch; sessions close once the watermark passes last + 30 min; a click at or before the late-event
    watermark is dropped."""
    closed: list[Any] = []
    async with StreamingRuntime(program(closed), Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
        await rt.start()
        await advance(rt, clock, 6_000)
        progress = rt.recent_progress
        await rt.stop()
    # Batches of two clicks. The watermark after each: 0, 30, 40, 85 min (max - 10 min, never back).
    # bob's 3-minute click in batch 3 is not late (batch 2's watermark, 0, is the late-event one):
    # it extends his session, which times out at 33 min < 40 in batch 4. eve's 20-minute click in
    # batch 4 is late (<= 30 min): dropped. ada's session (last click 50) closes in batch 5 (80 < 85).
    assert closed == [
        (4_000, "bob", 2, 2 * MINUTE, 3 * MINUTE),
        (5_000, "ada", 3, 1 * MINUTE, 50 * MINUTE),
    ]
    dropped = [p.state_operators[0].num_rows_dropped_by_watermark for p in progress]
    assert dropped == [0, 0, 0, 1, 0, 0]
    assert [p.state_operators[0].num_rows_total for p in progress] == [2, 3, 3, 3, 2, 2]


async def test_a_restart_resumes_the_state_and_the_watermark(tmp_path: Path) -> None:
    """Stopped after three batches and restarted: the same sessions close in the same batches as without the stop."""
    closed: list[Any] = []
    await run_pipeline_for(program(closed), tmp_path / "ck", 0, 3_000)
    assert closed == []
    await run_pipeline_for(program(closed), tmp_path / "ck", 3_000, 3_000)
    assert closed == [(4_000, "bob", 2, 2 * MINUTE, 3 * MINUTE), (5_000, "ada", 3, 1 * MINUTE, 50 * MINUTE)]


async def test_state_needs_a_checkpoint_and_event_time_timeouts_a_watermark() -> None:
    """Without a checkpoint location the start is refused; an event-time timeout on an unwatermarked source too."""
    async with StreamingRuntime(program([]), Seconds(1), clock=ManualClock(0), track_progress=True) as rt:
        with pytest.raises(InvalidPipelineError, match="need a runtime with a checkpoint location"):
            await rt.start()
    p = Pipeline()
    p.add_source(ListSource(CLICKS), name="clicks")
    p.add_groups_with_state("clicks", sessions, key=lambda c: c[0], timeout="EventTimeTimeout")
    p.add_output(lambda batch: None)
    p.bind_checkpoint("unused", Seconds(1))
    with raises_exactly(InvalidPipelineError, EVENT_TIME_WITHOUT_WATERMARK):
        p.start(ManualClock(0).now(), None)  # type: ignore[arg-type]
    with raises_exactly(InvalidPipelineError, "no source named 'nope'; the sources are ['clicks']"):
        p.add_watermark("nope", lambda c: c[1], "1 minute")
