"""Checkpoint directories: the query id, where a restart resumes, which batches re-run, and refusals."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from scheduler import (
    BatchGrid,
    Checkpoint,
    CheckpointError,
    CommitMetadata,
    CorruptCheckpointError,
    Milliseconds,
    OffsetSeq,
    OffsetSeqMetadata,
    RecoveredBatch,
    Time,
)
from tests.anyio_support import raises_exactly

GRID = BatchGrid(Time(10_000), Milliseconds(1000))


def log_batches(ck: Checkpoint, offsets: dict[int, str], commits: list[int], grid: BatchGrid = GRID) -> None:
    """Write offsets entries (one source, offset text per id) on ``grid`` and commit entries."""
    for batch_id, offset in offsets.items():
        meta = OffsetSeqMetadata(0, grid.time_of(batch_id).milliseconds, grid.conf())
        assert ck.offsets.add(batch_id, OffsetSeq((offset,), meta))
    for batch_id in commits:
        assert ck.commits.add(batch_id, CommitMetadata())


def test_the_grid_maps_batch_ids_and_times_both_ways() -> None:
    """Batch n runs at zero + (n + 1) * interval; times off the grid are refused."""
    assert GRID.time_of(0) == Time(11_000)
    assert GRID.batch_id_of(Time(15_000)) == 4
    with pytest.raises(ValueError, match="is not a batch time on the grid"):
        GRID.batch_id_of(Time(15_500))
    with pytest.raises(ValueError):
        GRID.batch_id_of(Time(10_000))


def test_a_fresh_checkpoint_gets_a_query_id_that_survives_reopening(tmp_path: Path) -> None:
    """The first open writes metadata {"id": uuid}; later opens read the same id and say it was not created."""
    ck = Checkpoint(tmp_path / "ck")
    first = ck.open(Milliseconds(1000), 1)
    assert first.created and first.grid is None and first.rerun == ()
    assert (tmp_path / "ck" / "metadata").read_text() == f'{{"id":"{first.query_id}"}}'
    again = Checkpoint(tmp_path / "ck").open(Milliseconds(1000), 1)
    assert again.query_id == first.query_id and not again.created


def test_committed_batches_resume_after_the_newest(tmp_path: Path) -> None:
    """With every logged batch committed nothing re-runs and new batches start after the newest, from its offsets."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1", 1: "2", 2: "4"}, [0, 1, 2])
    state = ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1)
    assert state.grid == GRID
    assert state.latest_batch_id == 2 and state.latest_end == ("4",)
    assert state.rerun == ()
    assert state.latest_committed == 2


def test_a_logged_batch_without_commit_reruns_with_its_range(tmp_path: Path) -> None:
    """The newest batch without a commit re-runs at its own time, from the previous entry's offsets to its own."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1", 1: "2", 2: "4", 3: "7"}, [0, 1, 2])
    state = ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1)
    assert state.rerun == (RecoveredBatch(3, Time(14_000), ("4",), ("7",)),)


def test_every_uncommitted_batch_reruns_including_failed_ones(tmp_path: Path) -> None:
    """Several pending batches (and a failed one below a later commit) each re-run with their own range, oldest first."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1", 1: "2", 2: "3", 3: "4", 4: "5", 5: "6"}, [0, 1, 3])
    state = ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1)
    assert [(b.batch_id, b.start, b.end) for b in state.rerun] == [(2, ("2",), ("3",)), (4, ("4",), ("5",)), (5, ("5",), ("6",))]


def test_the_first_batch_reruns_from_no_offsets(tmp_path: Path) -> None:
    """Batch 0 without a commit re-runs from the start of every source ('-')."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "3"}, [])
    assert ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1).rerun == (RecoveredBatch(0, Time(11_000), (None,), ("3",)),)


def test_a_first_batch_with_another_id_reruns_from_no_offsets_when_its_entry_says_so(tmp_path: Path) -> None:
    """A trigger-driven query's first batch may be batch 4: its entry says its input starts where the query's does
    (``aiodstream.fromStart``), so it re-runs from the start with no entry before it; committed, it is the history's
    first batch, from the start."""
    ck = Checkpoint(tmp_path)
    meta = OffsetSeqMetadata(0, GRID.time_of(4).milliseconds, {**GRID.conf(), "aiodstream.fromStart": "true"})
    assert ck.offsets.add(4, OffsetSeq(("3",), meta))
    assert ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1).rerun == (RecoveredBatch(4, Time(15_000), (None,), ("3",)),)
    assert ck.commits.add(4, CommitMetadata())
    assert ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1).history == (RecoveredBatch(4, Time(15_000), (None,), ("3",)),)


def test_a_sparse_async_log_reruns_from_the_previous_entry_on_disk(tmp_path: Path) -> None:
    """Offsets 0, 2, 5 and commits 0, 2 (async tracking): batch 5 re-runs from batch 2's offsets, covering 3 and 4 too."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1", 2: "3", 5: "9"}, [0, 2])
    assert ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1).rerun == (RecoveredBatch(5, Time(16_000), ("3",), ("9",)),)


def test_a_different_interval_is_refused(tmp_path: Path) -> None:
    """Resuming with another batch interval is refused, naming both intervals and the fix."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1"}, [0])
    message = (f"cannot resume from {tmp_path}: it was written with a batch interval of 1000 ms and this runtime's is 500 ms; "
               "batch ids and times are tied to the interval, so keep batch_duration=Milliseconds(1000), or use a new "
               "checkpoint directory")
    with raises_exactly(CheckpointError, message):
        ck.recover(uuid.uuid4(), False, Milliseconds(500), 1)


def test_a_different_number_of_sources_is_refused(tmp_path: Path) -> None:
    """Resuming with another number of sources is refused."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1"}, [0])
    message = (f"cannot resume from {tmp_path}: {tmp_path}/offsets/0 has offsets for 1 source(s) and the pipeline now has 2; "
               "a restart needs the same sources in the same order, or a new checkpoint directory")
    with raises_exactly(CheckpointError, message):
        ck.recover(uuid.uuid4(), False, Milliseconds(1000), 2)


def test_a_checkpoint_not_written_by_aiodstream_is_refused(tmp_path: Path) -> None:
    """An offsets entry without the grid settings (written by Spark itself) cannot be resumed."""
    ck = Checkpoint(tmp_path)
    ck.offsets.add(0, OffsetSeq(('{"logOffset":0}',), OffsetSeqMetadata(0, 5, {})))
    with pytest.raises(CheckpointError, match=r"offsets/0 has no batch grid \(aiodstream.batchDurationMs and aiodstream.zeroTimeMs"):
        ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1)


@pytest.mark.parametrize("interval", ["1\u00b2", "1" * 4400, "\uff11", "0"])
def test_a_damaged_batch_grid_is_a_corrupt_entry(tmp_path: Path, interval: str) -> None:
    """A grid interval that is not ASCII digits of a positive long (a superscript, thousands of digits) is a damaged entry."""
    ck = Checkpoint(tmp_path)
    ck.offsets.add(0, OffsetSeq(("1",), OffsetSeqMetadata(0, 11_000, {**GRID.conf(), "aiodstream.batchDurationMs": interval})))
    message = (f"cannot read {tmp_path}/offsets/0: its batch grid must be a positive whole number of milliseconds "
               "(aiodstream.batchDurationMs) and a whole number of milliseconds (aiodstream.zeroTimeMs), in ASCII digits, got "
               f"{interval!r:.40} and '10000'; the file was damaged after it was written: restore it from a copy, or start over "
               "with a new checkpoint directory")
    with raises_exactly(CorruptCheckpointError, message):
        ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1)


def test_an_entry_off_the_grid_is_refused(tmp_path: Path) -> None:
    """An offsets entry whose timestamp disagrees with its batch id on the grid is refused."""
    ck = Checkpoint(tmp_path)
    ck.offsets.add(2, OffsetSeq(("1",), OffsetSeqMetadata(0, 12_500, GRID.conf())))
    message = r"offsets/2 says batch 2 ran at 12500 ms, but on the checkpoint's grid .* it runs at 13000 ms"
    with pytest.raises(CheckpointError, match=message):
        ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1)


def test_a_rerun_without_its_previous_entry_is_refused(tmp_path: Path) -> None:
    """A pending batch with no earlier entry to start from (entries deleted by hand) is refused."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {4: "1"}, [])
    with pytest.raises(CheckpointError, match=r"^cannot re-run batch 4 from .*: its input starts where the previous offsets entry ends"):
        ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1)


def test_a_commit_beyond_the_newest_offsets_is_refused(tmp_path: Path) -> None:
    """A commit for a batch with no offsets entry means entries were removed by hand."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1"}, [0, 1])
    with pytest.raises(CheckpointError, match=r"commits/1 commits a batch that has no offsets entry"):
        ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1)


def test_a_re_run_over_a_committed_batch_whose_offsets_entry_is_gone_is_refused(tmp_path: Path) -> None:
    """Batch 2 committed, its offsets entry removed, batch 3 uncommitted: re-run from batch 1's end, batch 3 would read
    batch 2's input again (its output written twice). A gap with no commit in it is an async run's sparse log: fine."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1", 1: "2", 3: "4"}, [0, 1, 2])
    with pytest.raises(CheckpointError, match=r"^cannot re-run batch 3 from .*: batch 2 was committed but its offsets "
                                              r"entry .*offsets/2 is missing, so the re-run would read that batch's "
                                              r"input again"):
        ck.recover(uuid.uuid4(), False, Milliseconds(1000), 1)
    sparse = Checkpoint(tmp_path / "sparse")
    log_batches(sparse, {0: "1", 10: "11"}, [0])
    state = sparse.recover(uuid.uuid4(), False, Milliseconds(1000), 1)
    assert [(b.batch_id, b.start, b.end) for b in state.rerun] == [(10, ("1",), ("11",))]


def test_a_corrupt_entry_needed_to_resume_is_reported_not_skipped(tmp_path: Path) -> None:
    """A damaged newest offsets entry stops the open with its path; it is never skipped."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1"}, [0])
    (tmp_path / "offsets" / "1").write_text("v1\n{\"batchWatermarkMs\"")
    with pytest.raises(CorruptCheckpointError, match=rf"^cannot read {tmp_path}/offsets/1: line 2"):
        ck.open(Milliseconds(1000), 1)


@pytest.mark.parametrize("damage", ["", "v1\n{\"nextBatch", "v99\n{}"], ids=["empty", "truncated", "newer"])
def test_a_damaged_newest_commit_is_reported_when_the_newest_entry_is_uncommitted(tmp_path: Path, damage: str) -> None:
    """Batch 1 is logged and not committed, and batch 0's commit, the newest, is damaged: the open reads it (as Spark
    reads the newest commit) and fails naming it. It was read only when the newest offsets entry was committed (lane K3)."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1", 1: "2"}, [0])
    (tmp_path / "commits" / "0").write_text(damage)
    with pytest.raises(CorruptCheckpointError, match=rf"^cannot read {tmp_path}/commits/0"):
        ck.open(Milliseconds(1000), 1)


def test_open_clears_temp_files_of_killed_writers(tmp_path: Path) -> None:
    """Opening removes hidden .tmp files left in the checkpoint's directories."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1"}, [0])
    (tmp_path / "sources" / "0").mkdir(parents=True)  # a stream.json whose first write was killed
    for where in ("offsets", "commits", ".", "sources/0"):
        (tmp_path / where / ".9.abc.tmp").write_text("v1")
    ck.open(Milliseconds(1000), 1)
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_file_as_location_is_refused(tmp_path: Path) -> None:
    """A checkpoint location that is a file is refused with the fix."""
    (tmp_path / "f").write_text("x")
    with raises_exactly(CheckpointError, f"checkpoint location {tmp_path}/f is a file, not a directory; pass a directory path"):
        Checkpoint(tmp_path / "f").open(Milliseconds(1000), 1)


def test_purge_removes_offsets_before_commits(tmp_path: Path) -> None:
    """Purging deletes offsets and commits below the threshold (offsets first, so a crash leaves no orphan offsets)."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {i: str(i) for i in range(5)}, list(range(5)))
    ck.purge(3)
    assert ck.offsets.batch_ids() == [3, 4] and ck.commits.batch_ids() == [3, 4]


def test_describe_summarises_without_changing_anything(tmp_path: Path) -> None:
    """describe() reports id, grid, entries, latest offsets and commit, and pending ids; temp files are counted, not removed."""
    ck = Checkpoint(tmp_path)
    qid = ck.create_query_id()
    log_batches(ck, {0: "1", 1: "2", 2: "5"}, [0, 1])
    (tmp_path / "offsets" / ".3.x.tmp").write_text("v")
    d = ck.describe()
    assert (d.query_id, d.grid, d.offset_ids, d.commit_ids, d.pending, d.temp_files) == (qid, GRID, (0, 1, 2), (0, 1), (2,), 1)
    assert d.latest_offsets is not None and d.latest_offsets[0] == 2 and d.latest_offsets[1].offsets == ("5",)
    assert d.latest_commit == (1, CommitMetadata())
    assert (tmp_path / "offsets" / ".3.x.tmp").exists()


def test_describe_refuses_what_is_not_a_checkpoint(tmp_path: Path) -> None:
    """describe() names a missing directory and a directory without checkpoint files."""
    with raises_exactly(CheckpointError, f"no checkpoint at {tmp_path}/nope: the directory does not exist"):
        Checkpoint(tmp_path / "nope").describe()
    with raises_exactly(CheckpointError, f"{tmp_path} is not a checkpoint directory: it has no 'metadata' file and no 'offsets' "
                        "or 'commits' directory"):
        Checkpoint(tmp_path).describe()


@pytest.mark.parametrize("damage", ["removed", "emptied"])
def test_a_lost_offsets_log_beside_commits_is_refused(tmp_path: Path, damage: str) -> None:
    """Commits without any offsets entry (offsets/ removed or emptied) are refused naming offsets/, not resumed from batch 0."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1", 1: "2"}, [0, 1])
    for entry in (tmp_path / "offsets").iterdir():
        entry.unlink()
    if damage == "removed":
        (tmp_path / "offsets").rmdir()
    with raises_exactly(CheckpointError, f"cannot resume from {tmp_path}: {tmp_path}/commits holds commits up to batch 1 but "
                        f"{tmp_path}/offsets holds no offsets entry (removed or emptied by hand), so a restart would start "
                        "again at batch 0 and repeat committed batches; restore the offsets entries, or start over with a "
                        "new checkpoint directory"):
        ck.open(Milliseconds(1000), 1)
    assert not (tmp_path / "offsets" / "0").exists()


@pytest.mark.parametrize("log", ["offsets", "commits"])
def test_a_log_that_is_not_a_directory_is_refused(tmp_path: Path, log: str) -> None:
    """An offsets or commits log replaced by a file is a CorruptCheckpointError naming it, not an empty log."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1"}, [0])
    for entry in (tmp_path / log).iterdir():
        entry.unlink()
    (tmp_path / log).rmdir()
    (tmp_path / log).write_text("x")
    with raises_exactly(CorruptCheckpointError, f"cannot read {tmp_path}: {tmp_path}/{log} is not a directory, so its log "
                        "entries are lost (it was replaced after it was written); restore the directory from a copy, or "
                        "start over with a new checkpoint directory"):
        ck.open(Milliseconds(1000), 1)
    assert Checkpoint(tmp_path).describe().damaged[0].path == f"{tmp_path}/{log}"


def _directory(path: Path) -> None:
    path.mkdir()


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere")


def _loop(path: Path) -> None:
    path.symlink_to(path)


@pytest.mark.timeout(30)  # before, a FIFO blocked the read until a writer came: forever
@pytest.mark.parametrize(("make", "what"), [(_directory, "a directory"), (_fifo, "a FIFO"),
                                            (_dangling, "a symbolic link to nothing"), (_loop, "a loop of symbolic links")],
                         ids=["directory", "fifo", "dangling-symlink", "symlink-loop"])
def test_a_newest_entry_that_is_not_a_regular_file_is_refused_naming_it(tmp_path: Path, make: Any, what: str) -> None:
    """The newest offsets entry replaced by a directory, FIFO or bad symlink: open and describe name it, never wait on it
    nor fall back to an older entry."""
    ck = Checkpoint(tmp_path)
    log_batches(ck, {0: "1", 1: "2", 2: "3"}, [0, 1])
    entry = tmp_path / "offsets" / "2"
    entry.unlink()
    make(entry)
    message = (f"cannot read {entry}: it is {what}, not a regular file; it was replaced after it was written (aiodstream "
               "writes only regular files): restore it from a copy, or start over with a new checkpoint directory")
    with raises_exactly(CorruptCheckpointError, message):
        ck.open(Milliseconds(1000), 1)
    with raises_exactly(CorruptCheckpointError, message):
        ck.offsets.get_latest()
    described = Checkpoint(tmp_path).describe()
    assert [str(exc) for exc in described.damaged] == [message] and described.latest_offsets is None
