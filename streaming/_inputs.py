"""Input streams: where each batch's data comes from (Spark's ``InputDStream`` family)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import structlog

from scheduler import Offset, ReplayError, Time, TimeOrderedDict
from scheduler._metadata_log import remove_temp_files

from ._dstream import DStream
from ._source_logs import InputDescriptor, parse_log_offset

if TYPE_CHECKING:
    from pyspark import RDD

    from ._context import StreamingContext

__all__ = ["InputDStream", "QueueInputDStream"]


class InputDStream(DStream):
    """A stream with no parent: its RDD per batch comes from outside the graph.

    Registers itself with the context's graph; ``id`` numbers input streams from 0.

    With a checkpoint directory the stream is replayable: the engine asks it where batch ``t``'s
    input ends (:meth:`_plan_offset`, which makes that input durable first), logs the offsets,
    and hands the range back (:meth:`_set_range`) before the batch is computed; a restart hands
    back the logged ranges of the batches it re-runs and of the committed ones still in the log.
    Each subclass keeps whatever it needs under its own log directory (:mod:`._source_logs`).
    """

    _has_receiver = False
    _input_kind = "input"

    def __init__(self, ssc: StreamingContext) -> None:
        """Create and register an input stream of ``ssc``."""
        super().__init__(ssc)
        self.id = ssc._graph.next_input_id()
        ssc._graph.add_input_stream(self)
        # With a checkpoint: the input range of each batch time still remembered.
        self._ranges: TimeOrderedDict[tuple[Offset, Offset]] = TimeOrderedDict()
        self._log_dir: Path | None = None
        self._warned_missing = False

    # -- replay (with a checkpoint directory) --

    @property
    def _replaying(self) -> bool:
        return self._log_dir is not None

    def _attach_log(self, directory: Path | None) -> None:
        """Keep this input's log in ``directory`` (``None``: no checkpoint); before start."""
        self._log_dir = directory

    def _descriptor(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        """What ``stream.json`` records about this input, and which keys must match at a restart."""
        return {"kind": self._input_kind, "name": self.name}, ("kind",)

    def _open_log(self) -> None:
        """Check (or write) the input's descriptor and load its log: once per start, before any batch (blocking)."""
        assert self._log_dir is not None, "_attach_log() first"
        remove_temp_files(self._log_dir)  # what writers killed mid-write left (never read)
        expected, compare = self._descriptor()
        self._load_log(InputDescriptor(self._log_dir).ensure(expected, compare=compare))

    def _load_log(self, recorded: dict[str, Any]) -> None:
        """Read what the log holds (called once by :meth:`_open_log`)."""

    def _latest_offset(self) -> Offset:
        """Where this input ends now (after :meth:`_open_log`)."""
        return None

    async def _plan_offset(self, start: Offset, time: Time) -> Offset:
        """Where batch ``time``'s input ends; everything up to it is durable when this returns."""
        return start

    def _set_range(self, time: Time, start: Offset, end: Offset) -> None:
        """Batch ``time`` covers ``(start, end]``."""
        self._ranges[time] = (start, end)

    def _range_of(self, time: Time) -> tuple[Offset, Offset] | None:
        """The logged range of ``time``, or ``None`` (with one warning) for a time the log no longer covers."""
        found = self._ranges.get(time)
        if found is None and not self._warned_missing:
            self._warned_missing = True
            structlog.get_logger("aiodstream.streaming").warning(
                "a batch before the restart is no longer in the offsets log; its input counts as empty in windows and state",
                stream=self.name, batch=time.milliseconds)
        return found

    async def _commit(self, end: Offset) -> None:
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

    def _clear_metadata(self, time: Time) -> None:
        super()._clear_metadata(time)
        remember = self._remember_duration or self._slide
        self._ranges.pop_through(time.milliseconds - remember.milliseconds)

    # -- lifecycle --

    @property
    def name(self) -> str:
        """Spark's display name, e.g. ``"Queue stream [0]"``."""
        words = type(self).__name__.replace("InputDStream", "Stream")
        spaced = "".join(f" {c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(words))
        return f"{spaced.capitalize()} [{self.id}]"

    def _start(self) -> None:
        """Called once when the context starts."""

    def _stop(self) -> None:
        """Called once when the context stops."""

    async def _allocate(self, time: Time) -> None:
        """Assign received data to batch ``time`` (receiver streams only)."""

    async def _run_receiver(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    def _receiver_stopped(self) -> None:
        """Called after the receiver task ended."""


class QueueInputDStream(InputDStream):
    """Hands out queued RDDs: one per batch, or all at once (pyspark's ``queueStream``).

    Once the queue is empty, every batch gets ``default`` (or an empty single-partition RDD).

    With a checkpoint the offset is how many queued RDDs batches took (``"3"``), so a restart
    replays a batch from the same queue position. Spark refuses ``queueStream`` with
    checkpointing, as it cannot serialize the queue; here the program rebuilds the queue (its
    setup function runs again), which must hold at least the RDDs it held before, in order.
    """

    _input_kind = "queue"

    def __init__(self, ssc: StreamingContext, rdds: list[Any], one_at_a_time: bool, default: Any) -> None:
        """Queue ``rdds`` for the batches to come: RDDs, or lists (parallelized by the batch that takes them)."""
        super().__init__(ssc)
        self._items: list[Any] = list(rdds)
        self._taken = 0  # without a checkpoint: how many items batches took so far
        self._one_at_a_time = one_at_a_time
        self._default = default

    @staticmethod
    def _position(offset: Offset) -> int:
        return 0 if offset is None else int(json.loads(offset))

    def _next_end(self, begin: int) -> int:
        return min(begin + 1, len(self._items)) if self._one_at_a_time else len(self._items)

    def _latest_offset(self) -> Offset:
        return str(len(self._items)) if self._items else None

    async def _plan_offset(self, start: Offset, time: Time) -> Offset:
        begin = self._position(start)
        end = self._next_end(begin)
        return start if end <= begin else str(end)

    def _compute(self, time: Time) -> RDD[Any] | None:
        if self._replaying:
            found = self._range_of(time)
            begin, end = (0, 0) if found is None else (self._position(found[0]), self._position(found[1]))
            if end > len(self._items):
                raise ReplayError(
                    f"{self.name} cannot replay batch {time}: it covers queued RDDs {begin}..{end} and the queue holds "
                    f"{len(self._items)}; after a restart the program must queue at least the RDDs it queued before, in order"
                )
            taken = self._items[begin:end]
        else:
            begin = self._taken
            end = self._taken = max(begin, self._next_end(begin))
            taken = self._items[begin:end]
            # Nothing will read them again: let their RDDs go, as Spark's queue does.
            self._items[begin:end] = [None] * len(taken)
        sc = self._ssc.sparkContext
        if taken:
            rdds: list[RDD[Any]] = [sc.parallelize(item) if isinstance(item, list) else item for item in taken]
            return rdds[0] if len(rdds) == 1 else sc.union(rdds)
        if self._default is None:
            # One empty single-partition RDD for every empty batch, made once as Spark does: a
            # new one per batch would cost a py4j round trip in every generation.
            self._default = sc.parallelize([], 1)
        elif isinstance(self._default, list):
            self._default = sc.parallelize(self._default)
        default: RDD[Any] = self._default
        return default
