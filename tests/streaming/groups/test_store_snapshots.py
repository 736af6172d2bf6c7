"""Snapshots of the state store: no batch waits for one, and they follow the bytes batches write, not the state held."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import pytest

from scheduler import CheckpointPath
from streaming.state import NO_TIMESTAMP, StateStoreProvider
from streaming.state._snapshot_copies import SnapshotCopy


def commit(p: StateStoreProvider, version: int, keys: int = 1) -> int:
    """Load ``version``, put ``keys`` rows named after it, commit; the committed version."""
    store = p.load(version)
    for i in range(keys):
        store.put(f"k{version}-{i}".encode(), b"v" * 10, NO_TIMESTAMP)
    return store.commit()


def rows(p: StateStoreProvider, version: int) -> set[bytes]:
    store = p.load(version)
    try:
        return {key for key, _ in store}
    finally:
        store.abort()


def next_batch_alongside(p: StateStoreProvider, version: int) -> None:
    """Run the batch after ``version`` in another thread and require it to finish while the caller holds its place."""
    done: list[int] = []
    batch = threading.Thread(target=lambda: done.append(commit(p, version)), daemon=True)
    batch.start()
    batch.join(timeout=60)  # a bound for the failure only: it finishes at once unless it waits for the snapshot
    assert done == [version + 1], "the next batch waited for the snapshot"


@pytest.mark.parametrize("stage", ["copy", "write"])
def test_the_next_batch_commits_while_a_snapshot_is_copied_or_written(tmp_path: Path, ck: str, stage: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 3 loads and commits while version 2's snapshot is copied (or written); the snapshot still holds version 2."""
    p = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local", snapshot_every=2)
    for version in range(2):
        commit(p, version)
    if stage == "copy":
        enter: Callable[[SnapshotCopy], SnapshotCopy] = SnapshotCopy.__enter__

        def before_copy(copying: SnapshotCopy) -> SnapshotCopy:
            next_batch_alongside(p, 2)
            return enter(copying)

        monkeypatch.setattr(SnapshotCopy, "__enter__", before_copy)
    else:
        write = CheckpointPath.write_replacing

        def during_write(path: CheckpointPath, data: bytes) -> None:
            if path.name == "2.snapshot":
                next_batch_alongside(p, 2)
            write(path, data)

        monkeypatch.setattr(CheckpointPath, "write_replacing", during_write)
    p.maintenance()
    monkeypatch.undo()
    assert sorted(n for n in p.directory.listdir() if n.endswith(".snapshot")) == ["2.snapshot"]
    assert (p.directory / "1.delta").delete() and (p.directory / "2.delta").delete()  # version 2 from the snapshot alone
    fresh = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "fresh")
    assert rows(fresh, 2) == {b"k0-0", b"k1-0"}
    assert rows(fresh, 3) == {b"k0-0", b"k1-0", b"k2-0"}
