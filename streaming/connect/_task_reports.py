"""Report files: how Python tasks on a Spark Connect server hand small values back to the driver.

Connect has no accumulators. A task writes each value as a small pickle file into a *report
place*, a directory the driver made, and the driver reads and merges the files after the jobs.
Used by the engine's per-batch statistics (``streaming.dstream``'s ``ReportedStats``) and by
:class:`FrameAccumulator`. Two kinds of place (:class:`ReportStore`):

- :class:`CheckpointReports`: under the checkpoint directory (``<ckpt>/task-reports/<run>``), which
  the server's executors reach by definition (the state stores live there), as a local path both
  see or as any URI (fsspec: the tasks write through it, the driver reads through it). This is
  what works against a server that does not share this machine's disk.
- :class:`ReportFolder`: a private directory (0700, ``tempfile.mkdtemp``) of this machine, for
  when there is no checkpoint; only a server on this machine's disk reaches it.

A task never creates the place itself, only entries in it: a task that does not find it runs
where the driver's files are not, and fails saying so (:class:`ReportPlaceMissingError`) instead
of writing reports nobody reads. The driver unpickles what it finds, so a place is as trusted as
the directory holding it (a checkpoint's graph is a pickle too). Left-behind places of a killed
driver name its host and pid, and the next driver on that host removes those whose process has gone.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import socket
import tempfile
import uuid
import weakref
from pathlib import Path
from typing import Any, Iterator, Protocol

from ._directories import make_directories

__all__ = [
    "REPORTS_DIRECTORY", "CheckpointReports", "ReportFolder", "ReportPlaceMissingError", "ReportStore", "check_report_place",
    "write_report",
]

REPORTS_DIRECTORY = "task-reports"
"""Under a checkpoint directory, where :class:`CheckpointReports` keep their places."""

_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oss", "oci"})
"""Schemes whose objects appear whole when written (no rename needed, and none offered)."""
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
_checked_places: set[str] = set()
"""URI places this worker process has seen exist (each is checked once per process)."""


class ReportPlaceMissingError(FileNotFoundError):
    """Raised in a task: the report place the driver made is not on the task's file system."""

    def __init__(self, place: str) -> None:
        super().__init__(
            f"the task report directory {_shown(place)} is not on this Python worker's file system: the driver made it, "
            "so the Spark server's workers do not see the driver's files at that path (a Spark Connect server on another "
            "machine or in another file-system namespace). Give the StreamingContext a checkpoint directory that both the "
            "driver and the server's executors reach (ssc.checkpoint(dir), or sc.setCheckpointDir(dir) for accumulators "
            "alone: a shared directory, or a URI such as hdfs://...); the reports then go there"
        )


def write_report(place: str, sub: str, record: Any, *, name: str | None = None) -> None:
    """Runs in a task: ``record`` as a file of its own in ``place/sub`` (``sub`` empty: ``place`` itself).

    ``place`` is a local path or a URI that fsspec opens, and must exist (see the module
    docstring). The file is written whole under a temporary name and then renamed, so the driver
    never reads half a record. ``name`` names the record: a later write of the same name (the
    same partition run again) replaces it; without one, each write is a new record.

    Raises:
        ReportPlaceMissingError: ``place`` is not there.
    """
    data = pickle.dumps(record, protocol=5)
    stem = name if name is not None else f"{os.getpid()}-{uuid.uuid4().hex}"
    scheme = _scheme(place)
    if scheme in ("", "file"):
        _write_local(_local(place), sub, stem, data)
    else:
        _write_uri(scheme, place, sub, stem, data)


def check_report_place(place: str) -> None:
    """Runs in a task: raises :class:`ReportPlaceMissingError` unless ``place`` is there, before a task does what it
    could not report (a state store's commit)."""
    scheme = _scheme(place)
    if scheme in ("", "file"):
        if not os.path.isdir(_local(place)):
            raise ReportPlaceMissingError(place)
        return
    _uri_root(place)


def _uri_root(place: str) -> tuple[Any, str]:
    """The fsspec file system of ``place`` and its path there, checked to exist (once per place in a worker process)."""
    from fsspec.core import url_to_fs

    fs: Any
    fs, root = url_to_fs(place)
    root = str(root).rstrip("/")
    if place not in _checked_places:
        fs.invalidate_cache(root)
        if not fs.isdir(root):
            raise ReportPlaceMissingError(place)
        _checked_places.add(place)
    return fs, root


def _scheme(place: str) -> str:
    match = _SCHEME.match(place)
    return match.group(1).lower() if match else ""


def _local(place: str) -> str:
    if place.startswith("file:"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(place).path) or "/"
    return place


def _shown(place: str) -> str:
    """``place`` for a message: a URI's credentials left out (``user:secret@`` -> ``***@``)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]+://)[^/@]*@", r"\1***@", place)


def _write_local(place: str, sub: str, stem: str, data: bytes) -> None:
    folder = os.path.join(place, sub) if sub else place
    if sub:
        try:
            os.mkdir(folder)  # never the place itself: only the driver makes that
        except FileExistsError:
            pass
        except FileNotFoundError:
            raise ReportPlaceMissingError(place) from None
    temp = os.path.join(folder, f".{stem}-{uuid.uuid4().hex}.tmp")
    try:
        with open(temp, "wb") as file:
            file.write(data)
    except FileNotFoundError:
        raise ReportPlaceMissingError(place) from None
    os.replace(temp, os.path.join(folder, stem + ".report"))


def _write_uri(scheme: str, place: str, sub: str, stem: str, data: bytes) -> None:
    fs, root = _uri_root(place)
    folder = f"{root}/{sub}" if sub else root
    final = f"{folder}/{stem}.report"
    if scheme in _OBJECT_STORES:
        fs.pipe_file(final, data)
        return
    if sub:
        make_directories(fs, folder)  # the batch's other tasks may be making it too
    temp = f"{folder}/.{stem}-{uuid.uuid4().hex}.tmp"
    fs.pipe_file(temp, data)
    try:
        fs.mv(temp, final)
    except OSError:  # a rename that does not replace (HDFS): the earlier record of the name goes first
        fs.rm_file(final)
        fs.mv(temp, final)


class ReportStore(Protocol):
    """The driver's side of a report place: where the tasks write, and reading it back."""

    @property
    def place(self) -> str:
        """The place as the tasks name it (a local path or a URI), for :func:`write_report`."""
        ...

    def records(self, sub: str, *, remove: bool) -> Iterator[Any]:
        """The records in ``place/sub`` (``sub`` empty: the place itself), in name order; each removed once read when ``remove``."""
        ...

    def remove(self, sub: str) -> None:
        """Removes ``place/sub`` and what is in it."""
        ...


class ReportFolder:
    """A private directory (0700) of this machine's temporary directory: a :class:`ReportStore` for a local server."""

    def __init__(self, prefix: str = "aiodstream-task-reports-") -> None:
        """A new, empty directory, removed when this object is collected or at exit; first the
        directories a killed driver left under the same prefix."""
        _remove_left_behind(prefix)
        # mode 0700, made by this process; the pid in the name tells a later driver whether it is still in use
        self._directory = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._directory, True)

    @property
    def directory(self) -> Path:
        """Where the tasks write (subfolders are the callers' choice)."""
        return self._directory

    @property
    def place(self) -> str:
        """See :class:`ReportStore`."""
        return os.fspath(self._directory)

    def records(self, sub: str, *, remove: bool) -> Iterator[Any]:
        """See :class:`ReportStore`."""
        folder = self._directory / sub
        try:
            names = sorted(name for name in os.listdir(folder) if name.endswith(".report"))
        except FileNotFoundError:
            return
        for name in names:
            with open(folder / name, "rb") as file:
                record = pickle.load(file)
            if remove:
                os.unlink(folder / name)
            yield record

    def remove(self, sub: str) -> None:
        """See :class:`ReportStore`."""
        shutil.rmtree(self._directory / sub, ignore_errors=True)

    def __repr__(self) -> str:
        return f"<ReportFolder {self.place}>"


class CheckpointReports:
    """A place of its own under a checkpoint directory, ``<root>/task-reports/<host>-<pid>-<id>``: a
    :class:`ReportStore` that a server sharing no disk with this machine reaches.

    ``root`` is the checkpoint as the tasks name it: a path both this process and the server's
    executors see, or a URI (this process reads it through fsspec, as the tasks write it). The
    place is removed when this object is collected or at exit; first the places a killed driver of
    this host left there.
    """

    def __init__(self, root: str) -> None:
        """A new, empty place under ``root``."""
        from scheduler import task_checkpoint_path

        if _scheme(root) in ("", "file"):
            root = os.path.abspath(_local(root))  # a relative path would name the server's working directory
        base = task_checkpoint_path(root) / REPORTS_DIRECTORY
        _remove_dead_places(base)
        name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._path = base / name
        self._path.mkdirs()
        self._place = f"{root.rstrip('/')}/{REPORTS_DIRECTORY}/{name}"
        self._cleanup = weakref.finalize(self, _delete_quietly, self._path)

    @property
    def place(self) -> str:
        """See :class:`ReportStore`."""
        return self._place

    def records(self, sub: str, *, remove: bool) -> Iterator[Any]:
        """See :class:`ReportStore`."""
        folder = self._path / sub if sub else self._path
        for name in sorted(name for name in folder.listdir() if name.endswith(".report")):
            data = (folder / name).read_bytes()
            if data is None:
                continue
            record = pickle.loads(data)
            if remove:
                (folder / name).delete()
            yield record

    def remove(self, sub: str) -> None:
        """See :class:`ReportStore`."""
        (self._path / sub).delete(recursive=True)

    def __repr__(self) -> str:
        return f"<CheckpointReports {_shown(self._place)}>"


def _delete_quietly(path: Any) -> None:
    try:
        path.delete(recursive=True)
    except Exception:  # at collection or exit: a checkpoint no longer reachable keeps a small leftover, nothing worse
        pass


def _remove_dead_places(base: Any) -> None:
    """Removes the places under ``base`` that a driver of this host left and whose process has exited."""
    host = socket.gethostname()
    for name in base.listdir():
        owner, _, rest = name.rpartition("-")  # <host>-<pid>-<id>, and a host name may hold dashes
        owner_host, _, pid_text = owner.rpartition("-")
        if owner_host != host or not pid_text.isdigit() or int(pid_text) == os.getpid() or not rest:
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            _delete_quietly(base / name)  # its driver has gone: nobody reads these reports any more
        except OSError:
            continue  # alive under another user: left alone


def _remove_left_behind(prefix: str) -> None:
    """Removes this user's ``<prefix><pid>-*`` directories in the temporary directory whose process has exited."""
    root = Path(tempfile.gettempdir())
    try:
        candidates = [entry for entry in root.iterdir() if entry.name.startswith(prefix)]
    except OSError:
        return
    for entry in candidates:
        pid_text = entry.name[len(prefix):].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            if entry.lstat().st_uid != os.getuid() or not entry.is_dir() or entry.is_symlink():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)  # its driver has gone: nobody reads these reports any more
        except OSError:
            continue  # alive under another user (PermissionError), or unreadable: left alone
