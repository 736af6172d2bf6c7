"""Java longs: their bounds (Spark's batch ids, versions, times and durations) and strict parsing from text (Spark's ``toLong``).

Every batch id, version and millisecond count a checkpoint reader takes from text goes through here, and so
does every time string a setting holds (Spark's ``JavaUtils.timeStringAs``).
"""

from __future__ import annotations

import re

from ._errors import InvalidDurationError

__all__ = ["LONG_MAX", "LONG_MIN", "parse_batch_file_name", "parse_long", "time_string_as"]

LONG_MAX = 2**63 - 1
"""The largest value of a Java long: Spark's batch ids, versions, times and durations."""
LONG_MIN = -(2**63)
"""The smallest value of a Java long."""

_LONG = re.compile(r"-?[0-9]{1,19}")  # 19 digits hold every long; longer text is never one


def parse_long(text: str) -> int | None:
    """``text`` as a Java long (optional ``-``, ASCII digits, in range), or ``None`` if it is not one.

    Never raises: a superscript digit, a fullwidth digit, whitespace, a sign other than a
    leading ``-``, or a number beyond the long range all give ``None`` (``str.isdigit`` accepts
    ``"²"`` and ``"٣"``, which ``int()`` then refuses or reads, and ``int()`` of thousands of
    digits raises Python's conversion limit).
    """
    if not isinstance(text, str) or _LONG.fullmatch(text) is None:
        return None
    value = int(text)
    return value if LONG_MIN <= value <= LONG_MAX else None


def parse_batch_file_name(name: str) -> int | None:
    """The batch id a log file is named by (``"0"``, ``"17"``), or ``None`` for any other name.

    A batch file's name is a non-negative long in canonical form (no sign, no leading zero), as
    Spark's ``HDFSMetadataLog`` reads them; anything else (``.0.crc``, ``007``, ``²``, a name of
    thousands of digits) is not a batch file and is ignored by the logs, as in Spark.
    """
    value = parse_long(name)
    if value is None or value < 0 or name.startswith("-") or (name != "0" and name.startswith("0")):
        return None
    return value


_TIME_UNITS_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "min": 60_000_000,
                  "h": 3_600_000_000, "d": 86_400_000_000}
_TIME_STRING = re.compile(r"(-?[0-9]+)([a-z]+)?")


def time_string_as(value: str, unit: str, key: str) -> int:
    """Spark's ``JavaUtils.timeStringAs(value, unit)`` without the JVM: ``"5s"`` in ``"ms"`` is 5000.

    A number without a suffix is in ``unit``; suffixes are us, ms, s, m, min, h and d; the result
    is truncated toward zero and saturates at Java's long range, as Java's ``TimeUnit.convert``.

    Raises:
        InvalidDurationError: ``value`` is not a time string (Spark's message, after ``key``).
    """
    spark_error = ("Time must be specified as seconds (s), milliseconds (ms), microseconds (us), minutes (m or min), "
                   "hour (h), or day (d). E.g. 50s, 100ms, or 250us.")
    lower = value.lower().strip()
    found = _TIME_STRING.fullmatch(lower)
    if found is None:
        raise InvalidDurationError(f"{key}: {spark_error}\nFailed to parse time string: {value}")
    number, suffix = int(found.group(1)), found.group(2)
    if not LONG_MIN <= number <= LONG_MAX:
        raise InvalidDurationError(f'{key}: {spark_error}\nFor input string: "{found.group(1)}"')
    if suffix is not None and suffix not in _TIME_UNITS_US:
        raise InvalidDurationError(f'{key}: {spark_error}\nInvalid suffix: "{suffix}"')
    source, target = _TIME_UNITS_US[suffix or unit], _TIME_UNITS_US[unit]
    micros = number * source
    converted = abs(micros) // target * (1 if micros >= 0 else -1)  # truncated toward zero
    return max(LONG_MIN, min(LONG_MAX, converted))
