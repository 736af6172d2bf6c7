"""WorkTracker: counts the runtime's work in flight, and wakes whoever waits for it to drain.

The JobGenerator counts the messages it is posted, the JobScheduler the batches it has not
finalised; a graceful stop and ``wait_until_idle`` wait for the count to reach zero (what Spark's
``JobScheduler.stop`` polls for with sleeps), and a graceful stop's timeout is measured from the
last time some work ended or advanced.
"""

from __future__ import annotations

import anyio

__all__ = ["WorkTracker"]


class WorkTracker:
    """A count of work started and not yet done, with a wait for zero. One event loop; not thread-safe."""

    __slots__ = ("_count", "_idle", "_moved")

    def __init__(self) -> None:
        """Start with nothing in flight."""
        self._count = 0
        self._idle: anyio.Event | None = None
        self._moved: anyio.Event | None = None

    @property
    def in_flight(self) -> int:
        """Units of work started and not done."""
        return self._count

    def started(self) -> None:
        """One more unit of work is in flight."""
        self._count += 1

    def done(self) -> None:
        """One unit of work ended; at zero, wake the waiters."""
        self._count -= 1
        if self._moved is not None:
            self._moved.set()
            self._moved = None
        if self._count == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None

    def advanced(self) -> None:
        """Work in flight moved on without ending (one job of a batch finished): wakes :meth:`wait_progress`."""
        if self._moved is not None:
            self._moved.set()
            self._moved = None

    async def wait_progress(self) -> None:
        """Wait until some work ends or advances (returns at once when nothing is in flight). Cancellable."""
        if not self._count:
            return
        if self._moved is None:
            self._moved = anyio.Event()
        await self._moved.wait()

    async def wait_idle(self) -> None:
        """Wait until nothing is in flight (returns at once when nothing is). Cancellable."""
        while self._count:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def __repr__(self) -> str:
        return f"<WorkTracker [{self._count} in flight]>"
