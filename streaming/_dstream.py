"""DStream: a sequence of RDDs, one per batch (pyspark's ``DStream``, Spark's ``DStream``).

Each stream computes the RDD of a batch time at most once and remembers it for its remember
window; output streams turn their RDD into a Job per batch. Transformations build RDDs on the
JobGenerator's worker thread; element functions run on Spark executors when a job runs.
"""

from __future__ import annotations

import inspect
import operator
import threading
import weakref
from datetime import datetime
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import structlog

from scheduler import Duration, InvalidPipelineError, Job, StreamingStateError, Time, TimeOrderedDict

from ._spark import (
    BatchJob,
    batch_datetime,
    current_batch_job,
    job_description,
    seconds_to_duration,
    user_frame,
    wait_for_thread,
)

if TYPE_CHECKING:
    from pyspark import RDD, StorageLevel

    from ._context import StreamingContext
    from ._dstream_graph import DStreamGraph

__all__ = [
    "DStream",
    "ForEachDStream",
    "MultiTransformedDStream",
    "TransformedDStream",
    "TransformedWithDStream",
    "UnionDStream",
]

_log = structlog.get_logger("aiodstream.streaming").bind(component="DStream")

TimeLike = datetime | int | float
"""A batch time as pyspark's ``DStream.slice`` takes it: a local datetime or unix seconds."""


def _arity(func: Callable[..., Any]) -> int:
    """Positional parameters of ``func`` (pyspark reads ``__code__.co_argcount`` the same way)."""
    code = getattr(func, "__code__", None)
    if code is not None:
        return int(code.co_argcount) - (1 if inspect.ismethod(func) else 0)
    params = inspect.signature(func).parameters.values()
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


# One lock per graph guards RDD generation: the JobGenerator's worker thread builds each
# batch's RDDs, and a user may call ``slice`` from another thread (e.g. inside a foreachRDD
# job) at the same time. Re-entrant, because computing one stream computes its parents.
_graph_locks: weakref.WeakKeyDictionary[DStreamGraph, threading.RLock] = weakref.WeakKeyDictionary()
_graph_locks_guard = threading.Lock()


def _generation_lock(graph: DStreamGraph) -> threading.RLock:
    with _graph_locks_guard:
        lock = _graph_locks.get(graph)
        if lock is None:
            lock = _graph_locks[graph] = threading.RLock()
        return lock


def _memory_only() -> StorageLevel:
    from pyspark import StorageLevel

    return StorageLevel.MEMORY_ONLY


def _union(ssc: StreamingContext, rdds: Sequence[RDD[Any]]) -> RDD[Any]:
    """Spark's ``sc.union(rdds)``, which is an empty RDD for no RDDs (pyspark's would fail)."""
    sc = ssc.sparkContext
    if not rdds:
        return sc.emptyRDD()
    return sc.union(list(rdds))


def _time_to_ms(value: TimeLike) -> int:
    """pyspark's conversion of a ``slice`` bound: a datetime loses its sub-second part."""
    if isinstance(value, datetime):
        # Quirk kept from pyspark: it reads the datetime through time.mktime(timetuple()),
        # which has whole-second precision.
        import time as _time

        value = _time.mktime(value.timetuple())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"slice bounds must be datetimes or unix seconds (int or float), got {type(value).__name__} {value!r}")
    return int(value * 1000)


def _remove_incomplete_save(sc: Any, path: str) -> bool:
    """Delete ``path`` if it is an interrupted Hadoop save (no ``_SUCCESS`` marker); return whether it was."""
    jvm = sc._jvm
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(sc._jsc.hadoopConfiguration())
    if fs.exists(jvm.org.apache.hadoop.fs.Path(target, "_SUCCESS")):
        return False
    _log.warning("removing an incomplete save of a replayed batch before saving it again", path=path)
    fs.delete(target, True)
    return True


def _file_name(prefix: str, suffix: str | None, time: Time) -> str:
    """``prefix-<ms>`` or ``prefix-<ms>.suffix``, the directory a batch is saved to."""
    name = f"{prefix}-{time.milliseconds}"
    return name if suffix is None else f"{name}.{suffix}"


class DStream:
    """A stream of RDDs on the batch grid.

    The public methods are pyspark's, with pyspark's names and semantics; durations are in
    seconds. Transformations can only be added before the context starts.

    Attributes:
        is_cached: True once :meth:`cache` or :meth:`persist` was called on this stream.
        is_checkpointed: True once :meth:`checkpoint` was called on this stream.
    """

    def __init__(self, ssc: StreamingContext, parents: Sequence[DStream] = (), slide: Duration | None = None) -> None:
        """Create a stream of ``ssc`` derived from ``parents`` (none for an input stream)."""
        ssc._check_can_add()
        self._ssc = ssc
        self._parents: tuple[DStream, ...] = tuple(parents)
        self._slide: Duration = slide or (parents[0]._slide if parents else ssc._batch_duration)
        # Only RDDs are remembered: like Spark, a batch without an RDD is asked again next time.
        self._generated: TimeOrderedDict[RDD[Any]] = TimeOrderedDict()
        self._zero_time: Time | None = None
        self._remember_duration: Duration | None = None
        self._storage_level: StorageLevel | None = None
        self._checkpoint_interval: Duration | None = None
        self._must_checkpoint = False
        self._lock = _generation_lock(ssc._graph)
        self.is_cached = False
        self.is_checkpointed = False

    # -- graph lifecycle (driven by DStreamGraph) --

    def _initialize(self, zero_time: Time) -> None:
        if self._zero_time is not None and self._zero_time != zero_time:
            raise StreamingStateError(f"ZeroTime is already initialized to {self._zero_time}, cannot initialize it again to {zero_time}")
        self._zero_time = zero_time
        if self._must_checkpoint and self._checkpoint_interval is None:
            # Spark's default for streams that must checkpoint: the smallest multiple of the
            # slide that is at least 10 seconds.
            slides = max(1, -(-10_000 // self._slide.milliseconds))
            self._checkpoint_interval = self._slide * slides
            _log.info("Checkpoint interval automatically set", stream=type(self).__name__,
                      interval_ms=self._checkpoint_interval.milliseconds)
        minimum = self._slide
        if self._checkpoint_interval is not None and self._checkpoint_interval >= self._slide:
            # Twice the interval, so the RDD of the latest checkpoint is never forgotten.
            minimum = self._checkpoint_interval * 2
        if self._remember_duration is None or self._remember_duration < minimum:
            self._remember_duration = minimum
        for parent in self._parents:
            parent._initialize(zero_time)

    def _remember(self, duration: Duration | None) -> None:
        if duration is not None and (self._remember_duration is None or duration > self._remember_duration):
            self._remember_duration = duration
        for parent in self._parents:
            parent._remember(self._parent_remember_duration())

    def _parent_remember_duration(self) -> Duration | None:
        """How long parents must remember their RDDs for this stream (windows add their length)."""
        return self._remember_duration

    def _validate_at_start(self) -> None:
        """Spark's ``validateAtStart`` checks, in Spark's order and words, then the parents'."""
        name = type(self).__name__
        interval = self._checkpoint_interval
        if interval is not None:
            if self._ssc._spark_checkpoint_dir is None:  # read by the start, off the event loop
                raise InvalidPipelineError(
                    "requirement failed: The checkpoint directory has not been set. Please set it by StreamingContext.checkpoint()."
                )
            if interval < self._slide:
                raise InvalidPipelineError(
                    f"requirement failed: The checkpoint interval for {name} has been set to {interval} which is lower than "
                    f"its slide time ({self._slide}). Please set it to at least {self._slide}."
                )
            if not interval.is_multiple_of(self._slide):
                raise InvalidPipelineError(
                    f"requirement failed: The checkpoint interval for {name} has been set to  {interval} which not a multiple "
                    f"of its slide time ({self._slide}). Please set it to a multiple of {self._slide}."
                )
            if self._storage_level is None:
                raise InvalidPipelineError(
                    f"requirement failed: {name} has been marked for checkpointing but the storage level has not been set to "
                    "enable persisting. Please use DStream.persist() to set the storage level to use memory for better "
                    "checkpointing performance."
                )
            remember = self._remember_duration
            if remember is None or remember <= interval:
                raise InvalidPipelineError(
                    f"requirement failed: The remember duration for {name} has been set to  {remember} which is not more than "
                    f"the checkpoint interval ({interval}). Please set it to a value higher than {interval}."
                )
        for parent in self._parents:
            parent._validate_at_start()

    def _is_time_valid(self, time: Time) -> bool:
        if self._zero_time is None:
            raise StreamingStateError(f"{self!r} has not been initialized")
        delta = time.milliseconds - self._zero_time.milliseconds
        return delta > 0 and delta % self._slide.milliseconds == 0

    def _get_or_compute(self, time: Time) -> RDD[Any] | None:
        """The RDD of ``time``: remembered, else computed now (at most once), or None."""
        rdd = self._generated.get(time)
        if rdd is not None:
            return rdd
        with self._lock:
            rdd = self._generated.get(time)
            if rdd is not None or not self._is_time_valid(time):
                return rdd
            rdd = self._compute(time)
            if rdd is None:
                return None
            # Persist and mark for checkpointing before any child derives from the RDD, so
            # children read the cache and a checkpoint cuts the lineage.
            if self._storage_level is not None:
                rdd.persist(self._storage_level)
            if self._is_checkpoint_time(time):
                rdd.checkpoint()
            self._generated[time] = rdd
            return rdd

    def _is_checkpoint_time(self, time: Time) -> bool:
        """Whether ``time`` ends one of this stream's checkpoint intervals (its RDD is checkpointed then)."""
        interval = self._checkpoint_interval
        if interval is None or self._zero_time is None:
            return False
        return (time.milliseconds - self._zero_time.milliseconds) % interval.milliseconds == 0

    def _compute(self, time: Time) -> RDD[Any] | None:
        raise NotImplementedError

    def _generate_job(self, time: Time) -> Job | None:
        """The job of an output stream for ``time`` (only output streams have one)."""
        raise NotImplementedError(f"{type(self).__name__} is not an output stream")

    def _clear_metadata(self, time: Time) -> None:
        # Runs on the event loop between batches, while a user thread may be slicing: never
        # block on the generation lock (the dict takes one step at a time).
        remember = self._remember_duration or self._slide
        dropped = self._generated.pop_through(time.milliseconds - remember.milliseconds)
        if dropped and self._storage_level is not None:
            # A state carried over is the same RDD under a later time: keep it cached then.
            kept = {id(rdd) for rdd in list(self._generated.values())}
            for _, rdd in dropped:
                if id(rdd) not in kept:
                    kept.add(id(rdd))  # once, even if it was under several dropped times
                    rdd.unpersist(blocking=False)
        for parent in self._parents:
            parent._clear_metadata(time)

    def _slice_times(self, begin: Time, end: Time) -> Iterator[Time]:
        """Grid times of this stream from ``begin`` to ``end`` inclusive, aligned down to the grid."""
        if self._zero_time is None:
            raise StreamingStateError(f"{self!r} has not been initialized")
        zero, slide = self._zero_time.milliseconds, self._slide.milliseconds
        first = begin.milliseconds - (begin.milliseconds - zero) % slide
        last = end.milliseconds - (end.milliseconds - zero) % slide
        for ms in range(max(first, zero), last + 1, slide):
            yield Time(ms)

    def _slice_rdds(self, begin: Time, end: Time) -> list[RDD[Any]]:
        """The RDDs of the grid times from ``begin`` to ``end``, computing missing ones."""
        rdds = []
        for t in self._slice_times(begin, end):
            rdd = self._get_or_compute(t)
            if rdd is not None:
                rdds.append(rdd)
        return rdds

    def _set_storage_level(self, level: StorageLevel) -> None:
        """Persist every RDD of this stream at ``level`` (a window persists its parent instead)."""
        if self._zero_time is not None:
            raise StreamingStateError("Cannot change storage level of a DStream after streaming context has started")
        self._storage_level = level

    # -- pyspark's public API: core --

    def context(self) -> StreamingContext:
        """The StreamingContext of this stream."""
        return self._ssc

    @property
    def _slideDuration(self) -> float:  # pyspark's private name, which some programs read
        """The slide duration in seconds, as pyspark exposes it."""
        return self._slide.milliseconds / 1000.0

    def transform(self, func: Callable[..., Any]) -> DStream:
        """A stream whose RDD per batch is ``func(rdd)`` or ``func(time, rdd)`` of this one's.

        ``time`` is the batch time as a local datetime. A falsy result (e.g. ``None``) means
        no RDD for that batch, as in pyspark. The function runs when the batch is generated.

        Raises:
            AssertionError: ``func`` takes neither one nor two arguments (pyspark's check).
        """
        n = _arity(func)
        if n == 1:
            one_arg = func

            def with_time(t: datetime, rdd: Any) -> Any:
                return one_arg(rdd)

            return TransformedDStream(self, with_time)
        if n != 2:
            raise AssertionError("func should take one or two arguments")
        return TransformedDStream(self, func)

    def transformWith(self, func: Callable[..., Any], other: DStream, keepSerializer: bool = False) -> DStream:  # noqa: N803
        """A stream whose RDD is ``func(rdd_a, rdd_b)`` or ``func(time, rdd_a, rdd_b)`` of two streams.

        A side without an RDD for the batch gets an empty RDD; ``func`` is always called.
        ``keepSerializer`` is accepted for compatibility and has no effect here (RDDs keep
        their own serializers).

        Raises:
            AssertionError: ``func`` takes neither two nor three arguments (pyspark's check).
        """
        n = _arity(func)
        if n == 2:
            two_args = func

            def with_time(t: datetime, a: Any, b: Any) -> Any:
                return two_args(a, b)

            return TransformedWithDStream(self, other, with_time)
        if n != 3:
            raise AssertionError("func should take two or three arguments")
        return TransformedWithDStream(self, other, func)

    def foreachRDD(self, func: Callable[..., Any]) -> None:
        """Apply ``func(rdd)`` or ``func(time, rdd)`` to every batch's RDD: an output operation.

        A coroutine function runs on the event loop (it must not block: send Spark calls to a
        worker thread); a plain one runs in a worker thread inside the batch's Spark job group.
        """
        if _arity(func) == 1:
            inner = func
            if inspect.iscoroutinefunction(inner):
                async def one_arg_async(t: Any, rdd: Any) -> Any:
                    return await inner(rdd)
                func = one_arg_async
            else:
                def one_arg(t: Any, rdd: Any) -> Any:
                    return inner(rdd)
                func = one_arg
        ForEachDStream(self, func).register()

    def pprint(self, num: int = 10) -> None:
        """Print the first ``num`` elements of each RDD, under pyspark's header, and ``...`` if there are more."""
        def take_and_print(time: Any, rdd: Any) -> None:
            taken = rdd.take(num + 1)
            print("-------------------------------------------")
            print(f"Time: {time}")
            print("-------------------------------------------")
            for record in taken[:num]:
                print(record)
            if len(taken) > num:
                print("...")
            print("")

        self.foreachRDD(take_and_print)

    def saveAsTextFiles(self, prefix: str, suffix: str | None = None) -> None:
        """Save each batch's RDD as text files under ``prefix-<batch ms>[.suffix]``: an output operation.

        A batch whose directory already holds a complete save (Hadoop's ``_SUCCESS`` marker) is
        skipped, as pyspark skips any existing directory, so that a replayed batch does not fail.
        A directory without the marker is what a crash in the middle of a save leaves: it is
        deleted and the batch saved again, so a replayed batch's output is whole (pyspark would
        keep the partial one).
        """
        def save(time: datetime, rdd: Any) -> None:
            from py4j.protocol import Py4JJavaError

            # The datetime round-trips to the batch's milliseconds: batch_datetime() made it.
            path = _file_name(prefix, suffix, Time(round(time.timestamp() * 1000)))
            try:
                rdd.saveAsTextFile(path)
            except Py4JJavaError as exc:
                if "FileAlreadyExistsException" not in str(exc):
                    raise
                if _remove_incomplete_save(rdd.context, path):
                    rdd.saveAsTextFile(path)

        self.foreachRDD(save)

    # -- element-wise transformations --

    def mapPartitionsWithIndex(self, f: Callable[[int, Iterable[Any]], Iterable[Any]],
                               preservesPartitioning: bool = False) -> DStream:  # noqa: N803
        """Apply ``f(partition_index, iterator)`` to each partition of each RDD."""
        return self.transform(lambda rdd: rdd.mapPartitionsWithIndex(f, preservesPartitioning))

    def mapPartitions(self, f: Callable[[Iterable[Any]], Iterable[Any]], preservesPartitioning: bool = False) -> DStream:  # noqa: N803
        """Apply ``f(iterator)`` to each partition of each RDD."""
        def per_partition(_: int, iterator: Iterable[Any]) -> Iterable[Any]:
            return f(iterator)
        return self.mapPartitionsWithIndex(per_partition, preservesPartitioning)

    def map(self, f: Callable[[Any], Any], preservesPartitioning: bool = False) -> DStream:  # noqa: N803
        """Apply ``f`` to each element."""
        def per_partition(iterator: Iterable[Any]) -> Iterable[Any]:
            return map(f, iterator)
        return self.mapPartitions(per_partition, preservesPartitioning)

    def flatMap(self, f: Callable[[Any], Iterable[Any]], preservesPartitioning: bool = False) -> DStream:  # noqa: N803
        """Apply ``f`` to each element and flatten the results."""
        def per_partition(_: int, iterator: Iterable[Any]) -> Iterable[Any]:
            return chain.from_iterable(map(f, iterator))
        return self.mapPartitionsWithIndex(per_partition, preservesPartitioning)

    def filter(self, f: Callable[[Any], bool]) -> DStream:
        """Keep the elements for which ``f`` is true."""
        def per_partition(iterator: Iterable[Any]) -> Iterable[Any]:
            return filter(f, iterator)
        return self.mapPartitions(per_partition, True)

    def glom(self) -> DStream:
        """Turn each partition into one list of its elements."""
        def as_list(iterator: Iterable[Any]) -> Iterator[list[Any]]:
            yield list(iterator)
        return self.mapPartitions(as_list)

    def mapValues(self, f: Callable[[Any], Any]) -> DStream:
        """Apply ``f`` to the value of each ``(key, value)`` pair, keeping the key and the partitioning."""
        def on_value(kv: tuple[Any, Any]) -> tuple[Any, Any]:
            return kv[0], f(kv[1])
        return self.map(on_value, preservesPartitioning=True)

    def flatMapValues(self, f: Callable[[Any], Iterable[Any]]) -> DStream:
        """Apply ``f`` to each value and pair every result with the key, keeping the partitioning."""
        def on_value(kv: tuple[Any, Any]) -> Iterable[tuple[Any, Any]]:
            key = kv[0]
            return ((key, v) for v in f(kv[1]))
        return self.flatMap(on_value, preservesPartitioning=True)

    def repartition(self, numPartitions: int) -> DStream:  # noqa: N803
        """Reshuffle each RDD into ``numPartitions`` partitions."""
        return self.transform(lambda rdd: rdd.repartition(numPartitions))

    # -- per-batch aggregations --

    def _default_partitions(self, numPartitions: int | None) -> int:  # noqa: N803
        return self._ssc._settings().default_parallelism if numPartitions is None else numPartitions

    def reduce(self, func: Callable[[Any, Any], Any]) -> DStream:
        """One element per batch: the RDD's elements reduced with ``func`` (nothing for an empty batch)."""
        return self.map(lambda x: (None, x)).reduceByKey(func, 1).map(lambda kv: kv[1])

    def count(self) -> DStream:
        """One element per batch: the number of elements.

        As in pyspark, an RDD without partitions (e.g. an empty window) yields no element, not 0.
        """
        return self.mapPartitions(lambda it: [sum(1 for _ in it)]).reduce(operator.add)

    def countByValue(self) -> DStream:
        """``(value, count)`` for each distinct element of each batch."""
        return self.map(lambda x: (x, 1)).reduceByKey(lambda a, b: a + b)

    def reduceByKey(self, func: Callable[[Any, Any], Any], numPartitions: int | None = None) -> DStream:  # noqa: N803
        """Merge the values of each key with ``func``, into ``numPartitions`` (default: Spark's parallelism)."""
        n = self._default_partitions(numPartitions)
        return self.combineByKey(lambda v: v, func, func, n)

    def combineByKey(self, createCombiner: Callable[[Any], Any], mergeValue: Callable[[Any, Any], Any],  # noqa: N803
                     mergeCombiners: Callable[[Any, Any], Any], numPartitions: int | None = None) -> DStream:  # noqa: N803
        """``rdd.combineByKey`` on each batch (default partitions: Spark's parallelism)."""
        n = self._default_partitions(numPartitions)
        return self.transform(lambda rdd: rdd.combineByKey(createCombiner, mergeValue, mergeCombiners, n))

    def partitionBy(self, numPartitions: int, partitionFunc: Callable[[Any], int] | None = None) -> DStream:  # noqa: N803
        """Hash-partition each batch's pairs into ``numPartitions`` with ``partitionFunc`` (default pyspark's ``portable_hash``)."""
        by = partitionFunc
        if by is None:
            from pyspark.rdd import portable_hash

            by = portable_hash
        return self.transform(lambda rdd: rdd.partitionBy(numPartitions, by))

    def groupByKey(self, numPartitions: int | None = None) -> DStream:  # noqa: N803
        """``(key, iterable of values)`` per key of each batch."""
        n = self._default_partitions(numPartitions)
        return self.transform(lambda rdd: rdd.groupByKey(n))

    # -- two-stream operations (a missing side is an empty RDD) --

    def union(self, other: DStream) -> DStream:
        """The elements of both streams, this stream's first.

        Raises:
            InvalidPipelineError: the streams have different slide durations (a ValueError, as in pyspark).
        """
        if self._slide != other._slide:
            raise InvalidPipelineError("the two DStream should have same slide duration")
        return self.transformWith(lambda a, b: a.union(b), other, True)

    def cogroup(self, other: DStream, numPartitions: int | None = None) -> DStream:  # noqa: N803
        """``(key, (values here, values there))`` for every key of either stream, per batch."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.cogroup(b, n), other)

    def join(self, other: DStream, numPartitions: int | None = None) -> DStream:  # noqa: N803
        """``(key, (v, w))`` for each pair of values of a key present in both streams, per batch."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.join(b, n), other)

    def leftOuterJoin(self, other: DStream, numPartitions: int | None = None) -> DStream:  # noqa: N803
        """Like :meth:`join`, keeping this stream's keys missing from ``other`` as ``(key, (v, None))``."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.leftOuterJoin(b, n), other)

    def rightOuterJoin(self, other: DStream, numPartitions: int | None = None) -> DStream:  # noqa: N803
        """Like :meth:`join`, keeping ``other``'s keys missing here as ``(key, (None, w))``."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.rightOuterJoin(b, n), other)

    def fullOuterJoin(self, other: DStream, numPartitions: int | None = None) -> DStream:  # noqa: N803
        """Like :meth:`join`, keeping the keys of either side, with None for the missing value."""
        n = self._default_partitions(numPartitions)
        return self.transformWith(lambda a, b: a.fullOuterJoin(b, n), other)

    # -- persistence and checkpointing --

    def cache(self) -> DStream:
        """Persist every RDD of this stream in memory (pyspark's ``MEMORY_ONLY``)."""
        self.is_cached = True
        self.persist(_memory_only())
        return self

    def persist(self, storageLevel: StorageLevel) -> DStream:  # noqa: N803
        """Persist every RDD of this stream at ``storageLevel``; only before the context starts.

        Raises:
            StreamingStateError: the context has started (Spark's message).
        """
        self.is_cached = True
        self._set_storage_level(storageLevel)
        return self

    def checkpoint(self, interval: float) -> DStream:
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
        self._set_storage_level(_memory_only())
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
        return self._slice_rdds(Time(_time_to_ms(begin)), Time(_time_to_ms(end)))

    def window(self, windowDuration: float, slideDuration: float | None = None) -> DStream:  # noqa: N803
        """A stream of the union of this stream's RDDs over the last ``windowDuration`` seconds.

        It produces an RDD every ``slideDuration`` seconds (default: this stream's slide);
        both must be multiples of this stream's slide.

        Raises:
            InvalidDurationError: a duration is not a multiple of this stream's slide (pyspark's ValueError message).
        """
        from ._windowed import WindowedDStream, validate_window

        window, slide = validate_window(self, windowDuration, slideDuration)
        return WindowedDStream(self, window, slide or self._slide)

    def reduceByKeyAndWindow(
        self,
        func: Callable[[Any, Any], Any],
        invFunc: Callable[[Any, Any], Any] | None,  # noqa: N803
        windowDuration: float,  # noqa: N803
        slideDuration: float | None = None,  # noqa: N803
        numPartitions: int | None = None,  # noqa: N803
        filterFunc: Callable[[tuple[Any, Any]], bool] | None = None,  # noqa: N803
    ) -> DStream:
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
        from ._windowed import ReducedWindowedDStream, validate_window

        window, slide = validate_window(self, windowDuration, slideDuration)
        n = self._default_partitions(numPartitions)
        reduced = self.reduceByKey(func, n)
        if invFunc:
            return ReducedWindowedDStream(reduced, func, invFunc, n, filterFunc, window, slide or self._slide)
        return reduced.window(windowDuration, slideDuration).reduceByKey(func, n)

    def reduceByWindow(self, reduceFunc: Callable[[Any, Any], Any], invReduceFunc: Callable[[Any, Any], Any] | None,  # noqa: N803
                       windowDuration: float, slideDuration: float) -> DStream:  # noqa: N803
        """One element per window: all its elements reduced (incrementally with ``invReduceFunc``)."""
        keyed = self.map(lambda x: (1, x))
        reduced = keyed.reduceByKeyAndWindow(reduceFunc, invReduceFunc, windowDuration, slideDuration, 1)
        return reduced.map(lambda kv: kv[1])

    def countByWindow(self, windowDuration: float, slideDuration: float) -> DStream:  # noqa: N803
        """One element per window: its number of elements (incremental, so it needs a checkpoint directory)."""
        return self.map(lambda x: 1).reduceByWindow(operator.add, operator.sub, windowDuration, slideDuration)

    def countByValueAndWindow(self, windowDuration: float, slideDuration: float,  # noqa: N803
                              numPartitions: int | None = None) -> DStream:  # noqa: N803
        """``(value, count)`` of each distinct element over a sliding window (needs a checkpoint directory)."""
        keyed = self.map(lambda x: (x, 1))
        counted = keyed.reduceByKeyAndWindow(operator.add, operator.sub, windowDuration, slideDuration, numPartitions)
        return counted.filter(lambda kv: kv[1] > 0)

    def groupByKeyAndWindow(self, windowDuration: float, slideDuration: float,  # noqa: N803
                            numPartitions: int | None = None) -> DStream:  # noqa: N803
        """``(key, iterable of values)`` per key over a sliding window (needs a checkpoint directory)."""
        from pyspark.resultiterable import ResultIterable

        def concat(acc: list[Any], more: list[Any]) -> list[Any]:
            acc.extend(more)
            return acc

        def drop_front(acc: list[Any], leaving: list[Any]) -> list[Any]:
            return acc[len(leaving):]

        as_lists = self.mapValues(lambda v: [v])
        grouped = as_lists.reduceByKeyAndWindow(concat, drop_front, windowDuration, slideDuration, numPartitions)
        return grouped.mapValues(ResultIterable)

    # -- state --

    def updateStateByKey(self, updateFunc: Callable[[list[Any], Any], Any], numPartitions: int | None = None,  # noqa: N803
                         initialRDD: RDD[Any] | Iterable[Any] | None = None) -> DStream:  # noqa: N803
        """A stream of per-key state: ``updateFunc(new_values, last_state_or_None)`` for every key with state or new values.

        A ``None`` result drops the key. In a batch where this stream has no RDD the state is
        carried over without calling ``updateFunc`` (pyspark's behaviour). ``initialRDD``
        (an RDD or a list of pairs) seeds the state. The stream must checkpoint, so the
        context needs a checkpoint directory.
        """
        from pyspark import RDD

        from ._state import StateDStream

        n = self._default_partitions(numPartitions)
        initial: RDD[Any] | None = None
        if initialRDD:
            initial = initialRDD if isinstance(initialRDD, RDD) else self._ssc.sparkContext.parallelize(initialRDD)
        return StateDStream(self, updateFunc, n, initial)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} [slide {self._slide} | {len(self._generated)} RDDs remembered]>"


class TransformedDStream(DStream):
    """``func(time, rdd)`` applied to the parent's RDD of each batch (pyspark's ``TransformedDStream``).

    As in pyspark, a chain of these is fused into one function over the first parent unless
    the intermediate stream is cached or checkpointed: the intermediate stream's function is
    then called once per derived stream, not once per batch.
    """

    def __init__(self, prev: DStream, func: Callable[[datetime, Any], Any]) -> None:
        """Derive a stream from ``prev`` through ``func(time, rdd)``."""
        if type(prev) is TransformedDStream and not prev.is_cached and not prev.is_checkpointed:
            first, second = prev._func, func

            def fused(t: datetime, rdd: Any) -> Any:
                return second(t, first(t, rdd))

            func, prev = fused, prev._parents[0]
        super().__init__(prev._ssc, [prev])
        self._func: Callable[[datetime, Any], Any] = func

    def _compute(self, time: Time) -> RDD[Any] | None:
        rdd = self._parents[0]._get_or_compute(time)
        if rdd is None:
            return None
        result = self._func(batch_datetime(time), rdd)
        return result if result else None


def _check_same_context_and_slide(streams: Sequence[DStream], what: str) -> None:
    """Spark's requirements on the parents of a union or a multi-stream transform."""
    if not streams:
        raise InvalidPipelineError(f"requirement failed: List of DStreams to {what} is empty")
    if len({id(s._ssc) for s in streams}) > 1:
        raise InvalidPipelineError("requirement failed: Some of the DStreams have different contexts")
    if len({s._slide for s in streams}) > 1:
        raise InvalidPipelineError("requirement failed: Some of the DStreams have different slide durations")


class TransformedWithDStream(DStream):
    """``func(time, rdd_a, rdd_b)`` over two streams (pyspark's ``transformWith``, Spark's ``PythonTransformed2DStream``).

    A side without an RDD for the batch is replaced by an empty RDD, and ``func`` is always
    called; the slide is the first stream's.
    """

    def __init__(self, first: DStream, second: DStream, func: Callable[[datetime, Any, Any], Any]) -> None:
        """Combine ``first`` and ``second`` through ``func``."""
        super().__init__(first._ssc, [first, second])
        self._func = func

    def _compute(self, time: Time) -> RDD[Any] | None:
        first, second = self._parents
        a = first._get_or_compute(time)
        b = second._get_or_compute(time)
        if a is None or b is None:
            empty = self._ssc.sparkContext.emptyRDD()
            a = empty if a is None else a
            b = empty if b is None else b
        result = self._func(batch_datetime(time), a, b)
        return result if result else None


class UnionDStream(DStream):
    """The union of several streams' RDDs (Spark's ``UnionDStream``, ``ssc.union``)."""

    def __init__(self, parents: Sequence[DStream]) -> None:
        """Unite ``parents``, which share a context and a slide."""
        _check_same_context_and_slide(parents, "union")
        super().__init__(parents[0]._ssc, parents)

    def _compute(self, time: Time) -> RDD[Any] | None:
        rdds = []
        for parent in self._parents:
            rdd = parent._get_or_compute(time)
            if rdd is None:
                raise StreamingStateError(f"Could not generate RDD from a parent for unifying at time {time}")
            rdds.append(rdd)
        return _union(self._ssc, rdds)


class MultiTransformedDStream(DStream):
    """``func(rdds)`` over several streams (Spark's ``TransformedDStream``, ``ssc.transform``).

    ``func`` gets a tuple of the parents' RDDs, in the parents' order; every parent must have
    an RDD for the batch, and ``func`` must return one.
    """

    def __init__(self, parents: Sequence[DStream], func: Callable[[Sequence[Any]], Any]) -> None:
        """Transform ``parents``, which share a context and a slide, through ``func``."""
        _check_same_context_and_slide(parents, "transform")
        super().__init__(parents[0]._ssc, parents)
        self._func = func

    def _compute(self, time: Time) -> RDD[Any] | None:
        rdds = []
        for parent in self._parents:
            rdd = parent._get_or_compute(time)
            if rdd is None:
                raise StreamingStateError(f"Couldn't generate RDD from parent at time {time}")
            rdds.append(rdd)
        result = self._func(tuple(rdds))
        if not result:
            raise InvalidPipelineError(
                "Transform function must not return null. Return SparkContext.emptyRDD() instead to represent no element "
                "as the result of transformation."
            )
        return result  # type: ignore[no-any-return]


class ForEachDStream(DStream):
    """An output operation: one job per batch running ``func(time, rdd)`` on the parent's RDD."""

    def __init__(self, parent: DStream, func: Callable[[Any, Any], Any]) -> None:
        """Wrap ``func`` as an output operation on ``parent``."""
        super().__init__(parent._ssc, [parent])
        self._func = func
        self._is_async = inspect.iscoroutinefunction(func)
        frame = _user_frame()
        self._name = f"foreachRDD at {frame}"

    def register(self) -> None:
        """Add this stream to the graph's output streams."""
        self._ssc._graph.add_output_stream(self)

    def _compute(self, time: Time) -> RDD[Any] | None:
        return None  # an output stream produces jobs, not RDDs

    def _generate_job(self, time: Time) -> Job | None:
        rdd = self._parents[0]._get_or_compute(time)
        if rdd is None:
            return None
        ssc = self._ssc
        func = self._func
        group = f"aiodstream-{ssc._context_id}-{time.milliseconds}-{id(self)}"
        holder: list[Job] = []

        if self._is_async:
            async def run_async() -> None:
                # Spark calls made through run_spark() join the batch's job group.
                job = BatchJob(ssc.sparkContext, group, job_description(time, holder[0].output_op_id), ssc._job_threads())
                token = current_batch_job.set(job)
                try:
                    await func(batch_datetime(time), rdd)
                finally:
                    current_batch_job.reset(token)
            job = Job(time, run_async, name=self._name, description=self._name, is_async=True,
                      cancel=lambda: ssc._cancel_job_group(group))
        else:
            async def run() -> None:
                # The function runs on a job thread, which the event loop waits for without a
                # worker thread in between. Only the job group and its description are set (before
                # the function's first py4j call): Spark's internal batchTime/outputOpId properties
                # feed the JVM Streaming tab, which this runtime does not have.
                future = ssc._job_threads().submit(ssc.sparkContext, group, job_description(time, holder[0].output_op_id),
                                                   func, batch_datetime(time), rdd)
                await wait_for_thread(future, abandon_on_cancel=True)
            job = Job(time, run, name=self._name, description=self._name, is_async=True,
                      cancel=lambda: ssc._cancel_job_group(group))
        holder.append(job)
        return job


def _user_frame() -> str:
    """``file:line`` of the first caller outside this package (Spark's call site short form)."""
    frame = user_frame()
    return "?" if frame is None else f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
