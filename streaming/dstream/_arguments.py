"""pyspark's conventions for DStream arguments: user functions with or without the batch time, and slice bounds.

What pyspark's ``DStream`` methods do to their arguments before building a stream.
"""

from __future__ import annotations

import inspect
from datetime import datetime
from typing import Any, Callable

from scheduler import scaled_milliseconds

__all__ = ["TimeLike", "arity", "time_ms", "with_time", "with_time2"]

TimeLike = datetime | int | float
"""A batch time as pyspark's ``DStream.slice`` takes it: a local datetime or unix seconds."""


def arity(func: Callable[..., Any]) -> int:
    """Positional parameters of ``func`` (pyspark reads ``__code__.co_argcount`` the same way)."""
    code = getattr(func, "__code__", None)
    if code is not None:
        return int(code.co_argcount) - (1 if inspect.ismethod(func) else 0)
    params = inspect.signature(func).parameters.values()
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def with_time(func: Callable[..., Any]) -> Callable[[datetime, Any], Any]:
    """``func(rdd)`` or ``func(time, rdd)`` as a function of ``(time, rdd)`` (pyspark's ``transform``).

    Raises:
        AssertionError: ``func`` takes neither one nor two arguments (pyspark's check).
    """
    n = arity(func)
    if n == 1:
        def one_arg(t: datetime, rdd: Any) -> Any:
            return func(rdd)

        return one_arg
    if n != 2:
        raise AssertionError("func should take one or two arguments")
    return func


def with_time2(func: Callable[..., Any]) -> Callable[[datetime, Any, Any], Any]:
    """``func(a, b)`` or ``func(time, a, b)`` as a function of ``(time, a, b)`` (pyspark's ``transformWith``).

    Raises:
        AssertionError: ``func`` takes neither two nor three arguments (pyspark's check).
    """
    n = arity(func)
    if n == 2:
        def two_args(t: datetime, a: Any, b: Any) -> Any:
            return func(a, b)

        return two_args
    if n != 3:
        raise AssertionError("func should take two or three arguments")
    return func


def time_ms(value: TimeLike) -> int:
    """pyspark's conversion of a ``slice`` bound: a datetime loses its sub-second part.

    Raises:
        TypeError: neither a datetime nor unix seconds.
    """
    if isinstance(value, datetime):
        # Quirk kept from pyspark: it reads the datetime through time.mktime(timetuple()),
        # which has whole-second precision.
        import time as _time

        value = _time.mktime(value.timetuple())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"slice bounds must be datetimes or unix seconds (int or float), got {type(value).__name__} {value!r}")
    return scaled_milliseconds(value, 1000, "a slice bound", fix="pass a datetime or unix seconds", truncate=True)
