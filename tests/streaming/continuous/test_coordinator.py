"""The epoch coordinator's rules, without sockets or time (Spark's EpochCoordinatorSuite, and more)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.continuous import (
    COMMIT_QUEUE_EXCEEDED,
    EPOCH_QUEUE_EXCEEDED,
    OFFSET_QUEUE_EXCEEDED,
    AddOffsets,
    BacklogExceeded,
    CommitEpoch,
    CommitPartitionEpoch,
    CurrentEpoch,
    EpochCoordinator,
    GetCurrentEpoch,
    IncrementAndGetEpoch,
    ReportPartitionOffset,
    SetReaderPartitions,
    SetWriterPartitions,
    StopContinuousExecutionWrites,
)


def coordinator(partitions: int = 2, start: int = 1, backlog: int = 10_000) -> EpochCoordinator:
    c = EpochCoordinator(start, backlog)
    c.handle(SetReaderPartitions(partitions))
    c.handle(SetWriterPartitions(partitions))
    return c


def feed(c: EpochCoordinator, *messages: object) -> list[object]:
    actions: list[object] = []
    for message in messages:
        actions.extend(c.handle(message)[1])  # type: ignore[arg-type]
    return actions


def commits(actions: list[object]) -> list[int]:
    return [a.epoch for a in actions if isinstance(a, CommitEpoch)]


def test_asks_answer_the_epoch() -> None:
    """IncrementAndGetEpoch advances and returns the epoch; GetCurrentEpoch reports it with the stop flag."""
    c = coordinator(start=3)
    assert c.handle(GetCurrentEpoch())[0] == CurrentEpoch(3, False)
    assert c.handle(IncrementAndGetEpoch())[0] == 4
    c.stopping = True
    assert c.handle(GetCurrentEpoch())[0] == CurrentEpoch(4, True)


def test_epoch_commits_when_every_partition_reported_and_committed() -> None:
    """An epoch commits only after all reader offsets and all writer commits, whatever their order."""
    c = coordinator()
    assert feed(c, CommitPartitionEpoch(0, 1, "m0"), ReportPartitionOffset(1, 1, 11, rows=3)) == []
    assert feed(c, CommitPartitionEpoch(1, 1, "m1")) == []
    actions = feed(c, ReportPartitionOffset(0, 1, 10, rows=2))
    assert actions == [AddOffsets(1, {0: 10, 1: 11}, {0: 2, 1: 3}), CommitEpoch(1, {0: "m0", 1: "m1"}, {0: 10, 1: 11}, {0: 2, 1: 3})]
    assert c.last_committed_epoch == 1


def test_offsets_are_added_once_all_readers_reported_even_before_commits() -> None:
    """AddOffsets (the offsets entry) comes as soon as every reader reported, before any commit."""
    c = coordinator()
    actions = feed(c, ReportPartitionOffset(0, 1, 10), ReportPartitionOffset(1, 1, 11))
    assert actions == [AddOffsets(1, {0: 10, 1: 11}, {0: 0, 1: 0})]


def test_an_early_epoch_is_parked_and_committed_right_after_its_predecessor() -> None:
    """Epoch 2 complete before epoch 1: nothing commits until 1 does, then 1 and 2 in order."""
    c = coordinator()
    two = feed(c, *(ReportPartitionOffset(p, 2, 20 + p) for p in range(2)), *(CommitPartitionEpoch(p, 2) for p in range(2)))
    assert commits(two) == []
    assert c.statistics().epochs_waiting == 1
    one = feed(c, *(ReportPartitionOffset(p, 1, 10 + p) for p in range(2)), *(CommitPartitionEpoch(p, 1) for p in range(2)))
    assert commits(one) == [1, 2]
    assert c.statistics().epochs_waiting == 0


def test_duplicates_and_stale_reports_are_dropped() -> None:
    """A repeated commit does not count twice; reports for committed epochs are dropped."""
    c = coordinator()
    assert feed(c, CommitPartitionEpoch(0, 1), CommitPartitionEpoch(0, 1), ReportPartitionOffset(0, 1, 1),
                ReportPartitionOffset(1, 1, 1)) == [AddOffsets(1, {0: 1, 1: 1}, {0: 0, 1: 0})]
    assert commits(feed(c, CommitPartitionEpoch(1, 1))) == [1]
    assert feed(c, ReportPartitionOffset(0, 1, 5), CommitPartitionEpoch(0, 1)) == []
    assert c.statistics().dropped_messages == 2


def test_state_before_the_last_committed_epoch_is_forgotten() -> None:
    """After epochs 1..3 commit, nothing of epochs before 3 stays stored."""
    c = coordinator()
    for epoch in (1, 2, 3):
        feed(c, *(ReportPartitionOffset(p, epoch, epoch) for p in range(2)), *(CommitPartitionEpoch(p, epoch) for p in range(2)))
    stats = c.statistics()
    assert (stats.last_committed_epoch, stats.partition_offsets, stats.partition_commits) == (3, 2, 2)


def test_messages_after_stop_writes_are_dropped() -> None:
    """After StopContinuousExecutionWrites a complete epoch no longer commits (a stopped run writes nothing)."""
    c = coordinator()
    feed(c, ReportPartitionOffset(0, 1, 1), ReportPartitionOffset(1, 1, 1), CommitPartitionEpoch(0, 1))
    c.handle(StopContinuousExecutionWrites())
    assert feed(c, CommitPartitionEpoch(1, 1)) == []
    assert c.last_committed_epoch == 0


@pytest.mark.parametrize(("messages", "error"), [
    ([ReportPartitionOffset(0, e, 0) for e in (1, 2, 3)], OFFSET_QUEUE_EXCEEDED),
    ([CommitPartitionEpoch(0, e) for e in (1, 2, 3)], COMMIT_QUEUE_EXCEEDED),
])
def test_backlog_limits_stop_the_query_with_sparks_messages(messages: list[object], error: str) -> None:
    """More stored offsets or commits than epochBacklogQueueSize gives Spark's message, and writes stop."""
    c = coordinator(partitions=2, backlog=2)
    actions = feed(c, *messages)
    assert actions == [BacklogExceeded(error)]
    assert c.writes_stopped


def test_parked_epoch_backlog_limit() -> None:
    """More parked epochs than the limit gives Spark's epoch-queue message."""
    c = coordinator(partitions=1, backlog=3)
    actions: list[object] = []
    for epoch in (2, 3, 4):
        actions += feed(c, ReportPartitionOffset(0, epoch, epoch), CommitPartitionEpoch(0, epoch))
    # 3 offsets + 3 commits stored, 3 parked: at the limit, not over it.
    assert not [a for a in actions if isinstance(a, BacklogExceeded)]
    c.backlog_limit = 2
    # The limit is checked on the next message: the offsets queue (3 > 2) is found first, as in Spark.
    assert feed(c, ReportPartitionOffset(0, 5, 5))[-1] == BacklogExceeded(OFFSET_QUEUE_EXCEEDED)
    c2 = coordinator(partitions=1, backlog=100)
    for epoch in range(2, 6):
        feed(c2, ReportPartitionOffset(0, epoch, epoch), CommitPartitionEpoch(0, epoch))
    c2.backlog_limit = 3
    c2._offsets.clear()  # only the parked epochs are over the limit
    c2._commits.clear()
    assert feed(c2, CommitPartitionEpoch(0, 9)) == [BacklogExceeded(EPOCH_QUEUE_EXCEEDED)]


def test_bad_partition_counts_and_start_epochs_are_refused() -> None:
    """Partition counts must be positive ints; the start epoch non-negative; the backlog positive."""
    c = EpochCoordinator(0)
    with pytest.raises(ValueError, match="the number of reader partitions must be a positive int, got 0"):
        c.handle(SetReaderPartitions(0))
    with pytest.raises(ValueError, match="start epoch must be >= 0, got -1"):
        EpochCoordinator(-1)
    with pytest.raises(ValueError, match="epochBacklogQueueSize must be positive, got 0"):
        EpochCoordinator(0, 0)


@settings(max_examples=200, deadline=None)
@given(partitions=st.integers(1, 3), epochs=st.integers(1, 5), data=st.data())
def test_any_arrival_order_commits_every_epoch_once_in_order(partitions: int, epochs: int, data: st.DataObject) -> None:
    """Whatever order reports and commits arrive in, every epoch commits exactly once, in epoch order, after its offsets."""
    c = coordinator(partitions=partitions)
    messages: list[object] = []
    for epoch in range(1, epochs + 1):
        for p in range(partitions):
            messages += [ReportPartitionOffset(p, epoch, epoch * 10 + p, rows=epoch), CommitPartitionEpoch(p, epoch, (epoch, p))]
    order = data.draw(st.permutations(messages))
    actions = feed(c, *order)
    assert commits(actions) == list(range(1, epochs + 1))
    added = [a.epoch for a in actions if isinstance(a, AddOffsets)]
    assert sorted(added) == list(range(1, epochs + 1))
    for action in actions:
        if isinstance(action, CommitEpoch):
            assert action.epoch in added[: added.index(action.epoch) + 1]
            assert action.messages == {p: (action.epoch, p) for p in range(partitions)}
            assert action.offsets == {p: action.epoch * 10 + p for p in range(partitions)}
