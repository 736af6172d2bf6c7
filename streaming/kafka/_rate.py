"""How far each partition's range may reach in one batch: Spark's ``DirectKafkaInputDStream.maxMessagesPerPartition`` and ``clamp``.

``spark.streaming.kafka.maxRatePerPartition`` caps every partition; with backpressure the PID
estimator's rate (``DirectKafkaRateController``) is shared out by each partition's lag;
``spark.streaming.kafka.minRatePerPartition`` is the floor of a limited partition. Pure
arithmetic, in Spark 2.4's exact order of operations (doubles, truncation to long).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from ._offsets import TopicAndPartition
from ._source_options import option_flag

__all__ = ["KafkaRateSettings", "clamp_offsets", "max_messages_per_partition"]

MAX_RATE_KEY = "spark.streaming.kafka.maxRatePerPartition"
MIN_RATE_KEY = "spark.streaming.kafka.minRatePerPartition"
BACKPRESSURE_KEY = "spark.streaming.backpressure.enabled"
INITIAL_RATE_KEY = "spark.streaming.backpressure.initialRate"


def _long_setting(get: Callable[[str], Any], key: str, default: int) -> int:
    raw = get(key)
    if raw is None or not str(raw).strip():
        return default
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key} must be a whole number of records per second, got {raw!r}") from None


@attrs.frozen
class KafkaRateSettings:
    """A direct stream's rate settings, as Spark reads them (``getLong``; 0 means no limit).

    Attributes:
        max_rate_per_partition: ``spark.streaming.kafka.maxRatePerPartition`` (0: none).
        min_rate_per_partition: ``spark.streaming.kafka.minRatePerPartition`` (1).
        backpressure: ``spark.streaming.backpressure.enabled``.
        initial_rate: ``spark.streaming.backpressure.initialRate`` (0: none), the rate before
            the estimator has one.
    """

    max_rate_per_partition: int = 0
    min_rate_per_partition: int = 1
    backpressure: bool = False
    initial_rate: int = 0

    @classmethod
    def from_settings(cls, get: Callable[[str], Any]) -> KafkaRateSettings:
        """Read them through ``get(key)`` (a Spark setting's text, or ``None``).

        Raises:
            ValueError: a setting that is not a whole number, or a flag that is not true or false.
        """
        raw = get(BACKPRESSURE_KEY)
        enabled = option_flag("false" if raw is None else raw)
        if enabled is None:  # Spark's getBoolean refuses it too
            raise ValueError(f'For input string: "{raw}" ({BACKPRESSURE_KEY} must be true or false)')
        return cls(_long_setting(get, MAX_RATE_KEY, 0), _long_setting(get, MIN_RATE_KEY, 1), enabled,
                   _long_setting(get, INITIAL_RATE_KEY, 0))

    def estimated_rate(self, latest_rate: int) -> int | None:
        """The rate backpressure allows now: the estimator's ``latest_rate`` if positive, else the initial rate; ``None`` when off."""
        if not self.backpressure:
            return None
        return latest_rate if latest_rate > 0 else self.initial_rate


def max_messages_per_partition(latest: Mapping[TopicAndPartition, int], current: Mapping[TopicAndPartition, int], *,
                               batch_ms: int, settings: KafkaRateSettings,
                               estimated_rate: float | None) -> dict[TopicAndPartition, int] | None:
    """How many records each partition of ``latest`` may give this batch, or ``None`` for no limit.

    Spark's rule: with a positive ``estimated_rate`` (backpressure) each partition gets the share
    of it that its lag (``latest - current``, at least 0) is of the total lag, capped by
    ``maxRatePerPartition`` when that is set; otherwise each gets ``maxRatePerPartition``. If the
    rates add up to more than 0, a partition's limit is ``rate * batch seconds`` truncated, and
    at least ``minRatePerPartition``. A partition missing from ``current`` (new) starts at 0.
    """
    max_rate = settings.max_rate_per_partition
    rates: dict[TopicAndPartition, float]
    if estimated_rate is not None and estimated_rate > 0:
        lags = {tp: max(offset - current.get(tp, 0), 0) for tp, offset in latest.items()}
        total_lag = sum(lags.values())
        if total_lag == 0:
            return None  # Spark divides 0 by 0: every rate is NaN, their sum is not > 0
        rates = {}
        for tp, lag in lags.items():
            backpressure_rate = lag / float(total_lag) * estimated_rate
            rates[tp] = min(backpressure_rate, float(max_rate)) if max_rate > 0 else backpressure_rate
    else:
        rates = {tp: float(max_rate) for tp in latest}
    if not sum(rates.values()) > 0:
        return None
    secs_per_batch = batch_ms / 1000.0
    return {tp: max(int(secs_per_batch * limit), settings.min_rate_per_partition) for tp, limit in rates.items()}


def clamp_offsets(latest: Mapping[TopicAndPartition, int], current: Mapping[TopicAndPartition, int],
                  limits: Mapping[TopicAndPartition, int] | None) -> dict[TopicAndPartition, int]:
    """Where each partition's range ends: ``latest``, or ``current + limit`` when that is sooner (Spark's ``clamp``)."""
    if limits is None:
        return dict(latest)
    return {tp: min(current.get(tp, 0) + limits[tp], offset) for tp, offset in latest.items()}
