"""Which files each batch of a DirectorySource took, by name: Spark's file source log (``sources/<n>/<batchId>``).

With it a re-run batch reads exactly its own files, and a file that appears before the files
already taken is told from a taken one, also after the taken ones were deleted or archived.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Iterable

from scheduler import CheckpointPath, CorruptCheckpointError

__all__ = ["TakenFiles", "TakenLog"]

_VERSION = "v1"


@dataclass(frozen=True)
class TakenFiles:
    """The files one batch took: those after ``start_last`` up to its last name, ``start_files`` taken before them."""

    start_files: int
    start_last: str | None
    names: tuple[str, ...]

    @property
    def end_files(self) -> int:
        """How many files were taken up to the batch's end (its end offset's ``files``)."""
        return self.start_files + len(self.names)

    @property
    def last(self) -> str:
        """The batch's last file (its end offset's ``lastFile``)."""
        return self.names[-1]

    def covers(self, name: str) -> bool:
        """Whether ``name`` sorts into this batch's range, ``(start_last, last]``."""
        return (self.start_last is None or name > self.start_last) and name <= self.last

    def to_bytes(self) -> bytes:
        """The entry's file: ``v1`` and one JSON line."""
        value = {"startFiles": self.start_files, "startLastFile": self.start_last, "names": list(self.names)}
        return f"{_VERSION}\n{json.dumps(value, separators=(',', ':'), ensure_ascii=False)}".encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> TakenFiles:
        """Parse an entry written by :meth:`to_bytes`.

        Raises:
            CorruptCheckpointError: it is not one, naming ``where``.
        """
        version, _, text = data.decode("utf-8", "replace").partition("\n")
        try:
            value = json.loads(text) if version == _VERSION else None
        except ValueError:
            value = None
        if isinstance(value, dict):
            start, last, names = value.get("startFiles"), value.get("startLastFile"), value.get("names")
            if (type(start) is int and start >= 0 and (last is None or isinstance(last, str)) and isinstance(names, list)
                    and names and all(isinstance(n, str) for n in names)):
                return cls(start, last, tuple(names))
        raise CorruptCheckpointError(f"{where} is not a DirectorySource's list of the files a batch took "
                                     f"(v1 and {{\"startFiles\":N,\"startLastFile\":...,\"names\":[...]}}); it was damaged or "
                                     "edited: restore it or use a new checkpoint directory", path=where)


class TakenLog:
    """The :class:`TakenFiles` of every batch read, by the count at its end; kept in ``files/<count>`` when attached.

    Not thread-safe: its source serializes the calls.
    """

    def __init__(self) -> None:
        """An empty log, in memory until :meth:`attach` gives it a directory."""
        self._by_end: dict[int, TakenFiles] = {}
        self._by_last: list[TakenFiles] = []  # sorted by last name (and so by end count)
        self._names: set[str] = set()
        self._directory: CheckpointPath | None = None

    def attach(self, directory: CheckpointPath) -> None:
        """Keep the entries in ``directory`` from now on, and read those an earlier run wrote there.

        Raises:
            CorruptCheckpointError: an entry cannot be read.
        """
        self._directory = directory
        entries = []
        if directory.is_dir():  # (a killed write's temporary file is not all digits: ignored here)
            for name in directory.listdir():
                if name.isdigit():
                    entry = TakenFiles.from_bytes((directory / name).read_bytes() or b"", str(directory / name))
                    if entry.end_files != int(name):
                        raise CorruptCheckpointError(f"{directory / name} lists {len(entry.names)} file(s) after "
                                                     f"{entry.start_files}, which does not end at {name}: it was edited; "
                                                     "restore it or use a new checkpoint directory", path=str(directory / name))
                    entries.append(entry)
        self._reset(entries)

    def _reset(self, entries: Iterable[TakenFiles]) -> None:
        self._by_end = {entry.end_files: entry for entry in entries}
        self._by_last = sorted(self._by_end.values(), key=lambda entry: entry.last)
        self._names = {name for entry in self._by_last for name in entry.names}

    def find(self, start_files: int, start_last: str | None, end_files: int, end_last: str) -> TakenFiles | None:
        """The entry of exactly that range, if one was recorded."""
        entry = self._by_end.get(end_files)
        if entry is None or (entry.start_files, entry.start_last, entry.last) != (start_files, start_last, end_last):
            return None
        return entry

    def add(self, entry: TakenFiles) -> None:
        """Record a batch's files (before they are read), replacing an entry with the same end count."""
        if self._directory is not None:
            self._directory.mkdirs()
            target = self._directory / str(entry.end_files)
            if not target.create_new(entry.to_bytes()):
                target.write_replacing(entry.to_bytes())  # (an edited log's entry, or a batch this log never ran)
        if entry.end_files in self._by_end:
            self._reset([*(e for e in self._by_last if e.end_files != entry.end_files), entry])
            return
        self._by_end[entry.end_files] = entry
        bisect.insort(self._by_last, entry, key=lambda e: e.last)
        self._names.update(entry.names)

    def forget_committed(self, committed_files: int, keep: int) -> None:
        """Let go of the entries of committed batches (ending at or before ``committed_files``) but the newest ``keep``.

        A committed batch is never re-run, so its entry only tells its files from late ones; past
        the newest ``keep`` its files count as those of a batch without an entry (see
        :meth:`late_files`), and its file in the directory goes, so the log stays bounded however
        long the query runs.
        """
        committed = sorted(end for end in self._by_end if end <= committed_files)
        gone = committed[:max(0, len(committed) - keep)]
        if not gone:
            return
        for end in gone:
            del self._by_end[end]
            if self._directory is not None:
                (self._directory / str(end)).delete()
        self._reset(self._by_end.values())

    def furthest(self) -> tuple[int, str] | None:
        """The end of the furthest batch recorded, as ``(files, lastFile)``."""
        if not self._by_end:
            return None
        entry = self._by_end[max(self._by_end)]
        return entry.end_files, entry.last

    def late_files(self, listed: list[str], files: int) -> tuple[list[str], int]:
        """Which of ``listed`` (the files now sorting at or before a position ``files`` files in) were never taken.

        Returns ``(named, uncounted)``: the files that sort into a recorded batch's range but are
        not among its files, and how many more of the unrecorded ones are listed than the
        batches without an entry (an older checkpoint's, or one planned and not read yet) took.
        """
        unknown = [name for name in listed if name not in self._names]
        if not unknown:
            return [], 0
        named = []
        for name in unknown:
            at = bisect.bisect_left(self._by_last, name, key=lambda e: e.last)
            if at < len(self._by_last) and self._by_last[at].covers(name):
                named.append(name)
        recorded = sum(len(e.names) for e in self._by_last if e.end_files <= files)
        return named, max(0, len(unknown) - len(named) - (files - recorded))

    def __repr__(self) -> str:
        return f"<TakenLog [{len(self._by_end)} batches, {len(self._names)} files]{' ' + str(self._directory) if self._directory else ''}>"
