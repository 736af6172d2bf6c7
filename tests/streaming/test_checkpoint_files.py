"""CheckpointFiles without Spark: which RDD checkpoint files a stream's clean deletes, and which it keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streaming.dstream._checkpoint_files import CheckpointFiles, ReleaseQueue


class FakeRDD:
    """An RDD marked for checkpointing: its file is known once ``save`` ran (as after its first job)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / name
        self.saved = False
        self.unpersisted = False

    def save(self) -> FakeRDD:
        self.path.mkdir()
        (self.path / "part-00000").write_bytes(b"rows")
        self.saved = True
        return self

    def getCheckpointFile(self) -> str | None:
        return str(self.path) if self.saved else None

    def unpersist(self, blocking: bool = False) -> None:
        self.unpersisted = True


def no_spark() -> Any:
    raise AssertionError("a file Spark Connect wrote is deleted without a SparkContext")


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_files_older_than_the_newest_saved_at_or_before_the_oldest_remembered_time_are_deleted(tmp_path: Path) -> None:
    """Saved at 1..5 s with RDDs remembered from 3 s: the files of 1 and 2 s go, 3 s (where every remembered lineage
    starts) and later stay; remembered from 5 s, only 5 s stays."""
    files = CheckpointFiles(no_spark)
    for second in range(1, 6):
        files.mark(second * 1000, FakeRDD(tmp_path, f"rdd-{second}").save())
    files.clean(3000)
    assert names(tmp_path) == ["rdd-3", "rdd-4", "rdd-5"]
    assert files.files == {3000: str(tmp_path / "rdd-3"), 4000: str(tmp_path / "rdd-4"), 5000: str(tmp_path / "rdd-5")}
    files.clean(5000)
    assert names(tmp_path) == ["rdd-5"]


def test_nothing_is_deleted_before_a_saved_rdd_starts_every_remembered_lineage(tmp_path: Path) -> None:
    """Remembered from 3 s, whose RDD is marked but not saved yet: its lineage starts at 2 s, whose file stays (1 s goes);
    once 3 s is saved, 2 s goes too."""
    files = CheckpointFiles(no_spark)
    files.mark(1000, FakeRDD(tmp_path, "rdd-1").save())
    files.mark(2000, FakeRDD(tmp_path, "rdd-2").save())
    third = FakeRDD(tmp_path, "rdd-3")
    files.mark(3000, third)
    files.clean(3000)
    assert names(tmp_path) == ["rdd-2"]
    third.save()
    files.clean(3000)
    assert names(tmp_path) == ["rdd-3"]


def test_a_state_carried_over_under_a_later_time_keeps_its_file(tmp_path: Path) -> None:
    """The same RDD at 1 and 2 s (no new input at 2 s) and a new one at 3 s: with 2 s the oldest remembered, its file stays."""
    files = CheckpointFiles(no_spark)
    carried = FakeRDD(tmp_path, "rdd-1").save()
    files.mark(1000, carried)
    files.mark(2000, carried)
    files.mark(3000, FakeRDD(tmp_path, "rdd-3").save())
    files.clean(2000)
    assert names(tmp_path) == ["rdd-1", "rdd-3"]
    assert files.files == {2000: str(tmp_path / "rdd-1"), 3000: str(tmp_path / "rdd-3")}


def test_an_rdd_never_saved_before_the_anchor_is_forgotten(tmp_path: Path) -> None:
    """A marked RDD older than a saved one at or before the oldest remembered time is never saved after: it is dropped."""
    files = CheckpointFiles(no_spark)
    files.mark(1000, FakeRDD(tmp_path, "rdd-1"))
    files.mark(2000, FakeRDD(tmp_path, "rdd-2").save())
    files.clean(2000)
    assert repr(files) == "<CheckpointFiles [1 saved | 0 marked]>"


def test_a_file_that_cannot_be_deleted_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A deletion that fails is logged and the file kept in the books; the next clean deletes it."""
    from streaming.dstream import _checkpoint_files

    files = CheckpointFiles(no_spark)
    files.mark(1000, FakeRDD(tmp_path, "rdd-1").save())
    files.mark(2000, FakeRDD(tmp_path, "rdd-2").save())
    real = _checkpoint_files.task_checkpoint_path

    class Away:
        def delete(self, *, recursive: bool = False) -> bool:
            raise OSError("the file system is away")

    monkeypatch.setattr(_checkpoint_files, "task_checkpoint_path", lambda file: Away())
    files.clean(2000)
    assert names(tmp_path) == ["rdd-1", "rdd-2"] and 1000 in files.files
    assert "cannot delete an old RDD checkpoint file" in caplog.text and "the file system is away" in caplog.text
    monkeypatch.setattr(_checkpoint_files, "task_checkpoint_path", real)
    files.clean(2000)
    assert names(tmp_path) == ["rdd-2"]


def test_the_release_queue_unpersists_before_it_deletes(tmp_path: Path) -> None:
    """One call releases what was queued: the dropped RDDs are unpersisted before any checkpoint file goes."""
    queue = ReleaseQueue()
    assert queue.take() is None
    order: list[str] = []
    dropped = FakeRDD(tmp_path, "cached")
    dropped.unpersist = lambda blocking=False: order.append("unpersist")  # type: ignore[method-assign]

    class Files(CheckpointFiles):
        def clean(self, oldest_remembered_ms: int) -> None:
            order.append(f"clean {oldest_remembered_ms}")

    queue.clean_later(Files(no_spark), 3000)
    queue.unpersist_later(dropped)
    release = queue.take()
    assert release is not None and queue.take() is None
    release()
    assert order == ["unpersist", "clean 3000"]
