"""The simulation models' validation: ModelError, and the checks that name the offending field.

No Spark counterpart: every model record checks its fields with these when it is made.
"""

from __future__ import annotations

import math
from typing import Iterable

from scheduler import MAX_MILLISECONDS, StreamingError

__all__ = [
    "ModelError",
    "finite",
    "int_tuple",
    "number_too_long",
    "whole",
    "whole_ms",
]


class ModelError(StreamingError, ValueError):
    """A simulation model is invalid. The message starts with the offending field.

    Attributes:
        field: the field's path, e.g. ``"outputs[1].mean"``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message

    def within(self, prefix: str) -> ModelError:
        """The same error with ``prefix`` put in front of its field path."""
        field = f"{prefix}.{self.field}" if self.field and not self.field.startswith("[") else f"{prefix}{self.field}"
        return ModelError(field, self.reason)


def number_too_long(exc: ValueError) -> str:
    """Why a parser's ``int()`` refused a number of a model or trace file (more digits than Python converts), without
    Python's advice to call ``sys.set_int_max_str_digits``, which is for programs, not for a file's reader."""
    return str(exc).partition("; use sys.set_int_max_str_digits")[0]


def finite(field: str, value: object, *, minimum: float = 0.0, strict: bool = False) -> float:
    """``value`` as a float, if it is a finite number at least ``minimum`` (above it, with ``strict``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelError(field, f"must be a finite number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        rule = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise ModelError(field, f"must be {rule}, got {value!r}")
    return float(value)


def whole(field: str, value: object, *, minimum: int) -> int:
    """``value``, if it is a whole number (not a bool) at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(field, f"must be a whole number, got {value!r}")
    if value < minimum:
        raise ModelError(field, f"must be at least {minimum}, got {value!r}")
    return value


def whole_ms(value: float) -> int:
    """A sample in whole milliseconds, as the runtime's durations are: rounded to the nearest (ties to even), never negative.

    Raises:
        ModelError: the sample is not finite, or longer than any duration Spark can hold (a model whose spread
            reaches that far, e.g. a log-normal's ``sigma`` of 10, would otherwise fail deep in the runtime).
    """
    if not math.isfinite(value) or value > MAX_MILLISECONDS:
        raise ModelError("duration", f"a sample of {value:g} ms is beyond Spark's range of durations ({MAX_MILLISECONDS} ms): "
                                     "the distribution's parameters draw durations no run can take")
    return max(0, round(value))


def int_tuple(values: Iterable[int]) -> tuple[int, ...]:
    """A converter: ``values`` as a tuple."""
    return tuple(values)
