"""Replayable sources for pipelines: a list of records and a directory of files.

The counterparts of Structured Streaming's memory and file sources: each batch covers an offset
range, and a restart reads exactly the same range again. Offsets are the sources' own one-line
JSON text, as they appear in the checkpoint's offsets log.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

import anyio.to_thread

from scheduler import CheckpointError, Offset, ReplayError, library_logger

__all__ = ["DirectorySource", "ListSource", "ReplayableSource", "read_lines"]


@runtime_checkable
class ReplayableSource(Protocol):
    """A pipeline source whose input can be read again by offset range.

    The engine asks :meth:`latest_offset` where the input ends, :meth:`plan_offset` where the
    next batch ends (read limits apply there), logs that, and then calls :meth:`read` for the
    range ``(start, end]``. :meth:`read` must return the same records for the same range at any
    later time, also in a new process: that is what makes a re-run batch see the same data.
    Offsets must be canonical (equal positions give equal text).

    A checkpointed pipeline records each source's identity at its first start (its class name,
    and the mapping of JSON values in an optional ``checkpoint_identity`` attribute, such as
    :class:`DirectorySource`'s directory) and refuses a restart whose source differs: another
    source's offsets would be read as its own.

    Two more optional methods: ``async def attach_checkpoint(metadata_path)``, called at every
    start of a checkpointed pipeline before any offset is asked for, gives the source its own
    directory ``<checkpoint>/sources/<n>`` (a ``CheckpointPath``; Spark's ``metadataPath``),
    for what it must keep across restarts (a Kafka source's starting offsets); ``async def
    aclose()`` is called when the runtime stops, to release clients.
    """

    @property
    def description(self) -> str:
        """A stable, readable name (shown in progress reports)."""
        ...

    async def latest_offset(self) -> Offset:
        """Where the input ends now, or ``None`` if there is none yet."""
        ...

    async def plan_offset(self, start: Offset, limit: Offset) -> Offset:
        """Where a batch starting at ``start`` ends: at most ``limit``, within the source's read limit."""
        ...

    async def read(self, start: Offset, end: Offset) -> Sequence[Any]:
        """The records in ``(start, end]``, in order."""
        ...

    async def commit(self, end: Offset) -> None:
        """Every batch up to ``end`` is committed; what precedes it will not be read again."""
        ...


class ListSource:
    """Records in a list, read in order; the offset is how many records were taken (``"5"``).

    Append records while the pipeline runs. After a restart, build the source with at least
    the records it held before, in the same order, so that a re-run batch finds its records.

    Args:
        records: the initial records.
        max_per_batch: a read limit: at most this many records per batch (``None``: no limit).
        name: the description shown in progress.
    """

    def __init__(self, records: Iterable[Any] = (), *, max_per_batch: int | None = None, name: str = "ListSource") -> None:
        """Create a source holding ``records``."""
        if max_per_batch is not None and (type(max_per_batch) is not int or max_per_batch < 1):
            raise ValueError(f"max_per_batch must be a positive int or None, got {max_per_batch!r}")
        self._records = list(records)
        self.max_per_batch = max_per_batch
        self._name = name

    @property
    def description(self) -> str:
        """The source's name."""
        return self._name

    def append(self, *records: Any) -> None:
        """Add records after the existing ones."""
        self._records.extend(records)

    def __len__(self) -> int:
        return len(self._records)

    def _position(self, offset: Offset) -> int:
        if offset is None:
            return 0
        value = _json_offset(offset, self._name, 'a count of records, such as "5"')
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _not_an_offset(offset, self._name, 'a count of records, such as "5"')
        return value

    async def latest_offset(self) -> Offset:
        """The number of records held, or ``None`` while there are none."""
        return str(len(self._records)) if self._records else None

    async def plan_offset(self, start: Offset, limit: Offset) -> Offset:
        """``limit``, or fewer records when ``max_per_batch`` says so."""
        begin, end = self._position(start), self._position(limit)
        if self.max_per_batch is not None:
            end = min(end, begin + self.max_per_batch)
        return start if end <= begin else str(end)

    async def read(self, start: Offset, end: Offset) -> Sequence[Any]:
        """The records between the two positions.

        Raises:
            ReplayError: the source holds fewer records than ``end`` (it was rebuilt with less).
        """
        begin, stop = self._position(start), self._position(end)
        if stop > len(self._records):
            raise ReplayError(
                f"{self._name} cannot replay records {begin}..{stop}: it holds {len(self._records)}; after a restart a "
                "ListSource must hold at least the records it held before, in the same order"
            )
        return self._records[begin:stop]

    async def commit(self, end: Offset) -> None:
        """Nothing to release: the list stays as it is."""

    def __repr__(self) -> str:
        return f"<ListSource {self._name!r} [{len(self._records)} records]>"


def _not_an_offset(offset: str, name: str, shape: str) -> CheckpointError:
    return CheckpointError(f"{name}: the offsets log holds {offset!r:.80} for this source, which is not {shape}; the log was "
                           "written by another source or edited by hand: use a new checkpoint directory")


def _json_offset(offset: str, name: str, shape: str) -> Any:
    """An offset's JSON value; a malformed one (also nested past the recursion limit) is a CheckpointError."""
    try:
        return json.loads(offset)
    except (ValueError, RecursionError):
        raise _not_an_offset(offset, name, shape) from None


_LINE_END = re.compile(r"\r\n|\r|\n")


def read_lines(path: Path) -> list[str]:
    r"""Lines of a text file as Spark's text source reads them (the default file reader).

    Hadoop's ``LineRecordReader`` rules, by which ``textFileStream`` decodes files too: UTF-8 with
    an undecodable byte read as U+FFFD, a leading byte order mark skipped, lines split at ``\n``,
    ``\r\n`` or ``\r`` only (not at the other separators ``str.splitlines`` knows) and given
    without their ends; a last line without its end is a line.
    """
    text = path.read_bytes().decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def _undecodable(name: str) -> bool:
    """Whether ``name`` holds a byte the file system's decoding could not read (a lone surrogate)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_GLOB = re.compile(r"[*?\[{]")


def _refuse_a_glob(path: Path) -> None:
    """Refuse a glob pattern (``in/*.txt``): it names no directory, so it would read nothing, silently, forever.

    An existing directory whose name holds such a character is taken as it is.
    """
    match = _GLOB.search(str(path))
    if match is None or path.is_dir():
        return
    plain = list(itertools.takewhile(lambda part: _GLOB.search(part) is None, path.parts))
    directory = str(Path(*plain)) if plain else "."
    raise ValueError(
        f"DirectorySource reads the files of one directory, and {str(path)!r} is a glob pattern (it holds "
        f"{match.group()!r}) rather than a directory: pass the directory, e.g. DirectorySource({directory!r}), with a "
        "reader= that returns no records for the files to leave out"
    )


class DirectorySource:
    """The files of a directory, taken in name order; the offset is ``{"files":N,"lastFile":"name"}``.

    A batch takes the files whose names sort after the previous batch's ``lastFile``, up to its
    own. Producers must therefore name files so that each new one sorts after every existing
    one (a zero-padded sequence number or timestamp) and create them atomically: write under a
    name starting with ``.`` or ``_`` (ignored here), then rename. ``files`` counts the files up
    to ``lastFile`` and is checked on every listing, so a file that appears out of order, or a
    taken file that disappears, is an error rather than silent loss. Files must stay in place.
    File names must be valid UTF-8, as the offsets log records them: a file named otherwise
    (copied from a Latin-1 system) is refused with a :class:`ReplayError` naming it and the
    source, rather than skipped.

    Args:
        path: the directory. It may not exist yet: it reads as empty, with one warning logged
            until it appears. A glob pattern (``in/*.txt``) is refused: it names no directory.
        max_files_per_batch: a read limit (Spark's ``maxFilesPerTrigger``); ``None``: no limit.
        reader: turns one file into records (default: :func:`read_lines`, Spark's text source's
            lines); runs in a worker thread. An exception it raises fails the batch as a
            :class:`ReplayError` naming the file, with the reader's exception as its cause.
        name: the description shown in progress (default ``DirectorySource[<path>]``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_files_per_batch: int | None = None,
        reader: Callable[[Path], Iterable[Any]] = read_lines,
        name: str | None = None,
    ) -> None:
        """Create a source over ``path``.

        Raises:
            ValueError: ``max_files_per_batch`` is not a positive int or ``None``, or ``path`` is a
                glob pattern and not an existing directory.
        """
        if max_files_per_batch is not None and (type(max_files_per_batch) is not int or max_files_per_batch < 1):
            raise ValueError(f"max_files_per_batch must be a positive int or None, got {max_files_per_batch!r}")
        self.path = Path(path)
        _refuse_a_glob(self.path)
        self.max_files_per_batch = max_files_per_batch
        self._reader = reader
        self._name = name or f"DirectorySource[{self.path}]"
        self._log = library_logger("aiodstream.streaming", component="DirectorySource", source=self._name)
        self._missing = False  # warned that the directory does not exist, and it has not appeared since

    @property
    def description(self) -> str:
        """``DirectorySource[<path>]`` unless named."""
        return self._name

    @property
    def checkpoint_identity(self) -> dict[str, str]:
        """What a checkpoint records and checks at every restart: the directory, as an absolute path."""
        return {"directory": os.path.abspath(self.path)}

    # -- offsets --

    @staticmethod
    def _offset(files: int, last: str) -> str:
        return json.dumps({"files": files, "lastFile": last}, separators=(",", ":"), ensure_ascii=False)

    def _parse(self, offset: Offset) -> tuple[int, str | None]:
        if offset is None:
            return 0, None
        shape = '{"files":N,"lastFile":"name"}'
        value = _json_offset(offset, self._name, shape)
        files, last = (value.get("files"), value.get("lastFile")) if isinstance(value, dict) else (None, None)
        if isinstance(files, bool) or not isinstance(files, int) or files < 0 or not isinstance(last, str):
            raise _not_an_offset(offset, self._name, shape)
        return files, last

    def _listing(self) -> list[str]:
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            if not self._missing:
                self._missing = True
                self._log.warning("the input directory does not exist (yet): nothing to read until it is made",
                                  path=str(self.path))
            return []
        self._missing = False
        names = sorted(e.name for e in entries if not e.name.startswith((".", "_")) and e.is_file())
        for name in names:
            if _undecodable(name):
                raise ReplayError(
                    f"{self._name}: the file name {os.fsencode(name)!r} in {str(self.path)!r} is not valid UTF-8, so the "
                    "offsets log cannot record it; rename the file to a UTF-8 name (sorting after the files already "
                    "taken) or move it out of the directory"
                )
        return names

    def _upto(self, names: list[str], offset: Offset) -> int:
        """How many listed names belong at or before ``offset``, checked against the count it recorded."""
        count, last = self._parse(offset)
        if last is None:
            return 0
        upto = bisect.bisect_right(names, last)
        if upto != count:
            if upto > count:
                raise ReplayError(
                    f"{self._name}: {upto - count} file(s) sorting at or before {last!r} appeared after that file was taken "
                    f"into a batch ({count} file(s) were up to it then); files are taken in name order, so every new file must "
                    "sort after all existing ones: name them by a zero-padded sequence number or timestamp"
                )
            raise ReplayError(
                f"{self._name}: {count - upto} file(s) up to {last!r} were removed after being taken into a batch; a directory "
                "source needs its files to stay in place to replay a batch after a restart"
            )
        return upto

    def _latest(self) -> Offset:
        names = self._listing()
        return self._offset(len(names), names[-1]) if names else None

    def _plan(self, start: Offset, limit: Offset) -> Offset:
        names = self._listing()
        begin = self._upto(names, start)
        stop = self._upto(names, limit) if limit is not None else 0
        if self.max_files_per_batch is not None:
            stop = min(stop, begin + self.max_files_per_batch)
        if stop <= begin:
            return start
        return self._offset(stop, names[stop - 1])

    def _read(self, start: Offset, end: Offset) -> list[Any]:
        names = self._listing()
        begin = self._upto(names, start)
        stop = self._upto(names, end) if end is not None else 0
        records: list[Any] = []
        for name in names[begin:stop]:
            path = self.path / name
            try:
                records.extend(self._reader(path))
            except Exception as exc:
                raise ReplayError(
                    f"{self._name}: cannot read {str(path)!r}, taken into the batch up to {names[stop - 1]!r}: "
                    f"{type(exc).__name__}: {exc}; the batch reads it again at every restart until it is committed, so "
                    "make the file readable or pass a reader that accepts it"
                ) from exc
        return records

    async def latest_offset(self) -> Offset:
        """The offset after the last file now in the directory (``None`` if it has none)."""
        return await anyio.to_thread.run_sync(self._latest)

    async def plan_offset(self, start: Offset, limit: Offset) -> Offset:
        """Up to ``limit``, at most ``max_files_per_batch`` files past ``start``."""
        return await anyio.to_thread.run_sync(self._plan, start, limit)

    async def read(self, start: Offset, end: Offset) -> Sequence[Any]:
        """The records of the files in ``(start, end]``, file by file in name order."""
        return await anyio.to_thread.run_sync(self._read, start, end)

    async def commit(self, end: Offset) -> None:
        """Nothing to release: files stay in place."""

    def __repr__(self) -> str:
        return f"<DirectorySource {str(self.path)!r}>"
