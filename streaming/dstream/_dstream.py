"""DStream: pyspark's ``DStream`` API over the stream nodes (pyspark's ``DStream``, Spark's ``DStream``).

The nodes (``_node``, ``_transforms``, ``_windowed``, ``_state``) compute each batch's RDDs;
this module puts pyspark's methods on top and gives each node kind its public class; the
output operations (``_outputs``) and pyspark's argument conventions (``_arguments``) are beside it.
Transformations build RDDs on the generation thread; element functions run on Spark executors.
"""

from __future__ import annotations

import operator
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Iterator, TypeVar

from scheduler import StreamingStateError, Time

from ..continuous import ContinuousSink, ForeachSink
from ..spark import seconds_to_duration
from ..state import TransformWithStateSpec
from ._arguments import TimeLike, time_ms, with_time, with_time2
from ._foreach_batch import BatchOutputs
from ._groups import GroupsWithStateNode, check_output_mode, initial_groups
from ._node import StreamNode, memory_only
from ._outputs import check_continuous_output, check_continuous_sink, for_each_rdd, print_rdds, save_as_text_files
from ._recipe import recorded
from ._state import StateNode, initial_state
from ._transform_state import TransformWithStateNode, initial_rows
from ._transforms import MultiTransformedNode, TransformedNode, TransformedWithNode, UnionNode, check_stream
from ._watermark import WatermarkedNode
from ._windowed import ReducedWindowedNode, WindowedNode, concat_lists, drop_front, validate_window

if TYPE_CHECKING:
    from pyspark import RDD, StorageLevel  # only for annotations: pyspark is imported when Spark is first needed

__all__ = [
    "DStream",
    "api_call",
    "MultiTransformedDStream",
    "ReducedWindowedDStream",
    "StateDStream",
    "TransformWithStateDStream",
    "TransformedDStream",
    "TransformedWithDStream",
    "UnionDStream",
    "WindowedDStream",
]

T_co = TypeVar("T_co", covariant=True)

api_call = recorded(StreamNode)
"""Records a top-level call of a DStream API method (or a context's stream-making method) in the context's recipe."""


class DStream(BatchOutputs, StreamNode, Generic[T_co]):
    """A stream of RDDs on the batch grid.

    The public methods are pyspark's, with pyspark's names and semantics; durations are in
    seconds. Transformations can only be added before the context starts.

    Attributes:
        is_cached: True once :meth:`cache` or :meth:`persist` was called on this stream.
        is_checkpointed: True once :meth:`checkpoint` was called on this stream.
    """

    # -- pyspark's public API: core --

    def context(self) -> Any:
        """The StreamingContext of this stream."""
        return self._env.owner

    @property
    def _ssc(self) -> Any:  # pyspark's private name, which some programs read
        """The StreamingContext of this stream, as pyspark exposes it."""
        return self._env.owner

    @property
    def _slideDuration(self) -> float:  # pyspark's private name, which some programs read
        """The slide duration in seconds, as pyspark exposes it."""
        return self._slide.milliseconds / 1000.0

    @api_call
    def transform(self, func: Callable[..., Any]) -> DStream[Any]:
        """A stream whose RDD per batch is ``func(rdd)`` or ``func(time, rdd)`` of this one's.

        ``time`` is the batch time as a local datetime. A falsy result (e.g. ``None``) means
        no RDD for that batch, as in pyspark. The function runs when the batch is generated.

        Raises:
            AssertionError: ``func`` takes neither one nor two arguments (pyspark's check).
        """
        return TransformedDStream(self, with_time(func))

    @api_call
    def transformWith(self, func: Callable[..., Any], other: DStream[Any], keepSerializer: bool = False) -> DStream[Any]:  # noqa: N803
        """A stream whose RDD is ``func(rdd_a, rdd_b)`` or ``func(time, rdd_a, rdd_b)`` of two streams.

        A side without an RDD for the batch gets an empty RDD; ``func`` is always called. ``keepSerializer`` is accepted
        for compatibility and has no effect here (RDDs keep their own serializers).

        Raises:
            AssertionError: ``func`` takes neither two nor three arguments (pyspark's check).
            InvalidPipelineError: ``other`` belongs to another context.
            TypeError: ``other`` is not a DStream of this package (a pyspark.streaming one, say).
        """
        return TransformedWithDStream(self, other, with_time2(func))

    @api_call
    def foreachRDD(self, func: Callable[..., Any]) -> None:
        """Apply ``func(rdd)`` or ``func(time, rdd)`` to every batch's RDD: an output operation.

        A coroutine function runs on the event loop (it must not block: send Spark calls to a
        worker thread); a plain one runs in a worker thread inside the batch's Spark job group.
        """
        for_each_rdd(self, func)

    @api_call
    def pprint(self, num: int = 10) -> None:
        """Print the first ``num`` elements of each RDD, under pyspark's header, and ``...`` if there are more."""
        print_rdds(self, num)

    @api_call
    def saveAsTextFiles(self, prefix: str, suffix: str | None = None) -> None:
        """Save each batch's RDD as text files under ``prefix-<batch ms>[.suffix]``: an output operation.

        A batch whose directory already holds a complete save (Hadoop's ``_SUCCESS`` marker) is
        skipped, as pyspark skips any existing directory, so that a replayed batch does not fail.
        A directory without the marker is what a crash in the middle of a save leaves: it is
        deleted and the batch saved again, so a replayed batch's output is whole (pyspark would
        keep the partial one).
        """
        save_as_text_files(self, prefix, suffix)

    @api_call
    def foreach(self, writer: Any) -> None:
        """Write every row with a ``ForeachWriter`` (``open``/``process``/``close``) or a function: an output of a continuous context.

        pyspark's ``DataStreamWriter.foreach`` contract: each long-running task calls
        ``open(partition_id, epoch_id)`` at the start of every epoch (its rows are skipped when it
        returns False), ``process(row)`` per row, and ``close(error)`` at the epoch's end. At least once.

        Raises:
            InvalidPipelineError: the context has no Continuous trigger (use :meth:`foreachRDD`),
                or ``writer`` has no callable ``process`` (pyspark's message).
        """
        check_continuous_output(self._env, "foreach")
        ForeachSink(writer)  # pyspark's checks of the writer, at the call

    @api_call
    def writeTo(self, sink: ContinuousSink) -> None:
        """Write every row to ``sink`` (a continuous :class:`~streaming.continuous.FileSink`, ``MemorySink``, ...).

        Raises:
            InvalidPipelineError: the context has no Continuous trigger, or ``sink`` is not a sink.
        """
        check_continuous_output(self._env, "writeTo")
        check_continuous_sink(sink)

    # -- element-wise transformations --

    @api_call
    def mapPartitionsWithIndex(self, f: Callable[[int, Iterable[Any]], Iterable[Any]],
                               preservesPartitioning: bool = False) -> DStream[Any]:  # noqa: N803
        """Apply ``f(partition_index, iterator)`` to each partition of each RDD."""
        return self.transform(lambda rdd: rdd.mapPartitionsWithIndex(f, preservesPartitioning))

    @api_call
    def mapPartitions(self, f: Callable[[Iterable[Any]], Iterable[Any]], preservesPartitioning: bool = False) -> DStream[Any]:  # noqa: N803
        """Apply ``f(iterator)`` to each partition of each RDD."""
        def per_partition(_: int, iterator: Iterable[Any]) -> Iterable[Any]:
            return f(iterator)
        return self.mapPartitionsWithIndex(per_partition, preservesPartitioning)

    @api_call
    def map(self, f: Callable[[Any], Any], preservesPartitioning: bool = False) -> DStream[Any]:  # noqa: N803
        """Apply ``f`` to each element."""
        def per_partition(iterator: Iterable[Any]) -> Iterable[Any]:
            return map(f, iterator)
        return self.mapPartitions(per_partition, preservesPartitioning)

    @api_call
    def flatMap(self, f: Callable[[Any], Iterable[Any]], preservesPartitioning: bool = False) -> DStream[Any]:  # noqa: N803
        """Apply ``f`` to each element and flatten the results."""
        def per_partition(_: int, iterator: Iterable[Any]) -> Iterable[Any]:
            return chain.from_iterable(map(f, iterator))
        return self.mapPartitionsWithIndex(per_partition, preservesPartitioning)

    @api_call
    def filter(self, f: Callable[[Any], bool]) -> DStream[Any]:
        """Keep the elements for which ``f`` is true."""
        def per_partition(iterator: Iterable[Any]) -> Iterable[Any]:
            return filter(f, iterator)
        return self.mapPartitions(per_partition, True)

    @api_call
    def glom(self) -> DStream[Any]:
        """Turn each partition into one list of its elements."""
        def as_list(iterator: Iterable[Any]) -> Iterator[list[Any]]:
            yield list(iterator)
        return self.mapPartitions(as_list)

    @api_call
    def mapValues(self, f: Callable[[Any], Any]) -> DStream[Any]:
        """Apply ``f`` to the value of each ``(key, value)`` pair, keeping the key and the partitioning."""
        def on_value(kv: tuple[Any, Any]) -> tuple[Any, Any]:
            return kv[0], f(kv[1])
        return self.map(on_value, preservesPartitioning=True)

    @api_call
    def flatMapValues(self, f: Callable[[Any], Iterable[Any]]) -> DStream[Any]:
        """Apply ``f`` to each value and pair every result with the key, keeping the partitioning."""
        def on_value(kv: tuple[Any, Any]) -> Iterable[tuple[Any, Any]]:
            key = kv[0]
            return ((key, v) for v in f(kv[1]))
        return self.flatMap(on_value, preservesPartitioning=True)

    @api_call
    def repartition(self, numPartitions: int) -> DStream[Any]:  # noqa: N803
        """Reshuffle each RDD into ``numPartitions`` partitions."""
        return self.transform(lambda rdd: rdd.repartition(numPartitions))

    # -- per-batch aggregations --

    def _default_partitions(self, numPartitions: int | None) -> int:  # noqa: N803
        return self._env.spark.settings().default_parallelism if numPartitions is None else numPartitions

    @api_call
    def reduce(self, func: Callable[[Any, Any], Any]) -> DStream[Any]:
        """One element per batch: the RDD's elements reduced with ``func`` (nothing for an empty batch)."""
        return self.map(lambda x: (None, x)).reduceByKey(func, 1).map(lambda kv: kv[1])

    @api_call
    def count(self) -> DStream[Any]:
        """One element per batch: the number of elements.

        As in pyspark, an RDD without partitions (e.g. an empty window) yields no element, not 0.
        """
        return self.mapPartitions(lambda it: [sum(1 for _ in it)]).reduce(operator.add)

    @api_call
    def countByValue(self) -> DStream[Any]:
        """``(value, count)`` for each distinct element of each batch."""
        return self.map(lambda x: (x, 1)).reduceByKey(lambda a, b: a + b)

    @api_call
    def reduceByKey(self, func: Callable[[Any, Any], Any], numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """Merge the values of each key with ``func``, into ``numPartitions`` (default: Spark's parallelism)."""
        n = self._default_partitions(numPartitions)
        return self.combineByKey(lambda v: v, func, func, n)

    @api_call
    def combineByKey(self, createCombiner: Callable[[Any], Any], mergeValue: Callable[[Any, Any], Any],  # noqa: N803
                     mergeCombiners: Callable[[Any, Any], Any], numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """``rdd.combineByKey`` on each batch (default partitions: Spark's parallelism)."""
        n = self._default_partitions(numPartitions)
        return self.transform(lambda rdd: rdd.combineByKey(createCombiner, mergeValue, mergeCombiners, n))

    @api_call
    def partitionBy(self, numPartitions: int, partitionFunc: Callable[[Any], int] | None = None) -> DStream[Any]:  # noqa: N803
        """Hash-partition each batch's pairs into ``numPartitions`` with ``partitionFunc`` (default pyspark's ``portable_hash``)."""
        by = partitionFunc
        if by is None:
            from pyspark.rdd import portable_hash

            by = portable_hash
        return self.transform(lambda rdd: rdd.partitionBy(numPartitions, by))

    @api_call
    def groupByKey(self, numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """``(key, iterable of values)`` per key of each batch."""
        n = self._default_partitions(numPartitions)
        return self.transform(lambda rdd: rdd.groupByKey(n))

    # -- two-stream operations (a missing side is an empty RDD) --

    @api_call
    def union(self, other: DStream[Any]) -> DStream[Any]:
        """The elements of both streams, this stream's first.

        Raises:
            InvalidPipelineError: different slide durations (a ValueError, as in pyspark) or contexts.
            TypeError: ``other`` is not a DStream of this package (a pyspark.streaming one, say).
        """
        check_stream(other, "union", slide=self._slide)
        return self.transformWith(lambda a, b: a.union(b), other, True)

    @api_call
    def cogroup(self, other: DStream[Any], numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """``(key, (values here, values there))`` for every key of either stream, per batch."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.cogroup(b, n), check_stream(other, "cogroup"))

    @api_call
    def join(self, other: DStream[Any], numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """``(key, (v, w))`` for each pair of values of a key present in both streams, per batch."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.join(b, n), check_stream(other, "join"))

    @api_call
    def leftOuterJoin(self, other: DStream[Any], numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """Like :meth:`join`, keeping this stream's keys missing from ``other`` as ``(key, (v, None))``."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.leftOuterJoin(b, n), check_stream(other, "leftOuterJoin"))

    @api_call
    def rightOuterJoin(self, other: DStream[Any], numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """Like :meth:`join`, keeping ``other``'s keys missing here as ``(key, (None, w))``."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.rightOuterJoin(b, n), check_stream(other, "rightOuterJoin"))

    @api_call
    def fullOuterJoin(self, other: DStream[Any], numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """Like :meth:`join`, keeping the keys of either side, with None for the missing value."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.fullOuterJoin(b, n), check_stream(other, "fullOuterJoin"))

    # -- persistence and checkpointing --

    @api_call
    def cache(self) -> DStream[Any]:
        """Persist every RDD of this stream in memory (pyspark's ``MEMORY_ONLY``)."""
        return self.persist(memory_only())

    @api_call
    def persist(self, storageLevel: StorageLevel) -> DStream[Any]:  # noqa: N803
        """Persist every RDD of this stream at ``storageLevel``; only before the context starts.

        Raises:
            StreamingStateError: the context has started (Spark's message).
        """
        self.is_cached = True
        self._set_storage_level(storageLevel)
        return self

    @api_call
    def checkpoint(self, interval: float) -> DStream[Any]:
        """Checkpoint this stream's RDDs every ``interval`` seconds (cutting their lineage); only before start.

        Also persists the stream in memory, as Spark does. Needs a checkpoint directory
        (:meth:`StreamingContext.checkpoint`) when the context starts.

        Raises:
            StreamingStateError: the context has started (Spark's message).
        """
        self.is_checkpointed = True
        duration = seconds_to_duration(interval, "checkpoint interval")
        if self._zero_time is not None:
            raise StreamingStateError("Cannot change checkpoint interval of a DStream after streaming context has started")
        self._set_storage_level(memory_only())
        self._checkpoint_interval = duration
        return self

    # -- time slices and windows --

    def slice(self, begin: TimeLike, end: TimeLike) -> list[RDD[Any]]:
        """The RDDs of the batches from ``begin`` to ``end``, both included.

        Bounds are local datetimes or unix seconds; as in pyspark a datetime loses its
        sub-second part, and bounds off the stream's grid are aligned down to it. Batches
        no longer remembered are computed again (a queue stream would hand out new data):
        use :meth:`StreamingContext.remember` to keep them.

        Raises:
            StreamingStateError: the stream is not part of a started context.
        """
        return self.slice_rdds(Time(time_ms(begin)), Time(time_ms(end)))

    @api_call
    def window(self, windowDuration: float, slideDuration: float | None = None) -> DStream[Any]:  # noqa: N803
        """A stream of the union of this stream's RDDs over the last ``windowDuration`` seconds.

        It produces an RDD every ``slideDuration`` seconds (default: this stream's slide);
        both must be multiples of this stream's slide.

        Raises:
            InvalidDurationError: a duration is not a multiple of this stream's slide (pyspark's ValueError message).
        """
        window, slide = validate_window(self, windowDuration, slideDuration)
        return WindowedDStream(self, window, slide or self._slide)

    @api_call
    def reduceByKeyAndWindow(
        self,
        func: Callable[[Any, Any], Any],
        invFunc: Callable[[Any, Any], Any] | None,  # noqa: N803
        windowDuration: float,  # noqa: N803
        slideDuration: float | None = None,  # noqa: N803
        numPartitions: int | None = None,  # noqa: N803
        filterFunc: Callable[[tuple[Any, Any]], bool] | None = None,  # noqa: N803
    ) -> DStream[Any]:
        """Reduce the values of each key over a sliding window.

        With ``invFunc`` (the inverse of ``func``) the stream must checkpoint, and when the
        window spans at least 5 slides each window is computed from the previous one: the
        new batches reduced in, the batches that left reduced out with ``invFunc``. Keys are
        then never dropped by the inverse itself: pass ``filterFunc`` to drop e.g. zero
        counts. Without ``invFunc`` every window is reduced from scratch and, as in pyspark,
        ``filterFunc`` is ignored.

        Raises:
            InvalidDurationError: a duration is not a multiple of this stream's slide.
        """
        window, slide = validate_window(self, windowDuration, slideDuration)
        n = self._default_partitions(numPartitions)
        reduced = self.reduceByKey(func, n)
        if invFunc:
            return ReducedWindowedDStream(reduced, func, invFunc, n, filterFunc, window, slide or self._slide)
        return reduced.window(windowDuration, slideDuration).reduceByKey(func, n)

    @api_call
    def reduceByWindow(self, reduceFunc: Callable[[Any, Any], Any], invReduceFunc: Callable[[Any, Any], Any] | None,  # noqa: N803
                       windowDuration: float, slideDuration: float) -> DStream[Any]:  # noqa: N803
        """One element per window: all its elements reduced (incrementally with ``invReduceFunc``)."""
        keyed = self.map(lambda x: (1, x))
        reduced = keyed.reduceByKeyAndWindow(reduceFunc, invReduceFunc, windowDuration, slideDuration, 1)
        return reduced.map(lambda kv: kv[1])

    @api_call
    def countByWindow(self, windowDuration: float, slideDuration: float) -> DStream[Any]:  # noqa: N803
        """One element per window: its number of elements (incremental, so it needs a checkpoint directory)."""
        return self.map(lambda x: 1).reduceByWindow(operator.add, operator.sub, windowDuration, slideDuration)

    @api_call
    def countByValueAndWindow(self, windowDuration: float, slideDuration: float,  # noqa: N803
                              numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """``(value, count)`` of each distinct element over a sliding window (needs a checkpoint directory)."""
        keyed = self.map(lambda x: (x, 1))
        counted = keyed.reduceByKeyAndWindow(operator.add, operator.sub, windowDuration, slideDuration, numPartitions)
        return counted.filter(lambda kv: kv[1] > 0)

    @api_call
    def groupByKeyAndWindow(self, windowDuration: float, slideDuration: float,  # noqa: N803
                            numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """``(key, iterable of values)`` per key over a sliding window (needs a checkpoint directory)."""
        from pyspark.resultiterable import ResultIterable

        as_lists = self.mapValues(lambda v: [v])
        grouped = as_lists.reduceByKeyAndWindow(concat_lists, drop_front, windowDuration, slideDuration, numPartitions)
        return grouped.mapValues(ResultIterable)

    # -- state --

    @api_call
    def updateStateByKey(self, updateFunc: Callable[[list[Any], Any], Any], numPartitions: int | None = None,  # noqa: N803
                         initialRDD: RDD[Any] | Iterable[Any] | None = None) -> DStream[Any]:  # noqa: N803
        """A stream of per-key state: ``updateFunc(new_values, last_state_or_None)`` for every key with state or new values.

        A ``None`` result drops the key. In a batch where this stream has no RDD the state is
        carried over without calling ``updateFunc`` (pyspark's behaviour). ``initialRDD``
        (an RDD or a list of pairs) seeds the state. The stream must checkpoint, so the
        context needs a checkpoint directory.
        """
        n = self._default_partitions(numPartitions)
        return StateDStream(self, updateFunc, n, initial_state(self._env, initialRDD))

    # -- event time and arbitrary state (Structured Streaming's operators, on DStreams) --

    @api_call
    def withWatermark(self, eventTime: Callable[[Any], Any], delayThreshold: str) -> DStream[Any]:  # noqa: N803
        """The same records, with an event-time watermark: Spark's ``withWatermark`` for a DStream.

        ``eventTime(record)`` is the record's event time, a ``datetime`` (naive ones read as
        UTC) or epoch milliseconds; ``delayThreshold`` is an interval string such as
        ``"10 minutes"``. After each batch the watermark becomes the latest event time seen
        minus the delay (over several watermarked streams, the minimum, or the maximum with
        ``spark.sql.streaming.multipleWatermarkPolicy=max``); it never moves back, is logged in
        the checkpoint and restored on restart. A watermark filters nothing by itself: event-time
        timeouts of ``flatMapGroupsWithState`` use it. Batches of a context with a watermark run
        one after another (a batch starts once the one before it finished).

        Raises:
            ValueError: an interval Spark does not read, or a negative one (Spark's message).
            InvalidPipelineError: ``eventTime`` is not a function.
        """
        from ..state import parse_delay_threshold

        return WatermarkedDStream(self, eventTime, parse_delay_threshold(delayThreshold))

    @api_call
    def mapGroupsWithState(self, func: Callable[[Any, Iterator[Any], Any], Any],
                           timeoutConf: str = "NoTimeout", initialState: Any = None,  # noqa: N803
                           numPartitions: int | None = None, eventTime: Callable[[Any], Any] | None = None,  # noqa: N803
                           ) -> DStream[Any]:
        """One output per key with input (or timed out) per batch: ``func(key, values, state) -> value``.

        See :meth:`flatMapGroupsWithState`; the function returns exactly one value.
        """
        return self._groups_with_state(func, False, timeoutConf, initialState, numPartitions, eventTime)

    @api_call
    def flatMapGroupsWithState(self, func: Callable[[Any, Iterator[Any], Any], Any],
                               outputMode: str = "append", timeoutConf: str = "NoTimeout",  # noqa: N803
                               initialState: Any = None, numPartitions: int | None = None,  # noqa: N803
                               eventTime: Callable[[Any], Any] | None = None) -> DStream[Any]:  # noqa: N803
        """Arbitrary state per key on a pair stream: ``func(key, values, state)`` returns the key's outputs (an iterable).

        Spark's ``flatMapGroupsWithState`` (pyspark's ``applyInPandasWithState``) for DStreams:
        ``state`` is a :class:`streaming.state.GroupState` (``exists``, ``get``, ``update``,
        ``remove``, ``setTimeoutDuration``, ``setTimeoutTimestamp``, ``hasTimedOut``, ...). In
        each batch the function is called once per key with input, then once for each key
        whose timeout passed (no values, ``hasTimedOut`` true): ``timeoutConf`` is
        ``"NoTimeout"``, ``"ProcessingTimeTimeout"`` (the batch time passed the timeout) or
        ``"EventTimeTimeout"`` (the watermark passed it; needs ``withWatermark`` upstream, and
        drops input rows at or before the previous batch's watermark, found by applying the
        watermark's ``eventTime`` to each value, or ``eventTime`` if given). A batch without
        input still fires timeouts. ``initialState`` (an RDD or a list of (key, state) pairs,
        each key once) seeds the first batch. ``outputMode`` is ``"append"`` or ``"update"``
        (a DStream has no sink that tells them apart; it is checked as Spark does).

        The state lives in a state store under the checkpoint directory (one per partition,
        versioned per batch, written by the tasks), so the context needs ``checkpoint(dir)``.

        Raises:
            PySparkValueError: an unknown timeout kind.
            InvalidPipelineError: a bad output mode; at start, no checkpoint directory, or an
                event-time timeout without a watermark (Spark's messages).
        """
        check_output_mode(outputMode)
        return self._groups_with_state(func, True, timeoutConf, initialState, numPartitions, eventTime)

    @api_call
    def transformWithState(self, statefulProcessor: Any, outputMode: str, timeMode: str,  # noqa: N803
                           initialState: Any = None, eventTime: Callable[[Any], Any] | None = None,  # noqa: N803
                           numPartitions: int | None = None) -> DStream[Any]:  # noqa: N803
        """Spark 4's ``transformWithState`` (pyspark's row-based ``transformWithState``) on a pair stream.

        ``statefulProcessor`` is a :class:`streaming.state.StatefulProcessor` with pyspark's methods;
        rows are the stream's values (plain objects), and its handlers yield the output records.
        ``timeMode`` is ``"None"``, ``"ProcessingTime"`` or ``"EventTime"`` (the watermark of
        ``withWatermark`` upstream; late values, by ``eventTime(value)`` or the watermark's
        function, are dropped). ``initialState`` (a list of (key, row) pairs) goes to ``handleInitialState``
        in the first batch. The state lives under the checkpoint, as :meth:`flatMapGroupsWithState`'s (docs/compatibility.md).

        Raises:
            InvalidPipelineError: not a StatefulProcessor, an RDD as ``initialState`` (collect it); at start, no checkpoint.
            TransformWithStateError: a bad output or time mode; at start, a processor the checkpoint's state does not fit.
        """
        node = TransformWithStateDStream(self, TransformWithStateSpec(statefulProcessor, outputMode, timeMode, False),
                                         num_partitions=self._default_partitions(numPartitions),
                                         initial=initial_rows(initialState), event_time=eventTime)
        node.advance_every_batch()
        return node

    def _groups_with_state(self, func: Callable[..., Any], flat: bool, timeout: str, initial: Any,
                           num_partitions: int | None, event_time: Callable[[Any], Any] | None) -> DStream[Any]:
        node = GroupsWithStateDStream(self, func, flat=flat, timeout=timeout,
                                      num_partitions=self._default_partitions(num_partitions),
                                      initial=initial_groups(initial), event_time=event_time)
        node.advance_every_batch()
        return node

    def __repr__(self) -> str:
        return f"<{type(self).__name__} [slide {self._slide} | {len(self._generated)} RDDs remembered]>"


# The public class of each derived node kind: the node's computation with DStream's API
# (method resolution: the node's hooks first, then DStream, then StreamNode).


class TransformedDStream(TransformedNode, DStream[Any]):
    """``func(time, rdd)`` of a parent's RDD per batch (pyspark's ``TransformedDStream``); see :class:`TransformedNode`."""


class TransformedWithDStream(TransformedWithNode, DStream[Any]):
    """``func(time, a, b)`` over two streams (pyspark's ``transformWith``); see :class:`TransformedWithNode`."""


class UnionDStream(UnionNode, DStream[Any]):
    """The union of several streams (Spark's ``UnionDStream``); see :class:`UnionNode`."""


class MultiTransformedDStream(MultiTransformedNode, DStream[Any]):
    """``func(rdds)`` over several streams (``ssc.transform``); see :class:`MultiTransformedNode`."""


class WindowedDStream(WindowedNode, DStream[Any]):
    """A sliding window over a parent (Spark's ``WindowedDStream``); see :class:`WindowedNode`."""


class ReducedWindowedDStream(ReducedWindowedNode, DStream[Any]):
    """An incrementally reduced window (pyspark's ``PythonReducedWindowedDStream``); see :class:`ReducedWindowedNode`."""


class WatermarkedDStream(WatermarkedNode, DStream[Any]):
    """The records of a stream with an event-time watermark (``withWatermark``); see :class:`WatermarkedNode`."""


class GroupsWithStateDStream(GroupsWithStateNode, DStream[Any]):
    """``mapGroupsWithState`` / ``flatMapGroupsWithState`` of a pair stream; see :class:`GroupsWithStateNode`."""


class TransformWithStateDStream(TransformWithStateNode, DStream[Any]):
    """``transformWithState`` of a pair stream; see :class:`TransformWithStateNode`."""


class StateDStream(StateNode, DStream[Any]):
    """Per-key state, ``updateStateByKey`` (pyspark's ``PythonStateDStream``); see :class:`StateNode`."""

