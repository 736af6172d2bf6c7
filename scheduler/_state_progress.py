"""StateOperatorProgress: one stateful operator's numbers in a batch's progress (Spark's ``StateOperatorProgress``)."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

__all__ = ["StateOperatorProgress"]


@attrs.frozen
class StateOperatorProgress:
    """What a stateful operator did in one batch, summed over its partitions.

    Attributes:
        operator_name: e.g. ``flatMapGroupsWithState``.
        num_rows_total: rows held after the batch.
        num_rows_updated: rows written.
        all_updates_time_ms: time spent writing them.
        num_rows_removed: rows deleted.
        all_removals_time_ms: time spent deleting them.
        commit_time_ms: time spent committing the stores.
        memory_used_bytes: the stores' footprint.
        num_rows_dropped_by_watermark: input rows dropped as late.
        num_shuffle_partitions: the operator's partitions.
        num_state_store_instances: stores that ran (one per partition).
        custom_metrics: further counters (``numTimeoutsFired``; ``loadedMapCacheHitCount``, ``loadedMapCacheMissCount``:
            loads that used the working copy on disk, and that rebuilt it from the checkpoint).
    """

    operator_name: str
    num_rows_total: int
    num_rows_updated: int
    all_updates_time_ms: int
    num_rows_removed: int
    all_removals_time_ms: int
    commit_time_ms: int
    memory_used_bytes: int
    num_rows_dropped_by_watermark: int
    num_shuffle_partitions: int
    num_state_store_instances: int
    custom_metrics: Mapping[str, int] = attrs.field(factory=dict)

    def json_value(self) -> dict[str, Any]:
        """Spark's JSON object, in Spark's key order (custom metrics sorted)."""
        return {
            "operatorName": self.operator_name,
            "numRowsTotal": self.num_rows_total,
            "numRowsUpdated": self.num_rows_updated,
            "allUpdatesTimeMs": self.all_updates_time_ms,
            "numRowsRemoved": self.num_rows_removed,
            "allRemovalsTimeMs": self.all_removals_time_ms,
            "commitTimeMs": self.commit_time_ms,
            "memoryUsedBytes": self.memory_used_bytes,
            "numRowsDroppedByWatermark": self.num_rows_dropped_by_watermark,
            "numShufflePartitions": self.num_shuffle_partitions,
            "numStateStoreInstances": self.num_state_store_instances,
            "customMetrics": dict(sorted(self.custom_metrics.items())),
        }
