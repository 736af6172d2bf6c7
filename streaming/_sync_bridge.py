"""SyncBridge: a query runtime driven from blocking code, on an event loop in a thread of its own.

What lets pyspark's blocking ``start()``, ``awaitTermination()`` and ``stop()`` drive an async
runtime: anyio's blocking portal, its thread, and the runtime's ``async with`` entered through it.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Awaitable, Callable, ContextManager, TypeVar

import anyio.from_thread

from scheduler import StreamingError

from .runtime import QueryRuntime, RuntimeCore

__all__ = ["BridgeClosedError", "SyncBridge"]

T = TypeVar("T")


class BridgeClosedError(StreamingError, RuntimeError):
    """The bridge's event loop is not running (never opened, or closed): a call could not be made."""


class SyncBridge:
    """One runtime's event loop in a background thread, with calls into it from other threads.

    :meth:`open` starts the loop and enters the runtime's ``async with``; :meth:`call` runs a
    function there and waits for it; :meth:`close` leaves the ``async with`` and ends the loop.
    A call is accepted or refused (:class:`BridgeClosedError`) under a lock that :meth:`close`
    takes before ending the loop, so an accepted call always runs to its end.
    """

    def __init__(self) -> None:
        """An unopened bridge."""
        self._lock = threading.Lock()
        self._portal_cm: ContextManager[anyio.from_thread.BlockingPortal] | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._runtime_cm: ContextManager[QueryRuntime] | None = None
        self._loop_thread: int | None = None

    @property
    def is_open(self) -> bool:
        """Whether the loop runs and accepts calls."""
        return self._portal is not None

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on the bridge's event loop (a listener callback, say), where a blocking call would deadlock."""
        return self._loop_thread is not None and threading.get_ident() == self._loop_thread

    def open(self, runtime: QueryRuntime) -> None:
        """Start the event loop's thread and enter ``runtime``'s ``async with`` there (blocking)."""
        portal_cm = anyio.from_thread.start_blocking_portal()
        portal = portal_cm.__enter__()
        self._portal_cm = portal_cm
        try:
            self._loop_thread = portal.call(threading.get_ident)
            runtime_cm = portal.wrap_async_context_manager(runtime)
            runtime_cm.__enter__()
        except BaseException:
            self.close()  # ends the loop; the runtime's async with was not entered
            raise
        with self._lock:
            self._portal, self._runtime_cm = portal, runtime_cm

    def call(self, func: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``func(*args)`` on the loop and return its result (blocking).

        Raises:
            BridgeClosedError: the bridge is not open (never opened, or closed by then).
        """
        with self._lock:
            if self._portal is None:
                raise BridgeClosedError("the StreamingContext's event loop is not running")
            # Submitted under the lock: close() ends the loop only after this task, which then runs to its end.
            future = self._portal.start_task_soon(func, *args)
        return future.result()

    def start(self, runtime: QueryRuntime, *before: Callable[[QueryRuntime], Awaitable[None]]) -> None:
        """:meth:`open` with ``runtime``, run each ``before(runtime)`` on the loop, then ``runtime.start()``; closed again on a failure."""
        self.open(runtime)
        try:
            for call in before:
                self.call(call, runtime)
            self.call(runtime.start)
        except BaseException:
            self.close()
            raise

    def stop(self, runtime: QueryRuntime, *, graceful: bool) -> None:
        """Stop ``runtime`` on the loop (gracefully or at once), then :meth:`close` (blocking).

        Raises:
            StreamingStateError: called from a listener callback, which the stop would wait for (Spark's
                refusal); the runtime and its loop go on as if it had not been asked.
        """
        # Refused before anything is done: a refusal that still closed the bridge would stop the
        # runtime anyway, from the very callback the close waits for (until the listeners' exit timeout).
        RuntimeCore.refuse_stop_from_listener()
        try:
            self.call(functools.partial(runtime.stop, graceful=graceful))
        except BaseException as exc:
            # Interrupted while it waited (Ctrl-C in the program's own graceful stop): the runtime's exit, told why,
            # makes the stop under way immediate instead of waiting for its drain.
            self.close(exc)
            raise
        self.close()

    def close(self, error: BaseException | None = None) -> None:
        """Leave the runtime's ``async with`` (stopping a still-active runtime) and end the loop (blocking; idempotent).

        ``error``: what ended the caller's wait; the runtime's exit then stops it at once (a graceful stop under way
        becomes immediate), as leaving an ``async with`` on an error does.
        """
        with self._lock:
            portal_cm, runtime_cm = self._portal_cm, self._runtime_cm
            self._portal = self._portal_cm = self._runtime_cm = None
        try:
            if runtime_cm is not None:
                runtime_cm.__exit__(type(error) if error is not None else None, error,
                                    error.__traceback__ if error is not None else None)
        finally:
            if portal_cm is not None:
                portal_cm.__exit__(None, None, None)
