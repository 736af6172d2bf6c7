"""transformWithState's order of work and its timers (Spark 4's rules) on one partition, on manual times."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from streaming.state import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    TransformWithStateError,
    TransformWithStateSpec,
)

from .tws_support import Batches


class Reminders(StatefulProcessor):
    """Each row is a command: ``("at", t)`` registers a timer at t, ``("del", t)`` deletes it; a fired timer says so."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """One value: the rows seen."""
        self.handle = handle
        self.seen = handle.getValueState("seen", "int")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        """Apply the commands; output the key, the count of rows seen and its timers."""
        count = self.seen.get() or 0
        for command, at in rows:
            count += 1
            if command == "at":
                self.handle.registerTimer(at)
            else:
                self.handle.deleteTimer(at)
        self.seen.update(count)
        yield ("data", key, count, list(self.handle.listTimers()))

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,  # noqa: N803
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Any]:  # noqa: N803
        """Output the timer, the batch's times and the state the data pass left."""
        yield ("timer", key, expiredTimerInfo.getExpiryTimeInMs(), timerValues.getCurrentProcessingTimeInMs(),
               timerValues.getCurrentWatermarkInMs(), self.seen.get())


def test_processing_time_timers_fire_at_or_before_the_batch_time_after_the_data_pass(tmp_path: Path) -> None:
    """A timer at exactly the batch time fires, after every key's data; one later waits; each fires once."""
    runs = Batches(tmp_path, TransformWithStateSpec(Reminders(), "update", "ProcessingTime", False))
    assert runs.run([("a", ("at", 2000)), ("b", ("at", 2001))], batch_ms=1000) == [
        ("data", "a", 1, [2000]), ("data", "b", 1, [2001])]
    assert runs.run([("b", ("at", 5000)), ("a", ("at", 9000))], batch_ms=2000) == [
        ("data", "a", 2, [2000, 9000]), ("data", "b", 2, [2001, 5000]), ("timer", "a", 2000, 2000, -1, 2)]
    assert runs.metrics["numExpiredTimers"] == 1 and runs.metrics["numRegisteredTimers"] == 2
    assert runs.run([], batch_ms=5000) == [("timer", "b", 2001, 5000, -1, 2), ("timer", "b", 5000, 5000, -1, 2)]
    assert runs.run([("a", ("del", 9000))], batch_ms=9000) == [("data", "a", 3, [])]


def test_a_timer_registered_already_due_fires_in_the_same_batch(tmp_path: Path) -> None:
    """The data pass registers a timer in the past: the timer pass of the same batch fires it."""
    runs = Batches(tmp_path, TransformWithStateSpec(Reminders(), "append", "processingtime", False))
    assert runs.run([("k", ("at", 500))], batch_ms=1000) == [("data", "k", 1, [500]), ("timer", "k", 500, 1000, -1, 1)]
    assert runs.run([], batch_ms=2000) == []


def test_a_timer_deleted_by_the_data_pass_does_not_fire(tmp_path: Path) -> None:
    """A due timer that its key's data deletes in the same batch never fires."""
    runs = Batches(tmp_path, TransformWithStateSpec(Reminders(), "update", "ProcessingTime", False))
    runs.run([("k", ("at", 1500))], batch_ms=1000)
    assert runs.run([("k", ("del", 1500))], batch_ms=2000) == [("data", "k", 2, [])]
    assert runs.metrics["numDeletedTimers"] == 1 and runs.metrics["numExpiredTimers"] == 0


def test_event_time_timers_fire_at_or_before_the_watermark(tmp_path: Path) -> None:
    """In EventTime mode a timer fires when the watermark reaches it (exactly is enough), not on processing time."""
    runs = Batches(tmp_path, TransformWithStateSpec(Reminders(), "update", "EventTime", True))
    assert runs.run([("k", ("at", 10_000))], batch_ms=50_000, watermark=0) == [("data", "k", 1, [10_000])]
    assert runs.run([], batch_ms=60_000, watermark=9_999) == []
    assert runs.run([], batch_ms=70_000, watermark=10_000) == [("timer", "k", 10_000, 70_000, 10_000, 1)]


def test_event_time_timers_never_fire_without_a_watermark(tmp_path: Path) -> None:
    """Without a watermark there is no event time, so no event-time timer fires."""
    runs = Batches(tmp_path, TransformWithStateSpec(Reminders(), "update", "EventTime", False))
    assert runs.run([("k", ("at", 10))], batch_ms=50_000, watermark=20) == [("data", "k", 1, [10])]
    assert runs.run([], batch_ms=60_000, watermark=30) == []


def test_a_timer_handler_deleting_a_later_due_timer_of_its_key_stops_it(tmp_path: Path) -> None:
    """Two timers of a key are due; the first one's call deletes the second, which then does not fire."""

    class FirstWins(Reminders):
        def handleExpiredTimer(self, key: Any, timerValues: TimerValues,  # noqa: N803
                               expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Any]:  # noqa: N803
            for expiry in self.handle.listTimers():
                if expiry != expiredTimerInfo.getExpiryTimeInMs():
                    self.handle.deleteTimer(expiry)
            yield ("timer", key, expiredTimerInfo.getExpiryTimeInMs())

    runs = Batches(tmp_path, TransformWithStateSpec(FirstWins(), "update", "ProcessingTime", False))
    runs.run([("k", ("at", 100)), ("k", ("at", 200))], batch_ms=50)
    assert runs.run([], batch_ms=1000) == [("timer", "k", 100)]
    assert [key for key, _ in runs.rows() if key.startswith(b"t")] == []


def test_timers_in_time_mode_none_are_refused_with_sparks_error_class(tmp_path: Path) -> None:
    """registerTimer in "None" mode fails the batch with STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE."""
    runs = Batches(tmp_path, TransformWithStateSpec(Reminders(), "update", "None", False))
    with pytest.raises(TransformWithStateError) as caught:
        runs.run([("k", ("at", 5))], batch_ms=1)
    assert str(caught.value) == ("[STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE] Failed to perform "
                                 "stateful processor operation=register_timer with invalid timeMode=NoTime")
    assert caught.value.error_class == "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE"
    assert runs.batch == 0 and runs.rows() == []


def test_timer_values_are_minus_one_in_time_mode_none(tmp_path: Path) -> None:
    """In "None" mode TimerValues holds -1 for both times, whatever the batch's times are."""

    class Times(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            pass

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
            yield (timerValues.getCurrentProcessingTimeInMs(), timerValues.getCurrentWatermarkInMs())

    assert Batches(tmp_path, TransformWithStateSpec(Times(), "update", "none", True)).run(
        [("k", 1)], batch_ms=7000, watermark=3000) == [(-1, -1)]
