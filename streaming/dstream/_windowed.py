"""Windowed streams: a sliding window over a parent, plain or reduced by key incrementally.

Spark's ``WindowedDStream`` and pyspark's ``PythonReducedWindowedDStream`` (behind
``reduceByKeyAndWindow`` with an inverse function), as graph nodes (``DStream`` adds pyspark's API).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from scheduler import Duration, InvalidDurationError, InvalidPipelineError, Time

from ..spark import seconds_to_duration
from ._node import StreamNode, memory_only, union_rdds

if TYPE_CHECKING:
    from pyspark import RDD, StorageLevel

__all__ = ["INCREMENTAL_MIN_SLIDES", "ReducedWindowedNode", "WindowedNode", "concat_lists", "drop_front", "validate_window"]

INCREMENTAL_MIN_SLIDES = 5
"""pyspark reduces a window incrementally only when it spans at least this many slides."""


def validate_window(parent: StreamNode, window: float, slide: float | None) -> tuple[Duration, Duration | None]:
    """pyspark's window argument checks: both durations are multiples of ``parent``'s slide.

    Returns the window and the slide (None when not given). A slide of 0 is refused: pyspark passes it to the JVM,
    and every batch then fails dividing by it.

    Raises:
        InvalidDurationError: with pyspark's ValueError message.
    """
    parent_ms = parent.slide.milliseconds
    window_d = seconds_to_duration(window, "windowDuration")
    if window_d.milliseconds % parent_ms:
        raise InvalidDurationError(f"windowDuration must be multiple of the parent dstream's slide (batch) duration ({parent_ms} ms)")
    if slide is None:
        return window_d, None
    slide_d = seconds_to_duration(slide, "slideDuration")
    if slide_d.milliseconds % parent_ms:
        raise InvalidDurationError(f"slideDuration must be multiple of the parent dstream's slide (batch) duration ({parent_ms} ms)")
    return window_d, slide_d


def concat_lists(acc: list[Any], more: list[Any]) -> list[Any]:
    """``groupByKeyAndWindow``'s reduction: the values of the batches entering the window appended."""
    acc.extend(more)
    return acc


def drop_front(acc: list[Any], leaving: list[Any]) -> list[Any]:
    """``groupByKeyAndWindow``'s inverse reduction: the values of the batches leaving the window dropped from the front."""
    return acc[len(leaving):]


class WindowedNode(StreamNode):
    """The union of the parent's RDDs in ``(t - window, t]``, every ``slide`` (Spark's ``WindowedDStream``).

    Early windows are partial (there are no batches before the first); once the input dries
    up, windows keep sliding over its empty batches. The parent is persisted, since each of
    its RDDs is read by several windows; persisting this stream persists the parent instead,
    as in Spark.
    """

    def __init__(self, parent: StreamNode, window: Duration, slide: Duration) -> None:
        """Window ``parent``; both durations must be multiples of the parent's slide."""
        if not window.is_multiple_of(parent.slide):
            raise InvalidPipelineError(
                f"The window duration of windowed DStream ({window}) must be a multiple of the slide duration of parent "
                f"DStream ({parent.slide})"
            )
        if not slide.is_multiple_of(parent.slide):
            raise InvalidPipelineError(
                f"The slide duration of windowed DStream ({slide}) must be a multiple of the slide duration of parent "
                f"DStream ({parent.slide})"
            )
        super().__init__(parent.env, [parent], slide)
        self._window = window
        parent._set_storage_level(memory_only())

    def _set_storage_level(self, level: StorageLevel) -> None:
        self._parents[0]._set_storage_level(level)

    def _parent_remember_duration(self) -> Duration | None:
        remember = self._remember_duration
        return None if remember is None else remember + self._window

    def state_reach(self) -> Duration:
        """The graph's hook (not for users): the window, which the state reaches back over."""
        return self._window

    @property
    def window_length(self) -> Duration:
        """The graph's hook (not for users): the window's duration (``window`` is pyspark's method)."""
        return self._window

    def _compute(self, time: Time) -> RDD[Any] | None:
        parent = self._parents[0]
        begin = time.minus(self._window) + parent.slide
        return union_rdds(self._env, parent.slice_rdds(begin, time))


class ReducedWindowedNode(StreamNode):
    """Per-key reduction over a sliding window, with an inverse function (pyspark's ``PythonReducedWindowedDStream``).

    The parent is already reduced by key per batch. When the window spans at least
    :data:`INCREMENTAL_MIN_SLIDES` slides and the previous window's RDD exists, the new
    window is the previous one minus the batches that left (through ``inv_func``) plus the
    batches that entered (through ``func``); otherwise it is reduced from scratch (and, as in
    Spark, always in a graph getOrCreate restored: its inverse is not saved), and a window
    with no parent RDD at all has no RDD. ``filter_func`` applies to every result of
    a ``func`` step. The stream persists its RDDs and must checkpoint them, which keeps the
    lineage of the incremental chain short.
    """

    def __init__(
        self,
        reduced: StreamNode,
        func: Callable[[Any, Any], Any],
        inv_func: Callable[[Any, Any], Any],
        num_partitions: int,
        filter_func: Callable[[tuple[Any, Any]], bool] | None,
        window: Duration,
        slide: Duration,
    ) -> None:
        """Window ``reduced`` (a per-batch ``reduceByKey(func)``) over ``window``, every ``slide``."""
        super().__init__(reduced.env, [reduced], slide)
        self._window = window
        self._func = func
        self._inv_func = inv_func
        self._num_partitions = num_partitions
        self._filter_func = filter_func
        self._storage_level = memory_only()
        self._must_checkpoint = True

    def _parent_remember_duration(self) -> Duration | None:
        remember = self._remember_duration
        return None if remember is None else remember + self._window

    @property
    def window_length(self) -> Duration:
        """The graph's hook (not for users): the window's duration (each RDD reduces the parent's of ``(t - window, t]``)."""
        return self._window

    def state_reach(self) -> Duration:
        """The graph's hook (not for users): the window, which the state reaches back over."""
        return self._window

    # The two steps build RDDs on the driver; the lambdas they ship to executors capture
    # plain values only (never self, which holds the context).

    def _reduce_in(self, window_so_far: RDD[Any] | None, entering: RDD[Any]) -> RDD[Any]:
        func, n, keep = self._func, self._num_partitions, self._filter_func
        reduced = entering.reduceByKey(func, n)
        if window_so_far is not None:
            reduced = window_so_far.union(reduced).reduceByKey(func, n)
        return reduced.filter(keep) if keep else reduced

    def _reduce_out(self, window_so_far: RDD[Any], leaving: RDD[Any]) -> RDD[Any]:
        func, inv, n = self._func, self._inv_func, self._num_partitions

        def subtract(pair: tuple[Any, Any]) -> Any:
            current, gone = pair
            return current if gone is None else inv(current, gone)

        return window_so_far.leftOuterJoin(leaving.reduceByKey(func, n), n).mapValues(subtract)

    def _compute(self, time: Time) -> RDD[Any] | None:
        parent = self._parents[0]
        step = parent.slide
        # The current window is (time - window, time]; the previous one ends a slide earlier.
        current_begin = time.minus(self._window)
        previous_end = time.minus(self._slide)
        previous = self._get_or_compute(previous_end)
        # Spark's inverse is a transient field: after getOrCreate restored the graph it is null, and every window of the run
        # is reduced from scratch (so keys the inverse brought to zero leave it).
        incremental = (previous is not None and not self._env.graph.restored_from_checkpoint
                       and self._window.milliseconds >= INCREMENTAL_MIN_SLIDES * self._slide.milliseconds)
        if not incremental:
            rdds = parent.slice_rdds(current_begin + step, time)
            if not rdds:
                return None
            return self._reduce_in(None, union_rdds(self._env, rdds))
        assert previous is not None
        previous_begin = previous_end.minus(self._window)
        leaving = parent.slice_rdds(previous_begin + step, current_begin)
        window = self._reduce_out(previous, union_rdds(self._env, leaving)) if leaving else previous
        entering = parent.slice_rdds(previous_end + step, time)
        return self._reduce_in(window, union_rdds(self._env, entering)) if entering else window
