"""QueueInputDStream: hands out queued RDDs, one per batch or all at once (pyspark's ``queueStream``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from scheduler import Offset, ReplayError, StreamInputInfo, Time

from ..dstream import StreamEnvironment, times_read
from ..spark import has_jvm_rdd
from ._base import InputDStream
from ._counting import RowCounter

if TYPE_CHECKING:
    from pyspark import RDD  # only for annotations: pyspark is imported when Spark is first needed

    from ..connect import ObservedRows

__all__ = ["QueueInputDStream"]


class QueueInputDStream(InputDStream):
    """Hands out queued RDDs: one per batch, or all at once (pyspark's ``queueStream``).

    Once the queue is empty, every batch gets ``default`` (or an empty single-partition RDD).

    With a checkpoint the offset is how many queued RDDs batches took (``"3"``), so a restart
    replays a batch from the same queue position. Spark refuses ``queueStream`` with
    checkpointing, as it cannot serialize the queue; here the program rebuilds the queue (its
    setup function runs again), which must hold at least the RDDs it held before, in order.
    """

    _input_kind = "queue"

    def __init__(self, env: StreamEnvironment, rdds: list[Any], one_at_a_time: bool, default: Any) -> None:
        """Queue ``rdds`` for the batches to come: RDDs, or lists (parallelized by the batch that takes them)."""
        super().__init__(env)
        self._items: list[Any] = list(rdds)
        self._taken = 0  # untracked (a bare graph without a query tracker): how many items batches took so far
        self._freed = 0  # items before this index were released
        self._row_counter = RowCounter()
        self._observed: ObservedRows | None = None  # on Connect
        self._one_at_a_time = one_at_a_time
        self._default = default
        self._times_read: Callable[[Time], bool] | None = None  # set at start: None when every time is read

    @staticmethod
    def _position(offset: Offset) -> int:
        # A JSON number ("3"): int() reads it, at a fraction of json.loads's cost (several times a batch).
        return 0 if offset is None else int(offset)

    def _next_end(self, begin: int) -> int:
        return min(begin + 1, len(self._items)) if self._one_at_a_time else len(self._items)

    def latest_offset(self) -> Offset:
        return str(len(self._items)) if self._items else None

    def start(self) -> None:
        """Called once when the context starts: the graph is complete, so the times its outputs read this stream at are known."""
        super().start()
        self._times_read = times_read(self, self._env.graph.output_streams)

    async def plan_offset(self, start: Offset, time: Time) -> Offset:
        if self._times_read is not None and not self._times_read(time):
            # No output reads this time (a window shorter than its slide): nothing is dequeued, and the next time read
            # takes the next item, as pyspark's queue is dequeued only when its RDD is computed.
            return start
        begin = self._position(start)
        end = self._next_end(begin)
        return start if end <= begin else str(end)

    def take_counted_rows(self, time: Time) -> int | None:
        """The rows batch ``time`` read from queued RDDs, once its jobs ended (lists are counted when taken)."""
        if self._observed is not None:
            return self._observed.take(time.milliseconds)
        return self._row_counter.take(time.milliseconds)

    def _observed_rows(self) -> ObservedRows:
        if self._observed is None:
            from ..connect import ObservedRows

            self._observed = ObservedRows()
        return self._observed

    async def commit(self, end: Offset) -> None:
        # Queued items before every remembered batch's range are never read again: let their
        # RDDs go, as Spark's queue does.
        # The oldest remembered range starts lowest: a batch's range starts where the one before it ended.
        oldest = self._ranges.oldest()
        below = self._position(end if oldest is None else oldest[0])
        for i in range(self._freed, min(below, len(self._items))):
            self._items[i] = None
        self._freed = max(self._freed, below)

    def generates_on_loop(self, time: Time) -> bool:
        """The graph's hook (not for users): yes when batch ``time`` gets the default RDD, made and ready (or its
        remembered RDD is ready): no queued item to take, nothing to persist or checkpoint."""
        if self._storage_level is not None or self._checkpoint_interval is not None:
            return False
        remembered = self._generated.get(time)
        if remembered is not None:
            return has_jvm_rdd(remembered)
        if self.replaying:
            found = self._ranges.get(time)
            if found is None:  # the thread's path warns about it
                return False
            begin, end = self._position(found[0]), self._position(found[1])
            if end != begin or end > len(self._items):
                return False
        elif self._next_end(self._taken) > self._taken:
            return False
        return has_jvm_rdd(self._default)

    def _compute(self, time: Time) -> RDD[Any] | None:
        if self.replaying:
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
        tracker = self._env.graph.input_infos
        if taken:
            # The SparkContext only when Spark work is needed: a queue of RDDs hands them out as they are.
            rdds: list[RDD[Any]] = [self._env.spark_context.parallelize(item) if isinstance(item, list) else item
                                    for item in taken]
            rdd = rdds[0] if len(rdds) == 1 else self._env.spark_context.union(rdds)
            if tracker is None:
                return rdd  # a graph that is not running: nobody reads the counts
            if all(isinstance(item, list) for item in taken):
                tracker.report_info(time, StreamInputInfo(self.id, sum(len(item) for item in taken)))
                return rdd
            if self._env.spark.kind == "connect":  # no accumulators on Connect: observed metrics count the rows
                counted: RDD[Any] = self._observed_rows().wrap(rdd, time.milliseconds)
                return counted
            # Queued RDDs: their rows are counted as the batch reads them.
            return self._row_counter.wrap(self._env.spark_context, rdd, time.milliseconds)
        if tracker is not None:
            tracker.report_info(time, StreamInputInfo(self.id, 0))  # the default is not new input
        # The SparkContext only to make the default (it may start one): a made default is handed
        # out as it is, also on the event loop (see generates_on_loop).
        if self._default is None:
            # One empty single-partition RDD for every empty batch, made once as Spark does: a
            # new one per batch would cost a py4j round trip in every generation.
            self._default = self._env.spark_context.parallelize([], 1)
        elif isinstance(self._default, list):
            self._default = self._env.spark_context.parallelize(self._default)
        default: RDD[Any] = self._default
        return default
