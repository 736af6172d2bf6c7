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
import functools
import threading
import weakref
from collections import deque
from concurrent.futures import CancelledError as FutureCancelledError
from concurrent.futures import Future
from queue import Empty, SimpleQueue
from typing import Any, Callable, Generic, TypeVar

import anyio

from ._streams import on_asyncio

__all__ = ["Handover", "WorkerThreads"]

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
        if isinstance(exc, StopIteration):
            # An asyncio future refuses StopIteration (before Python 3.12 with a TypeError, and
            # its caller would wait forever): the caller gets it as the cause of a RuntimeError,
            # as from a coroutine that let it out.
            error = RuntimeError(f"the call raised {type(exc).__name__}, which cannot be raised into a future")
            error.__cause__ = exc
            exc = error
        waiter.set_exception(exc)


def _cancel(waiter: asyncio.Future[Any]) -> None:
    waiter.cancel()


class _Crew:
    """One set of a pool's threads (a pool starts a second set at the interpreter's exit): their queue, how many were
    started, and how many are done with their last call and not yet claimed by a new one.

    A thread starts only when a call finds none free: a pool of a huge size (``concurrentJobs``) makes as many
    threads as calls ever ran at once, not its size.
    """

    __slots__ = ("calls", "free", "idle", "started")

    def __init__(self) -> None:
        self.calls: SimpleQueue[_Call | None] = SimpleQueue()
        # A token per thread done with its call and not claimed since. A thread adds its own (``free``: one atomic
        # append, no lock, before its caller hears back); a call queued takes one, under the pool's lock.
        self.idle: deque[None] = deque()
        self.free: Callable[[], None] = functools.partial(self.idle.append, None)
        self.started = 0


def _serve(crew: _Crew) -> None:
    # A worker's loop. It holds its crew, not the pool: a pool nobody holds any more is
    # collected, and its finalizer ends these threads.
    get, free = crew.calls.get, crew.free
    while True:
        call = get()
        if call is None:
            return
        _run(*call, free)
        call = None  # nothing of a finished call stays referenced while the thread waits


def _run(func: Callable[..., Any], args: tuple[Any, ...], loop: Any, waiter: Any, free: Callable[[], None]) -> None:
    if loop is None:
        waiter.run(func, args, free)
        return
    if waiter.done():
        free()
        return  # abandoned while queued: dropped
    try:
        value = func(*args)
    except BaseException as exc:
        settle: Callable[[Any, Any], None] = _fail
        value = exc
    else:
        settle = _succeed
    free()
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

    def run(self, func: Callable[..., T], args: tuple[Any, ...], free: Callable[[], None]) -> None:
        """On a thread: the call, then ``free`` (the thread takes another), then its caller told."""
        future = self.future
        if future is not None:
            if not future.set_running_or_notify_cancel():
                free()
                return  # cancelled while queued
            failure: BaseException | None = None
            try:
                result = func(*args)
            except BaseException as exc:
                failure = exc
            free()
            if failure is None:
                future.set_result(result)
            else:
                future.set_exception(failure)
            return
        if self.cancelled:
            free()
            return
        try:
            self.value, self.ok = func(*args), True
        except BaseException as exc:
            self.value = exc
        free()
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


_DROPPED: Any = object()
"""A handover call's outcome when shutdown dropped it while queued: its caller gets a cancellation."""


class Handover:
    """Lets the event loop's thread give one of its :meth:`WorkerThreads.run` calls the GIL and take its result back.

    Flat out, an event loop gives up the GIL only for an instant at each selector poll, and each
    such release restarts the 5 ms a waiting thread allows the holder (CPython's switch interval):
    a worker woken for a call can wait for the GIL for as long as the loop stays busy, woken and
    put back to sleep at every poll, and when the call is done it waits again to finish after
    waking the loop. :meth:`wait` makes the switch the interpreter fails to make: it blocks the
    loop's thread, with the GIL released, until the call has run (at most ``timeout``); a call
    that ended meanwhile hands its result to the loop's thread, which settles the caller's wait
    itself, and its worker goes back to waiting for calls without waking the loop.

    One per caller that runs a call at a time (a handover serves the call it was last given to
    :meth:`WorkerThreads.run` until that one ends); ``started`` tells whether that call has begun.
    """

    __slots__ = ("_awaiting", "_ended", "_finished", "_lock", "_loop_waits", "_outcome", "started")

    def __init__(self) -> None:
        """Serving no call yet."""
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._ended.set()
        self.started = True
        self._finished = True
        self._loop_waits = False
        self._awaiting: Any = None  # the caller's asyncio future, or its trio runner
        # A call that ended while the loop's thread waited: (its caller, ok, value), for that thread.
        self._outcome: tuple[Any, bool, Any] | None = None

    def _arm(self, awaiting: Any) -> None:
        # Under the lock, as the worker's end: the end of the last call (its _ended.set()) never
        # lands after this call's clear, and a call's outcome always goes to its own caller.
        with self._lock:
            if not self._finished:
                raise RuntimeError("a handover serves one call at a time")
            self._ended.clear()
            self.started = self._finished = self._loop_waits = False
            self._awaiting = awaiting

    def _disarm(self) -> None:  # the call was never queued
        with self._lock:
            self._finished = self.started = True
            self._awaiting = None
            self._ended.set()

    def run(self, func: Callable[..., Any], args: tuple[Any, ...], free: Callable[[], None]) -> None:
        """On the worker: ``func(*args)``, ``free`` (the thread takes another call), then its result to the loop's thread
        if it waits, else a wake-up of the caller."""
        self.started = True
        awaiting = self._awaiting
        if awaiting.cancelled if isinstance(awaiting, _Runner) else awaiting.done():
            free()
            with self._lock:  # abandoned while queued: dropped, and nobody to wake
                self._finished = True
                self._awaiting = None
                self._ended.set()
            return
        try:
            value, ok = func(*args), True
        except BaseException as exc:
            value, ok = exc, False
        free()
        self._end(awaiting, ok, value)

    def drop(self) -> None:
        """On shutdown, for a call still queued: its caller gets a cancellation (never run)."""
        self.started = True
        self._end(self._awaiting, False, _DROPPED)

    def _end(self, awaiting: Any, ok: bool, value: Any) -> None:
        # The outcome travels with its caller, never through the handover's fields: once
        # _finished is set the loop may give the handover its next call.
        with self._lock:
            self._finished = True
            self._awaiting = None
            wake = not self._loop_waits
            if not wake:
                self._outcome = (awaiting, ok, value)  # the waiting loop's thread settles it
            self._ended.set()  # that thread takes the GIL once this one blocks again
        if wake:
            _wake_loop(awaiting, ok, value)

    def wait(self, timeout: float) -> bool:
        """On the loop's thread: block until the call has run, at most ``timeout`` seconds; whether it did.

        The GIL is released meanwhile. A call that ended within the wait is settled here (its caller
        resumes at its next step, as if woken), and its worker did not wake the loop.
        """
        with self._lock:
            if self._finished:
                return False  # ended before (its worker wakes the loop), or nothing runs
            self._loop_waits = True
        self._ended.wait(timeout)
        with self._lock:
            self._loop_waits = False
            outcome, self._outcome = self._outcome, None  # left to us by a call that ended while we waited
        if outcome is None:
            return False  # still running (its worker wakes the loop), or dropped unrun (nobody waits)
        _settle(*outcome)
        return True


def _settle(awaiting: Any, ok: bool, value: Any) -> None:
    """Settle a handover call's caller (on the loop's thread)."""
    if isinstance(awaiting, _Runner):
        awaiting.value, awaiting.ok = (FutureCancelledError() if value is _DROPPED else value), ok
        awaiting.done.set()
    elif ok:
        _succeed(awaiting, value)
    elif value is _DROPPED:
        _cancel(awaiting)
    else:
        _fail(awaiting, value)


def _wake_loop(awaiting: Any, ok: bool, value: Any) -> None:
    """Have a handover call's caller settled on its loop (from the worker, or a shutdown's thread)."""
    if isinstance(awaiting, _Runner):
        awaiting.value, awaiting.ok = (FutureCancelledError() if value is _DROPPED else value), ok
        awaiting._wake()
        return
    loop = awaiting.get_loop()
    try:
        loop.call_soon_threadsafe(_settle, awaiting, ok, value)
    except RuntimeError:  # the loop is closed: nobody waits for the result
        pass


def _stop(crew: _Crew) -> None:
    for _ in range(crew.started):
        crew.calls.put(None)


_live: weakref.WeakSet[WorkerThreads] = weakref.WeakSet()
_exiting = False  # the interpreter's exit began: a pool made from now on starts daemon threads


def _at_exit() -> None:
    # Before the interpreter joins its non-daemon threads (as concurrent.futures does): idle
    # workers end, a running call finishes first, and calls already queued still run. Unlike
    # concurrent.futures, a pool still takes calls afterwards, on daemon threads the interpreter
    # does not wait for: the atexit module's handlers run only after this join, and one may stop
    # a still-running context gracefully, whose last batches run on its pools (refused, they
    # were lost). A context nobody stops still lets the process exit, also when it makes a pool
    # afterwards (its first generation, a listener's first trip): that pool's threads are daemons.
    global _exiting
    _exiting = True
    for pool in list(_live):
        pool._at_interpreter_exit()


threading._register_atexit(_at_exit)  # type: ignore[attr-defined]


class WorkerThreads:
    """``size`` threads running blocking calls in submission order, for event-loop tasks and for threads.

    :meth:`run` waits for a call without blocking the event loop: on asyncio the call travels as
    a tuple with the loop's future, and the thread settles the future with one
    ``call_soon_threadsafe``; on trio the thread wakes the task through the run's token.
    :meth:`submit` is for callers that are not tasks: it returns a ``concurrent.futures.Future``.

    The threads start with the first call and end after :meth:`shutdown` once their current calls
    do; a call still queued then is dropped and its caller gets a cancellation. They are not
    daemons: at interpreter exit they finish their calls (as ``ThreadPoolExecutor``'s do). A call
    made after that (an ``atexit`` handler's graceful stop) runs on daemon threads started for it.
    """

    def __init__(self, size: int, name: str) -> None:
        """Threads named ``{name}_0`` .. ``{name}_{size - 1}`` at most, each started when a call finds no thread free."""
        if type(size) is not int or size < 1:
            raise ValueError(f"a worker pool needs a positive int of threads, got {size!r}")
        self.size = size
        self.name = name
        self._threads: list[threading.Thread] = []  # every thread started (a pool may start a second set at exit)
        self._serving = False  # threads serve self._crew's calls
        self._daemon = False  # new threads are daemons (after the interpreter's exit began: nobody joins them)
        # Held while a call is queued, so that no call goes in behind the threads' end (shutdown).
        self._lock = threading.Lock()
        self._crew = _Crew()
        self._shut = False
        self._ended = False
        self._finalizer: weakref.finalize | None = None  # type: ignore[type-arg]
        _live.add(self)  # before _exiting is read: a pool _at_exit does not see reads it set
        if _exiting:
            self._daemon = True

    def _put(self, call: _Call) -> None:
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._enqueue(call)

    def _enqueue(self, call: _Call) -> None:
        # Under the lock, the pool not shut: the call claims a free thread, else starts one if the size allows (else it
        # waits for the first thread done).
        crew = self._crew
        if crew.idle:
            crew.idle.pop()
        elif crew.started < self.size:
            self._start_thread(crew)
        crew.calls.put(call)

    def _start_thread(self, crew: _Crew) -> None:
        # Under the lock: the call being queued found no thread free.
        n = crew.started
        thread = threading.Thread(target=_serve, args=(crew,), name=f"{self.name}_{n}", daemon=self._daemon)
        thread.start()
        crew.started = n + 1
        self._threads.append(thread)
        if not self._serving:
            self._serving = True
            # A pool dropped without a shutdown still ends its threads once collected.
            self._finalizer = weakref.finalize(self, _stop, crew)
            self._finalizer.atexit = False

    async def run(self, func: Callable[..., T], *args: Any, abandon_on_cancel: bool = True,
                  handover: Handover | None = None) -> T:
        """``func(*args)`` on one of the threads; its result, or its exception raised here.

        With ``abandon_on_cancel`` a cancelled caller stops waiting at once: a call already running
        goes on in its thread, a call still queued is dropped. Without, a cancelled caller waits for
        the call to end (and then sees the cancellation). With ``handover``, the loop's thread may
        wait for the call and take its result (:meth:`Handover.wait`).

        Raises:
            RuntimeError: the pool was shut down, or ``handover`` still serves another call; or the
                call raised ``StopIteration`` (its cause), which a future cannot carry.
        """
        if not on_asyncio():
            return await self._run_on_trio(func, args, abandon_on_cancel, handover)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[T] = loop.create_future()
        call: _Call = (func, args, loop, waiter) if handover is None else (func, args, None, handover)
        with self._lock:  # _put, with the handover armed under the same lock
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if handover is not None:
                handover._arm(waiter)
            self._enqueue(call)
        if abandon_on_cancel:
            return await waiter
        with anyio.CancelScope(shield=True):
            result = await waiter
        return result

    async def _run_on_trio(self, func: Callable[..., T], args: tuple[Any, ...], abandon_on_cancel: bool,
                           handover: Handover | None) -> T:
        import trio  # only reached on trio, which is an optional dependency

        done = trio.Event()
        runner: _Runner[T] = _Runner(token=trio.lowlevel.current_trio_token(), done=done)
        if handover is not None:
            handover._arm(runner)
            try:
                self._put((func, args, None, handover))
            except RuntimeError:
                handover._disarm()
                raise
        else:
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
        calls = self._crew.calls
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

    def _end_threads(self) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
            self._retire()

    def _retire(self) -> None:
        # Under the lock: no call is queued behind the threads' end.
        if self._serving:
            self._serving = False
            if self._finalizer is not None:
                self._finalizer.detach()
            _stop(self._crew)

    def _at_interpreter_exit(self) -> None:
        """The interpreter's exit began: the threads end once the calls queued so far have run (it joins them); a later
        call starts a new set of daemon threads on a new queue."""
        with self._lock:
            self._daemon = True
            if not self._ended and self._serving:
                self._retire()
                self._crew = _Crew()

    @property
    def threads(self) -> list[threading.Thread]:
        """The threads started so far (alive or ended)."""
        return list(self._threads)

    def __repr__(self) -> str:
        state = "shut down" if self._shut else ("running" if self._serving else "idle")
        return f"<WorkerThreads {self.name!r} [{state} | {len(self._threads)}/{self.size} threads | {self._crew.calls.qsize()} queued]>"
