"""ActiveContexts: the process's started, not yet stopped StreamingContexts, and pyspark's one-active-context rule.

Spark's ``StreamingContext.ACTIVATION_LOCK`` and ``activeContext`` (one per JVM), with aiodstream's
non-exclusive contexts beside each other.
"""

from __future__ import annotations

import threading
from typing import Generic, Protocol, TypeVar

import attrs

from scheduler import StreamingStateError

from .spark import user_frame

__all__ = ["ActiveContexts"]


class _Context(Protocol):
    def getState(self) -> str: ...


C = TypeVar("C", bound=_Context)


@attrs.define
class _Entry(Generic[C]):
    context: C
    exclusive: bool
    start_site: str = ""


class ActiveContexts(Generic[C]):
    """The registered contexts, oldest first, under one lock held only while the list is read or changed.

    Spark's ``ACTIVATION_LOCK``: a context's start or stop, which may wait for jobs and listeners, never holds
    it, so that those can ask for the active context meanwhile (``StreamingContext.getActive``).
    """

    def __init__(self) -> None:
        """No context yet."""
        self._lock = threading.Lock()
        self._entries: list[_Entry[C]] = []

    def active(self) -> list[C]:
        """The registered contexts that are ACTIVE, oldest first."""
        with self._lock:
            # Stopped ones go; one still starting (registered, not yet ACTIVE) stays: the list is read while a start
            # runs, and pruning it then lost the context for good (getActive() never saw it once ACTIVE).
            self._entries[:] = [e for e in self._entries if e.context.getState() != "STOPPED"]
            return [e.context for e in self._entries if e.context.getState() == "ACTIVE"]

    def register(self, context: C, *, exclusive: bool) -> None:
        """Count ``context`` as active from now on (before its runtime starts), unless the one-active-context rule forbids it.

        Raises:
            StreamingStateError: ``context`` is exclusive and another is active, or an exclusive one is (pyspark's message).
        """
        with self._lock:
            others = [e for e in self._entries if e.context is not context and e.context.getState() != "STOPPED"]
            blocking = others if exclusive else [e for e in others if e.exclusive]
            if blocking:
                raise StreamingStateError(
                    "Only one StreamingContext may be started in this JVM. Currently running StreamingContext was started at"
                    + blocking[-1].start_site
                )
            self._entries[:] = [*others, _Entry(context, exclusive)]

    def started(self, context: C) -> None:
        """Remember where the user's code started ``context`` (Spark's long call site form), for the refusal's message."""
        frame = user_frame()
        site = "?" if frame is None else f"{frame.function} at {frame.filename}:{frame.lineno}"
        with self._lock:
            for entry in self._entries:
                if entry.context is context:
                    entry.start_site = site

    def unregister(self, context: C) -> None:
        """Forget ``context`` (stopped, or its start failed)."""
        with self._lock:
            self._entries[:] = [e for e in self._entries if e.context is not context]

    def __repr__(self) -> str:
        return f"<ActiveContexts [{len(self._entries)} registered]>"
