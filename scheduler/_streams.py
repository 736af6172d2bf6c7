"""Mailbox: the runtime's internal queues, which suspend a consumer only when there is nothing to take.

``MemoryObjectReceiveStream.receive`` yields to the event loop before it even looks at its
buffer, and again to wait: two loop iterations per item for a consumer that is usually idle. The
generator's inbox, the job queue and the listener bus's per-listener queues are fed by calls on
the same loop and consumed by the runtime's own tasks, so a deque with a list of parked consumers
does the job in one suspension, and none when items are queued. Consumers that loop over a
backlog yield every :data:`YIELD_EVERY` items themselves, so other tasks still run.
"""

from __future__ import annotations

import asyncio
import sys
import types
from collections import deque
from typing import Any, Awaitable, Generator, Generic, TypeVar

import anyio
import anyio.lowlevel
from sniffio import current_async_library_cvar
from sniffio import thread_local as _sniffio_thread

from ._loop_probe import ReadyProbe

__all__ = ["YIELD_EVERY", "Mailbox", "on_asyncio", "yield_now", "yield_to_ready"]

T = TypeVar("T")
D = TypeVar("D")

YIELD_EVERY = 64
"""How many queued items a consumer takes before it yields to other tasks anyway."""


class Mailbox(Generic[T]):
    """A FIFO for tasks of one event loop, unbounded or holding at most ``capacity`` items; any number of consumers.

    ``put_nowait`` never waits: it hands the item to a parked consumer if there is one (such an
    item never counts against the capacity, as with anyio's memory object streams), else queues
    it, else raises ``anyio.WouldBlock``. :meth:`put` waits for room instead. ``get`` returns at
    once when an item is queued, otherwise parks until one is put or the mailbox is closed. After
    :meth:`close`, consumers drain what is left and then get ``anyio.EndOfStream``.

    The capacity is exact with one consumer. With several, a consumer that takes an item already
    promised to a parked consumer it overtook lets one more item in until that consumer runs.
    """

    __slots__ = ("_capacity", "_closed", "_items", "_loop", "_putters", "_waiters", "_woken")

    def __init__(self, capacity: int | None = None) -> None:
        """Create an empty, open mailbox; ``capacity=None`` (the default) means unbounded."""
        if capacity is not None and (type(capacity) is not int or capacity < 1):
            raise ValueError(f"a mailbox capacity must be a positive int or None, got {capacity!r}")
        self._capacity = sys.maxsize if capacity is None else capacity
        self._items: deque[T] = deque()
        # Parked consumers, and producers parked in put() with their items, oldest first. Each
        # waits on a waiter (a loop future on asyncio) resolved once: a consumer's with None, a
        # producer's with True (its item was queued) or False (withdrawn by close()).
        self._waiters: deque[Any] = deque()
        self._putters: deque[tuple[Any, T]] = deque()
        # Consumers woken but not yet running: the items queued for them do not use capacity.
        self._woken = 0
        self._closed = False
        # The asyncio loop the waiters are made on, once a first one has found it (see
        # _waiter_and_loop): a mailbox serves the tasks of one event loop.
        self._loop: Any = None

    # -- producing --

    def put_nowait(self, item: T) -> None:
        """Hand ``item`` to a parked consumer, or queue it if there is room.

        Raises:
            anyio.ClosedResourceError: the mailbox is closed.
            anyio.WouldBlock: the mailbox is full and no consumer is parked.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # else cancelled while parked; it removes itself
                self._items.append(item)
                self._woken += 1
                waiter.set_result(None)
                return
        if len(self._items) - self._woken >= self._capacity:
            raise anyio.WouldBlock
        self._items.append(item)

    async def put(self, item: T) -> None:
        """Queue ``item``, waiting for room while the mailbox is full. Cancellable while waiting.

        Not a checkpoint when there is room. Producers waiting for room are served in order.

        Raises:
            anyio.ClosedResourceError: the mailbox is closed, or was closed while this waited
                (the item was then not queued).
        """
        if not self._putters:
            try:
                self.put_nowait(item)
                return
            except anyio.WouldBlock:
                pass
        elif self._closed:
            raise anyio.ClosedResourceError
        waiter, self._loop = _waiter_and_loop(self._loop)
        entry = (waiter, item)
        self._putters.append(entry)
        try:
            queued = await waiter
        except BaseException:
            if not waiter.done() or waiter.cancelled():  # still waiting: withdraw the item
                waiter.cancel()
                try:
                    self._putters.remove(entry)
                except ValueError:
                    pass  # already dropped as cancelled by close() or a consumer
            raise
        if not queued:
            raise anyio.ClosedResourceError

    def close(self) -> None:
        """Accept nothing more; wake every parked consumer so it can drain and finish.

        Producers waiting in :meth:`put` are withdrawn: their items are not queued and they get
        ``anyio.ClosedResourceError``.
        """
        if self._closed:
            return
        self._closed = True
        while self._waiters:
            self._wake_one()
        putters = self._putters
        while putters:
            waiter, _ = putters.popleft()
            if not waiter.done():
                waiter.set_result(False)

    # -- consuming --

    def poll(self, default: D) -> T | D:
        """The next item if one is queued, else ``default`` (whether or not the mailbox is closed).

        :meth:`get_nowait` without the exception: for a consumer draining a backlog, one call per
        item and none raised when it runs dry.
        """
        items = self._items
        if items:
            item = items.popleft()
            if self._putters:
                self._admit_putter()
            return item
        return default

    def take(self, limit: int) -> list[T]:
        """Up to ``limit`` queued items, oldest first, or an empty list: a consumer's backlog in one call (no waiting).

        :meth:`poll` once per item costs a call each; a backlog that fits is copied and cleared at once.
        """
        items = self._items
        if len(items) <= limit:
            taken = list(items)
            items.clear()
        else:
            popleft = items.popleft
            taken = [popleft() for _ in range(limit)]
        if self._putters:
            self._admit_putter()
        return taken

    def get_nowait(self) -> T:
        """The next item, if one is queued.

        Raises:
            anyio.WouldBlock: nothing is queued.
            anyio.EndOfStream: the mailbox is closed and empty.
        """
        items = self._items
        if items:
            item = items.popleft()
            if self._putters:
                self._admit_putter()
            return item
        if self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def get(self) -> T:
        """The next item; parks only when the mailbox is empty. Cancellable while parked.

        Not a checkpoint when an item is queued. An item put for a consumer that is cancelled
        before it runs stays queued for the next one.

        Raises:
            anyio.EndOfStream: the mailbox is closed and empty.
        """
        items = self._items
        while not items:
            if self._closed:
                raise anyio.EndOfStream
            waiter, self._loop = _waiter_and_loop(self._loop)
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    # Woken, then cancelled before running: pass the wake-up on so the item
                    # queued for us is not stranded.
                    self._woken -= 1
                    if items:
                        self._wake_one()
                else:
                    waiter.cancel()
                    try:
                        self._waiters.remove(waiter)
                    except ValueError:
                        pass  # a put already dropped it as cancelled
                raise
            self._woken -= 1
        item = items.popleft()
        if self._putters:
            self._admit_putter()
        return item

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                self._woken += 1
                waiter.set_result(None)
                return

    def _admit_putter(self) -> None:
        # A consumer made room: the oldest waiting producer's item goes in, in order.
        putters = self._putters
        while putters and len(self._items) - self._woken < self._capacity:
            waiter, item = putters.popleft()
            if not waiter.done():
                self._items.append(item)
                waiter.set_result(True)

    # -- introspection --

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def capacity(self) -> int | None:
        """The most items it holds, or ``None`` if unbounded."""
        return None if self._capacity == sys.maxsize else self._capacity

    @property
    def unclaimed(self) -> int:
        """Items queued that no consumer woken for them will take: what a consumer that comes now would find."""
        return len(self._items) - self._woken

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        putting = f" | {len(self._putters)} putting" if self._putters else ""
        return (f"<Mailbox [{len(self._items)} queued | {len(self._waiters)} waiting{putting}"
                f"{' | closed' if self._closed else ''}]>")


def on_asyncio() -> bool:
    """Whether the calling task runs on asyncio: ``sniffio.current_async_library() == "asyncio"``, cheaply.

    sniffio answers the same, but on asyncio (which, unlike trio, does not announce itself to
    sniffio) it runs an import statement and two lookups on every call; the runtime asks on
    every park.
    """
    name = _sniffio_thread.name or current_async_library_cvar.get()
    if name is not None:
        return name == "asyncio"
    try:
        return asyncio.current_task() is not None
    except RuntimeError:  # no event loop running in this thread
        return False


@types.coroutine
def _asyncio_yield() -> Generator[None, None, None]:
    # What asyncio.sleep(0) does, without its two layers of calls: a bare yield makes the task
    # reschedule itself behind everything already ready.
    yield


def yield_now() -> Awaitable[None]:
    """``anyio.lowlevel.checkpoint()``, with a short cut on asyncio; await the result.

    On asyncio anyio's checkpoint is ``asyncio.sleep(0)`` reached through four calls (one of them
    sniffio's); this is the same bare yield without them. Elsewhere it is anyio's checkpoint.
    """
    return _asyncio_yield() if on_asyncio() else anyio.lowlevel.checkpoint()


class _Ready:
    """An awaitable that is already done: awaiting it does not suspend."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # makes this a generator


_READY = _Ready()


def yield_to_ready(probe: ReadyProbe | None = None) -> Awaitable[None]:
    """Let every task that is ready to run go first, as :func:`yield_now` does; await the result.

    With ``probe`` (the running loop's, from :func:`~scheduler.ready_probe`) and no other callback
    ready, it returns at once instead: the yield would come straight back after an otherwise
    empty loop iteration. So it is then not a checkpoint: use it where the point is to let others
    run first (a consumer letting its producer queue more), not to offer a cancellation point.
    Without a probe it is :func:`yield_now`.
    """
    if probe is not None and not probe.others_ready():
        return _READY
    return yield_now()


def _new_waiter() -> Any:
    """A one-shot waiter with the Future surface the mailbox uses (``done``, ``set_result``, ``await``)."""
    # On asyncio a bare loop future: an anyio Event costs an asyncio Event, a future and two
    # layers of calls for every park, and parking is the mailbox's hot path. The test is
    # on_asyncio()'s, inlined; the future is built as the stock loop.create_future() builds
    # it, without that call: on a stock loop a park costs no Python call but this one.
    name = _sniffio_thread.name or current_async_library_cvar.get()
    if name is None:
        loop = _running_loop_or_none()
        if loop is None or _current_task(loop) is None:
            return _EventWaiter()
    elif name == "asyncio":
        loop = asyncio.get_running_loop()
    else:
        return _EventWaiter()
    if type(loop).create_future is _stock_create_future:
        return _Future(loop=loop)
    return loop.create_future()


def _waiter_and_loop(loop: Any) -> tuple[Any, Any]:
    """A new waiter, and the loop to make the next ones on directly (pass it back), or ``None`` to ask again.

    Finding out whether the calling task runs on asyncio, and on which loop, costs more than
    the future itself (``get_running_loop`` makes a ``getpid`` system call every time). An owner
    whose waiters all serve tasks of one event loop (a mailbox, a virtual clock) asks once and
    then makes futures on that loop directly while it runs (``loop.is_running()``, public and
    cheap). Such an owner serves one loop at a time: once that loop stops, the next waiter asks
    again, so a clock can serve one run after another.
    """
    if loop is not None and loop.is_running():
        return _Future(loop=loop), loop
    waiter = _new_waiter()
    if waiter.__class__ is _Future:
        loop = waiter.get_loop()
        if type(loop).create_future is _stock_create_future:  # else ask the loop every time
            return waiter, loop
    return waiter, None


_Future = asyncio.Future
_running_loop_or_none = asyncio._get_running_loop  # public despite the underscore: in asyncio.events.__all__
_current_task = asyncio.current_task
_stock_create_future = asyncio.BaseEventLoop.create_future


class _EventWaiter:
    """The backend-neutral waiter: a one-shot future over an anyio Event."""

    __slots__ = ("_cancelled", "_event", "_result")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._cancelled = False
        self._result: Any = None

    def done(self) -> bool:
        return self._cancelled or self._event.is_set()

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        if not self._event.is_set():
            self._cancelled = True

    def set_result(self, result: Any) -> None:
        self._result = result
        self._event.set()

    def __await__(self) -> Any:
        yield from self._event.wait().__await__()
        return self._result
