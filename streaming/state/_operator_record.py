"""check_operator: which stateful operator keeps an operator id's state, recorded at the first start and checked at
every restart (Spark's state metadata check), so another operator never reads or overwrites its rows."""

from __future__ import annotations

import json
import os

from scheduler import CheckpointPath, task_checkpoint_path

from ._processor_rows import SCHEMA_FILE
from ._reader import FLAT_MAP_GROUPS_WITH_STATE
from ._store_format import StateStoreError
from ._transform import TRANSFORM_WITH_STATE_OPERATOR

__all__ = ["OPERATOR_FILE", "StateOperatorMismatchError", "check_operator"]

OPERATOR_FILE = "operator"
"""The file in ``state/<operator id>/`` naming the operator that writes its state: ``{"operatorName": ..., "timeout": ...}``."""

NOT_MATCH = "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"
INVALID_CONFIG = "STATE_STORE_INVALID_CONFIG_AFTER_RESTART"
VALUE_SCHEMA = "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
NO_TIMEOUT = "NoTimeout"


class StateOperatorMismatchError(StateStoreError):
    """A restart's stateful operator is not the one whose state the checkpoint holds under its id, or its timeout kind
    changed; ``error_class`` is Spark's, the message is ``[CLASS] text``."""

    def __init__(self, error_class: str, message: str) -> None:
        """Name the rule broken (Spark's error class) and what differs."""
        super().__init__(f"[{error_class}] {message}")
        self.error_class = error_class


def check_operator(checkpoint_root: str | os.PathLike[str] | CheckpointPath, operator_id: int, name: str,
                   timeout: str | None = None) -> None:
    """On the driver, before the run's first batch of operator ``operator_id``: record that ``name`` (and, for
    ``flatMapGroupsWithState``, its ``timeout`` kind) keeps its state, or check the record the checkpoint holds.

    A checkpoint written before the record existed tells its operator by its files: a ``transformWithState`` schema
    file, else state partitions with files in them (``flatMapGroupsWithState``, timeout not known).

    Raises:
        StateOperatorMismatchError: the state was written by another operator (Spark's
            ``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``), or with another timeout kind: to or from
            ``NoTimeout`` Spark's ``STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE``, between the two timeouts
            ``STATE_STORE_INVALID_CONFIG_AFTER_RESTART`` (pyspark 4.3 accepts that change and reads the stored
            timeouts as the new kind). Its rows would be read as this operator's, or lost.
        StateStoreError: the record is damaged (it names the file).
    """
    directory = task_checkpoint_path(checkpoint_root) / "state" / str(operator_id)
    path = directory / OPERATOR_FILE
    data = path.read_bytes()
    recorded: dict[str, str] | None
    if data is None:
        inferred = _inferred_name(directory)
        recorded = None if inferred is None else {"operatorName": inferred}
    else:
        try:
            value = json.loads(data.decode())
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()) or "operatorName" not in value:
                raise ValueError("not an object of strings naming the operator")
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise StateStoreError(f"state store file {path} is damaged: it must name the operator that writes the state "
                                  f"of operator {operator_id}, as {{\"operatorName\": \"{name}\"}} ({exc}); restore it "
                                  "from a copy") from exc
        recorded = value
    if recorded is not None:
        before = recorded["operatorName"]
        if before != name:
            raise StateOperatorMismatchError(
                NOT_MATCH,
                "Streaming stateful operator name does not match with the operator in state metadata. This likely to "
                "happen when user adds/removes/changes stateful operator of existing streaming query. Stateful "
                f"operators in the metadata: [(OperatorId: {operator_id} -> OperatorName: {before})]; Stateful "
                f"operators in current batch: [(OperatorId: {operator_id} -> OperatorName: {name})]. "
                f"(state of {directory}; restart with the operator that wrote it, or with a new checkpoint directory)")
        old_timeout = recorded.get("timeout")
        if timeout is not None and old_timeout is not None and old_timeout != timeout:
            if NO_TIMEOUT in (old_timeout, timeout):  # Spark's state rows hold a timeout timestamp only with a timeout
                raise StateOperatorMismatchError(
                    VALUE_SCHEMA, "Provided value schema does not match existing state value schema. Please check number "
                    f"and type of fields. Existing value_schema={_value_schema(old_timeout)} and new value_schema="
                    f"{_value_schema(timeout)}. (operator {operator_id}, {directory}: timeoutConf {old_timeout} to {timeout})")
            raise StateOperatorMismatchError(  # pyspark accepts this one (its guide forbids it) and misreads the timeouts
                INVALID_CONFIG,
                f"Cannot change timeoutConf from {old_timeout} to {timeout} between restarts. Please set timeoutConf "
                f"to {old_timeout}, or restart with a new checkpoint directory. (operator {operator_id}, {directory}: "
                "its state's timeouts were set as the first kind and would be read as the second)")
        if data is not None and (timeout is None or old_timeout is not None):
            return
    wanted = {"operatorName": name, **({} if timeout is None else {"timeout": timeout})}
    directory.mkdirs()
    path.write_replacing(json.dumps(wanted).encode())


def _inferred_name(directory: CheckpointPath) -> str | None:
    """The operator an unrecorded state directory belongs to, by its files (``None``: no state written yet)."""
    names = directory.listdir() if directory.is_dir() else []
    if SCHEMA_FILE in names:
        return TRANSFORM_WITH_STATE_OPERATOR
    for entry in names:
        if entry.isdigit() and (directory / entry).is_dir() and (directory / entry).listdir():
            return FLAT_MAP_GROUPS_WITH_STATE
    return None


def _value_schema(timeout: str) -> str:
    """What a flatMapGroupsWithState state row holds under ``timeout``, as Spark's state schema has it."""
    return "struct<groupState:binary>" if timeout == NO_TIMEOUT else "struct<groupState:binary,timeoutTimestamp:bigint>"
