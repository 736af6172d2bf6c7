"""The file manager the executors' tasks use for a checkpoint URI: fsspec, held to the checkpoint contract.

Run against a real FTP server on 127.0.0.1 (a remote file system whose rename replaces, and whose
client caches listings) and fsspec's in-memory file system.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Iterator

import fsspec
import pytest

from scheduler import (
    CheckpointPath,
    CorruptCheckpointError,
    FsspecFileManager,
    check_task_file_system,
    remove_temp_files,
    task_checkpoint_path,
)
from tests.support import check_file_manager_contract


@pytest.fixture(params=["ftp", "memory"])
def root(request: pytest.FixtureRequest) -> Iterator[CheckpointPath]:
    """An empty checkpoint directory's path on the file system under test (not created yet)."""
    if request.param == "ftp":
        yield task_checkpoint_path(request.getfixturevalue("ftp_server").uri("ck"))
        return
    base = f"/aiodstream-test-{uuid.uuid4().hex}"
    yield task_checkpoint_path(f"memory://{base}/ck")
    memory = fsspec.filesystem("memory")
    if memory.exists(base):
        memory.rm(base, recursive=True)


def test_the_manager_keeps_the_checkpoint_contract(root: CheckpointPath) -> None:
    """Create once (never replaced), read, list, replace, rename without replacing, delete; missing things are None."""
    assert isinstance(root.files, FsspecFileManager) and not root.is_local
    assert check_file_manager_contract(root) == "detect"  # no exclusive create in fsspec
    (root / "d").mkdirs()
    (root / "d" / "x").write_replacing(b"in d")
    assert (root / "d").rename_new(root / "e") and (root / "e" / "x").read_bytes() == b"in d" and not (root / "d").exists()
    assert root.uri() == root.path
    with pytest.raises(IsADirectoryError, match="is a directory; delete it with recursive=True"):
        (root / "e").delete()
    (root / ".5.abc.tmp").write_replacing(b"left by a killed writer")
    assert remove_temp_files(root) == 1 and sorted(root.listdir()) == ["0", "e", "r"]


def test_a_listing_shows_what_another_process_wrote(ftp_server: Any) -> None:
    """fsspec caches FTP listings; the manager drops them, so files written behind its back are seen at once."""
    root = task_checkpoint_path(ftp_server.uri("ck"))
    root.mkdirs()
    assert root.listdir() == [] and not (root / "0").exists()
    (ftp_server.root / "ck" / "0").write_bytes(b"from elsewhere")  # another writer, straight to the server's disk
    assert root.listdir() == ["0"] and (root / "0").is_file() and (root / "0").read_bytes() == b"from elsewhere"
    assert not (root / "0").create_new(b"mine")
    (ftp_server.root / "ck" / "0").unlink()
    assert root.listdir() == [] and (root / "0").create_new(b"mine")


def test_a_scheme_without_an_implementation_is_named() -> None:
    """Local forms pass; a scheme fsspec does not know is a ValueError naming the location and the scheme."""
    check_task_file_system("/tmp/ck")
    check_task_file_system("file:///tmp/ck")
    assert task_checkpoint_path("file:///tmp/ck").is_local and task_checkpoint_path("relative/ck").is_local
    with pytest.raises(ValueError, match=r"^the executors' tasks read and write viewfs://cluster/ck from Python through "
                                         r"fsspec, which cannot open viewfs:// here: Protocol not known: viewfs$"):
        check_task_file_system("viewfs://cluster/ck")
    check_task_file_system("hdfs://namenode:8020/ck")  # pyarrow's client: importable here, nothing connected


def test_a_scheme_whose_library_is_missing_names_what_to_install() -> None:
    """s3a:// is fsspec's, through s3fs, which the test environment leaves out: the refusal says to install it."""
    try:
        import s3fs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("s3fs is installed here")
    with pytest.raises(ValueError, match=r"cannot open s3a:// here: Install s3fs to access S3$"):
        task_checkpoint_path("s3a://bucket/ck")


def test_object_stores_get_their_entries_written_straight_to_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an object store (an upload appears whole) an entry is one write to its name: no temporary object, no rename.

    fsspec's memory file system stands in for the store, under the s3 protocol's name.
    """
    memory = fsspec.filesystem("memory")
    written: list[str] = []
    moved: list[str] = []
    pipe, mv = memory.pipe_file, memory.mv
    monkeypatch.setattr(memory, "pipe_file", lambda path, data, **kw: (written.append(path), pipe(path, data, **kw))[1])
    monkeypatch.setattr(memory, "mv", lambda source, *args, **kw: (moved.append(source), mv(source, *args, **kw))[1])
    base = f"/aiodstream-test-{uuid.uuid4().hex}"
    try:
        check_file_manager_contract(CheckpointPath(FsspecFileManager(memory, "s3"), f"memory://{base}/ck"))
        assert written == [f"{base}/ck/0", f"{base}/ck/r", f"{base}/ck/r"]  # create_new once, write_replacing twice
        assert moved == [f"{base}/ck/d"]  # only rename_new renames
    finally:
        if memory.exists(base):
            memory.rm(base, recursive=True)


def test_each_thread_has_its_own_connection(ftp_server: Any) -> None:
    """An FTP client is one connection: a manager used from two threads (a task and a state store's background snapshot)
    gives each its own, and both write and read at the same time without mixing their replies up."""
    root = task_checkpoint_path(ftp_server.uri("ck"))
    root.mkdirs()
    assert isinstance(root.files, FsspecFileManager)
    here = root.files.fs
    assert root.files.fs is here  # the same thread: the same client
    clients: list[Any] = []
    failures: list[BaseException] = []

    def write(prefix: str) -> None:
        try:
            clients.append(root.files.fs)  # type: ignore[attr-defined]
            for i in range(15):
                assert (root / f"{prefix}{i}").create_new(f"{prefix}{i}".encode())
                assert (root / f"{prefix}{i}").read_bytes() == f"{prefix}{i}".encode()
                assert f"{prefix}{i}" in root.listdir()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(prefix,)) for prefix in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len({id(client) for client in clients}) == 2 and here not in clients
    assert sorted(root.listdir()) == sorted(f"{p}{i}" for p in "ab" for i in range(15))


def test_a_directory_in_a_files_place_is_damage_as_on_the_local_manager() -> None:
    """An entry that is a directory is a CorruptCheckpointError naming it, not a missing entry (as the local manager)."""
    base = f"/aiodstream-test-{uuid.uuid4().hex}"
    root = task_checkpoint_path(f"memory://{base}/ck")
    try:
        (root / "offsets" / "2" / "x").write_replacing(b"a file under the entry's name")
        with pytest.raises(CorruptCheckpointError, match=r"^cannot read memory://.*/ck/offsets/2: it is a directory, not a "
                                                         "regular file;"):
            (root / "offsets" / "2").read_bytes()
        assert (root / "offsets" / "9").read_bytes() is None
    finally:
        fsspec.filesystem("memory").rm(base, recursive=True)
