"""DirectorySource's record of the files each batch took: committed files may go, late files and lost files are errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from scheduler import CheckpointPath, CorruptCheckpointError, ManualClock, ReplayError, Seconds
from streaming import Batch, DirectorySource, Pipeline, StreamingRuntime
from tests.anyio_support import raises_exactly
from tests.support import advance

pytestmark = pytest.mark.anyio

LATE_TAIL = ("files are taken in name order, so every new file must sort after all the files taken: name them by a "
             "zero-padded sequence number or timestamp, and rename a late file to sort last or move it out")
REMOVED_TAIL = ("a restart reads a batch's files again until the batch is committed, so they must stay in place until then: "
                "put them back (delete or archive a file only once its batch is committed)")


def put(directory: Path, name: str, *lines: str) -> None:
    """Create a file atomically, as a producer should: hidden name first, then rename."""
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".{name}.part"
    temp.write_text("".join(line + "\n" for line in lines))
    os.rename(temp, directory / name)


async def take(src: DirectorySource, start: str | None) -> tuple[str | None, list[Any]]:
    """Plan the next batch from ``start`` up to the latest offset and read it, as the engine does."""
    end = await src.plan_offset(start, await src.latest_offset())
    return end, list(await src.read(start, end))


async def attached(directory: Path, meta: Path) -> DirectorySource:
    """A source as a checkpointed restart makes it: new, then given its ``sources/<n>`` directory."""
    src = DirectorySource(directory, name="in")
    await src.attach_checkpoint(CheckpointPath.local(meta))
    return src


async def test_files_of_committed_batches_may_be_deleted(tmp_path: Path) -> None:
    """Deleting (archiving) a file whose batch is done does not stop the source: the next batch takes the new files."""
    put(tmp_path, "0001.txt", "one")
    src = DirectorySource(tmp_path)
    first, records = await take(src, None)
    assert (first, records) == ('{"files":1,"lastFile":"0001.txt"}', ["one"])
    await src.commit(first)
    (tmp_path / "0001.txt").unlink()
    assert await src.latest_offset() == first
    put(tmp_path, "0004.txt", "four")
    assert await take(src, first) == ('{"files":2,"lastFile":"0004.txt"}', ["four"])


async def test_a_restart_carries_on_after_committed_files_were_archived(tmp_path: Path) -> None:
    """A checkpointed query restarted after its processed files were moved away reads the new ones, once."""
    seen: list[list[Any]] = []
    clock = ManualClock(0)  # one clock for both runs: the second resumes after the first's batches

    async def out(batch: Batch) -> None:
        seen.append(list(batch.inputs["in"]))

    async def run() -> None:
        p = Pipeline()
        p.add_source(DirectorySource(tmp_path / "in"), name="in")
        p.add_output(out, name="out")
        async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
            await rt.start()
            await advance(rt, clock, 1000, times=2)
            await rt.stop()

    put(tmp_path / "in", "0001.txt", "one")
    put(tmp_path / "in", "0002.txt", "two")
    await run()
    (tmp_path / "in" / "0001.txt").unlink()
    (tmp_path / "in" / "0002.txt").unlink()
    put(tmp_path / "in", "0003.txt", "three")
    await run()
    assert [records for records in seen if records] == [["one", "two"], ["three"]]


async def test_a_late_file_is_an_error_even_when_a_taken_file_was_removed(tmp_path: Path) -> None:
    """One taken file removed and one late file added keep the count: the late file is still named, also after a restart."""
    put(tmp_path, "0002.txt", "two")
    put(tmp_path, "0003.txt", "three")
    meta = tmp_path / "meta"
    src = await attached(tmp_path, meta)
    first, _ = await take(src, None)
    (tmp_path / "0002.txt").unlink()
    put(tmp_path, "0001.txt", "late")
    put(tmp_path, "0004.txt", "four")
    message = f"in: 1 file(s) sorting at or before '0003.txt' appeared after that file was taken into a batch ('0001.txt'); {LATE_TAIL}"
    with raises_exactly(ReplayError, message):
        await src.plan_offset(first, await src.latest_offset())
    with raises_exactly(ReplayError, message):
        await (await attached(tmp_path, meta)).latest_offset()
    with raises_exactly(ReplayError, message):
        await (await attached(tmp_path, meta)).plan_offset(first, '{"files":3,"lastFile":"0004.txt"}')


async def test_a_rerun_batch_reads_exactly_its_files_and_needs_them_all(tmp_path: Path) -> None:
    """A batch read again finds the files it took: one removed (even with another put in its place) is named."""
    put(tmp_path, "a.txt", "1")
    put(tmp_path, "c.txt", "3")
    meta = tmp_path / "meta"
    first, records = await take(await attached(tmp_path, meta), None)
    assert records == ["1", "3"]
    assert await (await attached(tmp_path, meta)).read(None, first) == ["1", "3"]
    (tmp_path / "a.txt").unlink()
    put(tmp_path, "b.txt", "late")
    with raises_exactly(ReplayError, "in: 1 file(s) up to 'c.txt' were removed after being taken into a batch that is not "
                        f"committed yet ('a.txt'); {REMOVED_TAIL}"):
        await (await attached(tmp_path, meta)).read(None, first)
    put(tmp_path, "a.txt", "1")
    with raises_exactly(ReplayError, "in: 1 file(s) sorting at or before 'c.txt' appeared after that file was taken into a "
                        f"batch ('b.txt'); {LATE_TAIL}"):
        await (await attached(tmp_path, meta)).read(None, first)


async def test_an_older_checkpoint_without_records_is_checked_by_counts(tmp_path: Path) -> None:
    """Offsets an earlier version logged (no record of names) still read; committed files may go; counts catch the rest."""
    for name in ("a", "b", "c"):
        put(tmp_path, name, name)
    src = await attached(tmp_path, tmp_path / "meta")
    old = '{"files":2,"lastFile":"b"}'
    assert await src.read(None, old) == ["a", "b"]  # a batch logged by the old code, re-run
    (tmp_path / "a").unlink()
    src = await attached(tmp_path, tmp_path / "empty")
    assert await take(src, old) == ('{"files":3,"lastFile":"c"}', ["c"])
    put(tmp_path, "0", "late")
    put(tmp_path, "a2", "late")
    with raises_exactly(ReplayError, f"in: 1 file(s) sorting at or before 'b' appeared after that file was taken into a batch "
                        f"(2 file(s) were taken up to it); {LATE_TAIL}"):
        await (await attached(tmp_path, tmp_path / "empty2")).plan_offset(old, None)


async def test_a_damaged_record_is_a_corrupt_checkpoint(tmp_path: Path) -> None:
    """A record that cannot be read stops the restart, naming the file."""
    (tmp_path / "meta" / "files").mkdir(parents=True)
    (tmp_path / "meta" / "files" / "2").write_text("v1\n{")
    with pytest.raises(CorruptCheckpointError, match=r"/meta/files/2 is not a DirectorySource's list of the files a batch took"):
        await attached(tmp_path, tmp_path / "meta")


async def test_the_records_of_old_committed_batches_are_let_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the newest KEPT_RECORDS committed batches keep their record (a file each, read at every start): a source
    that runs for months stays bounded. The files of the forgotten batches, still in place, are counted, not flagged
    as late, at the next batch and after a restart; a late file before them is still refused."""
    from streaming.pipeline import _directory_source

    monkeypatch.setattr(_directory_source, "KEPT_RECORDS", 2)
    directory, meta = tmp_path / "in", tmp_path / "meta"
    src = await attached(directory, meta)
    end = None
    for n in range(1, 6):
        put(directory, f"{n:04}.txt", str(n))
        end, records = await take(src, end)
        assert records == [str(n)]
        await src.commit(end)
    assert sorted(os.listdir(meta / "files")) == ["4", "5"]
    put(directory, "0006.txt", "6")
    restarted = await attached(directory, meta)
    assert await take(restarted, end) == ('{"files":6,"lastFile":"0006.txt"}', ["6"])
    put(directory, "0000.txt", "late")
    with pytest.raises(ReplayError, match=r"1 file\(s\) sorting at or before '0006\.txt' appeared"):  # counted: unnamed
        await take(restarted, '{"files":6,"lastFile":"0006.txt"}')


async def test_a_commit_lets_records_go_under_the_sources_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """commit() runs in a worker thread while the next batch's plan and read may run in another: it lets records go
    under the source's lock, as those take it (without, the records' dicts changed under a read, lane J5)."""
    put(tmp_path, "0001.txt", "one")
    src = DirectorySource(tmp_path)
    end, _ = await take(src, None)
    held: list[bool] = []
    taken = src._taken  # the source's own records (its lock guards them)
    monkeypatch.setattr(taken, "forget_committed", lambda files, keep: held.append(src._lock.locked()))
    await src.commit(end)
    assert held == [True]
