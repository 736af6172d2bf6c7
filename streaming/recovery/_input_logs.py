"""The per-input logs that make a StreamingContext's inputs replayable after a restart.

With a checkpoint directory, each input stream ``n`` keeps ``<checkpoint>/sources/<n>/``:

* ``stream.json``: what the input is (kind, directory, the file stream's initial threshold),
  written once, checked at every restart, so a changed program is an error rather than a
  silent mix-up of two inputs' data;
* numbered entries ``0``, ``1``, ... written once and atomically, each a unit of input: the
  files a file stream took for one batch (Structured Streaming's ``FileStreamSourceLog``
  format: a ``v1`` line, then one JSON object per file), or one block of records a receiver
  took in (its write-ahead log; a header line, the SHA-256 of the payload, then the pickled
  records; blocks of earlier releases have no checksum and are still read).

An input's offset is ``{"logOffset":N}``, the newest entry a batch covers (Structured
Streaming's file source offset). The engine writes that offset to the offsets log only after
the entries it points to are on disk, so a re-run batch finds exactly its data.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from typing import Any, Mapping

from scheduler import (
    LONG_MAX,
    LONG_MIN,
    CheckpointError,
    CheckpointPath,
    CorruptCheckpointError,
    MetadataLog,
    Offset,
    OffsetSeqLog,
    as_checkpoint_path,
)

__all__ = [
    "BLOCK_HEADER",
    "BLOCK_HEADER_V1",
    "BlockLog",
    "FileSelection",
    "FileSelectionLog",
    "InputDescriptor",
    "checkpoint_has_offsets",
    "decode_block",
    "format_log_offset",
    "parse_log_offset",
]

BLOCK_HEADER = b"aiodstream-receiver-block v2\n"
"""The first line of every receiver block written now: the 32-byte SHA-256 of the pickled records follows it, then they."""
BLOCK_HEADER_V1 = b"aiodstream-receiver-block v1\n"
"""The first line of a block of earlier releases (the pickled records follow it, unchecked); still read. Any other
first line is reported as a damaged block."""
_DIGEST = 32

_FILE_LOG_VERSION = "v1"


def format_log_offset(entry: int) -> str:
    """The offset text of log entry ``entry``: ``{"logOffset":N}``."""
    return json.dumps({"logOffset": entry}, separators=(",", ":"))


def parse_log_offset(offset: Offset, *, input_name: str) -> int:
    """The log entry an offset points to; ``-1`` for ``None`` (before the first entry).

    Raises:
        CheckpointError: the offset is not a ``{"logOffset":N}`` (the offsets log belongs to
            another kind of input).
    """
    if offset is None:
        return -1
    try:
        value = json.loads(offset)
        entry = value["logOffset"]
    except (ValueError, TypeError, KeyError, RecursionError):  # RecursionError: nested deeper than the parser goes
        entry = None
    if isinstance(entry, bool) or not isinstance(entry, int) or not 0 <= entry <= LONG_MAX:
        raise CheckpointError(
            f"{input_name}: the offsets log holds {offset!r} for this input, which is not a {{\"logOffset\":N}} offset; "
            "the checkpoint was written by a program with other inputs: use a new checkpoint directory"
        )
    return entry


class InputDescriptor:
    """``sources/<n>/stream.json``: what input ``n`` was when the checkpoint was created."""

    def __init__(self, directory: str | os.PathLike[str] | CheckpointPath) -> None:
        """Describe the input whose log lives in ``directory``."""
        self.directory = as_checkpoint_path(directory)
        self.path = self.directory / "stream.json"

    def ensure(self, expected: Mapping[str, Any], *, compare: tuple[str, ...],
               checkpoint: CheckpointPath | None = None) -> dict[str, Any]:
        """Write ``expected`` if nothing is recorded yet and this is a first start; return what is recorded.

        Blocking file I/O (call it in a worker thread). ``checkpoint``: the query's checkpoint
        directory; when the file is missing and its offsets log already has entries
        (:func:`checkpoint_has_offsets`, looked at only then), the first start recorded this input
        and the file was lost: it is refused rather than written anew from this run (which would
        accept another input, or move a file stream's first threshold to now); the error carries the
        JSON this run would record, for an operator who knows the input is the same one. A caller
        that knows the checkpoint predates these files passes ``checkpoint=None``.

        Raises:
            CheckpointError: the recorded input differs from ``expected`` in one of ``compare``,
                or the file is missing while the offsets log has entries.
            CorruptCheckpointError: the file cannot be read as JSON.
        """
        data = self.path.read_bytes()
        text = json.dumps(dict(expected), sort_keys=True)
        if data is None and checkpoint is not None and checkpoint_has_offsets(checkpoint):
            threshold = (" with initialModTimeIgnoreThreshold set back to its first start's"
                         if "initialModTimeIgnoreThreshold" in expected else "")
            raise CheckpointError(
                f"cannot resume from {checkpoint}: {self.path} is missing, but the offsets log already "
                f"has batches of input {self.directory.name}; the file records what that input was when the checkpoint was "
                "written (its kind, directory, a file stream's first modification-time threshold), and recording this "
                "run's instead could take another input's offsets or skip files that arrived while the query was down: "
                f"restore it from a copy, or if this input is the one that wrote the checkpoint write what this run would "
                f"record, {text}{threshold}, to {self.path}, or start over with a new checkpoint directory",
                path=str(self.path),
            )
        if data is None:  # write once (a racing writer's file wins: create_new never replaces)
            self.directory.mkdirs()
            self.path.create_new((text + "\n").encode("utf-8"))
            data = self.path.read_bytes() or b""
        try:
            recorded = json.loads(data.decode("utf-8"))
            if not isinstance(recorded, dict):
                raise ValueError("not a JSON object")
        except RecursionError:
            raise CorruptCheckpointError(f"{self.path} is damaged (it is nested too deeply); it describes an input of the "
                                         "checkpoint", path=str(self.path)) from None
        except ValueError as exc:  # UnicodeDecodeError too
            raise CorruptCheckpointError(f"{self.path} is damaged ({exc}); it describes an input of the checkpoint",
                                         path=str(self.path)) from exc
        for key in compare:
            if recorded.get(key) != expected.get(key):
                raise CheckpointError(
                    f"cannot resume from {self.path.parent.parent.parent}: input {self.directory.name} was "
                    f"{recorded.get(key)!r} ({key}) when the checkpoint was written and is {expected.get(key)!r} now; a restart "
                    "needs the same inputs in the same order, or a new checkpoint directory",
                    path=str(self.path),
                )
        return recorded


def checkpoint_has_offsets(checkpoint: CheckpointPath) -> bool:
    """Whether ``<checkpoint>/offsets`` holds a batch entry: a restart, whose inputs were recorded at the first start."""
    return bool(OffsetSeqLog(checkpoint / "offsets").batch_ids())


class FileSelection(list[tuple[str, int]]):
    """The files one batch took: ``(path, modification time in ms)`` pairs, in path order."""


def _serialize_files(entry: FileSelection) -> str:
    lines = [_FILE_LOG_VERSION]
    lines.extend(json.dumps({"path": path, "timestamp": mtime, "action": "add"}, separators=(",", ":"), ensure_ascii=False)
                 for path, mtime in entry)
    return "\n".join(lines) + "\n"


def _parse_files(text: str, path: str) -> FileSelection:
    lines = text.split("\n")
    if not text.endswith("\n") or lines[0] != _FILE_LOG_VERSION:
        raise CorruptCheckpointError(
            f"{path} is damaged: a file-stream log entry starts with a {_FILE_LOG_VERSION!r} line and ends with a newline",
            path=path,
        )
    files = FileSelection()
    for line in lines[1:-1]:
        try:
            value = json.loads(line)
            stamp = value["timestamp"]
            if isinstance(stamp, bool) or not isinstance(stamp, int) or not LONG_MIN <= stamp <= LONG_MAX:
                raise ValueError(f"the timestamp must be whole milliseconds, got {stamp!r:.40}")
            files.append((str(value["path"]), stamp))
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            why = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise CorruptCheckpointError(f"{path} is damaged: cannot read file record {line[:60]!r} ({why})", path=path) from None
    return files


class FileSelectionLog(MetadataLog[FileSelection]):
    """A file stream's log: entry ``N`` lists the files of the ``N``-th batch that found new files."""

    def __init__(self, directory: str | os.PathLike[str] | CheckpointPath) -> None:
        """A log stored in ``directory``."""
        super().__init__(directory, _serialize_files, _parse_files)


def decode_block(data: bytes, path: str) -> list[Any]:
    """The records of a receiver block read from ``path`` (wherever it was read: the driver or a batch's task).

    Raises:
        CorruptCheckpointError: the bytes are not a whole block, or fail its checksum.
    """
    if data.startswith(BLOCK_HEADER):
        digest, payload = data[len(BLOCK_HEADER):len(BLOCK_HEADER) + _DIGEST], data[len(BLOCK_HEADER) + _DIGEST:]
        if len(digest) != _DIGEST or hashlib.sha256(payload).digest() != digest:  # checked before anything is unpickled
            raise CorruptCheckpointError(
                f"{path} is damaged: its checksum does not match (a torn or altered write); its records belong to a batch "
                "that must see them: restore the block from a copy, or start over with a new checkpoint directory",
                path=path)
    elif data.startswith(BLOCK_HEADER_V1):  # an earlier release's block: no checksum to check
        payload = data[len(BLOCK_HEADER_V1):]
    else:
        raise CorruptCheckpointError(f"{path} is damaged: it does not start with {BLOCK_HEADER!r}", path=path)
    try:
        records = pickle.loads(payload)
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is damaged: its records cannot be unpickled ({exc!r})", path=path) from exc
    if not isinstance(records, list):
        raise CorruptCheckpointError(f"{path} is damaged: it holds {type(records).__name__}, not a list of records",
                                     path=path)
    return records


def _encode_block(records: list[Any]) -> bytes:
    payload = pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
    return BLOCK_HEADER + hashlib.sha256(payload).digest() + payload


class BlockLog:
    """A receiver's write-ahead log: entry ``N`` is one block of records, pickled, with its SHA-256.

    Blocks are written whole and atomically (they are never appended to), so a reader sees a
    complete block or none. Records must therefore be picklable; a socket stream's are strings.
    """

    def __init__(self, directory: str | os.PathLike[str] | CheckpointPath) -> None:
        """A log stored in ``directory``."""
        self.directory = as_checkpoint_path(directory)
        self._log: MetadataLog[Any] = MetadataLog(self.directory, str, lambda text, path: text)

    def path_of(self, entry: int) -> CheckpointPath:
        """Where block ``entry`` lives."""
        return self._log.path_of(entry)

    def entries(self) -> list[int]:
        """The ids of the blocks on disk, ascending."""
        return self._log.batch_ids()

    def write(self, entry: int, records: list[Any]) -> None:
        """Write block ``entry`` durably; blocking.

        Raises:
            CheckpointError: the block exists already (another process writes this log).
        """
        data = _encode_block(records)
        self.directory.mkdirs()
        if not self.path_of(entry).create_new(data):
            raise CheckpointError(
                f"cannot write {self.path_of(entry)}: it already exists, so another context is receiving into the same "
                "checkpoint directory; run one context per checkpoint directory at a time",
                path=str(self.path_of(entry)),
            )

    def write_again(self, entry: int, records: list[Any]) -> int:
        """Write block ``entry`` after an attempt to write it failed; how many of ``records`` the block holds; blocking.

        A failed attempt may have left the block whole on disk (the error came after its name
        existed, e.g. while flushing the directory): a block holding the first records of
        ``records``, byte for byte, is that attempt's and is kept (the count is returned; the
        rest go into the next block). A missing block is written as by :meth:`write`.

        Raises:
            CheckpointError: the block holds something else (another process writes this log).
        """
        path = self.path_of(entry)
        data = path.read_bytes()
        if data is None:
            self.write(entry, records)
            return len(records)
        written = decode_block(data, str(path))
        if len(written) <= len(records) and _encode_block(records[:len(written)]) == data:
            return len(written)
        raise CheckpointError(
            f"cannot write {path}: it already exists, so another context is receiving into the same checkpoint "
            "directory; run one context per checkpoint directory at a time",
            path=str(path),
        )

    def read(self, entry: int) -> list[Any]:
        """Block ``entry``'s records; blocking.

        Raises:
            CorruptCheckpointError: the block is missing or damaged (never skipped: its records
                belong to a batch that must see them).
        """
        path = self.path_of(entry)
        data = path.read_bytes()
        if data is None:
            raise CorruptCheckpointError(
                f"{path} is missing: a batch being replayed needs this block of received records; restore it, or start "
                "over with a new checkpoint directory",
                path=str(path),
            )
        return decode_block(data, str(path))

    def purge(self, below: int) -> list[int]:
        """Delete every block with an id below ``below``; blocking."""
        return self._log.purge(below)
