"""EpochCoordinator: the driver's bookkeeping of a continuous run's epochs (Spark's ``EpochCoordinator``).

A plain synchronous state machine, as httpcore keeps its connection state: each message changes
the state and returns the I/O the driver must then do (write an offsets entry, commit an epoch,
fail the query) as action records. The driver's event loop feeds it from the TCP server, one
message at a time, and performs the actions in order; so it is tested without sockets or time.
"""

from __future__ import annotations

from typing import Any, Union

import attrs

from ._protocol import (
    CommitPartitionEpoch,
    CoordinatorMessage,
    CurrentEpoch,
    GetCurrentEpoch,
    IncrementAndGetEpoch,
    ReportPartitionOffset,
    SetReaderPartitions,
    SetWriterPartitions,
    StopContinuousExecutionWrites,
)

__all__ = [
    "AddOffsets",
    "BacklogExceeded",
    "CommitEpoch",
    "CoordinatorAction",
    "EpochCoordinator",
    "EpochCoordinatorStatistics",
    "EPOCH_QUEUE_EXCEEDED",
    "OFFSET_QUEUE_EXCEEDED",
    "COMMIT_QUEUE_EXCEEDED",
]

OFFSET_QUEUE_EXCEEDED = "Size of the partition offset queue has exceeded its maximum"
COMMIT_QUEUE_EXCEEDED = "Size of the partition commit queue has exceeded its maximum"
EPOCH_QUEUE_EXCEEDED = "Size of the epoch queue has exceeded its maximum"


@attrs.frozen
class AddOffsets:
    """Every reader partition reported the end of ``epoch``: write ``offsets/<epoch>`` (Spark's ``addOffset``).

    Attributes:
        epoch: the epoch whose end offsets are known.
        offsets: partition -> the offset it reported.
        rows: partition -> rows it read in the epoch.
    """

    epoch: int
    offsets: dict[int, Any]
    rows: dict[int, int]


@attrs.frozen
class CommitEpoch:
    """Commit ``epoch``: the sink's commit with every writer's message, then ``commits/<epoch>``.

    Emitted strictly in epoch order, each exactly once.
    """

    epoch: int
    messages: dict[int, Any]
    offsets: dict[int, Any]
    rows: dict[int, int]


@attrs.frozen
class BacklogExceeded:
    """A queue outgrew ``epochBacklogQueueSize``: the query must stop with ``message`` (Spark's IllegalStateException)."""

    message: str


CoordinatorAction = Union[AddOffsets, CommitEpoch, BacklogExceeded]


@attrs.frozen
class EpochCoordinatorStatistics:
    """A snapshot of the coordinator's queues (trio's ``statistics()`` convention)."""

    current_epoch: int
    last_committed_epoch: int
    partition_offsets: int
    partition_commits: int
    epochs_waiting: int
    dropped_messages: int


class EpochCoordinator:
    """Collects partition offsets and commits per epoch and commits whole epochs in order.

    Rules (Spark's): an epoch commits once every writer partition committed it and every reader
    partition reported its offset; an epoch complete before its predecessor is parked and
    committed right after it; stored reports for epochs before the last committed one are
    dropped once it commits; more stored reports or parked epochs than ``backlog_limit`` stops
    the query. After :class:`StopContinuousExecutionWrites` (or a backlog failure) every report
    and commit is dropped, so a run being stopped cannot commit anything more. Reports for
    epochs already committed (a stale task) and repeated commits are dropped too.
    """

    def __init__(self, start_epoch: int, backlog_limit: int = 10_000) -> None:
        """A coordinator whose first epoch is ``start_epoch`` (the one after the last committed).

        Raises:
            ValueError: a negative start epoch or a non-positive backlog limit.
        """
        if start_epoch < 0:
            raise ValueError(f"start epoch must be >= 0, got {start_epoch}")
        if backlog_limit < 1:
            raise ValueError(
                f"spark.sql.streaming.continuous.epochBacklogQueueSize must be positive, got {backlog_limit}")
        self.current_epoch = start_epoch
        self.last_committed_epoch = start_epoch - 1
        self.backlog_limit = backlog_limit
        self.num_reader_partitions: int | None = None
        self.num_writer_partitions: int | None = None
        self.stopping = False
        """Tasks end once they closed every epoch before the current one (a graceful stop)."""
        self.writes_stopped = False
        self._offsets: dict[tuple[int, int], tuple[Any, int]] = {}  # (epoch, partition) -> (offset, rows)
        self._commits: dict[tuple[int, int], Any] = {}  # (epoch, partition) -> commit message
        self._offsets_added: set[int] = set()
        self._waiting: set[int] = set()
        self._dropped = 0

    # -- asks --

    def increment_epoch(self) -> int:
        """Advance the driver's epoch (Spark's ``IncrementAndGetEpoch``); return the new epoch."""
        self.current_epoch += 1
        return self.current_epoch

    def current(self) -> CurrentEpoch:
        """What a task's ``GetCurrentEpoch`` poll is told."""
        return CurrentEpoch(self.current_epoch, self.stopping)

    def stop_writes(self) -> None:
        """Drop every report and commit from now on (Spark's ``StopContinuousExecutionWrites``)."""
        self.writes_stopped = True

    def handle(self, message: CoordinatorMessage) -> tuple[Any, list[CoordinatorAction]]:
        """Apply ``message``; return the ask's reply (``None`` for sends) and the actions to perform, in order.

        Raises:
            ValueError: a partition count that is not positive.
        """
        if isinstance(message, ReportPartitionOffset):
            return None, self._report_offset(message)
        if isinstance(message, CommitPartitionEpoch):
            return None, self._commit_partition(message)
        if isinstance(message, GetCurrentEpoch):
            return self.current(), []
        if isinstance(message, IncrementAndGetEpoch):
            return self.increment_epoch(), []
        if isinstance(message, SetReaderPartitions):
            self.num_reader_partitions = _positive(message.num_partitions, "reader")
            return None, []
        if isinstance(message, SetWriterPartitions):
            self.num_writer_partitions = _positive(message.num_partitions, "writer")
            return None, []
        if isinstance(message, StopContinuousExecutionWrites):
            self.stop_writes()
            return None, []
        raise TypeError(f"not a coordinator message: {message!r}")

    # -- sends --

    def _drops(self, epoch: int) -> bool:
        if self.writes_stopped or epoch <= self.last_committed_epoch:
            self._dropped += 1
            return True
        return False

    def _report_offset(self, message: ReportPartitionOffset) -> list[CoordinatorAction]:
        epoch = message.epoch
        if self._drops(epoch) or (epoch, message.partition) in self._offsets:
            return []
        self._offsets[(epoch, message.partition)] = (message.offset, message.rows)
        actions: list[CoordinatorAction] = []
        if epoch not in self._offsets_added and self._count(self._offsets, epoch) == self.num_reader_partitions:
            self._offsets_added.add(epoch)
            offsets, rows = self._offsets_of(epoch)
            actions.append(AddOffsets(epoch, offsets, rows))
            actions.extend(self._resolve(epoch))
        return self._checked(actions)

    def _commit_partition(self, message: CommitPartitionEpoch) -> list[CoordinatorAction]:
        epoch = message.epoch
        if self._drops(epoch) or (epoch, message.partition) in self._commits:
            return []
        self._commits[(epoch, message.partition)] = message.message
        return self._checked(self._resolve(epoch))

    @staticmethod
    def _count(store: dict[tuple[int, int], Any], epoch: int) -> int:
        return sum(1 for e, _ in store if e == epoch)

    def _offsets_of(self, epoch: int) -> tuple[dict[int, Any], dict[int, int]]:
        offsets = {p: value[0] for (e, p), value in self._offsets.items() if e == epoch}
        rows = {p: value[1] for (e, p), value in self._offsets.items() if e == epoch}
        return dict(sorted(offsets.items())), dict(sorted(rows.items()))

    def _complete(self, epoch: int) -> bool:
        return (epoch in self._offsets_added and self.num_writer_partitions is not None
                and self._count(self._commits, epoch) == self.num_writer_partitions)

    def _commit(self, epoch: int) -> CommitEpoch:
        messages = {p: m for (e, p), m in sorted(self._commits.items()) if e == epoch}
        offsets, rows = self._offsets_of(epoch)
        self.last_committed_epoch = epoch
        return CommitEpoch(epoch, messages, offsets, rows)

    def _resolve(self, epoch: int) -> list[CoordinatorAction]:
        if not self._complete(epoch):
            return []
        if self.last_committed_epoch != epoch - 1:
            self._waiting.add(epoch)  # parked until every epoch before it committed
            return []
        actions: list[CoordinatorAction] = [self._commit(epoch)]
        while self.last_committed_epoch + 1 in self._waiting:
            self._waiting.discard(self.last_committed_epoch + 1)
            actions.append(self._commit(self.last_committed_epoch + 1))
        # Every partition is past the last committed epoch for good: forget what came before it.
        last = self.last_committed_epoch
        for store in (self._offsets, self._commits):
            for key in [k for k in store if k[0] < last]:
                del store[key]
        self._offsets_added = {e for e in self._offsets_added if e >= last}
        return actions

    def _checked(self, actions: list[CoordinatorAction]) -> list[CoordinatorAction]:
        # Spark's checkProcessingQueueBoundaries, after each message.
        for size, message in ((len(self._offsets), OFFSET_QUEUE_EXCEEDED), (len(self._commits), COMMIT_QUEUE_EXCEEDED),
                              (len(self._waiting), EPOCH_QUEUE_EXCEEDED)):
            if size > self.backlog_limit:
                self.writes_stopped = True
                return [*actions, BacklogExceeded(message)]
        return actions

    def statistics(self) -> EpochCoordinatorStatistics:
        """The queues' sizes now."""
        return EpochCoordinatorStatistics(self.current_epoch, self.last_committed_epoch, len(self._offsets),
                                          len(self._commits), len(self._waiting), self._dropped)

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"<EpochCoordinator [epoch {s.current_epoch}, committed {s.last_committed_epoch} | "
                f"{s.partition_offsets} offsets, {s.partition_commits} commits, {s.epochs_waiting} parked]>")


def _positive(value: int, kind: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"the number of {kind} partitions must be a positive int, got {value!r}")
    return value
