"""Spark's interval strings in milliseconds: ``withWatermark``'s delay threshold (``"10 seconds"``, ``"1 hour 30 minutes"``).

As Spark's ``IntervalUtils.stringToInterval`` reads them for watermarks: an optional leading
``interval``, then pairs of a signed number (the sign may stand apart: ``- 1 second``) and a unit
(year, month, week, day, hour, minute, second, millisecond, microsecond; singular or plural, any
case; seconds may have a fraction). The delay counts a month as 31 days and a year as 12 of them,
as Spark's watermark does, and must fit Spark's interval (a long of microseconds); a trigger's
interval refuses months and years, as Spark's triggers do.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_delay_threshold", "parse_interval_ms", "parse_trigger_interval_ms"]

_MICROS_PER_DAY = 86_400_000_000
# Spark's CalendarInterval: months and days are 32-bit ints, the rest a long of microseconds.
_MONTH_UNITS = {"month": 1, "year": 12}
_DAY_UNITS = {"day": 1, "week": 7}
_MICRO_UNITS = {"microsecond": 1, "millisecond": 1_000, "second": 1_000_000, "minute": 60_000_000, "hour": 3_600_000_000}
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_QUOTED_WHOLE = re.compile(r"(?i)interval\s+(['\"])([^'\"]*)\1")
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")  # ASCII digits only, as Spark's parser
_MAX_DIGITS = 40  # far beyond any interval Spark holds (a long of microseconds)


def _values(text: str, words: list[str], quoted: bool) -> list[str]:
    """The number words of ``words`` (pairs of a number and a unit): a lone sign joins the number after it (Spark's
    ``- 1 second``), and with ``quoted`` a number may be a SQL string literal (``'10'``), as in ``interval '10' second``."""
    joined: list[str] = []
    sign = ""
    for word in words:
        if not sign and word in ("+", "-") and len(joined) % 2 == 0:
            sign = word
            continue
        if quoted and len(joined) % 2 == 0 and len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"":
            word = word[1:-1].strip()
        joined.append(sign + word if sign else word)
        sign = ""
    if sign or not joined or len(joined) % 2:
        raise ValueError(f"Error parsing '{text}' to interval: expected pairs of a number and a unit, such as '10 seconds'")
    return joined


def _overflow(text: str) -> ValueError:
    return ValueError(f"Error parsing '{text}' to interval: it overflows Spark's interval (months and days are 32-bit "
                      f"ints, and the whole interval at most {_LONG_MAX} microseconds, about 292,000 years)")


def _checked(text: str, value: int, limit: int) -> int:
    if not -limit - 1 <= value <= limit:
        raise _overflow(text)
    return value


def parse_interval_ms(text: str, *, quoted: bool = False) -> int:
    """The interval ``text`` in whole milliseconds (rounded toward zero).

    Spark keeps an interval as 32-bit months and days and a long of microseconds, and its
    duration (a month is 31 days) as a long of microseconds: anything beyond is refused, as
    Spark refuses it. With ``quoted`` a number may be a SQL string literal (``interval '10'
    second``), as ``withWatermark``'s SQL parser reads it.

    Raises:
        ValueError: ``text`` is not an interval Spark reads, naming what is wrong.
    """
    months, micros = _parse(text, quoted)
    # Spark's getDuration: months of 31 days, then the rest, each step within a long.
    total = _checked(text, micros + _checked(text, months * 31 * _MICROS_PER_DAY, _LONG_MAX), _LONG_MAX)
    return _whole_ms(total)


def parse_trigger_interval_ms(text: str) -> int:
    """A trigger's interval ``text`` in whole milliseconds: as :func:`parse_interval_ms`, but months and years
    are refused (a month has no fixed length), as Spark's ``Trigger.ProcessingTime`` and ``Continuous`` do.

    Raises:
        ValueError: ``text`` is not an interval Spark reads, or its months and years do not cancel out
            (Spark's ``Doesn't support month or year interval: <text>``).
    """
    months, micros = _parse(text, False)
    if months:
        raise ValueError(f"Doesn't support month or year interval: {text}")
    return _whole_ms(micros)


def _whole_ms(micros: int) -> int:
    whole_ms = abs(micros) // 1000  # toward zero, as Java's TimeUnit.convert
    return whole_ms if micros >= 0 else -whole_ms


def _parse(text: str, quoted: bool) -> tuple[int, int]:
    """``text`` as Spark's ``CalendarInterval`` holds it: whole months (a year is 12), and days and the rest together
    in microseconds (each within Spark's bounds)."""
    if not isinstance(text, str):
        raise TypeError(f"an interval must be a string such as '10 seconds', got {text!r}")
    literal = _QUOTED_WHOLE.fullmatch(text.strip()) if quoted else None
    if literal is not None:  # SQL's interval '1 day 2 hours'
        return _parse(literal.group(2), False)
    words = text.strip().lower().split()
    prefixed = bool(words) and words[0] == "interval"
    if prefixed:
        words = words[1:]
    words = _values(text, words, quoted and prefixed)  # a quoted number only in SQL's form: interval '10' second
    months = days = micros = 0
    for number, unit in zip(words[::2], words[1::2], strict=True):
        if not _NUMBER.fullmatch(number) or len(number) > _MAX_DIGITS:
            raise ValueError(f"Error parsing '{text}' to interval: '{number}' is not a number")
        name = unit[:-1] if unit.endswith("s") else unit
        if name not in _MONTH_UNITS and name not in _DAY_UNITS and name not in _MICRO_UNITS:
            raise ValueError(f"Error parsing '{text}' to interval: unknown unit '{unit}'")
        try:
            value = Decimal(number)
        except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
            raise ValueError(f"Error parsing '{text}' to interval: '{number}' is not a number") from exc
        if name != "second" and value != value.to_integral_value():
            raise ValueError(f"Error parsing '{text}' to interval: only seconds may have a fraction, got '{number} {unit}'")
        whole = _checked(text, int(value), _LONG_MAX)  # Spark reads the number as a long
        if name in _MONTH_UNITS:
            months = _checked(text, months + _checked(text, whole, _INT_MAX) * _MONTH_UNITS[name], _INT_MAX)
        elif name in _DAY_UNITS:
            days = _checked(text, days + _checked(text, whole, _INT_MAX) * _DAY_UNITS[name], _INT_MAX)
        else:
            micros = _checked(text, micros + _checked(text, int(value * _MICRO_UNITS[name]), _LONG_MAX), _LONG_MAX)
    return months, _checked(text, micros + _checked(text, days * _MICROS_PER_DAY, _LONG_MAX), _LONG_MAX)


def parse_delay_threshold(text: str) -> int:
    """``withWatermark``'s delay threshold in ms.

    Raises:
        ValueError: not an interval, or negative (Spark's ``requirement failed`` message).
    """
    delay = parse_interval_ms(text, quoted=True)
    if delay < 0:
        raise ValueError(f"requirement failed: delay threshold ({text.strip()}) should not be negative.")
    return delay
