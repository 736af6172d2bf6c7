"""One writer per checkpoint: claims in the process, the OS file lock across processes, lease files, temporary files."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from scheduler import (
    LOCAL_FILES,
    LOCK_FILE,
    Checkpoint,
    CheckpointError,
    CheckpointPath,
    ConcurrentCheckpointUpdateError,
    Milliseconds,
    checkpoint_claims,
    holder_is_gone,
    lease_file_lock,
)
from tests.anyio_support import raises_exactly
from tests.support import check_file_manager_contract, checkpoint_held_by_another_process, dead_pid, file_digests

ROOT = Path(__file__).resolve().parents[2]


def test_the_local_manager_keeps_the_contract_with_an_os_lock(tmp_path: Path) -> None:
    """The local manager's hold is an exclusive flock: a second hold is refused until the first is released."""
    assert check_file_manager_contract(CheckpointPath.local(tmp_path / "ck")) == "lock"
    assert sorted(os.listdir(tmp_path / "ck")) == [LOCK_FILE, "0", "r"]


def test_a_second_owner_in_this_process_is_refused_with_sparks_message(tmp_path: Path) -> None:
    """The same directory, however spelled, has one owner at a time; the owner itself may claim again; release frees it."""
    location = CheckpointPath.local(tmp_path / "ck")
    claim = checkpoint_claims.claim(location, "first")
    try:
        assert claim.held and claim.guarantee == "lock"
        assert checkpoint_claims.claim(CheckpointPath.local(f"{tmp_path}/./ck/"), "first") is claim
        with raises_exactly(ConcurrentCheckpointUpdateError,
                            f"Multiple streaming queries are concurrently using {tmp_path}/x/../ck: 'first' is active on it in "
                            "this process; stop that query first, or use another checkpoint location"):
            checkpoint_claims.claim(CheckpointPath.local(f"{tmp_path}/x/../ck"), "second")
    finally:
        claim.release()
    claim.release()  # idempotent
    again = checkpoint_claims.claim(location, "second")
    assert again.held
    again.release()
    assert checkpoint_claims.holder(location) is None


def test_a_file_is_not_a_checkpoint_directory(tmp_path: Path) -> None:
    """Claiming a file is refused with the rule and the fix, and nothing is held afterwards."""
    (tmp_path / "f").write_text("x")
    with raises_exactly(CheckpointError, f"checkpoint location {tmp_path}/f is a file, not a directory; pass a directory path"):
        checkpoint_claims.claim(CheckpointPath.local(tmp_path / "f"), "q")
    assert checkpoint_claims.holder(CheckpointPath.local(tmp_path / "f")) is None


def test_another_process_holding_the_checkpoint_refuses_open_and_keeps_its_files(tmp_path: Path) -> None:
    """A live writer in another process: open is refused with Spark's message, its in-flight temp file and every byte stay.

    Then the writer goes on (its entry is added) and, once it released the directory, an open
    succeeds and clears what a killed writer would have left.
    """
    ck = tmp_path / "ck"
    with checkpoint_held_by_another_process(ck) as (pid, in_flight, finish):
        before = file_digests(ck)
        assert f"offsets/{in_flight}" in before
        with raises_exactly(ConcurrentCheckpointUpdateError,
                            f"Multiple streaming queries are concurrently using {ck}: another process holds it (pid {pid}, "
                            f"on host {socket.gethostname()}; lock file {ck}/{LOCK_FILE}); stop that query first, or use "
                            "another checkpoint location"):
            Checkpoint(ck).open(Milliseconds(1000), 1)
        assert file_digests(ck) == before
        finish()
    state = Checkpoint(ck).open(Milliseconds(1000), 1)
    assert state.offset_ids == (0,) and not (ck / "offsets" / in_flight).exists()


def test_a_lease_file_is_created_once_and_taken_over_only_from_a_dead_process_of_this_host(tmp_path: Path) -> None:
    """Exclusive create; a live or foreign holder keeps it; a dead local holder's lease is replaced; release removes only ours."""
    lease = CheckpointPath(LOCAL_FILES, str(tmp_path / LOCK_FILE))
    mine = json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode()
    held = lease_file_lock(lease, mine)
    assert held is not None and held.guarantee == "lease"
    assert lease_file_lock(lease, b'{"other": 1}') is None
    assert lease.read_bytes() == mine
    held.release()
    assert not lease.exists()

    foreign = json.dumps({"host": "elsewhere.example", "pid": dead_pid()}).encode()
    assert lease.create_new(foreign)
    assert lease_file_lock(lease, mine) is None and lease.read_bytes() == foreign
    lease.delete()

    stale = json.dumps({"host": socket.gethostname(), "pid": dead_pid()}).encode()
    assert lease.create_new(stale)
    taken = lease_file_lock(lease, mine)
    assert taken is not None and lease.read_bytes() == mine
    assert sorted(os.listdir(tmp_path)) == [LOCK_FILE]  # the stale lease was moved aside and deleted
    lease.write_replacing(b'{"someone": "else"}')
    taken.release()
    assert lease.read_bytes() == b'{"someone": "else"}'  # not ours any more: left alone


@pytest.mark.parametrize(("record", "gone"), [
    (b"not json", False),
    (b'{"host": "h"}', False),
    (b'{"host": "%s", "pid": true}' % socket.gethostname().encode(), False),
    (b'{"host": "%s", "pid": %d}' % (socket.gethostname().encode(), os.getpid()), False),
    (b"[" * 100_000, False),
], ids=["not json", "no pid", "pid not a number", "this process", "nested too deep"])
def test_a_holder_record_that_cannot_be_checked_counts_as_alive(record: bytes, gone: bool) -> None:
    """Unreadable records, missing or odd pids and this very process are never taken for a dead holder."""
    assert holder_is_gone(record) is gone
