"""Damage the state reader and ``aiodstream state`` name instead of raising a traceback or hanging.

Each store is a stores' root without logs (``<root>/state/0/0``) made with ``StateStoreProvider``,
then damaged as a hand edit or a stray write would.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from scheduler import CheckpointPath, LocalFileManager
from streaming._cli import main
from streaming.state import NO_TIMESTAMP, StateStoreError, StateStoreProvider, keep_partition_count, read_state
from streaming.state._store_format import DELTA, SNAPSHOT, encode, read_delta
from tests.anyio_support import raises_exactly
from tests.support import unreadable_directory

pytestmark = pytest.mark.usefixtures("keep_logging_config")  # the command line configures the library's logger


def make_store(tmp_path: Path, versions: int = 3, **options: int) -> Path:
    """A stores' root whose operator 0 has one partition with versions 1..``versions`` (key ``k<v>`` each)."""
    root = tmp_path / "ck"
    keep_partition_count(root, 0, 1)
    local = tmp_path / "wc"
    local.mkdir(mode=0o700)
    provider = StateStoreProvider(root, 0, 0, local_dir=local, **options)
    try:
        for version in range(versions):
            store = provider.load(version)
            store.put(pickle.dumps(f"k{version}"), pickle.dumps(version), NO_TIMESTAMP)
            store.commit()
    finally:
        provider.close()
    return root


def partition(root: Path) -> Path:
    return root / "state" / "0" / "0"


def test_a_file_the_system_will_not_read_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``aiodstream state`` names a file the system refuses to read and exits 2, as ``aiodstream checkpoint``; no traceback."""
    root = make_store(tmp_path)
    delta = partition(root) / "3.delta"
    read = LocalFileManager.read_bytes

    def refuse(self: LocalFileManager, path: str) -> bytes | None:
        if path == str(delta):
            raise PermissionError(13, "Permission denied", path)
        return read(self, path)

    monkeypatch.setattr(LocalFileManager, "read_bytes", refuse)
    assert main(["state", str(root), "--operator", "0"]) == 2
    assert capsys.readouterr().err == f"aiodstream state: error: cannot read {delta}: Permission denied\n"


def test_a_checkpoint_the_user_may_not_read_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint the system refuses to read (mode 000) is one line naming it, exit 2, not "no state store in it"."""
    root = make_store(tmp_path)
    unreadable_directory(monkeypatch, root)
    assert main(["state", str(root)]) == 2
    assert capsys.readouterr().err == f"aiodstream state: error: cannot read {root}: Permission denied\n"


def test_a_state_directory_the_user_may_not_search_is_named_not_missing(tmp_path: Path) -> None:
    """A directory on the way that may not be searched raises PermissionError naming the path, not "no state store"."""
    root = make_store(tmp_path)
    with pytest.MonkeyPatch.context() as monkeypatch:
        unreadable_directory(monkeypatch, root / "state")
        with pytest.raises(PermissionError) as caught:
            read_state(root, 0)
    assert caught.value.filename == str(root / "state" / "0")


def test_a_delta_that_is_a_directory_is_damage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory in a delta's place is damage named on one line (exit 4), not an IsADirectoryError traceback."""
    root = make_store(tmp_path)
    delta = partition(root) / "3.delta"
    delta.unlink()
    delta.mkdir()
    assert main(["state", str(root), "--operator", "0"]) == 4
    assert capsys.readouterr().err.startswith(f"aiodstream state: error: cannot read {delta}: it is a directory, not a "
                                              "regular file;")


def test_a_schema_nested_deeper_than_the_recursion_limit_is_damage(tmp_path: Path) -> None:
    """A transformWithState schema of deeply nested JSON is a StateStoreError naming the file, not a RecursionError."""
    root = make_store(tmp_path)
    schema = root / "state" / "0" / "schema"
    schema.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(StateStoreError, match=f"^state store file {schema} is damaged: not a transformWithState schema "
                                              r"\(RecursionError\("):
        read_state(root)


@pytest.mark.parametrize("text", ["-1", "0", "\u0663", "1_0", "100000000000", " 3x", "100001"])
def test_a_partition_count_that_is_not_1_to_100000_ascii_digits_is_refused(tmp_path: Path, text: str) -> None:
    """The reader and a restart refuse a recorded count that is not 1..100,000 in ASCII digits, naming the file (no hang)."""
    root = make_store(tmp_path, versions=1)
    path = root / "state" / "0" / "partitions"
    path.write_text(text, encoding="utf-8")
    shown = text.strip() if text.isascii() else repr(text.encode())
    message = (f"state store file {path} does not hold a partition count: it must be a number from 1 to 100000 in ASCII "
               f"digits, got {shown!r}; restore it from a copy (it is the number of partitions the state was written with)")
    with raises_exactly(StateStoreError, message):
        read_state(root)
    with raises_exactly(StateStoreError, message):
        keep_partition_count(root, 0, 2)


def test_a_partition_count_in_range_is_kept(tmp_path: Path) -> None:
    """A recorded count of 1..100,000 wins over the one asked, as before."""
    root = make_store(tmp_path, versions=1)
    (root / "state" / "0" / "partitions").write_text("100000")
    assert keep_partition_count(root, 0, 2) == 100_000


@pytest.mark.parametrize(("changes", "what"), [
    (b"\x80\x05garbage", "its changes cannot be unpickled (UnpicklingError("),
    (pickle.dumps({"not": "a list"}), "its payload is not a list of (key, value, timeout) changes, got dict"),
    (pickle.dumps([(b"k", b"v")]), "its payload is not a list of (key, value, timeout) changes, got list"),
    (pickle.dumps([("k", b"v", 0)]), "its payload is not a list of (key, value, timeout) changes, got list"),
], ids=["not-a-pickle", "a-dict", "pairs", "str-key"])
def test_a_checksummed_delta_whose_payload_is_not_changes_is_damage(tmp_path: Path, changes: bytes, what: str) -> None:
    """A delta with a right checksum but a payload that is not a pickled list of changes is a StateStoreError naming it."""
    root = make_store(tmp_path)
    delta = partition(root) / "3.delta"
    parent = read_delta(CheckpointPath.local(str(delta)))[1]
    assert parent is not None
    delta.write_bytes(encode(DELTA, parent + changes))
    with pytest.raises(StateStoreError) as info:
        read_state(root)
    assert str(info.value).startswith(f"state store file {delta} is damaged: {what}")


def test_a_checksummed_snapshot_that_is_not_a_database_is_damage(tmp_path: Path) -> None:
    """A snapshot with a right checksum but not an SQLite file is a StateStoreError naming it, not sqlite3.DatabaseError."""
    root = make_store(tmp_path)
    snapshot = partition(root) / "3.snapshot"
    snapshot.write_bytes(encode(SNAPSHOT, b"not sqlite" * 100))
    with raises_exactly(StateStoreError, f"state store file {snapshot} is damaged: it is not an SQLite database (file is "
                                         "not a database); the empty state and every delta after it up to version 3 are "
                                         f"there: move {snapshot} aside and restart, and the state is rebuilt from them"):
        read_state(root)


class _RunsCode:
    """What a crafted delta could pickle: loading it calls a function (here one that leaves a mark)."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.mark,))


def test_a_checksummed_delta_that_names_a_function_is_damage_and_runs_nothing(tmp_path: Path) -> None:
    """A delta's changes are unpickled as plain data only (lane L4: ``aiodstream state --operator`` ran a crafted delta's
    code before its history was checked). A pickle that names a function is damage; the function never runs."""
    root = make_store(tmp_path)
    delta = partition(root) / "3.delta"
    parent = read_delta(CheckpointPath.local(str(delta)))[1]
    assert parent is not None
    mark = tmp_path / "ran"
    delta.write_bytes(encode(DELTA, parent + pickle.dumps([(b"k", _RunsCode(mark), 0)], protocol=5)))
    with pytest.raises(StateStoreError) as info:
        read_state(root)
    assert str(info.value).startswith(f"state store file {delta} is damaged: its changes cannot be unpickled "
                                      "(UnpicklingError('a state delta holds plain data only, not pathlib.Path")
    assert not mark.exists()


def test_a_reader_that_went_away_ends_it_with_sigpipes_status_not_an_unreadable_file(tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """stdout's reader gone (`| head`): status 141, as `aiodstream checkpoint`, not 2 with '[Errno 32] Broken pipe'."""
    root = make_store(tmp_path)

    def gone(*args: Any, **kwargs: Any) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("streaming._cli_state._print_rows", gone)
    monkeypatch.setattr("streaming._cli.os.dup2", lambda *args: None)  # leave pytest's stdout as it is
    assert main(["state", str(root), "--operator", "0"]) == 141
