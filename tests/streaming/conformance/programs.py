"""A catalogue of small DStream programs for conformance testing.

Every program is a plain function ``prog_xxx(ssc, make_input, ...)`` that builds a
DStream graph with pyspark's public DStream API only, so the same function runs on
``pyspark.streaming.StreamingContext`` (the oracle) and on aiodstream's context.

* ``make_input(batches)`` returns an input DStream that yields one list per batch
  (a ``queueStream(..., oneAtATime=True)``); a harness may substitute other data.
* Results are recorded with :func:`collect`, which registers a ``foreachRDD`` and stores
  ``(batch_time_ms, value)`` into the active :class:`Sink` under an output name.
* Extra keyword-only parameters are requested by name and supplied by the harness:
  ``tmp_dir`` (a fresh empty directory; checkpoints and saved files go there) and
  ``batch_seconds`` (the batch interval, needed for window durations).

Programs must only run picklable code on workers: lambdas and nested functions that
do not reference helpers of this module (workers may not be able to import it).
"""

from __future__ import annotations

import inspect
import operator
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "PROGRAMS",
    "Batches",
    "DStreamLike",
    "MakeInput",
    "Order",
    "Program",
    "ProgramSpec",
    "Sink",
    "StreamingContextLike",
    "active_sink",
    "canonical_key",
    "collect",
    "combine",
    "plain",
    "rdd_checkpoint_dir",
    "recording",
    "seconds",
    "time_to_ms",
]

Batches = Sequence[Sequence[Any]]
"""Per-batch input data: ``batches[i]`` is the list of records of batch ``i``."""

DStreamLike = Any
"""A DStream of either engine (pyspark's or aiodstream's)."""

StreamingContextLike = Any
"""A StreamingContext of either engine."""

MakeInput = Callable[[Batches], DStreamLike]
Program = Callable[..., None]
Order = Literal["sorted", "raw"]


# ---------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------


class Sink:
    """Thread-safe store of recorded outputs: ``name -> [(batch_time_ms, value), ...]``.

    ``foreachRDD`` callbacks run on engine threads, so access is locked.  A sink pickles
    to a fresh empty sink: with checkpointing on, pyspark pickles every output function
    (and its closure) at ``start()``; the live callbacks keep the original object.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outputs: dict[str, list[tuple[int, Any]]] = {}
        self._closed = False
        self._prefix = ""

    def __reduce__(self) -> tuple[type[Sink], tuple[()]]:
        return (Sink, ())

    @contextmanager
    def namespace(self, prefix: str) -> Iterator[None]:
        """Prefix the names declared meanwhile with ``prefix`` (several programs share one run)."""
        saved, self._prefix = self._prefix, prefix
        try:
            yield
        finally:
            self._prefix = saved

    def declare(self, name: str) -> str:
        """Register an output name so it appears in results even if it never fires; return the name to record under."""
        name = self._prefix + name
        with self._lock:
            if name in self._outputs:
                raise ValueError(f"output name {name!r} registered twice")
            self._outputs[name] = []
        return name

    def record(self, name: str, time_ms: int, value: Any) -> None:
        """Append one batch's value for ``name`` (ignored once closed)."""
        with self._lock:
            if not self._closed:
                self._outputs.setdefault(name, []).append((time_ms, value))

    @property
    def closed(self) -> bool:
        """True once the harness has all the batches it wants."""
        return self._closed

    def close(self) -> None:
        """Stop recording; outputs of later batches then skip their collect job entirely."""
        with self._lock:
            self._closed = True

    def snapshot(self) -> dict[str, list[tuple[int, Any]]]:
        """Return a copy of everything recorded so far."""
        with self._lock:
            return {name: list(rows) for name, rows in self._outputs.items()}


_active_sink: Sink | None = None
_active_lock = threading.Lock()


def active_sink() -> Sink:
    """Return the sink installed by :func:`recording`; fail if there is none."""
    sink = _active_sink
    if sink is None:
        raise RuntimeError("collect() called outside recording(sink): run programs through a harness")
    return sink


@contextmanager
def recording(sink: Sink) -> Iterator[Sink]:
    """Install ``sink`` as the target of :func:`collect` while a program registers its outputs."""
    global _active_sink
    with _active_lock:
        if _active_sink is not None:
            raise RuntimeError("another program is already registering outputs")
        _active_sink = sink
    try:
        yield sink
    finally:
        with _active_lock:
            _active_sink = None


def time_to_ms(t: datetime) -> int:
    """Convert the naive local ``datetime`` that foreachRDD passes back to epoch milliseconds."""
    return round(t.timestamp() * 1000)


def plain(value: Any) -> Any:
    """Turn a collected value into plain comparable data (lazy iterables become lists)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return value
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, Iterable):  # e.g. ResultIterable from groupByKey / cogroup
        return [plain(v) for v in value]
    return value


def canonical_key(value: Any) -> tuple[Any, ...]:
    """A total order over mixed plain data (None < numbers < strings < bytes < sequences < rest)."""
    if value is None:
        return (0,)
    if isinstance(value, (bool, int, float)):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    if isinstance(value, bytes):
        return (3, value)
    if isinstance(value, (tuple, list)):
        return (4, tuple(canonical_key(v) for v in value))
    return (5, type(value).__name__, repr(value))


def collect(stream: DStreamLike, name: str, order: Order = "sorted") -> None:
    """Record every batch of ``stream`` as ``(batch_time_ms, collected)`` under ``name``.

    ``order="sorted"`` sorts the collected elements with :func:`canonical_key` (for
    outputs whose order is not part of the contract); ``"raw"`` keeps ``rdd.collect()``
    order, which for narrow operations exposes partitioning and ordering quirks.
    """
    if order not in ("sorted", "raw"):
        raise ValueError(f"unknown order {order!r}")
    sink = active_sink()
    name = sink.declare(name)

    def record(t: datetime, rdd: Any) -> None:
        # Must return None: pyspark fails the output operation when a foreachRDD function
        # returns anything truthy that is not an RDD ('list' object has no attribute '_jrdd').
        if sink.closed:
            return
        values = [plain(v) for v in rdd.collect()]
        if order == "sorted":
            values.sort(key=canonical_key)
        sink.record(name, time_to_ms(t), values)

    stream.foreachRDD(record)


def seconds(batches: int, batch_seconds: float) -> float:
    """Duration of ``batches`` batch intervals, in seconds, safe for ``int(s * 1000)``."""
    ms = round(batches * batch_seconds * 1000)
    value = ms / 1000
    if int(value * 1000) != ms:
        raise ValueError(f"{batches} x {batch_seconds}s is not representable as whole milliseconds")
    return value


def rdd_checkpoint_dir(ssc: StreamingContextLike, tmp_dir: str) -> None:
    """Give stateful streams a checkpoint directory the way pyspark's own tests do: on the SparkContext.

    ``ssc.checkpoint(dir)`` would also make pyspark write (and pickle) the whole graph after
    every batch, which costs far more than the programs themselves; one program
    (``update_state_by_key``) keeps using it so that the call itself is covered.
    """
    ssc.sparkContext.setCheckpointDir(os.path.join(tmp_dir, "checkpoint"))


# ---------------------------------------------------------------------------
# Input data
# ---------------------------------------------------------------------------

NUMS: Batches = [[1, 2, 3], [4, 5], [], [6, 7, 8, 9]]
"""Integers over four batches, with an empty third batch."""

LINES: Batches = [["a b a", "c a"], ["b b"], [], ["a c d", "d"]]
"""Text lines for word counting, with an empty third batch."""

PAIRS: Batches = [[("a", 1), ("b", 2), ("a", 3)], [("b", 4)], [], [("c", 5), ("a", 6), ("c", 7)]]
"""Key/value pairs, with an empty third batch."""

LEFT: Batches = [[("a", 1), ("b", 2)], [("a", 3)], [], [("c", 4), ("a", 5)]]
RIGHT: Batches = [[("a", "x"), ("c", "y")], [("b", "z")], [("a", "w")], [("c", "v"), ("c", "u")]]
"""Two keyed streams for joins; keys overlap only partly in each batch."""

EMPTY_AND_FULL: Batches = [[], [1, 2], [], []]
"""Mostly-empty input (note: ``make_input([])`` itself fails on pyspark, see harness)."""


# ---------------------------------------------------------------------------
# Stateless transformations
# ---------------------------------------------------------------------------


def prog_map(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """map, order kept."""
    collect(make_input(NUMS).map(lambda x: x * 10), "map", order="raw")


def prog_flat_map(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """flatMap splitting lines into words, order kept."""
    collect(make_input(LINES).flatMap(lambda line: line.split()), "flatMap", order="raw")


def prog_filter(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """filter keeping even numbers, order kept."""
    collect(make_input(NUMS).filter(lambda x: x % 2 == 0), "filter", order="raw")


def prog_map_partitions(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """mapPartitions summing each partition: exposes how a batch list is split."""
    collect(make_input(NUMS).mapPartitions(lambda it: [sum(it)]), "mapPartitions", order="raw")


def prog_map_partitions_with_index(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """mapPartitionsWithIndex tagging each partition's content with its index."""
    stream = make_input(NUMS).mapPartitionsWithIndex(lambda i, it: [(i, list(it))])
    collect(stream, "mapPartitionsWithIndex", order="raw")


def prog_glom(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """glom: one list per partition, including empty partitions."""
    collect(make_input(NUMS).glom(), "glom", order="raw")


def prog_map_values(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """mapValues and flatMapValues on a pair stream."""
    pairs = make_input(PAIRS)
    collect(pairs.mapValues(lambda v: v * 100), "mapValues", order="raw")
    collect(pairs.flatMapValues(lambda v: range(v % 3)), "flatMapValues", order="raw")


def prog_transform(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """transform with a one-argument and a two-argument (time, rdd) function."""
    nums = make_input(NUMS)
    collect(nums.transform(lambda rdd: rdd.map(lambda x: x % 3).distinct()), "transform", order="sorted")

    def tag_with_time_type(t: Any, rdd: Any) -> Any:
        kind = type(t).__name__  # "datetime" on pyspark
        return rdd.map(lambda x: (kind, x))

    collect(nums.transform(tag_with_time_type), "transform_time", order="raw")


def prog_transform_with(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """transformWith (two- and three-argument forms) and ssc.transform over two inputs."""
    left = make_input(NUMS)
    right = make_input(PAIRS)
    both = left.transformWith(lambda a, b: a.union(b.values().map(lambda v: -v)), right)
    collect(both, "transformWith", order="raw")
    timed = left.transformWith(lambda t, a, b: a.cartesian(b.keys()).filter(lambda ab, ok=t is not None: ok), right)
    collect(timed, "transformWith_time", order="sorted")
    combined = ssc.transform([left, right], lambda rdds: rdds[0].map(lambda x: ("n", x)).union(rdds[1]))
    collect(combined, "ssc_transform", order="sorted")


def prog_repartition(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """repartition: elements are kept and the partition count changes (placement is JVM-specific)."""
    parts = make_input(NUMS).repartition(3)
    collect(parts, "repartition", order="sorted")
    collect(parts.glom().count(), "repartition_num_partitions", order="raw")


def prog_union(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """DStream.union and ssc.union; union keeps the left stream's elements first.

    pyspark's ssc.union demands equal serializers, and a queueStream's serializer depends
    on its data (batches of 4+ elements get another batch size), so every batch here has
    at most 3 elements.
    """
    a = make_input([[1, 2, 3], [4, 5], [], [6, 7, 8]])
    b = make_input([[10], [], [30], [40, 41]])
    c = make_input([[100], [200], [300], []])
    collect(a.union(b), "union", order="raw")
    collect(ssc.union(a, b, c), "ssc_union", order="raw")


def prog_empty_batches(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """Empty queued batches, and the batches after the queue runs dry."""
    nums = make_input(EMPTY_AND_FULL)
    collect(nums, "identity", order="raw")
    collect(nums.glom(), "glom", order="raw")
    collect(nums.count(), "count", order="raw")
    collect(nums.reduce(operator.add), "reduce", order="raw")


# ---------------------------------------------------------------------------
# Aggregations (per batch)
# ---------------------------------------------------------------------------


def prog_word_count(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """The classic: flatMap + map + reduceByKey."""
    words = make_input(LINES).flatMap(lambda line: line.split())
    collect(words.map(lambda w: (w, 1)).reduceByKey(operator.add), "word_count", order="sorted")


def prog_reduce(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """reduce to a single element per non-empty batch."""
    collect(make_input(NUMS).reduce(operator.add), "reduce", order="raw")


def prog_reduce_by_key(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """reduceByKey with default and explicit partition counts."""
    pairs = make_input(PAIRS)
    collect(pairs.reduceByKey(operator.add), "reduceByKey", order="sorted")
    collect(pairs.reduceByKey(operator.add, 1).glom().count(), "reduceByKey_1_partitions", order="raw")


def prog_combine_by_key(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """combineByKey building (sum, count) per key."""
    stream = make_input(PAIRS).combineByKey(
        lambda v: (v, 1),
        lambda acc, v: (acc[0] + v, acc[1] + 1),
        lambda a, b: (a[0] + b[0], a[1] + b[1]),
    )
    collect(stream, "combineByKey", order="sorted")


def prog_partition_by(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """partitionBy with a custom partition function; each partition's content sorted."""
    parts = make_input(PAIRS).partitionBy(2, lambda k: 0 if k == "a" else 1)
    collect(parts.glom().map(lambda p: sorted(p)), "partitionBy", order="raw")


def prog_group_by_key(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """groupByKey with the grouped values sorted (their order is not guaranteed)."""
    collect(make_input(PAIRS).groupByKey().mapValues(lambda vs: sorted(vs)), "groupByKey", order="sorted")


def prog_count_by_value(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """countByValue over words."""
    words = make_input(LINES).flatMap(lambda line: line.split())
    collect(words.countByValue(), "countByValue", order="sorted")


def prog_count(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """count, including empty batches."""
    collect(make_input(NUMS).count(), "count", order="raw")


# ---------------------------------------------------------------------------
# Two-stream operations
# ---------------------------------------------------------------------------


def prog_cogroup(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """cogroup with each side's values sorted."""
    grouped = make_input(LEFT).cogroup(make_input(RIGHT))
    collect(grouped.mapValues(lambda vs: (sorted(vs[0]), sorted(vs[1]))), "cogroup", order="sorted")


def prog_joins(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """join, leftOuterJoin, rightOuterJoin and fullOuterJoin of the same two streams."""
    left = make_input(LEFT)
    right = make_input(RIGHT)
    collect(left.join(right), "join", order="sorted")
    collect(left.leftOuterJoin(right), "leftOuterJoin", order="sorted")
    collect(left.rightOuterJoin(right), "rightOuterJoin", order="sorted")
    collect(left.fullOuterJoin(right), "fullOuterJoin", order="sorted")


# ---------------------------------------------------------------------------
# Windows (durations are multiples of the batch interval)
# ---------------------------------------------------------------------------


def prog_window(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float) -> None:
    """window of 3 batches sliding by 1, and of 2 batches sliding by 2 (fires every other batch)."""
    nums = make_input(NUMS)
    collect(nums.window(seconds(3, batch_seconds)), "window_3", order="raw")
    collect(nums.window(seconds(3, batch_seconds), seconds(1, batch_seconds)), "window_3_1", order="raw")
    collect(nums.window(seconds(2, batch_seconds), seconds(2, batch_seconds)), "window_2_2", order="raw")


def prog_reduce_by_window(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float, tmp_dir: str) -> None:
    """reduceByWindow with and without an inverse function."""
    rdd_checkpoint_dir(ssc, tmp_dir)
    nums = make_input(NUMS)
    w, s = seconds(3, batch_seconds), seconds(1, batch_seconds)
    collect(nums.reduceByWindow(operator.add, None, w, s), "reduceByWindow", order="raw")
    collect(nums.reduceByWindow(operator.add, operator.sub, w, s), "reduceByWindow_inv", order="raw")


def prog_count_by_window(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float, tmp_dir: str) -> None:
    """countByWindow (incremental, needs a checkpoint directory)."""
    rdd_checkpoint_dir(ssc, tmp_dir)
    nums = make_input(NUMS)
    collect(nums.countByWindow(seconds(3, batch_seconds), seconds(1, batch_seconds)), "countByWindow", order="raw")


def prog_count_by_value_and_window(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float, tmp_dir: str) -> None:
    """countByValueAndWindow over words (keys whose count drops to 0 are filtered out)."""
    rdd_checkpoint_dir(ssc, tmp_dir)
    words = make_input(LINES).flatMap(lambda line: line.split())
    counted = words.countByValueAndWindow(seconds(2, batch_seconds), seconds(1, batch_seconds))
    collect(counted, "countByValueAndWindow", order="sorted")


def prog_group_by_key_and_window(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float, tmp_dir: str) -> None:
    """groupByKeyAndWindow with grouped values sorted."""
    rdd_checkpoint_dir(ssc, tmp_dir)
    grouped = make_input(PAIRS).groupByKeyAndWindow(seconds(2, batch_seconds), seconds(1, batch_seconds))
    collect(grouped.mapValues(lambda vs: sorted(vs)), "groupByKeyAndWindow", order="sorted")


def prog_reduce_by_key_and_window(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float, tmp_dir: str) -> None:
    """reduceByKeyAndWindow: plain, with invFunc (zero counts kept), with invFunc + filterFunc, slide 2."""
    rdd_checkpoint_dir(ssc, tmp_dir)
    ones = make_input(LINES).flatMap(lambda line: line.split()).map(lambda w: (w, 1))
    w2, s1, s2 = seconds(2, batch_seconds), seconds(1, batch_seconds), seconds(2, batch_seconds)
    collect(ones.reduceByKeyAndWindow(operator.add, None, w2, s1), "rbkw_plain", order="sorted")
    collect(ones.reduceByKeyAndWindow(operator.add, operator.sub, w2, s1), "rbkw_inv", order="sorted")
    filtered = ones.reduceByKeyAndWindow(operator.add, operator.sub, w2, s1, filterFunc=lambda kv: kv[1] > 0)
    collect(filtered, "rbkw_inv_filter", order="sorted")
    collect(ones.reduceByKeyAndWindow(operator.add, None, w2, s2), "rbkw_slide2", order="sorted")


def prog_inverse_windows(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float, tmp_dir: str) -> None:
    """Windows of 5 batches with inverse functions.

    pyspark only takes the incremental (inverse) path when the window is at least 5
    slides long; shorter windows are recomputed from scratch.  On the inverse path keys
    whose value drops back to 0 stay in the output unless a filterFunc removes them.
    """
    rdd_checkpoint_dir(ssc, tmp_dir)
    words = make_input(LINES).flatMap(lambda line: line.split())
    ones = words.map(lambda w: (w, 1))
    w5, s1 = seconds(5, batch_seconds), seconds(1, batch_seconds)
    counts = ones.reduceByKeyAndWindow(operator.add, operator.sub, w5, s1, 3)
    collect(counts, "rbkw_inv5", order="sorted")
    # The partition layout of the incremental window: partitions in order, each one's pairs sorted.
    collect(counts.glom().map(lambda part: sorted(part)), "rbkw_inv5_partitions", order="raw")
    filtered = ones.reduceByKeyAndWindow(operator.add, operator.sub, w5, s1, filterFunc=lambda kv: kv[1] > 0)
    collect(filtered, "rbkw_inv5_filter", order="sorted")
    # groupByKeyAndWindow's inverse drops the leaving values from the front of each list.
    grouped = make_input(PAIRS).groupByKeyAndWindow(w5, s1).mapValues(lambda vs: sorted(vs))
    collect(grouped, "groupByKeyAndWindow5", order="sorted")


def prog_incremental_window_slide(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float, tmp_dir: str) -> None:
    """An incremental window sliding by 2 batches: 10 batches long (5 slides), so the inverse path is taken.

    Fires at odd batch indices; at index 11 the first two batches leave the window.
    """
    rdd_checkpoint_dir(ssc, tmp_dir)
    pairs = make_input([[("a", 1), ("b", 1)], [("a", 1)], [("b", 1), ("c", 1)], [], [("a", 1)]])
    w10, s2 = seconds(10, batch_seconds), seconds(2, batch_seconds)
    collect(pairs.reduceByKeyAndWindow(operator.add, operator.sub, w10, s2), "rbkw_inv10_slide2", order="sorted")


# ---------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------


def prog_update_state_by_key(ssc: StreamingContextLike, make_input: MakeInput, *, tmp_dir: str) -> None:
    """updateStateByKey running sums; a key whose state reaches >= 10 is dropped (None)."""
    ssc.checkpoint(os.path.join(tmp_dir, "checkpoint"))

    def update(values: Iterable[int], state: int | None) -> int | None:
        total = (state or 0) + sum(values)
        return None if total >= 10 else total

    collect(make_input(PAIRS).updateStateByKey(update), "updateStateByKey", order="sorted")


def prog_update_state_by_key_initial(ssc: StreamingContextLike, make_input: MakeInput, *, tmp_dir: str) -> None:
    """updateStateByKey seeded with initialRDD (given as a list of pairs)."""
    rdd_checkpoint_dir(ssc, tmp_dir)

    def update(values: Iterable[int], state: int | None) -> int:
        return (state or 0) + sum(values)

    stateful = make_input(PAIRS).updateStateByKey(update, initialRDD=[("a", 100), ("z", 1000)])
    collect(stateful, "updateStateByKey_initial", order="sorted")


def prog_update_state_by_key_lists(ssc: StreamingContextLike, make_input: MakeInput, *, tmp_dir: str) -> None:
    """pyspark's own updateStateByKey vectors: a list-appending updater, without and with an initial state."""
    rdd_checkpoint_dir(ssc, tmp_dir)

    def append(values: Iterable[int], state: list[int] | None) -> list[int]:
        return (state or []) + list(values)

    plain_state = make_input([[("k", i)] for i in range(4)]).updateStateByKey(append)
    collect(plain_state, "lists", order="sorted")
    seeded = make_input([[("k", i)] for i in range(2, 6)]).updateStateByKey(append, initialRDD=[("k", [0, 1])])
    collect(seeded, "lists_initial", order="sorted")


# ---------------------------------------------------------------------------
# Output operations
# ---------------------------------------------------------------------------


def prog_multiple_outputs(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """Several output operations over one stream and its derivatives, in registration order."""
    nums = make_input(NUMS)
    collect(nums, "first", order="raw")
    doubled = nums.map(lambda x: 2 * x)
    collect(doubled, "second", order="raw")
    collect(doubled.count(), "third", order="raw")


def prog_pprint(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """pprint with the default 10 and with 2 (prints '...' when truncated); stdout is captured."""
    nums = make_input(NUMS)
    nums.pprint()
    nums.map(lambda x: ("k", x)).pprint(2)


def prog_save_as_text_files(ssc: StreamingContextLike, make_input: MakeInput, *, tmp_dir: str) -> None:
    """saveAsTextFiles with and without a suffix; the harness reads the part files back."""
    nums = make_input(NUMS)
    nums.saveAsTextFiles(os.path.join(tmp_dir, "nums"))
    nums.map(lambda x: ("k", x)).saveAsTextFiles(os.path.join(tmp_dir, "pairs"), "txt")


# ---------------------------------------------------------------------------
# pyspark quirks, time slices, persistence, mixed slides
# ---------------------------------------------------------------------------


def prog_count_quirks(ssc: StreamingContextLike, make_input: MakeInput) -> None:
    """count of an RDD without partitions yields nothing (not 0); a transform returning None skips the batch.

    The None-returning stream is cached: pyspark fuses uncached transforms, and the fused
    function would hand None to the next one (an AttributeError in pyspark).
    """
    nums = make_input(NUMS)
    collect(nums.transform(lambda rdd: rdd.context.emptyRDD()).count(), "count_zero_partitions", order="raw")
    non_empty = nums.transform(lambda rdd: None if rdd.isEmpty() else rdd).cache()
    collect(non_empty, "transform_none", order="raw")
    collect(non_empty.count(), "transform_none_count", order="raw")


def prog_state_carry_over(ssc: StreamingContextLike, make_input: MakeInput, *, tmp_dir: str) -> None:
    """updateStateByKey when its parent has no RDD: the state is carried over without calling the update function.

    The update function counts its calls per key; Scala's updateStateByKey would also call
    it (with no values) in the batches without an RDD.
    """
    rdd_checkpoint_dir(ssc, tmp_dir)
    pairs = make_input(PAIRS).transform(lambda rdd: None if rdd.isEmpty() else rdd).cache()
    calls = pairs.updateStateByKey(lambda values, state: (state or 0) + 1)
    collect(calls, "update_calls", order="sorted")
    collect(calls.glom().map(lambda part: sorted(part)), "update_calls_partitions", order="raw")


def prog_slice(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float) -> None:
    """DStream.slice inside an output operation: the RDDs of the last three batches, kept by ssc.remember."""
    ssc.remember(seconds(8, batch_seconds))
    nums = make_input([[1], [2, 3], [], [4], [5, 6]])
    sink = active_sink()
    name = sink.declare("slice_last_3")
    span_ms = round(2 * batch_seconds * 1000)

    def record(t: datetime, rdd: Any) -> None:
        if sink.closed:
            return
        end_ms = time_to_ms(t)
        # Unix-seconds bounds half a millisecond past the batch times: pyspark truncates
        # seconds * 1000 to an int, and a float a hair below a whole millisecond would
        # otherwise land on the previous one.
        rdds = nums.slice((end_ms - span_ms + 0.5) / 1000, (end_ms + 0.5) / 1000)
        sink.record(name, end_ms, [sorted(r.collect()) for r in rdds])

    nums.foreachRDD(record)


def prog_persistence(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float, tmp_dir: str) -> None:
    """cache, persist and checkpoint(interval) leave every output unchanged."""
    from pyspark import StorageLevel

    rdd_checkpoint_dir(ssc, tmp_dir)
    nums = make_input(NUMS)
    cached = nums.map(lambda x: x * 2).cache()
    collect(cached.map(lambda x: x + 1), "cached", order="raw")
    persisted = nums.map(lambda x: (x % 3, x)).persist(StorageLevel.MEMORY_AND_DISK)
    collect(persisted.reduceByKey(operator.add), "persisted", order="sorted")
    checkpointed = nums.map(lambda x: -x).checkpoint(seconds(2, batch_seconds))
    collect(checkpointed, "checkpointed", order="raw")
    collect(checkpointed.window(seconds(2, batch_seconds)), "checkpointed_window", order="raw")


def prog_mixed_slides(ssc: StreamingContextLike, make_input: MakeInput, *, batch_seconds: float) -> None:
    """Streams with different slides: transformWith gives the side without an RDD an empty one."""
    nums = make_input(NUMS)
    every_other = nums.window(seconds(2, batch_seconds), seconds(2, batch_seconds))

    def tag_sides(a: Any, b: Any) -> Any:
        return a.map(lambda x: ("a", x)).union(b.map(lambda x: ("b", x)))

    collect(nums.transformWith(tag_sides, every_other), "fast_with_slow", order="sorted")
    collect(every_other.transformWith(tag_sides, nums), "slow_with_fast", order="sorted")
    pairs = nums.map(lambda x: (x % 2, x))
    collect(pairs.window(seconds(2, batch_seconds)).join(pairs), "window_join", order="sorted")


# ---------------------------------------------------------------------------
# Catalogue
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramSpec:
    """A catalogue entry: the program and how many batches to run it for."""

    name: str
    program: Program
    num_batches: int
    tags: frozenset[str] = field(default_factory=frozenset)


def _spec(program: Program, num_batches: int = 5, *tags: str) -> ProgramSpec:
    name = program.__name__.removeprefix("prog_")
    return ProgramSpec(name=name, program=program, num_batches=num_batches, tags=frozenset(tags))


PROGRAMS: dict[str, ProgramSpec] = {
    spec.name: spec
    for spec in [
        _spec(prog_map),
        _spec(prog_flat_map),
        _spec(prog_filter),
        _spec(prog_map_partitions),
        _spec(prog_map_partitions_with_index),
        _spec(prog_glom),
        _spec(prog_map_values),
        _spec(prog_transform, 4),
        _spec(prog_transform_with, 4),
        _spec(prog_repartition, 4),
        _spec(prog_union, 4),
        _spec(prog_empty_batches),
        _spec(prog_word_count, 4),
        _spec(prog_reduce, 4),
        _spec(prog_reduce_by_key, 4),
        _spec(prog_combine_by_key, 4),
        _spec(prog_partition_by, 4),
        _spec(prog_group_by_key, 4),
        _spec(prog_count_by_value, 4),
        _spec(prog_count, 4),
        _spec(prog_cogroup, 4),
        _spec(prog_joins, 4),
        _spec(prog_window, 5, "window"),
        _spec(prog_reduce_by_window, 5, "window", "checkpoint"),
        _spec(prog_count_by_window, 5, "window", "checkpoint"),
        _spec(prog_count_by_value_and_window, 5, "window", "checkpoint"),
        _spec(prog_group_by_key_and_window, 5, "window", "checkpoint"),
        _spec(prog_reduce_by_key_and_window, 5, "window", "checkpoint"),
        _spec(prog_inverse_windows, 6, "window", "checkpoint"),
        _spec(prog_incremental_window_slide, 12, "window", "checkpoint"),
        _spec(prog_update_state_by_key, 5, "state", "checkpoint"),
        _spec(prog_update_state_by_key_initial, 5, "state", "checkpoint"),
        _spec(prog_update_state_by_key_lists, 5, "state", "checkpoint"),
        _spec(prog_multiple_outputs, 4),
        _spec(prog_pprint, 4, "stdout"),
        _spec(prog_save_as_text_files, 3, "files"),
        _spec(prog_count_quirks, 4, "quirk"),
        _spec(prog_state_carry_over, 5, "state", "checkpoint", "quirk"),
        _spec(prog_slice, 5, "slice"),
        _spec(prog_persistence, 4, "checkpoint"),
        _spec(prog_mixed_slides, 4, "window"),
    ]
}
"""All programs by short name (``prog_`` prefix dropped)."""


def combine(specs: Sequence[ProgramSpec]) -> Program:
    """One program that builds several catalogue programs side by side on the same context.

    Each program's outputs are recorded as ``<program name>/<output name>``. Running them
    together saves a context start, stop and first-batch wait per program. Do not combine
    programs that print (their pprint blocks would interleave), save files, or set
    ``ssc.remember`` (allowed once per context).
    """

    def combined(ssc: StreamingContextLike, make_input: MakeInput, *, tmp_dir: str, batch_seconds: float) -> None:
        sink = active_sink()
        available = {"tmp_dir": tmp_dir, "batch_seconds": batch_seconds}
        for spec in specs:
            wanted = list(inspect.signature(spec.program).parameters)[2:]
            with sink.namespace(f"{spec.name}/"):
                spec.program(ssc, make_input, **{name: available[name] for name in wanted})

    combined.__name__ = "+".join(spec.name for spec in specs)
    return combined
