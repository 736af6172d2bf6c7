"""Checkpoints through Hadoop's FileSystem API: the file manager's contract, write-once entries, where a path lives."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from scheduler import (
    LOCAL_FILES,
    LOCK_FILE,
    Checkpoint,
    CheckpointError,
    CheckpointPath,
    CommitMetadata,
    Duration,
    InvalidPipelineError,
    OffsetSeq,
    OffsetSeqMetadata,
    lease_file_lock,
    remove_temp_files,
)
from streaming.dstream import DStreamGraph
from streaming.spark import HadoopFileManager, resolve_checkpoint_path
from tests.support import check_file_manager_contract, dead_pid

# Hadoop's local file system without checksums, for files and for FileContext: its rename is
# java.io's (it replaces an existing file), so write-once is the manager's doing.
RAW_LOCAL = {
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "fs.file.impl.disable.cache": "true",
    "fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}


def _never() -> Any:
    raise AssertionError("no Hadoop file manager expected here")


def test_a_path_lives_where_spark_resolves_it() -> None:
    """Bare paths and file: on the driver's disk, other schemes through Hadoop, a bare path on a non-file defaultFS too."""
    hadoop = HadoopFileManager(_never)
    local = resolve_checkpoint_path("ck", mode=None, default_fs="file:///", hadoop=_never)
    assert local.files is LOCAL_FILES and local.path == os.path.abspath("ck")
    assert resolve_checkpoint_path("file:///tmp/a%20b", mode="auto", default_fs=None, hadoop=_never).path == "/tmp/a b"
    on_hdfs = resolve_checkpoint_path("hdfs://nn:8020/ck", mode=None, default_fs=None, hadoop=lambda: hadoop)
    assert on_hdfs.files is hadoop and on_hdfs.path == "hdfs://nn:8020/ck"
    bare = resolve_checkpoint_path("ck", mode=None, default_fs="hdfs://nn:8020", hadoop=lambda: hadoop)
    assert bare.files is hadoop and bare.path == "ck"
    forced = resolve_checkpoint_path("/tmp/ck", mode="hadoop", default_fs=None, hadoop=lambda: hadoop)
    assert forced.files is hadoop and (forced / "offsets" / "3").path == "/tmp/ck/offsets/3"


def test_a_bad_file_manager_setting_is_refused() -> None:
    """An unknown mode, and 'local' for a path that is not on the driver's disk, are errors naming the setting."""
    with pytest.raises(CheckpointError, match=r"spark.aiodstream.checkpoint.fileManager must be auto, hadoop or local, got 'hdfs'"):
        resolve_checkpoint_path("ck", mode="hdfs", default_fs=None, hadoop=_never)
    with pytest.raises(CheckpointError, match=r"'s3a://b/ck' is not on the driver's disk .* is 'local'; set it to auto or hadoop"):
        resolve_checkpoint_path("s3a://b/ck", mode="local", default_fs=None, hadoop=_never)


def test_checkpoint_paths_join_and_split_uris_and_local_paths() -> None:
    """A URI keeps its scheme and authority through joins and parents; a root keeps its slash."""
    hdfs = CheckpointPath(LOCAL_FILES, "hdfs://nn:8020/ck/")
    assert (hdfs / "state" / "0").path == "hdfs://nn:8020/ck/state/0"
    assert (hdfs / "x").parent == hdfs and hdfs.name == "ck"
    assert CheckpointPath(LOCAL_FILES, "file:///a").parent.path == "file:///"
    assert CheckpointPath(LOCAL_FILES, "/a").parent.path == "/"
    assert os.fspath(CheckpointPath(LOCAL_FILES, "file:///tmp/x")) == "/tmp/x"


@pytest.mark.spark
def test_the_hadoop_manager_keeps_the_contract_on_file_uris(spark_context: Any, tmp_path: Path) -> None:
    """Create once (never replaced), read, list without checksum files, replace, rename without replacing, delete."""
    root = CheckpointPath(HadoopFileManager(spark_context), tmp_path.as_uri() + "/ck")
    assert check_file_manager_contract(root) == "lock"  # file: through Hadoop is the driver's disk: an OS file lock
    assert any(name.endswith(".crc") for name in os.listdir(tmp_path / "ck"))  # Hadoop wrote them; they are not listed
    assert root.uri() == f"file:{tmp_path}/ck"
    (tmp_path / "ck" / ".5.abc.tmp").write_bytes(b"left by a killed writer")
    assert remove_temp_files(root) == 1 and sorted(root.listdir()) == [LOCK_FILE, "0", "r"]


@pytest.mark.spark
def test_a_scheme_hadoop_cannot_open_is_a_checkpoint_error_naming_it(spark_context: Any) -> None:
    """A URI whose file system Hadoop has no implementation for is a CheckpointError naming it, not a Py4JJavaError."""
    manager = HadoopFileManager(spark_context)
    with pytest.raises(CheckpointError) as caught:
        manager.kind("foo://user:secret@bar/ck")
    assert str(caught.value) == (
        "cannot open checkpoint directory foo://user:***@bar/ck: Hadoop cannot open its foo:// file system "
        '(org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme "foo"); put the file system\'s '
        "connector on Spark's classpath (spark.jars.packages, e.g. org.apache.hadoop:hadoop-aws for s3a://) with its "
        "spark.hadoop.fs.* settings, or use a scheme Spark reaches")
    assert caught.value.path == "foo://user:***@bar/ck"


@pytest.mark.spark
def test_a_lease_file_through_hadoop_is_exclusive_and_taken_over_only_from_a_dead_holder(
        spark_context: Any, tmp_path: Path) -> None:
    """The lease a FileContext file system gets, through py4j: one holder, a dead local holder's lease replaced, released."""
    lease = CheckpointPath(HadoopFileManager(spark_context, conf=RAW_LOCAL), f"{tmp_path.as_uri()}/{LOCK_FILE}")
    mine = json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode()
    held = lease_file_lock(lease, mine)
    assert held is not None and held.guarantee == "lease"
    assert lease_file_lock(lease, b'{"other": 1}') is None and lease.read_bytes() == mine
    held.release()
    assert not lease.exists()
    assert lease.create_new(json.dumps({"host": socket.gethostname(), "pid": dead_pid()}).encode())
    taken = lease_file_lock(lease, mine)
    assert taken is not None and lease.read_bytes() == mine
    assert os.listdir(tmp_path) == [LOCK_FILE]  # the stale lease was moved aside, then deleted
    taken.release()
    assert os.listdir(tmp_path) == []


@pytest.mark.spark
def test_no_half_written_entry_is_ever_read_where_rename_replaces(spark_context: Any, tmp_path: Path) -> None:
    """On Hadoop's raw local file system a reader polling the log sees every entry whole, and a second writer replaces nothing."""
    files = HadoopFileManager(spark_context, conf=RAW_LOCAL)
    directory = CheckpointPath(files, tmp_path.as_uri() + "/offsets")
    directory.mkdirs()
    entries = 24
    payload = {i: (f"entry {i}\n".encode() + os.urandom(512 * 1024)) for i in range(entries)}
    digests = {i: hashlib.sha256(data).hexdigest() for i, data in payload.items()}
    seen: dict[int, int] = {}
    torn: list[tuple[int, int]] = []
    done = threading.Event()

    def read_while_written() -> None:
        # Plain reads of whatever the directory shows, as fast as they come: a file written in
        # place would be seen empty or partial at some point.
        while not done.is_set() or len(seen) < entries:
            for name in os.listdir(tmp_path / "offsets"):
                if not name.isdigit():
                    continue
                data = (tmp_path / "offsets" / name).read_bytes()
                if hashlib.sha256(data).hexdigest() != digests[int(name)]:
                    torn.append((int(name), len(data)))
                seen[int(name)] = seen.get(int(name), 0) + 1
            if done.is_set() and len(seen) == entries:
                return

    reader = threading.Thread(target=read_while_written)
    reader.start()
    try:
        for i in range(entries):
            assert (directory / str(i)).create_new(payload[i])
    finally:
        done.set()
        reader.join(60)
    assert not torn, f"{len(torn)} reads of half-written entries (entry, bytes), e.g. {torn[:5]}"
    assert sorted(seen) == list(range(entries)) and sum(seen.values()) > entries  # read while the writer went on
    assert files._path(str(directory))[1].fs.getClass().getName() == "org.apache.hadoop.fs.RawLocalFileSystem"
    assert not (directory / "3").create_new(b"a second writer's entry")
    assert (directory / "3").read_bytes() == payload[3]
    assert sorted(os.listdir(tmp_path / "offsets")) == sorted(str(i) for i in range(entries))  # no temporary file left


@pytest.mark.spark
def test_a_checkpoint_written_through_hadoop_reads_back_on_the_local_manager(spark_context: Any, tmp_path: Path) -> None:
    """The offsets, commits and metadata written through Hadoop on file: are Spark's layout: the local manager resumes them."""
    written = Checkpoint(CheckpointPath(HadoopFileManager(spark_context), tmp_path.as_uri()))
    state = written.open(Duration(1000), 1)
    assert state.created and state.grid is None
    meta = OffsetSeqMetadata(0, 2000, {"aiodstream.batchDurationMs": "1000", "aiodstream.zeroTimeMs": "0"})
    for batch in range(3):
        assert written.offsets.add(batch, OffsetSeq((f'{{"logOffset":{batch}}}',), OffsetSeqMetadata(
            0, 1000 * (batch + 1), dict(meta.conf))))
    for batch in range(2):
        assert written.commits.add(batch, CommitMetadata(0))
    again = Checkpoint(tmp_path).open(Duration(1000), 1)
    assert not again.created and again.query_id == state.query_id
    assert again.offset_ids == (0, 1, 2) and again.commit_ids == (0, 1)
    assert [b.batch_id for b in again.rerun] == [2] and again.rerun[0].end == ('{"logOffset":2}',)
    assert (tmp_path / "offsets" / "2").read_text() == (
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":3000,"conf":{"aiodstream.batchDurationMs":"1000",'
        '"aiodstream.zeroTimeMs":"0"}}\n{"logOffset":2}')


class _Remote:
    """A file manager that is not the local one, whose URIs have the given scheme; it counts its uri() calls."""

    name = "remote"

    def __init__(self, scheme: str) -> None:
        self.scheme = scheme
        self.uri_calls = 0

    def uri(self, path: str) -> str:
        self.uri_calls += 1  # through Hadoop, a py4j call
        return f"{self.scheme}://bucket{path}"


class _TaskWriter:
    """An output stream whose tasks write into the checkpoint (as mapGroupsWithState's do)."""

    parents: tuple[Any, ...] = ()
    tasks_write_checkpoint = "the state store of mapGroupsWithState"


def test_the_graph_names_the_checkpoint_for_the_tasks_once_and_refuses_a_scheme_they_cannot_open() -> None:
    """Before start the graph asks the manager for the checkpoint's URI once; paths under it map without another call
    (on the loop); a scheme fsspec cannot open is refused naming what needs it; a graph without such a stream asks nothing."""
    graph = DStreamGraph(Duration(1000))
    graph.add_output_stream(_TaskWriter())  # type: ignore[arg-type]
    gcs = _Remote("gs")
    graph.set_checkpoint_dir(CheckpointPath(gcs, "/ck"))  # type: ignore[arg-type]
    with pytest.raises(InvalidPipelineError, match=r"^the state store of mapGroupsWithState cannot be kept in gs://bucket/ck: "
                                                   r"the executors' tasks read and write gs://bucket/ck from Python through "
                                                   r"fsspec, which cannot open gs:// here: Please install gcsfs"):
        graph.prepare_task_checkpoint()
    memory = _Remote("memory")
    graph.set_checkpoint_dir(CheckpointPath(memory, "/ck"))  # type: ignore[arg-type]
    graph.prepare_task_checkpoint()
    assert graph.task_checkpoint_dir == "memory://bucket/ck" and memory.uri_calls == 1
    assert graph.checkpoint_dir is not None
    assert graph.task_path(graph.checkpoint_dir / "sources" / "0") == "memory://bucket/ck/sources/0"
    assert graph.task_path(graph.checkpoint_dir) == "memory://bucket/ck" and memory.uri_calls == 1
    assert graph.task_path(CheckpointPath.local("/tmp/x")) == "/tmp/x"
    quiet = DStreamGraph(Duration(1000))
    quiet.add_output_stream(type("Plain", (), {"parents": ()})())  # type: ignore[arg-type]
    untouched = _Remote("gs")
    quiet.set_checkpoint_dir(CheckpointPath(untouched, "/ck"))  # type: ignore[arg-type]
    quiet.prepare_task_checkpoint()
    assert quiet.task_checkpoint_dir is None and untouched.uri_calls == 0
