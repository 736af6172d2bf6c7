"""How tasks hand per-batch numbers to the driver: an accumulator on a SparkContext, report files on Spark Connect.

``withWatermark`` (event-time statistics) and the keyed state operators (state numbers, the
partitions that ran) have each task add ``{batch ms: record}``, where a record has ``merge``; the
driver peeks at or takes a finished batch's records merged. Spark's accumulators carry that on a
SparkContext (:class:`AccumulatedStats`: the classic path, unchanged). Spark Connect has no
accumulators, so there each task writes its record as a small pickle file into a directory on
this machine, which a Connect server on this machine's disk (the setting the engine's state and
file inputs already take) reaches too, and the driver reads the batch's files after its jobs
(:class:`ReportedStats`). No Spark counterpart: pyspark.streaming does not run on Connect.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from ._environment import StreamEnvironment

__all__ = ["AccumulatedStats", "BatchStats", "BatchStatsParam", "ReportWriter", "ReportedStats", "batch_stats"]


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
    """What a task adds its numbers to (pickled into the task): ``add({batch ms: record})``."""

    def add(self, term: dict[int, Any]) -> None:
        """Add ``term``'s records."""
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


class AccumulatedStats:
    """The channel on a SparkContext: one accumulator of :class:`BatchStatsParam`."""

    def __init__(self, spark_context: Any) -> None:
        """An accumulator on ``spark_context``."""
        self._param = BatchStatsParam()
        # Duck-typed as pyspark's AccumulatorParam (zero, addInPlace): importing pyspark to
        # subclass it would make ``import streaming`` start loading Spark.
        self._accumulator = spark_context.accumulator({}, cast(Any, self._param))

    @property
    def sink(self) -> TaskSink:
        """The accumulator."""
        return cast(TaskSink, self._accumulator)

    def peek(self, batch: int) -> Any:
        """See :class:`BatchStats`."""
        return self._param.peek(self._accumulator.value, batch)

    def take(self, batch: int) -> Any:
        """See :class:`BatchStats`."""
        return self._param.take(self._accumulator.value, batch)


class ReportWriter:
    """The task side of :class:`ReportedStats`: each batch's record as a report file in ``<directory>/<batch>``
    (``streaming.connect.write_report``)."""

    def __init__(self, directory: str) -> None:
        """Records go under ``directory`` (a path the tasks and the driver both reach)."""
        self.directory = directory

    def add(self, term: dict[int, Any]) -> None:
        """Write each batch's record of ``term`` as a file of its own."""
        from ..connect import write_report

        for batch, record in term.items():
            write_report(os.path.join(self.directory, str(batch)), record)


class ReportedStats:
    """The channel on Spark Connect: the tasks' report files in a private directory (0700) of this machine's
    temporary directory (``streaming.connect.ReportFolder``, shared with Connect's accumulators).

    The directory is the channel's own (a new one per stream and run, so a batch run again after
    a restart never reads an earlier run's files); it is removed with the channel, or at exit.
    """

    def __init__(self) -> None:
        """A new, empty directory for the tasks' reports."""
        from ..connect import ReportFolder

        self._folder = ReportFolder()
        self._writer = ReportWriter(os.fspath(self._folder.directory))

    @property
    def directory(self) -> Path:
        """Where the tasks write."""
        return self._folder.directory

    @property
    def sink(self) -> TaskSink:
        """A :class:`ReportWriter` for the directory."""
        return self._writer

    def _merged(self, batch: int, *, remove: bool) -> Any:
        merged = None
        for record in self._folder.records(str(batch), remove=False):
            merged = record if merged is None else merged.merge(record)
        if remove:
            self._folder.remove(str(batch))
        return merged

    def peek(self, batch: int) -> Any:
        """See :class:`BatchStats`."""
        return self._merged(batch, remove=False)

    def take(self, batch: int) -> Any:
        """See :class:`BatchStats`."""
        return self._merged(batch, remove=True)


def batch_stats(env: StreamEnvironment) -> BatchStats:
    """The channel for ``env``'s Spark side: an accumulator on a SparkContext, report files on Spark Connect."""
    if env.spark.kind == "connect":
        return ReportedStats()
    return AccumulatedStats(env.spark_context)
