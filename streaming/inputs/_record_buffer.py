"""RecordBuffer: the bounded buffer a receiver stores into and each batch empties (Spark's ``BlockGenerator``)."""

from __future__ import annotations

from typing import Any, Sequence

import anyio

__all__ = ["DEFAULT_MAX_BUFFERED_RECORDS", "RecordBuffer"]

DEFAULT_MAX_BUFFERED_RECORDS = 100_000
"""Records a receiver may hold between two batches before it stops taking more in."""


class RecordBuffer:
    r"""A bounded list of received records that each batch takes whole (Spark's ``BlockGenerator``).

    ``put``/``put_many`` wait while the buffer holds ``capacity`` records, so a fast source is
    slowed down instead of growing memory; :meth:`take_all` empties it and wakes them. With a
    write-ahead log, blocks are cut from the front instead (:meth:`peek`, then :meth:`drop` once
    the block is written), and while the log's writes fail the buffer is :meth:`pause`\ d: puts
    wait even with room, so the source is held back and nothing grows. Not thread-safe: the
    receiver and the batch allocation both run on the runtime's event loop.
    """

    def __init__(self, capacity: int = DEFAULT_MAX_BUFFERED_RECORDS) -> None:
        """Create an empty buffer of at most ``capacity`` records."""
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"maxBufferedRecords must be a positive int, got {capacity!r}; pass e.g. 100000")
        self.capacity = capacity
        self._records: list[Any] = []
        self._room: anyio.Event | None = None
        self._paused = False
        self.waits = 0

    def __len__(self) -> int:
        return len(self._records)

    @property
    def paused(self) -> bool:
        """Whether puts wait whatever the room (see :meth:`pause`)."""
        return self._paused

    def _full(self) -> bool:
        return self._paused or len(self._records) >= self.capacity

    async def put(self, record: Any) -> None:
        """Append ``record``, first waiting for room (and while paused); cancellable."""
        while self._full():
            await self._wait_for_room()
        self._records.append(record)

    async def put_many(self, records: Sequence[Any]) -> None:
        """Append ``records`` in order, waiting for room (and while paused) as often as needed; cancellable.

        On cancellation the records stored so far stay stored; the rest are not.
        """
        start, total = 0, len(records)
        while start < total:
            if self._full():
                await self._wait_for_room()
                continue
            room = self.capacity - len(self._records)
            self._records.extend(records[start:start + room])
            start += room

    async def _wait_for_room(self) -> None:
        self.waits += 1
        if self._room is None:
            self._room = anyio.Event()
        await self._room.wait()

    def _wake(self) -> None:
        if self._room is not None:
            self._room.set()
            self._room = None

    def take_all(self) -> list[Any]:
        """Every record stored so far, in order; the buffer is empty afterwards."""
        records, self._records = self._records, []
        self._wake()
        return records

    def peek(self) -> list[Any]:
        """Every record stored so far, in order, left in the buffer (a new list)."""
        return list(self._records)

    def drop(self, count: int) -> None:
        """Remove the ``count`` oldest records (a block of them was written)."""
        if count:
            del self._records[:count]
            self._wake()

    def pause(self) -> None:
        """Make every put wait, with room or not, until :meth:`resume`."""
        self._paused = True

    def resume(self) -> None:
        """Let puts store again (up to the capacity)."""
        if self._paused:
            self._paused = False
            self._wake()

    def __repr__(self) -> str:
        paused = " | paused" if self._paused else ""
        return f"<RecordBuffer [{len(self._records)}/{self.capacity} records{paused} | waited {self.waits}x]>"
