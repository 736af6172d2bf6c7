"""ChangeSignal: a wake-up for tasks that re-check a condition whenever some state changed (a re-armable event)."""

from __future__ import annotations

import anyio

__all__ = ["ChangeSignal"]


class ChangeSignal:
    """Wakes every task waiting in :meth:`wait` at the next :meth:`notify`; waiters re-check their condition in a loop.

    An ``anyio.Event`` is made only when someone waits, so a :meth:`notify` with no waiter costs one
    comparison (it sits on the engine's hot paths: the manual clock, batch completion).
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        """Create a signal nobody waits on yet."""
        self._event: anyio.Event | None = None

    def notify(self) -> None:
        """Wake the tasks waiting now; later waits wait for the next notify."""
        if self._event is not None:
            self._event.set()
            self._event = None

    def armed(self) -> anyio.Event:
        """The event the next :meth:`notify` sets, made now if nobody waits yet.

        A waiter whose wait begins after a yield (in a task of its own) takes this before it checks
        its condition: a notify between the check and the wait then still wakes it.
        """
        if self._event is None:
            self._event = anyio.Event()
        return self._event

    async def wait(self) -> None:
        """Wait for the next :meth:`notify`."""
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
