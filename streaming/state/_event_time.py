"""Event times: what ``withWatermark``'s function may return, as epoch milliseconds (statistics) or microseconds (late rows)."""

from __future__ import annotations

import datetime

__all__ = ["event_time_ms", "event_time_us"]

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
