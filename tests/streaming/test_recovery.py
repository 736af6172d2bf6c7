"""Checkpointed runtimes: WAL before jobs, commits after, restart with pending and down-time batches, purge, log failures."""

from __future__ import annotations

import functools
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler import (
    LOGGER_ROOT,
    CheckpointError,
    ConcurrentCheckpointUpdateError,
    InvalidPipelineError,
    JobFailedError,
    ManualClock,
    Milliseconds,
    OffsetSeq,
    OffsetSeqLog,
    OffsetSeqMetadata,
    Seconds,
    StreamingQueryException,
    StreamingStateError,
    Time,
    event_fields,
)
from streaming import Batch, DirectorySource, ListSource, Pipeline, StreamingRuntime
from tests.anyio_support import raises_exactly
from tests.support import Gate, ScriptedGraph, advance, wait_until

pytestmark = pytest.mark.anyio

RECORDS = list("abcdefghij")


class Recorder:
    """An output operation recording (batch time, records) and failing at chosen batch times."""

    supports_async_progress_tracking = True  # it records what it sees; at least once is what the tests check

    def __init__(self, fail_at: set[int] | None = None) -> None:
        self.seen: list[tuple[int, list[Any]]] = []
        self.fail_at = fail_at or set()

    async def __call__(self, batch: Batch) -> None:
        if batch.time.milliseconds in self.fail_at:
            raise RuntimeError(f"boom at {batch.time.milliseconds}")
        self.seen.append((batch.time.milliseconds, list(batch.inputs["in"])))


def pipeline(out: Any, records: list[Any] = RECORDS, max_per_batch: int | None = 2) -> tuple[Pipeline, ListSource]:
    src = ListSource(records, max_per_batch=max_per_batch)
    p = Pipeline()
    p.add_source(src, name="in")
    p.add_output(out, name="out")
    return p, src


def ids(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) if directory.exists() else []


async def test_offsets_are_on_disk_before_a_job_runs_and_the_commit_only_after(tmp_path: Path, clock: ManualClock) -> None:
    """While a batch's job runs, its offsets entry exists and its commit does not; both exist afterwards."""
    ck = tmp_path / "ck"
    observed: list[tuple[bool, bool]] = []

    async def out(batch: Batch) -> None:
        batch_id = batch.time.milliseconds // 1000 - 1
        observed.append(((ck / "offsets" / str(batch_id)).exists(), (ck / "commits" / str(batch_id)).exists()))

    p, _ = pipeline(out)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock, 3000)
        await rt.stop()
    assert observed == [(True, False)] * 3
    assert ids(ck / "offsets") == ids(ck / "commits") == [0, 1, 2]


async def test_restart_reruns_the_uncommitted_batch_then_the_down_time_batches(tmp_path: Path) -> None:
    """A failed batch no later batch committed after re-runs at its own time with its own records; batches that fell
    due while down follow, then the grid."""
    ck = tmp_path / "ck"
    first = Recorder(fail_at={3000})
    p, _ = pipeline(first)
    clock = ManualClock(0)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck, stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, 3000)
        query_id, run_id = rt.id, rt.run_id
        await rt.stop()
    assert first.seen == [(1000, ["a", "b"]), (2000, ["c", "d"])]
    assert ids(ck / "offsets") == [0, 1, 2] and ids(ck / "commits") == [0, 1]
    logged = (ck / "offsets" / "2").read_bytes()

    second = Recorder()
    p, _ = pipeline(second)
    clock = ManualClock(6500)  # down from 3000 to 6500: 4000, 5000 and 6000 passed
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await rt.wait_until_idle()
        assert second.seen == [(3000, ["e", "f"]), (4000, ["g", "h"]), (5000, ["i", "j"]), (6000, [])]
        await advance(rt, clock, 500)
        assert second.seen[-1] == (7000, [])
        assert rt.id == query_id and rt.run_id != run_id
        rerun = rt.recent_progress[0]
        assert (rerun.batch_id, rerun.batch_time_ms, set(rerun.duration_ms)) == (
            2, 3000, {"queryPlanning", "addBatch", "commitOffsets", "triggerExecution"})
        await rt.stop()
    assert (ck / "offsets" / "2").read_bytes() == logged  # re-run, not re-planned
    assert ids(ck / "offsets") == ids(ck / "commits") == [0, 1, 2, 3, 4, 5, 6]


async def test_a_failed_batch_is_passed_over_once_a_later_batch_commits(tmp_path: Path) -> None:
    """The DStream semantics go on after a failed batch, as Spark's: when a later batch commits, the failed one is
    committed first (no hole a restart would fill out of order, after the later batches), and a restart does not run it."""
    ck = tmp_path / "ck"
    first = Recorder(fail_at={2000})
    p, _ = pipeline(first)
    clock = ManualClock(0)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck, stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, 3000)
        await rt.stop()
    assert first.seen == [(1000, ["a", "b"]), (3000, ["e", "f"])]
    assert ids(ck / "offsets") == ids(ck / "commits") == [0, 1, 2]

    second = Recorder()
    p, _ = pipeline(second)
    clock = ManualClock(3500)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock, 500)
        await rt.stop()
    assert second.seen == [(4000, ["g", "h"])]


async def test_a_batch_abandoned_by_an_immediate_stop_reruns_after_restart(tmp_path: Path, clock: ManualClock) -> None:
    """A batch whose job was still running at an immediate stop has no commit and re-runs with the same input."""
    ck = tmp_path / "ck"
    gate = Gate()

    async def blocked(batch: Batch) -> None:
        await gate.job(batch.time, "b").func()

    p, _ = pipeline(blocked)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck, abandon_after=Milliseconds(0)) as rt:
        await rt.start()
        clock.advance(Seconds(1))
        await gate.wait_started("b")
        await rt.stop()
    assert ids(ck / "offsets") == [0] and ids(ck / "commits") == []

    again = Recorder()
    p, _ = pipeline(again)
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(1200), checkpoint_location=ck) as rt:
        await rt.start()
        await rt.wait_until_idle()
        await rt.stop()
    assert again.seen == [(1000, ["a", "b"])]


async def test_commits_are_written_in_batch_order(tmp_path: Path, clock: ManualClock) -> None:
    """With two concurrent jobs, a later batch that finishes first is committed only after the earlier one."""
    ck = tmp_path / "ck"
    gate = Gate()
    done: list[int] = []

    async def out(batch: Batch) -> None:
        if batch.time == Time(1000):
            await gate.job(batch.time, "slow").func()
        done.append(batch.time.milliseconds)

    p, _ = pipeline(out)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck, concurrent_jobs=2) as rt:
        await rt.start()
        clock.advance(Seconds(2))
        await gate.wait_started("slow")
        await wait_until(lambda: done == [2000])
        assert ids(ck / "offsets") == [0, 1] and ids(ck / "commits") == []
        gate.open("slow")
        await rt.wait_until_idle()
        assert ids(ck / "commits") == [0, 1]
        await rt.stop()


async def test_old_entries_are_purged_beyond_min_batches_to_retain(tmp_path: Path, clock: ManualClock) -> None:
    """With minBatchesToRetain=3, after batch 9 the logs hold batches 6..9, as Spark's rule keeps N-3..N."""
    ck = tmp_path / "ck"
    p, _ = pipeline(Recorder())
    options = {"spark.sql.streaming.minBatchesToRetain": "3"}
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck, options=options) as rt:
        await rt.start()
        await advance(rt, clock, 1000, times=10)
        await rt.stop()
    assert ids(ck / "offsets") == ids(ck / "commits") == [6, 7, 8, 9]


async def test_batches_logged_ahead_of_their_run_do_not_count_against_the_retained_commits(tmp_path: Path,
                                                                                            clock: ManualClock) -> None:
    """minBatchesToRetain=2: while batch 4 is held, batches 5-9 are logged ahead of their run (a backlog, as after down
    time). Batch 4's commit still leaves the newest 3 commits (2..4) with their offsets: the purge counted the newest
    logged entries, which left a single commit."""
    ck = tmp_path / "ck"
    gate = Gate()

    async def out(batch: Batch) -> None:
        if batch.time.milliseconds in (5000, 6000):
            await gate.job(batch.time, "held" if batch.time == Time(5000) else "next").func()

    p, _ = pipeline(out, records=list(range(40)))
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck,
                                options={"spark.sql.streaming.minBatchesToRetain": 2}) as rt:
        await rt.start()
        await advance(rt, clock, 1000, times=4)
        clock.advance(Seconds(1))
        await gate.wait_started("held")
        clock.advance(Seconds(5))
        await wait_until(lambda: ids(ck / "offsets")[-1:] == [9])
        assert ids(ck / "commits") == [1, 2, 3]
        gate.open("held")
        await wait_until(lambda: 4 in ids(ck / "commits") and 1 not in ids(ck / "commits"))  # committed, then purged
        assert ids(ck / "commits") == [2, 3, 4]
        assert ids(ck / "offsets") == [2, 3, 4, 5, 6, 7, 8, 9]
        gate.open("next")
        await rt.stop()


class ReadFailsOnce(ListSource):
    """A ListSource whose read of the batch starting at ``"2"`` raises once: that batch's generation fails."""

    failed = False

    async def read(self, start: Any, end: Any) -> Any:
        if start == "2" and not self.failed:
            self.failed = True
            raise OSError("transient read error")
        return await super().read(start, end)


async def test_a_batch_whose_generation_failed_is_passed_over_too(tmp_path: Path) -> None:
    """A batch logged whose jobs could not be made (its source's read raised) failed with no job: the next commit passes
    it over as any failed batch, and the query is not left 'triggered' by it."""
    ck = tmp_path / "ck"
    out = Recorder()
    p = Pipeline()
    p.add_source(ReadFailsOnce(RECORDS, max_per_batch=2), name="in")
    p.add_output(out, name="out")
    clock = ManualClock(0)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck, stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, 1000, times=3)
        assert not rt.status.is_trigger_active
        await rt.stop()
    assert out.seen == [(1000, ["a", "b"]), (3000, ["e", "f"])]
    assert ids(ck / "offsets") == ids(ck / "commits") == [0, 1, 2]


class HeldThenFailing:
    """An output whose batch 1000 waits for :attr:`release`, then fails (a job a second Ctrl-C cancels); it records the
    other batches' times (and 1000's, once released, as a restart runs it)."""

    def __init__(self) -> None:
        self.entered, self.release = anyio.Event(), anyio.Event()
        self.seen: list[int] = []

    async def __call__(self, batch: Batch) -> None:
        if batch.time.milliseconds == 1000 and not self.release.is_set():
            self.entered.set()
            await self.release.wait()
            raise RuntimeError("cancelled by the second signal")
        self.seen.append(batch.time.milliseconds)

    async def stop_gracefully_then_fail(self, rt: StreamingRuntime, clock: ManualClock) -> None:
        """Begin a graceful stop of ``rt``, then let batch 1000 fail while it drains."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(rt.stop, graceful=True))
            await wait_until(lambda: rt._core.stopping)
            self.release.set()
            clock.advance(Seconds(1))  # the graceful stop's last tick


async def test_a_batch_that_finished_beside_one_failing_in_a_drain_waits_for_the_restart_too(tmp_path: Path) -> None:
    """Two jobs at once: 2000 is done while 1000 still runs; a graceful stop begins, then 1000 fails. 2000 is not
    committed either (the drain ended at 1000's failure), so the restart runs 1000 and then 2000, in order."""
    ck = tmp_path / "ck"
    out = HeldThenFailing()
    clock = ManualClock(0)
    async with StreamingRuntime(pipeline(out)[0], Seconds(1), clock=clock, checkpoint_location=ck, stop_on_failure=False,
                                concurrent_jobs=2) as rt:
        await rt.start()
        clock.advance(Seconds(2))
        await out.entered.wait()
        await wait_until(lambda: out.seen == [2000])
        await out.stop_gracefully_then_fail(rt, clock)
    assert ids(ck / "offsets") == [0, 1] and ids(ck / "commits") == []

    async with StreamingRuntime(pipeline(out)[0], Seconds(1), clock=ManualClock(2000), checkpoint_location=ck) as rt:
        await rt.start()
        await rt.wait_until_idle()
        await rt.stop()
    assert out.seen == [2000, 1000, 2000]  # 2000's output ran before the stop too: at least once for the held batch
    assert ids(ck / "commits") == [0, 1]


async def test_a_failed_batch_leaves_nothing_behind_in_the_pipeline(tmp_path: Path, clock: ManualClock) -> None:
    """What a Pipeline keeps of a batch for its commit (state progress, event-time statistics, watermarks) is let go of
    when the batch fails too: an output failing every other batch leaves nothing growing."""
    def count(key: Any, records: Any, state: Any) -> Any:
        total = (state.get if state.exists else 0) + len(list(records))
        state.update(total)
        yield key, total

    def out(batch: Batch) -> None:
        if batch.time.milliseconds // 1000 % 2 == 0:
            raise RuntimeError("boom")

    p = Pipeline()
    p.add_source(ListSource(list(range(100)), max_per_batch=3), name="in")
    p.add_watermark("in", lambda r: r * 1000, "10 seconds")
    p.add_groups_with_state("in", count, key=lambda r: r % 2)
    p.add_output(out, name="out")
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck", stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, 1000, times=10)
        assert (len(p._state_progress), len(p._seen), len(p._batch_watermarks)) == (0, 0, 0)
        assert rt.scheduler.statistics().batches_failed == 5
        await rt.stop()


async def test_purge_goes_on_past_a_failed_batch_that_later_batches_passed_over(tmp_path: Path, clock: ManualClock) -> None:
    """A failed batch holds the purge back no longer than until the next commit: the logs stay minBatchesToRetain long."""
    ck = tmp_path / "ck"
    p, _ = pipeline(Recorder(fail_at={3000}))
    options = {"spark.sql.streaming.minBatchesToRetain": 2}
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck, options=options,
                                stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, 1000, times=8)
        await rt.stop()
    assert ids(ck / "offsets") == ids(ck / "commits") == [5, 6, 7]

    again = Recorder()
    p, _ = pipeline(again)
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(8000), checkpoint_location=ck) as rt:
        await rt.start()
        await rt.wait_until_idle()
        await rt.stop()
    assert again.seen == []


async def test_a_failure_during_a_graceful_stop_ends_the_drain_and_the_restart_runs_the_rest_in_order(
        tmp_path: Path) -> None:
    """A batch that fails while a graceful stop drains (a second Ctrl-C cancelling its Spark job, say): the batches queued
    behind it do not run, nothing after it commits, and a restart runs it and them in batch order."""
    ck = tmp_path / "ck"
    out = HeldThenFailing()
    clock = ManualClock(0)
    async with StreamingRuntime(pipeline(out)[0], Seconds(1), clock=clock, checkpoint_location=ck, stop_on_failure=False) as rt:
        await rt.start()
        clock.advance(Seconds(3))  # 1000 runs and waits; 2000 and 3000 queue behind it
        await out.entered.wait()
        await wait_until(lambda: rt.scheduler.pending_times() == [Time(1000), Time(2000), Time(3000)])
        await out.stop_gracefully_then_fail(rt, clock)
    assert out.seen == [] and ids(ck / "offsets") == [0, 1, 2] and ids(ck / "commits") == []

    async with StreamingRuntime(pipeline(out)[0], Seconds(1), clock=ManualClock(3000), checkpoint_location=ck) as rt:
        await rt.start()
        await rt.wait_until_idle()
        await rt.stop()
    assert out.seen == [1000, 2000, 3000]
    assert ids(ck / "commits") == [0, 1, 2]


@pytest.mark.parametrize("stop_on_failure", [True, False])
async def test_a_log_write_failure_stops_every_later_batch(tmp_path: Path, stop_on_failure: bool, clock: ManualClock) -> None:
    """An offsets entry that already exists (a second writer) fails that batch and every later one; no job runs unlogged.

    Under stop-on-failure (the default with a checkpoint) the first failure terminates the query;
    under the DStream semantics every later batch fails with the same error.
    """
    ck = tmp_path / "ck"
    out = Recorder()
    p, _ = pipeline(out)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck, stop_on_failure=stop_on_failure) as rt:
        await rt.start()
        await advance(rt, clock, 1000)
        OffsetSeqLog(ck / "offsets").add(1, OffsetSeq(("9",), OffsetSeqMetadata(0, 2000, {})))
        await advance(rt, clock, 2000)
        with pytest.raises(JobFailedError) as info:
            await rt.await_termination(Milliseconds(0))
        await rt.stop()
    assert out.seen == [(1000, ["a", "b"])]
    assert isinstance(info.value.__cause__, ConcurrentCheckpointUpdateError)
    assert str(info.value.__cause__) == (
        "Concurrent update to the log. Multiple streaming jobs detected for 1. Please make sure only one streaming job "
        "runs on a specific checkpoint location at a time.")
    if stop_on_failure:
        assert isinstance(info.value, StreamingQueryException) and info.value.batch_time_ms == 2000
        assert not rt.is_active
    else:
        assert info.value.batch_time_ms == 3000  # the later batch failed with the same error
    assert ids(ck / "commits") == [0]


async def test_a_source_that_lost_records_fails_the_rerun(tmp_path: Path, clock: ManualClock) -> None:
    """Rebuilding a ListSource with fewer records than the log needs fails the re-run instead of skipping data."""
    ck = tmp_path / "ck"
    p, _ = pipeline(Recorder(fail_at={1000}))
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock, 1000)
        await rt.stop()
    out = Recorder()
    p, _ = pipeline(out, records=["a"])
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(1500), checkpoint_location=ck) as rt:
        await rt.start()
        await rt.wait_until_idle()
        with pytest.raises(StreamingQueryException, match=r"terminated with exception: ListSource cannot replay") as info:
            await rt.await_termination(Milliseconds(0))
        assert str(info.value.__cause__).startswith("ListSource cannot replay")
        await rt.stop()
    assert out.seen == []


async def test_query_tracking_needs_a_replayable_graph() -> None:
    """A graph that is not replayable, or a pipeline with a function source, is refused with the reason."""
    with raises_exactly(InvalidPipelineError, "checkpointing, triggers and progress need a graph with replayable input (such as "
                        "a Pipeline of ListSource or DirectorySource sources); ScriptedGraph is not one"):
        StreamingRuntime(ScriptedGraph(lambda t: []), Seconds(1), clock=ManualClock(), track_progress=True)
    p = Pipeline()
    p.add_source(lambda t: [1], name="fn")
    p.add_output(lambda b: None)
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(), track_progress=True) as rt:
        with raises_exactly(InvalidPipelineError, "source 'fn' is a function, which cannot give a batch's records again after "
                            "a restart; checkpointing, triggers and progress need replayable sources such as ListSource or "
                            "DirectorySource"):
            await rt.start()


async def test_query_names_and_checkpoints_are_unique_among_active_queries(tmp_path: Path) -> None:
    """A second active query with the same name, or on the same checkpoint, cannot start; after a stop it can."""
    async with StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), track_progress=True, name="q") as a:
        await a.start()
        async with StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), track_progress=True,
                                    name="q") as b:
            with raises_exactly(InvalidPipelineError, "cannot start query 'q': a query with that name is already active in "
                                "this process; give each active query its own name"):
                await b.start()
        await a.stop()
    ck = tmp_path / "ck"
    async with StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), checkpoint_location=ck) as a:
        await a.start()
        async with StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), checkpoint_location=ck) as b:
            with pytest.raises(ConcurrentCheckpointUpdateError,
                               match=rf"^Multiple streaming queries are concurrently using {ck}: <StreamingRuntime .* is "
                                     r"active on it in this process; stop that query first, or use another checkpoint "
                                     r"location$"):
                await b.start()
            assert not (ck / "offsets").exists() or ids(ck / "offsets") == []  # b did not touch the directory
        await a.stop()
    copy = tmp_path / "copy"
    async with StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), checkpoint_location=ck) as a:
        await a.start()
        shutil.copytree(ck, copy)
        async with StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), checkpoint_location=copy) as b:
            with pytest.raises(StreamingStateError, match=rf"^cannot start query {a.id}: it is already active in this process"):
                await b.start()
        await a.stop()
    async with StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock(), checkpoint_location=ck,
                                name="q") as c:
        await c.start()
        await c.stop()


async def test_a_runtime_without_query_tracking_has_no_query_state() -> None:
    """status, progress and process_all_available need query tracking, and say how to turn it on."""
    async with StreamingRuntime(pipeline(Recorder())[0], Seconds(1), clock=ManualClock()) as rt:
        message = "this runtime does not track a query: pass checkpoint_location=, a trigger, or track_progress=True"
        with raises_exactly(StreamingStateError, message):
            rt.status  # noqa: B018
        with raises_exactly(StreamingStateError, message):
            await rt.process_all_available()


class CommitRecordingSource(ListSource):
    """A ListSource that records the offsets it is told are committed."""

    def __init__(self, records: list[Any]) -> None:
        super().__init__(records, max_per_batch=1)
        self.committed: list[str | None] = []

    async def commit(self, end: str | None) -> None:
        self.committed.append(end)


async def test_sources_release_input_only_up_to_the_oldest_uncommitted_batch(tmp_path: Path, clock: ManualClock) -> None:
    """Sources hear of a commit once every earlier batch is committed; a failed batch passed over counts as one."""
    src = CommitRecordingSource(list("abcd"))
    p = Pipeline()
    p.add_source(src, name="in")
    p.add_output(Recorder(fail_at={2000}), name="out")
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path, stop_on_failure=False) as rt:
        await rt.start()
        await advance(rt, clock, 1000, times=4)
        await rt.stop()
    # Batch 1 (records up to 2) failed: batch 2's commit passes it over, and from there each commit releases its input.
    assert src.committed == ["1", "3", "4"]


# -- source identity --


async def run_once(p: Pipeline, ck: Path) -> None:
    """Start ``p`` on ``ck``, run one batch and stop."""
    clock = ManualClock(0)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock, 1000)
        await rt.stop()


def directory_pipeline(path: Path) -> Pipeline:
    p = Pipeline()
    p.add_source(DirectorySource(path), name="in")
    p.add_output(Recorder(), name="out")
    return p


async def test_a_source_swapped_under_a_checkpoint_is_refused_at_start_naming_both(tmp_path: Path) -> None:
    """A DirectorySource restarted on a ListSource's checkpoint is refused by start(), naming both; nothing is read."""
    ck = tmp_path / "ck"
    await run_once(pipeline(Recorder())[0], ck)
    logs = [ck / "metadata", *(ck / "offsets").iterdir(), *(ck / "commits").iterdir(), ck / "sources" / "0" / "stream.json"]
    before = {p: p.read_bytes() for p in logs}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("x\n")
    message = (f"cannot resume from {ck}: source 'in' (source 0 of the offsets log) was 'ListSource' (kind 'ListSource') when "
               f"the checkpoint was written and is 'DirectorySource[{tmp_path}/in]' (kind 'DirectorySource', directory "
               f"'{tmp_path}/in') now; its logged offsets belong to that source: restart with the same sources in the same "
               "order, or use a new checkpoint directory")
    async with StreamingRuntime(directory_pipeline(tmp_path / "in"), Seconds(1), clock=ManualClock(0),
                                checkpoint_location=ck) as rt:
        with raises_exactly(CheckpointError, message) as info:
            await rt.start()
    assert info.value.path == str(ck / "sources" / "0" / "stream.json")
    assert {p: p.read_bytes() for p in logs} == before
    assert set((ck / "offsets").iterdir()) | set((ck / "commits").iterdir()) == set(logs[1:-1])


async def test_a_directory_source_moved_to_another_directory_is_refused(tmp_path: Path) -> None:
    """A DirectorySource over another directory is another source: its file counts would be read against the wrong files."""
    ck = tmp_path / "ck"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "1.txt").write_text("x\n")
    await run_once(directory_pipeline(tmp_path / "a"), ck)
    async with StreamingRuntime(directory_pipeline(tmp_path / "b"), Seconds(1), clock=ManualClock(0),
                                checkpoint_location=ck) as rt:
        with pytest.raises(CheckpointError, match=r"^cannot resume from .*: source 'in' \(source 0 of the offsets log\) was "
                                                  rf"'DirectorySource\[{tmp_path}/a\]' \(kind 'DirectorySource', directory "
                                                  rf"'{tmp_path}/a'\) when the checkpoint was written and is "):
            await rt.start()


async def test_the_same_sources_restart_and_a_renamed_list_source_too(tmp_path: Path) -> None:
    """The recorded identity is the source's class (and directory); a restart with the same ones runs, whatever their names."""
    ck = tmp_path / "ck"
    await run_once(pipeline(Recorder())[0], ck)
    assert json.loads((ck / "sources" / "0" / "stream.json").read_text()) == {"kind": "ListSource", "description": "ListSource"}
    out = Recorder()
    p = Pipeline()
    p.add_source(ListSource(RECORDS, max_per_batch=2, name="renamed"), name="in")
    p.add_output(out, name="out")
    clock = ManualClock(1000)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock, 1000)
        await rt.stop()
    assert out.seen == [(2000, ["c", "d"])]


async def test_a_lost_source_descriptor_is_refused_not_written_anew(tmp_path: Path) -> None:
    """stream.json removed after batches were logged (sources/ still there): start() is refused naming it and the JSON this
    run would record (another directory would be taken for the old one), and nothing is written; with no offsets entry yet
    (a first start) it is written as before."""
    ck = tmp_path / "ck"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "1.txt").write_text("x\n")
    await run_once(directory_pipeline(tmp_path / "a"), ck)
    descriptor = ck / "sources" / "0" / "stream.json"
    descriptor.unlink()
    identity = {"description": f"DirectorySource[{tmp_path}/b]", "directory": f"{tmp_path}/b", "kind": "DirectorySource"}
    async with StreamingRuntime(directory_pipeline(tmp_path / "b"), Seconds(1), clock=ManualClock(0),
                                checkpoint_location=ck) as rt:
        with raises_exactly(CheckpointError, f"cannot resume from {ck}: {descriptor} is missing, but the offsets log already "
                            "has batches of input 0; the file records what that input was when the checkpoint was written "
                            "(its kind, directory, a file stream's first modification-time threshold), and recording this "
                            "run's instead could take another input's offsets or skip files that arrived while the query was "
                            "down: restore it from a copy, or if this input is the one that wrote the checkpoint write what "
                            f"this run would record, {json.dumps(identity, sort_keys=True)}, to {descriptor}, or start over "
                            "with a new checkpoint directory"):
            await rt.start()
    assert not descriptor.exists()
    for entry in (*(ck / "offsets").iterdir(), *(ck / "commits").iterdir()):
        entry.unlink()
    await run_once(directory_pipeline(tmp_path / "b"), ck)
    assert json.loads(descriptor.read_text())["directory"] == str(tmp_path / "b")


async def test_a_checkpoint_older_than_source_identities_resumes_once_and_records_them(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Offsets but no sources/ at all (pipelines before stream.json): the restart records this run's identity with one
    warning naming the checkpoint, and reads on from the logged offsets: nothing again, nothing lost."""
    ck, data = tmp_path / "ck", tmp_path / "in"
    data.mkdir()
    (data / "1.txt").write_text("a\nb\n")
    first = directory_pipeline(data)
    await run_once(first, ck)
    shutil.rmtree(ck / "sources")  # the layout those releases left: metadata, offsets, commits
    (data / "2.txt").write_text("c\n")
    out = Recorder()
    p = Pipeline()
    p.add_source(DirectorySource(data), name="in")
    p.add_output(out, name="out")
    clock = ManualClock(1000)
    with caplog.at_level(logging.WARNING, logger=LOGGER_ROOT):
        async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
            await rt.start()
            await advance(rt, clock, 1000)
            await rt.stop()
    assert out.seen == [(2000, ["c"])]
    assert json.loads((ck / "sources" / "0" / "stream.json").read_text()) == {
        "description": f"DirectorySource[{data}]", "directory": str(data), "kind": "DirectorySource"}
    warnings = [event_fields(r) for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith(LOGGER_ROOT)]
    assert warnings == [{"event": "the checkpoint has offsets but no sources/ directory: it predates its sources' "
                                  "identity records (sources/<n>/stream.json, written since 2026-11-25), or the directory "
                                  "was deleted; this run's sources were recorded as its own, so they must be the ones "
                                  "that wrote the checkpoint (a source that reads elsewhere would take the logged offsets "
                                  "as its own)",
                         "component": "Pipeline", "checkpoint": str(ck), "sources": ["in"]}]
