"""GroupsWithStateNode: ``mapGroupsWithState`` / ``flatMapGroupsWithState`` on a pair stream, on Spark.

A :class:`KeyedStateNode` whose tasks run :func:`streaming.state.run_batch` (Spark's
``FlatMapGroupsWithStateExec``) over their partition's state store; the node machinery (one task
per partition, the store under the checkpoint, the operator's own output, progress through an
accumulator) is ``_keyed_state``'s.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from scheduler import BatchWatermarks, InvalidPipelineError

from ..spark import is_rdd
from ..state import (
    EVENT_TIME_WITHOUT_WATERMARK,
    FLAT_MAP_GROUPS_WITH_STATE,
    GroupStateTimeout,
    GroupsWithStateSpec,
    StateOperatorStats,
    StateStoreProvider,
    initial_state_by_key,
    run_batch,
)
from ._keyed_state import KeyedStateNode, PartitionBatch
from ._node import StreamNode
from ._watermark import WatermarkedNode

__all__ = ["GroupsWithStateNode", "check_output_mode", "initial_groups"]


def check_output_mode(output_mode: object) -> None:
    """Spark's check of ``flatMapGroupsWithState``'s output mode: ``"append"`` or ``"update"``, in any case.

    Raises:
        InvalidPipelineError: another mode (Spark's messages).
    """
    mode = output_mode.lower() if isinstance(output_mode, str) else None
    if mode == "complete":
        raise InvalidPipelineError("requirement failed: The output mode of function should be append or update")
    if mode not in ("append", "update"):
        raise InvalidPipelineError(  # Spark 4's error class (Spark 3's text began "Unknown output mode")
            f"[STREAMING_OUTPUT_MODE.INVALID] Invalid streaming output mode: {output_mode}. Accepted output modes are "
            "'Append', 'Complete', 'Update'. SQLSTATE: 42KDE")


def initial_groups(initial: Any) -> Any:
    """An initial state as the operator takes it: an RDD (a FrameRDD on Connect), or a list that the first batch
    parallelizes (on the generation thread), checked now.

    Raises:
        InvalidPipelineError: an iterator (the saved program could not keep it), an item that is not a (key, state)
            pair, or a key that cannot be hashed.
        ValueError: a key twice in the list (Spark's message), or a None state.
    """
    if initial is not None and not is_rdd(initial):
        if isinstance(initial, Iterator):  # the saved program keeps the argument: it must survive pickling
            raise InvalidPipelineError(f"initialState must be an RDD or a list of (key, state) pairs, got {initial!r}: pass "
                                       "list(...) of it")
        pairs = []
        for pair in initial:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidPipelineError(f"initialState must hold (key, state) pairs, got {pair!r}")
            try:
                hash(pair[0])
            except TypeError:
                raise InvalidPipelineError(f"initialState's key {pair[0]!r} cannot be hashed: a grouping key must be") from None
            pairs.append(tuple(pair))
        initial_state_by_key(pairs)  # a key twice or a None state: refused here, with the call, not by the first batch
        return pairs
    return initial


class GroupsWithStateNode(KeyedStateNode):
    """The outputs of ``func(key, values, state)`` per key and batch; see :class:`KeyedStateNode`."""

    def __init__(self, parent: StreamNode, func: Callable[..., Any], *, flat: bool, timeout: str, num_partitions: int,
                 initial: Any = None, event_time: Callable[[Any], Any] | None = None) -> None:
        """An operator over ``parent``'s (key, value) pairs.

        Raises:
            InvalidPipelineError: ``func`` is not callable.
            PySparkValueError: an unknown timeout kind.
        """
        if not callable(func):
            raise InvalidPipelineError(f"func must be a function of (key, values, state), got {func!r}")
        timeout = GroupStateTimeout.check(timeout)
        super().__init__(parent, num_partitions=num_partitions, initial=initial, event_time=event_time)
        self._func = func
        self._flat = flat
        self._timeout = timeout

    @property
    def operator_name(self) -> str:
        """``flatMapGroupsWithState`` or ``mapGroupsWithState``."""
        return "flatMapGroupsWithState" if self._flat else "mapGroupsWithState"

    def state_owner(self) -> tuple[str, str | None]:
        """Spark's state metadata names both operators ``flatMapGroupsWithState``; the timeout kind is kept too."""
        return FLAT_MAP_GROUPS_WITH_STATE, self._timeout

    def judges_event_times(self) -> bool:
        """Under an event-time timeout late values are dropped by their event time."""
        return bool(self._timeout == GroupStateTimeout.EventTimeTimeout)

    def check_at_start(self, watermark: WatermarkedNode | None) -> None:
        """An event-time timeout needs a watermark (Spark's message)."""
        if self._timeout == GroupStateTimeout.EventTimeTimeout and watermark is None:
            raise InvalidPipelineError(EVENT_TIME_WITHOUT_WATERMARK)

    def partition_batch(self, batch_id: int, batch_ms: int, watermarks: BatchWatermarks,
                        watermark: WatermarkedNode | None) -> PartitionBatch:
        """:func:`streaming.state.run_batch` over the partition's store."""
        extract = self.event_time_of_values(watermark)
        spec = GroupsWithStateSpec(
            self._func, self._flat, self._timeout, watermark is not None,
            extract,
        )
        eviction, late = watermarks.eviction_ms, watermarks.late_ms

        def run(provider: StateStoreProvider, data: list[tuple[Any, Any]],
                initial: list[tuple[Any, Any]]) -> tuple[list[Any], StateOperatorStats]:
            return run_batch(provider, batch_id, data, spec, batch_ms, eviction, late,
                             initial_state_by_key(initial) if initial else None)

        return run
