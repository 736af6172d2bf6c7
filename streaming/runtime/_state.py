"""StreamingContextState: the one-way lifecycle every query runtime moves through (Spark's ``StreamingContextState``)."""

from __future__ import annotations

import enum

__all__ = ["StreamingContextState"]


class StreamingContextState(enum.Enum):
    """Lifecycle states, as Spark's ``StreamingContextState``."""

    INITIALIZED = "INITIALIZED"
    ACTIVE = "ACTIVE"
    STOPPED = "STOPPED"
