"""Mailbox: the runtime's internal queues, which suspend a consumer only when there is nothing to take.

``MemoryObjectReceiveStream.receive`` yields to the event loop before it even looks at its
buffer, and again to wait: two loop iterations per item for a consumer that is usually idle. The
generator's inbox and the job queue are unbounded, fed by synchronous ``put_nowait`` calls on the
same loop, and consumed by the runtime's own tasks, so a deque with a list of parked consumers
does the job in one suspension, and none when items are queued. Consumers that loop over a
backlog yield every :data:`YIELD_EVERY` items themselves, so other tasks still run.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

import anyio

__all__ = ["YIELD_EVERY", "Mailbox"]

T = TypeVar("T")

YIELD_EVERY = 64


class Mailbox(Generic[T]):
    """An unbounded FIFO for tasks of one event loop; any number of consumers.

    ``put_nowait`` never waits. ``get`` returns at once when an item is queued, otherwise parks
    until one is put or the mailbox is closed. After :meth:`close`, consumers drain what is left
    and then get ``anyio.EndOfStream``.
    """

    __slots__ = ("_closed", "_items", "_waiters")

    def __init__(self) -> None:
        """Create an empty, open mailbox."""
        self._items: deque[T] = deque()
        self._waiters: deque[anyio.Event] = deque()
        self._closed = False

    def put_nowait(self, item: T) -> None:
        """Queue ``item`` and wake one parked consumer.

        Raises:
            anyio.ClosedResourceError: the mailbox is closed.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        self._items.append(item)
        if self._waiters:
            self._waiters.popleft().set()

    def close(self) -> None:
        """Accept nothing more; wake every parked consumer so it can drain and finish."""
        self._closed = True
        while self._waiters:
            self._waiters.popleft().set()

    async def get(self) -> T:
        """The next item; parks only when the mailbox is empty. Cancellable while parked.

        Not a checkpoint when an item is queued.

        Raises:
            anyio.EndOfStream: the mailbox is closed and empty.
        """
        items = self._items
        while not items:
            if self._closed:
                raise anyio.EndOfStream
            event = anyio.Event()
            self._waiters.append(event)
            try:
                await event.wait()
            except BaseException:
                # Cancelled while parked: leave the queue, and if an item was handed to us,
                # pass the wake-up on so it is not stranded.
                if event.is_set():
                    if items and self._waiters:
                        self._waiters.popleft().set()
                else:
                    self._waiters.remove(event)
                raise
        return items.popleft()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"<Mailbox [{len(self._items)} queued | {len(self._waiters)} waiting{' | closed' if self._closed else ''}]>"
