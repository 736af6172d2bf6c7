"""Snapshots of the state store: no batch waits for one, and they follow the bytes batches write, not the state held."""

from __future__ import annotations

import itertools
import sqlite3
import threading
from pathlib import Path
from typing import Callable

import pytest

from streaming.state import NO_TIMESTAMP, StateStoreProvider
from streaming.state._partition_files import PartitionFiles
from streaming.state._snapshot_copies import SnapshotCopy
from streaming.state._store_format import SNAPSHOT


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
        write = PartitionFiles.write_snapshot

        def during_write(files: PartitionFiles, version: int, database: bytes) -> None:
            if version == 2:
                next_batch_alongside(p, 2)
            write(files, version, database)

        monkeypatch.setattr(PartitionFiles, "write_snapshot", during_write)
    p.maintenance()
    monkeypatch.undo()
    assert sorted(n for n in p.directory.listdir() if n.endswith(".snapshot")) == ["2.snapshot"]
    assert (p.directory / "1.delta").delete() and (p.directory / "2.delta").delete()  # version 2 from the snapshot alone
    fresh = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "fresh")
    assert rows(fresh, 2) == {b"k0-0", b"k1-0"}
    assert rows(fresh, 3) == {b"k0-0", b"k1-0", b"k2-0"}


def run_batches(p: StateStoreProvider, first: int, last: int, sizes: dict[int, tuple[int, int]]) -> list[int]:
    """Commit versions ``first``..``last`` (the first puts 2,000 rows, each later one rewrites 100), maintaining after each.

    Returns the versions whose maintenance ran; ``sizes`` gets each version's delta file size
    and working copy size.
    """
    due = []
    for version in range(first, last + 1):
        store = p.load(version - 1)
        for i in range(2000 if version == 1 else 100):
            store.put(f"k{(version * 100 + i) % 2000:04d}".encode(), f"{version:010d}".encode(), NO_TIMESTAMP)
        assert store.commit() == version
        assert p.last_metrics is not None
        sizes[version] = (len((p.directory / f"{version}.delta").read_bytes() or b""), p.last_metrics.memory_used_bytes)
        thread = p.maintain_after(version)
        if thread is not None:
            thread.join()
            due.append(version)
    return due


def expected_snapshots(sizes: dict[int, tuple[int, int]], every: int, fraction: float) -> list[int]:
    """The rule: at least ``every`` versions after the last snapshot, and the deltas since reach ``fraction`` of the state."""
    due, base, written = [], 0, 0
    for version in sorted(sizes):
        delta, state = sizes[version]
        written += delta
        if version - base >= every and written >= fraction * state:
            due.append(version)
            base, written = version, 0
    return due


@pytest.mark.parametrize("restart", [None, 9, 20])
def test_snapshots_follow_the_bytes_the_batches_write(tmp_path: Path, ck: str, restart: int | None) -> None:
    """2,000 rows, then 100 rewritten a batch: a snapshot once the deltas since the last reach half the state, not every 2 versions.

    A provider made anew after version ``restart`` (another process) counts the deltas it did
    not see as the mean of those it commits, and finds the newest snapshot in the checkpoint.
    """
    options = {"snapshot_every": 2, "small_state_bytes": 0}
    p = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local", **options)
    sizes: dict[int, tuple[int, int]] = {}
    if restart is None:
        due = run_batches(p, 1, 40, sizes)
    else:
        due = run_batches(p, 1, restart, sizes)
        p.close()
        due += run_batches(StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local", **options), restart + 1, 40, sizes)
    assert due == expected_snapshots(sizes, 2, 0.5)
    assert due[0] == 2 and len(due) >= 2 and all(b - a > 5 for a, b in itertools.pairwise(due))
    assert sorted(int(n.split(".")[0]) for n in p.directory.listdir() if n.endswith(".snapshot")) == due


def test_a_small_state_is_snapshotted_every_snapshot_every_versions(tmp_path: Path, ck: str) -> None:
    """The same batches with the state under small_state_bytes: a snapshot every 2 versions, as the count alone gives."""
    p = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local", snapshot_every=2)
    assert run_batches(p, 1, 12, {}) == [2, 4, 6, 8, 10, 12]


def test_rare_snapshots_keep_every_delta_back_to_the_retained_versions_base(tmp_path: Path, ck: str) -> None:
    """Retaining 5 versions with snapshots at 2, 15, 28: version 28's purge keeps snapshot 15 and the deltas after it."""
    p = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local", snapshot_every=2, small_state_bytes=0,
                           min_versions_to_retain=5)
    sizes: dict[int, tuple[int, int]] = {}
    due = run_batches(p, 1, 40, sizes)
    assert due == expected_snapshots(sizes, 2, 0.5) and len(due) == 3
    names = p.directory.listdir()
    assert sorted(int(n.split(".")[0]) for n in names if n.endswith(".snapshot")) == due[1:]
    assert sorted(int(n.split(".")[0]) for n in names if n.endswith(".delta")) == list(range(due[1] + 1, 41))
    fresh = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "fresh")
    for version in range(36, 41):
        assert len(rows(fresh, version)) == 2000


def test_a_batch_re_run_during_the_copy_rebuilds_at_once_and_the_snapshot_is_skipped(tmp_path: Path, ck: str,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch 1 re-run (another history of version 2) while version 2 is copied: it rebuilds without waiting, and no 2.snapshot."""
    p = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local", snapshot_every=2)
    for version in range(2):
        commit(p, version)
    enter: Callable[[SnapshotCopy], SnapshotCopy] = SnapshotCopy.__enter__
    done: list[int] = []

    def before_copy(copying: SnapshotCopy) -> SnapshotCopy:
        rerun = threading.Thread(target=lambda: done.append(commit(p, 1, keys=2)), daemon=True)
        rerun.start()
        rerun.join(timeout=60)  # a bound for the failure only
        assert done == [2], "the re-run waited for the snapshot"
        return enter(copying)

    monkeypatch.setattr(SnapshotCopy, "__enter__", before_copy)
    p.maintenance()
    monkeypatch.undo()
    assert p.statistics().rebuilt == 1
    assert not (p.directory / "2.snapshot").exists()  # the copy held the first version 2, no longer the checkpoint's
    history = {b"k0-0", b"k1-0", b"k1-1"}
    assert rows(StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "fresh"), 2) == history
    reader = sqlite3.connect(p.working_copy)  # the working copy's WAL survived the copy's connection closing
    try:
        assert {key for (key,) in reader.execute("SELECT key FROM state")} == history
    finally:
        reader.close()
    assert rows(p, 2) == history and p.statistics().rebuilt == 1


def test_no_maintenance_starts_while_a_snapshot_is_copied(tmp_path: Path, ck: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """maintain_after of a due version during a copy starts no thread (it would only find the copy busy); after it, one starts."""
    p = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local", snapshot_every=2)
    for version in range(2):
        commit(p, version)
    enter: Callable[[SnapshotCopy], SnapshotCopy] = SnapshotCopy.__enter__
    during: list[threading.Thread | None] = []

    def before_copy(copying: SnapshotCopy) -> SnapshotCopy:
        during.append(p.maintain_after(2))
        return enter(copying)

    monkeypatch.setattr(SnapshotCopy, "__enter__", before_copy)
    p.maintenance()
    monkeypatch.undo()
    assert during == [None] and (p.directory / "2.snapshot").exists()
    commit(p, 2)
    commit(p, 3)
    thread = p.maintain_after(4)
    assert thread is not None
    thread.join()
    assert (p.directory / "4.snapshot").exists()


def test_a_re_run_version_drops_the_snapshot_of_the_history_it_replaces(tmp_path: Path, ck: str) -> None:
    """Version 4 committed with its snapshot, then its batch re-run (the driver died before its commit) writing other
    rows: the old snapshot goes with the delta it replaced, so neither a load of version 4 nor purge (which keeps a
    snapshot as its base and drops the deltas under it) ever takes the first run's state for the checkpoint's."""
    kw = {"snapshot_every": 2, "min_versions_to_retain": 3}
    p = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local", **kw)

    def batch(loaded: int, value: bytes) -> int:
        store = p.load(loaded)
        store.put(b"k", value, NO_TIMESTAMP)
        version = store.commit()
        writer = p.maintain_after(version)
        if writer is not None:
            writer.join()
        return version

    for loaded in range(4):
        batch(loaded, b"first run %d" % loaded)
    files = PartitionFiles(p.directory)
    assert 4 in files.versions(SNAPSHOT)
    assert batch(3, b"re-run 3") == 4
    batch(4, b"batch 4")
    batch(5, b"batch 5")  # purge now keeps a base at or before version 4
    for version, value in ((4, b"re-run 3"), (5, b"batch 4"), (6, b"batch 5")):
        fresh = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / f"fresh{version}", **kw)  # another executor
        store = fresh.load(version)
        assert store.get(b"k")[0] == value
        store.abort()
        fresh.close()


def test_a_second_attempt_that_waited_for_the_working_copys_lock_reads_the_version_it_loads(tmp_path: Path, ck: str) -> None:
    """Two attempts of one batch on one working copy (two Python workers of an executor share it): the second read the
    copy's version before the first committed, then waited for its write lock; it must not apply its batch on top of
    the first attempt's commit (the counter counted twice)."""
    first = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local")
    store = first.load(0)
    store.put(b"n", b"1", NO_TIMESTAMP)
    store.commit()  # version 1: n = 1
    second = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "local")
    assert second.working_copy == first.working_copy
    second.load(1).abort()  # its worker has the working copy open already (a reused Python worker)
    attempt = first.load(1)  # holds the working copy's write lock
    attempt.put(b"n", str(int(attempt.get(b"n")[0]) + 1).encode(), NO_TIMESTAMP)
    real = second._connection()
    done: list[int] = []

    class FirstCommitsMeanwhile:
        """The second attempt's connection: the first attempt commits right before the second takes the write lock."""

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
            if sql == "BEGIN IMMEDIATE" and not done:
                done.append(attempt.commit())
            return real.execute(sql, *args)

    second._conn = FirstCommitsMeanwhile()  # type: ignore[assignment]
    retry = second.load(1)
    assert retry.get(b"n")[0] == b"1"  # version 1's, not the first attempt's version 2
    retry.put(b"n", str(int(retry.get(b"n")[0]) + 1).encode(), NO_TIMESTAMP)
    assert retry.commit() == 2
    fresh = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "fresh")
    check = fresh.load(2)
    assert check.get(b"n")[0] == b"2"
    check.abort()
