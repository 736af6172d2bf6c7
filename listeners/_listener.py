"""StreamingListener: the base class for listeners (Spark's ``StreamingListener`` trait)."""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

from ._events import (
    BatchCompleted,
    BatchStarted,
    BatchSubmitted,
    OutputOperationCompleted,
    OutputOperationStarted,
    QueryIdle,
    QueryProgress,
    QueryStarted,
    QueryTerminated,
    ReceiverError,
    ReceiverStarted,
    ReceiverStopped,
    StreamingStarted,
)

__all__ = ["HANDLER_NAMES", "Handlers", "StreamingListener", "check_listener", "handlers_of", "name_of"]

HANDLER_NAMES: dict[type, str] = {
    StreamingStarted: "on_streaming_started",
    BatchSubmitted: "on_batch_submitted",
    BatchStarted: "on_batch_started",
    BatchCompleted: "on_batch_completed",
    OutputOperationStarted: "on_output_operation_started",
    OutputOperationCompleted: "on_output_operation_completed",
    ReceiverStarted: "on_receiver_started",
    ReceiverError: "on_receiver_error",
    ReceiverStopped: "on_receiver_stopped",
    QueryStarted: "on_query_started",
    QueryProgress: "on_query_progress",
    QueryIdle: "on_query_idle",
    QueryTerminated: "on_query_terminated",
}
"""Event type -> the name of the StreamingListener callback that receives it."""

_PYSPARK_NAMES = tuple("on" + "".join(word.title() for word in name.split("_")[1:]) for name in HANDLER_NAMES.values())
"""The same callbacks as pyspark names them (``onBatchCompleted``), which a bus never calls."""

MaybeAwaitable = Any  # None, or an awaitable for ``async def`` overrides


class StreamingListener:
    """Override the callbacks you need, as plain ``def`` or as ``async def``.

    Callbacks receive one event at a time, in posting order. An ``async def`` runs on the
    listener's own dispatcher task and may await. A plain ``def`` runs off the event loop, on a
    worker thread that serves this listener alone, so it may block, do I/O or call Spark and
    delays only itself; set :attr:`run_on_loop` for quick callbacks that touch objects of the
    loop (anyio events, memory streams). A callback that raises is logged with the listener's
    name and the listener stays registered.
    """

    run_on_loop: bool = False
    """Run the plain ``def`` callbacks on the event loop instead of a thread (quick, non-blocking ones only)."""

    def on_streaming_started(self, event: StreamingStarted) -> MaybeAwaitable:
        """The context started."""

    def on_batch_submitted(self, event: BatchSubmitted) -> MaybeAwaitable:
        """A batch was submitted."""

    def on_batch_started(self, event: BatchStarted) -> MaybeAwaitable:
        """A batch started processing."""

    def on_batch_completed(self, event: BatchCompleted) -> MaybeAwaitable:
        """A batch completed (successfully or not)."""

    def on_output_operation_started(self, event: OutputOperationStarted) -> MaybeAwaitable:
        """An output operation started."""

    def on_output_operation_completed(self, event: OutputOperationCompleted) -> MaybeAwaitable:
        """An output operation completed."""

    def on_receiver_started(self, event: ReceiverStarted) -> MaybeAwaitable:
        """A receiver started."""

    def on_receiver_error(self, event: ReceiverError) -> MaybeAwaitable:
        """A receiver reported an error."""

    def on_receiver_stopped(self, event: ReceiverStopped) -> MaybeAwaitable:
        """A receiver stopped."""

    def on_query_started(self, event: QueryStarted) -> MaybeAwaitable:
        """A checkpointed query started a run."""

    def on_query_progress(self, event: QueryProgress) -> MaybeAwaitable:
        """A checkpointed query committed a batch."""

    def on_query_idle(self, event: QueryIdle) -> MaybeAwaitable:
        """A trigger of a checkpointed query found no new data."""

    def on_query_terminated(self, event: QueryTerminated) -> MaybeAwaitable:
        """A checkpointed query's run ended."""


EventCallback = Callable[[Any], "Awaitable[None] | None"]


Handlers = dict[type, tuple[Callable[[Any], Any], bool]]
"""A listener's callbacks by event type, each with whether it is ``async``."""


def name_of(listener: object) -> str:
    """The name logs and statistics use for ``listener`` by default: its function's or its class's qualified name."""
    if inspect.isfunction(listener) or inspect.ismethod(listener):
        return getattr(listener, "__qualname__", repr(listener))
    return type(listener).__qualname__


def handlers_of(listener: object) -> Handlers:
    """The callbacks of ``listener`` by event type, each with whether it is ``async``.

    Raises:
        TypeError: not a listener, or one with pyspark's camelCase callbacks only (a bus would never call them).
    """
    handlers: Handlers = {}
    pyspark_style = _own_pyspark_callbacks(listener)
    if isinstance(listener, StreamingListener) or any(hasattr(listener, n) for n in HANDLER_NAMES.values()):
        for event_type, method_name in HANDLER_NAMES.items():
            method = getattr(listener, method_name, None)
            if method is None:
                continue
            base = getattr(StreamingListener, method_name)
            if getattr(method, "__func__", None) is base:
                continue  # not overridden: skip the call entirely
            handlers[event_type] = (method, inspect.iscoroutinefunction(method))
        unheard = [n for t, n in zip(HANDLER_NAMES, _PYSPARK_NAMES, strict=True) if n in pyspark_style and t not in handlers]
        if unheard:  # a callback the bus would never call, beside those it calls or alone
            raise TypeError(_pyspark_style_message(listener, unheard))
    elif callable(listener):  # a function-style listener: called with every event, whatever else it has
        is_async = inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(type(listener).__call__)
        for event_type in HANDLER_NAMES:
            handlers[event_type] = (listener, is_async)
    elif pyspark_style:
        raise TypeError(_pyspark_style_message(listener, pyspark_style))
    else:
        raise TypeError(
            f"a listener must be a StreamingListener, an object with on_* callbacks, or a callable taking an event; got {listener!r}"
        )
    return handlers


def _own_pyspark_callbacks(listener: object) -> list[str]:
    """The pyspark-named callbacks ``listener`` defines itself: not the do-nothing ones it inherits from pyspark's
    ``StreamingListener`` (or a class of pyspark's own, or streaming's pyspark-compatible one)."""
    own = []
    for name in _PYSPARK_NAMES:
        if not callable(getattr(listener, name, None)):
            continue
        if name not in getattr(listener, "__dict__", {}):
            definer = next((cls for cls in type(listener).__mro__ if name in vars(cls)), None)
            if definer is not None and (definer.__module__.startswith("pyspark.")
                                        or definer.__module__ == "streaming._listener_compat"):
                continue
        own.append(name)
    return own


def _pyspark_style_message(listener: object, names: list[str]) -> str:
    snake = ", ".join(HANDLER_NAMES[t] for t, n in zip(HANDLER_NAMES, _PYSPARK_NAMES, strict=True) if n in names)
    return (f"{type(listener).__name__} has pyspark's callback names ({', '.join(names)}), which a listener bus never "
            f"calls: name them {snake}, or register it with streaming.StreamingContext.addStreamingListener, which speaks "
            "pyspark's names")


def check_listener(listener: object, name: str | None = None, *, inline: bool | None = None) -> Handlers:
    """Refuse what a bus would refuse to register (as :func:`handlers_of`, and an inline listener with an ``async``
    callback: ``inline`` default its ``run_inline``); return its callbacks.

    Raises:
        TypeError: not a listener, or an inline listener with an ``async`` callback.
    """
    handlers = handlers_of(listener)
    if (bool(getattr(listener, "run_inline", False)) if inline is None else inline) and any(
            is_async for _, is_async in handlers.values()):
        raise TypeError(f"listener {name or name_of(listener)!r} runs inline (inside post), so its callbacks must be plain 'def' "
                        "functions that never block; make them plain, or register it without inline")
    return handlers
