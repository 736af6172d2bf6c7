"""PlannedBatch: what a micro-batch run knows of one batch, from its planning to its commit (Spark's per-batch state)."""

from __future__ import annotations

from typing import Sequence

import attrs

from .._protocols import Offset, ReplayableGraph
from .._state_progress import StateOperatorProgress
from .._time import Time
from .._watermark import BatchWatermarks, EventTimeStats

__all__ = ["PlannedBatch", "checked_offsets", "once_end"]


@attrs.define
class PlannedBatch:
    """One planned batch: its id and time, its input range, its watermarks, and what its progress reports.

    Attributes:
        offsets_issued: its offsets entry was written (or queued for the async writer).
        planned_at: when its offsets were decided and logged, on the clock: its generation starts then.
        critical_ns: the time its log writes spent on the batches' critical path.
        input_pending: a batch without new input whose graph saw input that a later batch time takes (see
            ``ReplayableGraph``'s optional ``input_pending``): not a batch that found nothing new.
        state_version: the state version a stateful graph's batch loads when that is not its id (see
            ``STATE_VERSION_KEY``), recorded in its offsets entry; ``None``: its id.
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
    state_version: int | None = None
    input_pending: bool = False


def once_end(start: Sequence[Offset], latest: Sequence[Offset]) -> tuple[Offset, ...]:
    """A Once batch's end: each input's latest offset, or where it starts if it has none now (Spark keeps an input's
    previous end when it reports none; logged as none, the next run would read that input from its beginning)."""
    return tuple(s if end is None else end for s, end in zip(start, latest, strict=True))


def checked_offsets(offsets: Sequence[Offset], inputs: int, graph: ReplayableGraph, method: str) -> tuple[Offset, ...]:
    """``offsets`` as a tuple, checked to be one JSON text or ``None`` per replayable input (a graph may break its annotation)."""
    result = tuple(offsets)
    valid = len(result) == inputs
    given: tuple[object, ...] = result
    for offset in given:  # a loop, not all() over a generator: this runs twice a batch
        if offset is not None and not isinstance(offset, str):
            valid = False
    if not valid:
        raise TypeError(
            f"{type(graph).__name__}.{method}() must return one offset (JSON text or None) per replayable input "
            f"({inputs}), got {offsets!r}"
        )
    return result
