"""Write-once metadata logs: the offsets and commits logs of a checkpoint (Spark's ``HDFSMetadataLog``).

One file per batch id in Structured Streaming's on-disk format (``OffsetSeqLog`` and ``CommitLog``
version 1), on any :class:`~scheduler.query.CheckpointFileManager`. Every entry is created
atomically and never replaced, so a reader never sees half an entry and an entry is never
rewritten. All functions here block on file I/O: async callers run them with
``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

import attrs

from .._errors import CorruptCheckpointError, UnsupportedLogVersionError
from .._numbers import LONG_MAX, LONG_MIN, parse_batch_file_name
from .._protocols import Offset
from ._files import CheckpointPath, as_checkpoint_path, remove_temp_files

__all__ = [
    "CommitLog",
    "CommitMetadata",
    "MetadataLog",
    "OffsetSeq",
    "OffsetSeqLog",
    "OffsetSeqMetadata",
    "parse_commit",
    "parse_offset_seq",
    "parse_query_metadata",
    "serialize_commit",
    "serialize_offset_seq",
    "serialize_query_metadata",
]

LOG_VERSION = 1
"""The offsets and commits log format this version writes and the newest it reads."""

_VERSION_LINE = re.compile(r"v([0-9]{1,9})")  # ASCII digits; a longer version is malformed, as in Spark (toInt)


# -- entry formats --


@attrs.frozen
class OffsetSeqMetadata:
    """Line 2 of an offsets entry: the batch's watermark, timestamp and the settings it ran with."""

    batch_watermark_ms: int = 0
    batch_timestamp_ms: int = 0
    conf: Mapping[str, str] = attrs.field(factory=dict)

    def to_json(self) -> str:
        """Spark's JSON: ``{"batchWatermarkMs":..,"batchTimestampMs":..,"conf":{..}}``, compact."""
        return json.dumps(
            {"batchWatermarkMs": self.batch_watermark_ms, "batchTimestampMs": self.batch_timestamp_ms, "conf": dict(self.conf)},
            separators=(",", ":"),
            ensure_ascii=False,
        )


@attrs.frozen
class OffsetSeq:
    """One offsets (write-ahead log) entry: batch metadata and one offset per source, in source order.

    An offset is the source's own JSON text, or ``None`` when the source has none yet (written ``-``).
    """

    offsets: tuple[Offset, ...]
    metadata: OffsetSeqMetadata | None = None


@attrs.frozen
class CommitMetadata:
    """One commits-log entry: the watermark the next batch uses."""

    next_batch_watermark_ms: int = 0


def _snippet(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _damaged(path: str, what: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"cannot read {path}: {what}; the file was damaged after it was written (aiodstream never leaves a "
        "partly written entry): restore it from a copy, or start over with a new checkpoint directory",
        path=path,
    )


def _check_version(line: str, path: str) -> int:
    match = _VERSION_LINE.fullmatch(line)
    version = int(match.group(1)) if match else 0  # at most 9 ASCII digits: int() cannot fail
    if version <= 0:
        raise _damaged(path, f"the first line must be a log version such as 'v1', got {_snippet(line)}")
    if version > LOG_VERSION:
        raise UnsupportedLogVersionError(
            f"cannot read {path}: it is in log format v{version}, and this version of aiodstream reads formats up to "
            f"v{LOG_VERSION}; it was written by a newer version: upgrade aiodstream to read this checkpoint",
            path=path,
        )
    return version


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # written without a trailing newline, but tolerate one
    return lines


def _load_json(text: str) -> tuple[Any, str | None]:
    """``json.loads(text)`` and ``None``, or ``None`` and why it is not JSON; never raises.

    A hand-made entry must not escape as a traceback: besides syntax errors (``ValueError``,
    also for an integer past Python's digit limit), nesting deeper than the interpreter's
    recursion limit raises ``RecursionError``.
    """
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "it is nested too deeply"
    except ValueError as exc:
        return None, str(exc)


def _json_object(line: str, path: str, what: str) -> dict[str, Any]:
    value, error = _load_json(line)
    if error is not None:
        raise _damaged(path, f"{what} must be a JSON object, got {_snippet(line)} ({error})")
    if not isinstance(value, dict):
        raise _damaged(path, f"{what} must be a JSON object, got {_snippet(line)}")
    return value


def _int_field(obj: Mapping[str, Any], key: str, path: str, what: str) -> int:
    value = obj.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _damaged(path, f"{what} field {key!r} must be an integer, got {value!r:.60}")
    if not LONG_MIN <= value <= LONG_MAX:
        raise _damaged(path, f"{what} field {key!r} must fit a Java long (Spark's type for it), got {_snippet(str(value))}")
    return value


def serialize_offset_seq(entry: OffsetSeq) -> str:
    """The text of an offsets entry: ``v1``, the metadata JSON (empty if none), one line per source; no final newline."""
    for offset in entry.offsets:
        if offset is not None and ("\n" in offset or "\r" in offset or offset == "-"):
            raise ValueError(f"a source offset must be one line of JSON, got {offset!r}")
    lines = [f"v{LOG_VERSION}", "" if entry.metadata is None else entry.metadata.to_json()]
    lines.extend("-" if offset is None else offset for offset in entry.offsets)
    return "\n".join(lines)


def parse_offset_seq(text: str, path: str) -> OffsetSeq:
    """Parse an offsets entry read from ``path``.

    Raises:
        CorruptCheckpointError: the text is not an offsets entry (damaged or truncated).
        UnsupportedLogVersionError: it is in a newer format.
    """
    lines = _lines(text)
    _check_version(lines[0], path)
    if len(lines) < 2:
        raise _damaged(path, "it ends after the version line, before the batch metadata line")
    metadata: OffsetSeqMetadata | None = None
    if lines[1]:
        obj = _json_object(lines[1], path, "line 2 (the batch metadata)")
        conf = obj.get("conf", {})
        if not isinstance(conf, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in conf.items()):
            raise _damaged(path, f"the batch metadata field 'conf' must map strings to strings, got {conf!r}")
        metadata = OffsetSeqMetadata(
            _int_field(obj, "batchWatermarkMs", path, "the batch metadata"),
            _int_field(obj, "batchTimestampMs", path, "the batch metadata"),
            conf,
        )
    offsets: list[Offset] = []
    for number, line in enumerate(lines[2:], start=3):
        if line == "-":
            offsets.append(None)
            continue
        _, error = _load_json(line)
        if error is not None:
            raise _damaged(path, f"line {number} must be a source offset (JSON, or '-' for none), got {_snippet(line)} ({error})")
        offsets.append(line)
    return OffsetSeq(tuple(offsets), metadata)


def serialize_commit(entry: CommitMetadata) -> str:
    """The text of a commits entry: ``v1`` and ``{"nextBatchWatermarkMs":..}``; no final newline."""
    return f"v{LOG_VERSION}\n" + json.dumps({"nextBatchWatermarkMs": entry.next_batch_watermark_ms}, separators=(",", ":"))


def parse_commit(text: str, path: str) -> CommitMetadata:
    """Parse a commits entry read from ``path`` (a missing second line means watermark 0, as in Spark).

    Raises:
        CorruptCheckpointError: the text is not a commits entry.
        UnsupportedLogVersionError: it is in a newer format.
    """
    lines = _lines(text)
    _check_version(lines[0], path)
    if len(lines) > 2:
        raise _damaged(path, f"a commit entry has at most 2 lines, this one has {len(lines)}")
    if len(lines) == 1 or not lines[1]:
        return CommitMetadata()
    obj = _json_object(lines[1], path, "line 2 (the commit metadata)")
    return CommitMetadata(_int_field(obj, "nextBatchWatermarkMs", path, "the commit metadata"))


def serialize_query_metadata(query_id: uuid.UUID) -> str:
    """The text of the ``metadata`` file: ``{"id":"<uuid>"}`` with no final newline."""
    return json.dumps({"id": str(query_id)}, separators=(",", ":"))


def parse_query_metadata(text: str, path: str) -> uuid.UUID:
    """The query id in a ``metadata`` file's text.

    Raises:
        CorruptCheckpointError: not a JSON object with a UUID under ``id``.
    """
    what = 'the query metadata must be a JSON object holding the query id, such as {"id":"<uuid>"}'
    obj, error = _load_json(text)
    if error is not None:
        raise _damaged(path, f"{what}, got {_snippet(text)} ({error})")
    raw = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(raw, str):
        try:
            return uuid.UUID(raw)
        except ValueError:
            pass
    raise _damaged(path, f"{what}, got {_snippet(text)}")


# -- logs --

T = TypeVar("T")


def _read_text(path: CheckpointPath) -> str | None:
    data = path.read_bytes()
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _damaged(str(path), f"it is not UTF-8 text ({exc})") from None


class MetadataLog(Generic[T]):
    """A directory of write-once entries named by batch id (``0``, ``1``, ...).

    Only names that are a batch id in canonical form count: hidden temporary files and other
    names (``.0.crc``) are ignored. Every method blocks on file I/O.
    """

    def __init__(self, directory: str | os.PathLike[str] | CheckpointPath, serialize: Callable[[T], str],
                 parse: Callable[[str, str], T]) -> None:
        """A log stored in ``directory`` (a local path, or a path on any file manager; created on the first write)."""
        self.directory = as_checkpoint_path(directory)
        self._serialize = serialize
        self._parse = parse
        self._dir_ready = False

    def path_of(self, batch_id: int) -> CheckpointPath:
        """Where ``batch_id``'s entry lives."""
        return self.directory / str(batch_id)

    def batch_ids(self) -> list[int]:
        """The ids of every entry, ascending."""
        return sorted(i for i in map(parse_batch_file_name, self.directory.listdir()) if i is not None)

    def add(self, batch_id: int, entry: T, *, durable: bool = True) -> bool:
        """Write ``batch_id``'s entry unless one exists; return whether it was written (never overwrites)."""
        if batch_id < 0:
            raise ValueError(f"batch ids are non-negative, got {batch_id}")
        data = self._serialize(entry).encode("utf-8")
        if not self._dir_ready:
            self.directory.mkdirs()
            self._dir_ready = True
        return self.path_of(batch_id).create_new(data, durable=durable)

    def get(self, batch_id: int) -> T | None:
        """``batch_id``'s entry, or ``None`` if there is none.

        Raises:
            CorruptCheckpointError: the entry exists but cannot be parsed (never skipped).
        """
        path = self.path_of(batch_id)
        text = _read_text(path)
        return None if text is None else self._parse(text, str(path))

    def get_latest(self) -> tuple[int, T] | None:
        """The entry with the highest id, or ``None`` for an empty log."""
        for batch_id in reversed(self.batch_ids()):
            entry = self.get(batch_id)
            if entry is not None:  # deleted between listing and reading: take the next one
                return batch_id, entry
        return None

    def purge(self, threshold: int, known: Iterable[int] | None = None) -> list[int]:
        """Delete every entry with an id below ``threshold``; return the ids deleted, ascending.

        ``known`` lists the ids to consider, saving a directory listing; missing files are skipped.
        """
        ids = self.batch_ids() if known is None else sorted(known)
        deleted = []
        for batch_id in ids:
            if batch_id >= threshold:
                break
            if self.path_of(batch_id).delete():
                deleted.append(batch_id)
        return deleted

    def remove_temp_files(self) -> int:
        """Delete temporary files left by killed writers; return how many."""
        return remove_temp_files(self.directory)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {str(self.directory)!r}>"


class OffsetSeqLog(MetadataLog[OffsetSeq]):
    """The offsets write-ahead log: ``offsets/<batchId>``, written before a batch runs."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        """The log in ``directory``."""
        super().__init__(directory, serialize_offset_seq, parse_offset_seq)


class CommitLog(MetadataLog[CommitMetadata]):
    """The commits log: ``commits/<batchId>``, written once every job of the batch succeeded."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        """The log in ``directory``."""
        super().__init__(directory, serialize_commit, parse_commit)
