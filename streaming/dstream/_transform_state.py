"""TransformWithStateNode: Spark 4's ``transformWithState`` (pyspark's row-based ``transformWithState``) on a pair stream.

A :class:`KeyedStateNode` whose tasks run :func:`streaming.state.run_transform_batch` (Spark's
``TransformWithStateExec``) over their partition's state store: a fresh copy of the user's
:class:`~streaming.state.StatefulProcessor` per partition and batch (it travels pickled in the
task), its state variables and timers as rows of the store. The operator's state variables are
recorded in the checkpoint by the driver when the run generates its first batch, and a restart
with an incompatible processor is refused then (Spark checks at the same point, when it plans
the batch).
"""

from __future__ import annotations

from typing import Any, Callable

import attrs

from scheduler import BatchWatermarks, CheckpointPath, InvalidPipelineError

from ..spark import is_rdd
from ..state import (
    TRANSFORM_WITH_STATE_OPERATOR,
    StateOperatorStats,
    StateStoreProvider,
    TimeMode,
    TransformWithStateSpec,
    initial_rows_by_key,
    record_schema,
    run_transform_batch,
)
from ._keyed_state import KeyedStateNode, PartitionBatch
from ._node import StreamNode
from ._watermark import WatermarkedNode

__all__ = ["TransformWithStateNode", "has_watermark", "initial_rows"]


def initial_rows(initial: Any) -> list[tuple[Any, Any]] | None:
    """``initialState`` as the operator takes it: a list of ``(key, row)`` pairs (or None).

    Raises:
        InvalidPipelineError: an RDD. The operator needs a checkpoint, whose recipe of the
            program cannot hold an RDD (the start would refuse it); its rows can (collect them).
    """
    if is_rdd(initial):
        raise InvalidPipelineError(
            "initialState of transformWithState must be (key, row) pairs in a list, not an RDD: the operator needs a "
            "checkpoint, and the program saved there cannot hold an RDD; pass initialState=rdd.collect()")
    return None if initial is None else list(initial)


def has_watermark(spec: TransformWithStateSpec, watermarked: bool) -> bool:
    """Whether the operator runs with a watermark: with one upstream, or always in time mode "EventTime".

    pyspark 4.3 runs an EventTime processor without ``withWatermark`` on a watermark of 0: its
    ``TimerValues`` show 0 and timers at or before 0 fire (the graph's watermarks are 0 then too).
    """
    return watermarked or spec.time_mode == TimeMode.EVENT_TIME


class TransformWithStateNode(KeyedStateNode):
    """The outputs of a :class:`~streaming.state.StatefulProcessor` per key and batch; see the module docstring."""

    def __init__(self, parent: StreamNode, spec: TransformWithStateSpec, *, num_partitions: int, initial: Any = None,
                 event_time: Callable[[Any], Any] | None = None) -> None:
        """An operator over ``parent``'s (key, value) pairs running ``spec`` ."""
        super().__init__(parent, num_partitions=num_partitions, initial=initial, event_time=event_time)
        self._spec = spec

    @property
    def operator_name(self) -> str:
        """pyspark's name of the operator (``transformWithStateInPySparkExec``, core's ``TRANSFORM_WITH_STATE_OPERATOR``)."""
        return TRANSFORM_WITH_STATE_OPERATOR

    def judges_event_times(self) -> bool:
        """In time mode "EventTime" late values are dropped by their event time."""
        return bool(self._spec.time_mode == TimeMode.EVENT_TIME)

    def _with_watermark(self, watermark: WatermarkedNode | None) -> TransformWithStateSpec:
        extract = self.event_time_of_values(watermark)
        return attrs.evolve(self._spec, watermark_present=has_watermark(self._spec, watermark is not None),
                            event_time=extract)

    def state_owner(self) -> tuple[str, str | None]:
        """``transformWithState``'s operator name; its time mode is in its schema file."""
        return TRANSFORM_WITH_STATE_OPERATOR, None

    def first_batch(self, state_dir: CheckpointPath) -> None:
        """Record the processor's state variables in the checkpoint, or check them against the recorded ones.

        Raises:
            Spark's schema errors (see :func:`streaming.state.record_schema`): an incompatible processor.
        """
        record_schema(state_dir, self.operator_id, self._with_watermark(self._watermark()))

    def partition_batch(self, batch_id: int, batch_ms: int, watermarks: BatchWatermarks,
                        watermark: WatermarkedNode | None) -> PartitionBatch:
        """:func:`streaming.state.run_transform_batch` over the partition's store."""
        spec = self._with_watermark(watermark)
        eviction, late = watermarks.eviction_ms, watermarks.late_ms

        def run(provider: StateStoreProvider, data: list[tuple[Any, Any]],
                initial: list[tuple[Any, Any]]) -> tuple[list[Any], StateOperatorStats]:
            return run_transform_batch(provider, batch_id, data, spec, batch_ms, eviction, late,
                                       initial_rows_by_key(initial) if initial else None)

        return run
