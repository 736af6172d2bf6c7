"""Arbitrary stateful processing: GroupState with timeouts, transformWithState's processors, and the versioned state store they run on.

Spark's ``FlatMapGroupsWithStateExec`` for DStream programs: :func:`run_partition` is one
partition of one batch, :class:`StateStoreProvider` keeps each operator partition's state as
versions under the checkpoint (changelogs and snapshots) with a local working copy, and
:class:`GroupState` is what the user's function sees. :func:`run_transform_batch` is one partition of one batch of
Spark's ``TransformWithStateExec``: a :class:`StatefulProcessor` with value, list and map state,
timers and TTL on the same store. The DStream operators
(``mapGroupsWithState``, ``flatMapGroupsWithState``) and ``withWatermark`` put them on Spark.
"""

from ._batch_outputs import BatchOutputs, once_per_batch
from ._catch_up import STATE_CATCH_UP_LIMIT, StateBehind, StateCatchUpError
from ._event_time import event_time_ms, event_time_us
from ._group_state import NO_TIMESTAMP, GroupState, GroupStateTimeout
from ._groups import (
    DUPLICATE_INITIAL_STATE,
    EVENT_TIME_WITHOUT_WATERMARK,
    USER_FUNCTION_ERROR,
    GroupsWithStateError,
    GroupsWithStateSpec,
    PartitionResult,
    initial_state_by_key,
    run_batch,
    run_partition,
)
from ._intervals import parse_delay_threshold, parse_interval_ms, parse_trigger_interval_ms
from ._operator_record import StateOperatorMismatchError, check_operator
from ._operator_stats import StateOperatorStats
from ._partition_files import keep_partition_count
from ._processor import ExpiredTimerInfo, StatefulProcessor, TimerValues
from ._processor_errors import TimeMode, TransformWithStateError
from ._processor_rows import partition_hash
from ._processor_schema import record_schema
from ._processor_state import ListState, MapState, StatefulProcessorHandle, ValueState
from ._protocol import StateRow, VersionedStore
from ._reader import (
    FLAT_MAP_GROUPS_WITH_STATE,
    TIMER,
    StateChange,
    StateOperatorMetadata,
    StateRecord,
    read_state,
    read_state_changes,
    read_state_metadata,
)
from ._store import StateStore, StateStoreMetrics
from ._store_format import StateNotFoundError, StateStoreError
from ._store_provider import StateStoreProvider, StateStoreStatistics
from ._transform import (
    TRANSFORM_WITH_STATE_OPERATOR,
    TransformResult,
    TransformWithStateSpec,
    initial_rows_by_key,
    run_transform_batch,
    run_transform_partition,
)

__all__ = [
    "partition_hash",
    "BatchOutputs",
    "DUPLICATE_INITIAL_STATE",
    "EVENT_TIME_WITHOUT_WATERMARK",
    "FLAT_MAP_GROUPS_WITH_STATE",
    "ExpiredTimerInfo",
    "GroupState",
    "GroupStateTimeout",
    "GroupsWithStateError",
    "GroupsWithStateSpec",
    "ListState",
    "MapState",
    "NO_TIMESTAMP",
    "STATE_CATCH_UP_LIMIT",
    "PartitionResult",
    "StateOperatorStats",
    "StateBehind",
    "StateCatchUpError",
    "StateChange",
    "StateOperatorMetadata",
    "StateOperatorMismatchError",
    "StateRecord",
    "StateNotFoundError",
    "StateRow",
    "StateStore",
    "StateStoreError",
    "StateStoreMetrics",
    "StateStoreProvider",
    "StateStoreStatistics",
    "TIMER",
    "StatefulProcessor",
    "StatefulProcessorHandle",
    "TRANSFORM_WITH_STATE_OPERATOR",
    "TimeMode",
    "TimerValues",
    "TransformResult",
    "TransformWithStateError",
    "TransformWithStateSpec",
    "USER_FUNCTION_ERROR",
    "ValueState",
    "VersionedStore",
    "event_time_ms",
    "event_time_us",
    "initial_rows_by_key",
    "initial_state_by_key",
    "check_operator",
    "keep_partition_count",
    "once_per_batch",
    "parse_delay_threshold",
    "parse_interval_ms",
    "parse_trigger_interval_ms",
    "read_state",
    "read_state_changes",
    "read_state_metadata",
    "record_schema",
    "run_batch",
    "run_partition",
    "run_transform_batch",
    "run_transform_partition",
]
