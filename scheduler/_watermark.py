"""Event-time watermarks: per-batch event-time statistics and the global watermark (Spark's ``WatermarkTracker``).

Each watermarked input (``withWatermark(eventTime, delay)``) records the event times it saw in a
batch. After the batch ran, every input that saw data proposes ``max event time - delay``; an
input's own watermark only moves forward, and one that never saw data stays unset. The global
watermark is the ``min`` (default: the slowest input; an unset one counts as 0, so it stays 0
until every input has seen data) or the ``max`` of the inputs' watermarks, by the policy
``spark.sql.streaming.multipleWatermarkPolicy``, and never moves back.

Batch N runs with the global watermark computed after batch N - 1 (its offsets entry's
``batchWatermarkMs``), which batch N - 1's commit records as ``nextBatchWatermarkMs``: data is
never judged against a watermark derived from its own batch. A stateful operator evicts by the
batch's watermark and drops late rows by the previous batch's (Spark 3.4's two watermarks).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import attrs

from ._errors import InvalidPipelineError

__all__ = ["WATERMARK_POLICY_KEY", "BatchWatermarks", "EventTimeStats", "WatermarkTracker", "parse_watermark_policy"]

WATERMARK_POLICY_KEY = "spark.sql.streaming.multipleWatermarkPolicy"
"""The setting (and offsets-entry ``conf`` key) naming the policy: ``min`` or ``max``."""

_POLICIES = ("min", "max")


def parse_watermark_policy(text: str) -> str:
    """``min`` or ``max`` from the setting's value (any case, no surrounding space), as Spark 4.3 checks it.

    Raises:
        InvalidPipelineError: anything else, with Spark's ``INVALID_CONF_VALUE.REQUIREMENT`` message.
    """
    policy = text.lower()
    if policy not in _POLICIES:
        raise InvalidPipelineError(
            f"[INVALID_CONF_VALUE.REQUIREMENT] The value '{text}' in the config \"{WATERMARK_POLICY_KEY}\" is invalid. "
            f"Invalid value for '{WATERMARK_POLICY_KEY}'. Valid values are 'min' and 'max' SQLSTATE: 22022")
    return policy


@attrs.frozen
class EventTimeStats:
    """The event times one watermarked input saw in one batch: count, min, max and sum, in epoch ms."""

    count: int
    min_ms: int
    max_ms: int
    sum_ms: int

    @classmethod
    def of(cls, times_ms: Iterable[int]) -> EventTimeStats | None:
        """The statistics of ``times_ms``, or ``None`` when there is none."""
        count = total = 0
        low = high = 0
        for t in times_ms:
            if count == 0:
                low = high = t
            elif t < low:
                low = t
            elif t > high:
                high = t
            count += 1
            total += t
        return cls(count, low, high, total) if count else None

    def merge(self, other: EventTimeStats | None) -> EventTimeStats:
        """These statistics and ``other``'s together (partitions of one batch)."""
        if other is None:
            return self
        return EventTimeStats(self.count + other.count, min(self.min_ms, other.min_ms), max(self.max_ms, other.max_ms),
                              self.sum_ms + other.sum_ms)

    @property
    def avg_ms(self) -> int:
        """The mean event time, rounded down to the millisecond (Spark reports it as a timestamp)."""
        return self.sum_ms // self.count


@attrs.frozen
class BatchWatermarks:
    """The two watermarks a batch's stateful operators use (Spark 3.4+).

    Attributes:
        eviction_ms: the batch's own watermark (its offsets entry's ``batchWatermarkMs``): state
            whose event-time timeout is strictly before it times out.
        late_ms: the previous batch's watermark: input rows at or before it are late and dropped.
    """

    eviction_ms: int
    late_ms: int


class WatermarkTracker:
    """The global watermark of one query run, advanced after each batch; see the module docstring.

    Args:
        delays_ms: the delay threshold of each watermarked input, in a stable order.
        policy: ``min`` or ``max``.
        watermark_ms: where the global watermark starts (a restart restores it from the logs).
    """

    def __init__(self, delays_ms: Sequence[int], policy: str = "min", watermark_ms: int = 0) -> None:
        """Track ``len(delays_ms)`` watermarked inputs, none of which has seen data yet."""
        if any(d < 0 for d in delays_ms):
            raise ValueError(f"watermark delays must not be negative, got {list(delays_ms)}")
        self.delays_ms = tuple(delays_ms)
        self.policy = parse_watermark_policy(policy)
        self._inputs: list[int | None] = [None] * len(self.delays_ms)
        self._global = watermark_ms

    @property
    def enabled(self) -> bool:
        """Whether the query has any watermarked input (without one the watermark stays 0)."""
        return bool(self.delays_ms)

    @property
    def current_ms(self) -> int:
        """The global watermark: what the next batch to be planned runs with."""
        return self._global

    @property
    def input_watermarks_ms(self) -> tuple[int | None, ...]:
        """Each input's own watermark (``None``: it has not seen data in this run)."""
        return tuple(self._inputs)

    def update(self, stats: Sequence[EventTimeStats | None]) -> bool:
        """Fold in one finished batch's statistics (one per input, ``None`` for no data); whether the global moved.

        Raises:
            ValueError: ``stats`` does not have one entry per watermarked input.
        """
        if len(stats) != len(self.delays_ms):
            raise ValueError(f"expected event-time statistics for {len(self.delays_ms)} watermarked inputs, got {len(stats)}")
        for i, (delay, batch) in enumerate(zip(self.delays_ms, stats, strict=True)):
            if batch is None or batch.count == 0:
                continue
            candidate = batch.max_ms - delay
            current = self._inputs[i]
            if current is None or candidate > current:
                self._inputs[i] = candidate
        if not self._inputs:
            return False
        values = [0 if v is None else v for v in self._inputs]
        proposed = min(values) if self.policy == "min" else max(values)
        if proposed > self._global:
            self._global = proposed
            return True
        return False

    def __repr__(self) -> str:
        return f"<WatermarkTracker [{self.policy} of {list(self._inputs)} | global {self._global} ms]>"
