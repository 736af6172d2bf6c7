"""KeyedStateNode: what the DStream operators on a state store share (``flatMapGroupsWithState``, ``transformWithState``).

Each batch hashes the pairs into the operator's partitions and runs, in a Spark task, the
operator's batch over each partition's state store, loaded at the batch's version (its batch id)
and committed as the next one before the task ends. A task runs a contiguous block of partitions
when there are more partitions than Spark's default parallelism, and an input of one partition
runs them all in its own task, with no shuffle (:meth:`KeyedStateNode.task_count`). So the state lives with the
tasks, under the checkpoint directory, never on the driver. The tasks reach it from Python: a
local or shared POSIX path directly, any other URI through fsspec (the driver reaches the same
URI through Hadoop). A batch with no input still runs every partition (its timers fire); and a
batch run again after a crash loads the same version, with the same batch time and the
watermarks logged for it.

The node's RDD is not cached, so pyspark pipelines the user's functions into the state's task
(one Python worker per task). Each generated RDD carries a token, and a task keeps its partition's
outputs under it beside the working copy (``streaming.state.once_per_batch``): any other job of
the batch reading the partition gets them back without running the state again, so the state
advances once per batch whatever the outputs do. An internal output operation runs in every
batch after the user's outputs and computes the partitions they did not (usually none: then it
runs no Spark job). Each task reports its numbers, and which partition it ran, by batch time,
through an accumulator, or on Spark Connect through report files under the checkpoint, named by
partition so that a partition run again replaces its record (``_batch_stats``).

A batch whose own output failed (some partition may not have committed its version) is noted
(:class:`streaming.state.StateBehind`): before a later batch's outputs read the operator, they run
that batch's state again over its own input (:meth:`KeyedStateNode.catch_up_state`), as Spark's
DStream state is recomputed through its lineage; partitions that had committed are skipped.
"""

from __future__ import annotations

import uuid
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol

import attrs

from scheduler import BatchWatermarks, CheckpointPath, InvalidPipelineError, StateOperatorProgress, StreamingError, Time, redact_uri

from ..state import StateBehind, StateOperatorStats, StateStoreProvider, check_operator, keep_partition_count, partition_hash
from ._batch_stats import BatchStats, batch_stats
from ._node import StreamNode
from ._transforms import ForEachNode, stateful_upstream
from ._watermark import WatermarkedNode

if TYPE_CHECKING:
    from pyspark import RDD

__all__ = ["STATE_STORE_DIRECTORY", "STATE_STORE_FSYNC_KEY", "KeyedStateNode", "PartitionBatch"]

STATE_STORE_DIRECTORY = "stateful"
"""Under the checkpoint directory, where the operators' state stores live (``<ckpt>/stateful/state/<op>/<part>``)."""
STATE_STORE_FSYNC_KEY = "spark.aiodstream.stateStore.fsync"
"""Whether the state stores' tasks flush each commit to disk (``StateStoreProvider``'s ``fsync``; true unless "false")."""

SERIAL_INPUT_ROWS = 50_000
"""Pairs given to a stateful operator in a batch from which its next single-partition batch is spread over the tasks.

A shuffle stage costs tens of milliseconds of task start-up on a small machine; the state's own
work is a few microseconds a pair, so past tens of thousands of pairs in one task the cores it
leaves idle cost more (see :meth:`KeyedStateNode.task_count`).
"""


def _same_function(a: Callable[[Any], Any], b: Callable[[Any], Any]) -> bool:
    """Whether ``a`` and ``b`` are one function, or the same code written twice (two ``lambda e: e[1]``).

    Same bytecode, constants (with their types), names, globals, defaults and closure values;
    anything else (other callables, a closure value that cannot be compared) counts as different.
    """
    if a is b:
        return True
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if code_a is None or code_b is None:
        return False
    try:
        return bool(
            code_a.co_code == code_b.co_code and code_a.co_names == code_b.co_names
            and [(type(c), c) for c in code_a.co_consts] == [(type(c), c) for c in code_b.co_consts]
            and getattr(a, "__globals__", None) is getattr(b, "__globals__", None)
            and getattr(a, "__defaults__", None) == getattr(b, "__defaults__", None)
            and getattr(a, "__kwdefaults__", None) == getattr(b, "__kwdefaults__", None)
            and [c.cell_contents for c in getattr(a, "__closure__", None) or ()]
            == [c.cell_contents for c in getattr(b, "__closure__", None) or ()]
        )
    except Exception:  # an empty cell, or values whose == raises or is not a truth value
        return False


class PartitionBatch(Protocol):
    """One partition's batch, as a task runs it: the store, the batch's data pairs and initial-state pairs -> outputs, numbers."""

    def __call__(self, provider: StateStoreProvider, data: list[tuple[Any, Any]],
                 initial: list[tuple[Any, Any]]) -> tuple[list[Any], StateOperatorStats]:
        """Load, run and commit the partition's store for the batch."""
        ...


class KeyedStateNode(StreamNode):
    """A stateful operator over a pair stream's (key, value) pairs; see the module docstring.

    A subclass names the operator (:attr:`operator_name`) and makes the per-partition batch
    (:meth:`partition_batch`); it may check more at start (:meth:`check_at_start`) and at its
    first batch, on the driver (:meth:`first_batch`).
    """

    keeps_state = True

    def __init__(self, parent: StreamNode, *, num_partitions: int, initial: Any = None,
                 event_time: Callable[[Any], Any] | None = None) -> None:
        """An operator over ``parent``'s pairs in ``num_partitions`` state stores, seeded with ``initial`` in batch 0."""
        super().__init__(parent.env, [parent])
        self._num_partitions = num_partitions
        self._initial = initial
        self._event_time = event_time
        self.operator_id = self._env.graph.add_state_operator()
        self._stats: BatchStats | None = None
        self._first_batch_done = False
        # Whether the last batch whose numbers came in gave the state at least SERIAL_INPUT_ROWS pairs:
        # then the next single-partition input is spread over the tasks too (see task_count).
        self._large_batches = False
        # this node's RDDs -> their batch ms, and what runs that batch's state again (see catch_up_state)
        self._batch_of: weakref.WeakKeyDictionary[Any, tuple[int, Callable[[], RDD[Any]]]] = weakref.WeakKeyDictionary()
        self._behind: StateBehind[Callable[[], RDD[Any]]] | None = None
        self._upstream: tuple[Any, ...] | None = None  # the stateful operators this one reads, itself last
        self._last_made: Time | None = None  # the newest batch whose RDD this operator made
        self._unadvanced: dict[int, Callable[[], RDD[Any]]] = {}  # batches made whose own output has not run yet

    @property
    def operator_name(self) -> str:
        """The operator's name in progress reports and messages (Spark's)."""
        raise NotImplementedError

    def state_owner(self) -> tuple[str, str | None]:
        """The operator the checkpoint records as its state's writer, and its timeout kind if it has one
        (:func:`streaming.state.check_operator`)."""
        raise NotImplementedError

    def partition_batch(self, batch_id: int, batch_ms: int, watermarks: BatchWatermarks,
                        watermark: WatermarkedNode | None) -> PartitionBatch:
        """What each task of batch ``batch_id`` runs over its partition (pickled into the tasks)."""
        raise NotImplementedError

    def check_at_start(self, watermark: WatermarkedNode | None) -> None:
        """The operator's own checks at start (after the checkpoint directory's); none by default."""

    def first_batch(self, state_dir: CheckpointPath) -> None:
        """Driver-side checks against the checkpoint, once, when the run's first batch is generated; none by default."""

    def judges_event_times(self) -> bool:
        """Whether the operator drops late values by their event time (its mode is event time); no by default."""
        return False

    def _watermarks(self) -> list[WatermarkedNode]:
        """The withWatermark streams upstream (the first path's first), each once.

        The search stops at a stateful operator: Spark's ``(flat)MapGroupsWithState`` and
        ``transformWithState`` emit no watermark, so an operator after one has none of its own.
        """
        found: list[WatermarkedNode] = []
        seen: set[int] = set()
        stack = list(reversed(self._parents))
        while stack:
            stream = stack.pop()
            if id(stream) in seen:
                continue
            seen.add(id(stream))
            if isinstance(stream, WatermarkedNode):
                found.append(stream)
            elif not isinstance(stream, KeyedStateNode):
                stack.extend(reversed(stream.parents))
        return found

    def _watermark(self) -> WatermarkedNode | None:
        """The withWatermark stream whose function judges the values (checked at start to be the only one), if any."""
        found = self._watermarks()
        return found[0] if found else None

    def event_time_of_values(self, watermark: WatermarkedNode | None) -> Callable[[Any], Any] | None:
        """The event time of a value: ``eventTime`` if given, else the watermark's function, else None."""
        return self._event_time or (watermark.event_time if watermark is not None else None)

    def validate_at_start(self) -> None:
        """The graph's hook (not for users): a checkpoint directory, one event-time function, the operator's checks, then the node's.

        Raises:
            InvalidPipelineError: no checkpoint directory; or values to judge by event time that may come from
                watermarked inputs with different ``eventTime`` functions, and no ``eventTime=``.
        """
        if self._env.graph.checkpoint_dir is None:
            raise InvalidPipelineError(
                "requirement failed: The checkpoint directory has not been set. Please set it by StreamingContext.checkpoint()."
            )
        found = self._watermarks()
        if self._event_time is None and self.judges_event_times():
            functions: list[Callable[[Any], Any]] = []
            for stream in found:
                if not any(_same_function(stream.event_time, f) for f in functions):
                    functions.append(stream.event_time)
            if len(functions) > 1:
                raise InvalidPipelineError(
                    f"{self.operator_name} drops late values by their event time, and its input comes from "
                    f"{len(found)} watermarked streams (withWatermark) with different eventTime functions, so which "
                    f"one gives a value's event time is unknown: pass eventTime= to {self.operator_name}, a function "
                    "of a value giving its event time (a datetime or epoch milliseconds) whichever input it came from"
                )
        self.check_at_start(found[0] if found else None)
        super().validate_at_start()

    def advance_every_batch(self) -> None:
        """Register the operator's own output, so the state advances in every batch whatever the user's outputs do.

        It runs after the user's outputs (whichever were registered first) and computes the
        partitions of the batch's RDD that they did not.
        """
        _OwnOutput(self, self._advance).register()

    def _advance(self, _batch_time: Any, rdd: RDD[Any]) -> None:
        """The operator's own output: make sure every partition of the batch ran (and so committed its state).

        Each task reports its partition (see the module docstring), so when the user's outputs
        computed them all, as a full action (``count``, ``foreach``, ``collect``, ...) does,
        nothing runs. Else, on a SparkContext, the RDD is computed in the JVM: a cartesian
        product with one empty partition reads every partition (those already run get their
        kept outputs back, the others run their state) and yields nothing, so no second Python
        worker drains what the tasks made. On Spark Connect a ``count`` does it (its tasks are
        Python workers anyway). The reports go under the checkpoint, and a task that does not
        find their place there fails saying so; if still no task's report reached this process,
        the batch fails too (its watermark and progress would silently stand still otherwise).
        (On a SparkContext, a task that ran its state and then failed in the user's code
        downstream reports nothing, as Spark drops a failed task's accumulator updates: its
        partition is not run again, and the failed batch's progress lacks its numbers. On
        Connect its report stands.)
        """
        entry = self._batch_of.pop(rdd, None)
        if entry is None:
            self._run_every_partition(rdd, None)
            return
        batch, rerun = entry
        self._unadvanced.pop(batch, None)
        if self._upstream is None:
            self._upstream = stateful_upstream(self)
        try:
            for state in self._upstream:  # this operator, and any it reads, as a user's output does first
                state.catch_up_state(Time(batch))
            self._run_every_partition(rdd, batch)
        except Exception:
            # Some partition may not have committed: the next batches run the state of this one again first.
            self._fell_behind(Time(batch), rerun)
            raise

    def _run_every_partition(self, rdd: RDD[Any], batch: int | None) -> None:
        if batch is not None and self._stats is not None:
            stats: StateOperatorStats | None = self._stats.peek(batch)
            if stats is not None and stats.partitions == (1 << self._num_partitions) - 1:
                return
        if self._env.spark.kind == "connect":
            rdd.count()
            if batch is not None and self._stats is not None and self._stats.peek(batch) is None:
                raise StreamingError(
                    f"the tasks of {self.operator_name} ran every partition of the batch, but none of their reports "
                    f"reached this process (in {redact_uri(getattr(self._stats, 'place', '?'))}, under the checkpoint directory): "
                    "on Spark Connect the server's executors must reach the checkpoint directory where this process "
                    "does (a directory both see at the same path, or a URI)")
        else:
            rdd.cartesian(rdd.context.parallelize([], 1)).collect()

    @property
    def state_behind(self) -> bool:
        """Whether a failed batch's state has to run again before the next batch's (see :meth:`catch_up_state`)."""
        return bool(self._behind)

    def _fell_behind(self, time: Time, rerun: Callable[[], RDD[Any]]) -> None:
        if self._behind is None:
            self._behind = StateBehind(self.operator_name)
        self._behind.note(time, rerun)

    def catch_up_state(self, time: Time) -> None:
        """Run again the state of the batches before ``time`` that failed before every partition committed it, oldest
        first (:class:`streaming.state.StateBehind`): what the output operations reading this operator do first, on a
        job thread.

        Each runs the failed batch's state over its own input RDD (its shuffle, if Spark still has
        it); a partition that had committed is left as it is, and the outputs are dropped.

        Raises:
            StateCatchUpError: one of them failed again, or too many are behind.
        """
        behind = self._behind
        if not behind:
            return
        assert behind is not None
        with behind.running:
            for earlier, rerun in behind.before(time):
                try:
                    self._run_every_partition(rerun(), None)
                except Exception as exc:
                    raise behind.failed(earlier, time, exc) from exc
                behind.caught_up(earlier)
                self._env.graph.caught_up(time, earlier)  # what its input's watermarks saw counts with this batch

    @property
    def tasks_write_checkpoint(self) -> str:
        """What this operator's tasks write into the checkpoint (the graph checks that they can reach it)."""
        return f"the state store of {self.operator_name}"

    def _compute(self, time: Time) -> RDD[Any] | None:
        # A batch of this run whose generation failed before this operator's RDD was made (a transform upstream
        # raised) ran no state: made now, its state runs first in this batch's jobs (catch_up_state), as Spark's
        # lineage computes a state RDD its batch never made. If it cannot be made, this batch fails as it did.
        # Only batches of this run count: a window downstream may ask for times before it (already committed).
        graph, last = self._env.graph, self._last_made
        if last is None or time > last:
            # Made, but the batch's jobs never ran (its generation failed later: the graph's batches are sequential,
            # so every earlier batch ended): noted as a failed one.
            for ms in [ms for ms in self._unadvanced if ms < time.milliseconds]:
                self._fell_behind(Time(ms), self._unadvanced.pop(ms))
        first = graph.first_batch_time
        if first is not None and time > first:
            missed = first if last is None or last < first else last + graph.batch_duration
            while missed < time:
                if self.is_time_valid(missed):
                    _out, rerun = self._make(missed)
                    self._fell_behind(missed, rerun)
                self._last_made = missed
                missed += graph.batch_duration
        out, rerun = self._make(time)
        self._batch_of[out] = (time.milliseconds, rerun)
        if last is None or time > last:
            self._last_made = time
            self._unadvanced[time.milliseconds] = rerun
        return out

    def _make(self, time: Time) -> tuple[RDD[Any], Callable[[], RDD[Any]]]:
        """Batch ``time``'s RDD, and what runs its state again after a failure (skipping partitions that committed)."""
        env = self._env
        graph = env.graph
        sc = env.spark_context
        parent = self._parents[0].get_or_compute(time)
        if parent is None:
            parent = sc.emptyRDD()
        assert graph.zero_time is not None and graph.checkpoint_dir is not None
        batch_id = (time.milliseconds - graph.zero_time.milliseconds) // self._slide.milliseconds - 1
        state_dir = graph.checkpoint_dir / STATE_STORE_DIRECTORY
        root = graph.task_path(state_dir)  # as the tasks reach it: a local path, or the full URI (fsspec)
        if not self._first_batch_done:
            check_operator(state_dir, self.operator_id, *self.state_owner())
            self._num_partitions = keep_partition_count(state_dir, self.operator_id, self._num_partitions)
            self.first_batch(state_dir)
            self._first_batch_done = True
        run_batch = self.partition_batch(batch_id, time.milliseconds, graph.batch_watermarks(time), self._watermark())
        operator, partitions = self.operator_id, self._num_partitions

        def by_partition(is_initial: bool) -> Callable[[tuple[Any, Any]], tuple[int, tuple[Any, bool, Any]]]:
            def tag(kv: tuple[Any, Any]) -> tuple[int, tuple[Any, bool, Any]]:
                return partition_hash(kv[0]) % partitions, (kv[0], is_initial, kv[1])

            return tag

        tagged = parent.map(by_partition(False))
        if batch_id == 0 and self._initial is not None:
            initial = self._initial if not isinstance(self._initial, list) else sc.parallelize(self._initial)
            tagged = tagged.union(initial.map(by_partition(True)))
        # Every record in one task already (an input of one partition): it runs all the partitions, with no
        # shuffle, unless the last batch was large (its state run serially would outweigh a shuffle).
        shuffle = env.spark.kind == "connect" or self._large_batches or tagged.getNumPartitions() != 1
        tasks = self.task_count(partitions) if shuffle else 1
        by_task = [[p for p in range(partitions) if p * tasks // partitions == task] for task in range(tasks)]
        if self._stats is None:
            self._stats = batch_stats(env)
        sink, batch = self._stats.sink, time.milliseconds
        # Anything but "false" keeps the flush: a misspelt setting does not weaken durability.
        fsync = (env.spark.settings().get(STATE_STORE_FSYNC_KEY) or "true").strip().lower() != "false"
        token = f"{batch_id}-{uuid.uuid4().hex}"  # this RDD's run: a batch generated again gets another

        def run_partition(partition: int, data: list[tuple[Any, Any]], initial_pairs: list[tuple[Any, Any]],
                          again: bool) -> list[Any]:
            from streaming.state import StateStoreProvider, once_per_batch

            provider = StateStoreProvider.shared(root, operator, partition, fsync=fsync)
            if again and provider.has_version(batch_id + 1):  # catching up: this partition had committed the batch
                return []
            with once_per_batch(provider.working_copy, token) as kept:
                if kept.outputs is not None:  # this run's state already ran here: its outputs, not a second run
                    return kept.outputs
                outputs, stats = run_batch(provider, data, initial_pairs)
                kept.keep(outputs)
            if not again:  # the numbers of a batch run again came too late for its progress
                sink.add_partition(batch, partition, attrs.evolve(stats, input_rows=len(data) + len(initial_pairs)))
            return outputs

        def runner(again: bool) -> Callable[[int, Iterable[tuple[int, tuple[Any, bool, Any]]]], Iterator[Any]]:
            def run(task: int, records: Iterable[tuple[int, tuple[Any, bool, Any]]]) -> Iterator[Any]:
                sink.check()  # a state that could not report its numbers does not advance
                mine = by_task[task]
                data: dict[int, list[tuple[Any, Any]]] = {p: [] for p in mine}
                initial_pairs: dict[int, list[tuple[Any, Any]]] = {p: [] for p in mine}
                for partition, (key, is_initial, value) in records:  # read to the end, so pyspark reuses this worker
                    (initial_pairs if is_initial else data)[partition].append((key, value))
                outputs: list[Any] = []
                for partition in mine:  # in order, so the RDD's rows come in the state partitions' order
                    outputs.extend(run_partition(partition, data[partition], initial_pairs[partition], again))
                return iter(outputs)

            return run

        if shuffle:
            tagged = tagged.partitionBy(tasks, lambda partition: partition * tasks // partitions)
        out = tagged.mapPartitionsWithIndex(runner(False), preservesPartitioning=False)
        # Run again after a failure (catch_up_state): the same input (and shuffle), skipping partitions that committed.
        return out, lambda: tagged.mapPartitionsWithIndex(runner(True), preservesPartitioning=False)

    def task_count(self, partitions: int) -> int:
        """How many Spark tasks run a batch's ``partitions`` state partitions: at most Spark's default parallelism.

        Past the cores, more tasks only run in waves, and each pyspark task has a fixed cost (a
        Python worker's round trip, tens of ms on a small machine) that the state's own work per
        partition (a few ms for a thousand keys) does not approach; so a task runs a contiguous
        block of partitions, one after the other (task ``t`` the partitions ``p`` with
        ``p * tasks // partitions == t``), and the RDD's rows come in the partitions' order as
        before. Which partition holds a key, and so the stores, do not change. On Spark Connect
        every partition keeps its own task.

        A batch whose input is one partition (a small file of ``textFileStream``, a queued RDD of
        one slice) skips the shuffle: that partition's task runs every state partition in turn, one
        task in all. Unless the batch before it gave the state ``SERIAL_INPUT_ROWS`` pairs or more:
        run serially, so large a batch's state would cost more than a shuffle stage, so the next
        batch is spread over the tasks as any other input (a stream's batches are alike in size; the
        first large one runs in its one task). ``repartition`` the stream before the operator to
        spread every batch.

        A task that fails after some of its partitions committed loses their numbers with its
        accumulator update, as a task that failed downstream of its state does (see
        :meth:`_advance`); their state and kept outputs stand, so a retry on the same executor does not
        run them again (one elsewhere runs them from their version, as a retried task always did).
        """
        if self._env.spark.kind == "connect":
            return partitions
        return max(1, min(partitions, self._env.spark.settings().default_parallelism))

    def take_state_progress(self, time: Time) -> StateOperatorProgress | None:
        """What batch ``time``'s tasks reported, as progress (``None`` if none ran), forgotten afterwards."""
        if self._stats is None:
            return None
        stats: StateOperatorStats | None = self._stats.take(time.milliseconds)
        if stats is None:
            return None
        self._large_batches = stats.input_rows >= SERIAL_INPUT_ROWS
        return stats.progress(self.operator_name, self._num_partitions)


class _OwnOutput(ForEachNode):
    """A stateful operator's own output operation: registered when the operator is made, run after the user's outputs."""

    runs_last = True

    def _stateful_upstream(self) -> tuple[Any, ...]:
        return ()  # the operator's _advance catches up first, noting its own batch as behind if that fails
