"""The hooks a ``DStreamGraph`` drives on the streams it holds: every stream, inputs, stateful and watermark streams."""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import anyio
import anyio.abc

from scheduler import (
    CheckpointPath,
    Duration,
    EventTimeStats,
    Job,
    Offset,
    StateOperatorProgress,
    Time,
)

__all__ = ["GraphStream", "InputStream", "StateOperatorStream", "WatermarkStream"]


class GraphStream(Protocol):
    """The hooks the graph drives on every stream it holds (implemented by ``StreamNode``).

    ``parents`` and ``slide`` are the node's public surface; the rest are the node's public hooks
    for the graph (documented there as not for users; none shadows a pyspark ``DStream`` name).
    """

    @property
    def parents(self) -> Sequence[GraphStream]:
        """The streams this one derives from."""
        ...

    @property
    def slide(self) -> Duration:
        """The interval between the stream's RDDs."""
        ...

    @property
    def must_checkpoint(self) -> bool:
        """Whether the stream carries state and so checkpoints it."""
        ...

    @property
    def storage_level(self) -> Any:
        """The level each RDD is persisted at, or None."""
        ...

    @property
    def checkpoint_interval(self) -> Duration | None:
        """How often an RDD is checkpointed, or None."""
        ...

    @property
    def remember_duration(self) -> Duration | None:
        """How long RDDs are remembered (None before start)."""
        ...

    def initialize(self, zero_time: Time) -> None:
        """Set the zero time, checkpoint interval and remember duration, then the parents'."""
        ...

    def remember(self, duration: Duration | None) -> None:
        """Remember RDDs for at least ``duration``, and the parents as long as needed."""
        ...

    def validate_at_start(self) -> None:
        """Spark's ``validateAtStart`` checks, then the parents'."""
        ...

    def generate_job(self, time: Time) -> Job | None:
        """The job of an output stream for ``time``."""
        ...

    def generates_on_loop(self, time: Time) -> bool:
        """Whether :meth:`generate_job` for ``time`` makes no py4j call (so the event loop may run it)."""
        ...

    def clear_metadata(self, time: Time) -> None:
        """Forget RDDs older than the remember duration, then the parents'."""
        ...


class InputStream(GraphStream, Protocol):
    """What the graph asks of an input stream: replay from its log, receive, purge (Spark's ``InputDStream``).

    Implemented by ``streaming.inputs.InputDStream`` and its kinds (queue, files, receivers).
    With a checkpoint directory the graph attaches a log directory to each input and opens it at
    start; each batch it asks where the batch's input ends (:meth:`plan_offset`, which makes
    that input durable first), hands the range back (:meth:`set_range`) and, once batches are
    committed, lets the input purge what no batch needs (:meth:`commit`).
    """

    @property
    def id(self) -> int:
        """The input's number in its graph: 0, 1, ... in creation order."""
        ...

    @property
    def name(self) -> str:
        """Spark's display name, e.g. ``"Queue stream [0]"``."""
        ...

    @property
    def has_receiver(self) -> bool:
        """Whether a receiver task takes its data in (sockets, async iterables)."""
        ...

    @property
    def input_pending(self) -> bool:
        """Whether the last batch planned saw input that only a later batch time takes (a file newer than the batch)."""
        ...

    @property
    def replaying(self) -> bool:
        """Whether a log is attached (the context has a checkpoint directory)."""
        ...

    def attach_log(self, directory: CheckpointPath | None) -> None:
        """Keep the input's log in ``directory`` (``None``: in memory only); before start."""
        ...

    def take_counted_rows(self, time: Time) -> int | None:
        """Rows batch ``time`` read, for inputs counted while the batch runs (else ``None``)."""
        ...

    @property
    def writes_blocks(self) -> bool:
        """Whether a block writer must run beside the receiver (a receiver with a write-ahead log)."""
        ...

    def open_log(self) -> None:
        """Check or write the input's descriptor and load its log (blocking I/O, once per start)."""
        ...

    def latest_offset(self) -> Offset:
        """Where the input ends now."""
        ...

    async def plan_offset(self, start: Offset, time: Time) -> Offset:
        """Where batch ``time``'s input ends; everything up to it is durable when this returns."""
        ...

    def set_range(self, time: Time, start: Offset, end: Offset) -> None:
        """Batch ``time`` covers ``(start, end]``."""
        ...

    async def commit(self, end: Offset) -> None:
        """Every batch up to ``end`` is committed: the input may purge what none still needs."""
        ...

    def start(self) -> None:
        """Called once when the context starts."""
        ...

    def stop(self) -> None:
        """Called once when the context stops."""
        ...

    async def allocate(self, time: Time) -> None:
        """Hand what the receiver took in since the last batch to batch ``time``."""
        ...

    async def run_receiver(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the receiver until cancelled (only when :attr:`has_receiver`)."""
        ...

    async def run_block_writer(self) -> None:
        """Write received blocks to the log until cancelled (only for a replaying receiver)."""
        ...

    def receiver_stopped(self) -> None:
        """Called after the receiver task ended."""
        ...


@runtime_checkable
class StateOperatorStream(Protocol):
    """A stateful operator as the graph sees it: what it did in each batch."""

    def take_state_progress(self, time: Time) -> StateOperatorProgress | None:
        """Its numbers for batch ``time`` (``None`` if it did not run), forgotten afterwards."""
        ...


@runtime_checkable
class WatermarkStream(Protocol):
    """A ``withWatermark`` stream as the graph sees it: its delay, and what each batch saw."""

    watermark_delay_ms: int

    def take_event_time_stats(self, time: Time) -> EventTimeStats | None:
        """The event times batch ``time`` saw (``None``: no record), forgotten afterwards."""
        ...
