"""The state store: versions per batch, loadable from the checkpoint files alone, with clear errors for damage.

Each test runs with the durable files on the local disk and on fsspec's in-memory file system
(the path a task takes for ``hdfs://``, ``s3a://`` and other URIs); the working copies are local.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import FsspecFileManager, task_checkpoint_path
from streaming.state import NO_TIMESTAMP, StateStoreError, StateStoreProvider, keep_partition_count


def provider(root: Path, ck: str, local: str = "local", **options: int) -> StateStoreProvider:
    return StateStoreProvider(ck, 0, 3, local_dir=root / local, **options)


def test_a_uri_goes_through_fsspec_and_a_path_stays_local(tmp_path: Path) -> None:
    """The store's files for a URI other than file: go through fsspec; a path and a file: URI use the local manager."""
    remote = StateStoreProvider("memory://somewhere/ck", 0, 1, local_dir=tmp_path)
    assert isinstance(remote.directory.files, FsspecFileManager)
    assert remote.directory.path == "memory://somewhere/ck/state/0/1"
    assert StateStoreProvider(tmp_path / "ck", 0, 1).directory.is_local
    assert task_checkpoint_path(f"file://{tmp_path}/ck").is_local
    with pytest.raises(ValueError, match=r"the executors' tasks read and write nosuch://x/ck from Python through "
                                         r"fsspec, which cannot open nosuch:// here: Protocol not known: nosuch"):
        StateStoreProvider("nosuch://x/ck", 0, 1)


def commit_one_key_per_version(p: StateStoreProvider, versions: int) -> None:
    """Commit versions 1..``versions``, each adding key ``k<n-1>``, each followed by the store's maintenance."""
    for version in range(versions):
        store = p.load(version)
        store.put(f"k{version}".encode(), str(version).encode(), NO_TIMESTAMP)
        store.commit()
        p.maintenance()


def rows(p: StateStoreProvider, version: int) -> dict[bytes, tuple[bytes | None, int]]:
    store = p.load(version)
    try:
        return dict(store)
    finally:
        store.abort()


def test_versions_follow_commits_and_each_stays_loadable(tmp_path: Path, ck: str) -> None:
    """Three commits; each version reads back as it was, also from a fresh local directory (the files alone)."""
    p = provider(tmp_path, ck)
    store = p.load(0)
    store.put(b"a", b"1", NO_TIMESTAMP)
    store.put(b"b", b"2", 500)
    assert store.commit() == 1
    store = p.load(1)
    assert store.get(b"a") == (b"1", NO_TIMESTAMP) and store.get(b"z") is None and len(store) == 2
    store.remove(b"a")
    store.put(b"c", None, 100)  # a removed state that keeps its timeout
    assert store.commit() == 2
    metrics = p.last_metrics
    assert metrics is not None and (metrics.num_rows_total, metrics.num_rows_updated, metrics.num_rows_removed) == (2, 1, 1)
    expected = {1: {b"a": (b"1", -1), b"b": (b"2", 500)}, 2: {b"b": (b"2", 500), b"c": (None, 100)}}
    fresh = provider(tmp_path, ck, "elsewhere")
    for version in (2, 1, 2):  # forwards, back (a re-run after a crash), forwards again
        assert rows(fresh, version) == expected[version]
    assert rows(p, 1) == expected[1]


def test_due_reads_rows_strictly_before_the_threshold_earliest_first(tmp_path: Path, ck: str) -> None:
    """due(t): timeouts < t, in timeout order; rows without a timeout never."""
    p = provider(tmp_path, ck)
    store = p.load(0)
    for key, timeout in [(b"late", 900), (b"early", 100), (b"none", NO_TIMESTAMP), (b"edge", 500)]:
        store.put(key, b"v", timeout)
    assert [key for key, _ in store.due(500)] == [b"early"]
    assert [key for key, _ in store.due(901)] == [b"early", b"edge", b"late"]
    store.abort()
    assert rows(p, 0) == {}  # aborted: nothing of it stays


def test_snapshots_and_purge_keep_what_the_retained_versions_need(tmp_path: Path, ck: str) -> None:
    """Snapshot every 2 versions, retain 3: old deltas go once a snapshot covers them; the retained ones load anywhere."""
    p = provider(tmp_path, ck, snapshot_every=2, min_versions_to_retain=3)
    commit_one_key_per_version(p, 8)
    names = p.directory.listdir()
    assert "8.snapshot" in names and "1.delta" not in names
    fresh = provider(tmp_path, ck, "fresh")
    for version in (6, 7, 8):
        assert sorted(rows(fresh, version)) == sorted(f"k{v}".encode() for v in range(version))
    missing = r"cannot load state version 2 from .*: 1\.delta is missing \(deltas present: \[7, 8\], snapshots: \[6, 8\]\)"
    with pytest.raises(StateStoreError, match=missing):
        rows(fresh, 2)


def test_a_version_never_committed_names_the_batch_that_should_have_written_it(tmp_path: Path, ck: str) -> None:
    """Batch 1 failed (version 2 never committed): batch 2, loading version 2, says so, not just that 2.delta is missing."""
    p = provider(tmp_path, ck)
    store = p.load(0)  # batch 0 commits version 1
    store.put(b"k", b"0", NO_TIMESTAMP)
    store.commit()
    p.load(1).abort()  # batch 1 fails
    with pytest.raises(StateStoreError, match=(
            r"^cannot load state version 2 from .*: state version 2 is not there: the batch that writes it \(id 1 unless "
            r"the query's offsets entries record state versions\) failed or did not run this state \(see that batch's "
            r"error\), or .*2\.delta was removed after its batch committed \(restore it from a copy\) \(deltas present: "
            r"\[1\], snapshots: none\)$")):
        rows(provider(tmp_path, ck, "fresh"), 2)


def test_a_damaged_or_foreign_file_is_named(tmp_path: Path, ck: str) -> None:
    """A flipped byte fails the checksum; a file that is not ours is refused; both name the file."""
    p = provider(tmp_path, ck)
    store = p.load(0)
    store.put(b"a", b"1", NO_TIMESTAMP)
    store.commit()
    delta = p.directory / "1.delta"
    data = bytearray(delta.read_bytes() or b"")
    data[-40] ^= 0xFF
    delta.write_replacing(bytes(data))
    with pytest.raises(StateStoreError, match=r"1\.delta is damaged: its checksum does not match"):
        rows(provider(tmp_path, ck, "other"), 1)
    delta.write_replacing(b"not a delta")
    with pytest.raises(StateStoreError, match=r"1\.delta is not an aiodstream delta file"):
        rows(provider(tmp_path, ck, "third"), 1)


def test_a_damaged_newest_snapshot_says_how_the_older_one_and_the_deltas_rebuild_the_state(tmp_path: Path, ck: str) -> None:
    """Snapshot 4 damaged while snapshot 2 and deltas 3-4 are kept: the load still fails (as Spark's does), naming the
    damaged file and the way out; moved aside, the state is rebuilt exactly. Without the deltas, no such hint."""
    p = provider(tmp_path, ck, snapshot_every=2, min_versions_to_retain=10)
    commit_one_key_per_version(p, 4)
    assert {"2.snapshot", "4.snapshot", "3.delta", "4.delta"} <= set(p.directory.listdir())
    snapshot = p.directory / "4.snapshot"
    whole = snapshot.read_bytes() or b""
    snapshot.write_replacing(whole[:-100])
    with pytest.raises(StateStoreError, match=(
            r"4\.snapshot is damaged: .*; snapshot 2\.snapshot and every delta after it up to version 4 are there: move "
            r".*4\.snapshot aside and restart, and the state is rebuilt from them$")):
        rows(provider(tmp_path, ck, "second"), 4)
    assert snapshot.read_bytes() == whole[:-100]  # the failed load left the damaged file where it was
    snapshot.delete()  # moved aside, as the message says
    assert sorted(rows(provider(tmp_path, ck, "third"), 4)) == [b"k0", b"k1", b"k2", b"k3"]
    snapshot.write_replacing(whole[:-100])
    (p.directory / "3.delta").delete()
    with pytest.raises(StateStoreError, match=r"4\.snapshot is damaged: [^;]*$"):  # nothing older leads to 4
        rows(provider(tmp_path, ck, "fourth"), 4)


def test_keys_and_values_must_be_bytes(tmp_path: Path, ck: str) -> None:
    """The store takes bytes (the operator pickles); anything else is a TypeError, and a used store refuses more."""
    store = provider(tmp_path, ck).load(0)
    with pytest.raises(TypeError, match="state store keys are bytes, got str"):
        store.put("a", b"1", NO_TIMESTAMP)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="state store values are bytes, got int"):
        store.put(b"a", 1, NO_TIMESTAMP)  # type: ignore[arg-type]
    store.commit()
    with pytest.raises(StateStoreError, match="already committed or aborted"):
        store.get(b"a")


def test_maintenance_waits_for_a_load_in_progress(tmp_path: Path, ck: str) -> None:
    """A snapshot runs only between batches: maintenance started while a store is open waits for its commit.

    Had it not waited, it would have found version 0 (no snapshot due) or copied a half-written
    batch; it wrote the snapshot of version 1, whole.
    """
    p = provider(tmp_path, ck, snapshot_every=1)
    store = p.load(0)
    store.put(b"a", b"1", NO_TIMESTAMP)
    started, done = threading.Event(), threading.Event()

    def maintain() -> None:
        started.set()
        p.maintenance()
        done.set()

    thread = threading.Thread(target=maintain)
    thread.start()
    started.wait()
    store.commit()
    thread.join()
    assert done.is_set() and (p.directory / "1.snapshot").exists()
    assert rows(provider(tmp_path, ck, "fresh"), 1) == {b"a": (b"1", NO_TIMESTAMP)}


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]),
                                   st.one_of(st.none(), st.binary(max_size=3)), st.integers(-1, 50)), max_size=6),
                min_size=1, max_size=8))
def test_any_sequence_of_batches_reads_back_like_a_dict(tmp_path_factory: pytest.TempPathFactory,
                                                       batches: list[list[tuple[bytes, bytes | None, int]]]) -> None:
    """A model: each batch puts (value, timeout) or removes (value None and timeout -1), some after a get; every
    version, and the row count after each write, equals the model's."""
    root = tmp_path_factory.mktemp("store")
    p = StateStoreProvider(root / "ck", 1, 0, local_dir=root / "local", snapshot_every=3)
    model: dict[bytes, tuple[bytes | None, int]] = {}
    history = [dict(model)]
    for version, batch in enumerate(batches):
        store = p.load(version)
        assert len(store) == len(model)
        for key, value, timeout in batch:
            if timeout % 2:  # read first: the write then knows whether the key has a row
                assert store.get(key) == model.get(key)
            if value is None and timeout == -1:
                store.remove(key)
                model.pop(key, None)
            else:
                store.put(key, value, timeout)
                model[key] = (value, timeout)
            assert len(store) == len(model)
        store.commit()
        p.maintenance()
        history.append(dict(model))
    fresh = StateStoreProvider(root / "ck", 1, 0, local_dir=root / "fresh")
    for version in reversed(range(len(history))):
        assert rows(fresh, version) == history[version]


def test_a_due_snapshot_is_written_in_the_background_after_the_commit(tmp_path: Path, ck: str) -> None:
    """maintain_after(v): no thread for a version not due; for a due one, a thread whose snapshot holds that version."""
    p = provider(tmp_path, ck, snapshot_every=2)
    for version in range(2):
        store = p.load(version)
        store.put(f"k{version}".encode(), b"v", NO_TIMESTAMP)
        committed = store.commit()
        thread = p.maintain_after(committed)
        if committed == 1:
            assert thread is None and not (p.directory / "1.snapshot").exists()
        else:
            assert thread is not None
            thread.join()
    assert (p.directory / "2.snapshot").exists()
    assert (p.directory / "1.delta").delete() and (p.directory / "2.delta").delete()  # the snapshot alone now holds version 2
    assert rows(provider(tmp_path, ck, "fresh"), 2) == {b"k0": (b"v", NO_TIMESTAMP), b"k1": (b"v", NO_TIMESTAMP)}


def test_the_partition_count_of_a_checkpoint_is_kept(tmp_path: Path, ck: str) -> None:
    """The first count asked for is recorded; a later, different one gets the recorded count; a damaged record is named."""
    assert keep_partition_count(ck, 0, 4) == 4
    assert keep_partition_count(ck, 0, 8) == 4
    assert keep_partition_count(ck, 1, 8) == 8  # per operator
    task_checkpoint_path(f"{ck}/state/0/partitions").write_replacing(b"four")
    with pytest.raises(StateStoreError, match=r"partitions does not hold a partition count"):
        keep_partition_count(ck, 0, 4)


def test_a_write_after_a_read_of_its_key_is_one_statement(tmp_path: Path, ck: str) -> None:
    """A batch's get then put of a key runs one SELECT and one INSERT; the row count is written once, at the commit."""
    p = provider(tmp_path, ck)
    store = p.load(0)
    store.put(b"a", b"1", NO_TIMESTAMP)
    store.commit()
    store = p.load(1)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    store.get(b"a")
    store.put(b"a", b"2", NO_TIMESTAMP)
    store.get(b"b")
    store.put(b"b", b"1", NO_TIMESTAMP)
    store.remove(b"a")
    assert [s.split()[0] for s in statements] == ["SELECT", "INSERT", "SELECT", "INSERT", "DELETE"]
    assert len(store) == 1
    store._conn.set_trace_callback(None)
    store.commit()
    store = p.load(2)
    assert len(store) == 1
    store.abort()


def test_a_shared_store_nobody_asked_for_in_ten_minutes_is_unloaded_and_its_working_copy_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Spark worker keeps its stores between batches; one not asked for in UNLOAD_IDLE_S is closed and its working copy
    deleted when another is asked for (lane M4: a worker kept every finished query's copy, and its open file, for good),
    unless a load holds it then. Its state is the checkpoint's: loaded again, it is rebuilt from there."""
    import types

    import streaming.state._store_provider as module

    now = [1_000.0]
    monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(module, "_shared", {})

    def committed(ck: str) -> StateStoreProvider:
        p = StateStoreProvider.shared(tmp_path / ck, 0, 0)
        store = p.load(0)
        store.put(b"k", ck.encode(), NO_TIMESTAMP)
        assert store.commit() == 1
        return p

    finished, busy = committed("finished"), committed("busy")
    assert finished.working_copy.exists() and busy.working_copy.exists()
    now[0] += module.UNLOAD_IDLE_S + 1
    # A task of another worker process of the executor runs the finished query's partition (its outputs lock held).
    other_process = os.open(finished.working_copy.with_suffix(".outputs-lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(other_process, fcntl.LOCK_EX)
    with busy._lock:  # and a task of the busy query, in this process, is between its load and its commit
        StateStoreProvider.shared(tmp_path / "other", 0, 0)
    assert finished.working_copy.exists() and busy.working_copy.exists() and len(module._shared) == 3
    os.close(other_process)  # that task ended
    with busy._lock:
        StateStoreProvider.shared(tmp_path / "other", 0, 0)
    assert not finished.working_copy.exists() and not Path(f"{finished.working_copy}-wal").exists()
    assert busy.working_copy.exists() and len(module._shared) == 2  # busy and other
    now[0] += 1
    assert StateStoreProvider.shared(tmp_path / "busy", 0, 0) is busy  # asked for again: not idle any more
    again = StateStoreProvider.shared(tmp_path / "finished", 0, 0)
    assert again is not finished and rows(again, 1) == {b"k": (b"finished", NO_TIMESTAMP)}
