"""Directories that the tasks of one job create at once, through fsspec.

fsspec's FTP file system asks whether a directory exists, then creates it: two tasks that both found it
missing race, and the later one's create fails ("550 File exists", an ``ftplib.error_perm``, not an
``OSError``). The save's text files, the tasks' reports and the saved partitions all meet this on FTP.
"""

from __future__ import annotations

from typing import Any

__all__ = ["make_directories"]


def make_directories(fs: Any, path: str, attempts: int = 4) -> None:
    """Creates ``path`` and its parents where missing, while other tasks may be creating them too.

    A failed attempt reads the directory again (fsspec caches listings) and returns if another task made
    it, else tries once more: each attempt finds at least one more level made, so a path of at most
    ``attempts`` missing levels is made; a real failure is raised on the last attempt.
    """
    for attempt in range(attempts):
        try:
            fs.makedirs(path, exist_ok=True)
            return
        except Exception:  # ftplib's errors are not OSErrors
            fs.invalidate_cache()
            if fs.isdir(path):
                return
            if attempt == attempts - 1:
                raise
