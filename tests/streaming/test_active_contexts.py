"""The registry of active contexts (Spark's ACTIVATION_LOCK): read while a start runs, it keeps the starting context."""

from __future__ import annotations

from streaming._active import ActiveContexts


class Context:
    """A context as the registry sees it: its state."""

    def __init__(self) -> None:
        self.state = "INITIALIZED"

    def getState(self) -> str:
        return self.state


def test_a_context_read_while_it_starts_is_listed_once_it_is_active() -> None:
    """getActive() polled during a start saw the registered context not yet ACTIVE and pruned it for good: once ACTIVE
    it was never listed (a Connect example waiting for getActive() timed out)."""
    registry: ActiveContexts[Context] = ActiveContexts()
    starting = Context()
    registry.register(starting, exclusive=True)
    assert registry.active() == []  # not ACTIVE yet
    starting.state = "ACTIVE"
    assert registry.active() == [starting]
    starting.state = "STOPPED"
    assert registry.active() == []
    registry.register(Context(), exclusive=True)  # the stopped one no longer blocks an exclusive start
