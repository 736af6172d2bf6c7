"""Spark's duration strings and pyspark's second-based durations and batch times, without the JVM."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from listeners import DEFAULT_LISTENER_EXIT_TIMEOUT
from scheduler import Duration, InvalidDurationError, Time, scaled_milliseconds, time_string_as

__all__ = [
    "LISTENER_EXIT_TIMEOUT_KEY",
    "batch_datetime",
    "job_description",
    "listener_exit_timeout",
    "seconds_to_duration",
    "streaming_job_group",
    "time_string_as",
    "timeout_milliseconds",
]

def seconds_to_duration(seconds: Any, what: str) -> Duration:
    """pyspark's ``Duration(int(seconds * 1000))``, refusing what pyspark would silently mangle.

    Raises:
        InvalidDurationError: not a number, NaN, or not positive once cut to whole milliseconds.
        DurationOverflowError: infinite or beyond Spark's range (an ``OverflowError`` too, as in pyspark).
    """
    if isinstance(seconds, Duration):
        return seconds
    fix = "pass e.g. 1 or 0.5"
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidDurationError(
            f"{what} must be a number of seconds (int or float), got {type(seconds).__name__} {seconds!r}; {fix}"
        )
    ms = scaled_milliseconds(seconds, 1000, what, fix=fix, truncate=True)
    if ms <= 0:
        raise InvalidDurationError(f"{what} must be a positive number of seconds, got {seconds!r}; {fix}")
    return Duration(ms)


def timeout_milliseconds(seconds: Any, what: str = "timeout") -> int:
    """pyspark's ``int(timeout * 1000)`` for a wait's timeout in seconds, with the house's errors for NaN and infinity.

    Raises:
        InvalidDurationError: not a number, or NaN.
        DurationOverflowError: infinite or beyond Spark's range.
    """
    return scaled_milliseconds(seconds, 1000, what, fix="pass a number of seconds such as 10, or None to wait without a "
                                                        "timeout", truncate=True)


def batch_datetime(time: Time) -> datetime:
    """The batch time as pyspark hands it to user functions: a naive local ``datetime``."""
    return datetime.fromtimestamp(time.milliseconds / 1000)


def streaming_job_group(context_name: str, time: Time, output_op_id: int) -> str:
    """The Spark job group of one output operation of one batch (what the web UI looks Spark's jobs up by)."""
    return f"{context_name}-{time.milliseconds}-{output_op_id}"


def job_description(time: Time, output_op_id: int, batch_interval_ms: int = 1000) -> str:
    """The Spark UI description of a streaming job, as Spark Streaming words it (``UIUtils.formatBatchTime``: with
    milliseconds when batches are shorter than a second)."""
    at = batch_datetime(time)
    shown = f"{at:%H:%M:%S}" if batch_interval_ms >= 1000 else f"{at:%H:%M:%S}.{at.microsecond // 1000:03d}"
    return f"Streaming job from [output operation {output_op_id}, batch time {shown}]"


LISTENER_EXIT_TIMEOUT_KEY = "spark.scheduler.listenerbus.exitTimeout"
"""Spark's bound on how long a stopping listener bus waits for its listeners (Spark 4.0)."""


def listener_exit_timeout(value: str | None) -> Duration | None:
    """The listener bus's exit timeout from ``spark.scheduler.listenerbus.exitTimeout`` (``None``: no bound).

    Spark's reading: a time string in milliseconds by default, ``0`` waits without a bound and
    a negative one is refused. Unset, it is :data:`listeners.DEFAULT_LISTENER_EXIT_TIMEOUT`
    (Spark's default, 0, lets one hung listener hold a stop forever).

    Raises:
        InvalidDurationError: not a time string, or negative (Spark's messages).
    """
    if value is None:
        return DEFAULT_LISTENER_EXIT_TIMEOUT
    ms = time_string_as(value, "ms", LISTENER_EXIT_TIMEOUT_KEY)
    if ms < 0:
        raise InvalidDurationError(
            f"'{ms}' in {LISTENER_EXIT_TIMEOUT_KEY} is invalid. Listener bus exit timeout must be non-negative duration"
        )
    return None if ms == 0 else Duration(ms)
