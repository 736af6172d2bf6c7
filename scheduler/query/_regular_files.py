"""Reading a checkpoint entry from the local disk: only a regular file, and never a wait on a FIFO or a device;
what is at a path, telling "nothing there" from "not allowed to look".

Hadoop's local file system refuses to open a directory; the standard library opens it, and a FIFO
blocks until a writer comes. Every read of the local file manager goes through here.
"""

from __future__ import annotations

import errno
import os
import stat

from .._errors import CorruptCheckpointError

__all__ = ["local_entry_kind", "local_kind", "not_a_regular_file", "read_regular_file"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link"))


def local_kind(path: str) -> str | None:
    """``"dir"`` (also a link to one), ``"file"`` (anything else, a dangling link too) or ``None`` if nothing is there.

    Raises:
        OSError: the system will not look (``PermissionError``: a directory on the way the user may not search),
            naming ``path``; ``os.path.exists`` would say False, and a missing entry is not what the caller should hear.
    """
    try:
        return "dir" if stat.S_ISDIR(os.stat(path).st_mode) else "file"
    except ValueError:  # a NUL in the name: nothing there, as os.path.exists says
        return None
    except OSError:  # missing, or a link whose target is missing, loops or is out of reach: what of the link itself?
        pass
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return "file"


def local_entry_kind(path: str) -> str:
    """What is at ``path``, for a message that it is not what was expected: ``"a file"``, ``"a directory"``, ``"a loop of
    symbolic links"``, ``"a symbolic link to nothing"``, ``"a FIFO"``, ... (``"nothing"`` if nothing is there)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links"
        return "a symbolic link to nothing" if os.path.islink(path) else "nothing"
    return "a file" if stat.S_ISREG(mode) else _kind(mode)


def not_a_regular_file(path: str, what: str) -> CorruptCheckpointError:
    """The refusal of a checkpoint file that is ``what`` (``"a directory"``, ``"a symbolic link to nothing"``, ...)."""
    return CorruptCheckpointError(
        f"cannot read {path}: it is {what}, not a regular file; it was replaced after it was written (aiodstream writes "
        "only regular files): restore it from a copy, or start over with a new checkpoint directory",
        path=path,
    )


def read_regular_file(path: str) -> bytes | None:
    """The bytes of the regular file at ``path`` (a symbolic link to one is followed), or ``None`` if nothing is there.

    Opened with ``O_NONBLOCK``, so a FIFO in an entry's place cannot block the reader, then checked with
    ``fstat``; a dangling or looping symbolic link is refused too (it is not "nothing there": a listing named it).

    Raises:
        CorruptCheckpointError: anything but a regular file is there, naming ``path``.
        OSError: the file cannot be opened or read otherwise (permissions, I/O errors).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if os.path.islink(path):
            raise not_a_regular_file(path, "a symbolic link to nothing") from None
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise not_a_regular_file(path, "a loop of symbolic links") from None
        if exc.errno == errno.ENXIO:  # a socket, or a device without a driver
            raise not_a_regular_file(path, _kind(os.lstat(path).st_mode)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # before fdopen, which refuses a directory with its own IsADirectoryError
            raise not_a_regular_file(path, _kind(mode))
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as file:
        return file.read()


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a special file")
