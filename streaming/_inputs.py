"""Input streams: where each batch's data comes from (Spark's ``InputDStream`` family)."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from scheduler import Time

from ._dstream import DStream

if TYPE_CHECKING:
    from pyspark import RDD

    from ._context import StreamingContext

__all__ = ["InputDStream", "QueueInputDStream"]


class InputDStream(DStream):
    """A stream with no parent: its RDD per batch comes from outside the graph.

    Registers itself with the context's graph; ``id`` numbers input streams from 0.
    """

    _has_receiver = False

    def __init__(self, ssc: StreamingContext) -> None:
        """Create and register an input stream of ``ssc``."""
        super().__init__(ssc)
        self.id = ssc._graph.next_input_id()
        ssc._graph.add_input_stream(self)

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
    """

    def __init__(self, ssc: StreamingContext, rdds: list[RDD[Any]], one_at_a_time: bool, default: RDD[Any] | None) -> None:
        """Queue ``rdds`` (already RDDs) for the batches to come."""
        super().__init__(ssc)
        self._queue: deque[RDD[Any]] = deque(rdds)
        self._one_at_a_time = one_at_a_time
        self._default = default

    def _compute(self, time: Time) -> RDD[Any] | None:
        queue = self._queue
        if self._one_at_a_time and queue:
            return queue.popleft()
        if queue:
            drained = list(queue)
            queue.clear()
            return drained[0] if len(drained) == 1 else self._ssc.sparkContext.union(drained)
        if self._default is None:
            # One empty single-partition RDD for every empty batch, made once as Spark does: a
            # new one per batch would cost a py4j round trip in every generation.
            self._default = self._ssc.sparkContext.parallelize([], 1)
        return self._default

    def _checkpointable(self) -> Any:
        return False
