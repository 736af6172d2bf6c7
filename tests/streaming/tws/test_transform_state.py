"""transformWithState's value, list and map state on one partition's store: each operation, across batches."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from streaming.state import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    TransformWithStateError,
    TransformWithStateSpec,
)
from streaming.state._processor_rows import decode_row_key

from .tws_support import Batches

Script = Callable[[Any, "Scripted"], Any]


class Scripted(StatefulProcessor):
    """One value, one list and one map; each input row is a function of the key and the processor, whose result is output."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """The three variables."""
        self.handle = handle
        self.value = handle.getValueState("value", "string")
        self.list = handle.getListState("list", "int")
        self.map = handle.getMapState("map", "string", "int")

    def handleInputRows(self, key: Any, rows: Iterator[Script], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        """Run each row's script."""
        for script in rows:
            yield script(key, self)


def run(runs: Batches, *scripts: Script, key: Any = "k") -> list[Any]:
    """One batch running ``scripts`` on ``key``."""
    return runs.run([(key, script) for script in scripts], batch_ms=1000)


@pytest.fixture
def runs(tmp_path: Path) -> Batches:
    """Batches of the scripted processor."""
    return Batches(tmp_path, TransformWithStateSpec(Scripted(), "update", "None", False))


def test_value_state_holds_one_value_per_key_across_batches(runs: Batches) -> None:
    """update, get, exists and clear act on the current key only, and what a batch wrote the next one reads."""
    assert run(runs, lambda k, p: (p.value.exists(), p.value.get()), lambda k, p: p.value.update(k + "!"),
               lambda k, p: p.value.get()) == [(False, None), None, "k!"]
    assert run(runs, lambda k, p: p.value.get(), key="other") == [None]
    assert run(runs, lambda k, p: p.value.get(), lambda k, p: p.value.clear(), lambda k, p: p.value.exists()) == [
        "k!", None, False]
    assert runs.rows() == []


def test_list_state_appends_puts_and_clears_one_row_per_element(runs: Batches) -> None:
    """appendValue, appendList and put keep the order; each element is its own row; clear removes them all."""
    assert run(runs, lambda k, p: p.list.exists(), lambda k, p: p.list.appendValue(1), lambda k, p: p.list.appendList([2, 3]),
               lambda k, p: list(p.list.get())) == [False, None, None, [1, 2, 3]]
    assert len(runs.rows()) == 3
    assert run(runs, lambda k, p: p.list.appendValue(4), lambda k, p: list(p.list.get())) == [None, [1, 2, 3, 4]]
    assert run(runs, lambda k, p: p.list.put([9, 8]), lambda k, p: (p.list.exists(), list(p.list.get()))) == [
        None, (True, [9, 8])]
    assert [decode_row_key(key, {"list": "list"}).suffix for key, _ in runs.rows()] == [0, 1]
    assert run(runs, lambda k, p: p.list.clear(), lambda k, p: (p.list.exists(), list(p.list.get()))) == [
        None, (False, [])]


def test_map_state_keeps_one_row_per_entry(runs: Batches) -> None:
    """updateValue, getValue, containsKey, iterator, keys, values and removeKey, with any picklable map key."""
    assert run(runs, lambda k, p: p.map.updateValue("b", 2), lambda k, p: p.map.updateValue(("a", 1), 1),
               lambda k, p: p.map.updateValue("b", 3)) == [None, None, None]
    assert run(runs, lambda k, p: (p.map.exists(), p.map.getValue("b"), p.map.getValue("zz"), p.map.containsKey(("a", 1))),
               lambda k, p: sorted(p.map.iterator(), key=repr), lambda k, p: sorted(p.map.keys(), key=repr),
               lambda k, p: sorted(p.map.values())) == [
        (True, 3, None, True), [("b", 3), (("a", 1), 1)], ["b", ("a", 1)], [1, 3]]
    assert sorted(((decode_row_key(key, {"map": "map"}).suffix, pickle.loads(row[0] or b""))
                  for key, row in runs.rows()), key=repr) == sorted([("b", 3), (("a", 1), 1)], key=repr)
    assert run(runs, lambda k, p: p.map.removeKey("b"), lambda k, p: p.map.removeKey("never"),
               lambda k, p: list(p.map.keys())) == [None, None, [("a", 1)]]
    assert run(runs, lambda k, p: p.map.clear(), lambda k, p: (p.map.exists(), list(p.map.iterator()))) == [None, (False, [])]
    assert runs.rows() == []


def test_rows_of_one_key_leave_another_keys_rows_alone(runs: Batches) -> None:
    """Clearing one key's list and map leaves another key's alone."""
    runs.run([("a", lambda k, p: p.list.appendList([1, 2])), ("ab", lambda k, p: p.list.appendValue(3)),
              ("a", lambda k, p: p.map.updateValue(1, 1)), ("ab", lambda k, p: p.map.updateValue(2, 2))])
    assert runs.run([("ab", lambda k, p: (list(p.list.get()), dict(p.map.iterator()))),
                     ("a", lambda k, p: (p.list.clear(), p.map.clear())),
                     ("ab", lambda k, p: (list(p.list.get()), dict(p.map.iterator())))]) == [(None, None), ([3], {2: 2}), ([3], {2: 2})]


@pytest.mark.parametrize(("script", "error_class", "message"), [
    (lambda k, p: p.value.update(None), "ILLEGAL_STATE_STORE_VALUE.NULL_VALUE",
     "Illegal value provided to the State Store. Cannot write null values to State Store for StateName value."),
    (lambda k, p: p.list.put([]), "ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE",
     "Illegal value provided to the State Store. Cannot write empty list values to State Store for StateName list."),
    (lambda k, p: p.list.appendList([1, None]), "ILLEGAL_STATE_STORE_VALUE.NULL_VALUE",
     "Illegal value provided to the State Store. Cannot write null values to State Store for StateName list."),
    (lambda k, p: p.map.updateValue("x", None), "ILLEGAL_STATE_STORE_VALUE.NULL_VALUE",
     "Illegal value provided to the State Store. Cannot write null values to State Store for StateName map."),
    (lambda k, p: p.handle.getValueState("late", "int"), "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE",
     "Failed to perform stateful processor operation=get_value_state with invalid handle state=INITIALIZED."),
    (lambda k, p: p.handle.deleteIfExists("value"), "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE",
     "Failed to perform stateful processor operation=delete_if_exists with invalid handle state=INITIALIZED."),
])
def test_bad_state_operations_fail_the_batch_with_sparks_error_class(runs: Batches, script: Script, error_class: str,
                                                                      message: str) -> None:
    """A None value, an empty list, a variable made outside init: Spark's error, and nothing of the batch is kept."""
    run(runs, lambda k, p: p.value.update("kept"))
    with pytest.raises(TransformWithStateError) as caught:
        run(runs, lambda k, p: p.value.update("lost"), script)
    assert (caught.value.error_class, str(caught.value)) == (error_class, f"[{error_class}] {message}")
    assert run(runs, lambda k, p: p.value.get()) == ["kept"]


def test_a_processor_error_names_the_method_and_keeps_nothing(runs: Batches) -> None:
    """A handler raising fails the batch with TRANSFORM_WITH_STATE_USER_FUNCTION_ERROR, the original as its cause."""

    def boom(key: Any, processor: Scripted) -> None:
        processor.value.update("lost")
        raise KeyError("no such thing")

    with pytest.raises(TransformWithStateError) as caught:
        run(runs, boom)
    assert str(caught.value) == ("[TRANSFORM_WITH_STATE_USER_FUNCTION_ERROR] An error occurred in the user-defined "
                                 "function handleInputRows of the StatefulProcessor. Reason: KeyError: 'no such thing'.")
    assert isinstance(caught.value.__cause__, KeyError)
    assert runs.batch == 0 and runs.rows() == []


def test_state_variables_outside_a_key_are_refused(tmp_path: Path) -> None:
    """Reading a state variable in init (no grouping key yet) is refused with the handle's state."""

    class EagerReader(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            handle.getValueState("v", "int").get()

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
            return iter(())

    with pytest.raises(TransformWithStateError, match=r"operation=get with invalid handle state=CREATED\.$"):
        Batches(tmp_path, TransformWithStateSpec(EagerReader(), "update", "None", False)).run([("k", 1)])


@pytest.mark.parametrize("where", ["init", "close"])
def test_a_state_read_in_init_or_close_is_refused_with_the_handle_state_on_the_driver_too(tmp_path: Path, where: str) -> None:
    """The driver's run of init and close (it records the schema, with no store) refused a read with a bare
    AssertionError; it is the handle-state error the executors give."""
    from streaming.state._processor_schema import record_schema

    class Reader(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.value = handle.getValueState("v", "int")
            self.map = handle.getMapState("m", "int", "int")
            if where == "init":
                self.value.get()

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
            return iter(())

        def close(self) -> None:
            if where == "close":
                self.map.getValue(1)

    operation = "get" if where == "init" else "getValue"
    with pytest.raises(TransformWithStateError, match=r"^\[STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE\] "
                       rf"Failed to perform stateful processor operation={operation} with invalid handle state=CREATED\.$"):
        record_schema(tmp_path, 0, TransformWithStateSpec(Reader(), "update", "None", False))


@pytest.mark.parametrize(("make", "error"), [
    (lambda h: (h.getValueState("x", "int"), h.getListState("x", "int")),
     "[STATEFUL_PROCESSOR_DUPLICATE_STATE_VARIABLE_DEFINED] State variable with name x has already been defined in the "
     "StatefulProcessor."),
    (lambda h: h.getMapState(" x", "int", "int"),
     "[STATE_STORE_CANNOT_USE_COLUMN_FAMILY_WITH_INVALID_NAME] Failed to perform column family operation=get_map_state "
     "with invalid name= x. Column family name cannot be empty or include leading/trailing spaces or use the reserved "
     "keyword=default"),
    (lambda h: h.getValueState("x", "int", 1000),
     "[STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL] Cannot use TTL for state=x in timeMode=NoTime, use "
     "TimeMode.ProcessingTime() instead."),
])
def test_bad_state_variables_are_refused_in_init(tmp_path: Path, make: Callable[[StatefulProcessorHandle], Any],
                                                 error: str) -> None:
    """A name defined twice, a reserved or padded name, a TTL outside processing time: Spark's errors."""

    class Declares(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            make(handle)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
            return iter(())

    with pytest.raises(TransformWithStateError) as caught:
        Batches(tmp_path, TransformWithStateSpec(Declares(), "update", "None", False)).run([("k", 1)])
    assert str(caught.value) == error


def test_delete_if_exists_drops_every_keys_rows_of_the_variable(tmp_path: Path) -> None:
    """A processor that no longer uses a variable deletes it in init: its rows go, of every key, and it is counted."""
    first = Batches(tmp_path, TransformWithStateSpec(Scripted(), "update", "None", False))
    first.run([("a", lambda k, p: p.list.appendValue(1)), ("b", lambda k, p: p.list.appendValue(2)),
               ("a", lambda k, p: p.value.update("x"))])

    class Dropper(Scripted):
        def init(self, handle: StatefulProcessorHandle) -> None:
            handle.deleteIfExists("list")
            self.value = handle.getValueState("value", "string")

    first.spec = TransformWithStateSpec(Dropper(), "update", "None", False)
    assert first.run([("a", lambda k, p: p.value.get())]) == ["x"]
    assert first.metrics["numDeletedStateVars"] == 1 and first.metrics["numValueStateVars"] == 1
    assert [decode_row_key(key).variable for key, _ in first.rows()] == ["value"]


@pytest.mark.parametrize(("time_mode", "output_mode", "error"), [
    ("Sometimes", "update", "[STATEFUL_PROCESSOR_UNKNOWN_TIME_MODE] Unknown time mode Sometimes. Accepted timeMode modes "
                            "are 'none', 'processingTime', 'eventTime'"),
    ("None", "Complete", "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode: Complete. This "
                         "output mode is not supported for transformWithState on streaming DataFrames/DataSets."),
    ("None", "all", "[STREAMING_OUTPUT_MODE.INVALID] Invalid streaming output mode: all. Accepted output modes are "
                    "'Append', 'Complete', 'Update'."),
])
def test_unknown_modes_are_refused_when_the_spec_is_made(time_mode: str, output_mode: str, error: str) -> None:
    """Time and output modes are checked up front with Spark's error classes."""
    with pytest.raises(TransformWithStateError) as caught:
        TransformWithStateSpec(Scripted(), output_mode, time_mode, False)
    assert str(caught.value) == error


def test_modes_are_taken_in_any_case() -> None:
    """"EVENTTIME" and "Append" are accepted and kept in lower case."""
    spec = TransformWithStateSpec(Scripted(), "Append", "EVENTTIME", True)
    assert (spec.output_mode, spec.time_mode) == ("append", "eventtime")
