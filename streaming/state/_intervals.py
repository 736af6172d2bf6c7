"""Spark's interval strings in milliseconds: ``withWatermark``'s delay threshold (``"10 seconds"``, ``"1 hour 30 minutes"``).

As Spark's ``IntervalUtils.stringToInterval`` reads them for watermarks: an optional leading
``interval``, then pairs of a signed number and a unit (year, month, week, day, hour, minute,
second, millisecond, microsecond; singular or plural, any case; seconds may have a fraction).
The delay counts a month as 31 days and a year as 12 of them, as Spark's watermark does.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_delay_threshold", "parse_interval_ms"]

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
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")  # ASCII digits only, as Spark's parser
_MAX_DIGITS = 40  # far beyond any interval Spark holds (a long of microseconds)


def parse_interval_ms(text: str) -> int:
    """The interval ``text`` in whole milliseconds (rounded toward zero).

    Raises:
        ValueError: ``text`` is not an interval Spark reads, naming what is wrong.
    """
    if not isinstance(text, str):
        raise TypeError(f"an interval must be a string such as '10 seconds', got {text!r}")
    words = text.strip().lower().split()
    if words and words[0] == "interval":
        words = words[1:]
    if not words or len(words) % 2:
        raise ValueError(f"Error parsing '{text}' to interval: expected pairs of a number and a unit, such as '10 seconds'")
    total = Decimal(0)
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
        total += value * scale
    return int(total)


def parse_delay_threshold(text: str) -> int:
    """``withWatermark``'s delay threshold in ms.

    Raises:
        ValueError: not an interval, or negative (Spark's ``requirement failed`` message).
    """
    delay = parse_interval_ms(text)
    if delay < 0:
        raise ValueError(f"requirement failed: delay threshold ({text.strip()}) should not be negative.")
    return delay
