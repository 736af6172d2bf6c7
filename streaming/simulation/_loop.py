"""Virtual-time asyncio event loops: a loop that jumps a VirtualClock instead of waiting, and a probed stock loop.

These reach into CPython asyncio's private ``_run_once``, ``_ready``, ``_scheduled`` and
``Handle`` fields, for the simulator's speed; that is why they live here and not in the engine.
The engine sees them only through the public :class:`scheduler.ReadyProbe` they advertise.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import select
import selectors
from asyncio import format_helpers
from typing import Any, Callable, Collection, Mapping, Protocol, cast

from scheduler import ReadyProbe, VirtualClock, ready_probe

__all__ = ["ProbedEventLoop", "probed_event_loop", "running_loop_probe", "virtual_time_event_loop"]


def virtual_time_event_loop(clock: VirtualClock) -> asyncio.AbstractEventLoop:
    """A new asyncio event loop that drives ``clock``: no ``VirtualClock.run`` task is needed.

    When the loop has no callback ready to run, it would wait for I/O or a timer; instead it
    first polls for I/O without waiting, and if there is none, jumps the clock to the next
    deadline, which makes the sleepers due then ready. Only when no task sleeps on the clock does
    it really wait (for I/O, a real timer or a worker thread). So a jump costs no loop iteration
    and no task switch, and the instants the engine sees are the same as under
    ``VirtualClock.run``. Pass it as anyio's ``loop_factory`` backend option::

        anyio.run(main, backend="asyncio", backend_options={"loop_factory": lambda: virtual_time_event_loop(clock)})

    The clock is then driven by that loop; ``VirtualClock.run`` refuses to drive it too.

    Raises:
        RuntimeError: the clock is already driven (by ``run`` or by another loop).
    """
    clock.claim_driver()
    return _VirtualTimeEventLoop(_VirtualTimeSelector(clock))


def probed_event_loop() -> asyncio.AbstractEventLoop:
    """A stock asyncio event loop that advertises a :class:`scheduler.ReadyProbe` (for ``VirtualClock.run``'s exact jumps)."""
    return ProbedEventLoop()


def running_loop_probe() -> ReadyProbe | None:
    """A :class:`scheduler.ReadyProbe` over the running asyncio loop's ready queue, for ``VirtualClock.run(probe=...)``.

    For a loop the simulation does not own (a host's stock CPython loop), so that its clock
    still jumps exactly when every task is blocked instead of polling. ``None`` when no asyncio
    loop runs in this thread or the loop keeps no ready queue CPython's way (uvloop).
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    advertised = ready_probe()
    if advertised is not None:
        return advertised
    if not isinstance(getattr(loop, "_ready", None), collections.deque):
        return None
    return _LoopReadyProbe(loop)


class _LoopReadyProbe:
    """The :class:`scheduler.ReadyProbe` of a CPython asyncio loop: reads its ready queue."""

    __slots__ = ("_ready",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._ready = loop._ready  # type: ignore[attr-defined]

    def others_ready(self, ignore: Collection[object] = ()) -> bool:
        ready = self._ready
        if not ready:
            return False
        if not ignore:
            return True
        # Ready callbacks that only resume tasks in ``ignore`` (another clock's driver) do not count.
        return not all(getattr(handle._callback, "__self__", None) in ignore for handle in ready)


class ProbedEventLoop(asyncio.SelectorEventLoop):
    """CPython's selector event loop, unchanged, advertising a :class:`scheduler.ReadyProbe` over its ready queue."""

    def __init__(self) -> None:
        """Create the loop and its probe."""
        super().__init__()
        self.aiodstream_ready_probe = _LoopReadyProbe(self)


# A busy iteration of the self-driving loop skips the I/O poll, but not more than this many in a
# row: a task spinning on checkpoints until some I/O arrives must still see it.
_POLL_EVERY = 16


class _HandleFields(Protocol):
    """CPython's ``asyncio.Handle`` as this module reads and writes it: its private fields (its ``__slots__``).

    call_soon builds its Handle field by field rather than through Handle.__init__ (whose debug
    check is one more call), and _run_once runs handles as Handle._run does: only while Handle has
    exactly these fields (:data:`_FIELD_BY_FIELD`, checked at import).
    """

    _callback: Callable[..., object]
    _args: tuple[Any, ...]
    _cancelled: bool
    _loop: asyncio.AbstractEventLoop
    _source_traceback: Any
    _repr: str | None
    _context: contextvars.Context


_HANDLE_FIELDS = tuple(_HandleFields.__annotations__)
_FIELD_BY_FIELD = set(getattr(asyncio.Handle, "__slots__", ())) - {"__weakref__"} == set(_HANDLE_FIELDS)
_new_object = object.__new__
_copy_context = contextvars.copy_context


class _VirtualTimeEventLoop(asyncio.SelectorEventLoop):
    """The :func:`virtual_time_event_loop` loop: stock asyncio with short cuts for a simulation's iterations.

    A simulation runs a handful of callbacks per loop iteration and several iterations per
    virtual instant, so what each iteration and each ``call_soon`` cost around the callbacks is a
    large share of the whole. The short cuts leave what runs, and in which order, unchanged:

    * an iteration that has callbacks ready and no timer pending runs exactly the callbacks the
      stock iteration would (those ready when it starts, in order), without the I/O poll and the
      timer bookkeeping; every :data:`_POLL_EVERY`-th busy iteration polls I/O first, as the
      stock one does;
    * an idle iteration (nothing ready, no timer pending) polls I/O without waiting and, if there
      is none, jumps the clock, then runs what became ready: what the stock iteration does
      through :class:`_VirtualTimeSelector`, without its timer bookkeeping; with nobody on the
      clock it is the stock iteration, which waits for real;
    * both run each callback as ``Handle._run`` does, inline (a callback that raises is
      reported to the exception handler in the same words);
    * every iteration with timers, debug mode or a stop request is the stock one;
    * ``call_soon`` queues the handle directly (in debug mode, the stock checks run).

    They rely on asyncio's private ``_run_once``, ``_process_events``, ``_ready``, ``_scheduled``
    and ``Handle`` fields, which the driver already relies on: long-standing internals of every
    CPython asyncio.
    """

    _busy_iterations = 0

    def __init__(self, selector: _VirtualTimeSelector) -> None:
        super().__init__(selector)
        self._io_ready = selector.io_ready
        self._jump = selector.clock.jump
        self.aiodstream_ready_probe = _LoopReadyProbe(self)

    def call_soon(self, callback: Callable[..., object], *args: Any, context: Any = None) -> asyncio.Handle:  # type: ignore[override]
        if self._debug or not _FIELD_BY_FIELD:  # type: ignore[attr-defined]
            return super().call_soon(callback, *args, context=context)
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        # What Handle(callback, args, self, context) builds outside debug mode.
        handle = _new_object(asyncio.Handle)
        fields = cast(_HandleFields, handle)
        fields._callback = callback
        fields._args = args
        fields._cancelled = False
        fields._loop = self
        fields._source_traceback = None
        fields._repr = None
        fields._context = _copy_context() if context is None else context
        self._ready.append(handle)  # type: ignore[attr-defined]
        return handle

    def _run_once(self) -> None:
        if self._scheduled or self._stopping or self._debug or not _FIELD_BY_FIELD:  # type: ignore[attr-defined]
            self._busy_iterations = 0
            super()._run_once()  # type: ignore[misc]
            return
        ready = self._ready  # type: ignore[attr-defined]
        if ready:
            if self._busy_iterations < _POLL_EVERY:
                self._busy_iterations += 1
            else:
                self._busy_iterations = 0
                if self._io_ready():
                    self._process_events(self._selector.select(0))  # type: ignore[attr-defined]
        else:
            # Idle: pending I/O first, as after a real wait; else the jump, which makes the
            # sleepers due then ready; with nobody on the clock, the stock iteration waits.
            self._busy_iterations = 0
            if self._io_ready():
                self._process_events(self._selector.select(0))  # type: ignore[attr-defined]
            elif not self._jump():
                super()._run_once()  # type: ignore[misc]
                return
        # The callbacks ready now, in order, each as Handle._run runs it (inline: one call less
        # per task step).
        todo = len(ready)
        popleft = ready.popleft
        while todo:
            todo -= 1
            handle: _HandleFields = popleft()
            if handle._cancelled:
                continue
            try:
                handle._context.run(handle._callback, *handle._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._callback_failed(handle, exc)

    def _callback_failed(self, handle: _HandleFields, exc: BaseException) -> None:
        # Handle._run's report of a callback that raised, word for word.
        callback = format_helpers._format_callback_source(handle._callback, handle._args)
        context = {"message": f"Exception in callback {callback}", "exception": exc, "handle": handle}
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)


class _VirtualTimeSelector(selectors.BaseSelector):
    """The real selector of a :func:`virtual_time_event_loop` loop, with idle time replaced by jumps.

    An asyncio loop asks its selector to wait (a timeout other than 0) exactly when it has no
    callback ready to run: every task is blocked. That is the moment the driver task of
    :meth:`VirtualClock.run` detects by polling the ready queue once per loop iteration; here
    the loop itself says so, once, with no extra task step.
    """

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._selector = selectors.DefaultSelector()
        # "Is any I/O ready now?", asked at every idle iteration. On Linux the epoll object
        # answers it in C (at most one event, no wait); elsewhere the selector's own select(0).
        epoll = getattr(self._selector, "_selector", None)
        if isinstance(self._selector, selectors.EpollSelector) and isinstance(epoll, select.epoll):
            self.io_ready: Callable[[], object] = functools.partial(epoll.poll, 0, 1)
        else:
            self.io_ready = functools.partial(self._selector.select, 0)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        selector = self._selector
        if timeout is not None and timeout <= 0:
            return selector.select(0)  # callbacks are ready: the usual non-blocking poll
        # Nothing is ready. Pending I/O goes first, as it would after a real wait; then the jump,
        # which makes the woken sleepers ready (so the loop must not wait this time); with
        # nobody on the clock, wait for real: only the outside world can start anything now.
        events = selector.select(0)
        if events or self.clock.jump():
            return events
        return selector.select(timeout)

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._selector.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._selector.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._selector.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._selector.get_map()

    def close(self) -> None:
        self._selector.close()
