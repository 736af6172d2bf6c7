"""A replayable source over the files of a directory, taken in name order, and its default line reader.

The counterpart of Structured Streaming's file source (``spark.readStream.text(directory)``).
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import anyio.to_thread

from scheduler import CheckpointPath, Offset, ReplayError, library_logger

from ._sources import json_offset, not_an_offset
from ._taken_files import TakenFiles, TakenLog

__all__ = ["DirectorySource", "read_lines"]

_LINE_END = re.compile(r"\r\n|\r|\n")
_SHAPE = '{"files":N,"lastFile":"name"}'

KEPT_RECORDS = 100
"""How many committed batches' file records a DirectorySource keeps (``spark.sql.streaming.minBatchesToRetain``'s
default): older ones are deleted, and their files are checked by count, as in a checkpoint written before the records."""
_NAMED = 5  # files named in a message; more are counted


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


def _some(names: Sequence[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:_NAMED])
    return shown if len(names) <= _NAMED else f"{shown} and {len(names) - _NAMED} more"


class DirectorySource:
    """The files of a directory, taken in name order; the offset is ``{"files":N,"lastFile":"name"}``.

    A batch takes the files whose names sort after the previous batch's ``lastFile``, up to its
    own; ``files`` counts the files taken up to ``lastFile``. Producers must therefore name files
    so that each new one sorts after every file taken (a zero-padded sequence number or
    timestamp) and create them atomically: write under a name starting with ``.`` or ``_``
    (ignored here), then rename.

    The source records which files each batch took, by name (in ``<checkpoint>/sources/<n>/files/``
    for a checkpointed query, as Spark's file source logs them), and checks every listing
    against that: a file that appears sorting before a file already taken would never be read,
    and is a :class:`ReplayError` naming it rather than silent loss. A batch's files must stay in
    place until the batch is committed (a restart reads them again; a missing one is a
    ``ReplayError`` naming it); after that they may be deleted or archived. File names must be
    valid UTF-8, as the offsets log records them: a file named otherwise is refused with a
    ``ReplayError`` naming it and the source, rather than skipped.

    A source object belongs to one query at a time: what it took is the query's.

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
        self._taken = TakenLog()
        self._furthest: tuple[int, str] | None = None  # the furthest logged position seen: a plan's start, a read's end
        self._lock = threading.Lock()  # plans and reads run in worker threads, maybe two at once

    @property
    def description(self) -> str:
        """``DirectorySource[<path>]`` unless named."""
        return self._name

    @property
    def checkpoint_identity(self) -> dict[str, str]:
        """What a checkpoint records and checks at every restart: the directory, as an absolute path."""
        return {"directory": os.path.abspath(self.path)}

    async def attach_checkpoint(self, metadata_path: CheckpointPath) -> None:
        """Keep the files each batch takes in ``metadata_path/files/`` and read back what earlier runs took.

        Raises:
            CorruptCheckpointError: an entry there cannot be read.
        """
        await anyio.to_thread.run_sync(self._attach, metadata_path / "files")

    def _attach(self, directory: CheckpointPath) -> None:
        with self._lock:
            self._taken.attach(directory)
            self._furthest = self._taken.furthest()

    # -- offsets --

    @staticmethod
    def _offset(files: int, last: str) -> str:
        return json.dumps({"files": files, "lastFile": last}, separators=(",", ":"), ensure_ascii=False)

    def _parse(self, offset: Offset) -> tuple[int, str | None]:
        if offset is None:
            return 0, None
        value = json_offset(offset, self._name, _SHAPE)
        files, last = (value.get("files"), value.get("lastFile")) if isinstance(value, dict) else (None, None)
        if isinstance(files, bool) or not isinstance(files, int) or files < 0 or not isinstance(last, str):
            raise not_an_offset(offset, self._name, _SHAPE)
        return files, last

    def _advance(self, files: int, last: str | None) -> None:
        if last is not None and (self._furthest is None or files > self._furthest[0]):
            self._furthest = files, last

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

    # -- the checks --

    def _late(self, count: int, last: str, which: str) -> ReplayError:
        return ReplayError(
            f"{self._name}: {count} file(s) sorting at or before {last!r} appeared after that file was taken into a batch "
            f"({which}); files are taken in name order, so every new file must sort after all the files taken: name them "
            "by a zero-padded sequence number or timestamp, and rename a late file to sort last or move it out"
        )

    def _removed(self, count: int, last: str, which: str) -> ReplayError:
        return ReplayError(
            f"{self._name}: {count} file(s) up to {last!r} were removed after being taken into a batch that is not committed "
            f"yet{which}; a restart reads a batch's files again until the batch is committed, so they must stay in place "
            "until then: put them back (delete or archive a file only once its batch is committed)"
        )

    def _check_before(self, names: list[str], files: int, last: str | None) -> int:
        """Where the files after position ``(files, last)`` start in ``names``, once none before it is a late file."""
        if last is None:
            return 0
        upto = bisect.bisect_right(names, last)
        named, uncounted = self._taken.late_files(names[:upto], files)
        if named:
            raise self._late(len(named), last, _some(named))
        if uncounted:  # batches without a record of their files (an older checkpoint's): only counts tell
            raise self._late(uncounted, last, f"{files} file(s) were taken up to it")
        return upto

    def _files_of(self, names: list[str], start: Offset, end: Offset) -> list[str]:
        """The files of the batch ``(start, end]``: those it took, checked to be all there and alone in its range."""
        start_files, start_last = self._parse(start)
        end_files, end_last = self._parse(end)
        if end_last is None or end_files <= start_files:
            return []
        listed = names[bisect.bisect_right(names, start_last) if start_last is not None else 0:bisect.bisect_right(names, end_last)]
        entry = self._taken.find(start_files, start_last, end_files, end_last)
        if entry is not None:
            present, own = set(listed), set(entry.names)
            missing = [name for name in entry.names if name not in present]
            if missing:
                raise self._removed(len(missing), end_last, f" ({_some(missing)})")
            late = [name for name in listed if name not in own]
            if late:
                raise self._late(len(late), end_last, _some(late))
            return list(entry.names)
        # The batch's first read (or an older checkpoint's batch): what is listed must be what it counted.
        expected = end_files - start_files
        if len(listed) > expected:
            raise self._late(len(listed) - expected, end_last, f"{expected} file(s) were taken after {start_last!r}"
                             if start_last is not None else f"{expected} file(s) were taken up to it")
        if len(listed) < expected:
            raise self._removed(expected - len(listed), end_last, "")
        self._taken.add(TakenFiles(start_files, start_last, tuple(listed)))
        return listed

    # -- the work, in a worker thread --

    def _latest(self) -> Offset:
        names = self._listing()
        with self._lock:
            if self._furthest is None:
                return self._offset(len(names), names[-1]) if names else None
            files, last = self._furthest
            upto = self._check_before(names, files, last)
            new = len(names) - upto
            return self._offset(files + new, names[-1]) if new else self._offset(files, last)

    def _plan(self, start: Offset, limit: Offset) -> Offset:
        names = self._listing()
        start_files, start_last = self._parse(start)
        _, limit_last = self._parse(limit)
        with self._lock:
            begin = self._check_before(names, start_files, start_last)
            self._advance(start_files, start_last)
            stop = bisect.bisect_right(names, limit_last) if limit_last is not None else 0
            if self.max_files_per_batch is not None:
                stop = min(stop, begin + self.max_files_per_batch)
            if stop <= begin:
                return start
            # (Not self._advance(end): a planned end is not logged yet, and its files may still go.)
            return self._offset(start_files + stop - begin, names[stop - 1])

    def _read(self, start: Offset, end: Offset) -> list[Any]:
        names = self._listing()
        with self._lock:
            files = self._files_of(names, start, end)
            self._advance(*self._parse(end))
        records: list[Any] = []
        for name in files:
            path = self.path / name
            try:
                records.extend(self._reader(path))
            except Exception as exc:
                raise ReplayError(
                    f"{self._name}: cannot read {str(path)!r}, taken into the batch up to {files[-1]!r}: "
                    f"{type(exc).__name__}: {exc}; the batch reads it again at every restart until it is committed, so "
                    "make the file readable or pass a reader that accepts it"
                ) from exc
        return records

    async def latest_offset(self) -> Offset:
        """The offset after the last file now in the directory (``None`` if nothing was ever there)."""
        return await anyio.to_thread.run_sync(self._latest)

    async def plan_offset(self, start: Offset, limit: Offset) -> Offset:
        """Up to ``limit``, at most ``max_files_per_batch`` files past ``start``.

        Raises:
            ReplayError: a file appeared sorting before a file already taken.
        """
        return await anyio.to_thread.run_sync(self._plan, start, limit)

    async def read(self, start: Offset, end: Offset) -> Sequence[Any]:
        """The records of the files in ``(start, end]``, file by file in name order.

        Raises:
            ReplayError: a file of the range is missing, one appeared in it, or one cannot be read.
        """
        return await anyio.to_thread.run_sync(self._read, start, end)

    async def commit(self, end: Offset) -> None:
        """The files up to ``end`` may now be deleted or archived; the records of older committed batches are let go
        (the newest :data:`KEPT_RECORDS` stay)."""
        files, _ = self._parse(end)
        await anyio.to_thread.run_sync(self._forget, files)

    def _forget(self, files: int) -> None:
        with self._lock:  # the records are also read and added by the next batch's plan and read, on other threads
            self._taken.forget_committed(files, KEPT_RECORDS)

    def __repr__(self) -> str:
        return f"<DirectorySource {str(self.path)!r}>"
