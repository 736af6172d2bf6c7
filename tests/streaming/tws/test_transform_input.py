"""transformWithState's input: key order, late rows per time mode, the initial state, the processor's lifecycle."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Iterator

import pytest

from streaming.state import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    TransformWithStateError,
    TransformWithStateSpec,
    initial_rows_by_key,
)

from .tws_support import Batches


class Totals(StatefulProcessor):
    """A running total per key; the initial state adds to it; every call is logged in the output."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """One value; ``calls`` logs this copy's calls."""
        self.total = handle.getValueState("total", "int")
        self.calls: list[Any] = ["init"]

    def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> None:  # noqa: N803
        """Add the initial row to the total (its return is ignored, as pyspark ignores it)."""
        self.total.update((self.total.get() or 0) + initialState)
        self.calls.append(("initial", key, initialState))

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        """Add the rows (``(event ms, amount)``) and output the total, after this copy's calls so far."""
        amounts = [amount for _, amount in rows]
        self.total.update((self.total.get() or 0) + sum(amounts))
        yield (*self.calls, ("rows", key, amounts, self.total.get()))
        self.calls = []


def event_ms(row: tuple[Any, int]) -> Any:
    """A row's event time (epoch ms or a datetime)."""
    return row[0]


def test_keys_run_in_pickled_order_with_rows_in_arrival_order(tmp_path: Path) -> None:
    """Each key is called once per batch with all its rows, in the order they came."""
    runs = Batches(tmp_path, TransformWithStateSpec(Totals(), "update", "None", False))
    assert runs.run([("b", (0, 1)), ("a", (0, 2)), ("b", (0, 3)), ("a", (0, 4))]) == [
        ("init", ("rows", "a", [2, 4], 6)), (("rows", "b", [1, 3], 4),)]


def test_a_fresh_processor_copy_runs_init_each_batch(tmp_path: Path) -> None:
    """The spec's processor is copied per batch: each batch starts with init, and the original is untouched."""
    processor = Totals()
    runs = Batches(tmp_path, TransformWithStateSpec(processor, "update", "None", False))
    assert runs.run([("a", (0, 1))]) == [("init", ("rows", "a", [1], 1))]
    assert runs.run([("a", (0, 1))]) == [("init", ("rows", "a", [1], 2))]
    assert not hasattr(processor, "calls")


def test_the_initial_state_goes_first_and_in_the_first_batch_only(tmp_path: Path) -> None:
    """Each initial row of a key is handed over before its input; a key with only initial state gets no input call."""
    runs = Batches(tmp_path, TransformWithStateSpec(Totals(), "update", "None", False))
    initial = [("a", 10), ("c", 100), ("a", 20)]
    assert runs.run([("a", (0, 1)), ("b", (0, 2))], initial=initial) == [
        ("init", ("initial", "a", 10), ("initial", "a", 20), ("rows", "a", [1], 31)), (("rows", "b", [2], 2),)]
    assert runs.run([("c", (0, 1)), ("a", (0, 1))], initial=initial) == [
        ("init", ("rows", "a", [1], 32)), (("rows", "c", [1], 101),)]


def test_initial_rows_are_grouped_by_key_in_order() -> None:
    """initial_rows_by_key keeps every row of a key (Spark allows several), in their order."""
    grouped = initial_rows_by_key([("a", 1), ("b", 2), ("a", 3)])
    assert sorted(grouped.values()) == [("a", [1, 3]), ("b", [2])]


@pytest.mark.parametrize(("time_mode", "dropped"), [("EventTime", 2), ("ProcessingTime", 0), ("None", 0)])
def test_late_rows_are_dropped_only_in_event_time(tmp_path: Path, time_mode: str, dropped: int) -> None:
    """Rows at or before the late-rows watermark are dropped in EventTime mode only, and counted."""
    runs = Batches(tmp_path, TransformWithStateSpec(Totals(), "update", time_mode, True, event_ms))
    outputs = runs.run([("a", (999, 1)), ("a", (1000, 2)), ("a", (1001, 4))], batch_ms=5000, watermark=1000, late=1000)
    assert outputs == [("init", ("rows", "a", [4] if dropped else [1, 2, 4], 4 if dropped else 7))]
    assert runs.stats is not None and runs.stats.num_rows_dropped_by_watermark == dropped


def test_late_rows_are_judged_in_microseconds(tmp_path: Path) -> None:
    """A datetime 0.5 ms after the watermark is not late (Spark compares microseconds); one at it is."""
    start = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    rows = [("a", (start + datetime.timedelta(microseconds=us), amount)) for us, amount in ((1_000_000, 1), (1_000_500, 2))]
    runs = Batches(tmp_path, TransformWithStateSpec(Totals(), "update", "EventTime", True, event_ms))
    assert runs.run(rows, batch_ms=5000, watermark=1000, late=1000) == [("init", ("rows", "a", [2], 2))]
    assert runs.stats is not None and runs.stats.num_rows_dropped_by_watermark == 1


def test_a_key_whose_rows_are_all_late_is_not_called(tmp_path: Path) -> None:
    """Dropping every row of a key leaves no input call for it."""
    runs = Batches(tmp_path, TransformWithStateSpec(Totals(), "update", "EventTime", True, event_ms))
    assert runs.run([("a", (5, 1))], batch_ms=5000, watermark=10, late=10) == []


def test_close_runs_after_the_timers_and_its_errors_fail_the_batch(tmp_path: Path) -> None:
    """close() is the last call of a partition's batch; if it raises, nothing of the batch is kept."""
    class BadClose(Totals):
        def close(self) -> None:
            raise OSError("disk gone")

    runs = Batches(tmp_path, TransformWithStateSpec(BadClose(), "update", "None", False))
    with pytest.raises(TransformWithStateError, match=r"function close of the StatefulProcessor\. Reason: OSError: disk gone\.$"):
        runs.run([("a", (0, 1))])
    assert runs.rows() == []


def test_handle_initial_state_results_are_dropped_unread(tmp_path: Path) -> None:
    """As in pyspark, handleInitialState's return value is dropped unread: a list there outputs nothing."""

    class Returns(Totals):
        def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> Any:  # noqa: N803
            self.total.update(initialState)
            return ["dropped"]

    runs = Batches(tmp_path, TransformWithStateSpec(Returns(), "update", "None", False))
    assert runs.run([("a", (0, 1))], initial=[("a", 10)]) == [("init", ("rows", "a", [1], 11))]


def test_a_handle_initial_state_that_yields_fails_the_batch_instead_of_losing_the_state(tmp_path: Path) -> None:
    """A generator handleInitialState (whose body pyspark never runs) fails the batch saying why; nothing is committed."""

    class Yields(Totals):
        def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> Any:  # noqa: N803
            self.total.update(initialState)
            yield "never"

    runs = Batches(tmp_path, TransformWithStateSpec(Yields(), "update", "None", False))
    with pytest.raises(TransformWithStateError, match=r"handleInitialState .* TypeError: handleInitialState must not yield"):
        runs.run([("a", (0, 1))], initial=[("a", 10)])
    assert runs.rows() == []
