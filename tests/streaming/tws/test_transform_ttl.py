"""transformWithState's time to live (Spark's rules) on one partition, on manual batch times."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from streaming.state import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    TransformWithStateError,
    TransformWithStateSpec,
)

from .tws_support import Batches


class Expiring(StatefulProcessor):
    """A value, a list and a map with a TTL of 1 s; rows ``"write"``, ``"append"``, ``("put", k)`` write, ``"read"`` reads."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Three variables with ``ttlDurationMs=1000``."""
        self.value = handle.getValueState("value", "int", 1000)
        self.list = handle.getListState("list", "int", ttlDurationMs=1000)
        self.map = handle.getMapState("map", "string", "int", 1000)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        """Write what the rows say, then output what is left."""
        now = timerValues.getCurrentProcessingTimeInMs()
        for row in rows:
            if row == "write":
                self.value.update(now)
            elif row == "append":
                self.list.appendValue(now)
            elif isinstance(row, tuple):
                self.map.updateValue(row[1], now)
        yield (now, self.value.get(), list(self.list.get()), dict(self.map.iterator()),
               self.value.exists(), self.list.exists(), self.map.exists())


@pytest.fixture
def runs(tmp_path: Path) -> Batches:
    """Batches of the expiring processor, in processing time."""
    return Batches(tmp_path, TransformWithStateSpec(Expiring(), "update", "ProcessingTime", False))


def test_a_value_written_at_t_is_gone_at_exactly_t_plus_ttl(runs: Batches) -> None:
    """Written at 1000 with a TTL of 1000: read at 1999, gone (and its row removed) at 2000."""
    assert runs.run([("k", "write")], batch_ms=1000) == [(1000, 1000, [], {}, True, False, False)]
    assert runs.run([("k", "read")], batch_ms=1999) == [(1999, 1000, [], {}, True, False, False)]
    assert runs.metrics["numValuesRemovedDueToTTLExpiry"] == 0
    assert runs.run([("k", "read")], batch_ms=2000) == [(2000, None, [], {}, False, False, False)]
    assert runs.metrics["numValuesRemovedDueToTTLExpiry"] == 1 and runs.rows() == []


def test_only_writes_extend_a_ttl_reads_do_not(runs: Batches) -> None:
    """Reading every batch keeps nothing alive; a write at 1500 moves the expiry to 2500."""
    runs.run([("k", "write")], batch_ms=1000)
    runs.run([("k", "read")], batch_ms=1500)
    assert runs.run([("k", "read")], batch_ms=2000)[0][1] is None
    runs.run([("k", "write")], batch_ms=2100)
    runs.run([("k", "write")], batch_ms=2600)
    assert runs.run([("k", "read")], batch_ms=3599) == [(3599, 2600, [], {}, True, False, False)]


def test_list_elements_and_map_entries_expire_one_by_one(runs: Batches) -> None:
    """Each list element and map entry keeps the expiry of its own write."""
    runs.run([("k", "append"), ("k", ("put", "a")), ("k", ("put", "b"))], batch_ms=1000)
    runs.run([("k", "append"), ("k", ("put", "b"))], batch_ms=1500)
    assert runs.run([("k", "read")], batch_ms=2000) == [(2000, None, [1500], {"b": 1500}, False, True, True)]
    assert runs.metrics["numValuesRemovedDueToTTLExpiry"] == 2
    assert runs.run([("k", "append")], batch_ms=2200) == [(2200, None, [1500, 2200], {"b": 1500}, False, True, True)]
    assert runs.run([("k", "read")], batch_ms=2500) == [(2500, None, [2200], {}, False, True, False)]
    assert runs.run([], batch_ms=3200) == [] and runs.rows() == []


def test_expired_rows_of_keys_without_input_are_removed_too(runs: Batches) -> None:
    """Clean-up follows the expired rows, not the keys of the batch: a key with no input loses its expired values."""
    runs.run([("a", "write"), ("b", "append")], batch_ms=1000)
    runs.run([("c", "write")], batch_ms=1500)
    assert runs.run([], batch_ms=2000) == []
    assert runs.metrics["numValuesRemovedDueToTTLExpiry"] == 2 and len(runs.rows()) == 1


def test_ttl_metrics_count_the_variables_with_a_ttl(runs: Batches) -> None:
    """Each variable with a TTL is counted in its kind's ``...WithTTLVars`` metric."""
    runs.run([("k", "read")], batch_ms=5)
    assert {name: runs.metrics[name] for name in runs.metrics if name.startswith("num")} == {
        "numValueStateVars": 1, "numListStateVars": 1, "numMapStateVars": 1, "numValueStateWithTTLVars": 1,
        "numListStateWithTTLVars": 1, "numMapStateWithTTLVars": 1, "numDeletedStateVars": 0, "numRegisteredTimers": 0,
        "numDeletedTimers": 0, "numExpiredTimers": 0, "numValuesRemovedDueToTTLExpiry": 0}


@pytest.mark.parametrize("ttl", [0, -5])
def test_a_ttl_must_be_positive(tmp_path: Path, ttl: int) -> None:
    """A TTL of zero or less is refused with STATEFUL_PROCESSOR_TTL_DURATION_MUST_BE_POSITIVE."""

    class Bad(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            handle.getListState("l", "int", ttl)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
            return iter(())

    with pytest.raises(TransformWithStateError) as caught:
        Batches(tmp_path, TransformWithStateSpec(Bad(), "update", "ProcessingTime", False)).run([("k", 1)])
    assert str(caught.value) == ("[STATEFUL_PROCESSOR_TTL_DURATION_MUST_BE_POSITIVE] TTL duration must be greater than "
                                 "zero for State store operation=update on state=l.")


def test_a_ttl_in_event_time_is_refused(tmp_path: Path) -> None:
    """TTL runs on processing time: in EventTime mode it is refused (Spark 4.3's handle does the same)."""
    with pytest.raises(TransformWithStateError, match=r"^\[STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL\] "
                                                      r"Cannot use TTL for state=value in timeMode=EventTime,"):
        Batches(tmp_path, TransformWithStateSpec(Expiring(), "update", "EventTime", True)).run([("k", "read")])
