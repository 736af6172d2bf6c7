"""When a state store commit reaches the disk: flushed by default, Spark's durability (whole files, no ``fsync``) on request.

A commit's delta is written whole under a temporary name and renamed into place. By default the
delta and its directory are flushed before the commit returns; with ``fsync=False`` they are not
(Spark's state stores on a local disk do not flush either), which a SIGKILL of the writer cannot
undo, since the file is in the kernel's page cache once the rename returns.
"""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

import pytest

from streaming.state import NO_TIMESTAMP, StateStoreProvider
from tests.crash import KILL_AT, child_env, run_python


def commit_versions(p: StateStoreProvider, last: int) -> None:
    """Commit versions 1..``last``, key ``k<v>`` each."""
    for version in range(last):
        store = p.load(version)
        store.put(f"k{version + 1}".encode(), str(version + 1).encode(), NO_TIMESTAMP)
        store.commit()


def commit_versions_from(p: StateStoreProvider, first: int, last: int) -> None:
    """Commit versions ``first + 1``..``last`` on top of ``first``, key ``k<v>`` each."""
    for version in range(first, last):
        store = p.load(version)
        store.put(f"k{version + 1}".encode(), str(version + 1).encode(), NO_TIMESTAMP)
        store.commit()


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every ``os.fsync`` from now on, its descriptor noted (and still done)."""
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def rows_at(ck: Path, version: int, local: Path) -> dict[bytes, tuple[bytes | None, int]]:
    """Version ``version`` as a new working copy in ``local`` reads it from the checkpoint's files alone."""
    p = StateStoreProvider(ck, 0, 0, local_dir=local)
    store = p.load(version)
    try:
        assert store.loaded_from == "checkpoint"
        return dict(store)
    finally:
        store.abort()
        p.close()


def test_without_fsync_a_commit_is_written_whole_and_not_flushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With fsync=False no commit calls fsync, none leaves a temporary file, and each version loads from the checkpoint alone."""
    p = StateStoreProvider(tmp_path / "ck", 0, 0, local_dir=tmp_path / "local", fsync=False)
    assert p.fsync is False
    commit_versions(p, 1)  # version 1 also makes the partition's directory (flushed into its parent, once)
    fsyncs = count_fsyncs(monkeypatch)
    commit_versions_from(p, 1, 3)
    assert fsyncs == []
    assert sorted(os.listdir(tmp_path / "ck" / "state" / "0" / "0")) == ["1.delta", "2.delta", "3.delta"]
    assert rows_at(tmp_path / "ck", 3, tmp_path / "other") == {b"k1": (b"1", NO_TIMESTAMP), b"k2": (b"2", NO_TIMESTAMP),
                                                                b"k3": (b"3", NO_TIMESTAMP)}


def test_by_default_each_delta_and_its_directory_are_flushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default each commit flushes two descriptors (the delta, then its directory); the versions read back the same."""
    p = StateStoreProvider(tmp_path / "ck", 0, 0, local_dir=tmp_path / "local")
    assert p.fsync is True
    commit_versions(p, 1)  # version 1 also makes the partition's directory (flushed into its parent)
    fsyncs = count_fsyncs(monkeypatch)
    commit_versions_from(p, 1, 3)
    assert len(fsyncs) == 4
    assert rows_at(tmp_path / "ck", 3, tmp_path / "other") == {b"k1": (b"1", NO_TIMESTAMP), b"k2": (b"2", NO_TIMESTAMP),
                                                                b"k3": (b"3", NO_TIMESTAMP)}


def test_the_shared_provider_takes_each_batch_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's shared provider follows the setting its latest batch passed, on and off."""
    ck = tmp_path / "ck"
    first = StateStoreProvider.shared(ck, 7, 0, fsync=False)
    try:
        assert first.fsync is False
        assert StateStoreProvider.shared(ck, 7, 0) is first and first.fsync is False  # None: as it is
        fsyncs = count_fsyncs(monkeypatch)
        commit_versions(StateStoreProvider.shared(ck, 7, 0), 1)
        commit_versions_from(StateStoreProvider.shared(ck, 7, 0), 1, 2)
        assert len(fsyncs) == 1  # only the partition's new directory, once
        again = StateStoreProvider.shared(ck, 7, 0, fsync=True)
        assert again is first and again.fsync is True
        commit_versions_from(StateStoreProvider.shared(ck, 7, 0), 2, 4)
        assert len(fsyncs) == 5  # then two a commit
    finally:
        first.close()


_CHILD = textwrap.dedent("""
    import os, signal, sys
    from streaming.state import NO_TIMESTAMP, StateStoreProvider
    from tests.crash import install_kill_point

    install_kill_point(lambda path: "state-delta" if path.endswith(".delta") else None)
    ck, local, last = sys.argv[1], sys.argv[2], int(sys.argv[3])
    p = StateStoreProvider(ck, 0, 0, local_dir=local, fsync=False)
    for version in range(last):
        store = p.load(version)
        store.put(f"k{version + 1}".encode(), str(version + 1).encode(), NO_TIMESTAMP)
        store.commit()
    os.kill(os.getpid(), signal.SIGKILL)  # at once after the last commit: nothing flushed, nothing closed
""")


def test_a_commit_without_fsync_survives_a_sigkill_right_after_it(tmp_path: Path) -> None:
    """A writer without fsync killed right after its third commit: all three versions load from the checkpoint elsewhere."""
    done = run_python(["-c", _CHILD, str(tmp_path / "ck"), str(tmp_path / "local"), "3"], timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert rows_at(tmp_path / "ck", 3, tmp_path / "other") == {b"k1": (b"1", NO_TIMESTAMP), b"k2": (b"2", NO_TIMESTAMP),
                                                                b"k3": (b"3", NO_TIMESTAMP)}


@pytest.mark.parametrize("point", ["state-delta-temp", "state-delta-linked"])
def test_a_writer_killed_during_a_commit_without_fsync_leaves_a_loadable_checkpoint(tmp_path: Path, point: str) -> None:
    """Killed at its third delta (written but not renamed, or renamed): versions 1-2 load, version 3 iff it was
    renamed, and the next load sweeps the temporary file the kill left."""
    done = run_python(["-c", _CHILD, str(tmp_path / "ck"), str(tmp_path / "local"), "4"],
                      env=child_env({KILL_AT: point, "AIODSTREAM_KILL_AFTER": "3"}), timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    directory = tmp_path / "ck" / "state" / "0" / "0"
    names = sorted(os.listdir(directory))
    renamed = point.endswith("linked")
    assert [n for n in names if not n.startswith(".")] == (["1.delta", "2.delta", "3.delta"] if renamed
                                                            else ["1.delta", "2.delta"])
    assert len([n for n in names if n.startswith(".3.delta.") and n.endswith(".tmp")]) == (0 if renamed else 1)
    expected = {b"k1": (b"1", NO_TIMESTAMP), b"k2": (b"2", NO_TIMESTAMP)}
    if renamed:
        expected[b"k3"] = (b"3", NO_TIMESTAMP)
    assert rows_at(tmp_path / "ck", 3 if renamed else 2, tmp_path / "other") == expected
    if not renamed:  # the batch runs again; the next process's first load sweeps what the kill left
        p = StateStoreProvider(tmp_path / "ck", 0, 0, local_dir=tmp_path / "again")
        store = p.load(2)
        store.put(b"k3", b"3", NO_TIMESTAMP)
        store.commit()
        p.close()
        assert rows_at(tmp_path / "ck", 3, tmp_path / "last") == expected | {b"k3": (b"3", NO_TIMESTAMP)}
        assert sorted(os.listdir(directory)) == ["1.delta", "2.delta", "3.delta"]
