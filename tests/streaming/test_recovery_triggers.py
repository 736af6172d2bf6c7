"""Once and AvailableNow triggers, and async progress tracking: its restrictions, durability interval and recovery."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler import (
    STATE_VERSION_KEY,
    BatchGrid,
    Checkpoint,
    CheckpointError,
    CorruptCheckpointError,
    InvalidPipelineError,
    ManualClock,
    Milliseconds,
    OffsetSeq,
    OffsetSeqLog,
    OffsetSeqMetadata,
    Seconds,
    Time,
)
from streaming import Batch, ListSource, Pipeline, StreamingRuntime, Trigger
from streaming.dstream import DStreamGraph
from streaming.state import GroupState, StateNotFoundError, read_state, read_state_changes, read_state_metadata
from tests.anyio_support import raises_exactly
from tests.streaming.test_recovery import Recorder, ids, pipeline
from tests.support import advance

pytestmark = pytest.mark.anyio


async def test_once_runs_one_batch_with_everything_then_stops(tmp_path: Path) -> None:
    """Once takes every available record in one batch (read limits ignored) at the next grid time, then stops by itself."""
    out = Recorder()
    p, _ = pipeline(out, max_per_batch=2)
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(2500), checkpoint_location=tmp_path,
                                trigger=Trigger.ONCE) as rt:
        await rt.start()
        assert await rt.await_termination() is True
    assert out.seen == [(3000, list("abcdefghij"))]
    assert ids(tmp_path / "offsets") == ids(tmp_path / "commits") == [0]  # a fresh query starts at batch 0


async def test_once_with_an_uncommitted_batch_only_reruns_it(tmp_path: Path, clock: ManualClock) -> None:
    """Spark's rule: a Once run on a checkpoint with an uncommitted batch re-runs that batch and takes no new data."""
    p, _ = pipeline(Recorder(fail_at={1000}), records=["a"])
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path) as rt:
        await rt.start()
        await advance(rt, clock, 1000)
        await rt.stop()
    out = Recorder()
    p, _ = pipeline(out, records=["a", "b", "c"])
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(9000), checkpoint_location=tmp_path,
                                trigger=Trigger.ONCE) as rt:
        await rt.start()
        assert await rt.await_termination()
    assert out.seen == [(1000, ["a"])]


async def test_a_once_run_keeps_the_end_of_an_input_that_has_none_now(tmp_path: Path) -> None:
    """A source that reports no offset in a Once run (its directory moved away for a while) keeps its logged end, as
    Spark keeps an input's previous end: logged as none, the next run read its files again from the first."""
    import os

    from streaming import DirectorySource, FileSink

    source_dir, out_dir, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    source_dir.mkdir()
    (source_dir / "001.txt").write_text("a\n")
    (source_dir / "002.txt").write_text("b\n")

    async def run(at: int, trigger: Trigger) -> None:
        p = Pipeline()
        p.add_source(DirectorySource(source_dir), name="in")
        p.add_output(FileSink(out_dir), name="out")
        clock = ManualClock(at)
        async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=checkpoint, trigger=trigger) as rt:
            await rt.start()
            if trigger is Trigger.ONCE:
                await rt.await_termination()
            else:
                await advance(rt, clock, 1000)
                await rt.stop()

    await run(0, Trigger.PROCESSING_TIME)
    os.rename(source_dir, tmp_path / "away")
    await run(5000, Trigger.ONCE)
    os.rename(tmp_path / "away", source_dir)
    await run(9000, Trigger.ONCE)
    assert {name: (out_dir / name).read_text().split() for name in sorted(os.listdir(out_dir))} == {
        "batch-1000.txt": ["a", "b"]}


async def test_available_now_drains_what_was_there_at_start_in_limited_batches(tmp_path: Path) -> None:
    """AvailableNow pins the end at start, runs back-to-back batches of at most max_per_batch on consecutive grid times, stops."""
    out = Recorder()
    src_holder: list[ListSource] = []

    async def appending(batch: Batch) -> None:
        src_holder[0].append("late")  # arrives after the start: not part of this run
        await out(batch)

    p, src = pipeline(appending, records=list("abcde"), max_per_batch=2)
    src_holder.append(src)
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(500), checkpoint_location=tmp_path,
                                trigger=Trigger.AVAILABLE_NOW) as rt:
        await rt.start()
        assert await rt.await_termination()
        assert [e.batch_id for e in rt.recent_progress] == [0, 1, 2]
    assert out.seen == [(1000, ["a", "b"]), (2000, ["c", "d"]), (3000, ["e"])]


class LateListSource(ListSource):
    """A ListSource whose first look for new data comes ``late`` ms after the open (a slow machine): it moves the clock."""

    def __init__(self, records: list[Any], clock: ManualClock, late: int) -> None:
        super().__init__(records)
        self.clock, self.late = clock, late

    async def latest_offset(self) -> Any:
        if self.late:
            self.clock.advance(Milliseconds(self.late))
            self.late = 0
        return await super().latest_offset()


@pytest.mark.parametrize("trigger", [Trigger.ONCE, Trigger.AVAILABLE_NOW])
async def test_a_first_batch_that_came_late_and_failed_is_run_again_at_a_restart(tmp_path: Path, trigger: Trigger) -> None:
    """A fresh query's first trigger-driven batch takes the next grid time after the clock (as Spark takes its batch's
    timestamp from the clock), here batch 4. Its offsets entry says its input starts where the query's does, so a
    restart runs it again; it was refused, with no entry before it to start from (lane K3)."""
    clock = ManualClock(500)
    out = Recorder(fail_at={5000})
    p = Pipeline()
    p.add_source(LateListSource(list("abc"), clock, 4000), name="in")
    p.add_output(out, name="out")
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path, trigger=trigger) as rt:
        await rt.start()
        with pytest.raises(Exception, match="boom at 5000"):
            await rt.await_termination()
    assert ids(tmp_path / "offsets") == [4] and ids(tmp_path / "commits") == []
    assert OffsetSeqLog(tmp_path / "offsets").get(4).metadata.conf["aiodstream.fromStart"] == "true"  # type: ignore[union-attr]
    again, clock = Recorder(), ManualClock(9500)
    p = Pipeline()
    p.add_source(LateListSource(list("abc"), clock, 0), name="in")  # the same kind of source: the checkpoint checks it
    p.add_output(again, name="out")
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path, trigger=trigger) as rt:
        await rt.start()
        assert await rt.await_termination()
    assert again.seen[0] == (5000, list("abc"))
    assert ids(tmp_path / "commits")[0] == 4


async def test_available_now_without_new_data_runs_no_batch(tmp_path: Path) -> None:
    """With nothing new, AvailableNow records one idle trigger and stops without a batch."""
    out = Recorder()
    p, _ = pipeline(out, records=[])
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(500), checkpoint_location=tmp_path,
                                trigger=Trigger.AVAILABLE_NOW) as rt:
        await rt.start()
        assert await rt.await_termination()
        idle = rt.last_progress
        assert idle is not None and (idle.batch_id, idle.num_input_rows, set(idle.duration_ms)) == (
            0, 0, {"latestOffset", "triggerExecution"})
        assert rt.status.message == "Stopped"
    assert out.seen == [] and ids(tmp_path / "offsets") == []


async def test_a_processing_time_restart_follows_trigger_driven_batches(tmp_path: Path) -> None:
    """Batches after an AvailableNow run continue its ids and never reuse a batch time."""
    p, _ = pipeline(Recorder(), records=list("abcd"), max_per_batch=1)
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(0), checkpoint_location=tmp_path,
                                trigger=Trigger.AVAILABLE_NOW) as rt:
        await rt.start()
        await rt.await_termination()
    out = Recorder()
    p, _ = pipeline(out, records=list("abcdef"), max_per_batch=1)
    clock = ManualClock(2000)  # the AvailableNow run's batch times (1000..4000) ran ahead of the clock
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path) as rt:
        await rt.start()
        await advance(rt, clock, 3000)
        await rt.stop()
    assert out.seen == [(5000, ["e"])]


# -- async progress tracking --


@pytest.mark.parametrize(
    ("trigger", "message"),
    [
        (Trigger.ONCE, "Async progress tracking cannot be used with Once trigger"),
        (Trigger.AVAILABLE_NOW, "Async progress tracking cannot be used with AvailableNow trigger"),
    ],
)
def test_async_tracking_refuses_once_and_available_now(trigger: Trigger, message: str) -> None:
    """Async progress tracking with a Once or AvailableNow trigger is refused with Spark's messages."""
    with raises_exactly(InvalidPipelineError, message):
        StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), trigger=trigger,
                         options={"asyncProgressTrackingEnabled": "true"})


class StatefulPipeline(Pipeline):
    """A pipeline that says it keeps state between batches."""

    @property
    def is_stateful(self) -> bool:
        return True


async def test_async_tracking_refuses_stateful_pipelines(tmp_path: Path) -> None:
    """A stateful graph with async progress tracking fails to start with Spark's message; the runtime is STOPPED."""
    p = StatefulPipeline()
    p.add_source(ListSource(["a"]), name="in")
    p.add_output(Recorder())
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(), checkpoint_location=tmp_path,
                                options={"asyncProgressTrackingEnabled": True}) as rt:
        with raises_exactly(InvalidPipelineError, "Stateful streaming queries does not support async progress tracking at "
                            "this moment."):
            await rt.start()
    assert not (tmp_path / "offsets").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"asyncProgressTrackingEnable": "true"}, "unknown option 'asyncProgressTrackingEnable'; the options are "
         "asyncProgressTrackingEnabled, asyncProgressTrackingCheckpointIntervalMs, spark.sql.streaming.minBatchesToRetain, "
         "spark.sql.streaming.numRecentProgressUpdates, spark.sql.streaming.noDataProgressEventInterval, "
         "_asyncProgressTrackingOverrideSinkSupportCheck"),
        ({"asyncProgressTrackingEnabled": "yes"}, "option asyncProgressTrackingEnabled must be true or false, got 'yes'"),
        ({"asyncProgressTrackingCheckpointIntervalMs": "-1"}, "option asyncProgressTrackingCheckpointIntervalMs must be a "
         "non-negative whole number of milliseconds, got '-1'"),
        ({"spark.sql.streaming.minBatchesToRetain": 0}, "option spark.sql.streaming.minBatchesToRetain must be a positive "
         "whole number of batches, got 0"),
        ({"spark.sql.streaming.minBatchesToRetain": "1\u00b2"}, "option spark.sql.streaming.minBatchesToRetain must be a "
         "positive whole number of batches, got '1\u00b2'"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    """Unknown option names and bad values are refused, naming the option and the rule."""
    with raises_exactly(InvalidPipelineError, message):
        StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), options=options)


def test_option_names_match_case_insensitively() -> None:
    """Spark's writer options are case-insensitive, and so are ours."""
    rt = StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(),
                          options={"ASYNCPROGRESSTRACKINGENABLED": "TRUE", "asyncprogresstrackingcheckpointintervalms": 250})
    assert rt.tracker is not None
    assert rt.tracker.options.async_progress_tracking_enabled
    assert rt.tracker.options.async_progress_tracking_checkpoint_interval_ms == 250


async def test_async_tracking_refuses_outputs_that_do_not_declare_support_with_sparks_message(tmp_path: Path, clock: ManualClock) -> None:
    """A plain function output is refused at start ("Sink <name> does not support ..."); Spark's override option lets it run."""
    async def plain(batch: Batch) -> None:
        pass

    def build() -> Pipeline:
        p = Pipeline()
        p.add_source(ListSource(["a"]), name="in")
        p.add_output(plain, name="publish")
        return p

    async with StreamingRuntime(build(), Seconds(1), clock=ManualClock(0), checkpoint_location=tmp_path / "a",
                                options={"asyncProgressTrackingEnabled": "true"}) as rt:
        with pytest.raises(InvalidPipelineError,
                           match=r"^Sink publish at test_recovery_triggers\.py:\d+ does not support async progress tracking$"):
            await rt.start()
    async with StreamingRuntime(build(), Seconds(1), clock=clock, checkpoint_location=tmp_path / "b",
                                options={"asyncProgressTrackingEnabled": "true",
                                         "_asyncProgressTrackingOverrideSinkSupportCheck": "true"}) as rt:
        await rt.start()
        await advance(rt, clock, 1000)
        assert [p.num_input_rows for p in rt.recent_progress] == [1]
        await rt.stop()


async def test_async_tracking_is_durable_once_per_interval(tmp_path: Path, clock: ManualClock) -> None:
    """With 100 ms batches and the default 1000 ms interval, offsets and commits reach the disk for batches 0, 10, 20 only."""
    out = Recorder()
    p, _ = pipeline(out, records=[str(i) for i in range(30)], max_per_batch=1)
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path,
                                options={"asyncProgressTrackingEnabled": "true"}) as rt:
        await rt.start()
        await advance(rt, clock, 100, times=25)
        assert rt.tracker is not None
        await rt.tracker.flush()
        assert ids(tmp_path / "offsets") == ids(tmp_path / "commits") == [0, 10, 20]
        assert len(rt.recent_progress) == 25
        await rt.stop()
    assert len(out.seen) == 25


async def test_async_tracking_with_interval_zero_writes_every_batch(tmp_path: Path, clock: ManualClock) -> None:
    """asyncProgressTrackingCheckpointIntervalMs=0 makes every batch's offsets and commit durable, in order."""
    p, _ = pipeline(Recorder())
    options = {"asyncProgressTrackingEnabled": "true", "asyncProgressTrackingCheckpointIntervalMs": "0"}
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path, options=options) as rt:
        await rt.start()
        await advance(rt, clock, 1000, times=4)
        await rt.stop()  # stopping finishes the queued writes
    assert ids(tmp_path / "offsets") == ids(tmp_path / "commits") == [0, 1, 2, 3]


async def test_async_tracking_commits_no_batch_without_an_offsets_entry_when_the_first_batch_failed(tmp_path: Path) -> None:
    """The run's first batch (its offsets durable) fails and the run goes on (stop_on_failure off); the next batch,
    inside the interval, has no offsets entry: it gets no durable commit either, and a restart re-runs the first."""
    options = {"asyncProgressTrackingEnabled": "true"}
    p, _ = pipeline(Recorder(fail_at={100}), records=list("abcdef"), max_per_batch=1)
    clock = ManualClock(0)
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path, options=options,
                                stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, 100, times=2)
        await rt.stop()
    assert ids(tmp_path / "offsets") == [0] and ids(tmp_path / "commits") == []
    out = Recorder()
    p, _ = pipeline(out, records=list("abcdef"), max_per_batch=1)
    async with StreamingRuntime(p, Milliseconds(100), clock=ManualClock(5000), checkpoint_location=tmp_path,
                                options=options) as rt:
        await rt.start()  # refused before: "commits/1 commits a batch that has no offsets entry"
        await rt.wait_until_idle()
        await rt.stop()
    assert out.seen == [(100, ["a"])]


async def test_a_restart_without_async_tracking_never_reuses_the_batch_times_an_async_run_may_have_used(
        tmp_path: Path) -> None:
    """An async run's batch after its last durable entry ran (its file written) without a trace; a restart with async
    tracking off must not plan that batch time again: FileSink would skip the time's file, and the records the new
    batch carries (here one that came while the query was down) would be lost."""
    import os

    from streaming import FileSink

    out_dir = tmp_path / "out"

    def build(records: list[str]) -> tuple[Pipeline, ListSource]:
        src = ListSource(records)
        p = Pipeline()
        p.add_source(src, name="in")
        p.add_output(FileSink(out_dir), name="out")
        return p, src

    p, src = build(["a"])
    clock = ManualClock(0)
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path / "ck",
                                options={"asyncProgressTrackingEnabled": "true"}) as rt:
        await rt.start()
        await advance(rt, clock, 100)  # batch 0: durable
        src.append("b")
        await advance(rt, clock, 100)  # batch 1 (200): its file written, nothing logged
        await rt.stop()
    p, _ = build(["a", "b", "c"])
    clock = ManualClock(5000)
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
        await rt.start()
        await advance(rt, clock, 100)
        await rt.stop()
    files = sorted(os.listdir(out_dir))
    assert files == ["batch-100.txt", "batch-200.txt", "batch-5100.txt"]
    assert (out_dir / "batch-5100.txt").read_text().split() == ["b", "c"]  # b again: at least once


async def test_an_async_write_that_failed_after_the_last_trigger_is_the_stopped_querys_exception(
        tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A background commit write fails and the query is stopped before any later trigger raised it: the stop still
    reports it (exception(), await_termination), not a clean stop whose restart re-runs batches silently."""
    from scheduler import CommitLog, JobFailedError

    real = CommitLog.add

    def failing(self: Any, batch_id: int, entry: Any, **kw: Any) -> Any:
        if batch_id == 1:
            raise OSError(28, "No space left on device")
        return real(self, batch_id, entry, **kw)

    monkeypatch.setattr(CommitLog, "add", failing)
    p, _ = pipeline(Recorder(), records=list("abcdef"), max_per_batch=1)
    options = {"asyncProgressTrackingEnabled": "true", "asyncProgressTrackingCheckpointIntervalMs": "0"}
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path, options=options) as rt:
        await rt.start()
        await advance(rt, clock, 100, times=2)
        assert rt.tracker is not None
        await rt.tracker.flush()
        assert rt.exception() is None  # no trigger since the write failed
        await rt.stop()
        error = rt.exception()
        assert isinstance(error, JobFailedError) and isinstance(error.__cause__, OSError)
        assert str(error) == "Error writing the query's progress log: OSError: [Errno 28] No space left on device"
        with pytest.raises(JobFailedError, match="progress log"):
            await rt.await_termination()


async def test_async_recovery_resumes_from_the_last_durable_entry(tmp_path: Path) -> None:
    """After async tracking, a restart resumes from the newest durable entry: the batches after it are read again (at least once)."""
    p, _ = pipeline(Recorder(), records=[str(i) for i in range(30)], max_per_batch=1)
    clock = ManualClock(0)
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path,
                                options={"asyncProgressTrackingEnabled": "true"}) as rt:
        await rt.start()
        await advance(rt, clock, 100, times=14)
        await rt.stop()
    assert ids(tmp_path / "offsets") == ids(tmp_path / "commits") == [0, 10]
    out = Recorder()
    p, _ = pipeline(out, records=[str(i) for i in range(30)], max_per_batch=1)
    clock = ManualClock(5000)
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path,
                                options={"asyncProgressTrackingEnabled": "true"}) as rt:
        await rt.start()
        await rt.wait_until_idle()
        assert out.seen == []  # no down-time batches: times up to the crash may have run without a trace
        await advance(rt, clock, 100)
        await rt.stop()
    assert out.seen == [(5100, ["11"])]  # batch 10 ended at record 11; records 11..13 are read again from here


async def test_async_tracking_purges_beyond_min_batches_to_retain(tmp_path: Path, clock: ManualClock) -> None:
    """With async writes the newest minBatchesToRetain + 1 durable entries stay, as with sync writes."""
    p, _ = pipeline(Recorder(), records=[str(i) for i in range(10)], max_per_batch=1)
    options = {"asyncProgressTrackingEnabled": "true", "asyncProgressTrackingCheckpointIntervalMs": "0",
               "spark.sql.streaming.minBatchesToRetain": "2"}
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path, options=options) as rt:
        await rt.start()
        await advance(rt, clock, 1000, times=6)
        await rt.stop()
    assert ids(tmp_path / "offsets") == ids(tmp_path / "commits") == [3, 4, 5]


# -- stateful pipelines on trigger-driven runs --


def counting(records: list[str], out: list[tuple[int, str, int]], max_per_batch: int | None = 2) -> Pipeline:
    """A running count per word (mapGroupsWithState), each batch's updated counts recorded with its time."""

    def count(word: str, seen: Any, state: GroupState) -> tuple[str, int]:
        total = (state.getOption or 0) + len(list(seen))
        state.update(total)
        return word, total

    p = Pipeline()
    p.add_source(ListSource(records, max_per_batch=max_per_batch), name="in")
    name = p.add_groups_with_state("in", count, key=lambda word: word, flat=False)
    p.add_output(lambda batch: out.extend(sorted((batch.time.milliseconds, *row) for row in batch.inputs[name])), name="out")
    return p


async def run_triggered(p: Pipeline, checkpoint: Path, at: int, trigger: Trigger, **options: Any) -> list[int]:
    """One Once or AvailableNow run at clock time ``at``; the ids of its batches."""
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(at), checkpoint_location=checkpoint, trigger=trigger,
                                options=options or None) as rt:
        await rt.start()
        assert await rt.await_termination()
        return [e.batch_id for e in rt.recent_progress if e.num_input_rows]


def state_versions(checkpoint: Path) -> dict[int, str | None]:
    """Each offsets entry's recorded state version (None: the entry loads the version of its id)."""
    return {batch_id: OffsetSeqLog(checkpoint / "offsets").get(batch_id).metadata.conf.get(STATE_VERSION_KEY)  # type: ignore[union-attr]
            for batch_id in ids(checkpoint / "offsets")}


@pytest.mark.parametrize("trigger", [Trigger.ONCE, Trigger.AVAILABLE_NOW])
async def test_a_stateful_pipeline_keeps_its_state_across_trigger_driven_runs(tmp_path: Path, trigger: Trigger) -> None:
    """Trigger-driven batch ids follow the clock and skip (0, then 7 for a run 6.5 s later); the state's versions count
    the batches that ran, recorded in the offsets entries where they differ from the ids, so each run (and a
    processing-time run after them) continues the state. Before, the second run failed to load a version no batch
    wrote (and the query was then refused on these triggers)."""
    words = ["a", "b", "a"]
    out: list[tuple[int, str, int]] = []
    first = await run_triggered(counting(words, out), tmp_path, 2500, trigger)
    second = await run_triggered(counting([*words, "a", "c"], out), tmp_path, 9500, trigger)
    clock = ManualClock(20_000)
    async with StreamingRuntime(counting([*words, "a", "c", "b"], out), Seconds(1), clock=clock,
                                checkpoint_location=tmp_path) as rt:
        await rt.start()
        await advance(rt, clock, 1000)
        await rt.stop()
    # The processing-time run starts with the down-time batches after 10 s: its first takes the new word.
    versions = state_versions(tmp_path)
    if trigger is Trigger.ONCE:  # everything available in one batch
        assert (first, second) == ([0], [7])
        assert out == [(3000, "a", 2), (3000, "b", 1), (10_000, "a", 3), (10_000, "c", 1), (11_000, "b", 2)]
        assert [versions[i] for i in (0, 7, 8, 18)] == [None, "1", "2", "12"]
    else:  # two words a batch, on consecutive ids within a run
        assert (first, second) == ([0, 1], [7])
        assert out == [(3000, "a", 1), (3000, "b", 1), (4000, "a", 2), (10_000, "a", 3), (10_000, "c", 1), (11_000, "b", 2)]
        assert [versions[i] for i in (0, 1, 7, 8, 18)] == [None, None, "2", "3", "13"]


async def test_a_re_run_of_a_trigger_driven_stateful_batch_loads_its_recorded_version(tmp_path: Path) -> None:
    """A Once batch whose output failed (its state committed, not its batch) re-runs on the version its entry recorded,
    not on its id's: the counts come out as in a run without the failure."""
    out: list[tuple[int, str, int]] = []
    await run_triggered(counting(["a"], out), tmp_path, 500, Trigger.ONCE)
    failing = counting(["a", "a"], [])

    def fail(batch: Batch) -> None:
        raise RuntimeError("boom")

    failing.add_output(fail, name="fails")
    async with StreamingRuntime(failing, Seconds(1), clock=ManualClock(5500), checkpoint_location=tmp_path,
                                trigger=Trigger.ONCE) as rt:
        await rt.start()
        with pytest.raises(Exception, match="boom"):
            await rt.await_termination()
    assert ids(tmp_path / "offsets") == [0, 5] and ids(tmp_path / "commits") == [0]
    assert await run_triggered(counting(["a", "a"], out), tmp_path, 9500, Trigger.ONCE) == [5]
    assert out == [(1000, "a", 1), (6000, "a", 2)]


def test_the_state_reader_follows_the_recorded_versions(tmp_path: Path) -> None:
    """The reader, its change feed and metadata find each batch's version through the offsets entries: batch 7 of the
    second Once run committed version 2, and an id no batch took is refused, naming the batches there are."""

    async def runs() -> None:
        await run_triggered(counting(["a", "b", "a"], []), tmp_path, 2500, Trigger.ONCE)
        await run_triggered(counting(["a", "b", "a", "a", "c"], []), tmp_path, 9500, Trigger.ONCE)

    anyio.run(runs)
    state = {batch: sorted((r.key, r.value) for r in read_state(tmp_path, batch=batch)) for batch in (0, 7)}
    assert state == {0: [("a", 2), ("b", 1)], 7: [("a", 3), ("b", 1), ("c", 1)]}
    assert sorted((r.key, r.value) for r in read_state(tmp_path)) == state[7]  # the newest committed batch
    assert [(c.batch_id, c.record.key, c.record.value) for c in read_state_changes(tmp_path, 0, 0)] == [
        (0, "a", 2), (0, "b", 1), (7, "a", 3), (7, "c", 1)]
    assert [(m.min_batch_id, m.max_batch_id) for m in read_state_metadata(tmp_path)] == [(0, 7)]
    with pytest.raises(StateNotFoundError, match=r"no state of batch 3: its offsets entry is not in the checkpoint .*"
                       r"batches with entries: 0, 7"):
        read_state(tmp_path, batch=3)


def test_a_change_feed_from_before_the_purged_entries_is_refused(tmp_path: Path) -> None:
    """With recorded state versions, a change feed that starts before the oldest kept offsets entry cannot tell which
    batches ran there: refused, naming the batches it can read (it returned the kept batches' changes alone)."""
    words: list[str] = []

    async def runs() -> None:
        for n, at in enumerate((500, 5500, 10_500, 15_500)):
            words.append("abcd"[n])
            await run_triggered(counting(list(words), []), tmp_path, at, Trigger.ONCE,
                                **{"spark.sql.streaming.minBatchesToRetain": 2})

    anyio.run(runs)
    assert ids(tmp_path / "offsets") == [5, 10, 15]  # batches 0, 5, 10, 15: batch 0's entry purged
    with pytest.raises(StateNotFoundError, match=r"no change feed from batch 0: the offsets entries before batch 5 are "
                       r"not in the checkpoint .* batches with entries: 5 to 15"):
        read_state_changes(tmp_path, 0, 0)
    assert [(c.batch_id, c.record.key) for c in read_state_changes(tmp_path, 0, 10)] == [(10, "c"), (15, "d")]


def test_a_dstream_program_refuses_a_checkpoint_with_recorded_state_versions() -> None:
    """A DStream program runs on the processing-time grid only, so its state versions are its batch ids: a recorded one
    (only a Pipeline's trigger-driven runs write them) is refused rather than ignored."""
    with pytest.raises(CheckpointError, match=r"records state version 3 for it, not its batch id"):
        DStreamGraph(Seconds(1)).set_batch_state_version(Time(5000), 3)


def test_a_damaged_state_version_is_refused(tmp_path: Path) -> None:
    """An offsets entry whose recorded state version is not a whole number >= 0 fails the restart, naming the file."""
    entry = OffsetSeq(("0",), OffsetSeqMetadata(0, 1000, {**BatchGrid(Time(0), Seconds(1)).conf(), STATE_VERSION_KEY: "-1"}))
    OffsetSeqLog(tmp_path / "offsets").add(0, entry)
    with pytest.raises(CorruptCheckpointError, match=r"offsets/0: its state version \(aiodstream.stateVersion\) must be a "
                       r"whole number >= 0 in ASCII digits, got '-1'"):
        Checkpoint(tmp_path).recover(uuid.uuid4(), False, Seconds(1), 1)


def test_async_tracking_with_several_concurrent_jobs_is_refused() -> None:
    """A restart re-ran a batch logged after one that had not finished under its own time, which FileSink skips: the
    earlier batch's records were lost."""
    with raises_exactly(InvalidPipelineError, "async progress tracking needs one job at a time (concurrentJobs 1, got 2): "
                        "with several, a batch logged after one that had not finished could make the restart skip the "
                        "earlier one's output"):
        StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), concurrent_jobs=2,
                         options={"asyncProgressTrackingEnabled": "true"})


async def test_a_uri_checkpoint_location_is_written_through_fsspec_not_to_a_local_directory_named_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """StreamingRuntime(checkpoint_location="memory://..."): the logs go to fsspec's memory file system. The URI was taken
    as a relative local path (./memory:/...), so an s3:// checkpoint silently stayed on the driver's disk (lane K4)."""
    import fsspec

    monkeypatch.chdir(tmp_path)
    location = f"memory://aiodstream-{uuid.uuid4().hex}/ck"
    out = Recorder()
    p, _ = pipeline(out, records=list("abc"), max_per_batch=None)
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(500), checkpoint_location=location,
                                trigger=Trigger.AVAILABLE_NOW) as rt:
        await rt.start()
        assert await rt.await_termination()
    assert out.seen == [(1000, list("abc"))]
    fs = fsspec.filesystem("memory")
    assert fs.exists(f"{location}/offsets/0") and fs.exists(f"{location}/commits/0")
    assert os.listdir(tmp_path) == []
    fs.rm(location.rsplit("/", 1)[0], recursive=True)


def test_a_uri_checkpoint_location_fsspec_cannot_open_is_refused_at_once() -> None:
    p, _ = pipeline(Recorder())
    with pytest.raises(ValueError, match=r"through fsspec, which cannot open nosuchscheme:// here"):
        StreamingRuntime(p, Seconds(1), checkpoint_location="nosuchscheme://bucket/ck")
