"""How tasks hand per-batch numbers to the driver: an accumulator on a SparkContext, report files on Spark Connect.

``withWatermark`` (event-time statistics) and the keyed state operators (state numbers, the
partitions that ran) have each task report its partition's record of a batch, where a record has
``merge``; the driver peeks at or takes a finished batch's records merged. Spark's accumulators
carry that on a SparkContext (:class:`AccumulatedStats`: the classic path, unchanged). Spark
Connect has no accumulators, so there each task writes its record as a small pickle file, named
by batch and partition, into a report place the driver made and reads after the batch's jobs
(:class:`ReportedStats`): under the checkpoint directory when there is one, which the server's
executors reach wherever they run, else a private directory of this machine (a local server).
No Spark counterpart: pyspark.streaming does not run on Connect.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from ..connect import ReportStore
    from ._environment import StreamEnvironment

__all__ = ["AccumulatedStats", "AccumulatorSink", "BatchStats", "BatchStatsParam", "ReportWriter", "ReportedStats", "batch_stats",
           "report_store"]


class BatchStatsParam:
    """An accumulator parameter for per-batch statistics: batch time (ms) -> a record with ``merge``, merged.

    Tasks add ``{batch: stats}``; the driver takes a finished batch's entry. ``addInPlace`` runs
    on the driver's accumulator-server thread while the graph takes an entry on another, so
    both go through one lock.
    """

    def __init__(self) -> None:
        """A parameter whose driver-side merges and takes are serialised."""
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {}  # shipped to tasks without the lock; each task gets its own

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()

    def zero(self, value: dict[int, Any]) -> dict[int, Any]:
        """An empty table (what each task starts from)."""
        return {}

    def addInPlace(self, value1: dict[int, Any], value2: dict[int, Any]) -> dict[int, Any]:
        """Merge ``value2`` into ``value1``."""
        with self._lock:
            for time, stats in value2.items():
                mine = value1.get(time)
                value1[time] = stats if mine is None else mine.merge(stats)
        return value1

    def peek(self, value: dict[int, Any], time: int) -> Any:
        """Batch ``time``'s entry so far (``None`` if no task reported one), left in place."""
        with self._lock:
            return value.get(time)

    def take(self, value: dict[int, Any], time: int) -> Any:
        """Remove and return batch ``time``'s entry (``None`` if no task reported one)."""
        with self._lock:
            return value.pop(time, None)


class TaskSink(Protocol):
    """What a task reports its partition's record of a batch to (pickled into the task)."""

    def add_partition(self, batch: int, partition: int, record: Any) -> None:
        """Report ``record`` of partition ``partition`` in batch ``batch`` (ms)."""
        ...

    def check(self) -> None:
        """Raise if a report could not reach the driver (before a task does what it could not report)."""
        ...


class BatchStats(Protocol):
    """A per-batch channel from the tasks to the driver; see the module docstring."""

    @property
    def sink(self) -> TaskSink:
        """What the tasks add to."""
        ...

    def peek(self, batch: int) -> Any:
        """Batch ``batch``'s records so far, merged (``None``: none), left in place."""
        ...

    def take(self, batch: int) -> Any:
        """Batch ``batch``'s records merged (``None``: none), forgotten afterwards."""
        ...


class AccumulatorSink:
    """The task side of :class:`AccumulatedStats`: adds ``{batch: record}`` to the accumulator (Spark merges a task's
    additions, and drops a failed task's)."""

    def __init__(self, accumulator: Any) -> None:
        """Add to ``accumulator``."""
        self.accumulator = accumulator

    def add_partition(self, batch: int, partition: int, record: Any) -> None:
        """See :class:`TaskSink`."""
        self.accumulator.add({batch: record})

    def check(self) -> None:
        """Nothing to check: Spark carries the additions back with the task's result."""


class AccumulatedStats:
    """The channel on a SparkContext: one accumulator of :class:`BatchStatsParam`."""

    def __init__(self, spark_context: Any) -> None:
        """An accumulator on ``spark_context``."""
        self._param = BatchStatsParam()
        # Duck-typed as pyspark's AccumulatorParam (zero, addInPlace): importing pyspark to
        # subclass it would make ``import streaming`` start loading Spark.
        self._accumulator = spark_context.accumulator({}, cast(Any, self._param))
        self._sink = AccumulatorSink(self._accumulator)

    @property
    def sink(self) -> TaskSink:
        """An :class:`AccumulatorSink` on the accumulator."""
        return self._sink

    def peek(self, batch: int) -> Any:
        """See :class:`BatchStats`."""
        return self._param.peek(self._accumulator.value, batch)

    def take(self, batch: int) -> Any:
        """See :class:`BatchStats`."""
        return self._param.take(self._accumulator.value, batch)


class ReportWriter:
    """The task side of :class:`ReportedStats`: a partition's record of a batch as the report file
    ``<place>/<batch>/<partition>`` (``streaming.connect.write_report``).

    Named by partition, so a partition run again (a retried or recomputed task) replaces its
    earlier record instead of counting twice.
    """

    def __init__(self, place: str) -> None:
        """Records go under ``place`` (a directory the driver made, as the tasks name it: a path or a URI)."""
        self.place = place

    def add_partition(self, batch: int, partition: int, record: Any) -> None:
        """See :class:`TaskSink`."""
        from ..connect import write_report

        write_report(self.place, str(batch), record, name=str(partition))

    def check(self) -> None:
        """Raises ``streaming.connect.ReportPlaceMissingError`` unless the place is where this task runs."""
        from ..connect import check_report_place

        check_report_place(self.place)


class ReportedStats:
    """The channel on Spark Connect: the tasks' report files in a :class:`~streaming.connect.ReportStore`.

    The store is the channel's own (a new one per stream and run, so a batch run again after a
    restart never reads an earlier run's files); it is removed with the channel, or at exit.
    """

    def __init__(self, store: ReportStore) -> None:
        """Reports into ``store`` (see :func:`report_store`)."""
        self._store = store
        self._writer = ReportWriter(store.place)

    @property
    def place(self) -> str:
        """Where the tasks write."""
        return self._store.place

    @property
    def sink(self) -> TaskSink:
        """A :class:`ReportWriter` for the store."""
        return self._writer

    def _merged(self, batch: int, *, remove: bool) -> Any:
        merged = None
        for record in self._store.records(str(batch), remove=False):
            merged = record if merged is None else merged.merge(record)
        if remove:
            self._store.remove(str(batch))
        return merged

    def peek(self, batch: int) -> Any:
        """See :class:`BatchStats`."""
        return self._merged(batch, remove=False)

    def take(self, batch: int) -> Any:
        """See :class:`BatchStats`."""
        return self._merged(batch, remove=True)


def report_store(env: StreamEnvironment) -> ReportStore:
    """Where a Connect stream's tasks report: under the checkpoint when there is one (the server's executors reach
    it, as its state stores do), else a private directory of this machine (a local server only)."""
    from ..connect import CheckpointReports, ReportFolder

    graph = env.graph
    if graph.checkpoint_dir is None:
        return ReportFolder()
    return CheckpointReports(graph.task_path(graph.checkpoint_dir))


def batch_stats(env: StreamEnvironment) -> BatchStats:
    """The channel for ``env``'s Spark side: an accumulator on a SparkContext, report files on Spark Connect."""
    if env.spark.kind == "connect":
        return ReportedStats(report_store(env))
    return AccumulatedStats(env.spark_context)
