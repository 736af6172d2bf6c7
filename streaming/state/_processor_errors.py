"""transformWithState's errors (Spark's error classes) and its time modes.

Spark's ``StateStoreErrors`` and ``TimeMode`` for the operator's processors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "INVALID_HANDLE_STATE",
    "INVALID_TIME_MODE",
    "USER_FUNCTION_ERROR",
    "TimeMode",
    "TransformWithStateError",
]

USER_FUNCTION_ERROR = "TRANSFORM_WITH_STATE_USER_FUNCTION_ERROR"
"""Spark's error class of a processor method that raised."""
INVALID_HANDLE_STATE = "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE"
"""Spark's error class of a handle operation at the wrong moment (a state variable made outside ``init``, ...)."""
INVALID_TIME_MODE = "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE"
"""Spark's error class of a timer operation in time mode "None"."""


class TransformWithStateError(RuntimeError):
    """A ``transformWithState`` rule was broken; ``error_class`` is Spark's, the message is ``[CLASS] text``.

    Raised inside a batch, it fails the batch and nothing of the batch's state is committed.
    """

    def __init__(self, error_class: str, message: str) -> None:
        """Spark's ``[CLASS] message`` form."""
        super().__init__(f"[{error_class}] {message}")
        self.error_class = error_class

    @classmethod
    def user_function(cls, method: str, cause: BaseException) -> TransformWithStateError:
        """The processor's ``method`` raised ``cause`` (kept as ``__cause__`` by the caller)."""
        return cls(USER_FUNCTION_ERROR, f"An error occurred in the user-defined function {method} of the "
                                        f"StatefulProcessor. Reason: {type(cause).__name__}: {cause}.")


class TimeMode:
    """The time modes, as ``transformWithState``'s ``timeMode`` takes them (any case).

    ``"None"``: no timers, TTL unavailable; ``"ProcessingTime"``: timers on the batch's time, TTL;
    ``"EventTime"``: timers on the watermark, late rows dropped.
    """

    NONE = "none"
    PROCESSING_TIME = "processingtime"
    EVENT_TIME = "eventtime"

    ALL = (NONE, PROCESSING_TIME, EVENT_TIME)
    SCALA_NAMES: ClassVar[Mapping[str, str]] = {NONE: "NoTime", PROCESSING_TIME: "ProcessingTime", EVENT_TIME: "EventTime"}
    """How Spark's messages name each mode (its ``TimeMode`` objects' names)."""

    @classmethod
    def check(cls, value: object) -> str:
        """``value`` in lower case if it names a time mode.

        Raises:
            TransformWithStateError: anything else (``STATEFUL_PROCESSOR_UNKNOWN_TIME_MODE``).
        """
        if isinstance(value, str) and value.lower() in cls.ALL:
            return value.lower()
        raise TransformWithStateError("STATEFUL_PROCESSOR_UNKNOWN_TIME_MODE",
                                      f"Unknown time mode {value}. Accepted timeMode modes are 'none', "
                                      "'processingTime', 'eventTime'")
