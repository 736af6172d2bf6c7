"""Watermarks and ``flatMapGroupsWithState`` for plain-Python pipelines, on the same state store as the DStream operators.

A :class:`~streaming.Pipeline` has no partitions: each operator keeps one state store (partition
0) under ``<checkpoint>/stateful/state/<operator>/0``, loaded at the batch's version (its batch id)
and committed as the next in a worker thread while the batch is generated; its outputs are what
the output operations see under the operator's name in :attr:`Batch.inputs`. The rules (late
rows, data pass, timeout pass, write-back) are :func:`streaming.state.run_partition`'s.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import anyio.to_thread
import attrs

from scheduler import BatchWatermarks, CheckpointPath, EventTimeStats, StateOperatorProgress, Time

from ..state import (
    GroupStateTimeout,
    GroupsWithStateSpec,
    StateStoreProvider,
    event_time_ms,
    event_time_of,
    initial_state_by_key,
    run_batch,
)

__all__ = ["GroupsOperator", "Watermark", "check_timeout", "run_operator", "seen_event_times"]

STATE_DIRECTORY = "stateful"


@attrs.frozen
class Watermark:
    """``withWatermark`` on a source: its records' event times, and the delay."""

    source: str
    event_time: Callable[[Any], Any]
    delay_ms: int


@attrs.define
class GroupsOperator:
    """One ``flatMapGroupsWithState`` of a pipeline: what it reads, how it keys, what it runs."""

    operator_id: int
    name: str
    source: str
    key: Callable[[Any], Any]
    func: Callable[..., Any]
    flat: bool
    timeout: str
    initial: list[tuple[Any, Any]] | None
    provider: StateStoreProvider | None = None


def seen_event_times(watermark: Watermark, records: Iterable[Any]) -> EventTimeStats | None:
    """The event-time statistics of a watermarked source's records in one batch."""
    return EventTimeStats.of(event_time_ms(watermark.event_time(r)) for r in records)


async def run_operator(operator: GroupsOperator, checkpoint: CheckpointPath, batch_id: int, time: Time, records: Sequence[Any],
                       watermarks: BatchWatermarks, watermark: Watermark | None) -> tuple[list[Any], StateOperatorProgress]:
    """Run one batch of ``operator`` over its source's ``records`` (the store's file work in a worker thread)."""
    if operator.provider is None:
        operator.provider = StateStoreProvider(checkpoint / STATE_DIRECTORY, operator.operator_id, 0)
    provider = operator.provider
    spec = GroupsWithStateSpec(
        operator.func, operator.flat, operator.timeout, watermark is not None,
        None if watermark is None else event_time_of(watermark.event_time),
    )
    pairs = [(operator.key(r), r) for r in records]
    initial = initial_state_by_key(operator.initial) if batch_id == 0 and operator.initial else None

    def run() -> tuple[list[Any], StateOperatorProgress]:
        outputs, stats = run_batch(provider, batch_id, pairs, spec, time.milliseconds, watermarks.eviction_ms,
                                   watermarks.late_ms, initial)
        return outputs, stats.progress("flatMapGroupsWithState" if operator.flat else "mapGroupsWithState", 1)

    return await anyio.to_thread.run_sync(run)


def check_timeout(timeout: str) -> str:
    """A timeout kind (pyspark's error for anything else)."""
    return GroupStateTimeout.check(timeout)
