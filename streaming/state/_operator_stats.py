"""StateOperatorStats: one stateful operator's numbers for a batch, summed over its partitions.

Spark's ``StateOperatorProgress`` before it is reported: each partition's task returns one, the
driver merges them (through an accumulator) and turns the sum into the batch's progress.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from scheduler import StateOperatorProgress

__all__ = ["StateOperatorStats"]


@attrs.frozen
class StateOperatorStats:
    """One stateful operator's numbers for one batch, summed over its partitions (Spark's ``StateOperatorProgress``).

    Attributes:
        custom_metrics: the operator's own counters by Spark's names (``numTimeoutsFired``,
            ``numExpiredTimers``, ...), summed by name when merged.
        partitions: the partitions that reported, as a bit set (bit ``p`` for partition ``p``);
            merged by union, not summed.
    """

    num_rows_total: int
    num_rows_updated: int
    num_rows_removed: int
    num_rows_dropped_by_watermark: int
    memory_used_bytes: int
    commit_time_ms: int
    num_timeouts: int
    num_partitions: int
    all_updates_time_ms: int = 0
    all_removals_time_ms: int = 0
    working_copy_hits: int = 0
    working_copy_misses: int = 0
    partitions: int = 0
    custom_metrics: Mapping[str, int] = attrs.field(factory=dict)
    input_rows: int = 0  # the pairs the partitions were given (not in Spark's progress: how large a batch was)

    def merge(self, other: StateOperatorStats | None) -> StateOperatorStats:
        """These numbers and ``other``'s together: counts summed field by field (by name), the partitions unioned."""
        if other is None:
            return self
        custom = dict(self.custom_metrics)
        for name, value in other.custom_metrics.items():
            custom[name] = custom.get(name, 0) + value
        summed = {field.name: getattr(self, field.name) + getattr(other, field.name)
                  for field in attrs.fields(StateOperatorStats) if field.name not in ("partitions", "custom_metrics")}
        return StateOperatorStats(**summed, partitions=self.partitions | other.partitions, custom_metrics=custom)

    def progress(self, operator_name: str, num_shuffle_partitions: int) -> StateOperatorProgress:
        """As Spark's ``StateOperatorProgress`` of a batch's progress (the custom metrics after the store's)."""
        return StateOperatorProgress(
            operator_name, self.num_rows_total, self.num_rows_updated, self.all_updates_time_ms, self.num_rows_removed,
            self.all_removals_time_ms, self.commit_time_ms, self.memory_used_bytes, self.num_rows_dropped_by_watermark,
            num_shuffle_partitions, self.num_partitions,
            # Spark's HDFS state store names: a hit used the working copy on disk, a miss rebuilt it from the checkpoint
            {"loadedMapCacheHitCount": self.working_copy_hits, "loadedMapCacheMissCount": self.working_copy_misses,
             **self.custom_metrics},
        )
