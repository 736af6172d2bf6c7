"""SignalShutdown and shutdown_signal: stop a context on SIGTERM or SIGINT (Spark's shutdown hook).

Spark registers a JVM shutdown hook that stops the StreamingContext, gracefully when
``spark.streaming.stopGracefullyOnShutdown`` is true. A Python driver is stopped by signals, so
here the hook is a handler for them, installed while a started context runs.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable, Sequence

import anyio
import anyio.lowlevel

from scheduler import library_logger

__all__ = ["SHUTDOWN_SIGNALS", "SignalShutdown", "shutdown_signal"]

SHUTDOWN_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
"""The signals a deployment stops a driver with (SIGTERM from a scheduler or container runtime, SIGINT from Ctrl-C)."""


class SignalShutdown:
    """Handlers for the shutdown signals that stop a context once, then step aside.

    On the first signal the previous handlers are put back at once (so a second signal does what
    it did before: Ctrl-C twice raises ``KeyboardInterrupt``, a second SIGTERM terminates), then
    ``stop`` runs on a thread of its own: the handler interrupts the main thread anywhere, maybe
    inside a call into the context that holds what the stop needs, so it only starts the stop. A
    program blocked in ``awaitTermination()`` returns once the context stopped.

    A signal that comes once the context stopped by other means (a stop from another thread, which
    cannot put the handlers back) goes to the handler that was there before, as if this one were gone.

    Args:
        stop: what to do on the first signal (a graceful or an immediate stop of the context).
        name: the context's name, for the log line.
        signals: the signals to handle.
        active: whether the context still runs (default: always).
    """

    def __init__(self, stop: Callable[[], None], name: str, signals: Sequence[signal.Signals] = SHUTDOWN_SIGNALS,
                 active: Callable[[], bool] = lambda: True) -> None:
        """Prepare the handlers; nothing is installed yet."""
        self._stop = stop
        self._active = active
        self.stopper: threading.Thread | None = None  # the thread the first signal started the stop on
        self._signals = tuple(signals)
        self._previous: dict[signal.Signals, Any] = {}
        self._found: dict[signal.Signals, Any] = {}  # the handlers install() replaced (kept when uninstalled)
        self._log = library_logger("aiodstream.streaming", component="SignalShutdown", context=name)

    @property
    def installed(self) -> bool:
        """Whether the handlers are in place."""
        return bool(self._previous)

    def install(self) -> bool:
        """Put the handlers in place; False (and nothing done) outside the main thread, where Python allows none."""
        if threading.current_thread() is not threading.main_thread():
            self._log.debug("not handling shutdown signals: the context was started outside the main thread")
            return False
        for signum in self._signals:
            self._previous[signum] = self._found[signum] = signal.signal(signum, self._handle)
        return True

    def uninstall(self) -> None:
        """Put the previous handlers back (a no-op when not installed, or outside the main thread)."""
        if not self._previous or threading.current_thread() is not threading.main_thread():
            return
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            if signal.getsignal(signum) == self._handle:  # else someone replaced ours: leave theirs
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        previous = self._found.get(signal.Signals(signum))
        self.uninstall()
        if not self._active():  # stopped already: the signal is the handler's that was there before ours
            if callable(previous) and previous is not self._handle:
                previous(signum, frame)
            elif signal.getsignal(signum) is signal.SIG_DFL:
                signal.raise_signal(signum)  # the default action, now in place (never a handler that calls us back)
            return
        self._log.warning("shutdown signal received: stopping the StreamingContext", signal=signal.Signals(signum).name)
        self.stopper = threading.Thread(target=self._stop, name="aiodstream-shutdown-stop")
        self.stopper.start()


class _SignalHub:
    """One receiver of a set of signals per event loop, shared by every :func:`shutdown_signal` waiting there.

    anyio's receivers replace one another on asyncio (the newest one gets the signal) and reset the handler to
    Python's default when they close: with a receiver per waiter, one SIGTERM reached only one of several contexts,
    and the host's own handlers were gone afterwards. The hub holds one receiver while anyone waits; one waiter at a
    time reads it (a cancelled reader hands over, nothing is lost: the receiver queues signals), every waiter gets each
    signal, and the handlers found before the receiver are put back when the last waiter leaves.
    """

    def __init__(self, signals: tuple[signal.Signals, ...]) -> None:
        self.waiters: list[list[int]] = []  # each waiter's signals (empty while it waits)
        self.reading = False
        self.changed = anyio.Event()
        self._previous = {signum: signal.getsignal(signum) for signum in signals}
        self._receiver_cm = anyio.open_signal_receiver(*signals)
        self.receiver = self._receiver_cm.__enter__()

    async def read(self) -> None:
        """Take the next signal and give it to every waiter (this task reads until then; the others wait)."""
        self.reading = True
        try:
            signum = int(await self.receiver.__anext__())
            for waiter in self.waiters:
                waiter.append(signum)
        finally:
            self.reading = False
            self.changed.set()  # the signal's waiters return; or, this reader cancelled, another one reads
            self.changed = anyio.Event()

    def close(self) -> None:
        """Close the receiver and put back the handlers found before it."""
        self._receiver_cm.__exit__(None, None, None)
        for signum, handler in self._previous.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)


_hubs: dict[tuple[anyio.lowlevel.EventLoopToken, tuple[signal.Signals, ...]], _SignalHub] = {}


async def shutdown_signal(*signals: int) -> int:
    """Wait for one of ``signals`` (default :data:`SHUTDOWN_SIGNALS`) and return it: an async host's shutdown.

    The signals are handled through anyio (the event loop's own signal handling, main thread
    only) for as long as anyone waits; cancel it to stop waiting. Every waiter in the loop gets
    each signal (one SIGTERM stops every context waiting on it), and once none waits the handlers
    that were there before are back.
    """
    wanted = tuple(sorted({signal.Signals(s) for s in signals or SHUTDOWN_SIGNALS}))
    key = (anyio.lowlevel.current_token(), wanted)
    hub = _hubs.get(key)
    if hub is None:
        hub = _hubs[key] = _SignalHub(wanted)
    mine: list[int] = []
    hub.waiters.append(mine)
    try:
        while not mine:
            if hub.reading:
                await hub.changed.wait()
            else:
                await hub.read()
        return mine[0]
    finally:
        hub.waiters.remove(mine)
        if not hub.waiters:
            del _hubs[key]
            hub.close()
