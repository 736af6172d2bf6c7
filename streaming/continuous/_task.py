"""One long-running task of a continuous query: read a partition, apply the operations, write, cut epochs.

The counterpart of Spark's ``ContinuousDataSourceRDD`` with ``ContinuousQueuedDataReader`` and
``ContinuousWriteRDD``: it runs on an executor (or a thread, without Spark) until the driver says
stop. Each epoch is one pass of the operations over the rows read while the driver was in that
epoch, so ``mapPartitions`` functions see an epoch's rows as one partition, as in Spark.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator, Sequence

import attrs

from scheduler import StreamingError

from ._protocol import CommitPartitionEpoch, CoordinatorClient, CurrentEpoch, GetCurrentEpoch, ReportPartitionOffset
from ._sinks import ContinuousSink
from ._sources import ContinuousSource, PartitionReader

__all__ = ["ContinuousTaskRetryError", "PartitionFunction", "TASK_RETRY_MESSAGE", "TaskSpec", "compose", "run_task"]

TASK_RETRY_MESSAGE = "Continuous execution does not support task retry"

PartitionFunction = Callable[[int, Iterable[Any]], Iterable[Any]]
"""pyspark's ``mapPartitionsWithIndex`` form: ``f(partition_index, rows) -> rows``."""


class ContinuousTaskRetryError(StreamingError, RuntimeError):
    """A continuous task was attempted again (Spark's ``ContinuousTaskRetryException``)."""

    def __init__(self) -> None:
        """Spark's message."""
        super().__init__(TASK_RETRY_MESSAGE)


def compose(functions: Sequence[PartitionFunction]) -> PartitionFunction | None:
    """One partition function applying ``functions`` in order (``None`` for none)."""
    if not functions:
        return None
    chain = tuple(functions)

    def composed(index: int, rows: Iterable[Any]) -> Iterable[Any]:
        for function in chain:
            rows = function(index, rows)
        return rows

    return composed


@attrs.frozen
class TaskSpec:
    """What one task needs: where the coordinator is, which partition, from where, through what, to where.

    Attributes:
        host: the coordinator's host, as the executors reach the driver.
        port: the coordinator's port.
        token: the run's secret token: the task proves it in its hello (the token itself never
            crosses the coordinator's port). It reaches the executor inside this spec, in the
            job's closure, over Spark's RPC (authenticate and encrypt that with
            ``spark.authenticate`` and ``spark.network.crypto.enabled`` where others can listen).
        partition: the global partition id (reader and writer partition).
        source: the source this partition belongs to.
        source_partition: the partition's index inside its source.
        start_offset: where it starts reading.
        start_epoch: the run's first epoch.
        operations: the composed partition function, or ``None``.
        sink: the sink.
        poll_interval_ms: how often the task asks the driver's epoch (``executorPollIntervalMs``).
    """

    host: str
    port: int
    token: str = attrs.field(repr=False)  # a secret: never in a log line or a traceback's locals
    partition: int
    source: ContinuousSource
    source_partition: int
    start_offset: Any
    start_epoch: int
    operations: PartitionFunction | None
    sink: ContinuousSink
    poll_interval_ms: int = 100


def _attempt_number() -> int:
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - a task run by the thread launcher without pyspark
        return 0
    context = TaskContext.get()
    return 0 if context is None else int(context.attemptNumber())


class _EpochRows:
    """The rows of the task's current epoch: iterates until the driver's epoch moved past it."""

    def __init__(self, reader: PartitionReader, client: CoordinatorClient, poll_s: float, next_poll: float) -> None:
        self.reader = reader
        self.client = client
        self.poll_s = poll_s
        self.next_poll = next_poll
        self.rows = 0
        self.driver: CurrentEpoch | None = None

    def until_epoch_after(self, epoch: int) -> Iterator[Any]:
        self.rows = 0
        reader, client = self.reader, self.client
        while True:
            records = reader.read(self.next_poll)
            if records:
                self.rows += len(records)
                yield from records
            if time.monotonic() >= self.next_poll:
                self.driver = client.ask(GetCurrentEpoch())
                self.next_poll = time.monotonic() + self.poll_s
                if self.driver.epoch > epoch or self.driver.stop:
                    return


def run_task(spec: TaskSpec, clients: list[CoordinatorClient] | None = None) -> int:
    """Run one partition until the driver stops the query; return the epochs it closed.

    ``clients``: a list the task's connection to the driver is added to, for a launcher that may
    end it from another thread (:meth:`CoordinatorClient.abort`).

    Raises:
        ContinuousTaskRetryError: this is a re-attempt of the task (Spark fails the query).
        ConnectionError: the driver went away without stopping the task.
        Exception: what the source, the operations or the sink raised (the epoch's writer is
            aborted first).
    """
    attempt = _attempt_number()
    if attempt != 0:
        raise ContinuousTaskRetryError()
    client = CoordinatorClient(spec.host, spec.port, spec.token, spec.partition, attempt)
    if clients is not None:
        clients.append(client)
    reader = spec.source.open_reader(spec.source_partition, spec.start_offset)
    closed = 0
    try:
        epoch = spec.start_epoch
        poll_s = spec.poll_interval_ms / 1000.0
        rows = _EpochRows(reader, client, poll_s, time.monotonic())  # the first poll at once
        operations, sink, partition = spec.operations, spec.sink, spec.partition
        while True:
            writer = sink.open_writer(partition, epoch)
            try:
                epoch_rows = rows.until_epoch_after(epoch)
                produced: Iterable[Any] = epoch_rows
                if operations is not None:
                    produced = operations(partition, produced)
                write = writer.write
                for row in produced:
                    write(row)
                # A partition function may stop reading before the epoch ended (any(), islice):
                # the rest of the epoch is read, and dropped as that function chose, so the epoch
                # still ends where the driver cut it.
                for _ in epoch_rows:
                    pass
            except BaseException as exc:
                writer.abort(exc)
                raise
            driver = rows.driver
            assert driver is not None
            if driver.epoch <= epoch:  # stopped inside the task's epoch: it is not committed
                writer.abort(StreamingError(f"the query stopped during epoch {epoch}"))
                break
            # Spark's order: the reader's offset for the epoch, then the writer's commit.
            client.send(ReportPartitionOffset(partition, epoch, reader.offset(), rows.rows))
            client.send(CommitPartitionEpoch(partition, epoch, writer.commit()))
            closed += 1
            epoch += 1
            while epoch < driver.epoch:  # epochs the task slept through: empty, but each is closed
                empty = sink.open_writer(partition, epoch)
                client.send(ReportPartitionOffset(partition, epoch, reader.offset(), 0))
                client.send(CommitPartitionEpoch(partition, epoch, empty.commit()))
                closed += 1
                epoch += 1
            if driver.stop:
                break
    finally:
        reader.close()
        client.close()
    return closed


def run_tasks(specs: Iterable[TaskSpec]) -> Iterator[int]:
    """Run each spec of a Spark partition (there is one) and yield the epochs it closed (for ``mapPartitions``)."""
    for spec in specs:
        yield run_task(spec)
