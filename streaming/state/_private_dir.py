"""The private directory of the state store's working copies: mode 0700, this user's, proven whenever it is taken.

Spark's executor-local state directories (under its block manager's ``SPARK_LOCAL_DIRS``), made private.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from scheduler import library_logger

__all__ = [
    "default_root",
    "make_private",
]

_PRIVATE_DIRECTORY = "aiodstream-state"
_log = library_logger("aiodstream.streaming", component="StateStore")


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


def make_private(path: Path) -> str | None:
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


def default_root(identity: str) -> Path:
    """Where a provider's working copy goes when no ``local_dir`` is given.

    The working copy is private and proven before it is used (its values are unpickled by the
    operator, so a working copy is as good as code). It lives in a directory only this user can
    enter (mode 0700, owner and mode checked whenever it is taken), under one of Spark's local
    directories (``SPARK_LOCAL_DIRS``, which Spark sets for its Python workers to the executor's
    block manager directories, the ones pyspark's own shuffle spills to, removed when the
    executor stops) when running in a Spark task, else a directory made by
    :func:`tempfile.mkdtemp` for this process (removed at exit). A directory that is not ours or
    is open to others is not used.

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
    problem = make_private(shared)
    if problem is None:
        return shared
    _log.warning("the state store's directory under Spark's local directory is not private; not using it",
                 path=str(shared), problem=problem)
    return _process_root(base)
