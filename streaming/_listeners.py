"""ContextListeners: the listeners given to a StreamingContext, adapted to the bus and kept until its runtime exists.

Spark's ``StreamingContext.addStreamingListener`` and ``removeStreamingListener``, for pyspark's
``StreamingListener`` and ``StreamingQueryListener`` and aiodstream's own listeners.
"""

from __future__ import annotations

from listeners import check_listener

from ._listener_compat import adapt_listener
from .runtime import QueryRuntime

__all__ = ["ContextListeners"]


class ContextListeners:
    """The listeners a context was given: on its runtime's bus once the runtime exists, pending until then."""

    def __init__(self) -> None:
        """No listener yet."""
        self._pending: list[tuple[object, str | None]] = []
        self._adapters: dict[int, tuple[object, object]] = {}  # id(given) -> (given, what the bus has)

    def add(self, given: object, runtime: QueryRuntime | None) -> None:
        """Register ``given`` (adapted when it is pyspark's) on ``runtime``'s bus, or until :meth:`attach` without one.

        Raises:
            TypeError: not a listener (see :func:`listeners.check_listener`), with or without a runtime.
        """
        listener, name = adapt_listener(given)
        if runtime is None:
            check_listener(listener, name)  # refused now, as the bus would refuse it at start
            self._pending.append((listener, name))
        else:
            runtime.add_listener(listener, name=name)
        self._adapters[id(given)] = (given, listener)

    def remove(self, given: object, runtime: QueryRuntime | None) -> None:
        """Unregister a listener added with :meth:`add`.

        Raises:
            ValueError: the listener was not added.
        """
        entry = self._adapters.pop(id(given), None)
        if entry is None:
            raise ValueError(f"listener {given!r} is not registered")
        pending = [p for p in self._pending if p[0] is entry[1]]
        if pending:
            self._pending.remove(pending[0])
        elif runtime is not None:
            runtime.remove_listener(entry[1])

    def attach(self, runtime: QueryRuntime) -> None:
        """Put the pending listeners on the bus of ``runtime``, just created."""
        for listener, name in self._pending:
            runtime.add_listener(listener, name=name)
        self._pending.clear()

    def __repr__(self) -> str:
        return f"<ContextListeners [{len(self._adapters)} given | {len(self._pending)} pending]>"
