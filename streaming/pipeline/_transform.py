"""``transformWithState`` for plain-Python pipelines: a StatefulProcessor over one source's keyed records.

The pipeline's counterpart of ``DStream.transformWithState``: one state store (partition 0)
under ``<checkpoint>/stateful/state/<operator>/0``, run by
:func:`streaming.state.run_transform_batch` in a worker thread (which runs a fresh copy of the
processor per batch). The operator's state variables are recorded in the checkpoint (or checked
against the recorded ones) before its first batch of the run, as Spark checks them when it plans
a batch.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import anyio.to_thread
import attrs

from scheduler import BatchWatermarks, CheckpointPath, StateOperatorProgress, Time

from ..state import (
    TRANSFORM_WITH_STATE_OPERATOR,
    StateStoreProvider,
    TimeMode,
    TransformWithStateSpec,
    check_operator,
    initial_rows_by_key,
    record_schema,
    run_transform_batch,
)
from ._stateful import STATE_DIRECTORY, Watermark

__all__ = ["TransformOperator"]


@attrs.define
class TransformOperator:
    """One ``transformWithState`` of a pipeline: what it reads, how it keys, the processor it runs.

    Attributes:
        spec: the processor, output mode and time mode (checked when the operator was added).
        event_time: the event time of a record, for late records; None: the source watermark's function.
    """

    operator_id: int
    name: str
    source: str
    key: Callable[[Any], Any]
    spec: TransformWithStateSpec
    initial: list[tuple[Any, Any]] | None
    event_time: Callable[[Any], Any] | None = None
    provider: StateStoreProvider | None = None
    schema_checked: bool = False

    @property
    def evicts_on_watermark(self) -> bool:
        """In event-time mode (its timers fire by the watermark)."""
        return bool(self.spec.time_mode == TimeMode.EVENT_TIME)

    def check_at_start(self, watermarked: bool) -> None:
        """Nothing beyond what the spec checked when the operator was added."""

    async def run(self, checkpoint: CheckpointPath, version: int, time: Time, records: Sequence[Any],
                  watermarks: BatchWatermarks, watermark: Watermark | None) -> tuple[list[Any], StateOperatorProgress]:
        """Run one batch over the source's ``records`` (the processor and the store's file work in a worker thread).

        Raises:
            Spark's schema errors before the run's first batch (an incompatible processor), and
            the processor's errors (the batch's state is not committed).
        """
        root = checkpoint / STATE_DIRECTORY
        if self.provider is None:
            self.provider = StateStoreProvider(root, self.operator_id, 0)
        provider = self.provider
        extract = self.event_time or (None if watermark is None else watermark.event_time)
        # pyspark 4.3 runs an EventTime processor without a watermark on a watermark of 0 (the pipeline's are 0 then)
        spec = attrs.evolve(self.spec, watermark_present=watermark is not None or self.spec.time_mode == TimeMode.EVENT_TIME,
                            event_time=extract)
        pairs = [(self.key(r), r) for r in records]
        initial = initial_rows_by_key(self.initial) if version == 0 and self.initial else None
        check_schema = not self.schema_checked

        def run() -> tuple[list[Any], StateOperatorProgress]:
            if check_schema:
                check_operator(root, self.operator_id, TRANSFORM_WITH_STATE_OPERATOR)
                record_schema(root, self.operator_id, spec)
            outputs, stats = run_transform_batch(provider, version, pairs, spec, time.milliseconds,
                                                 watermarks.eviction_ms, watermarks.late_ms, initial)
            return outputs, stats.progress(TRANSFORM_WITH_STATE_OPERATOR, 1)

        result = await anyio.to_thread.run_sync(run)
        self.schema_checked = True
        return result
