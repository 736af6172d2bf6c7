"""Checkpoint files on any file system: the file-manager contract, the local one, and paths over it.

Spark's counterpart is ``CheckpointFileManager``: every log, state snapshot and saved graph goes
through one, so a checkpoint lives wherever the file system can put it. The local manager here
needs nothing but the standard library; ``streaming.spark`` adds one over Hadoop's FileSystem
API (``hdfs://``, object stores, ``file:`` through Hadoop). All of it blocks on I/O: async
callers use worker threads.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import posixpath
import shutil
import socket
import sys
import uuid
from typing import Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from .._redaction import redact_uri
from ._regular_files import local_kind, read_regular_file

__all__ = [
    "LOCAL_FILES",
    "LOCK_FILE",
    "CheckpointFileManager",
    "CheckpointLock",
    "CheckpointPath",
    "LocalFileManager",
    "TEMP_SUFFIX",
    "as_checkpoint_path",
    "detect_only",
    "fsync_directory",
    "holder_is_gone",
    "process_exists",
    "lease_file_lock",
    "lock_local_directory",
    "remove_temp_files",
    "temp_name",
    "uri_scheme",
    "write_new_file",
    "write_replacing_file",
]

TEMP_SUFFIX = ".tmp"
"""Hidden temporary files end with this; readers never look at them, and an open removes them."""


def temp_name(name: str) -> str:
    """A hidden, unique temporary name for a file or directory that will become ``name``."""
    return f".{name}.{uuid.uuid4().hex}{TEMP_SUFFIX}"


LOCK_FILE = ".writer.lock"
"""The file in a checkpoint directory that its one writer holds (an OS file lock or a lease file).

Hidden and never moved, purged or removed: removing a lock file while a process waits on it
would let two processes hold two different files.
"""


class CheckpointLock(Protocol):
    """A file system's hold on a checkpoint directory for one writer process, kept for a run.

    Attributes:
        guarantee: what the hold is worth across processes: ``"lock"`` (an OS file lock, which
            the kernel releases when the process dies), ``"lease"`` (a lease file created
            exclusively, removed at release; one left by a killed driver is taken over when
            its process is provably gone) or ``"detect"`` (nothing: the file system has no
            atomic exclusive create, so a second writer is found at its first conflicting
            write).
    """

    guarantee: str

    def release(self) -> None:
        """Give the hold up (idempotent); the directory's contents stay as they are."""
        ...


class _DetectOnly:
    """No hold across processes: concurrent writers are detected when one's entry already exists."""

    guarantee = "detect"

    def release(self) -> None:
        """Nothing to give up."""

    def __repr__(self) -> str:
        return "<CheckpointLock detect>"


def detect_only() -> CheckpointLock:
    """The :class:`CheckpointLock` of a file system that offers no exclusive hold (``guarantee == "detect"``)."""
    return _DetectOnly()


@runtime_checkable
class CheckpointFileManager(Protocol):
    """What the engine needs of a file system to keep a checkpoint (Spark's ``CheckpointFileManager``).

    Paths are strings: plain paths or URIs, as the manager understands them. Every method
    blocks. The guarantee that matters is :meth:`create_new`: a reader sees a whole entry or
    none, and an entry is never replaced.

    Attributes:
        name: a short name for messages (``"local"``, ``"hadoop"``).
    """

    name: str

    def list_names(self, directory: str) -> list[str] | None:
        """The names in ``directory`` (files and directories), or ``None`` if it does not exist."""
        ...

    def kind(self, path: str) -> str | None:
        """``"file"``, ``"dir"`` or ``None`` (nothing there)."""
        ...

    def mkdirs(self, directory: str) -> None:
        """Create ``directory`` and its parents; nothing if it exists."""
        ...

    def read_bytes(self, path: str) -> bytes | None:
        """The whole file, or ``None`` if there is none."""
        ...

    def create_new(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        """Create ``path`` holding ``data``, atomically for readers, unless it exists; return whether it was created."""
        ...

    def write_replacing(self, path: str, data: bytes) -> None:
        """Write ``path`` atomically for readers, replacing any previous file (Spark's ``overwriteIfPossible``)."""
        ...

    def rename_new(self, source: str, target: str) -> bool:
        """Rename a file or directory to ``target`` unless ``target`` exists; return whether it was renamed."""
        ...

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete a file (or, with ``recursive``, a directory tree); return whether something was deleted."""
        ...

    def uri(self, path: str) -> str:
        """The URI Spark's readers and writers take for ``path`` (``sc.pickleFile``, ``saveAsPickleFile``)."""
        ...

    def lock(self, directory: str, holder: bytes) -> CheckpointLock | None:
        """Hold ``directory`` (which exists) for this process's one writer, as far as the file system can.

        ``holder`` describes the holder (a small JSON record); it is written to
        :data:`LOCK_FILE` once the hold is taken, never before. Returns ``None``, changing
        nothing, when another process holds the directory; a file system without an exclusive
        hold returns a lock whose ``guarantee`` is ``"detect"``.
        """
        ...


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (a rename or link in it) to disk; a no-op where directories cannot be opened."""
    if os.name == "nt":  # pragma: no cover - Windows cannot open a directory to fsync it
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_without_replacing(source: str, target: str) -> bool:
    try:
        os.link(source, target)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # No hard links on this filesystem (some network and FUSE mounts). Check, then rename:
        # still atomic for readers, but two writers racing here could both succeed.
        if os.path.lexists(target):
            return False
        os.rename(source, target)
    return True


def write_new_file(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> bool:
    """Create ``path`` holding ``data``, atomically, unless it already exists; return whether it was created.

    The bytes go to ``.<name>.<uuid>.tmp`` in the same directory, which is flushed to disk and
    then hard-linked to ``path`` (a link, unlike a rename, never replaces an existing file), and
    the directory is flushed so the new name survives a power cut. Readers therefore see either
    no file or the whole file. The temporary file is removed whatever happens, except when the
    process is killed, which leaves a hidden ``.tmp`` file that no reader looks at.

    Args:
        path: the file to create; its directory must exist.
        data: the complete contents.
        durable: flush file and directory to disk (``fsync``); without it the file survives a
            crash of this process but not of the machine.
    """
    target = os.fspath(path)
    directory, name = os.path.split(target)
    temp = os.path.join(directory, temp_name(name))
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                # The data must be on disk before the name is: otherwise a power cut could leave
                # the final name pointing at an empty file.
                os.fsync(fd)
        finally:
            os.close(fd)
        created = _link_without_replacing(temp, target)
    finally:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
    if created and durable:
        fsync_directory(directory or ".")
    return created


def write_replacing_file(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Write ``path`` (its directory exists) whole for readers, replacing any file: a temporary file renamed over it.

    ``durable`` flushes the file, then its directory; without, it survives any process's death, not the machine's crash."""
    target = os.fspath(path)
    directory, name = os.path.split(target)
    temp = os.path.join(directory, temp_name(name))
    try:
        with open(temp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(temp, target)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)
    if durable:
        fsync_directory(directory or ".")


def remove_temp_files(directory: str | os.PathLike[str] | CheckpointPath) -> int:
    """Delete temporary files and directories left by killed writers; return how many were removed."""
    where = directory if isinstance(directory, CheckpointPath) else CheckpointPath.local(directory)
    removed = 0
    for name in where.listdir():
        if name.startswith(".") and name.endswith(TEMP_SUFFIX) and (where / name).delete(recursive=True):
            removed += 1
    return removed


def uri_scheme(location: str) -> str:
    """The scheme of a URI (``hdfs``, ``file``), or ``""`` for a bare path."""
    return urlparse(location).scheme if "://" in location or location.startswith("file:") else ""


def _local(path: str) -> str:
    # file: URIs name local paths too (file:/a, file:///a, file://localhost/a).
    if path.startswith("file:"):
        return unquote(urlparse(path).path) or "/"
    return path


class LocalFileManager:
    """The driver's own file system, through the standard library (POSIX semantics).

    Entries are created by a hard link from a flushed temporary file (atomic, never replacing),
    renames of directories are atomic, and ``durable`` writes are flushed to disk with their
    directory. ``file:`` URIs are taken as local paths.
    """

    name = "local"

    def list_names(self, directory: str) -> list[str] | None:
        """The names in ``directory``, or ``None`` if it does not exist."""
        try:
            return os.listdir(_local(directory))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def kind(self, path: str) -> str | None:
        """``"file"``, ``"dir"`` or ``None``; a path the system will not look at raises (:func:`local_kind`)."""
        return local_kind(_local(path))

    def mkdirs(self, directory: str) -> None:
        """``mkdir -p``, the new directory flushed into its parent."""
        local = _local(directory)
        if not os.path.isdir(local):
            os.makedirs(local, exist_ok=True)
            fsync_directory(os.path.dirname(os.path.abspath(local)))

    def read_bytes(self, path: str) -> bytes | None:
        """The file's bytes, or ``None``; anything but a regular file is a ``CorruptCheckpointError`` (:func:`read_regular_file`)."""
        return read_regular_file(_local(path))

    def create_new(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        """See :func:`write_new_file`."""
        return write_new_file(_local(path), data, durable=durable)

    def write_replacing(self, path: str, data: bytes) -> None:
        """A flushed temporary file renamed over ``path`` (:func:`write_replacing_file`)."""
        write_replacing_file(_local(path), data)

    def rename_new(self, source: str, target: str) -> bool:
        """``rename``, refused when ``target`` exists (one writer per checkpoint: the check and the rename are two steps)."""
        src, dst = _local(source), _local(target)
        if os.path.lexists(dst):
            return False
        os.rename(src, dst)
        fsync_directory(os.path.dirname(os.path.abspath(dst)))
        return True

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete a file, or a tree with ``recursive``."""
        local = _local(path)
        try:
            if recursive and os.path.isdir(local) and not os.path.islink(local):
                shutil.rmtree(local)
            else:
                os.unlink(local)
        except FileNotFoundError:
            return False
        return True

    def uri(self, path: str) -> str:
        """A ``file://`` URI of the absolute path."""
        return pathlib.Path(os.path.abspath(_local(path))).as_uri()

    def lock(self, directory: str, holder: bytes) -> CheckpointLock | None:
        """An exclusive ``flock`` on ``<directory>/.writer.lock``, held until release or the process's end.

        The kernel releases it when the process dies, so a killed driver never leaves a stale
        hold. On NFS, Linux maps ``flock`` to the server's byte-range locks. Where ``fcntl``
        does not exist (Windows), a lease file stands in (see :func:`~scheduler.lease_file_lock`).
        """
        return lock_local_directory(_local(directory), holder)

    def __repr__(self) -> str:
        return "<LocalFileManager>"


class _FileLock:
    """An exclusive ``flock`` on an open lock file; closing the descriptor releases it."""

    guarantee = "lock"

    def __init__(self, fd: int, path: str) -> None:
        self._fd: int | None = fd
        self.path = path

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # releases the flock; the file stays (see LOCK_FILE)

    def __repr__(self) -> str:
        return f"<CheckpointLock lock {self.path!r}{'' if self._fd is not None else ' released'}>"


def lock_local_directory(directory: str, holder: bytes) -> CheckpointLock | None:
    """Take an exclusive OS file lock on ``<directory>/.writer.lock`` for this process; ``None`` if another holds it.

    A refused attempt changes nothing: the lock file is opened without truncation and the
    holder record is written only once the lock is held.
    """
    path = os.path.join(directory, LOCK_FILE)
    if sys.platform == "win32":  # pragma: no cover - no flock on Windows
        return lease_file_lock(CheckpointPath.local(path), holder)
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    try:
        os.pwrite(fd, holder, 0)
        if os.fstat(fd).st_size != len(holder):  # a truncation costs milliseconds on some file systems: only when needed
            os.ftruncate(fd, len(holder))
    except BaseException:
        os.close(fd)
        raise
    return _FileLock(fd, path)


class _LeaseLock:
    """A lease file this process created; released by deleting it if it is still this holder's."""

    guarantee = "lease"

    def __init__(self, path: CheckpointPath, holder: bytes) -> None:
        self.path = path
        self._holder: bytes | None = holder

    def release(self) -> None:
        holder, self._holder = self._holder, None
        if holder is not None and self.path.read_bytes() == holder:
            self.path.delete()

    def __repr__(self) -> str:
        return f"<CheckpointLock lease {str(self.path)!r}{'' if self._holder is not None else ' released'}>"


def process_exists(pid: int) -> bool:
    """Whether a process with this id may exist on this host: ``False`` only when the OS says there is none.

    Another user's process (``PermissionError``) and an id the OS cannot take (``OverflowError``)
    count as existing, so a caller that removes a dead writer's files never removes a live one's.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def holder_is_gone(record: bytes) -> bool:
    """Whether a holder record (``{"host": ..., "pid": ...}``) names a process of this host that no longer exists.

    Only a process on this host can be checked; anything else (another host, an unreadable
    record, a live process, this very process) counts as alive.
    """
    try:
        fields = json.loads(record.decode("utf-8"))
        host, pid = fields["host"], fields["pid"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
        return False
    if host != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid():
        return False
    return not process_exists(pid)


def lease_file_lock(path: CheckpointPath, holder: bytes) -> CheckpointLock | None:
    """Hold a directory by creating the lease file ``path`` exclusively, holding ``holder``; ``None`` if another holds it.

    Sound where the manager's :meth:`~CheckpointFileManager.create_new` is atomic and never
    replaces (HDFS's ``rename`` without overwrite, a local hard link). A lease left by a
    driver that was killed stays until a start on the same host finds its process gone and
    takes it over; one left by a driver of another host must be deleted by hand (the
    refusal names it). Two starts taking over one stale lease at the same instant are not
    told apart here; the logs' write-once entries still catch the loser at its first write.
    """
    if path.create_new(holder):
        return _LeaseLock(path, holder)
    current = path.read_bytes()
    if current is None or not holder_is_gone(current):
        return None
    # The holder is gone: move its lease aside (one mover wins), then create ours and read it back.
    stale = path.parent / temp_name(path.name)
    try:
        if not path.rename_new(stale):
            return None
    except Exception:  # the lease vanished under us (another start moved it first: FileNotFoundError, or Hadoop's)
        return None
    stale.delete()
    if path.create_new(holder) and path.read_bytes() == holder:
        return _LeaseLock(path, holder)
    return None


LOCAL_FILES = LocalFileManager()
"""The shared local file manager (it keeps no state)."""


class CheckpointPath:
    """A path on a :class:`CheckpointFileManager`: ``pathlib`` manners for the few operations a checkpoint needs.

    ``path / "offsets" / "3"`` joins with ``/`` (a URI keeps its scheme and authority); the I/O
    methods go to the manager and block. A local path is also an ``os.PathLike``.
    """

    __slots__ = ("files", "path")

    def __init__(self, files: CheckpointFileManager, path: str) -> None:
        """``path`` on ``files``."""
        self.files = files
        stripped = path.rstrip("/")
        # A root ("/", "file:///") keeps its slashes; anything else loses trailing ones.
        self.path = path if not stripped or stripped.endswith(":") else stripped

    @classmethod
    def local(cls, path: str | os.PathLike[str]) -> CheckpointPath:
        """A path on the driver's file system."""
        return cls(LOCAL_FILES, os.fspath(path))

    @property
    def is_local(self) -> bool:
        """Whether the path is on the driver's own disk (a :class:`LocalFileManager`)."""
        return isinstance(self.files, LocalFileManager)

    def __truediv__(self, name: str) -> CheckpointPath:
        return CheckpointPath(self.files, f"{self.path}{name}" if self.path.endswith("/") else f"{self.path}/{name}")

    def __str__(self) -> str:
        # What messages, logs and pages show: a URI's credentials redacted. I/O uses .path.
        return redact_uri(self.path)

    def __repr__(self) -> str:
        return f"<CheckpointPath {self.files.name} {redact_uri(self.path)!r}>"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CheckpointPath):
            return self.files is other.files and self.path == other.path
        return NotImplemented

    def __hash__(self) -> int:
        return hash((id(self.files), self.path))

    def __fspath__(self) -> str:
        if not self.is_local:
            raise TypeError(f"{self.path} is on the {self.files.name} file system, not a local path")
        return _local(self.path)

    @property
    def name(self) -> str:
        """The last component."""
        return posixpath.basename(self.path)

    @property
    def parent(self) -> CheckpointPath:
        """The directory holding this path."""
        head, slash, _ = self.path.rpartition("/")
        if not slash:
            head = "."
        elif not head or head.endswith(("/", ":")):  # "/a", "file:///a", "file:/a": the root keeps its slash
            head += "/"
        return CheckpointPath(self.files, head)

    def listdir(self) -> list[str]:
        """The names in this directory; empty if it does not exist."""
        return self.files.list_names(self.path) or []

    def exists(self) -> bool:
        """Whether anything is there."""
        return self.files.kind(self.path) is not None

    def is_dir(self) -> bool:
        """Whether a directory is there."""
        return self.files.kind(self.path) == "dir"

    def is_file(self) -> bool:
        """Whether a file is there."""
        return self.files.kind(self.path) == "file"

    def mkdirs(self) -> None:
        """Create this directory and its parents."""
        self.files.mkdirs(self.path)

    def read_bytes(self) -> bytes | None:
        """The file's bytes, or ``None`` if there is none."""
        return self.files.read_bytes(self.path)

    def create_new(self, data: bytes, *, durable: bool = True) -> bool:
        """Create this file, atomically and never replacing one; return whether it was created."""
        return self.files.create_new(self.path, data, durable=durable)

    def write_replacing(self, data: bytes) -> None:
        """Write this file atomically, replacing a previous one."""
        self.files.write_replacing(self.path, data)

    def rename_new(self, target: CheckpointPath) -> bool:
        """Rename to ``target`` (same manager) unless it exists."""
        if target.files is not self.files:
            raise ValueError(f"cannot rename {self} on {self.files.name} to {target} on {target.files.name}")
        return self.files.rename_new(self.path, target.path)

    def delete(self, *, recursive: bool = False) -> bool:
        """Delete this file (or tree); return whether something was there."""
        return self.files.delete(self.path, recursive=recursive)

    def uri(self) -> str:
        """The URI Spark takes for this path."""
        return self.files.uri(self.path)


def as_checkpoint_path(location: str | os.PathLike[str] | CheckpointPath) -> CheckpointPath:
    """``location`` as a :class:`CheckpointPath`: a plain path or ``file:`` URI goes to the local file manager."""
    return location if isinstance(location, CheckpointPath) else CheckpointPath.local(location)
