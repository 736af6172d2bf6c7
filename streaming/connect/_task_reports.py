"""Report files: how Python tasks on a Spark Connect server hand small values back to the driver.

Connect has no accumulators. A task writes each value as a small pickle file into a directory on
this machine, which the server's Python workers reach when they share this machine's disk (a local
server); the driver reads and merges the files. Used by the engine's per-batch statistics
(``streaming.dstream``'s ``ReportedStats``) and by :class:`FrameAccumulator`. The driver unpickles
what it finds there, so the directory is private: made by the driver with mode 0700
(``tempfile.mkdtemp``) and removed with its owner or at exit. A driver that was killed cannot
remove its own: its directory names its pid, and the next driver on this machine removes the
directories of the same prefix whose process has gone.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path
from typing import Any, Iterator

__all__ = ["ReportFolder", "write_report"]


def write_report(folder: str, record: Any) -> None:
    """Runs in a task: ``record`` as a file of its own in ``folder``, written whole under a
    temporary name and then renamed, so the driver never reads half a record."""
    os.makedirs(folder, exist_ok=True)
    name = os.path.join(folder, f"{os.getpid()}-{uuid.uuid4().hex}")
    with open(name + ".tmp", "wb") as file:
        pickle.dump(record, file, protocol=5)
    os.replace(name + ".tmp", name + ".report")


class ReportFolder:
    """The driver's side: a new private directory (0700) the tasks write into, and reading it back."""

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

    def records(self, sub: str, *, remove: bool) -> Iterator[Any]:
        """The records in ``directory/sub`` (in name order), each file removed once read when ``remove``."""
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
        """Removes ``directory/sub`` and what is in it."""
        shutil.rmtree(self._directory / sub, ignore_errors=True)


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
