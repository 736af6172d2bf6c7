"""What a writer killed mid-snapshot or mid-commit leaves is removed, and nothing a live writer still needs.

A SIGKILL during the background snapshot leaves the whole-state copy in the private
working-copy directory and the file manager's hidden temporary file in the checkpoint. Most
tests leave the files exactly as such a kill does, two SIGKILL a child process at the snapshot's
rename (``tests.crash``'s kill point), and each checks what the next load or maintenance sweeps.
A live writer is simulated by holding the ``flock`` a writer holds on its copy.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from streaming.state import NO_TIMESTAMP, StateStoreProvider
from streaming.state._partition_files import PartitionFiles
from tests.crash import KILL_AT, child_env, faults_all, run_python


def commit_up_to(p: StateStoreProvider, last: int, first: int = 1) -> None:
    """Commit versions ``first``..``last``, one key each."""
    for version in range(first - 1, last):
        store = p.load(version)
        store.put(f"k{version}".encode(), b"v", NO_TIMESTAMP)
        store.commit()


def leave_copy(directory: Path, name: str) -> Path:
    """A snapshot copy as a killed writer leaves it: a whole SQLite file (and its journal), no lock held."""
    path = directory / name
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE state (key BLOB PRIMARY KEY, value BLOB)")
    conn.execute("INSERT INTO state VALUES (x'01', x'02')")
    conn.commit()
    conn.close()
    Path(f"{path}-journal").write_bytes(b"\0" * 512)
    return path


def test_snapshot_copies_of_killed_writers_are_removed_and_a_live_writers_copy_stays(tmp_path: Path) -> None:
    """Maintenance removes unlocked snapshot copies (any naming) with their sidecars and lone sidecars; a locked copy stays."""
    p = StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "local", snapshot_every=2)
    commit_up_to(p, 2)
    stem = p.working_copy.stem
    other = StateStoreProvider(tmp_path / "ck", 0, 2, local_dir=tmp_path / "local").working_copy.stem
    dead = [leave_copy(p.working_copy.parent, f"{stem}.snapshot-copy-4194304-140234"),
            leave_copy(p.working_copy.parent, f"{stem}.snapshot-copy-139872"),  # the name earlier releases used
            leave_copy(p.working_copy.parent, f"{other}.snapshot-copy-4194305-1")]  # another partition's
    lone = p.working_copy.parent / f"{stem}.snapshot-copy-4194306-7-wal"
    lone.write_bytes(b"wal")
    live = leave_copy(p.working_copy.parent, f"{stem}.snapshot-copy-{os.getpid()}-1")
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a writer holds until it has removed its copy
        p.maintenance()
        left = sorted(path.name for path in p.working_copy.parent.iterdir() if ".snapshot-copy-" in path.name)
        assert left == [live.name, f"{live.name}-journal"]
    finally:
        os.close(fd)
    assert (p.directory / "2.snapshot").exists()  # the snapshot itself was written, through a copy of its own
    assert not any(path.exists() for path in [*dead, lone, *(Path(f"{d}-journal") for d in dead)])
    p.maintenance()  # the writer is gone now
    assert [path.name for path in p.working_copy.parent.iterdir() if ".snapshot-copy-" in path.name] == []


def test_the_first_load_in_a_new_process_removes_a_copy_left_by_the_killed_one(tmp_path: Path) -> None:
    """A provider's first load (a new worker after a kill) sweeps the directory; the loaded state is the committed one."""
    commit_up_to(StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "local"), 3)
    fresh = StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "local")
    left = leave_copy(fresh.working_copy.parent, f"{fresh.working_copy.stem}.snapshot-copy-4194304-140234")
    store = fresh.load(3)
    try:
        assert store.loaded_from == "working copy"
        assert dict(store) == {f"k{v}".encode(): (b"v", NO_TIMESTAMP) for v in range(3)}
    finally:
        store.abort()
    assert not left.exists() and not Path(f"{left}-journal").exists()


def test_a_copy_named_after_a_live_thread_of_this_process_is_not_touched(tmp_path: Path) -> None:
    """A sweep leaves a copy named after a live thread of this process alone (unlocked or not); one of no live thread goes."""
    p = StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "local")
    mine = leave_copy(p.working_copy.parent, f"{p.working_copy.stem}.snapshot-copy-{os.getpid()}-{threading.get_ident()}")
    gone = leave_copy(p.working_copy.parent, f"{p.working_copy.stem}.snapshot-copy-{os.getpid()}-1")  # no thread is 1
    commit_up_to(p, 1)  # the first load sweeps
    assert mine.exists() and not gone.exists()


def test_a_snapshot_copy_is_locked_while_it_is_written_and_a_sweep_leaves_it(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """While maintenance writes the snapshot, its copy is under an exclusive flock, and a sweep then removes nothing of it."""
    p = StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "local", snapshot_every=2)
    commit_up_to(p, 2)
    seen: list[str] = []
    write = PartitionFiles.write_snapshot

    def during_snapshot(files: PartitionFiles, version: int, database: bytes) -> None:
        (copy,) = [c for c in p.working_copy.parent.iterdir() if ".snapshot-copy-" in c.name]
        fd = os.open(copy, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        assert p.remove_leftovers(2) == 0 and copy.exists()
        seen.append(copy.name)
        write(files, version, database)

    monkeypatch.setattr(PartitionFiles, "write_snapshot", during_snapshot)
    p.maintenance()
    assert seen == [f"{p.working_copy.stem}.snapshot-copy-{os.getpid()}-{threading.get_ident()}.v2"]
    assert [c for c in p.working_copy.parent.iterdir() if ".snapshot-copy-" in c.name] == []


def temp(name: str) -> str:
    """The hidden temporary name a checkpoint file manager writes ``name`` through."""
    return f".{name}.{uuid.uuid4().hex}.tmp"


def test_temporary_files_of_killed_writers_are_removed_once_no_live_writer_can_need_them(tmp_path: Path, ck: str) -> None:
    """Deltas' temporaries up to the loaded version go at the first load; snapshots' a whole snapshot period later."""
    first = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "a", snapshot_every=10)
    commit_up_to(first, 11)
    directory = first.directory
    killed_snapshot, late_delta, next_delta, next_snapshot = (temp("10.snapshot"), temp("11.delta"), temp("12.delta"),
                                                              temp("20.snapshot"))
    foreign = [".partitions.x.tmp", ".partitions.delta.x.tmp", ".11.delta.crc", ".notes.tmp"]
    for name in [killed_snapshot, late_delta, next_delta, next_snapshot, *foreign]:
        (directory / name).write_replacing(b"partial")
    second = StateStoreProvider(ck, 0, 1, local_dir=tmp_path / "b", snapshot_every=10)
    store = second.load(11)  # another executor, after the kill
    store.abort()
    names = set(directory.listdir())
    assert late_delta not in names  # committed already: only a zombie attempt could still be writing it
    assert {killed_snapshot, next_delta, next_snapshot, *foreign} <= names  # maybe still being written
    commit_up_to(second, 20, first=12)
    second.maintenance()  # version 20: a snapshot period after version 10's
    names = set(directory.listdir())
    assert killed_snapshot not in names and next_delta not in names  # version 12 is committed by now
    assert {next_snapshot, *foreign} <= names
    assert "20.snapshot" in names


CHILD = """
import sys
import threading
from tests.crash import install_kill_point
from tests.fault_daemon import classify
from scheduler import CheckpointPath
from tests.crash import faults_all
from streaming.state import NO_TIMESTAMP, StateStoreProvider
install_kill_point(classify)
p = StateStoreProvider(sys.argv[1], 0, 1, local_dir=sys.argv[2], snapshot_every=10)
for version in range(10):
    store = p.load(version)
    store.put(f"k{version}".encode(), b"v", NO_TIMESTAMP)
    store.commit()
p.maintenance()
"""


def kill_during_snapshot(tmp_path: Path) -> tuple[Path, Path]:
    """Run a child that commits 10 versions and is SIGKILLed with version 10's snapshot written, not renamed; the leftovers."""
    child = run_python(["-c", CHILD, str(tmp_path / "ck"), str(tmp_path / "local")], timeout=120,
                       env=child_env({KILL_AT: "state-snapshot-temp"}))
    assert child.returncode == -signal.SIGKILL, child.stderr
    copies = [path for path in (tmp_path / "local").iterdir() if ".snapshot-copy-" in path.name]
    temps = [path for path in (tmp_path / "ck" / "state" / "0" / "1").iterdir() if path.name.startswith(".")]
    assert len(copies) == 1
    assert len(temps) == 1 and temps[0].name.startswith(".10.snapshot.")
    return copies[0], temps[0]


def test_after_a_sigkill_during_a_snapshot_the_next_load_on_that_executor_sweeps_both_leftovers(tmp_path: Path) -> None:
    """The next load in the killed process's directory removes its dead copy and, so known dead, version 10's temporary file."""
    copy, temp = kill_during_snapshot(tmp_path)
    p = StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "local", snapshot_every=10)
    p.load(10).abort()
    assert not copy.exists() and not temp.exists()
    assert [path.name for path in (tmp_path / "local").iterdir() if ".snapshot-copy-" in path.name] == []
    assert p.statistics().reused == 1  # the working copy itself was fine


def test_after_a_sigkill_during_a_snapshot_another_executor_removes_the_temporary_file_a_period_later(tmp_path: Path) -> None:
    """An executor that cannot see the dead copy leaves version 10's temporary file until version 20's maintenance."""
    _, temp = kill_during_snapshot(tmp_path)
    p = StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "elsewhere", snapshot_every=10)
    commit_up_to(p, 20, first=11)
    assert temp.exists()  # maybe a snapshot still being written: it is not known dead
    p.maintenance()
    assert not temp.exists() and (p.directory / "20.snapshot").exists()
    assert [path.name for path in Path(p.directory).iterdir() if path.name.startswith(".")] == []


def test_a_running_provider_removes_another_workers_dead_copy_and_its_temporary_file_at_its_next_load(
        tmp_path: Path) -> None:
    """A worker whose working copy is current (no rebuild, not its first load) still sweeps a dead copy of its partition."""
    p = StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "local", snapshot_every=10)
    commit_up_to(p, 10)
    # what another worker of this executor, SIGKILLed writing version 10's snapshot, leaves
    copy = leave_copy(p.working_copy.parent, f"{p.working_copy.stem}.snapshot-copy-4194304-140234.v10")
    killed = p.directory / temp("10.snapshot")
    killed.write_replacing(b"partial")
    store = p.load(10)
    store.abort()
    assert store.loaded_from == "working copy"
    assert not copy.exists() and not killed.exists()


def test_a_dead_copy_swept_by_another_partition_is_emptied_and_marks_the_snapshot_for_its_own_partition(
        tmp_path: Path) -> None:
    """Partition 2's sweep frees partition 1's dead copy at once; partition 1's next load then removes version 10's temporary."""
    p1 = StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "local", snapshot_every=10)
    p2 = StateStoreProvider(tmp_path / "ck", 0, 2, local_dir=tmp_path / "local", snapshot_every=10)
    commit_up_to(p1, 10)
    commit_up_to(p2, 10)
    copy = leave_copy(p1.working_copy.parent, f"{p1.working_copy.stem}.snapshot-copy-4194304-140234.v10")
    killed = p1.directory / temp("10.snapshot")
    killed.write_replacing(b"partial")
    p2.load(10).abort()  # another worker, another partition: it gets there first
    assert not copy.exists() and not Path(f"{copy}-journal").exists()
    (mark,) = [path for path in p1.working_copy.parent.iterdir() if ".snapshot-" in path.name]
    assert mark.name == f"{p1.working_copy.stem}.snapshot-killed.v10" and mark.stat().st_size == 0
    assert killed.exists()  # partition 2 does not know partition 1's checkpoint directory
    store = p1.load(10)
    store.abort()
    assert store.loaded_from == "working copy"
    assert not killed.exists() and not mark.exists()


def snapshot_every_version(root: Path, partition: int, versions: int) -> None:
    """Commit and snapshot ``versions`` versions of one partition (a child process's body); raises if a snapshot is missing."""
    p = StateStoreProvider(root / "ck", 0, partition, local_dir=root / "local", snapshot_every=1,
                           min_versions_to_retain=versions + 1)
    for version in range(versions):
        store = p.load(version)
        store.put(f"k{version}".encode(), b"x" * 1000, NO_TIMESTAMP)
        store.commit()
        p.maintenance()  # raises if another process's sweep took this snapshot's copy
    missing = [v for v in range(1, versions + 1) if not (p.directory / f"{v}.snapshot").exists()]
    assert missing == [], f"partition {partition}: no snapshot of versions {missing}"


@pytest.mark.skipif(not faults_all(), reason="slow (four interpreters importing pyspark): set AIODSTREAM_FAULTS=all")
def test_processes_snapshotting_side_by_side_never_sweep_each_others_copies(tmp_path: Path) -> None:
    """Four processes sharing the private directory, each snapshotting every version and so sweeping: all snapshots made."""
    versions = 150
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=snapshot_every_version, args=(tmp_path, partition, versions))
                for partition in range(4)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=300)
    assert [child.exitcode for child in children] == [0, 0, 0, 0]
    assert [path.name for path in (tmp_path / "local").iterdir() if ".snapshot-" in path.name] == []


def test_a_copy_not_yet_locked_is_removed_only_once_its_process_is_gone(tmp_path: Path) -> None:
    """A ``.snapshot-new-`` file (made, not yet locked and named) of a dead process goes; a live process's stays."""
    p = StateStoreProvider(tmp_path / "ck", 0, 1, local_dir=tmp_path / "local")
    finished = subprocess.Popen([sys.executable, "-c", ""])
    finished.wait()
    stem = p.working_copy.stem
    dead = p.working_copy.parent / f"{stem}.snapshot-new-{finished.pid}-140234"
    live = [p.working_copy.parent / f"{stem}.snapshot-new-{os.getppid()}-140234",
            p.working_copy.parent / f"{stem}.snapshot-new-{os.getpid()}-{threading.get_ident()}"]
    for path in [dead, *live]:
        path.write_bytes(b"")
    commit_up_to(p, 1)
    assert not dead.exists() and all(path.exists() for path in live)
