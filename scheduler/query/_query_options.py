"""Triggers and progress-tracking options of a checkpointed query (Spark's ``Trigger`` and writer options).

Options keep Spark's names and defaults (``asyncProgressTrackingEnabled``,
``asyncProgressTrackingCheckpointIntervalMs``, ``spark.sql.streaming.minBatchesToRetain``, ...),
matched case-insensitively as Spark's writer options are.
"""

from __future__ import annotations

import enum
from typing import Mapping

import attrs

from .._errors import InvalidDurationError, InvalidPipelineError
from .._numbers import parse_long, time_string_as
from .._watermark import WATERMARK_POLICY_KEY

__all__ = ["ProgressTrackingOptions", "Trigger", "whole_number_option"]


class Trigger(enum.Enum):
    """When batches run (Spark's ``Trigger``)."""

    PROCESSING_TIME = "ProcessingTime"
    """One batch per grid time, ``batch_duration`` apart, for ever: DStream's timer."""
    ONCE = "Once"
    """One batch with everything available (read limits ignored), then stop. With a batch left
    uncommitted in the checkpoint, only that batch runs again, as in Spark."""
    AVAILABLE_NOW = "AvailableNow"
    """Everything available at start, in as many batches as read limits need, back to back; then stop."""


ASYNC_ENABLED = "asyncProgressTrackingEnabled"
ASYNC_INTERVAL = "asyncProgressTrackingCheckpointIntervalMs"
MIN_BATCHES_TO_RETAIN = "spark.sql.streaming.minBatchesToRetain"
NUM_RECENT_PROGRESS = "spark.sql.streaming.numRecentProgressUpdates"
NO_DATA_PROGRESS_INTERVAL = "spark.sql.streaming.noDataProgressEventInterval"
OVERRIDE_SINK_CHECK = "_asyncProgressTrackingOverrideSinkSupportCheck"

_KNOWN = (ASYNC_ENABLED, ASYNC_INTERVAL, MIN_BATCHES_TO_RETAIN, NUM_RECENT_PROGRESS, NO_DATA_PROGRESS_INTERVAL, OVERRIDE_SINK_CHECK)


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidPipelineError(f"option {key} must be true or false, got {value!r}")


def whole_number_option(key: str, value: object, *, minimum: int = 1, unit: str | None = None) -> int:
    """An option's value as a whole number of at least ``minimum`` (1 or 0): an int, or a string of one (a Java long).

    Spark's writer and configuration options arrive as strings (``"1000"``) or as ints; a bool,
    a float, a fraction or a number beyond a long is refused.

    Args:
        key: the option's name, for the message.
        value: what was given.
        minimum: 1 (a positive number) or 0 (a non-negative one).
        unit: what the number counts (``"milliseconds"``), for the message.

    Raises:
        InvalidPipelineError: ``"option <key> must be a positive whole number [of <unit>], got <value>"``.
    """
    parsed: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        parsed = value
    elif isinstance(value, str):
        parsed = parse_long(value.strip())
    if parsed is None or parsed < minimum:
        bound = "a positive" if minimum == 1 else "a non-negative"
        of = "" if unit is None else f" of {unit}"
        raise InvalidPipelineError(f"option {key} must be {bound} whole number{of}, got {value!r}")
    return parsed


def _time_option_ms(key: str, value: object) -> int:
    """A time setting in milliseconds, as Spark's ``timeConf(MILLISECONDS)`` reads it: an int, or a number or time string.

    A bare number is milliseconds (``"10000"``), a suffix gives the unit (``"10s"``, ``"500ms"``, ``"1min"``);
    a negative time is refused.

    Raises:
        InvalidPipelineError: ``"option <key> must be a non-negative time ..., got <value>"``.
    """
    parsed: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = time_string_as(value, "ms", key)
        except InvalidDurationError:
            parsed = None
    if parsed is None or parsed < 0:
        raise InvalidPipelineError(f"option {key} must be a non-negative time: a number of milliseconds or a time string "
                                   f"such as 10s or 500ms, got {value!r}")
    return parsed


@attrs.frozen
class ProgressTrackingOptions:
    """How a checkpointed query logs its progress and reports it.

    Attributes:
        async_progress_tracking_enabled: write the offsets and commits logs on a background
            writer, off the batches' critical path (``asyncProgressTrackingEnabled``).
        async_progress_tracking_checkpoint_interval_ms: with async tracking, the least time
            between two durable offsets writes; 0 writes every batch
            (``asyncProgressTrackingCheckpointIntervalMs``, default 1000).
        min_batches_to_retain: offsets and commits entries kept on disk
            (``spark.sql.streaming.minBatchesToRetain``, default 100).
        num_recent_progress_updates: bound of ``recent_progress``; as in Spark, it keeps one
            fewer than this (``spark.sql.streaming.numRecentProgressUpdates``, default 100).
        no_data_progress_event_interval_ms: least time between two idle-trigger progress
            entries (``spark.sql.streaming.noDataProgressEventInterval``, default 10000; a time
            string such as ``"10s"``, or a number of milliseconds, as Spark reads it).
        override_sink_support_check: let async progress tracking run with outputs that do
            not declare support for it (``_asyncProgressTrackingOverrideSinkSupportCheck``,
            Spark's internal option, default false).
    """

    async_progress_tracking_enabled: bool = False
    async_progress_tracking_checkpoint_interval_ms: int = 1000
    min_batches_to_retain: int = 100
    num_recent_progress_updates: int = 100
    no_data_progress_event_interval_ms: int = 10_000
    override_sink_support_check: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, object] | None) -> ProgressTrackingOptions:
        """Read Spark-named options (values as strings, ints or bools); unknown names are refused.

        Raises:
            InvalidPipelineError: an unknown option or a bad value.
        """
        values: dict[str, object] = {}
        known = {k.lower(): k for k in _KNOWN}
        for key, value in (options or {}).items():
            name = known.get(str(key).lower())
            if name is None:
                raise InvalidPipelineError(f"unknown option {key!r}; the options are {', '.join(_KNOWN)}")
            values[name] = value
        defaults = cls()

        def number(key: str, default: int, minimum: int, unit: str) -> int:
            return whole_number_option(key, values.get(key, default), minimum=minimum, unit=unit)

        return cls(
            _bool(ASYNC_ENABLED, values.get(ASYNC_ENABLED, defaults.async_progress_tracking_enabled)),
            number(ASYNC_INTERVAL, defaults.async_progress_tracking_checkpoint_interval_ms, 0, "milliseconds"),
            number(MIN_BATCHES_TO_RETAIN, defaults.min_batches_to_retain, 1, "batches"),
            number(NUM_RECENT_PROGRESS, defaults.num_recent_progress_updates, 1, "entries"),
            # A time setting in Spark's SQLConf (timeConf in ms): "10s" is 10000, a bare number is milliseconds
            _time_option_ms(NO_DATA_PROGRESS_INTERVAL, values.get(NO_DATA_PROGRESS_INTERVAL,
                                                                  defaults.no_data_progress_event_interval_ms)),
            _bool(OVERRIDE_SINK_CHECK, values.get(OVERRIDE_SINK_CHECK, defaults.override_sink_support_check)),
        )

    def check_trigger(self, trigger: Trigger) -> None:
        """Refuse async progress tracking with Once and AvailableNow, with Spark's messages.

        Raises:
            InvalidPipelineError: the combination is not supported.
        """
        if not self.async_progress_tracking_enabled:
            return
        if trigger is Trigger.ONCE:
            raise InvalidPipelineError("Async progress tracking cannot be used with Once trigger")
        if trigger is Trigger.AVAILABLE_NOW:
            raise InvalidPipelineError("Async progress tracking cannot be used with AvailableNow trigger")


def read_query_options(options: Mapping[str, object] | None) -> tuple[ProgressTrackingOptions, list[str]]:
    """A query's options: ``spark.sql.streaming.multipleWatermarkPolicy`` (in any case) taken out, its values as given
    (a non-string as its ``repr``), in order, for the watermark tracker, which reads the last; the rest read as
    :class:`ProgressTrackingOptions`.

    Raises:
        InvalidPipelineError: an unknown option or a bad value of one (the policy's values are not checked here).
    """
    rest: dict[str, object] = {}
    policies: list[str] = []
    for key, value in (options or {}).items():
        if str(key).lower() == WATERMARK_POLICY_KEY.lower():
            policies.append(value if isinstance(value, str) else repr(value))
        else:
            rest[key] = value
    return ProgressTrackingOptions.from_options(rest), policies
