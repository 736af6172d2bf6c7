"""transformWithState's schema record in the checkpoint and its check at restart (Spark's error classes)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from streaming.state import (
    StatefulProcessor,
    StatefulProcessorHandle,
    StateStoreError,
    TimerValues,
    TransformWithStateError,
    TransformWithStateSpec,
    record_schema,
)
from streaming.state._processor_schema import schema_types

Declare = Callable[[StatefulProcessorHandle], Any]


class Declares(StatefulProcessor):
    """A processor whose init runs ``declare``."""

    def __init__(self, declare: Declare) -> None:
        """Keep the declaration."""
        self.declare = declare

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the variables."""
        self.declare(handle)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        """No output."""
        return iter(())


def spec(declare: Declare, time_mode: str = "ProcessingTime", output_mode: str = "Update") -> TransformWithStateSpec:
    """A spec of a processor declaring ``declare``."""
    return TransformWithStateSpec(Declares(declare), output_mode, time_mode, False)


def three(handle: StatefulProcessorHandle) -> None:
    """A value with a TTL, a list and a map."""
    handle.getValueState("count", "bigint", 60_000)
    handle.getListState("events", "string")
    handle.getMapState("perMerchant", "string", "int")


def schema_file(root: Path) -> Path:
    """Where operator 0's schema goes."""
    return root / "state" / "0" / "schema"


def test_the_first_start_records_the_variables_and_modes(tmp_path: Path) -> None:
    """The schema file holds each variable's name, kind, TTL and schema text, and the two modes."""
    record_schema(tmp_path, 0, spec(three))
    assert json.loads(schema_file(tmp_path).read_text()) == {
        "format": 1, "timeMode": "processingtime", "outputMode": "update", "variables": [
            {"name": "count", "kind": "value", "ttl": 60_000, "schema": "bigint"},
            {"name": "events", "kind": "list", "ttl": None, "schema": "string"},
            {"name": "perMerchant", "kind": "map", "ttl": None, "schema": ["string", "int"]}]}


def test_a_restart_with_the_same_processor_leaves_the_file_alone(tmp_path: Path) -> None:
    """Restarting with the same variables (declared in another order) passes and does not rewrite the file."""
    record_schema(tmp_path, 0, spec(three))

    def reordered(handle: StatefulProcessorHandle) -> None:
        handle.getMapState("perMerchant", "string", "int")
        handle.getListState("events", "string")
        handle.getValueState("count", "bigint", 60_000)

    before = schema_file(tmp_path).stat().st_mtime_ns
    record_schema(tmp_path, 0, spec(three))
    record_schema(tmp_path, 0, spec(reordered))
    assert schema_file(tmp_path).stat().st_mtime_ns == before


def test_a_time_to_live_of_another_duration_is_allowed(tmp_path: Path) -> None:
    """As in pyspark 4.3, a variable's time-to-live may change its duration between restarts (not come or go)."""
    record_schema(tmp_path, 0, spec(three))
    record_schema(tmp_path, 0, spec(lambda h: h.getValueState("count", "bigint", 5_000)))


def test_adding_a_variable_is_allowed_and_recorded(tmp_path: Path) -> None:
    """A new variable passes the check and is recorded after the old ones; one no longer declared stays recorded."""
    record_schema(tmp_path, 0, spec(three))

    def changed(handle: StatefulProcessorHandle) -> None:
        handle.getListState("events", "string")
        handle.getValueState("last", "timestamp")

    record_schema(tmp_path, 0, spec(changed))
    names = [entry["name"] for entry in json.loads(schema_file(tmp_path).read_text())["variables"]]
    assert names == ["count", "events", "perMerchant", "last"]


def test_a_variable_deleted_with_delete_if_exists_leaves_the_record(tmp_path: Path) -> None:
    """deleteIfExists in init removes the variable from the record, so it may come back as another kind."""
    record_schema(tmp_path, 0, spec(three))

    def drop(handle: StatefulProcessorHandle) -> None:
        handle.deleteIfExists("events")

    record_schema(tmp_path, 0, spec(drop))
    assert [e["name"] for e in json.loads(schema_file(tmp_path).read_text())["variables"]] == ["count", "perMerchant"]
    record_schema(tmp_path, 0, spec(lambda handle: handle.getValueState("events", "int")))


@pytest.mark.parametrize(("declare", "time_mode", "output_mode", "error"), [
    (lambda h: h.getValueState("events", "string"), "ProcessingTime", "Update",
     "[STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE] Cannot change events to ValueState between query restarts. Please set "
     "events to ListState, or restart with a new checkpoint directory."),
    (lambda h: h.getListState("events", "int"), "ProcessingTime", "Update",
     "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing state value schema. "
     "Please check number and type of fields. Existing value_schema=string and new value_schema=int."),
    (lambda h: h.getListState("events", "string"), "EventTime", "Update",
     "[STATE_STORE_INVALID_CONFIG_AFTER_RESTART] Cannot change timeMode from ProcessingTime to EventTime between "
     "restarts. Please set timeMode to ProcessingTime, or restart with a new checkpoint directory."),
    (lambda h: h.getMapState("perMerchant", "bigint", "int"), "ProcessingTime", "Update",
     "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key schema. Please "
     "check number and type of fields. Existing key_schema=string and new key_schema=bigint."),
    (lambda h: h.getValueState("count", "n bigint, extra int", 60_000), "ProcessingTime", "Update",
     "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing state value schema. "
     "Please check number and type of fields. Existing value_schema=struct<value: struct<bigint>, ttlExpirationMs: "
     "bigint> and new value_schema=struct<value: struct<n bigint, extra int>, ttlExpirationMs: bigint>."),
    # A time-to-live removed or added (lane L2: accepted, and rows written without one never expired), as pyspark 4.3.
    (lambda h: h.getValueState("count", "bigint"), "ProcessingTime", "Update",
     "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing state value schema. "
     "Please check number and type of fields. Existing value_schema=struct<value: struct<bigint>, ttlExpirationMs: "
     "bigint> and new value_schema=bigint."),
    (lambda h: h.getListState("events", "string", 1_000), "ProcessingTime", "Update",
     "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing state value schema. "
     "Please check number and type of fields. Existing value_schema=string and new value_schema=struct<value: "
     "struct<string>, ttlExpirationMs: bigint>."),
    (lambda h: h.getMapState("perMerchant", "string", "int", 1_000), "ProcessingTime", "Update",
     "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing state value schema. "
     "Please check number and type of fields. Existing value_schema=int and new value_schema=struct<value: "
     "struct<int>, ttlExpirationMs: bigint>."),
    (three, "ProcessingTime", "Append",
     "[STATE_STORE_INVALID_CONFIG_AFTER_RESTART] Cannot change outputMode from Update to Append between restarts. "
     "Please set outputMode to Update, or restart with a new checkpoint directory."),
])
def test_an_incompatible_restart_is_refused(tmp_path: Path, declare: Declare, time_mode: str, output_mode: str,
                                            error: str) -> None:
    """Another kind, other types (of a value, of a map's key), another time or output mode: Spark's error, no change."""
    record_schema(tmp_path, 0, spec(three))
    before = schema_file(tmp_path).read_bytes()
    with pytest.raises(TransformWithStateError) as caught:
        record_schema(tmp_path, 0, spec(declare, time_mode, output_mode))
    assert str(caught.value) == error
    assert schema_file(tmp_path).read_bytes() == before


def test_renamed_fields_and_type_aliases_pass_the_check(tmp_path: Path) -> None:
    """As in Spark, only the types count: a renamed field, ``long`` for ``bigint``, a pyspark type's simple string."""
    record_schema(tmp_path, 0, spec(lambda h: h.getValueState("v", "s string, n long")))

    class Struct:
        def simpleString(self) -> str:
            return "struct<t:string,count:bigint>"

    record_schema(tmp_path, 0, spec(lambda h: h.getValueState("v", "renamed STRING, n bigint")))
    record_schema(tmp_path, 0, spec(lambda h: h.getValueState("v", Struct())))
    assert json.loads(schema_file(tmp_path).read_text())["variables"] == [
        {"name": "v", "kind": "value", "ttl": None, "schema": "struct<t:string,count:bigint>"}]


@pytest.mark.parametrize(("schema", "types"), [
    ("int", ("int",)), ("s: string, n long", ("string", "bigint")), ("struct<s:string,n:bigint>", ("string", "bigint")),
    ("s decimal(10, 2), m map<string, int>", ("decimal(10,2)", "map<string,int>")), ("Integer", ("int",)),
])
def test_schema_types_reads_ddl_and_simple_strings(schema: str, types: tuple[str, ...]) -> None:
    """The field types of a DDL string or a simple string, names dropped, aliases resolved."""
    assert schema_types(schema) == types


def test_a_damaged_schema_file_is_refused_by_name(tmp_path: Path) -> None:
    """A schema file that is not the record fails with StateStoreError naming it."""
    schema_file(tmp_path).parent.mkdir(parents=True)
    schema_file(tmp_path).write_text("{not json")
    with pytest.raises(StateStoreError) as caught:
        record_schema(tmp_path, 0, spec(three))
    assert str(caught.value) == f"state store file {schema_file(tmp_path)} does not hold a transformWithState schema"


def test_init_errors_surface_at_start(tmp_path: Path) -> None:
    """A rule broken in init (a TTL in time mode None) fails the start, before any file is written."""
    with pytest.raises(TransformWithStateError, match=r"^\[STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL\]"):
        record_schema(tmp_path, 0, spec(three, "None"))
    assert not schema_file(tmp_path).exists()


def test_the_schema_record_works_through_fsspec() -> None:
    """A checkpoint reached through fsspec (``memory://``) records and checks the schema the same way."""
    import fsspec

    root = f"memory:///aiodstream-test-{uuid.uuid4().hex}"
    try:
        record_schema(root, 3, spec(three))
        record_schema(root, 3, spec(three))
        with pytest.raises(TransformWithStateError, match=r"^\[STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE\]"):
            record_schema(root, 3, spec(lambda h: h.getMapState("count", "string", "int")))
        recorded = json.loads(fsspec.filesystem("memory").cat_file(f"{root[len('memory://'):]}/state/3/schema"))
        assert [entry["name"] for entry in recorded["variables"]] == ["count", "events", "perMerchant"]
    finally:
        fsspec.filesystem("memory").rm(root[len("memory://"):], recursive=True)
