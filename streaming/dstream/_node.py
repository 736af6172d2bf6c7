"""StreamNode: the per-batch RDD machinery of every stream (Spark's ``DStream`` internals).

Each stream computes the RDD of a batch time at most once and remembers it for its remember
window; output streams turn their RDD into a Job per batch. The graph drives these hooks;
pyspark's public API is put on top by ``DStream``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from scheduler import Duration, InvalidPipelineError, Job, StreamingStateError, Time, TimeOrderedDict, library_logger

from ..spark import checkpoint_rdd
from ._checkpoint_files import CheckpointFiles
from ._environment import StreamEnvironment

if TYPE_CHECKING:
    from pyspark import RDD, StorageLevel  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["StreamNode", "memory_only", "union_rdds"]

_log = library_logger("aiodstream.streaming", component="DStream")


def memory_only() -> StorageLevel:
    """pyspark's ``StorageLevel.MEMORY_ONLY`` (imports pyspark)."""
    from pyspark import StorageLevel

    return StorageLevel.MEMORY_ONLY


def union_rdds(env: StreamEnvironment, rdds: Sequence[RDD[Any]]) -> RDD[Any]:
    """Spark's ``sc.union(rdds)``, which is an empty RDD for no RDDs (pyspark's would fail)."""
    sc = env.spark_context
    if not rdds:
        return sc.emptyRDD()
    return sc.union(list(rdds))


class StreamNode:
    """A stream of RDDs on the batch grid, as the graph sees it: no pyspark API yet.

    Subclasses say how a batch's RDD is made (:meth:`_compute`) and, for output streams, how
    it becomes a job (:meth:`generate_job`). The members documented as "the graph's hook" are
    what ``DStreamGraph`` and ``StateSnapshots`` drive; they are not part of pyspark's API.

    Attributes:
        is_cached: True once the stream was cached or persisted.
        is_checkpointed: True once the stream was marked for checkpointing.
    """

    def __init__(self, env: StreamEnvironment, parents: Sequence[StreamNode] = (), slide: Duration | None = None) -> None:
        """Create a stream of ``env``'s context derived from ``parents`` (none for an input stream).

        Raises:
            StreamingStateError: the context was already started or stopped.
        """
        env.check_can_add()
        self._env = env
        self._parents: tuple[StreamNode, ...] = tuple(parents)
        self._slide: Duration = slide or (parents[0].slide if parents else env.batch_duration)
        # Only RDDs are remembered: like Spark, a batch without an RDD is asked again next time.
        self._generated: TimeOrderedDict[RDD[Any]] = TimeOrderedDict()
        self._zero_time: Time | None = None
        self._remember_duration: Duration | None = None
        self._storage_level: StorageLevel | None = None
        self._checkpoint_interval: Duration | None = None
        self._must_checkpoint = False
        self._checkpoint_files: CheckpointFiles | None = None  # made when an RDD is first marked for checkpointing
        self._lock = env.graph.generation_lock
        self.is_cached = False
        self.is_checkpointed = False

    # -- what other nodes and the graph read: the node's public surface --

    @property
    def env(self) -> StreamEnvironment:
        """The services of the stream's context (graph, Spark binding, clock, ...)."""
        return self._env

    @property
    def parents(self) -> tuple[StreamNode, ...]:
        """The streams this one derives from, in order (none for an input stream)."""
        return self._parents

    @property
    def slide(self) -> Duration:
        """How often the stream produces an RDD (Spark's ``slideDuration``): the batch interval, or a window's slide."""
        return self._slide

    def get_or_compute(self, time: Time) -> RDD[Any] | None:
        """The RDD of ``time``: remembered, else computed now (at most once), or None.

        Raises:
            StreamingStateError: the stream is not part of a started context.
        """
        return self._get_or_compute(time)

    def slice_rdds(self, begin: Time, end: Time) -> list[RDD[Any]]:
        """The RDDs of the grid times from ``begin`` to ``end`` (both included), computing missing ones.

        Raises:
            StreamingStateError: the stream is not part of a started context.
        """
        rdds = []
        for t in self._slice_times(begin, end):
            rdd = self._get_or_compute(t)
            if rdd is not None:
                rdds.append(rdd)
        return rdds

    # -- the graph's hooks (driven by DStreamGraph and StateSnapshots; not for users) --

    @property
    def must_checkpoint(self) -> bool:
        """The graph's hook (not for users): whether the stream carries state and so checkpoints it."""
        return self._must_checkpoint

    @property
    def storage_level(self) -> StorageLevel | None:
        """The graph's hook (not for users): the level each RDD is persisted at, or None."""
        return self._storage_level

    @property
    def checkpoint_interval(self) -> Duration | None:
        """The graph's hook (not for users): how often an RDD is checkpointed, or None."""
        return self._checkpoint_interval

    @property
    def remember_duration(self) -> Duration | None:
        """The graph's hook (not for users): how long RDDs are remembered (None before start: a slide)."""
        return self._remember_duration

    @property
    def generated(self) -> Mapping[Time, RDD[Any]]:
        """The graph's hook (not for users): the remembered RDDs by batch time, read-only."""
        return MappingProxyType(self._generated)

    def restore_rdd(self, time: Time, rdd: RDD[Any]) -> None:
        """The graph's hook (not for users): remember a restored state ``rdd`` as ``time``'s, persisted at the storage level."""
        if self._storage_level is not None:
            rdd.persist(self._storage_level)
        if self._checkpoint_interval is not None:  # on Spark Connect it is marked, and saved on first use
            self._mark_checkpoint(time, rdd)
        self._generated[time] = rdd

    def initialize(self, zero_time: Time) -> None:
        """The graph's hook (not for users): set the zero time, the checkpoint interval and the remember duration, then the parents'."""
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
            parent.initialize(zero_time)

    def remember(self, duration: Duration | None) -> None:
        """The graph's hook (not for users): remember RDDs for at least ``duration``, and the parents as long as needed."""
        if duration is not None and (self._remember_duration is None or duration > self._remember_duration):
            self._remember_duration = duration
        for parent in self._parents:
            parent.remember(self._parent_remember_duration())

    def state_reach(self) -> Duration:
        """The graph's hook (not for users): how far back from a state snapshot the state reaches (windows: their length)."""
        return Duration(0)

    def _parent_remember_duration(self) -> Duration | None:
        """How long parents must remember their RDDs for this stream (windows add their length)."""
        return self._remember_duration

    def validate_at_start(self) -> None:
        """The graph's hook (not for users): Spark's ``validateAtStart`` checks, in Spark's order and words, then the parents'."""
        name = type(self).__name__
        interval = self._checkpoint_interval
        if interval is not None:
            if self._env.spark_checkpoint_dir is None:  # read by the start, off the event loop
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
            parent.validate_at_start()

    def is_time_valid(self, time: Time) -> bool:
        """The graph's hook (not for users): whether ``time`` is on this stream's grid (after its zero time, a slide apart)."""
        return self._is_time_valid(time)

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
            if self.is_checkpoint_time(time):
                directory = self._env.spark_checkpoint_dir
                if self._env.spark.kind == "classic" and directory is not None:
                    checkpoint_rdd(rdd, directory)  # the context's own directory: Spark has one per SparkContext
                else:
                    rdd.checkpoint()
                self._mark_checkpoint(time, rdd)
            self._generated[time] = rdd
            return rdd

    def _mark_checkpoint(self, time: Time, rdd: RDD[Any]) -> None:
        files = self._checkpoint_files
        if files is None:
            files = self._checkpoint_files = CheckpointFiles(lambda: self._env.spark_context)
        files.mark(time.milliseconds, rdd)

    def is_checkpoint_time(self, time: Time) -> bool:
        """The graph's hook (not for users): whether ``time`` ends a checkpoint interval (its RDD is checkpointed then)."""
        interval = self._checkpoint_interval
        if interval is None or self._zero_time is None:
            return False
        return (time.milliseconds - self._zero_time.milliseconds) % interval.milliseconds == 0

    def _compute(self, time: Time) -> RDD[Any] | None:
        raise NotImplementedError

    def generates_on_loop(self, time: Time) -> bool:
        """The graph's hook (not for users): whether this stream's RDD of ``time`` (an output stream's: its job) is had
        without a py4j call and ready for a job (its JVM RDD made), so that the event loop may generate it.

        Default: not known, so no (the graph generates on its thread). A stream type says yes only
        where it can tell, before computing, that nothing it would do calls Spark.
        """
        return False

    def generate_job(self, time: Time) -> Job | None:
        """The graph's hook (not for users): the job of an output stream for ``time`` (only output streams have one)."""
        raise NotImplementedError(f"{type(self).__name__} is not an output stream")

    def clear_metadata(self, time: Time) -> None:
        """The graph's hook (not for users): forget RDDs older than the remember duration, then the parents'."""
        # Runs on the event loop between batches, while a user thread may be slicing: never
        # block on the generation lock (the dict takes one step at a time).
        remember = self._remember_duration or self._slide
        forget_ms = time.milliseconds - remember.milliseconds
        dropped = self._generated.pop_through(forget_ms)
        if dropped and self._checkpoint_files is not None and self._zero_time is not None:
            slide, zero = self._slide.milliseconds, self._zero_time.milliseconds
            oldest_remembered = forget_ms + slide - (forget_ms - zero) % slide  # the first grid time after forget_ms
            self._env.graph.releases.clean_later(self._checkpoint_files, oldest_remembered)
        if dropped and self._storage_level is not None:
            # A state carried over is the same RDD under a later time: keep it cached then.
            kept = {id(rdd) for rdd in list(self._generated.values())}
            for _, rdd in dropped:
                if id(rdd) not in kept:
                    kept.add(id(rdd))  # once, even if it was under several dropped times
                    self._env.graph.unpersist_later(rdd)  # a py4j call: not here, on the loop
        for parent in self._parents:
            parent.clear_metadata(time)

    def _slice_times(self, begin: Time, end: Time) -> Iterator[Time]:
        """Grid times of this stream from ``begin`` to ``end`` inclusive, aligned down to the grid."""
        if self._zero_time is None:
            raise StreamingStateError(f"{self!r} has not been initialized")
        zero, slide = self._zero_time.milliseconds, self._slide.milliseconds
        first = begin.milliseconds - (begin.milliseconds - zero) % slide
        last = end.milliseconds - (end.milliseconds - zero) % slide
        for ms in range(max(first, zero), last + 1, slide):
            yield Time(ms)

    def _set_storage_level(self, level: StorageLevel) -> None:
        """Persist every RDD of this stream at ``level`` (a window persists its parent instead)."""
        if self._zero_time is not None:
            raise StreamingStateError("Cannot change storage level of a DStream after streaming context has started")
        self._storage_level = level

    def __repr__(self) -> str:
        return f"<{type(self).__name__} [slide {self._slide} | {len(self._generated)} RDDs remembered]>"
