"""Checkpoint files from plain Python, where no JVM is at hand: the file manager the executors' tasks use.

The driver reaches a checkpoint through Hadoop's FileSystem API in its JVM. A Python task on an
executor has no JVM gateway, yet the state store of ``mapGroupsWithState`` and a receiver's
write-ahead log are written and read by tasks. So tasks reach the same URI through fsspec, the
file-system layer of the Python data ecosystem (Dask, pandas, Ray): ``hdfs://`` through
pyarrow's libhdfs client, ``s3a://`` through s3fs, ``gs://`` through gcsfs, ``abfs://`` through
adlfs, ``ftp://`` through the standard library, each library installed where the tasks run.
A bare path or a ``file:`` URI stays on the local file manager (a shared POSIX mount).

What an entry's creation can rely on depends on the store, as for the driver's managers:

- object stores (``s3``, ``s3a``, ``gs``, ``abfs``, ...) publish an object whole when its
  upload completes, so entries are written straight to their name;
- every other file system gets a hidden temporary file renamed to the name, after a check that
  the name is free. The check and the rename are two steps: one writer per entry is assumed,
  as for Spark's rename-based ``CheckpointFileManager``.

fsspec caches directory listings (FTP, object stores); every read of a listing or of a path's
kind drops the cached entries first, so a task sees what other processes wrote.
"""

from __future__ import annotations

import os
import posixpath
import threading
from typing import TYPE_CHECKING, Any

from .._redaction import redact_uri
from ._files import LOCAL_FILES, CheckpointLock, CheckpointPath, detect_only, temp_name, uri_scheme
from ._regular_files import not_a_regular_file

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = ["FsspecFileManager", "check_task_file_system", "task_checkpoint_path"]

_PUBLISHED_WHOLE = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oss", "oci"})
"""Protocols whose objects appear whole when their upload completes (no rename needed, none offered)."""


class FsspecFileManager:
    """A :class:`~scheduler.CheckpointFileManager` over an fsspec file system; paths are full URIs.

    Args:
        fs: the file system (``fsspec.core.url_to_fs`` gives it for a URI).
        protocol: the URI scheme the paths carry (``hdfs``, ``s3a``, ``ftp``).
    """

    def __init__(self, fs: AbstractFileSystem, protocol: str) -> None:
        """A manager for ``protocol://`` paths on ``fs``."""
        self._fs = fs
        self._owner = threading.get_ident()  # the thread ``fs`` belongs to
        self._per_thread = threading.local()  # other threads' own instances
        self.protocol = protocol
        self.name = f"fsspec:{protocol}"
        self._direct = protocol in _PUBLISHED_WHOLE

    @property
    def fs(self) -> AbstractFileSystem:
        """The file system, this thread's instance of it.

        A synchronous fsspec file system is one connection (FTP, libhdfs) that threads must not
        share: a state store's snapshot is written by a background thread while the next task
        uses the store. Another thread gets an instance of its own, made with the same options
        on its first call; an asynchronous one (object stores) serves every thread.
        """
        fs = self._fs
        if getattr(fs, "async_impl", False) or threading.get_ident() == self._owner:
            return fs
        mine: AbstractFileSystem | None = getattr(self._per_thread, "fs", None)
        if mine is None:
            mine = self._per_thread.fs = type(fs)(*fs.storage_args, **fs.storage_options)
        return mine

    def _local_form(self, path: str) -> str:
        return str(self.fs._strip_protocol(path))

    def _fresh(self, *paths: str) -> None:
        for path in paths:
            self.fs.invalidate_cache(self._local_form(path))

    def list_names(self, directory: str) -> list[str] | None:
        """The names in ``directory``, or ``None`` if it does not exist."""
        self._fresh(directory)
        try:
            entries = self.fs.ls(self._local_form(directory), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if len(entries) <= 1 and self.kind(directory) != "dir":
            return None  # nothing there (object stores list it as empty), or a file (listed as itself)
        return [posixpath.basename(str(entry).rstrip("/")) for entry in entries]

    def kind(self, path: str) -> str | None:
        """``"file"``, ``"dir"`` or ``None``."""
        local = self._local_form(path)
        self._fresh(path, posixpath.dirname(local.rstrip("/")) or "/")
        try:
            info = self.fs.info(local)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return "dir" if info.get("type") == "directory" else "file"

    def mkdirs(self, directory: str, attempts: int = 4) -> None:
        """Create ``directory`` and its parents (a no-op on object stores, which have no directories).

        Tasks of one job may create the same directory at once. fsspec's FTP file system checks, then
        creates, and the later of two racing creates fails ("550 File exists", not an ``OSError``):
        a failed attempt reads the directory again and returns if another made it, else tries once
        more (each attempt finds at least one more level made)."""
        for attempt in range(attempts):
            if self.kind(directory) == "dir":
                return
            try:
                self.fs.makedirs(self._local_form(directory), exist_ok=True)
                return
            except Exception:
                self.fs.invalidate_cache()
                if attempt == attempts - 1 and self.kind(directory) != "dir":
                    raise

    def read_bytes(self, path: str) -> bytes | None:
        """The file's bytes, or ``None``; a directory in its place is a ``CorruptCheckpointError``, as on the local manager."""
        try:
            return bytes(self.fs.cat_file(self._local_form(path)))
        except FileNotFoundError:
            # Some implementations (the memory one) say "not found" for a directory: one more look, on a miss only.
            if self.kind(path) != "dir":
                return None
        except IsADirectoryError:
            pass
        raise not_a_regular_file(path, "a directory")

    def _write(self, path: str, data: bytes) -> None:
        """``data`` at ``path`` as readers will see it: whole (object stores) or through a renamed temporary file."""
        local = self._local_form(path)
        if self._direct:
            self.fs.pipe_file(local, data)
            return
        head, name = posixpath.split(local)
        temp = posixpath.join(head, temp_name(name))
        self.fs.pipe_file(temp, data)
        try:
            self.fs.mv(temp, local)
        except BaseException:
            self._remove_quietly(temp)
            raise

    def _remove_quietly(self, local: str) -> None:
        try:
            self.fs.rm_file(local)
        except Exception:  # best effort, on the way out of another error: that one is raised
            pass

    def create_new(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        """Create ``path`` unless something is there; readers see all of it or none (``durable`` is the store's)."""
        if self.kind(path) is not None:
            return False
        self._write(path, data)
        return True

    def write_replacing(self, path: str, data: bytes) -> None:
        """Write ``path`` whole, replacing a previous file (where a rename cannot replace, the old file goes first)."""
        if self._direct or self.kind(path) is None:
            self._write(path, data)
            return
        try:
            self._write(path, data)
        except OSError:
            if self.kind(path) != "file":
                raise
            # A rename that refuses to replace (HDFS): delete, then rename, as Spark's rename-based manager does.
            self.fs.rm_file(self._local_form(path))
            self._write(path, data)

    def rename_new(self, source: str, target: str) -> bool:
        """Rename ``source`` to ``target`` unless ``target`` exists."""
        if self.kind(target) is not None:
            return False
        self.fs.mv(self._local_form(source), self._local_form(target), recursive=True)
        return True

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete a file (or tree); return whether something was there."""
        what = self.kind(path)
        if what is None:
            return False
        if what == "file":
            self.fs.rm_file(self._local_form(path))
        elif recursive:
            self.fs.rm(self._local_form(path), recursive=True)
        else:
            raise IsADirectoryError(f"{redact_uri(path)} is a directory; delete it with recursive=True")
        return True

    def uri(self, path: str) -> str:
        """The path itself: paths here are URIs already."""
        return path

    def lock(self, directory: str, holder: bytes) -> CheckpointLock | None:
        """No hold across processes (``guarantee == "detect"``): fsspec offers no exclusive create.

        Entries are created after a check that the name is free, or written straight to their
        name on object stores, so a lease file would not keep a second writer out either; a
        second writer is found when an entry it writes already exists.
        """
        return detect_only()

    def __repr__(self) -> str:
        return f"<FsspecFileManager {self.protocol}>"


def check_task_file_system(location: str | os.PathLike[str]) -> None:
    """Check that tasks can reach ``location`` from Python: its scheme is local or has an fsspec implementation.

    Imports the implementation without connecting, so the driver can refuse a checkpoint its
    tasks could not write before a batch runs.

    Raises:
        ValueError: fsspec knows no implementation of the scheme, or its library is not installed.
    """
    text = os.fspath(location)
    scheme = uri_scheme(text)
    if scheme in ("", "file"):
        return
    import fsspec

    try:
        fsspec.get_filesystem_class(scheme)
    except (ImportError, ValueError) as exc:
        raise ValueError(redact_uri(
            f"the executors' tasks read and write {text} from Python through fsspec, which cannot open {scheme}:// "
            f"here: {exc}"
        )) from exc


def task_checkpoint_path(location: str | os.PathLike[str] | CheckpointPath) -> CheckpointPath:
    """``location`` as a task reaches it: a bare path or ``file:`` URI locally, any other URI through fsspec.

    A :class:`~scheduler.CheckpointPath` is returned as it is.

    Raises:
        ValueError: no fsspec implementation for the URI's scheme (see :func:`check_task_file_system`).
    """
    if isinstance(location, CheckpointPath):
        return location
    text = os.fspath(location)
    scheme = uri_scheme(text)
    if scheme in ("", "file"):
        return CheckpointPath(LOCAL_FILES, text)
    check_task_file_system(text)
    from fsspec.core import url_to_fs

    fs: Any
    fs, _ = url_to_fs(text)
    return CheckpointPath(FsspecFileManager(fs, scheme), text)
