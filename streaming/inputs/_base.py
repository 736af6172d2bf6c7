"""InputDStream: a stream whose data comes from outside the graph, replayable from its log (Spark's ``InputDStream``)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import anyio
import anyio.abc

from scheduler import CheckpointPath, Offset, Time, TimeOrderedDict, library_logger, remove_temp_files

from ..dstream import DStream, StreamEnvironment
from ..recovery import InputDescriptor, parse_log_offset

__all__ = ["InputDStream", "RateControlledInput"]


@runtime_checkable
class RateControlledInput(Protocol):
    """An input whose intake backpressure controls: a ``RateController`` publishes each new rate to it.

    Receivers limit how fast they store records; a direct Kafka stream limits its ranges.
    """

    def update_rate(self, rate: float) -> None:
        """Take the estimator's new rate (records per second), on the event loop."""
        ...


class InputDStream(DStream[Any]):
    """A stream with no parent: its RDD per batch comes from outside the graph.

    Registers itself with the context's graph; ``id`` numbers input streams from 0.

    With a checkpoint directory the stream is replayable: the engine asks it where batch ``t``'s
    input ends (:meth:`_plan_offset`, which makes that input durable first), logs the offsets,
    and hands the range back (:meth:`_set_range`) before the batch is computed; a restart hands
    back the logged ranges of the batches it re-runs and of the committed ones still in the log.
    Each subclass keeps whatever it needs under its own log directory (:mod:`._source_logs`).
    """

    has_receiver = False
    _input_kind = "input"
    input_pending = False
    """Whether the last batch planned saw input that only a later batch time takes (a file stream's file newer than the
    batch): that batch found nothing new without having read all there is (``processAllAvailable`` waits on)."""

    def __init__(self, env: StreamEnvironment) -> None:
        """Create an input stream of ``env``'s context and register it with the graph."""
        super().__init__(env)
        self.id = env.graph.next_input_id()
        env.graph.add_input_stream(self)
        # With a checkpoint: the input range of each batch time still remembered.
        self._ranges: TimeOrderedDict[tuple[Offset, Offset]] = TimeOrderedDict()
        self._log_dir: CheckpointPath | None = None
        self._tracked = False  # the query tracker assigns each batch its range (with or without a log)
        self._warned_missing = False

    # -- replay (with a checkpoint directory) --

    @property
    def replaying(self) -> bool:
        """Whether batches read the ranges the query tracker assigned (always, once the context runs as a query)."""
        return self._tracked

    def attach_log(self, directory: CheckpointPath | None) -> None:
        """Keep this input's log in ``directory``, or (``None``) its batches' input in memory only; before start.

        Either way each batch then reads the range the query tracker assigned it; without a log
        nothing survives the process, as without a checkpoint in Spark.
        """
        self._log_dir = directory
        self._tracked = True

    @property
    def writes_blocks(self) -> bool:
        """Whether a block writer must run beside the receiver (a receiver with a write-ahead log)."""
        return self.has_receiver and self._log_dir is not None

    def _descriptor(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        """What ``stream.json`` records about this input, and which keys must match at a restart."""
        return {"kind": self._input_kind, "name": self.name}, ("kind",)

    def open_log(self) -> None:
        """Check (or write) the input's descriptor and load its log: once per start, before any batch (blocking).

        A descriptor missing while the offsets log has entries was lost: refused, not written anew.
        """
        assert self._log_dir is not None, "_attach_log() first"
        remove_temp_files(self._log_dir)  # what writers killed mid-write left (never read)
        expected, compare = self._descriptor()
        checkpoint = self._log_dir.parent.parent  # the log is <checkpoint>/sources/<id> (DStreamGraph.recover)
        self._load_log(InputDescriptor(self._log_dir).ensure(expected, compare=compare, checkpoint=checkpoint))

    def _load_log(self, recorded: dict[str, Any]) -> None:
        """Read what the log holds (called once by :meth:`_open_log`)."""

    def latest_offset(self) -> Offset:
        """Where this input ends now (after :meth:`_open_log`)."""
        return None

    async def plan_offset(self, start: Offset, time: Time) -> Offset:
        """Where batch ``time``'s input ends; everything up to it is durable when this returns."""
        return start

    def set_range(self, time: Time, start: Offset, end: Offset) -> None:
        """Batch ``time`` covers ``(start, end]``."""
        self._ranges[time] = (start, end)

    def _range_of(self, time: Time) -> tuple[Offset, Offset] | None:
        """The logged range of ``time``, or ``None`` (with one warning) for a time the log no longer covers."""
        found = self._ranges.get(time)
        if found is None and not self._warned_missing:
            self._warned_missing = True
            library_logger("aiodstream.streaming").warning(
                "a batch before the restart is no longer in the offsets log; its input counts as empty in windows and state",
                stream=self.name, batch=time.milliseconds)
        return found

    def take_counted_rows(self, time: Time) -> int | None:
        """Rows batch ``time`` read from this input, for inputs counted while the batch runs; else ``None``."""
        return None

    async def commit(self, end: Offset) -> None:
        """Every batch up to ``end`` is committed."""

    # For inputs whose offsets point into their own log ({"logOffset":N}): files, receivers.

    def _logged_entry_ids(self, time: Time) -> range:
        """The log entries batch ``time`` covers; none for a time the offsets log no longer covers."""
        found = self._range_of(time)
        if found is None:
            return range(0)
        return range(parse_log_offset(found[0], input_name=self.name) + 1, parse_log_offset(found[1], input_name=self.name) + 1)

    def _first_entry_needed(self, end: Offset) -> int:
        """The oldest log entry a remembered batch still covers (``end``'s successor if none): older ones may go."""
        starts = [parse_log_offset(start, input_name=self.name) for start, _ in self._ranges.values()]
        return min(starts, default=parse_log_offset(end, input_name=self.name)) + 1

    def clear_metadata(self, time: Time) -> None:
        """The graph's hook (not for users): also forget the offset ranges of batches out of the remember window."""
        super().clear_metadata(time)
        remember = self._remember_duration or self._slide
        self._ranges.pop_through(time.milliseconds - remember.milliseconds)

    # -- lifecycle --

    @property
    def name(self) -> str:
        """Spark's display name, e.g. ``"Queue stream [0]"``."""
        words = type(self).__name__.replace("InputDStream", "Stream")
        spaced = "".join(f" {c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(words))
        return f"{spaced.capitalize()} [{self.id}]"

    def start(self) -> None:
        """Called once when the context starts."""

    def stop(self) -> None:
        """Called once when the context stops."""

    async def allocate(self, time: Time) -> None:
        """Assign received data to batch ``time`` (receiver streams only)."""

    async def run_receiver(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    async def run_block_writer(self) -> None:
        """Write received blocks to the log until cancelled (receiver streams only: others have no blocks)."""

    def receiver_stopped(self) -> None:
        """Called after the receiver task ended."""
