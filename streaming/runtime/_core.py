"""RuntimeCore: the machinery every query runtime shares (the lifecycle half of Spark's ``StreamExecution``).

The task group a runtime lives in and the loop its listener bus belongs to, the one-way state,
the stop that runs once, the waiter ``await_termination`` reads, and services that live as long
as the runtime. The micro-batch and the continuous runtimes each hold one.
"""

from __future__ import annotations

import functools
import sys
import threading
from types import TracebackType
from typing import Any, Awaitable, Callable, Coroutine

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found,unused-ignore]

from listeners import StreamingListenerBus, current_listener
from scheduler import ChangeSignal, Clock, Duration, InvalidDurationError, JobFailedError, StreamingStateError, run_with_timeout

from ._state import StreamingContextState

__all__ = ["RuntimeCore", "exit_task_group", "run_until_stopped"]


START_WAIT_S = 30.0
"""How long a stop or an exit waits for a start in progress in another task (real time: a start's work is I/O)."""


class RuntimeCore:
    """A runtime's home (task group and loop), lifecycle state, stop-once, waiter and services.

    The runtime keeps what differs (how it starts, what a stop tears down, what a failure is);
    this object keeps what is the same. ``kind`` names the runtime in messages (``"runtime"``,
    ``"query"``).

    Attributes:
        state: INITIALIZED -> ACTIVE -> STOPPED; the runtime moves it.
        error: the failure :meth:`await_termination` raises, or ``None``; the runtime sets it
            and calls :meth:`wake`.
        stopped: whether the runtime has stopped for good (its stop finished, or its start failed).
    """

    def __init__(self, bus: StreamingListenerBus, clock: Clock, *, kind: str, log: Any) -> None:
        """A core for a runtime posting to ``bus``, timing waits on ``clock``, logging to ``log``."""
        self.bus = bus
        self.clock = clock
        self.kind = kind
        self._state = StreamingContextState.INITIALIZED
        # Set once a start began, and set off once it left INITIALIZED (ACTIVE, or STOPPED by a failed start).
        self._started: anyio.Event | None = None
        self._start_task: int | None = None  # the task that began the start (anyio's task id)
        self.error: JobFailedError | None = None
        self.stopped = False
        self._log = log
        self._tg: anyio.abc.TaskGroup | None = None
        self._stop_done: anyio.Event | None = None
        self._hurry: Callable[[], None] | None = None  # makes the graceful stop under way immediate (see begin_stop)
        self._changed = ChangeSignal()
        self._loop_token: anyio.lowlevel.EventLoopToken | None = None
        self._loop_thread: int | None = None

    # -- home: the task group everything runs in --

    @property
    def task_group(self) -> anyio.abc.TaskGroup | None:
        """The runtime's task group while inside its ``async with``, else ``None``."""
        return self._tg

    async def enter(self) -> None:
        """Open the task group in the caller's task (``__aenter__``).

        Raises:
            StreamingStateError: already entered.
        """
        if self._tg is not None:
            raise StreamingStateError(f"this {self.kind} is already entered; a {self.kind} has one home")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._loop_token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()

    async def exit(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
                   stop: Callable[[bool], Awaitable[None]]) -> bool | None:
        """Stop a still-active runtime with ``stop(graceful)`` and close the task group (``__aexit__``).

        A normal exit stops gracefully; an error or a cancellation in the host stops at once,
        shielded so the bookkeeping finishes. A stop under way elsewhere is waited for, and so is a
        start in progress in another task (see ``_wait_for_start``), whose ACTIVE runtime is then
        stopped: the block does not end with its runtime left running, its name claimed.
        """
        assert self._tg is not None
        try:
            await self._wait_for_start()
            if self._stop_done is not None and not self._stop_done.is_set():
                if exc is not None:  # an error or a cancellation in the host: a graceful stop under way is hurried
                    self._hurry_stop()
                await self._stop_done.wait()  # a stop is under way elsewhere
            elif self.state is StreamingContextState.ACTIVE:
                with anyio.CancelScope(shield=exc is not None):
                    await stop(exc is None)
            elif self.state is StreamingContextState.INITIALIZED:
                self.state = StreamingContextState.STOPPED
                self.bus.close()
                self.mark_stopped()
        finally:
            tg, self._tg = self._tg, None
            result = await exit_task_group(tg, exc_type, exc, tb)
        return result

    @property
    def state(self) -> StreamingContextState:
        """The runtime's state; leaving INITIALIZED ends a start in progress (a stop waiting for it goes on)."""
        return self._state

    @state.setter
    def state(self, value: StreamingContextState) -> None:
        self._state = value
        if value is not StreamingContextState.INITIALIZED and self._started is not None:
            self._started.set()

    def startable(self, home_hint: str) -> anyio.abc.TaskGroup:
        """The task group to start in, if the runtime may start now.

        Raises:
            StreamingStateError: already started or stopped (Spark's messages), or outside the
                ``async with`` (the message is ``home_hint``).
        """
        if self.state is StreamingContextState.ACTIVE:
            raise StreamingStateError("StreamingContext has already been started")
        if self.state is StreamingContextState.STOPPED:
            raise StreamingStateError("StreamingContext has already been stopped")
        if self._tg is None:
            raise StreamingStateError(home_hint)
        if self._started is not None:  # a start is in progress
            raise StreamingStateError("StreamingContext has already been started")
        self._started = anyio.Event()
        self._start_task = anyio.get_current_task().id
        return self._tg

    async def _wait_for_start(self) -> None:
        """Wait until a start in progress in another task leaves INITIALIZED, shielded, for at most ``START_WAIT_S``.

        Shielded, so that a stop or an exit asked in a cancelled scope still stops what the start
        makes ACTIVE; bounded, so that a start hung in storage that never answers does not hold
        the caller for good (past the bound it goes on as before the start: the start, if it ever
        ends, finds its runtime's group closed).

        Raises:
            StreamingStateError: called from the start's own task (a source's or listener's code the
                start runs), which would wait for itself.
        """
        started = self._started
        if started is None or started.is_set():
            return
        if anyio.get_current_task().id == self._start_task:
            raise StreamingStateError(f"this {self.kind} cannot be stopped from inside its own start() (a source's "
                                      "or listener's code the start runs): stop it once start() has returned")
        with anyio.CancelScope(shield=True), anyio.move_on_after(START_WAIT_S):
            await started.wait()

    # -- listeners (from any thread, as the query manager adds them) --

    def add_listener(self, listener: object, *, name: str | None = None, on_loop: bool | None = None) -> None:
        """Register a listener on the bus, on the runtime's loop while it runs (from any thread)."""
        self._on_loop(lambda: self.bus.add_listener(listener, name=name, on_loop=on_loop))

    def remove_listener(self, listener: object) -> None:
        """Unregister a listener, on the runtime's loop while it runs (from any thread)."""
        self._on_loop(lambda: self.bus.remove_listener(listener))

    def _on_loop(self, action: Callable[[], None]) -> None:
        # The bus belongs to the runtime's event loop: a call from another thread (a pyspark
        # program's main thread, the query manager) is handed to that loop while it runs.
        token = self._loop_token
        if token is None or threading.get_ident() == self._loop_thread or self.state is StreamingContextState.STOPPED:
            action()
            return
        try:
            anyio.from_thread.run_sync(action, token=token)
        except RuntimeError as exc:
            if "event loop" not in str(exc).lower() and "not running" not in str(exc).lower():
                raise
            action()  # the loop has ended meanwhile

    # -- stop, once --

    @staticmethod
    def refuse_stop_from_listener() -> None:
        """Spark's refusal of a stop from a listener callback, which the stop would wait for.

        Raises:
            StreamingStateError: called from a listener callback.
        """
        listener = current_listener()
        if listener is not None:
            raise StreamingStateError(
                f"Cannot stop StreamingContext within listener bus thread. (called from listener {listener!r})")

    async def begin_stop(self, *, graceful: bool = False, hurry: Callable[[], None] | None = None) -> bool:
        """Whether the caller performs the stop now; if so it must call :meth:`end_stop` in a ``finally``.

        Not started: the runtime is marked stopped (with a warning). Stopping elsewhere: waits
        for that stop. Stopped: a warning. The three answer ``False``. ``graceful``: the stop this
        begins drains; an immediate one asked for while it does calls ``hurry`` (once), which
        makes the drain end now, then waits for it like any other.
        """
        # A start in progress: it becomes ACTIVE (then this stops it) or STOPPED. Only then a wait (an ended start's
        # event would still checkpoint, and a cancelled scope would skip the stop): see _wait_for_start.
        await self._wait_for_start()
        if self.state is StreamingContextState.INITIALIZED:
            self._log.warning("StreamingContext has not been started yet")
            self.state = StreamingContextState.STOPPED
            self.bus.close()
            self.mark_stopped()
            return False
        if self._stop_done is not None:
            if self.state is StreamingContextState.STOPPED and self._stop_done.is_set():
                self._log.warning("StreamingContext has already been stopped")
            elif not graceful:
                self._hurry_stop()
            await self._stop_done.wait()
            return False
        if self.state is StreamingContextState.STOPPED:
            self._log.warning("StreamingContext has already been stopped")
            return False
        self._stop_done = anyio.Event()
        self._hurry = hurry if graceful else None
        return True

    def _hurry_stop(self) -> None:
        """Make the graceful stop under way immediate (once; nothing if none is under way)."""
        if self._hurry is not None:
            hurry, self._hurry = self._hurry, None
            self._log.warning("an immediate stop was asked for while a graceful one drains: stopping now")
            hurry()

    @property
    def stopping(self) -> bool:
        """Whether a stop has begun (it may have finished)."""
        return self._stop_done is not None

    def end_stop(self) -> None:
        """The stop begun with :meth:`begin_stop` finished: STOPPED, and every waiter wakes."""
        self.state = StreamingContextState.STOPPED
        self.mark_stopped()
        assert self._stop_done is not None
        self._hurry = None
        self._stop_done.set()

    def mark_stopped(self) -> None:
        """The runtime will run no more (a stop or a failed start ended)."""
        self.stopped = True
        self.wake()

    # -- waiting --

    def wake(self) -> None:
        """Something a waiter may be waiting for changed (a failure, a stop, progress)."""
        self._changed.notify()

    async def wait_changed(self) -> None:
        """Wait for the next :meth:`wake`."""
        await self._changed.wait()

    def changed_event(self) -> anyio.Event:
        """The event the next :meth:`wake` sets (taken before checking a condition whose wait begins in another task)."""
        return self._changed.armed()

    async def wait_stopped(self) -> None:
        """Wait until the runtime has stopped."""
        while not self.stopped:
            await self.wait_changed()

    async def _wait_stopped_or_error(self) -> None:
        while not self.stopped and self.error is None:
            await self.wait_changed()

    async def await_termination(self, timeout: Duration | None, *, failure_ends_wait: bool) -> bool:
        """Wait until the runtime stops (True) or ``timeout`` passes on the clock (False); a failure is sticky.

        ``failure_ends_wait``: a failure ends the wait at once (the DStream semantics, where the
        runtime goes on); otherwise a failed runtime is waited for until it has stopped.

        Raises:
            InvalidDurationError: a bad timeout.
            JobFailedError: the failure (latest, or the death cause), also after the stop.
        """
        if timeout is not None and (not isinstance(timeout, Duration) or timeout.milliseconds < 0):
            raise InvalidDurationError(f"timeout must be a non-negative Duration or None, got {timeout!r}")
        if not failure_ends_wait:
            if not self.stopped:
                await run_with_timeout(self.clock, timeout, self.wait_stopped)
        elif self.error is None and not self.stopped:
            await run_with_timeout(self.clock, timeout, self._wait_stopped_or_error)
        self.raise_error()
        return self.stopped

    def raise_error(self) -> None:
        """Raise the failure, if any (without the traceback of where it was first raised)."""
        if self.error is not None:
            raise self.error.with_traceback(None)

    # -- services --

    async def start_service(self, service: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """Start ``service(*args, task_status=...)`` in the task group; it is cancelled once the runtime stops.

        Returns what the service reported to ``task_status.started`` (the web UI reports its URL).

        Raises:
            StreamingStateError: not inside the runtime's ``async with``.
        """
        if self._tg is None:
            raise StreamingStateError(f"start_service() needs the {self.kind}'s task group: use 'async with {self.kind}:'")
        return await self._tg.start(run_until_stopped, service, args, self.wait_stopped)


async def run_until_stopped(service: Callable[..., Coroutine[Any, Any, Any]], args: tuple[Any, ...],
                            stopped: Callable[[], Awaitable[None]], *,
                            task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
    """Run ``service(*args, task_status=...)`` until ``stopped()`` returns, then cancel it.

    A component's ``start_service`` runs this in its own task group: a server that lives as
    long as the component (the web UI) reports ready through ``task_status``, and ends before
    the component leaves its ``async with``. A service that fails to start raises its own error (the web UI's
    ``OSError`` for a taken port), not a group around it.
    """
    try:
        async with anyio.create_task_group() as tg:
            value = await tg.start(functools.partial(service, *args))
            task_status.started(value)
            await stopped()
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        error = group.exceptions[0]
        error.__suppress_context__ = True
        raise error  # noqa: B904 - the group only wraps the service's one error


async def exit_task_group(tg: anyio.abc.TaskGroup, exc_type: type[BaseException] | None, exc: BaseException | None,
                          tb: TracebackType | None) -> bool | None:
    """Leave a component's own task group at the end of its ``async with`` block.

    The component's tasks end cleanly, so a group raised here only wraps what the body of
    ``async with`` raised: that is handed back as it was (a failed start raises its own error,
    not a group around it).
    """
    try:
        return await tg.__aexit__(exc_type, exc, tb)
    except BaseExceptionGroup as group:
        if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
            exc.__suppress_context__ = True
            raise exc  # noqa: B904 - the group is only a wrapper around exc
        raise
