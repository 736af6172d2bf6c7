"""The posts of a bus under the BLOCK policy that wait for room in a listener's queue, and how a stop ends their wait."""

from __future__ import annotations

import functools

import anyio
import anyio.abc

from scheduler import Clock, Duration, run_with_timeout

from ._events import StreamingEvent
from ._listener_queue import ListenerQueue

__all__ = ["BlockedPosts"]


class BlockedPosts:
    """Waits for room in full listener queues, without a bound until :meth:`stopping`, then within a deadline.

    Once the stop of what posts began, a wait lasts at most the exit timeout (from the stop for the waits under way
    then, from their start for later ones); a listener whose queue stayed full that long is *stalled*: its events are
    dropped at once from then on, and the bus's stop does not wait for it again.
    """

    def __init__(self, clock: Clock) -> None:
        """Nothing waits; ``clock`` measures the deadlines."""
        self._clock = clock
        self._waiting: dict[anyio.CancelScope, ListenerQueue] = {}
        self.stalled: set[ListenerQueue] = set()
        """The listeners a wait gave up on."""
        self._timeout: Duration | None = None
        self._guard: anyio.CancelScope | None = None

    async def put(self, slot: ListenerQueue, event: StreamingEvent) -> None:
        """Queue ``event`` for ``slot``, waiting for room; dropped (and counted) for it if the wait is given up on."""
        if slot in self.stalled:
            slot.drop(event)
            return
        if self._timeout is not None:
            if not await run_with_timeout(self._clock, self._timeout, functools.partial(slot.put_waiting, event)):
                self.stalled.add(slot)
                slot.drop(event)
            return
        with anyio.CancelScope() as scope:
            self._waiting[scope] = slot
            try:
                await slot.put_waiting(event)
            finally:
                del self._waiting[scope]
        if scope.cancelled_caught:  # by the stop's deadline (see _give_up_on): the wait was given up on
            self.stalled.add(slot)
            slot.drop(event)

    def stopping(self, tg: anyio.abc.TaskGroup, timeout: Duration) -> None:
        """From now on a wait lasts at most ``timeout``; the waits under way get it from now (a task of ``tg``)."""
        if self._timeout is not None:
            return
        self._timeout = timeout
        if self._waiting:
            self._guard = anyio.CancelScope()
            tg.start_soon(self._give_up_on, dict(self._waiting), timeout, self._guard)

    def close(self) -> None:
        """The bus closed (the waits end with it): the guard of the waits under way at the stop ends too."""
        if self._guard is not None:
            self._guard.cancel()

    async def _give_up_on(self, waiting: dict[anyio.CancelScope, ListenerQueue], timeout: Duration,
                          guard: anyio.CancelScope) -> None:
        with guard:
            await self._clock.sleep(timeout)
            for post in waiting:
                if post in self._waiting:
                    post.cancel()  # the post marks its listener stalled if this ended its wait (not if room came first)
