"""Watermarks and the stateful operators of plain-Python pipelines, on the same state store as the DStream operators.

A :class:`~streaming.Pipeline` has no partitions: each operator keeps one state store (partition
0) under ``<checkpoint>/stateful/state/<operator>/0``, loaded at the batch's version (its batch id,
unless the engine recorded another: ``set_batch_state_version``) and committed as the next in a
worker thread while the batch is generated; its outputs are what the output operations see under
the operator's name in :attr:`Batch.inputs`. Every operator
meets the pipeline through :class:`StatefulOperator`; ``flatMapGroupsWithState``
(:class:`GroupsOperator`, the rules of :func:`streaming.state.run_partition`) is here,
``transformWithState`` in ``_transform``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import anyio.to_thread
import attrs

from scheduler import (
    BatchWatermarks,
    CheckpointPath,
    EventTimeStats,
    InvalidPipelineError,
    StateOperatorProgress,
    Time,
)

from ..state import (
    EVENT_TIME_WITHOUT_WATERMARK,
    FLAT_MAP_GROUPS_WITH_STATE,
    GroupStateTimeout,
    GroupsWithStateSpec,
    StateStoreProvider,
    check_operator,
    event_time_ms,
    initial_state_by_key,
    run_batch,
)

__all__ = ["STATE_DIRECTORY", "GroupsOperator", "StateRerun", "StatefulOperator", "Watermark", "check_timeout", "seen_event_times"]

STATE_DIRECTORY = "stateful"
"""Under the checkpoint location, where the operators' state stores live."""


@attrs.frozen
class Watermark:
    """``withWatermark`` on a source: its records' event times, and the delay."""

    source: str
    event_time: Callable[[Any], Any]
    delay_ms: int


class StatefulOperator(Protocol):
    """What the pipeline asks of a stateful operator: what it reads, its checks at start, one batch at a time."""

    provider: StateStoreProvider | None
    """Its state store (made by its first batch), which the pipeline lets go of when the run ends."""

    @property
    def name(self) -> str:
        """Its outputs' key in :attr:`Batch.inputs`."""
        ...

    @property
    def source(self) -> str:
        """The source whose records it reads."""
        ...

    @property
    def evicts_on_watermark(self) -> bool:
        """Whether the watermark times its state out (an event-time timeout or timer): a batch without data then has work."""
        ...

    def check_at_start(self, watermarked: bool) -> None:
        """Refuse to start (``InvalidPipelineError``) when the operator cannot run; ``watermarked``: its source has a watermark."""
        ...

    async def run(self, checkpoint: CheckpointPath, version: int, time: Time, records: Sequence[Any],
                  watermarks: BatchWatermarks, watermark: Watermark | None) -> tuple[list[Any], StateOperatorProgress]:
        """One batch over the source's ``records``, on state ``version`` (committing the next): the outputs and the progress."""
        ...


@attrs.frozen
class StateRerun:
    """What runs a failed batch's operators again (see :class:`streaming.state.StateBehind`): its state version,
    watermarks and inputs (None: they could not be read, the sources' ``ranges`` are read again), from the operator
    that did not commit on."""

    version: int
    watermarks: BatchWatermarks
    inputs: Mapping[str, Sequence[Any]] | None
    first_operator: int
    ranges: tuple[tuple[Any, ...], tuple[Any, ...]] | None


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
    owner_checked: bool = False  # the checkpoint's record of the operator that keeps this state, checked this run

    @property
    def evicts_on_watermark(self) -> bool:
        """Under an event-time timeout."""
        return self.timeout == GroupStateTimeout.EventTimeTimeout

    def check_at_start(self, watermarked: bool) -> None:
        """An event-time timeout needs a watermark on the source (Spark's message)."""
        if self.timeout == GroupStateTimeout.EventTimeTimeout and not watermarked:
            raise InvalidPipelineError(EVENT_TIME_WITHOUT_WATERMARK)

    async def run(self, checkpoint: CheckpointPath, version: int, time: Time, records: Sequence[Any],
                  watermarks: BatchWatermarks, watermark: Watermark | None) -> tuple[list[Any], StateOperatorProgress]:
        """Run one batch over the source's ``records`` (the store's file work in a worker thread)."""
        root = checkpoint / STATE_DIRECTORY
        if self.provider is None:
            self.provider = StateStoreProvider(root, self.operator_id, 0)
        provider = self.provider
        check_owner = not self.owner_checked
        spec = GroupsWithStateSpec(
            self.func, self.flat, self.timeout, watermark is not None,
            None if watermark is None else watermark.event_time,
        )
        pairs = [(self.key(r), r) for r in records]
        initial = initial_state_by_key(self.initial) if version == 0 and self.initial else None

        def run() -> tuple[list[Any], StateOperatorProgress]:
            if check_owner:
                check_operator(root, self.operator_id, FLAT_MAP_GROUPS_WITH_STATE, self.timeout)
            outputs, stats = run_batch(provider, version, pairs, spec, time.milliseconds, watermarks.eviction_ms,
                                       watermarks.late_ms, initial)
            return outputs, stats.progress(spec.operator, 1)

        result = await anyio.to_thread.run_sync(run)
        self.owner_checked = True
        return result


def seen_event_times(watermark: Watermark, records: Iterable[Any]) -> EventTimeStats | None:
    """The event-time statistics of a watermarked source's records in one batch."""
    return EventTimeStats.of(event_time_ms(watermark.event_time(r)) for r in records)


def check_timeout(timeout: str) -> str:
    """A timeout kind (pyspark's error for anything else)."""
    return GroupStateTimeout.check(timeout)
