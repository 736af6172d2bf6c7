"""The state store of the stateful operators: versioned per batch, one per operator partition, changelog files under the checkpoint.

The model is Spark's RocksDB state store with changelog checkpointing. Each partition of an
operator keeps a working copy (an SQLite database in a local directory of the executor, with
the timeouts indexed) and, under the checkpoint directory, what makes any version loadable
anywhere::

    <checkpoint root>/state/<operator>/<partition>/<version>.delta      the keys version v changed
    <checkpoint root>/state/<operator>/<partition>/<version>.snapshot   the whole state at v (an SQLite file)

Batch ``b`` loads version ``b`` and commits version ``b + 1``. Loading the version the working
copy holds costs nothing; a newer one replays the deltas between; an older one (a batch run
again after a crash) or an empty local directory (another executor) starts from the newest
snapshot at or before it and replays the deltas after. So a batch costs what its keys cost:
reads and writes are point operations on the working copy, the timeout pass reads the due
rows through the index, and a commit writes one file holding the keys the batch touched.

The durable files go through a :class:`~scheduler.CheckpointFileManager`: the local one for a
path or a ``file:`` URI (a disk or a shared POSIX mount), fsspec for any other URI (``hdfs://``,
``s3a://``, ...; :func:`~scheduler.task_checkpoint_path`), since the tasks that write them are
Python processes without a JVM. The working copy is always on the executor's local disk.

The working copy is private and proven before it is used (its values are unpickled by the
operator, so a working copy is as good as code). It lives in a directory only this user can
enter (mode 0700, owner and mode checked whenever it is taken): ``aiodstream-state`` under one of
Spark's local directories (``SPARK_LOCAL_DIRS``, which Spark sets for its Python workers to the
executor's block manager directories, the ones pyspark's own shuffle spills to, removed when
the executor stops) when running in a Spark task, else a directory made by
:func:`tempfile.mkdtemp` for this process (removed at exit). A directory that is not ours or is
open to others is not used. The working copy records the partition's checkpoint directory and
the SHA-256 of the last delta it applied; every load compares that digest with the checkpoint's
delta file of that version and rebuilds from the snapshot and deltas on any difference. Each
delta records the digest of the delta before it, so the deltas form a hash chain: equal digests
at a version mean the same history, not just the same version number, and a replay that meets a
delta written on top of another history (a batch re-run elsewhere) starts over from an older base.

What a writer killed mid-write leaves is swept (:meth:`StateStoreProvider.remove_leftovers`, at
each load and maintenance), never what a live writer still needs. A snapshot's whole-state copy
in the private directory is held under an ``flock`` by its writer, which the kernel drops with
the process: a copy that can be locked is dead and removed. In the checkpoint, the file managers'
hidden temporary files of deltas up to the loaded version go (only a losing or zombie attempt can
still be writing one), those of snapshots once their writer is known dead (its copy was found
dead on this executor) or a whole snapshot period later.

File format, both kinds: the magic ``AIODSTATE2`` (``AIODSTATE1`` for files of earlier releases,
still read) and a kind byte, the payload's length (8 bytes, big-endian), the payload, and its
SHA-256 (which is also the file's digest in the chain). A delta's payload is the digest of the
delta before it (32 bytes, zeros before the first; absent in ``AIODSTATE1``) followed by the
pickled list of changes ``(key, value, timeout)`` (``value`` None with ``timeout`` ``REMOVED``:
the key was deleted); a snapshot's is the SQLite database file. A torn or altered file fails its
checksum and is reported with its path.

Trust: the checkpoint's files are trusted as the program is (a checkpoint holds pickled
functions, blocks and state, and loading it runs code): protect the checkpoint like the program.
The digests are plain SHA-256, not keyed: they prove lineage, not authorship, since whoever can
write the checkpoint can already run code through it, and nobody else can write the working copy.

SQLite, from the standard library, for the working copy: its B-tree keeps a point read or write
in microseconds with a million keys, a partial index on the timeout serves the timeout pass,
``Connection.backup`` copies a consistent snapshot while the next batch writes, and it adds no
dependency. Measured (``bench/bench_state.py``, local[2]): a batch touching 1,000 keys took 589 ms
with 1,000,000 keys held and 694 ms with 10,000, while ``updateStateByKey``, which rebuilds its
state each batch, went from about 0.6 s to 5 s; a commit took 2.75 ms per partition. (LMDB and
RocksDB bindings were not measured.) The working copy needs no durability of its own
(``synchronous=OFF``): the delta files are the truth, and a working copy that is missing, stale
or newer than wanted is rebuilt from them. Proving the working copy before each batch (reading
the newest delta and its SHA-256) measured 0.20-0.26 ms per load against 0.02-0.04 ms without,
with 1,000,000 keys held and 1,000 touched (``bench/bench_state.py --only store_direct``, a
shared 2-core machine at load 14-18, where a whole batch of the store alone took 45-120 ms).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import hashlib
import os
import pickle
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import attrs

from scheduler import (
    CheckpointPath,
    StreamingError,
    library_logger,
    parse_batch_file_name,
    process_exists,
    task_checkpoint_path,
)

from ._protocol import NO_TIMESTAMP, StateRow

__all__ = ["StateStore", "StateStoreError", "StateStoreMetrics", "StateStoreProvider", "StateStoreStatistics",
           "keep_partition_count"]

_MAGIC = b"AIODSTATE2"
_MAGIC_V1 = b"AIODSTATE1"  # deltas without the digest of their parent (earlier releases)
_DELTA, _SNAPSHOT = b"D", b"S"
_HEADER = len(_MAGIC) + 1 + 8
_DIGEST = 32
_GENESIS = bytes(_DIGEST)  # the parent digest of version 1's delta: the empty state
_REMOVED = -2  # the timeout of a change that deletes its key
_PRIVATE_DIRECTORY = "aiodstream-state"
_COPY_MARK = ".snapshot-copy-"  # <working copy's stem>.snapshot-copy-<pid>-<thread id>: a snapshot being copied
_NEW_MARK = ".snapshot-new-"  # <working copy's stem>.snapshot-new-<pid>-<thread id>: a copy not yet locked and named
_KILLED_MARK = ".snapshot-killed.v"  # <working copy's stem>.snapshot-killed.v<version>: an emptied dead copy of it
_SQLITE_SIDECARS = ("-journal", "-wal", "-shm")
_log = library_logger("aiodstream.streaming", component="StateStore")


class StateStoreError(StreamingError):
    """A state store file is missing, damaged, or not one of ours, or a working directory is not private; the message names it."""


class _LineageBreakError(StateStoreError):
    """A delta was written on top of another history than the state it would be applied to."""


@attrs.frozen
class StateStoreStatistics:
    """How a provider's loads found their working copy (trio-style ``statistics()``).

    Attributes:
        loads: versions loaded.
        reused: loads that used the working copy on disk, proven current (its last delta's digest
            equals the checkpoint's delta at its version), replaying any newer deltas on top.
        rebuilt: loads that started the working copy over from the checkpoint's snapshot and
            deltas (missing, stale, newer than asked, of another checkpoint or history); a load of
            version 0 starts empty and counts as neither.
    """

    loads: int
    reused: int
    rebuilt: int


@attrs.frozen
class StateStoreMetrics:
    """One partition's numbers for one committed version (Spark's state store metrics).

    Attributes:
        num_rows_total: rows held after the commit.
        num_rows_updated: rows written by the batch.
        num_rows_removed: rows deleted by the batch.
        memory_used_bytes: the working copy's size (its pages, which the OS caches).
        commit_time_ms: writing the delta file and committing the working copy.
    """

    num_rows_total: int
    num_rows_updated: int
    num_rows_removed: int
    memory_used_bytes: int
    commit_time_ms: int


def _encode(kind: bytes, payload: bytes) -> bytes:
    return _MAGIC + kind + len(payload).to_bytes(8, "big") + payload + hashlib.sha256(payload).digest()


def _decode(path: CheckpointPath, kind: bytes, data: bytes | None = None) -> tuple[bytes, bytes, bool]:
    """The payload of a file of ours, its digest (the SHA-256 of the payload, checked), and whether it is ``AIODSTATE1``."""
    if data is None:
        data = path.read_bytes()
    if data is None:
        raise StateStoreError(f"state store file {path} is missing")
    magic = data[: len(_MAGIC)]
    if len(data) < _HEADER + _DIGEST or magic not in (_MAGIC, _MAGIC_V1) or data[len(_MAGIC):len(_MAGIC) + 1] != kind:
        raise StateStoreError(f"state store file {path} is not an aiodstream {'delta' if kind == _DELTA else 'snapshot'} "
                              f"file (or is truncated)")
    size = int.from_bytes(data[len(_MAGIC) + 1:_HEADER], "big")
    payload, digest = data[_HEADER:_HEADER + size], data[_HEADER + size:]
    if len(payload) != size or hashlib.sha256(payload).digest() != digest:
        raise StateStoreError(f"state store file {path} is damaged: its checksum does not match (a torn or altered write)")
    return payload, digest, magic == _MAGIC_V1


def _read_delta(path: CheckpointPath) -> tuple[bytes, bytes | None, list[tuple[bytes, bytes | None, int]]]:
    """A delta's digest, its parent's digest (None in an ``AIODSTATE1`` file), and its changes.

    The changes are unpickled: the checkpoint's files are trusted as the program is.
    """
    payload, digest, v1 = _decode(path, _DELTA)
    if v1:
        return digest, None, pickle.loads(payload)
    if len(payload) < _DIGEST:
        raise StateStoreError(f"state store file {path} is not an aiodstream delta file (or is truncated)")
    return digest, payload[:_DIGEST], pickle.loads(payload[_DIGEST:])


def _delta_digest(path: CheckpointPath) -> bytes | None:
    """The digest of the checkpoint's delta at ``path`` (checked, not unpickled), or None if there is none."""
    data = path.read_bytes()
    return None if data is None else _decode(path, _DELTA, data)[1]


def _private_problem(path: Path) -> str | None:
    """Why ``path`` is not a private directory of this user (None: it is one): not a symlink, ours, mode 0700 or less."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by this process's uid {os.geteuid()}"
    if info.st_mode & 0o077:
        return f"open to others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _make_private(path: Path) -> str | None:
    """Make ``path`` a directory only this user can enter (if it is missing); why it is not private, or None."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)  # whatever the umask
    return _private_problem(path)


_process_roots: dict[str | None, Path] = {}
_process_roots_lock = threading.Lock()


def _process_root(base: str | None) -> Path:
    """This process's own private directory under ``base`` (the temporary directory if None), removed at exit."""
    with _process_roots_lock:
        root = _process_roots.get(base)
        if root is None or _private_problem(root) is not None:
            root = _process_roots[base] = Path(tempfile.mkdtemp(prefix=f"{_PRIVATE_DIRECTORY}-", dir=base))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
        return root


def _in_spark_task() -> bool:
    from pyspark import TaskContext  # pyspark only where a store is made, not at import

    return TaskContext.get() is not None


def _default_root(identity: str) -> Path:
    """Where a provider's working copy goes when no ``local_dir`` is given (see the module's docstring).

    In a Spark task: ``aiodstream-state`` under the Spark local directory the identity hashes to
    (every worker process of the executor finds the same one, as Spark's ``DiskBlockManager``
    picks a file's directory); elsewhere, or when that directory is not private, this process's
    own directory.
    """
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d] if _in_spark_task() else []
    if not dirs:
        return _process_root(None)
    base = dirs[int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "big") % len(dirs)]
    shared = Path(base) / _PRIVATE_DIRECTORY
    problem = _make_private(shared)
    if problem is None:
        return shared
    _log.warning("the state store's directory under Spark's local directory is not private; not using it",
                 path=str(shared), problem=problem)
    return _process_root(base)


def _open_working_copy(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")  # the delta files are the durable record
    conn.execute("CREATE TABLE IF NOT EXISTS state (key BLOB PRIMARY KEY, value BLOB, timeout INTEGER NOT NULL) WITHOUT ROWID")
    conn.execute(f"CREATE INDEX IF NOT EXISTS due ON state (timeout, key) WHERE timeout != {NO_TIMESTAMP}")
    conn.execute("CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 0), version INTEGER NOT NULL, "
                 "rows INTEGER NOT NULL, store TEXT NOT NULL DEFAULT '', digest BLOB NOT NULL DEFAULT x'')")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(meta)")}
    for column, kind in (("store", "TEXT NOT NULL DEFAULT ''"), ("digest", "BLOB NOT NULL DEFAULT x''")):
        if column not in columns:  # a snapshot of an earlier release
            conn.execute(f"ALTER TABLE meta ADD COLUMN {column} {kind}")
    conn.execute("INSERT OR IGNORE INTO meta (id, version, rows) VALUES (0, 0, 0)")
    return conn


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed, not replaced)."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _remove_with_sidecars(path: Path) -> None:
    for suffix in _SQLITE_SIDECARS:  # first: a sidecar without its database is a leftover for the next sweep
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.unlink(missing_ok=True)


class _SnapshotCopy:
    """A new file beside a working copy for a snapshot's copy, held under an exclusive ``flock`` until it is removed.

    The lock is what tells a live copy from one whose writer was killed (the kernel drops it
    with the process): :func:`_remove_stale_copies` removes only copies it can lock. The name,
    ``<working copy's stem>.snapshot-copy-<pid>-<thread id>``, carries the writer for whoever
    looks at the directory; once the copy is made, :meth:`label` appends ``.v<version>``, the
    version inside it, so a sweep that finds it dead knows which snapshot's write it left
    unfinished. Used as a context manager: made on entry, removed on exit whatever happens.
    """

    def __init__(self, working_copy: Path) -> None:
        """Name the copy of ``working_copy`` this thread makes."""
        self.base = working_copy.with_name(f"{working_copy.stem}{_COPY_MARK}{os.getpid()}-{threading.get_ident()}")
        self.path = self.base
        self._fd = -1

    def __enter__(self) -> _SnapshotCopy:
        # This thread's own names: only a killed process that had our pid can have left them.
        new = self.base.with_name(self.base.name.replace(_COPY_MARK, _NEW_MARK))
        for name in os.listdir(self.base.parent):
            if name in (self.base.name, new.name) or name.startswith(f"{self.base.name}.v"):
                _remove_with_sidecars(self.base.parent / name)
        # Made under another name and locked before it is named a copy: a sweep never sees an
        # unlocked copy of a live writer (it opens and locks only ``.snapshot-copy-`` names).
        fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(new, self.base)
        except BaseException:
            new.unlink(missing_ok=True)
            os.close(fd)
            raise
        self._fd = fd
        return self

    def label(self, version: int) -> None:
        """Record in the name that the copy holds ``version`` (a rename: the lock stays with the file)."""
        labelled = self.base.with_name(f"{self.base.name}.v{version}")
        os.rename(self.path, labelled)
        self.path = labelled

    def __exit__(self, *exc_info: object) -> None:
        try:
            _remove_with_sidecars(self.path)  # under our lock: nobody else removes or makes this name now
        finally:
            os.close(self._fd)


def _writer_alive(pid: int, thread: int) -> bool:
    """Whether a process (and, in this process, a thread) of these ids may still be running."""
    if pid == os.getpid():
        return any(t.ident == thread for t in threading.enumerate())
    return process_exists(pid)  # another user's process with that id counts as alive: nothing is removed


def _remove_stale_copies(directory: Path, stem: str) -> tuple[int, set[int]]:
    """Remove the snapshot copies in a working-copy directory whose writers are gone.

    Returns how many files were removed, and the versions that dead copies of the working copy
    named ``stem`` held (snapshots of those versions were being written when their writer died).
    A dead copy of another partition that names its version is emptied (its space freed at once)
    and left as ``<stem>.snapshot-killed.v<version>``, a mark for that partition's own sweep,
    which alone knows its checkpoint directory.

    A snapshot copies the whole working copy next to it (:class:`_SnapshotCopy`) and removes the
    copy when the snapshot is written; a writer killed meanwhile (an executor's SIGKILL) leaves
    it behind, as large as the partition's state. A writer holds an exclusive ``flock`` on its
    copy until it has removed it, and the kernel releases that lock when the process dies, so a
    copy a sweep can lock has no writer: it is removed with SQLite's sidecar files
    (``-journal``, ``-wal``, ``-shm``); one it cannot lock is being written by a live process or
    thread and is left alone. A writer makes its file as ``<stem>.snapshot-new-<pid>-<thread id>``
    and renames it to the copy's name once locked, so no live copy is ever unlocked under that
    name; a ``.snapshot-new-`` file (empty: a writer killed in that instant) is removed when no
    process has its pid (or, in this process, no live thread its thread id). Sidecars whose copy
    is gone are removed too. Copies of this process's own live threads are not even opened
    (closing a descriptor would drop the POSIX locks SQLite holds on the file in this process).
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0, set()
    removed, versions = 0, set()
    live: set[str] | None = None
    for name in names:
        if ".snapshot-" not in name:  # every load sweeps: the usual directory holds only working copies
            continue
        path = directory / name
        if _KILLED_MARK in name:
            killed, _, label = name.partition(_KILLED_MARK)
            if killed == stem and label.isdigit():
                path.unlink(missing_ok=True)
                removed += 1
                versions.add(int(label))
            continue
        if _NEW_MARK in name:  # made, not yet locked: removed only when its writer is known gone
            pid, _, thread = name.partition(_NEW_MARK)[2].partition("-")
            if pid.isdigit() and thread.isdigit() and not _writer_alive(int(pid), int(thread)):
                path.unlink(missing_ok=True)
                removed += 1
            continue
        if _COPY_MARK not in name:
            continue
        sidecar = next((s for s in _SQLITE_SIDECARS if name.endswith(s)), None)
        if sidecar is not None:
            if not os.path.lexists(directory / name[: -len(sidecar)]):
                path.unlink(missing_ok=True)
                removed += 1
            continue
        owner, _, label = name.partition(_COPY_MARK)[2].partition(".v")
        if live is None:
            live = {f"{os.getpid()}-{thread.ident}" for thread in threading.enumerate()}
        if owner in live:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ELOOP):
                raise
            continue  # removed meanwhile by its writer or another sweep; a link is nothing we made
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its writer is alive
            if not _same_file(fd, path):  # under the lock: the name cannot be removed or made again by anyone else
                continue
            owner_stem = name.partition(_COPY_MARK)[0]
            if label.isdigit() and owner_stem != stem:  # another partition's: free it, leave that partition a mark
                os.truncate(path, 0)
                for suffix in _SQLITE_SIDECARS:
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
                os.rename(path, directory / f"{owner_stem}{_KILLED_MARK}{label}")
            else:
                _remove_with_sidecars(path)
                if label.isdigit():
                    versions.add(int(label))
            removed += 1
        finally:
            os.close(fd)
    return removed, versions


def _stale_temp(name: str) -> tuple[int, str] | None:
    """The version and kind (``delta``/``snapshot``) of a checkpoint file manager's temporary file of ours, or None."""
    parts = name.split(".")  # ".<version>.<kind>.<uuid>.tmp" (scheduler's temp_name; more parts before .tmp are fine)
    if len(parts) < 5 or parts[0] or parts[2] not in ("delta", "snapshot") or parts[-1] != "tmp":
        return None
    version = parse_batch_file_name(parts[1])
    return None if version is None else (version, parts[2])


def keep_partition_count(checkpoint_root: str | os.PathLike[str] | CheckpointPath, operator_id: int, wanted: int) -> int:
    """The operator's partition count: the one its checkpoint recorded, else ``wanted`` (recorded now).

    A key's partition is its hash modulo the count, so a restart with another count would look
    for each key's state in the wrong store; as Spark restores ``spark.sql.shuffle.partitions``
    from the checkpoint of a stateful query, the recorded count wins (and is logged if it differs).
    """
    path = task_checkpoint_path(checkpoint_root) / "state" / str(operator_id) / "partitions"
    data = path.read_bytes()
    if data is None:
        path.parent.mkdirs()
        path.write_replacing(str(wanted).encode())
        return wanted
    try:
        recorded = int(data.decode().strip())
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateStoreError(f"state store file {path} does not hold a partition count") from exc
    if recorded != wanted:
        _log.warning("the checkpoint's state was written with another number of partitions; keeping it",
                     operator=operator_id, recorded=recorded, asked=wanted, path=str(path))
    return recorded


_shared: dict[tuple[str, int, int], StateStoreProvider] = {}
_shared_lock = threading.Lock()


class StateStoreProvider:
    """The versions of one operator partition's state: loads a version for a batch, keeps the files tidy.

    Args:
        checkpoint_root: the directory whose ``state/`` holds the durable files: a path, or a URI
            reached through fsspec (see :func:`~scheduler.task_checkpoint_path`).
        operator_id: the stateful operator's number in its graph.
        partition_id: the partition.
        local_dir: the private directory the working copy goes in, made with mode 0700 if
            missing (default: ``aiodstream-state`` under Spark's local directory in a Spark task,
            else a private directory of this process; see the module's docstring).
        snapshot_every: write a snapshot every this many versions (:meth:`maintenance`).
        min_versions_to_retain: keep what loading any of the newest this many versions needs.

    Attributes:
        directory: the partition's durable files under the checkpoint.
        identity: what the working copy records as its owner (the checkpoint, operator, partition).
        working_copy: the SQLite file, in the private directory.

    Raises:
        StateStoreError: ``local_dir`` is not private (another user's, open to others, a link).
    """

    def __init__(self, checkpoint_root: str | os.PathLike[str] | CheckpointPath, operator_id: int, partition_id: int, *,
                 local_dir: str | os.PathLike[str] | None = None, snapshot_every: int = 10,
                 min_versions_to_retain: int = 100) -> None:
        """Name the partition's files and take its private directory; nothing is read until :meth:`load`."""
        if snapshot_every < 1 or min_versions_to_retain < 1:
            raise ValueError("snapshot_every and min_versions_to_retain must be at least 1")
        root = task_checkpoint_path(checkpoint_root)
        self.directory = root / "state" / str(operator_id) / str(partition_id)
        where = str(Path(root).resolve()) if root.is_local else root.path
        # what the working copy records and must match: this partition of this checkpoint
        self.identity = f"{where}/state/{operator_id}/{partition_id}"
        if local_dir is None:
            private = _default_root(self.identity)
        else:
            private = Path(local_dir)
            problem = _make_private(private)
            if problem is not None:
                raise StateStoreError(f"the state store's working copies go in a directory only this user can enter "
                                      f"(mode 700): {private} is {problem}; pass another local_dir")
        self.working_copy = private / f"{hashlib.sha256(self.identity.encode()).hexdigest()[:32]}.sqlite"
        self.snapshot_every = snapshot_every
        self.min_versions_to_retain = min_versions_to_retain
        self.last_metrics: StateStoreMetrics | None = None
        self._lock = threading.Lock()  # one load-to-commit at a time; maintenance waits for it
        self._conn: sqlite3.Connection | None = None
        self._loads = self._reused = self._rebuilt = 0

    @classmethod
    def shared(cls, checkpoint_root: str | os.PathLike[str] | CheckpointPath, operator_id: int,
               partition_id: int) -> StateStoreProvider:
        """This process's provider of that partition (made on first use): tasks of later batches that land in the
        same worker process reuse its open working copy instead of opening it again."""
        key = (str(checkpoint_root), operator_id, partition_id)
        with _shared_lock:
            provider = _shared.get(key)
            if provider is None:
                provider = _shared[key] = cls(checkpoint_root, operator_id, partition_id)
            return provider

    def statistics(self) -> StateStoreStatistics:
        """How this provider's loads found their working copy so far."""
        return StateStoreStatistics(self._loads, self._reused, self._rebuilt)

    # -- files --

    def _path(self, version: int, kind: bytes) -> CheckpointPath:
        return self.directory / f"{version}.{'delta' if kind == _DELTA else 'snapshot'}"

    def _versions(self, suffix: str) -> list[int]:
        names = self.directory.listdir()
        return sorted(v for name in names if name.endswith(suffix)
                      and (v := parse_batch_file_name(name.split(".")[0])) is not None)

    # -- loading --

    def load(self, version: int) -> StateStore:
        """The state as version ``version`` left it, open for the changes of version ``version + 1``.

        The working copy on disk is used only if it is proven to be this partition's at a
        version of the checkpoint's history (see the module's docstring); anything else is
        rebuilt from the checkpoint's files.

        Raises:
            StateStoreError: a file that version needs is missing or damaged, or the checkpoint's
                files do not form one history down to that version.
        """
        if version < 0:
            raise ValueError(f"a state version is >= 0, got {version}")
        self._lock.acquire()
        try:
            try:
                conn = self._connection()
                current, store, digest = conn.execute("SELECT version, store, digest FROM meta").fetchone()
                reason = self._unproven(current, store, digest, version)
            except sqlite3.DatabaseError as exc:
                reason = f"it is not a working copy ({exc})"
            loaded_from = "working copy"
            if reason is None:
                try:
                    self._replay(conn, current, version, prove=True)
                    self._reused += 1
                except _LineageBreakError as exc:
                    reason = str(exc)
            if reason is not None:
                conn = self._rebuild(version, reason)
                loaded_from = "checkpoint" if version else "empty"
            # Every load sweeps the private directory (local: cheap); the checkpoint's directory at
            # a new provider's first load (a new process, maybe after a kill), at a rebuild, or when
            # a dead copy of this partition shows a snapshot's write was cut short here.
            self._remove_leftovers_quietly(version, checkpoint=not self._loads or reason is not None)
            self._loads += 1
            parent = conn.execute("SELECT digest FROM meta").fetchone()[0]
            conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._lock.release()
            raise
        return StateStore(self, conn, version, bytes(parent) or _GENESIS, loaded_from)

    def _unproven(self, current: int, store: str, digest: bytes, version: int) -> str | None:
        """Why the working copy (at ``current``, of ``store``, last delta ``digest``) cannot serve ``version``; None if it can."""
        if current == 0:
            return "empty"  # nothing to prove against: starting over costs nothing
        if store != self.identity:
            return f"it belongs to {store or 'an unknown store'}"
        if current > version:
            return f"it is at version {current}, newer than {version}"
        if not self._has_deltas(current, version):
            return f"deltas {current + 1} to {version} are not all in the checkpoint"
        # Behind: the replay proves it (each delta names its parent's digest). At the version: the
        # checkpoint's delta of that version must be the one it applied.
        if current == version and _delta_digest(self._path(current, _DELTA)) != digest:
            return f"its version {current} is not the checkpoint's (the delta's digest differs or the delta is gone)"
        return None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = _open_working_copy(self.working_copy)
        return self._conn

    def _has_deltas(self, after: int, upto: int) -> bool:
        return all(self._path(v, _DELTA).exists() for v in range(after + 1, upto + 1))

    def _rebuild(self, version: int, reason: str) -> sqlite3.Connection:
        """Start the working copy over from the newest snapshot at or before ``version``, then replay deltas.

        A replay that meets a delta of another history (a snapshot taken from a working copy
        whose batch was then re-run elsewhere) starts over from the next older snapshot, down to
        the empty state.
        """
        if version:
            self._rebuilt += 1
            _log.info("state store working copy rebuilt from the checkpoint", directory=str(self.directory),
                      version=version, reason=reason)
        bases = [v for v in reversed(self._versions(".snapshot")) if v <= version] + [0]
        first_break: _LineageBreakError | None = None
        for base in bases:
            conn = self._start_from(base)
            try:
                self._replay(conn, base, version)
                if base == version and base:  # the snapshot alone: still the checkpoint's version, if its delta is there?
                    digest = conn.execute("SELECT digest FROM meta").fetchone()[0]
                    on_file = _delta_digest(self._path(base, _DELTA))
                    if on_file is not None and digest and on_file != digest:
                        raise _LineageBreakError(f"{self._path(base, _SNAPSHOT)} is not of the history of "
                                                 f"{self._path(base, _DELTA).name}")
                return conn
            except _LineageBreakError as exc:
                first_break = first_break or exc
            except StateStoreError:
                if first_break is None:
                    raise  # the newest base's own damage or gap: as before, named
            _log.warning("state store snapshot does not lead to the checkpoint's deltas; trying an older base",
                         directory=str(self.directory), snapshot=base, error=str(first_break))
        raise StateStoreError(f"cannot load state version {version} from {self.directory}: its files do not form one "
                              f"history ({first_break}) and no older snapshot leads to it")

    def _start_from(self, base: int) -> sqlite3.Connection:
        """A new working copy holding snapshot ``base`` (the empty state for 0), recorded as this partition's."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        # The snapshot's own record of its digest stays: the next delta's parent must match it.
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.working_copy}{suffix}").unlink(missing_ok=True)
        if base:
            fd = os.open(self.working_copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(_decode(self._path(base, _SNAPSHOT), _SNAPSHOT)[0])
        conn = self._connection()
        if base:
            conn.execute("UPDATE meta SET store = ?", (self.identity,))
        else:
            conn.execute("UPDATE meta SET version = 0, rows = 0, store = ?, digest = ?", (self.identity, _GENESIS))
        return conn

    def _replay(self, conn: sqlite3.Connection, current: int, version: int, *, prove: bool = False) -> None:
        """Apply the checkpoint's deltas after ``current`` up to ``version``, each on the history it names.

        ``prove``: the working copy is not yet known to be the checkpoint's at ``current``; a
        first delta of an earlier release (no parent digest) is then checked against the
        checkpoint's delta at ``current`` instead.
        """
        digest = bytes(conn.execute("SELECT digest FROM meta").fetchone()[0]) or _GENESIS
        for v in range(current + 1, version + 1):
            path = self._path(v, _DELTA)
            if not path.exists():
                raise StateStoreError(
                    f"cannot load state version {version} from {self.directory}: {path.name} is missing (deltas present: "
                    f"{self._versions('.delta') or 'none'}, snapshots: {self._versions('.snapshot') or 'none'})"
                )
            new_digest, parent, changes = _read_delta(path)
            if parent is None and prove and v == current + 1:
                parent = _delta_digest(self._path(current, _DELTA))
            if parent is not None and parent != digest:
                raise _LineageBreakError(f"{path} was written on top of another history than version {v - 1}'s")
            conn.execute("BEGIN")
            try:
                _apply(conn, changes)
                conn.execute("UPDATE meta SET version = ?, digest = ?", (v, new_digest))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            digest = new_digest

    def _finish(self) -> None:
        self._lock.release()

    # -- maintenance --

    def maintenance(self) -> None:
        """Write a snapshot of the working copy if its version is due one, and delete what no retained version needs.

        Safe beside loads and commits of this partition: in this provider it waits for the one
        in progress; against another process or provider on the same working copy it copies the
        database in one step (a consistent state) and names the snapshot by the version inside
        the copy. It first removes what killed writers left (:meth:`remove_leftovers`).
        """
        with self._lock:
            conn = self._connection()
            version = conn.execute("SELECT version FROM meta").fetchone()[0]
            self._remove_leftovers_quietly(version)
            if version and version % self.snapshot_every == 0 and not self._path(version, _SNAPSHOT).exists():
                with _SnapshotCopy(self.working_copy) as copying:
                    copy = copying.path
                    target = sqlite3.connect(copy)
                    try:
                        conn.backup(target)  # all pages in one step: one consistent state
                        copied, digest = target.execute("SELECT version, digest FROM meta").fetchone()
                    finally:
                        target.close()
                    copying.label(copied)
                    copy = copying.path
                    if copied % self.snapshot_every == 0 and not self._path(copied, _SNAPSHOT).exists():
                        if _delta_digest(self._path(copied, _DELTA)) == digest:
                            self._path(copied, _SNAPSHOT).write_replacing(_encode(_SNAPSHOT, copy.read_bytes()))
                        else:  # the batch was re-run elsewhere since: a snapshot of this copy would be of another history
                            _log.warning("state store snapshot skipped: the working copy is not the checkpoint's version",
                                         directory=str(self.directory), version=copied)
            self._purge(version)

    def remove_leftovers(self, version: int, *, checkpoint: bool = True) -> int:
        """Remove what writers killed mid-write left of this partition; return how many files were removed.

        ``version`` is one this partition has committed (the one being loaded or maintained).
        Called by every load and by :meth:`maintenance`; a load other than a provider's first or
        a rebuild passes ``checkpoint=False``: the checkpoint's directory is then listed only if
        a dead copy of this partition was found (a listing may be a round trip to a remote store).

        * In the working copies' private directory (every partition's, of this executor): the
          snapshot copies whose writer is gone (its ``flock`` released with its process; copies
          being written by a live process or thread are left alone), with SQLite's sidecars.
        * In the partition's checkpoint directory: the file managers' hidden temporary files
          (``.<version>.delta.<uuid>.tmp``, ``.<version>.snapshot.<uuid>.tmp``) that no live
          writer of this partition can still need. A delta of a version at most ``version`` is
          already committed (a load of ``version`` needs every delta up to it), so only a losing
          speculative or zombie attempt can still be writing one: removing its temporary file
          makes that late write fail instead of replacing the committed delta. A snapshot is
          written in the background after its commit, maybe by another executor still copying
          while later batches run, so its temporary file is removed at once only when a sweep
          found the dead copy of that version's snapshot in the private directory (the writer
          was killed on this executor; a sweep of another partition leaves a mark, see
          :func:`_remove_stale_copies`), else a whole snapshot period later (its version
          at most ``version - snapshot_every``); a snapshot still being written then fails and is
          skipped (logged), as the next due version writes one again. The checkpoint's
          temporary names carry no writer, so nothing is removed by age, and nothing of newer
          versions (the next batch, maybe running now) is touched.
        """
        removed, killed = _remove_stale_copies(self.working_copy.parent, self.working_copy.stem)
        for name in self.directory.listdir() if checkpoint or killed else ():
            temp = _stale_temp(name)
            if temp is None:
                continue
            v, kind = temp
            stale = v <= version if kind == "delta" else v <= version - self.snapshot_every or v in killed
            if stale and (self.directory / name).delete():
                removed += 1
        return removed

    def _remove_leftovers_quietly(self, version: int, *, checkpoint: bool = True) -> None:
        try:
            removed = self.remove_leftovers(version, checkpoint=checkpoint)
        except Exception as exc:  # housekeeping: the batch goes on, the next sweep retries
            _log.warning("state store could not remove files left by killed writers", directory=str(self.directory),
                         error=repr(exc))
        else:
            if removed:
                _log.info("state store removed files left by killed writers", directory=str(self.directory),
                          removed=removed)

    def maintain_after(self, version: int) -> threading.Thread | None:
        """After committing ``version``: if it is due a snapshot, run :meth:`maintenance` in a background thread.

        The batch does not wait for the copy (Spark's maintenance task); the thread is returned
        so a caller may join it. ``None`` when nothing is due.
        """
        if version % self.snapshot_every:
            return None
        thread = threading.Thread(target=self._maintain_quietly, name=f"aiodstream-state-maintenance-{self.directory.name}",
                                  daemon=True)
        thread.start()
        return thread

    def _maintain_quietly(self) -> None:
        try:
            self.maintenance()
        except Exception as exc:  # a snapshot is an optimisation: the deltas stay the truth
            _log.warning("state store maintenance failed; the next snapshot version retries", directory=str(self.directory),
                         error=repr(exc))

    def _purge(self, latest: int) -> None:
        oldest_kept = latest - self.min_versions_to_retain + 1
        base = max((v for v in self._versions(".snapshot") if v <= oldest_kept), default=0)
        if not base:
            return  # every retained version still replays from the empty state
        for v in self._versions(".delta"):
            if v <= base:
                self._path(v, _DELTA).delete()
        for v in self._versions(".snapshot"):
            if v < base:
                self._path(v, _SNAPSHOT).delete()

    def close(self) -> None:
        """Close the working copy (it stays on disk for the next load)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __repr__(self) -> str:
        return f"<StateStoreProvider {self.directory}>"


def _apply(conn: sqlite3.Connection, changes: list[tuple[bytes, bytes | None, int]]) -> None:
    rows = 0
    for key, value, timeout in changes:
        existed = conn.execute("SELECT 1 FROM state WHERE key = ?", (key,)).fetchone() is not None
        if timeout == _REMOVED:
            if existed:
                conn.execute("DELETE FROM state WHERE key = ?", (key,))
                rows -= 1
        else:
            conn.execute("INSERT INTO state VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
                         "timeout = excluded.timeout", (key, value, timeout))
            rows += 0 if existed else 1
    conn.execute("UPDATE meta SET rows = rows + ?", (rows,))


class StateStore:
    """One partition's state at a version, with this batch's changes on top; see :class:`~streaming.state.VersionedStore`."""

    def __init__(self, provider: StateStoreProvider, conn: sqlite3.Connection, version: int, parent: bytes,
                 loaded_from: str) -> None:
        """Made by :meth:`StateStoreProvider.load`, inside an open transaction; ``parent``: the loaded version's digest."""
        self._provider = provider
        self._conn = conn
        self._version = version
        self._parent = parent
        self._loaded_from = loaded_from
        self._changes: dict[bytes, tuple[bytes | None, int]] = {}
        self._open = True

    @property
    def version(self) -> int:
        """The version this store was loaded at."""
        return self._version

    @property
    def loaded_from(self) -> str:
        """``"working copy"`` (the one on disk, proven current), ``"checkpoint"`` (rebuilt from its files) or ``"empty"`` (version 0)."""
        return self._loaded_from

    def _check_open(self) -> None:
        if not self._open:
            raise StateStoreError(f"the state store of {self._provider.directory} at version {self._version} was "
                                  "already committed or aborted")

    def get(self, key: bytes) -> StateRow | None:
        """The row under ``key``, or None."""
        self._check_open()
        _check_bytes("key", key)
        row = self._conn.execute("SELECT value, timeout FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else (row[0], row[1])

    def put(self, key: bytes, value: bytes | None, timeout_ms: int) -> None:
        """Store a row."""
        self._check_open()
        _check_bytes("key", key)
        if value is not None:
            _check_bytes("value", value)
        if not isinstance(timeout_ms, int) or (timeout_ms < 0 and timeout_ms != NO_TIMESTAMP):
            raise ValueError(f"a timeout is epoch ms >= 0 or NO_TIMESTAMP, got {timeout_ms!r}")
        _apply(self._conn, [(key, value, timeout_ms)])
        self._changes[key] = (value, timeout_ms)

    def remove(self, key: bytes) -> None:
        """Delete the row under ``key``."""
        self._check_open()
        _check_bytes("key", key)
        _apply(self._conn, [(key, None, _REMOVED)])
        self._changes[key] = (None, _REMOVED)

    def due(self, threshold_ms: int) -> list[tuple[bytes, StateRow]]:
        """Rows with a timeout strictly before ``threshold_ms``, earliest first (through the timeout index)."""
        self._check_open()
        rows = self._conn.execute(
            f"SELECT key, value, timeout FROM state WHERE timeout != {NO_TIMESTAMP} AND timeout < ? ORDER BY timeout, key",
            (threshold_ms,)).fetchall()
        return [(key, (value, timeout)) for key, value, timeout in rows]

    def __iter__(self) -> Iterator[tuple[bytes, StateRow]]:
        """Every row, by key."""
        self._check_open()
        for key, value, timeout in self._conn.execute("SELECT key, value, timeout FROM state ORDER BY key").fetchall():
            yield key, (value, timeout)

    def __len__(self) -> int:
        """Rows held now."""
        self._check_open()
        return int(self._conn.execute("SELECT rows FROM meta").fetchone()[0])

    def commit(self) -> int:
        """Write version ``version + 1``: its delta file (durably), then the working copy; returns the new version."""
        self._check_open()
        started = time.perf_counter()
        new = self._version + 1
        provider = self._provider
        try:
            provider.directory.mkdirs()  # every time: a checkpoint may have been moved aside since the last commit
            changes = [(key, value, timeout) for key, (value, timeout) in self._changes.items()]
            payload = self._parent + pickle.dumps(changes, protocol=5)
            provider._path(new, _DELTA).write_replacing(_encode(_DELTA, payload))
            self._conn.execute("UPDATE meta SET version = ?, digest = ?", (new, hashlib.sha256(payload).digest()))
            rows = int(self._conn.execute("SELECT rows FROM meta").fetchone()[0])
            self._conn.execute("COMMIT")
        except BaseException:
            self._abort()
            raise
        pages = self._conn.execute("PRAGMA page_count").fetchone()[0] * self._conn.execute("PRAGMA page_size").fetchone()[0]
        removed = sum(1 for _, timeout in self._changes.values() if timeout == _REMOVED)
        provider.last_metrics = StateStoreMetrics(rows, len(self._changes) - removed, removed, int(pages),
                                                  round((time.perf_counter() - started) * 1000))
        self._open = False
        provider._finish()
        return new

    def abort(self) -> None:
        """Drop this batch's changes."""
        if self._open:
            self._abort()

    def _abort(self) -> None:
        try:
            self._conn.execute("ROLLBACK")
        finally:
            self._open = False
            self._provider._finish()

    def __repr__(self) -> str:
        return f"<StateStore {self._provider.directory} v{self._version} | {len(self._changes)} changed>"


def _check_bytes(what: str, value: object) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"state store {what}s are bytes, got {type(value).__name__}")

