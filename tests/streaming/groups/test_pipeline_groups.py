"""flatMapGroupsWithState and watermarks for plain-Python pipelines: no Spark, the same store and rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from scheduler import InvalidPipelineError, ManualClock, Seconds
from streaming import Batch, ListSource, Pipeline, StreamingRuntime
from streaming.state import EVENT_TIME_WITHOUT_WATERMARK, GroupState, StateStoreProvider
from tests.anyio_support import raises_exactly
from tests.support import advance, capture_events, run_pipeline_for

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
    """Stopped after three batches and restarted: the same sessions close in the same batches as without the stop. The
    stop deleted the store's working copy (lane M4: each stopped query left it, and its file, in the process's private
    folder for good), so the restart rebuilt it from the checkpoint."""
    closed: list[Any] = []
    copy = StateStoreProvider(tmp_path / "ck" / "stateful", 0, 0).working_copy  # the pipeline's operator 0
    first = program(closed)
    there: list[bool] = []
    first.add_output(lambda batch: there.append(copy.exists()), name="working copy")
    await run_pipeline_for(first, tmp_path / "ck", 0, 3_000)
    assert closed == [] and there == [True, True, True]
    assert not copy.exists() and not copy.with_name(f"{copy.name}-wal").exists()
    await run_pipeline_for(program(closed), tmp_path / "ck", 3_000, 3_000)
    assert closed == [(4_000, "bob", 2, 2 * MINUTE, 3 * MINUTE), (5_000, "ada", 3, 1 * MINUTE, 50 * MINUTE)]
    assert not copy.exists()


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


async def run_passing_over(tmp_path: Path, pipeline: Pipeline, clock: ManualClock, ms: int) -> list[Any]:
    """Run ``pipeline`` on ``tmp_path / "ck"`` under the DStream semantics (a failed batch does not stop it: it is
    passed over) for ``ms`` of the manual clock; its recent progress."""
    async with StreamingRuntime(pipeline, Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck",
                                stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, ms)
        progress = rt.recent_progress
        await rt.stop()
    return list(progress)


def counting_program(failures: dict[str, int], seen: list[Any], calls: list[tuple[str, int]]) -> Pipeline:
    """A running count of one key's records, and a second operator counting the same records; ``failures`` says how
    many more times each operator raises on a batch holding ``"boom"``; every call is recorded as (operator, total)."""
    p = Pipeline()
    p.add_source(ListSource(["a", "b", "boom", "c", "d"], max_per_batch=1), name="s")
    names = []
    for operator in ("first", "second"):
        def count(key: str, values: Iterator[Any], state: GroupState, operator: str = operator) -> Iterator[Any]:
            records = list(values)
            total = (state.getOption or 0) + len(records)
            calls.append((operator, total))
            if "boom" in records and failures.get(operator, 0) > 0:
                failures[operator] -= 1
                raise RuntimeError(f"{operator} fails")
            state.update(total)
            yield total

        names.append(p.add_groups_with_state("s", count, key=lambda r: "k", name=operator))
    p.add_output(lambda batch: seen.append((batch.time.milliseconds, *(list(batch.inputs[n]) for n in names))), name="out")
    return p


class FailingReads(ListSource):
    """A ListSource whose reads of ``fail_from`` raise ``times`` times (a storage hiccup)."""

    def __init__(self, records: list[Any], fail_from: str, times: int) -> None:
        super().__init__(records, max_per_batch=1)
        self.fail_from, self.times = fail_from, times

    async def read(self, start: Any, end: Any) -> Any:
        if start == self.fail_from and self.times > 0:
            self.times -= 1
            raise OSError("storage hiccup")
        return await super().read(start, end)


async def test_a_batch_whose_input_could_not_be_read_has_its_range_read_again_by_the_next_for_its_state(
        tmp_path: Path, clock: ManualClock) -> None:
    """Batch 3000's read fails once, so no operator ran: batch 4000 reads 3000's range again and runs its state first;
    the counts go on as if it had not failed (only 3000's outputs are lost)."""
    seen: list[Any] = []
    p = Pipeline()
    p.add_source(FailingReads(list("abcde"), "2", 1), name="s")
    name = p.add_groups_with_state("s", lambda k, v, s: [s.update((s.getOption or 0) + len(list(v))) or s.get],
                                   key=lambda r: "k")
    p.add_output(lambda batch: seen.append((batch.time.milliseconds, list(batch.inputs[name]))), name="out")
    await run_passing_over(tmp_path, p, clock, 5_000)
    assert seen == [(1000, [1]), (2000, [2]), (4000, [4]), (5000, [5])]


def checkpoint_ids(directory: Path) -> list[int]:
    return sorted(int(name) for name in (p.name for p in directory.iterdir()) if name.isdigit())


async def test_a_batch_whose_state_failed_runs_it_again_first_and_the_later_batches_go_on(tmp_path: Path,
                                                                                        clock: ManualClock) -> None:
    """Under the DStream semantics the second operator fails once in batch 3000, after the first committed: batch 4000
    runs only the second's state of batch 3000 again (its outputs lost), then goes on; batch 3000 is passed over, so
    a restart runs nothing again and counts on from exact state. (Every later batch used to fail, loading a version
    that was never written.)"""
    failures, seen, calls = {"second": 1}, list[Any](), list[tuple[str, int]]()
    program = counting_program(failures, seen, calls)
    await run_passing_over(tmp_path, program, clock, 5_000)
    assert seen == [(1000, [1], [1]), (2000, [2], [2]), (4000, [4], [4]), (5000, [5], [5])]
    assert calls == [("first", 1), ("second", 1), ("first", 2), ("second", 2), ("first", 3), ("second", 3),
                     ("second", 3), ("first", 4), ("second", 4), ("first", 5), ("second", 5)]
    assert checkpoint_ids(tmp_path / "ck" / "commits") == [0, 1, 2, 3, 4]  # 2 passed over when 3 committed
    seen.clear()
    p = Pipeline()
    p.add_source(ListSource(["a", "b", "boom", "c", "d", "e"], max_per_batch=1), name="s")
    name = p.add_groups_with_state("s", lambda k, v, s: [s.update((s.getOption or 0) + len(list(v))) or s.get],
                                   key=lambda r: "k", name="first")
    p.add_output(lambda batch: seen.append((batch.time.milliseconds, list(batch.inputs[name]))), name="out")
    await run_pipeline_for(p, tmp_path / "ck", 5_000, 1_000)
    assert seen == [(6000, [6])]


async def test_a_batch_whose_state_keeps_failing_fails_every_later_batch_until_a_restart_runs_them_in_order(
        tmp_path: Path, clock: ManualClock) -> None:
    """The first operator fails in batch 3000 each time: batches 4000 and 5000 fail too, with a StateCatchUpError naming
    batch 3000 and its error (logged), and none commits; healed, a restart runs 3000 to 5000 again, in order."""
    failures, seen, calls = {"first": 100}, list[Any](), list[tuple[str, int]]()
    program = counting_program(failures, seen, calls)
    with capture_events(exceptions=True) as logs:
        await run_passing_over(tmp_path, program, clock, 5_000)
    assert seen == [(1000, [1], [1]), (2000, [2], [2])]
    assert failures == {"first": 97}
    assert checkpoint_ids(tmp_path / "ck" / "commits") == [0, 1]
    errors = [e["exception"] for e in logs if e["event"].startswith("Error generating jobs")]  # a state runs there
    assert [type(e).__name__ for e in errors] == ["GroupsWithStateError", "StateCatchUpError", "StateCatchUpError"]
    assert [str(e).split(": GroupsWithStateError: ")[0] for e in errors[1:]] == [
        f"batch {time} ms cannot load the state of the pipeline's stateful operators: batch 3000 ms failed before its "
        "state version was committed, and running its state again failed too" for time in (4000, 5000)]
    assert all("RuntimeError: first fails" in str(e.__cause__) for e in errors[1:])
    seen.clear()
    failures["first"] = 0
    await run_pipeline_for(counting_program(failures, seen, []), tmp_path / "ck", 5_000, 1_000)
    assert seen == [(3000, [3], [3]), (4000, [4], [4]), (5000, [5], [5]), (6000, [], [])]


async def test_a_failed_batch_whose_state_caught_up_moves_the_watermark_as_if_it_had_run(tmp_path: Path,
                                                                                         clock: ManualClock) -> None:
    """The sessions program with the function failing once in batch 2000 (cy's 40-minute click): the next batch runs
    its state first, and its event times move the watermark, so eve's 20-minute click is still late in batch 4000
    and the same sessions close in the same batches as in the uninterrupted run (batch 2000 closes none)."""
    failed: list[int] = []

    def once(user: str, clicks: Iterator[tuple[str, int]], state: GroupState) -> Iterator[tuple[str, int, int, int]]:
        taken = list(clicks)
        if ("cy", 40 * MINUTE) in taken and not failed:
            failed.append(1)
            raise RuntimeError("fails once")
        return sessions(user, iter(taken), state)

    closed: list[Any] = []
    p = Pipeline()
    p.add_source(ListSource(CLICKS, max_per_batch=2), name="clicks")
    p.add_watermark("clicks", lambda click: click[1], "10 minutes")
    name = p.add_groups_with_state("clicks", once, key=lambda click: click[0], timeout="EventTimeTimeout")
    p.add_output(lambda batch: closed.extend((batch.time.milliseconds, *row) for row in batch.inputs[name]), name="out")
    progress = await run_passing_over(tmp_path, p, clock, 6_000)
    assert failed == [1]
    assert closed == [(4_000, "bob", 2, 2 * MINUTE, 3 * MINUTE), (5_000, "ada", 3, 1 * MINUTE, 50 * MINUTE)]
    assert [p.batch_id for p in progress] == [0, 2, 3, 4, 5]
    assert [p.state_operators[0].num_rows_dropped_by_watermark for p in progress] == [0, 0, 1, 0, 0]
    assert [p.event_time.get("watermark") for p in progress] == [
        "1970-01-01T00:00:00.000Z", "1970-01-01T00:30:00.000Z", "1970-01-01T00:40:00.000Z",
        "1970-01-01T01:25:00.000Z", "1970-01-01T01:26:00.000Z"]


async def test_a_batch_whose_input_was_read_again_counts_its_event_times_with_the_batch_that_read_it(
        tmp_path: Path, clock: ManualClock) -> None:
    """Batch 3000 (the 60-minute click) cannot be read once: batch 4000 reads it again for its state, and its event
    time moves the watermark from there, so batch 5000 runs with 55 minutes as it would have (batch 4000, planned
    before anything had read it, with batch 2000's 15)."""
    p = Pipeline()
    p.add_source(FailingReads([("a", m * MINUTE) for m in (10, 20, 60, 30, 40)], "2", 1), name="s")
    p.add_watermark("s", lambda click: click[1], "5 minutes")
    p.add_groups_with_state("s", lambda k, v, s: [s.update((s.getOption or 0) + len(list(v))) or s.get],
                            key=lambda r: r[0])
    p.add_output(lambda batch: None, name="out")
    progress = await run_passing_over(tmp_path, p, clock, 5_000)
    assert [(p.batch_id, p.event_time.get("watermark")) for p in progress] == [
        (0, "1970-01-01T00:00:00.000Z"), (1, "1970-01-01T00:05:00.000Z"), (3, "1970-01-01T00:15:00.000Z"),
        (4, "1970-01-01T00:55:00.000Z")]


@pytest.mark.parametrize(("timeout", "batches", "expected"), [
    ("EventTimeTimeout", 3, [(3_000, "ada", 1, 1 * MINUTE, 1 * MINUTE), (3_000, "bob", 1, 2 * MINUTE, 2 * MINUTE)]),
    ("NoTimeout", 2, []),
])
async def test_available_now_ends_with_a_batch_without_data_when_the_watermark_moved(
        tmp_path: Path, timeout: str, batches: int, expected: list[Any]) -> None:
    """Spark's no-data batch: the last data batch (cy at 60 min) moves the watermark to 50 min, past ada's and bob's
    timeouts (31 and 32 min), so an AvailableNow run ends with one more batch, without input, in which they time out
    (the run stopped after the data and left them until the next run). Without an event-time timeout, no such batch.
    A second run with nothing new runs no batch: the watermark did not move again."""
    from streaming import Trigger

    closed: list[Any] = []

    def build() -> Pipeline:
        p = Pipeline()
        p.add_source(ListSource([("ada", 1 * MINUTE), ("bob", 2 * MINUTE), ("cy", 60 * MINUTE)], max_per_batch=2),
                     name="clicks")
        p.add_watermark("clicks", lambda click: click[1], "10 minutes")
        func = sessions if timeout == "EventTimeTimeout" else lambda user, clicks, state: state.update(len(list(clicks))) or ()
        name = p.add_groups_with_state("clicks", func, key=lambda click: click[0], timeout=timeout)
        p.add_output(lambda batch: closed.extend(sorted((batch.time.milliseconds, *row) for row in batch.inputs[name])),
                     name="out")
        return p

    for run, at in enumerate((500, 10_500)):
        async with StreamingRuntime(build(), Seconds(1), clock=ManualClock(at), checkpoint_location=tmp_path / "ck",
                                    trigger=Trigger.AVAILABLE_NOW) as rt:
            await rt.start()
            assert await rt.await_termination()
            progress = [(p.batch_id, p.num_input_rows) for p in rt.recent_progress if p.num_input_rows or p.state_operators]
        if run == 0:
            assert progress == [(0, 2), (1, 1), (2, 0)][:batches]
        else:
            assert progress == []
    assert closed == expected


async def test_available_now_runs_no_batch_without_data_at_a_restart_whose_watermark_moved_before(tmp_path: Path) -> None:
    """As pyspark 4.3: a Once run moves the watermark to 50 min and stops; an AvailableNow run with nothing new then
    records an idle trigger and runs no batch (Spark asks for a batch without data only after a batch of the same run),
    so ada's and bob's sessions stay open (lane K4)."""
    from streaming import Trigger

    closed: list[Any] = []
    ran: list[list[Any]] = []
    for at, trigger in ((500, Trigger.ONCE), (10_500, Trigger.AVAILABLE_NOW)):
        p = Pipeline()
        p.add_source(ListSource([("ada", 1 * MINUTE), ("bob", 2 * MINUTE), ("cy", 60 * MINUTE)]), name="clicks")
        p.add_watermark("clicks", lambda click: click[1], "10 minutes")
        name = p.add_groups_with_state("clicks", sessions, key=lambda click: click[0], timeout="EventTimeTimeout")
        p.add_output(lambda batch, name=name: closed.extend(batch.inputs[name]), name="out")
        async with StreamingRuntime(p, Seconds(1), clock=ManualClock(at), checkpoint_location=tmp_path / "ck",
                                    trigger=trigger) as rt:
            await rt.start()
            assert await rt.await_termination()
            ran.append([(e.batch_id, e.num_input_rows) for e in rt.recent_progress if e.state_operators])
    assert ran == [[(0, 3)], []] and closed == []
