"""A file stream's directory on a URI, from a Spark Connect client: listed here through fsspec, each file read whole
by a server's Python worker through fsspec and decoded as Hadoop's input formats decode it.

The classic engine lists and reads through Hadoop's FileSystem in the driver's JVM; a Connect client has none, and
the server's Hadoop readers are not used either, so that both sides reach the URI with one configuration (the URI's
credentials, fsspec's settings) and file systems whose Hadoop binding cannot seek (FTP) work too.
"""

from __future__ import annotations

import datetime as _dt
import glob
import posixpath
import re
from typing import Any, Iterable, Mapping, Protocol
from urllib.parse import urlparse

from scheduler import redact_uri, uri_scheme

__all__ = ["FileDecoder", "FixedLengthRecords", "TextLines", "check_fsspec_scheme", "list_fsspec_files",
           "read_fsspec_file"]

_LINE_END = re.compile(r"\r\n|\r|\n")


class FileDecoder(Protocol):
    """A file's records from its bytes (``path`` for messages); runs in the server's Python worker."""

    def __call__(self, data: bytes, path: str) -> Iterable[Any]: ...


class TextLines:
    """Hadoop's ``TextInputFormat`` lines as pyspark's ``textFile`` gives them: UTF-8 text split at ``\\n``, ``\\r\\n``
    or ``\\r``, without the line ends; a last line without its end is a line, nothing after a last line end is one."""

    def __call__(self, data: bytes, path: str) -> list[str]:
        text = data.decode("utf-8", "replace")
        if text.startswith("\ufeff"):  # a byte order mark is skipped, as Hadoop's LineRecordReader skips it
            text = text[1:]
        lines = _LINE_END.split(text)
        if lines[-1] == "":
            lines.pop()
        return lines


class FixedLengthRecords:
    """Hadoop's ``FixedLengthInputFormat`` records as pyspark's ``binaryRecords`` gives them: ``length`` bytes each."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __call__(self, data: bytes, path: str) -> list[bytes]:
        if len(data) % self.length:
            raise OSError(f"partial record found at the end of {redact_uri(path)}: its {len(data)} bytes are not whole "
                          f"records of {self.length} bytes")
        return [data[i:i + self.length] for i in range(0, len(data), self.length)]


def check_fsspec_scheme(directory: str) -> None:
    """Check that fsspec can open ``directory``'s scheme here (imports its implementation, no connection).

    Raises:
        ValueError: it cannot; the message names what to install.
    """
    import fsspec

    scheme = uri_scheme(directory)
    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError as exc:
        why = str(exc)
    except ValueError:
        why = f"fsspec knows no file system for {scheme}://, and no installed package registers one"
    else:
        return
    raise ValueError(f"a file stream on {redact_uri(directory)!r}: on Spark Connect this process lists the directory and "
                     f"the server's Python workers read its files through fsspec, which cannot open {scheme}:// here "
                     f"({why}); install the package that implements it in this Python and in the Connect server's, or "
                     "watch a directory this process and the server both see")


def _uri_of(directory: str, path: str) -> str:
    """A path as fsspec lists it (protocol stripped) named by a full URI like ``directory``'s (its authority kept)."""
    parsed = urlparse(directory)
    if path.startswith("/"):
        return f"{parsed.scheme}://{parsed.netloc}{path}"
    return f"{parsed.scheme}://{path}"  # object stores list "bucket/key"


def modified_ms(info: Mapping[str, Any]) -> int | None:
    """A listed file's modification time in ms, from whichever field its fsspec implementation gives (``None``: none)."""
    for key in ("mtime", "modify", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            stamp = value if value.tzinfo is not None else value.replace(tzinfo=_dt.timezone.utc)
            return int(stamp.timestamp() * 1000)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value * 1000)
        if isinstance(value, str):
            whole, _, fraction = value.partition(".")
            try:
                if whole.isdigit() and len(whole) == 14:  # an FTP MLSD fact: YYYYMMDDHHMMSS[.sss], UTC
                    moment = _dt.datetime.strptime(whole, "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
                    return int(moment.timestamp() * 1000) + int((fraction + "000")[:3] if fraction.isdigit() else 0)
                moment = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return modified_ms({"mtime": moment})
    return None


def list_fsspec_files(directory: str) -> list[tuple[str, int, int]] | None:
    """``(URI, modification time in ms, size)`` of the files directly in the directories matching ``directory`` (a
    glob), through fsspec; ``None`` if none matches. Files whose store gives no modification time are left out."""
    from fsspec.core import url_to_fs

    fs: Any
    fs, stripped = url_to_fs(directory)
    fs.invalidate_cache()  # FTP and object stores cache listings: see what other processes wrote since
    if glob.has_magic(stripped):
        dirs = [d for d in fs.glob(stripped) if fs.isdir(d)]
    else:
        dirs = [stripped] if fs.isdir(stripped) else []
    if not dirs:
        return None
    found = []
    for d in dirs:
        for info in fs.ls(d, detail=True):
            if info.get("type") != "file":
                continue
            stamp = modified_ms(info)
            if stamp is None:
                continue
            name = str(info["name"])
            found.append((_uri_of(directory, name if "/" in name else posixpath.join(str(d), name)), stamp,
                          int(info.get("size") or 0)))
    return found


def read_fsspec_file(uri: str) -> bytes:
    """The bytes of the file at ``uri``, through fsspec (in the server's Python worker)."""
    import fsspec

    with fsspec.open(uri, "rb") as file:
        data: bytes = file.read()
    return data
