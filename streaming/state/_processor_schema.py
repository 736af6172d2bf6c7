"""transformWithState's state variables recorded in the checkpoint, and the check of a restarted processor against them.

Spark's ``TransformWithStateOperatorProperties`` and ``StateSchemaCompatibilityChecker`` for the
operator: the driver runs the processor's ``init`` on a recording handle at start, then writes
``state/<operator>/schema`` (the format is in ``_processor_rows``) or checks it. As in Spark, a
variable may be added or dropped, a value field renamed; a variable's kind, the types of its
schema, the time mode and the output mode may not change.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable
from typing import Any

from scheduler import CheckpointPath, task_checkpoint_path

from ._processor_errors import TimeMode, TransformWithStateError, call_user
from ._processor_rows import MAP, SCHEMA_FILE
from ._processor_state import ProcessorRun, StatefulProcessorHandle, VariableInfo
from ._protocol import NO_TIMESTAMP
from ._store_format import StateStoreError
from ._transform import TransformWithStateSpec

__all__ = ["record_schema", "schema_types"]

_ALIASES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint", "dec": "decimal",
            "numeric": "decimal"}


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside any brackets."""
    parts, depth, start = [], 0, 0
    for at, char in enumerate(text):
        if char in "<([":
            depth += 1
        elif char in ">)]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:at])
            start = at + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _type_name(text: str) -> str:
    text = "".join(text.lower().split())
    head, bracket, rest = text.partition("(")
    return _ALIASES.get(head, head) + bracket + rest


def schema_types(schema: str) -> tuple[str, ...]:
    """The field types of a schema's text, without the field names: what must stay the same across restarts.

    Takes a DDL string (``"s string, n long"``, or a bare type ``"int"``) or a pyspark type's simple
    string (``"struct<s:string,n:bigint>"``); type names are compared in lower case, aliases resolved.
    """
    text = schema.strip()
    if text.lower().startswith("struct<") and text.endswith(">"):
        return tuple(_type_name(field.partition(":")[2]) for field in _split_top(text[len("struct<"):-1]))
    return tuple(_type_name(_field_type(field)) for field in _split_top(text))


def _field_type(field: str) -> str:
    """A DDL field's type: what follows its name (``"s string"``, ``"s: string"``), or all of it for a bare type."""
    depth = 0
    for at, char in enumerate(field):
        if char in "<([":
            depth += 1
        elif char in ">)]":
            depth -= 1
        elif depth == 0 and (char.isspace() or char == ":"):
            return field[at + 1:].lstrip(": \t")
    return field


def _schema_record(spec: TransformWithStateSpec, variables: Iterable[VariableInfo]) -> dict[str, Any]:
    return {"format": 1, "variables": [{"name": info.name, "kind": info.kind, "ttl": info.ttl_ms, "schema": info.schema}
                                       for info in variables],
            "timeMode": spec.time_mode, "outputMode": spec.output_mode}


def _kind_name(kind: str) -> str:
    return {"value": "ValueState", "list": "ListState", "map": "MapState"}.get(kind, kind)


def _check_variable(name: str, entry: dict[str, Any], info: VariableInfo) -> None:
    """Refuse ``info`` if it cannot read the rows ``entry`` (the recorded variable) describes."""
    if entry["kind"] != info.kind:
        raise TransformWithStateError(
            "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE",
            f"Cannot change {name} to {_kind_name(info.kind)} between query restarts. Please set {name} to "
            f"{_kind_name(entry['kind'])}, or restart with a new checkpoint directory.")
    old_schema, new_schema = entry["schema"], info.schema
    if info.kind == MAP and isinstance(old_schema, list) and isinstance(new_schema, list):
        (old_key, old_value), (new_key, new_value) = old_schema, new_schema
        if schema_types(old_key) != schema_types(new_key):
            raise TransformWithStateError(
                "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
                "Provided key schema does not match existing state key schema. Please check number and type of "
                f"fields. Existing key_schema={old_key} and new key_schema={new_key}.")
    else:
        old_value, new_value = str(old_schema), str(new_schema)
    # A time-to-live is part of the stored value (Spark's rows carry ttlExpirationMs beside it): adding or removing one
    # is refused as Spark refuses it (rows written without one would never expire); changing its duration is not.
    old_ttl, new_ttl = entry.get("ttl") is not None, info.ttl_ms is not None
    if schema_types(old_value) != schema_types(new_value) or old_ttl != new_ttl:
        raise TransformWithStateError(
            "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
            "Provided value schema does not match existing state value schema. Please check number and type "
            f"of fields. Existing value_schema={_stored(old_value, old_ttl)} and new value_schema="
            f"{_stored(new_value, new_ttl)}.")


def _stored(schema: str, ttl: bool) -> str:
    """A value schema as the store keeps it: with a time-to-live, the value beside its expiry (Spark's words)."""
    return f"struct<value: struct<{schema}>, ttlExpirationMs: bigint>" if ttl else schema


def record_schema(checkpoint_root: str | os.PathLike[str] | CheckpointPath, operator_id: int,
                  spec: TransformWithStateSpec) -> None:
    """On the driver, at start: run the processor's ``init`` on a recording handle, then write the operator's
    schema file, or check the one the checkpoint holds against it and record what changed compatibly.

    Raises:
        TransformWithStateError: ``init`` broke a rule or raised; the time mode, the output mode, a variable's
            kind or the types of its schema changed since the checkpoint was written (Spark's error classes).
            Variables may be added, or dropped (a dropped one stays recorded unless ``deleteIfExists`` removed it).
        StateStoreError: the schema file is damaged (it names the file).
    """
    run = ProcessorRun(None, spec.time_mode, NO_TIMESTAMP)
    processor = copy.deepcopy(spec.processor)
    call_user("init", processor.init, StatefulProcessorHandle(run))
    call_user("close", processor.close)
    path = task_checkpoint_path(checkpoint_root) / "state" / str(operator_id) / SCHEMA_FILE
    data = path.read_bytes()
    variables = dict(run.variables)
    if data is not None:
        try:
            old = json.loads(data.decode())
            old_variables = {entry["name"]: entry for entry in old["variables"]}
            old_time_mode, old_output_mode = old["timeMode"], old["outputMode"]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as exc:  # nested too deep: damage too
            raise StateStoreError(f"state store file {path} does not hold a transformWithState schema") from exc
        for config, before, now in (("timeMode", TimeMode.SCALA_NAMES.get(old_time_mode, old_time_mode),
                                     TimeMode.SCALA_NAMES[spec.time_mode]),
                                    ("outputMode", str(old_output_mode).capitalize(), spec.output_mode.capitalize())):
            if before != now:
                raise TransformWithStateError(
                    "STATE_STORE_INVALID_CONFIG_AFTER_RESTART",
                    f"Cannot change {config} from {before} to {now} between restarts. Please set {config} to "
                    f"{before}, or restart with a new checkpoint directory.")
        merged: dict[str, VariableInfo] = {}
        for name, entry in old_variables.items():  # the recorded order first, then the added variables
            info = variables.get(name)
            if info is None:
                if name not in run.deleted:  # kept: its rows are still in the store
                    merged[name] = VariableInfo(name, entry["kind"], entry["ttl"], entry["schema"])
                continue
            _check_variable(name, entry, info)
            merged[name] = info
        variables = {**merged, **{name: info for name, info in variables.items() if name not in merged}}
        if _schema_record(spec, variables.values()) == old:
            return
    else:
        path.parent.mkdirs()
    path.write_replacing(json.dumps(_schema_record(spec, variables.values()), indent=1).encode())
