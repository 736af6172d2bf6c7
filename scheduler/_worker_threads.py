"""WorkerThreads: a few threads that run blocking calls for the event loop, each call one wake-up each way.

Spark Streaming's job threads (``JobScheduler``'s pool of ``spark.streaming.concurrentJobs``) run
blocking work; the event loop waits for them. ``ThreadPoolExecutor.submit`` plus
``asyncio.wrap_future`` does that through two futures, a ``threading.Condition`` each way and a
chain of callbacks: about 160,000 instructions per call before the work itself, most of a no-op
batch. Here a call is a tuple on a ``SimpleQueue`` and the loop's own future, which the thread
settles with one ``call_soon_threadsafe``: about 60,000.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from concurrent.futures import CancelledError as FutureCancelledError
from concurrent.futures import Future
from queue import Empty, SimpleQueue
from typing import Any, Callable, Generic, TypeVar

import anyio

from ._streams import on_asyncio

__all__ = ["WorkerThreads"]

T = TypeVar("T")

# A queued call: (func, args, loop, waiter). With a loop, the waiter is that loop's future and the
# thread settles it through the loop; without, the waiter is a _Runner that runs the call and
# reports it its own way (a concurrent future, a trio task). None asks a thread to end.
_Call = tuple[Callable[..., Any], tuple[Any, ...], Any, Any]


def _succeed(waiter: asyncio.Future[Any], value: Any) -> None:
    if not waiter.done():  # else its caller stopped waiting (cancelled)
        waiter.set_result(value)


def _fail(waiter: asyncio.Future[Any], exc: BaseException) -> None:
    if not waiter.done():
        waiter.set_exception(exc)


def _cancel(waiter: asyncio.Future[Any]) -> None:
    waiter.cancel()


def _serve(calls: SimpleQueue[_Call | None]) -> None:
    # A worker's loop. It holds the queue, not the pool: a pool nobody holds any more is
    # collected, and its finalizer ends these threads.
    get = calls.get
    while True:
        call = get()
        if call is None:
            return
        _run(*call)
        call = None  # nothing of a finished call stays referenced while the thread waits


def _run(func: Callable[..., Any], args: tuple[Any, ...], loop: Any, waiter: Any) -> None:
    if loop is None:
        waiter.run(func, args)
        return
    if waiter.done():
        return  # abandoned while queued: dropped
    try:
        value = func(*args)
    except BaseException as exc:
        settle: Callable[[Any, Any], None] = _fail
        value = exc
    else:
        settle = _succeed
    try:
        loop.call_soon_threadsafe(settle, waiter, value)
    except RuntimeError:  # the loop is closed: nobody waits for the result
        pass


class _Runner(Generic[T]):
    """How a call made without an asyncio waiter reports: to a concurrent future, or to a trio task."""

    __slots__ = ("cancelled", "done", "future", "ok", "token", "value")

    def __init__(self, future: Future[T] | None = None, token: Any = None, done: Any = None) -> None:
        self.future = future
        self.token = token  # trio: the run's token and the Event its task waits on
        self.done = done
        self.cancelled = False
        self.ok = False
        self.value: Any = None

    def run(self, func: Callable[..., T], args: tuple[Any, ...]) -> None:
        future = self.future
        if future is not None:
            if not future.set_running_or_notify_cancel():
                return  # cancelled while queued
            try:
                future.set_result(func(*args))
            except BaseException as exc:
                future.set_exception(exc)
            return
        if self.cancelled:
            return
        try:
            self.value, self.ok = func(*args), True
        except BaseException as exc:
            self.value = exc
        self._wake()

    def drop(self) -> None:
        """The pool shut down before a thread took the call: its caller gets a cancellation."""
        if self.future is not None:
            self.future.cancel()
            return
        self.value = FutureCancelledError()
        self._wake()

    def _wake(self) -> None:
        import trio  # only a trio caller makes a runner with a token

        try:
            self.token.run_sync_soon(self.done.set)
        except trio.RunFinishedError:  # the run ended meanwhile: nobody waits
            pass


def _stop(calls: SimpleQueue[_Call | None], threads: int) -> None:
    for _ in range(threads):
        calls.put(None)


_live: weakref.WeakSet[WorkerThreads] = weakref.WeakSet()


def _at_exit() -> None:
    # Before the interpreter joins its non-daemon threads (as concurrent.futures does): idle
    # workers end, a running call finishes first, and calls already queued still run.
    for pool in list(_live):
        pool._end_threads(refuse_more=True)


threading._register_atexit(_at_exit)  # type: ignore[attr-defined]


class WorkerThreads:
    """``size`` threads running blocking calls in submission order, for event-loop tasks and for threads.

    :meth:`run` waits for a call without blocking the event loop: on asyncio the call travels as
    a tuple with the loop's future, and the thread settles the future with one
    ``call_soon_threadsafe``; on trio the thread wakes the task through the run's token.
    :meth:`submit` is for callers that are not tasks: it returns a ``concurrent.futures.Future``.

    The threads start with the first call and end after :meth:`shutdown` once their current calls
    do; a call still queued then is dropped and its caller gets a cancellation. They are not
    daemons: at interpreter exit they finish their calls (as ``ThreadPoolExecutor``'s do).
    """

    def __init__(self, size: int, name: str) -> None:
        """Threads named ``{name}_0`` .. ``{name}_{size - 1}``, started on first use."""
        if type(size) is not int or size < 1:
            raise ValueError(f"a worker pool needs a positive int of threads, got {size!r}")
        self.size = size
        self.name = name
        self._calls: SimpleQueue[_Call | None] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        # Held while a call is queued, so that no call goes in behind the threads' end (shutdown).
        self._lock = threading.Lock()
        self._shut = False
        self._ended = False
        self._finalizer: weakref.finalize | None = None  # type: ignore[type-arg]
        _live.add(self)

    def _put(self, call: _Call) -> None:
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if not self._threads:
                self._start()
            self._calls.put(call)

    def _start(self) -> None:
        for n in range(self.size):
            thread = threading.Thread(target=_serve, args=(self._calls,), name=f"{self.name}_{n}")
            thread.start()
            self._threads.append(thread)
        # A pool dropped without a shutdown still ends its threads once collected.
        self._finalizer = weakref.finalize(self, _stop, self._calls, self.size)
        self._finalizer.atexit = False

    async def run(self, func: Callable[..., T], *args: Any, abandon_on_cancel: bool = True) -> T:
        """``func(*args)`` on one of the threads; its result, or its exception raised here.

        With ``abandon_on_cancel`` a cancelled caller stops waiting at once: a call already running
        goes on in its thread, a call still queued is dropped. Without, a cancelled caller waits for
        the call to end (and then sees the cancellation).

        Raises:
            RuntimeError: the pool was shut down.
        """
        if not on_asyncio():
            return await self._run_on_trio(func, args, abandon_on_cancel)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[T] = loop.create_future()
        with self._lock:  # _put, inline: once per job
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if not self._threads:
                self._start()
            self._calls.put((func, args, loop, waiter))
        if abandon_on_cancel:
            return await waiter
        with anyio.CancelScope(shield=True):
            result = await waiter
        return result

    async def _run_on_trio(self, func: Callable[..., T], args: tuple[Any, ...], abandon_on_cancel: bool) -> T:
        import trio  # only reached on trio, which is an optional dependency

        done = trio.Event()
        runner: _Runner[T] = _Runner(token=trio.lowlevel.current_trio_token(), done=done)
        self._put((func, args, None, runner))
        if abandon_on_cancel:
            try:
                await done.wait()
            except trio.Cancelled:
                runner.cancelled = True  # dropped if still queued; a running call goes on
                raise
        else:
            with anyio.CancelScope(shield=True):
                await done.wait()
        if runner.ok:
            return runner.value  # type: ignore[no-any-return]
        raise runner.value

    def submit(self, func: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``func(*args)`` for a thread and return its future (for callers that are not event-loop tasks).

        Raises:
            RuntimeError: the pool was shut down.
        """
        future: Future[T] = Future()
        self._put((func, args, None, _Runner(future)))
        return future

    def shutdown(self, *, drop_queued: bool = True) -> None:
        """Take no more calls; end the threads once their current calls end (and, with ``drop_queued=False``, the
        calls queued before this). Does not wait. Idempotent.

        With ``drop_queued`` (the default, ``ThreadPoolExecutor.shutdown(cancel_futures=True)``) the queued
        calls are dropped and their callers get a cancellation.
        """
        with self._lock:
            if self._shut:
                return
            self._shut = True
        calls = self._calls
        while drop_queued:
            try:
                call = calls.get_nowait()
            except Empty:
                break
            if call is None:
                continue
            _, _, loop, waiter = call
            if loop is None:
                waiter.drop()
            else:
                try:
                    loop.call_soon_threadsafe(_cancel, waiter)
                except RuntimeError:  # the loop is closed: nobody waits
                    pass
        self._end_threads()

    def _end_threads(self, *, refuse_more: bool = False) -> None:
        with self._lock:
            if refuse_more:
                self._shut = True
            if self._ended:
                return
            self._ended = True
            threads = len(self._threads)
            if self._finalizer is not None:
                self._finalizer.detach()
            # Under the lock: no call is queued behind these.
            _stop(self._calls, threads)

    @property
    def threads(self) -> list[threading.Thread]:
        """The threads started so far (alive or ended)."""
        return list(self._threads)

    def __repr__(self) -> str:
        state = "shut down" if self._shut else ("idle" if not self._threads else "running")
        return f"<WorkerThreads {self.name!r} [{state} | {len(self._threads)}/{self.size} threads | {self._calls.qsize()} queued]>"
