"""Spark's interval strings in milliseconds: ``withWatermark``'s delay threshold (``"10 seconds"``, ``"1 hour 30 minutes"``).

As Spark's ``IntervalUtils.stringToInterval`` reads them for watermarks: an optional leading
``interval``, then pairs of a signed number and a unit (year, month, week, day, hour, minute,
second, millisecond, microsecond; singular or plural, any case; seconds may have a fraction).
The delay counts a month as 31 days and a year as 12 of them, as Spark's watermark does; a trigger's
interval refuses months and years, as Spark's triggers do.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_delay_threshold", "parse_interval_ms", "parse_trigger_interval_ms"]

_MS_PER_DAY = 86_400_000
_UNIT_MS = {
    "microsecond": Decimal("0.001"),
    "millisecond": Decimal(1),
    "second": Decimal(1_000),
    "minute": Decimal(60_000),
    "hour": Decimal(3_600_000),
    "day": Decimal(_MS_PER_DAY),
    "week": Decimal(7 * _MS_PER_DAY),
    "month": Decimal(31 * _MS_PER_DAY),
    "year": Decimal(12 * 31 * _MS_PER_DAY),
}
_MONTH_UNITS = {"month": 1, "year": 12}  # Spark keeps these apart from the rest, as months
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")  # ASCII digits only, as Spark's parser
_MAX_DIGITS = 40  # far beyond any interval Spark holds (a long of microseconds)


def parse_interval_ms(text: str) -> int:
    """The interval ``text`` in whole milliseconds (rounded toward zero).

    Raises:
        ValueError: ``text`` is not an interval Spark reads, naming what is wrong.
    """
    months, ms = _parse(text)
    return int(months * _UNIT_MS["month"] + ms)


def parse_trigger_interval_ms(text: str) -> int:
    """A trigger's interval ``text`` in whole milliseconds: as :func:`parse_interval_ms`, but months and years
    are refused (a month has no fixed length), as Spark's ``Trigger.ProcessingTime`` and ``Continuous`` do.

    Raises:
        ValueError: ``text`` is not an interval Spark reads, or its months and years do not cancel out
            (Spark's ``Doesn't support month or year interval: <text>``).
    """
    months, ms = _parse(text)
    if months:
        raise ValueError(f"Doesn't support month or year interval: {text}")
    return int(ms)


def _parse(text: str) -> tuple[int, Decimal]:
    """``text`` as Spark's ``CalendarInterval`` holds it: whole months (a year is 12), and the rest in milliseconds."""
    if not isinstance(text, str):
        raise TypeError(f"an interval must be a string such as '10 seconds', got {text!r}")
    words = text.strip().lower().split()
    if words and words[0] == "interval":
        words = words[1:]
    if not words or len(words) % 2:
        raise ValueError(f"Error parsing '{text}' to interval: expected pairs of a number and a unit, such as '10 seconds'")
    months, total = 0, Decimal(0)
    for number, unit in zip(words[::2], words[1::2], strict=True):
        if not _NUMBER.fullmatch(number) or len(number) > _MAX_DIGITS:
            raise ValueError(f"Error parsing '{text}' to interval: '{number}' is not a number")
        name = unit[:-1] if unit.endswith("s") else unit
        scale = _UNIT_MS.get(name)
        if scale is None:
            raise ValueError(f"Error parsing '{text}' to interval: unknown unit '{unit}'")
        try:
            value = Decimal(number)
        except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
            raise ValueError(f"Error parsing '{text}' to interval: '{number}' is not a number") from exc
        if name != "second" and value != value.to_integral_value():
            raise ValueError(f"Error parsing '{text}' to interval: only seconds may have a fraction, got '{number} {unit}'")
        if name in _MONTH_UNITS:
            months += int(value) * _MONTH_UNITS[name]
        else:
            total += value * scale
    return months, total


def parse_delay_threshold(text: str) -> int:
    """``withWatermark``'s delay threshold in ms.

    Raises:
        ValueError: not an interval, or negative (Spark's ``requirement failed`` message).
    """
    delay = parse_interval_ms(text)
    if delay < 0:
        raise ValueError(f"requirement failed: delay threshold ({text.strip()}) should not be negative.")
    return delay
