"""SignalShutdown and shutdown_signal: stop a context on SIGTERM or SIGINT (Spark's shutdown hook).

Spark registers a JVM shutdown hook that stops the StreamingContext, gracefully when
``spark.streaming.stopGracefullyOnShutdown`` is true. A Python driver is stopped by signals, so
here the hook is a handler for them, installed while a started context runs.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from types import FrameType
from typing import Any, Callable, Sequence

import anyio
import anyio.lowlevel
import sniffio

from scheduler import library_logger

__all__ = ["SHUTDOWN_SIGNALS", "SignalShutdown", "shutdown_signal"]

SHUTDOWN_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
"""The signals a deployment stops a driver with (SIGTERM from a scheduler or container runtime, SIGINT from Ctrl-C)."""


class SignalShutdown:
    """Handlers for the shutdown signals that stop a context once, then step aside.

    On the first signal the previous handlers are put back at once, then ``stop`` runs on a thread
    of its own: the handler interrupts the main thread anywhere, maybe inside a call into the
    context that holds what the stop needs, so it only starts the stop. A program blocked in
    ``awaitTermination()`` returns once the context stopped. A second signal while that stop runs
    calls ``hurry`` (on a thread of its own: an immediate stop, which ends a graceful stop's
    drain), then does what it did before: Ctrl-C twice raises ``KeyboardInterrupt`` (pyspark's
    handler cancels the Spark jobs first), a second SIGTERM terminates.

    A signal that comes once the context stopped by other means (a stop from another thread, which
    cannot put the handlers back) goes to the handler that was there before, as if this one were gone;
    a stop from another thread also makes the handlers let go of the context (see :meth:`uninstall`).

    Args:
        stop: what to do on the first signal (a graceful or an immediate stop of the context).
        name: the context's name, for the log line.
        signals: the signals to handle.
        active: whether the context still runs (default: always).
        hurry: what a second signal does while the stop runs, before what it did before (default: nothing more).
    """

    def __init__(self, stop: Callable[[], None], name: str, signals: Sequence[signal.Signals] = SHUTDOWN_SIGNALS,
                 active: Callable[[], bool] = lambda: True, hurry: Callable[[], None] | None = None) -> None:
        """Prepare the handlers; nothing is installed yet."""
        self._stop = stop
        self._active = active
        self._hurry = hurry
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
        """Put the handlers in place; False (and nothing done) outside the main thread, where Python allows none.

        Handlers of contexts stopped since on other threads are taken out first, so this one is installed over the
        handlers that were there before them.
        """
        if threading.current_thread() is not threading.main_thread():
            self._log.debug("not handling shutdown signals: the context was started outside the main thread")
            return False
        _put_back_disarmed()
        for signum in self._signals:
            self._previous[signum] = self._found[signum] = signal.signal(signum, self._handle)
        return True

    def uninstall(self) -> None:
        """Put the previous handlers back (a no-op when not installed).

        Outside the main thread (a stop from a job's or another thread) Python allows no handler to be set: the
        handlers are disarmed instead. They drop ``stop`` and ``active`` (and the context those hold), pass every
        signal to the handlers found at install, and are taken out at the next install or uninstall of any
        SignalShutdown on the main thread, as Spark removes its shutdown hook from whichever thread stops.
        """
        if not self._previous:
            return
        if threading.current_thread() is not threading.main_thread():
            self._disarm()
            return
        self._put_back()
        self._previous = {}  # where someone replaced ours: theirs is left in place
        _disarmed.discard(self)
        _put_back_disarmed()

    def _disarm(self) -> None:
        # Order matters against a signal on the main thread now: _handle reads active first, so once it is False
        # no stop starts; the stop itself is dropped after (a handler already past the check starts a no-op).
        self._active = _stopped
        self._stop = _no_stop
        _disarmed.add(self)

    def _put_back(self) -> bool:
        """Put back the handlers found at install where ours is still the one in place (main thread); True if any."""
        put_back = [signum for signum in self._previous if signal.getsignal(signum) == self._handle]
        for signum in put_back:
            handler = self._previous.pop(signum)
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        return bool(put_back)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        stops: list[tuple[threading.Thread, Callable[[], None] | None]] = []
        self._stop_chain(signum, frame, stops)
        if any(hurry is not None for _, hurry in stops):
            _SecondSignal(self._signals, stops, self._log)  # over whatever is in place now (the handlers before ours)

    def _stop_chain(self, signum: int, frame: FrameType | None,
                    stops: list[tuple[threading.Thread, Callable[[], None] | None]]) -> None:
        """Stop this context and those whose handlers are below this one; each stop begun is added to ``stops``."""
        previous = self._found.get(signal.Signals(signum))
        self.uninstall()
        if not self._active() or self.stopper is not None:
            # Stopped already, or handed a later signal while the stop it began runs (by a handler put over ours that
            # forwards to it): the signal is the handler's that was there before ours; a stop still running hurries.
            if self.stopper is not None and self.stopper.is_alive():
                _start_hurry(self._hurry)
            _pass_on(previous, self._handle, signum, frame)
            return
        self._log.warning("shutdown signal received: stopping the StreamingContext", signal=signal.Signals(signum).name)
        self.stopper = threading.Thread(target=self._stop, name="aiodstream-shutdown-stop")
        self.stopper.start()
        stops.append((self.stopper, self._hurry))
        # Other running contexts' handlers below this one (each installed over the last): one signal stops them all,
        # as it stops every context waiting in stop_on_signal_async. Stopped ones on the way are passed over, never
        # their own previous handler (the default action would end the process while the others drain).
        below: Any = previous
        while isinstance(getattr(below, "__self__", None), SignalShutdown) and getattr(below, "__func__", None) is SignalShutdown._handle:
            hook: SignalShutdown = below.__self__
            if hook._active():
                hook._stop_chain(signum, frame, stops)  # it stops its context and goes on down the chain itself
                return
            below = hook._found.get(signal.Signals(signum))


class _SecondSignal:
    """The handler a first signal leaves while the stops it began run: the next signal makes them immediate.

    It hurries each stop still running (``SignalShutdown``'s ``hurry``, on a thread of its own: the handler may have
    interrupted the main thread anywhere), puts back the handlers found under it, and does what they do. Once the
    stops ended it only puts them back and passes the signal on; it is taken out at the next install or uninstall of
    a :class:`SignalShutdown` on the main thread.
    """

    def __init__(self, signals: Sequence[signal.Signals], stops: list[tuple[threading.Thread, Callable[[], None] | None]],
                 log: Any) -> None:
        self._stops = stops
        self._log = log
        self._previous = {signum: signal.getsignal(signum) for signum in signals}
        for signum in signals:
            signal.signal(signum, self)
        _second_signals.add(self)

    def running(self) -> bool:
        """Whether a stop it would hurry still runs."""
        return any(stopper.is_alive() for stopper, _ in self._stops)

    def put_back(self) -> None:
        """Put back the handlers found under it where it is still the one in place (main thread).

        It keeps knowing them: a handler put over it may hand it signals later (a program that puts back the
        handler it saved), and it passes them on.
        """
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) is self:
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        _second_signals.discard(self)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signal.Signals(signum))
        running = [hurry for stopper, hurry in self._stops if stopper.is_alive()]
        self._stops = []
        self.put_back()
        if running:
            self._log.warning("second shutdown signal received: stopping the StreamingContext now",
                              signal=signal.Signals(signum).name)
            for hurry in running:
                _start_hurry(hurry)
        _pass_on(previous, self, signum, frame)


def _start_hurry(hurry: Callable[[], None] | None) -> None:
    """Run ``hurry`` on a thread of its own (a signal handler may have interrupted the main thread anywhere)."""
    if hurry is not None:
        threading.Thread(target=hurry, name="aiodstream-shutdown-hurry", daemon=True).start()


def _pass_on(previous: Any, own: Any, signum: int, frame: FrameType | None) -> None:
    """What the handler found before ``own`` does with the signal, now that it is back in place."""
    if callable(previous) and previous is not own:
        previous(signum, frame)
    elif signal.getsignal(signum) is signal.SIG_DFL:
        signal.raise_signal(signum)  # the default action, now in place (never a handler that calls us back)


_second_signals: set[_SecondSignal] = set()
"""Second-signal handlers left by first signals (see :class:`_SecondSignal`), taken out once their stops ended."""


def _stopped() -> bool:
    return False


def _no_stop() -> None:
    return None


_disarmed: set[SignalShutdown] = set()
"""Handlers uninstalled outside the main thread, to take out at the next chance on it (a small object each: no context)."""


def _put_back_disarmed() -> None:
    """Take out the disarmed handlers in place (main thread only).

    A handler installed over a disarmed one keeps it as its previous handler: once that one is taken out the disarmed
    one is on top again, hence the loop until nothing changes. One under a foreign handler stays disarmed (if that
    handler forwards signals to it, it forwards them on).
    """
    for second in list(_second_signals):
        if not second.running():
            second.put_back()
    changed = True
    while changed:
        changed = False
        for hook in list(_disarmed):
            changed = hook._put_back() or changed
            if not hook.installed:
                _disarmed.discard(hook)


class _SignalHub:
    """The signal receivers of one event loop, shared by every :func:`shutdown_signal` waiting there.

    anyio's receivers replace one another on asyncio (the newest one gets the signal) and reset the handler to
    Python's default when they close: with a receiver per waiter, one SIGTERM reached only one of several contexts,
    and the host's own handlers were gone afterwards. The hub holds one receiver per signal while anyone waits for it;
    one waiter at a time reads them all (a cancelled reader hands over, nothing is lost: receivers queue signals),
    every waiter wanting a signal gets it, and a signal nobody waits for any more gets back the handler found before
    (on asyncio the host loop's own ``add_signal_handler`` entry too).
    """

    def __init__(self) -> None:
        self.waiters: list[tuple[frozenset[int], list[int]]] = []  # what each waiter wants, and what it got
        self.reading = False
        self.changed = anyio.Event()
        self._receivers: list[tuple[tuple[signal.Signals, ...], Any, Any]] = []  # (signals, context manager, receiver)
        self._read_scope: anyio.CancelScope | None = None

    def want(self, signals: tuple[signal.Signals, ...]) -> None:
        """Receive ``signals`` too: a receiver for those no receiver takes yet (the reader starts again with it)."""
        taken = {signum for received, _, _ in self._receivers for signum in received}
        new = tuple(signum for signum in signals if signum not in taken)
        if not new:
            return
        found = _Found(new)
        manager = anyio.open_signal_receiver(*new)
        self._receivers.append((new, (manager, found), manager.__enter__()))
        if self._read_scope is not None:
            self._read_scope.cancel()

    async def read(self) -> None:
        """Take the next signal and give it to every waiter wanting it (this task reads until then; the others wait)."""
        self.reading = True
        try:
            with anyio.CancelScope() as self._read_scope:
                async with anyio.create_task_group() as group:
                    for _, _, receiver in self._receivers:
                        group.start_soon(self._take, receiver, group.cancel_scope)
        finally:
            self._read_scope = None
            self.reading = False
            self.changed.set()  # the signal's waiters return; or, this reader cancelled, another one reads
            self.changed = anyio.Event()

    async def _take(self, receiver: Any, done: anyio.CancelScope) -> None:
        signum = int(await receiver.__anext__())
        for wanted, got in self.waiters:
            if signum in wanted:
                got.append(signum)
        done.cancel()

    def release(self) -> None:
        """Close the receivers of signals no waiter wants any more, and put back what they replaced."""
        wanted = {signum for want, _ in self.waiters for signum in want}
        for entry in [entry for entry in self._receivers if not wanted.intersection(entry[0])]:
            self._receivers.remove(entry)
            manager, found = entry[1]
            manager.__exit__(None, None, None)
            found.restore()
            if self._read_scope is not None:
                self._read_scope.cancel()


class _Found:
    """The handlers of some signals before a receiver took them: Python's, and on asyncio the running loop's entries."""

    def __init__(self, signals: tuple[signal.Signals, ...]) -> None:
        self._python = {signum: signal.getsignal(signum) for signum in signals}
        self._loop: Any = None
        self._entries: dict[signal.Signals, Any] = {}
        if sniffio.current_async_library() == "asyncio":
            self._loop = asyncio.get_running_loop()
            table = getattr(self._loop, "_signal_handlers", None)  # CPython's: a receiver's add_signal_handler replaces
            if isinstance(table, dict):
                self._entries = {signum: table[signum] for signum in signals if signum in table}

    def restore(self) -> None:
        for signum, handler in self._python.items():
            entry = self._entries.get(signum)
            callback = getattr(entry, "_callback", None)
            if callback is not None:  # the host loop's own handler: registered again (it sets Python's handler too)
                self._loop.add_signal_handler(signum, callback, *getattr(entry, "_args", ()))
            elif handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)


_hubs: dict[anyio.lowlevel.EventLoopToken, _SignalHub] = {}


async def shutdown_signal(*signals: int) -> int:
    """Wait for one of ``signals`` (default :data:`SHUTDOWN_SIGNALS`) and return it: an async host's shutdown.

    The signals are handled through anyio (the event loop's own signal handling, main thread
    only) for as long as anyone waits for them; cancel it to stop waiting. Every waiter in the
    loop wanting a signal gets it (one SIGTERM stops every context waiting for it), and once none
    waits for a signal the handler that was there before is back.
    """
    wanted = tuple(sorted({signal.Signals(s) for s in signals or SHUTDOWN_SIGNALS}))
    key = anyio.lowlevel.current_token()
    hub = _hubs.get(key)
    if hub is None:
        hub = _hubs[key] = _SignalHub()
    mine: list[int] = []
    entry = (frozenset(int(s) for s in wanted), mine)
    hub.waiters.append(entry)
    try:
        hub.want(wanted)
        while not mine:
            if hub.reading:
                await hub.changed.wait()
            else:
                await hub.read()
        return mine[0]
    finally:
        hub.waiters.remove(entry)
        hub.release()
        if not hub.waiters:
            del _hubs[key]
