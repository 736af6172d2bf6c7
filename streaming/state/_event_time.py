"""Event times: what ``withWatermark``'s function may return, as epoch milliseconds (statistics) or microseconds (late rows)."""

from __future__ import annotations

import datetime
from typing import Any, Callable

__all__ = ["event_time_ms", "event_time_us", "is_late"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def event_time_ms(value: object) -> int:
    """An event time as epoch milliseconds: an ``int`` is taken as such, a ``datetime`` converted.

    A naive datetime is read in UTC (Spark's TimestampNTZ reading); an aware one by its offset.

    Raises:
        TypeError: any other type, with Spark's wording for a column that is not a timestamp.
    """
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return (moment - _EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(
        f"Event time must be defined on a window or a timestamp, but the event time of a record is of type "
        f"{type(value).__name__}: return a datetime or epoch milliseconds (int) from the eventTime function"
    )


def event_time_us(value: object) -> int:
    """An event time as epoch microseconds (an ``int`` is epoch ms): what a late-row check compares, as Spark does.

    Spark compares a row's microsecond timestamp with ``watermark ms * 1000``, so a row 0.5 ms
    after the watermark is not late, although its millisecond statistics equal the watermark.

    Raises:
        TypeError: as :func:`event_time_ms`.
    """
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return (moment - _EPOCH) // datetime.timedelta(microseconds=1)
    return event_time_ms(value) * 1000


def is_late(event_time: Callable[[Any], Any], late_us: int) -> Callable[[Any], bool]:
    """Whether an operator's input value is late: its event time (``event_time`` of it) at or before ``late_us``.

    The function is the watermark's (``withWatermark``'s, applied to the operator's values: a map between the two
    changes what it reads) or the operator's own ``eventTime=``. What it raises, or returns that is no event time,
    comes out naming both, with the record's type, instead of as a bare error inside the task.

    Raises:
        TypeError: the function raised, or returned something other than a datetime or epoch milliseconds.
    """
    def late(value: Any) -> bool:
        try:
            return event_time_us(event_time(value)) <= late_us
        except Exception as exc:
            raise TypeError(
                f"cannot read the event time of the operator's input value of type {type(value).__name__} "
                f"({type(exc).__name__}: {exc}): the watermark's function (withWatermark) is applied to the values the "
                "operator receives; if they are not the records it was given (a map between them), pass the operator "
                "eventTime=, a function of its value") from exc

    return late
