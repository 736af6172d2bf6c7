"""Event times as epoch milliseconds: what ``withWatermark``'s function may return."""

from __future__ import annotations

import datetime
from typing import Any, Callable

__all__ = ["event_time_ms", "event_time_of"]

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


def event_time_of(extract: Callable[[Any], Any]) -> Callable[[Any], int]:
    """``extract``'s result as epoch ms: the event-time function of a record, for late-row checks."""

    def event_time(value: Any) -> int:
        return event_time_ms(extract(value))

    return event_time
