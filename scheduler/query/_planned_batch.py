"""PlannedBatch: what a micro-batch run knows of one batch, from its planning to its commit (Spark's per-batch state)."""

from __future__ import annotations

import attrs

from .._protocols import Offset
from .._state_progress import StateOperatorProgress
from .._time import Time
from .._watermark import BatchWatermarks, EventTimeStats

__all__ = ["PlannedBatch"]


@attrs.define
class PlannedBatch:
    """One planned batch: its id and time, its input range, its watermarks, and what its progress reports.

    Attributes:
        offsets_issued: its offsets entry was written (or queued for the async writer).
        planned_at: when its offsets were decided and logged, on the clock: its generation starts then.
        critical_ns: the time its log writes spent on the batches' critical path.
    """

    batch_id: int
    time: Time
    start: tuple[Offset, ...]
    end: tuple[Offset, ...]
    latest: tuple[Offset, ...] | None
    trigger_start: int
    previous_trigger_start: int | None
    sequence: int
    has_data: bool
    rerun: bool
    watermarks: BatchWatermarks = attrs.field(factory=lambda: BatchWatermarks(0, 0))
    offsets_issued: bool = False
    next_watermark_ms: int = 0
    event_time: EventTimeStats | None = None
    state_operators: tuple[StateOperatorProgress, ...] = ()
    durations: dict[str, int] = attrs.field(factory=dict)
    critical_ns: int = 0
    planned_at: int = 0
