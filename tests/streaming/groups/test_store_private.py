"""The state store's working copy is private and proven: planted, foreign or stale copies are never read, legitimate ones are.

A working copy's values are unpickled by the operator, so a copy that is not this partition's
current version of the checkpoint's history must not be used: not one planted at the shared path
earlier releases used, not one whose recorded delta differs from the checkpoint's, not one of
another history at the same version. The payloads planted here create a marker file if unpickled.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sqlite3
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest
from pyspark import TaskContext

from streaming.state import (
    NO_TIMESTAMP,
    GroupState,
    GroupsWithStateSpec,
    StateStoreError,
    StateStoreProvider,
    StateStoreStatistics,
    run_batch,
)


class Planted:
    """A value whose unpickling creates ``marker`` (what a planted working copy would run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def count(key: str, values: Iterator[int], state: GroupState) -> Iterator[tuple[str, int]]:
    """The running count of a key."""
    total = (state.getOption or 0) + sum(values)
    state.update(total)
    yield (key, total)


SPEC = GroupsWithStateSpec(count, True, "NoTimeout", False)


def batch(provider: StateStoreProvider, batch_id: int, keys: list[str]) -> list[Any]:
    """One batch of the running count over ``keys``; its sorted outputs."""
    outputs, _ = run_batch(provider, batch_id, [(k, 1) for k in keys], SPEC, 1000 * (batch_id + 1), 0, 0)
    return sorted(outputs)


def plant(path: Path, version: int, marker: Path, store: str | None = None, digest: bytes = b"\x01" * 32) -> None:
    """A working copy at ``path`` claiming ``version`` whose row for "x" runs the payload; ``store``: the new columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE state (key BLOB PRIMARY KEY, value BLOB, timeout INTEGER NOT NULL) WITHOUT ROWID")
    if store is None:  # the schema of earlier releases
        conn.execute("CREATE TABLE meta (id INTEGER PRIMARY KEY, version INTEGER NOT NULL, rows INTEGER NOT NULL)")
        conn.execute("INSERT INTO meta VALUES (0, ?, 1)", (version,))
    else:
        conn.execute("CREATE TABLE meta (id INTEGER PRIMARY KEY, version INTEGER NOT NULL, rows INTEGER NOT NULL, "
                     "store TEXT NOT NULL, digest BLOB NOT NULL)")
        conn.execute("INSERT INTO meta VALUES (0, ?, 1, ?, ?)", (version, store, digest))
    conn.execute("INSERT INTO state VALUES (?, ?, ?)",
                 (pickle.dumps("x", protocol=5), pickle.dumps(Planted(marker), protocol=5), NO_TIMESTAMP))
    conn.commit()
    conn.close()


def test_a_working_copy_planted_at_the_old_shared_path_is_never_read(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy planted where earlier releases looked (<tmp>/aiodstream-state/<hash of the checkpoint>/...) at the
    first batch's version: the batch counts from the empty state and the payload never runs."""
    shared_tmp = tmp_path / "shared-tmp"
    shared_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    ck, marker = tmp_path / "ck", tmp_path / "ran"
    tag = hashlib.sha256(str(ck.resolve()).encode()).hexdigest()[:16]
    plant(shared_tmp / "aiodstream-state" / tag / "0" / "3.sqlite", 0, marker)
    assert batch(StateStoreProvider(ck, 0, 3), 0, ["x", "y"]) == [("x", 1), ("y", 1)]
    assert not marker.exists()


@pytest.mark.parametrize("schema", ["earlier release", "this release", "not a database"])
def test_a_modified_working_copy_in_the_private_directory_is_rebuilt(tmp_path: Path, schema: str) -> None:
    """A working copy replaced at its own path at the batch's version (an earlier release's, recording nothing, or
    naming this partition with another delta's digest; or not a database at all): the batch's state comes from the
    checkpoint, the payload never runs."""
    ck, local, marker = tmp_path / "ck", tmp_path / "local", tmp_path / "ran"
    first = StateStoreProvider(ck, 0, 3, local_dir=local)
    assert batch(first, 0, ["x", "y"]) == [("x", 1), ("y", 1)]
    first.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{first.working_copy}{suffix}").unlink(missing_ok=True)
    if schema == "not a database":
        first.working_copy.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    else:
        plant(first.working_copy, 1, marker, store=None if schema == "earlier release" else f"{ck.resolve()}/state/0/3")
    provider = StateStoreProvider(ck, 0, 3, local_dir=local)
    assert batch(provider, 1, ["x"]) == [("x", 2)]
    assert not marker.exists()
    assert provider.statistics() == StateStoreStatistics(loads=1, reused=0, rebuilt=1)


def test_a_working_copy_of_another_history_at_the_same_version_is_rebuilt(tmp_path: Path) -> None:
    """Batch 1 re-run on another executor rewrote version 2: this executor's copy, also at version 2, is not used."""
    ck = tmp_path / "ck"
    here = StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "here")
    batch(here, 0, ["x"])
    assert batch(here, 1, ["x"]) == [("x", 2)]
    elsewhere = StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "elsewhere")
    assert batch(elsewhere, 1, ["x", "x", "x"]) == [("x", 4)]  # the re-run saw other input
    assert batch(here, 2, ["x"]) == [("x", 5)]
    assert here.statistics() == StateStoreStatistics(loads=3, reused=1, rebuilt=1)


def test_a_working_copy_behind_on_another_history_is_not_replayed_forward(tmp_path: Path) -> None:
    """A copy at version 2 of one history, the checkpoint's versions 2 and 3 of another: replaying version 3 on top
    would mix them (3 does not touch the key that differs); the chain of digests sends it back to the files."""
    ck = tmp_path / "ck"
    here = StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "here")
    batch(here, 0, ["x"])
    batch(here, 1, ["x"])  # here: x = 2 at version 2
    elsewhere = StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "elsewhere")
    batch(elsewhere, 1, ["x", "x", "x"])  # the checkpoint: x = 4 at version 2
    batch(elsewhere, 2, ["y"])  # version 3, on that history
    assert batch(here, 3, ["x"]) == [("x", 5)]
    assert here.statistics().rebuilt == 1


def test_a_legitimate_working_copy_is_reused_by_the_next_load_and_by_another_process(tmp_path: Path) -> None:
    """Loads in one provider reuse the copy; a second provider on the same directory (another worker process of the
    executor) reuses it too, also when it is behind and replays the newer deltas; no rebuild anywhere."""
    ck, local = tmp_path / "ck", tmp_path / "local"
    one = StateStoreProvider(ck, 0, 0, local_dir=local)
    for b in range(3):
        assert batch(one, b, ["x"]) == [("x", b + 1)]
    assert one.statistics() == StateStoreStatistics(loads=3, reused=2, rebuilt=0)  # version 0 starts empty
    two = StateStoreProvider(ck, 0, 0, local_dir=local)
    assert batch(two, 3, ["x"]) == [("x", 4)]
    assert batch(one, 4, ["x"]) == [("x", 5)]  # one's connection is behind the file: the file is at 4, proven
    assert two.statistics() == StateStoreStatistics(loads=1, reused=1, rebuilt=0)
    assert one.statistics() == StateStoreStatistics(loads=4, reused=3, rebuilt=0)


def test_a_working_copy_stays_consistent_through_a_power_loss(tmp_path: Path) -> None:
    """A working copy kept across a machine's restart (an explicit local_dir) is reused when its meta row proves its
    version, so a power loss must never keep a new meta row over older rows: its WAL checkpoints flush
    (synchronous NORMAL; OFF let the database file lose the pages a checkpoint wrote while the WAL started over)."""
    ck, local = tmp_path / "ck", tmp_path / "local"
    provider = StateStoreProvider(ck, 0, 0, local_dir=local)
    assert batch(provider, 0, ["x"]) == [("x", 1)]
    conn = sqlite3.connect(provider.working_copy)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()
    assert provider._connection().execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL


def test_the_default_working_directory_is_private_to_this_user(tmp_path: Path) -> None:
    """Without a Spark task and a local_dir, the working copy is in a directory of mode 0700 owned by this user."""
    provider = StateStoreProvider(tmp_path / "ck", 0, 0)
    batch(provider, 0, ["x"])
    info = os.stat(provider.working_copy.parent)
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    assert not provider.working_copy.parent.is_relative_to(tmp_path)
    provider.close()


def test_a_local_dir_open_to_others_or_of_another_user_is_refused(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A given local_dir is made 0700; one others can enter, or another user's, is refused with the rule and the fix."""
    made = tmp_path / "made"
    StateStoreProvider(tmp_path / "ck", 0, 0, local_dir=made)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    made.chmod(0o777)
    with pytest.raises(StateStoreError, match=rf"^the state store's working copies go in a directory only this user can "
                                              rf"enter \(mode 700\): {made} is open to others \(mode 777\); pass another "
                                              rf"local_dir$"):
        StateStoreProvider(tmp_path / "ck", 0, 0, local_dir=made)
    made.chmod(0o700)
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    with pytest.raises(StateStoreError, match=rf"{made} is owned by uid {made.stat().st_uid}, not by this process's uid "
                                              r"12345; pass another local_dir$"):
        StateStoreProvider(tmp_path / "ck", 0, 0, local_dir=made)


@pytest.fixture
def in_a_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A Spark task's environment: a TaskContext, and SPARK_LOCAL_DIRS as Spark sets it for its Python workers."""
    local = tmp_path / "blockmgr"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    TaskContext._getOrCreate()
    try:
        yield local
    finally:
        TaskContext._setTaskContext(None)  # type: ignore[arg-type]


def test_in_a_spark_task_the_working_copy_goes_under_sparks_local_directory(in_a_task: Path) -> None:
    """In a task: <SPARK_LOCAL_DIRS>/aiodstream-state, mode 0700, the same for every provider of the executor."""
    provider = StateStoreProvider(in_a_task.parent / "ck", 0, 0)
    assert provider.working_copy.parent == in_a_task / "aiodstream-state"
    assert stat.S_IMODE((in_a_task / "aiodstream-state").stat().st_mode) == 0o700
    batch(provider, 0, ["x"])
    again = StateStoreProvider(in_a_task.parent / "ck", 0, 0)
    assert again.working_copy == provider.working_copy
    assert batch(again, 1, ["x"]) == [("x", 2)] and again.statistics().reused == 1


def test_in_a_spark_task_a_shared_directory_not_private_is_not_used(in_a_task: Path) -> None:
    """<SPARK_LOCAL_DIRS>/aiodstream-state made by someone else open to all (a copy planted in it): not used; the
    store takes a private directory of its own and counts from the checkpoint."""
    shared = in_a_task / "aiodstream-state"
    shared.mkdir()
    shared.chmod(0o777)
    marker = in_a_task.parent / "ran"
    provider = StateStoreProvider(in_a_task.parent / "ck", 0, 0)
    plant(shared / provider.working_copy.name, 0, marker, store=provider.identity)
    assert provider.working_copy.parent != shared and provider.working_copy.parent.parent == in_a_task
    assert stat.S_IMODE(provider.working_copy.parent.stat().st_mode) == 0o700
    assert batch(provider, 0, ["x"]) == [("x", 1)]
    assert not marker.exists()


def held(provider: StateStoreProvider, version: int) -> dict[Any, Any]:
    """The state at ``version``, unpickled."""
    store = provider.load(version)
    try:
        return {pickle.loads(key): pickle.loads(value) for key, (value, _) in store if value is not None}
    finally:
        store.abort()


def commit(provider: StateStoreProvider, version: int, **values: int) -> None:
    """Load ``version``, store ``values`` (no operator, no background snapshot), commit ``version + 1``."""
    store = provider.load(version)
    for key, value in values.items():
        store.put(pickle.dumps(key, protocol=5), pickle.dumps(value, protocol=5), NO_TIMESTAMP)
    store.commit()


def test_a_snapshot_of_another_history_is_passed_over_for_an_older_base(tmp_path: Path) -> None:
    """A snapshot of version 2 taken before batch 1 was re-run elsewhere: version 3 (written on the re-run's history)
    is not replayed on it; the store rebuilds from the deltas, and once they are gone refuses with the reason
    instead of mixing the two histories."""
    ck = tmp_path / "ck"
    here = StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "here", snapshot_every=2)
    commit(here, 0, x=1)
    commit(here, 1, x=2)
    here.maintenance()
    stale = (here.directory / "2.snapshot").read_bytes()  # x = 2
    assert stale is not None
    elsewhere = StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "elsewhere", snapshot_every=2)
    commit(elsewhere, 1, x=4)  # version 2 again: the snapshot of the history it replaces goes with it
    assert not (here.directory / "2.snapshot").exists()
    (here.directory / "2.snapshot").write_replacing(stale)  # as a late write of a zombie's copy would bring it back
    commit(elsewhere, 2, y=1)  # version 3 on it
    fresh = StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "fresh")
    assert held(fresh, 3) == {"x": 4, "y": 1}
    assert fresh.statistics().rebuilt == 1
    assert (here.directory / "1.delta").delete()  # as a purge would once a snapshot covers it
    with pytest.raises(StateStoreError, match=rf"^cannot load state version 3 from {here.directory}: its files do not "
                                              rf"form one history \({here.directory}/3\.delta was written on top of "
                                              r"another history than version 2's\) and no older snapshot leads to it$"):
        held(StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "fresher"), 3)
    with pytest.raises(StateStoreError, match=rf"^cannot load state version 2 from {here.directory}: its files do not "
                                              rf"form one history \({here.directory}/2\.snapshot is not of the history "
                                              r"of 2\.delta\) and no older snapshot leads to it$"):
        held(StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "freshest"), 2)


def test_a_working_copy_overtaken_by_a_re_run_writes_no_snapshot(tmp_path: Path) -> None:
    """Version 2 committed here, then rewritten by a re-run elsewhere: this copy's snapshot of 2 would be of another
    history, so maintenance skips it."""
    ck = tmp_path / "ck"
    here = StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "here", snapshot_every=2)
    commit(here, 0, x=1)
    commit(here, 1, x=2)
    commit(StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "elsewhere"), 1, x=4)
    here.maintenance()
    assert not (here.directory / "2.snapshot").exists()
    assert held(StateStoreProvider(ck, 0, 0, local_dir=tmp_path / "fresh"), 2) == {"x": 4}
