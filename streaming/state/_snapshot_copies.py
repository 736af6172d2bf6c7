"""Snapshot copies beside a working copy, held under an ``flock`` while written, and the sweep of those whose writer died.

No Spark counterpart: a safety net for writers killed mid-snapshot (an executor's SIGKILL), whose copies no ``finally`` removes.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path

from scheduler import process_exists

__all__ = [
    "SnapshotCopy",
    "remove_stale_copies",
]

_COPY_MARK = ".snapshot-copy-"  # <working copy's stem>.snapshot-copy-<pid>-<thread id>: a snapshot being copied
_NEW_MARK = ".snapshot-new-"  # <working copy's stem>.snapshot-new-<pid>-<thread id>: a copy not yet locked and named
_KILLED_MARK = ".snapshot-killed.v"  # <working copy's stem>.snapshot-killed.v<version>: an emptied dead copy of it
_SQLITE_SIDECARS = ("-journal", "-wal", "-shm")


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


class SnapshotCopy:
    """A new file beside a working copy for a snapshot's copy, held under an exclusive ``flock`` until it is removed.

    The lock is what tells a live copy from one whose writer was killed (the kernel drops it
    with the process): :func:`remove_stale_copies` removes only copies it can lock. The name,
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

    def __enter__(self) -> SnapshotCopy:
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


def remove_stale_copies(directory: Path, stem: str) -> tuple[int, set[int]]:
    """Remove the snapshot copies in a working-copy directory whose writers are gone (what a writer killed mid-write left).

    Returns how many files were removed, and the versions that dead copies of the working copy
    named ``stem`` held (snapshots of those versions were being written when their writer died).
    A dead copy of another partition that names its version is emptied (its space freed at once)
    and left as ``<stem>.snapshot-killed.v<version>``, a mark for that partition's own sweep,
    which alone knows its checkpoint directory.

    A snapshot copies the whole working copy next to it (:class:`SnapshotCopy`) and removes the
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
