"""RetainedContexts: the stopped contexts a UI keeps showing, the oldest let go beyond a bound.

Spark's Structured Streaming tab keeps ``spark.sql.streaming.ui.retainedQueries`` inactive queries
(``StreamingQueryStatusListener.cleanupInactiveQueries``); the Streaming tab has one context.
"""

from __future__ import annotations

import collections
import threading
from typing import Callable

from ..runtime import QueryRuntime, StreamingContextState
from ._history import ContextHistory

__all__ = ["DEFAULT_RETAINED_CONTEXTS", "RETAINED_CONTEXTS", "RetainedContexts", "positive_count_setting", "retained_contexts_setting"]

RETAINED_CONTEXTS = "spark.sql.streaming.ui.retainedQueries"
"""Spark's setting of the inactive queries its UI keeps: the stopped contexts a :class:`StreamingUI` keeps."""

DEFAULT_RETAINED_CONTEXTS = 100
"""Spark's default of :data:`RETAINED_CONTEXTS`."""


def retained_contexts_setting(get: Callable[[str], str | None]) -> int:
    """``spark.sql.streaming.ui.retainedQueries`` read through ``get`` (default 100, as Spark's).

    Raises:
        ValueError: it is not a positive whole number (the message names the setting).
    """
    return positive_count_setting(get, RETAINED_CONTEXTS, DEFAULT_RETAINED_CONTEXTS, "contexts")


def positive_count_setting(get: Callable[[str], str | None], key: str, default: int, what: str) -> int:
    """The setting ``key`` read through ``get`` as a positive count of ``what`` (``default`` when unset or blank).

    Raises:
        ValueError: it is not a positive whole number (the message names the setting).
    """
    raw = get(key)
    if raw is None or not raw.strip():
        return default
    try:
        n = int(raw.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{key} must be a positive number of {what}, got {raw!r}")
    return n


class RetainedContexts:
    """Which attached contexts run, and which stopped ones a UI still shows (the newest ``retained`` of them).

    A stopped context is seen at the next :meth:`sweep` (the UI sweeps when something is attached
    and when a page or :attr:`StreamingUI.histories` is read): its history lets go of the engine
    (:meth:`ContextHistory.let_go`), and beyond ``retained`` stopped ones the oldest is let go of.

    Args:
        retained: the stopped contexts kept.
    """

    def __init__(self, retained: int) -> None:
        """Nothing attached yet."""
        if isinstance(retained, bool) or not isinstance(retained, int) or retained < 1:
            raise ValueError(f"retained_contexts must be a positive int, got {retained!r}")
        self.retained = retained
        self._running: dict[str, tuple[QueryRuntime, ContextHistory]] = {}
        self._stopped: collections.deque[str] = collections.deque()  # in the order they were seen stopped
        self._lock = threading.Lock()  # pages may sweep on the server's thread while a context is attached on another

    def add(self, label: str, runtime: QueryRuntime, history: ContextHistory) -> None:
        """Follow ``runtime``, shown as ``history`` under ``label``."""
        self._running[label] = (runtime, history)

    def sweep(self, histories: dict[str, ContextHistory]) -> None:
        """Let the histories of the runtimes stopped since go of them, and remove the oldest stopped beyond the bound."""
        with self._lock:
            for label, (runtime, history) in list(self._running.items()):
                if runtime.state is StreamingContextState.STOPPED:
                    del self._running[label]
                    history.let_go()
                    self._stopped.append(label)
            while len(self._stopped) > self.retained:
                histories.pop(self._stopped.popleft(), None)

    def __repr__(self) -> str:
        return f"<RetainedContexts [{len(self._running)} running, {len(self._stopped)} stopped of {self.retained} kept]>"
