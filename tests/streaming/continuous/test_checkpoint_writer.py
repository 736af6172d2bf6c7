"""One writer per continuous checkpoint: a refused second query changes nothing, a lost log write fails the query."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from scheduler import CheckpointError, ConcurrentCheckpointUpdateError, StreamingQueryException
from streaming.continuous import CommitPartitionEpoch, MemorySink, ReportPartitionOffset
from tests.anyio_support import raises_exactly
from tests.streaming.continuous.test_execution import Harness
from tests.support import file_digests, wait_until

pytestmark = pytest.mark.anyio


async def test_a_second_query_on_a_running_querys_checkpoint_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """The running query's uncommitted offsets entry survives a refused second start; it commits, and a restart resumes.

    Before, the second start dropped the entry as a dead run's, and the next restart failed
    with "epoch 1 is committed but its offsets entry is missing".
    """
    sink = MemorySink()
    ck = tmp_path / "ckpt"
    async with Harness(tmp_path, sink=sink) as h:
        await h.tick()
        a, b = h.tasks
        await a.close_epoch(0, 1, ["a0"])
        await b.close_epoch(0, 2, ["b0"])
        await h.query.wait_for_epoch(0)
        for task in h.tasks:  # epoch 1's offsets are logged; its commit is still to come
            await task.send(ReportPartitionOffset(task.partition_of(), 1, 10 + task.partition_of()))
        # The entry in place and its writer done (a temporary file is linked into place, then removed).
        await wait_until(lambda: (ck / "offsets/1").exists() and not any(
            p.name.endswith(".tmp") for p in (ck / "offsets").iterdir()))
        before = file_digests(ck)
        second = Harness(tmp_path, name="second")  # names are unique among active queries too
        async with second.query:
            with raises_exactly(ConcurrentCheckpointUpdateError,
                                f"Multiple streaming queries are concurrently using {ck}: {h.query!r} is active on it in this "
                                "process; stop that query first, or use another checkpoint location"):
                await second.query.start()
        assert file_digests(ck) == before
        for task in h.tasks:
            await task.send(CommitPartitionEpoch(task.partition_of(), 1, [f"{task.partition_of()}-1"]))
        await h.query.wait_for_epoch(1)
        assert sink.epochs() == {0: ["a0", "b0"], 1: ["0-1", "1-1"]}
    async with Harness(tmp_path) as again:
        assert [(s.start_epoch, s.start_offset) for s in again.launcher.specs] == [(2, 10), (2, 11)]


async def test_a_commit_entry_written_by_another_writer_fails_the_query_with_sparks_message(tmp_path: Path) -> None:
    """The commits entry of the epoch being committed already exists: the query fails instead of going on as if it wrote it."""
    async with Harness(tmp_path) as h:
        await h.tick()
        (tmp_path / "ckpt/commits").mkdir(exist_ok=True)
        (tmp_path / "ckpt/commits/0").write_text('v1\n{"nextBatchWatermarkMs":0}')  # another writer got there first
        for task in h.tasks:
            await task.close_epoch(0, 1, [f"{task.partition_of()}"])
        with pytest.raises(StreamingQueryException) as info:
            await h.query.wait_for_epoch(0)
        assert isinstance(info.value.cause, ConcurrentCheckpointUpdateError)
        assert info.value.message == (
            "Concurrent update to the log. Multiple streaming jobs detected for 0. Please make sure only one streaming job "
            "runs on a specific checkpoint location at a time.")
        assert h.query.last_committed_epoch == -1


def log_epochs(ck: Path, epochs: Sequence[int], committed: range) -> None:
    """Offsets entries (two partitions' merged offsets) for ``epochs`` and commits for ``committed``, as a run writes them."""
    for where in ("offsets", "commits"):
        (ck / where).mkdir(parents=True, exist_ok=True)
    for epoch in epochs:
        (ck / f"offsets/{epoch}").write_text(f'v1\n\n{{"0":{epoch},"1":{epoch}}}')
    for epoch in committed:
        (ck / f"commits/{epoch}").write_text('v1\n{"nextBatchWatermarkMs":0}')


def log_digests(ck: Path) -> dict[str, str]:
    """The digests of the checkpoint's files but the lock file, which each start's claim rewrites with its holder."""
    return {name: digest for name, digest in file_digests(ck).items() if name != ".writer.lock"}


async def first_run(tmp_path: Path) -> Path:
    """A query id in ``ckpt`` and nothing logged: what a first start leaves."""
    async with Harness(tmp_path):
        pass
    ck = tmp_path / "ckpt"
    for where in ("offsets", "commits"):
        shutil.rmtree(ck / where, ignore_errors=True)
    return ck


@pytest.mark.parametrize(("kept", "epochs"), [
    (range(40, 50), "40..49"),  # a purged run's offsets: the first entries are gone
    ([0, 2, 3], "0..3"),  # a gap: no run logs its epochs so
    (range(0, 10_003), "0..10002"),  # more than any backlog but a larger one than the default leaves
])
async def test_offsets_without_any_commit_that_no_run_leaves_are_refused_and_kept(
        tmp_path: Path, kept: Sequence[int], epochs: str) -> None:
    """A lost commits log: offsets no run without a commit leaves are refused naming commits/, and none is deleted."""
    ck = await first_run(tmp_path)
    log_epochs(ck, kept, range(0))
    before = log_digests(ck)
    again = Harness(tmp_path)
    async with again.query:
        with raises_exactly(CheckpointError, f"cannot resume from {ck}: {ck}/commits holds no commit but {ck}/offsets holds "
                            f"epochs {epochs}, which no run without a commit leaves (it logs from epoch 0 in order, at most "
                            "10001 epochs unless its spark.sql.streaming.continuous.epochBacklogQueueSize was larger than "
                            "that); the commits log was lost: restore it (or, if the run had a larger backlog, set it again), "
                            "or start over with a new checkpoint directory"):
            await again.query.start()
    assert log_digests(ck) == before


@pytest.mark.parametrize("options", [None, {"spark.sql.streaming.continuous.epochBacklogQueueSize": 1}])
async def test_a_run_that_never_committed_still_restarts_at_epoch_0(tmp_path: Path, options: dict[str, object] | None) -> None:
    """Offsets of epochs 0..2 and no commit: a run that died before its first commit (with the default backlog, though
    this run's is lowered to 1); its entries are cut anew."""
    ck = await first_run(tmp_path)
    log_epochs(ck, range(0, 3), range(0))
    async with Harness(tmp_path, options=options) as again:
        assert [(s.start_epoch, s.start_offset) for s in again.launcher.specs] == [(0, 0), (0, 0)]
        assert not (ck / "offsets/1").exists()


async def test_a_missing_resume_entry_is_refused_before_anything_is_dropped(tmp_path: Path) -> None:
    """The last commit's offsets entry is gone: refused naming it, and the uncommitted entry after it is still there."""
    ck = await first_run(tmp_path)
    log_epochs(ck, range(0, 3), range(0, 2))
    (ck / "offsets/1").unlink()
    before = log_digests(ck)
    again = Harness(tmp_path)
    async with again.query:
        with raises_exactly(CheckpointError, f"cannot resume from {ck}: epoch 1 is committed but its offsets entry "
                            f"{ck}/offsets/1 is missing; restore it, or start over with a new checkpoint directory"):
            await again.query.start()
    assert log_digests(ck) == before
