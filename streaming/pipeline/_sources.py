"""Replayable sources for pipelines: the protocol, and a list of records (a directory: ``_directory_source``).

The counterparts of Structured Streaming's memory and file sources: each batch covers an offset
range, and a restart reads exactly the same range again. Offsets are the sources' own one-line
JSON text, as they appear in the checkpoint's offsets log.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from scheduler import CheckpointError, Offset, ReplayError

__all__ = ["ListSource", "ReplayableSource", "json_offset", "not_an_offset"]


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
        value = json_offset(offset, self._name, 'a count of records, such as "5"')
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise not_an_offset(offset, self._name, 'a count of records, such as "5"')
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


def not_an_offset(offset: str, name: str, shape: str) -> CheckpointError:
    """The error for an offset of the wrong ``shape`` in ``name``'s line of the offsets log."""
    return CheckpointError(f"{name}: the offsets log holds {offset!r:.80} for this source, which is not {shape}; the log was "
                           "written by another source or edited by hand: use a new checkpoint directory")


def json_offset(offset: str, name: str, shape: str) -> Any:
    """An offset's JSON value; a malformed one (also nested past the recursion limit) is a CheckpointError."""
    try:
        return json.loads(offset)
    except (ValueError, RecursionError):
        raise not_an_offset(offset, name, shape) from None
