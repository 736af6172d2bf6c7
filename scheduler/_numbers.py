"""Java longs: their bounds (Spark's batch ids, versions, times and durations) and strict parsing from text (Spark's ``toLong``).

Every batch id, version and millisecond count a checkpoint reader takes from text goes through here.
"""

from __future__ import annotations

import re

__all__ = ["LONG_MAX", "LONG_MIN", "parse_batch_file_name", "parse_long"]

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
