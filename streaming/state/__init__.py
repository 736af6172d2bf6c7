"""Arbitrary stateful processing: GroupState with timeouts, and the versioned state store it runs on.

Spark's ``FlatMapGroupsWithStateExec`` for DStream programs: :func:`run_partition` is one
partition of one batch, :class:`StateStoreProvider` keeps each operator partition's state as
versions under the checkpoint (changelogs and snapshots) with a local working copy, and
:class:`GroupState` is what the user's function sees. The DStream operators
(``mapGroupsWithState``, ``flatMapGroupsWithState``) and ``withWatermark`` put them on Spark.
"""

from ._event_time import event_time_ms, event_time_of
from ._group_state import NO_TIMESTAMP, GroupState, GroupStateTimeout
from ._groups import (
    DUPLICATE_INITIAL_STATE,
    EVENT_TIME_WITHOUT_WATERMARK,
    USER_FUNCTION_ERROR,
    GroupsWithStateError,
    GroupsWithStateSpec,
    PartitionResult,
    StateOperatorStats,
    initial_state_by_key,
    run_batch,
    run_partition,
)
from ._intervals import parse_delay_threshold, parse_interval_ms
from ._partition_files import keep_partition_count
from ._protocol import StateRow, VersionedStore
from ._reader import (
    FLAT_MAP_GROUPS_WITH_STATE,
    TIMER,
    TRANSFORM_WITH_STATE,
    StateChange,
    StateOperatorMetadata,
    StateRecord,
    read_state,
    read_state_changes,
    read_state_metadata,
)
from ._store import StateStore, StateStoreMetrics
from ._store_format import StateStoreError
from ._store_provider import StateStoreProvider, StateStoreStatistics

__all__ = [
    "DUPLICATE_INITIAL_STATE",
    "EVENT_TIME_WITHOUT_WATERMARK",
    "FLAT_MAP_GROUPS_WITH_STATE",
    "GroupState",
    "GroupStateTimeout",
    "GroupsWithStateError",
    "GroupsWithStateSpec",
    "NO_TIMESTAMP",
    "PartitionResult",
    "StateOperatorStats",
    "StateChange",
    "StateOperatorMetadata",
    "StateRecord",
    "StateRow",
    "StateStore",
    "StateStoreError",
    "StateStoreMetrics",
    "StateStoreProvider",
    "StateStoreStatistics",
    "TIMER",
    "TRANSFORM_WITH_STATE",
    "USER_FUNCTION_ERROR",
    "VersionedStore",
    "event_time_ms",
    "event_time_of",
    "initial_state_by_key",
    "keep_partition_count",
    "parse_delay_threshold",
    "parse_interval_ms",
    "read_state",
    "read_state_changes",
    "read_state_metadata",
    "run_batch",
    "run_partition",
]
