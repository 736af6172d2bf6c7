"""One partition of one batch of ``transformWithState`` (Spark's ``TransformWithStateExec``), on the state store.

Per partition and batch, in Spark's order: a fresh copy of the processor runs ``init`` on a
handle; late rows are dropped (time mode "EventTime" with a watermark only: an event time at or
before the previous batch's watermark); in the first batch only, each initial-state row of a key
goes to ``handleInitialState``; the data pass calls ``handleInputRows`` once per key with input
(keys in the order of their pickled bytes, rows in arrival order; a key's initial state comes
just before its rows); then the timer pass calls ``handleExpiredTimer`` for each timer whose
expiry is at or before the batch's processing time ("ProcessingTime") or watermark ("EventTime"),
earliest first, after every data-pass write: a timer deleted by the data pass does not fire, one
registered already due fires now. A fired timer is deleted after its call. Then the rows of TTL
variables whose expiry is at or before the batch time are removed, and ``close()`` runs.

Keys, rows and state values cross the store pickled; keys must pickle the same way every time.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from scheduler import CheckpointPath, task_checkpoint_path

from ._operator_stats import StateOperatorStats
from ._processor import ExpiredTimerInfo, StatefulProcessor, TimerValues
from ._processor_errors import TimeMode, TransformWithStateError
from ._processor_rows import SCHEMA_FILE, key_bytes
from ._processor_state import (
    CLOSED,
    DATA_PROCESSED,
    INITIALIZED,
    TIMER_PROCESSED,
    ProcessorRun,
    StatefulProcessorHandle,
    VariableInfo,
    due_timers,
)
from ._protocol import NO_TIMESTAMP, VersionedStore
from ._store_format import StateStoreError
from ._store_provider import StateStoreProvider

__all__ = [
    "TRANSFORM_WITH_STATE_OPERATOR",
    "TransformResult",
    "TransformWithStateSpec",
    "initial_rows_by_key",
    "record_schema",
    "run_transform_batch",
    "run_transform_partition",
]

TRANSFORM_WITH_STATE_OPERATOR = "transformWithStateInPySparkExec"
"""The operator's name in a batch's progress (``stateOperators[].operatorName``): pyspark 4.3's for its row-based
``transformWithState``, which this operator mirrors (``transformWithStateInPandas`` reports
``transformWithStateInPandasExec``, Scala's operator ``transformWithStateExec``)."""

_OUTPUT_MODES = ("append", "update")


def _check_output_mode(value: object) -> str:
    if isinstance(value, str) and value.lower() in _OUTPUT_MODES:
        return value.lower()
    if isinstance(value, str) and value.lower() == "complete":
        raise TransformWithStateError("STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION",
                                      f"Invalid streaming output mode: {value}. This output mode is not supported for "
                                      "transformWithState on streaming DataFrames/DataSets.")
    raise TransformWithStateError("STREAMING_OUTPUT_MODE.INVALID",
                                  f"Invalid streaming output mode: {value}. Accepted output modes are 'Append', "
                                  "'Complete', 'Update'.")


def _check_time_mode(value: object) -> str:
    return TimeMode.check(value)


@attrs.frozen
class TransformWithStateSpec:
    """What an operator runs: the processor, its output and time modes, its event times.

    Attributes:
        processor: the user's :class:`StatefulProcessor`; each partition's batch runs a fresh copy.
        output_mode: ``"append"`` or ``"update"`` (any case; stored in lower case).
        time_mode: ``"none"``, ``"processingtime"`` or ``"eventtime"`` (any case; stored in lower case).
        watermark_present: whether the input has a watermark.
        event_time: the event time of a row (epoch ms), for dropping late rows (time mode "EventTime" only).

    Raises:
        TransformWithStateError: an unknown output or time mode (Spark's error classes).
    """

    processor: StatefulProcessor
    output_mode: str = attrs.field(converter=_check_output_mode)
    time_mode: str = attrs.field(converter=_check_time_mode)
    watermark_present: bool
    event_time: Callable[[Any], int] | None = None


@attrs.frozen
class TransformResult:
    """A partition's output and numbers for one batch.

    Attributes:
        outputs: the handlers' outputs, in call order.
        num_rows_dropped_by_watermark: late input rows dropped.
        num_keys_called: ``handleInputRows`` calls.
        custom_metrics: Spark's custom metrics of the operator (``numExpiredTimers``, ``numValueStateVars``, ...).
    """

    outputs: list[Any]
    num_rows_dropped_by_watermark: int
    num_keys_called: int
    custom_metrics: dict[str, int]


def initial_rows_by_key(pairs: Iterable[tuple[Any, Any]]) -> dict[bytes, tuple[Any, list[Any]]]:
    """An initial state's ``(key, row)`` pairs by pickled key, each key's rows in order (a key may have several)."""
    by_key: dict[bytes, tuple[Any, list[Any]]] = {}
    for key, row in pairs:
        encoded = key_bytes(key)
        entry = by_key.get(encoded)
        if entry is None:
            by_key[encoded] = (key, [row])
        else:
            entry[1].append(row)
    return by_key


def _timer_values(spec: TransformWithStateSpec, batch_time_ms: int, watermark_ms: int) -> TimerValues:
    if spec.time_mode == TimeMode.NONE:
        return TimerValues(NO_TIMESTAMP, NO_TIMESTAMP)
    return TimerValues(batch_time_ms, watermark_ms if spec.watermark_present else NO_TIMESTAMP)


def _call(method: str, function: Callable[..., Any], *args: Any) -> list[Any]:
    """Call a processor method and take its outputs; its errors become Spark's user-function error."""
    try:
        result = function(*args)
        return [] if result is None else list(result)
    except TransformWithStateError:
        raise
    except Exception as exc:
        raise TransformWithStateError.user_function(method, exc) from exc


def _initial_state(processor: StatefulProcessor, key: Any, row: Any, timer_values: TimerValues) -> None:
    """Hand over one initial row; the result is dropped unread, as pyspark does (a generator's body would not run)."""
    processor.handleInitialState(key, row, timer_values)


def run_transform_partition(
    records: Iterable[tuple[Any, Any]],
    store: VersionedStore,
    spec: TransformWithStateSpec,
    batch_time_ms: int,
    eviction_watermark_ms: int,
    late_watermark_ms: int,
    initial: Mapping[bytes, tuple[Any, list[Any]]] | None = None,
) -> TransformResult:
    """Run one batch of the operator over this partition's ``(key, row)`` records; the caller commits ``store``.

    ``initial`` (from :func:`initial_rows_by_key`) is applied only when ``store`` is at version 0.

    Raises:
        TransformWithStateError: a processor method raised (``TRANSFORM_WITH_STATE_USER_FUNCTION_ERROR``,
            the original as ``__cause__``) or broke a rule (Spark's error class); nothing of this batch may
            be committed.
    """
    processor = copy.deepcopy(spec.processor)
    run = ProcessorRun(store, spec.time_mode, batch_time_ms, eviction_watermark_ms)
    _call("init", processor.init, StatefulProcessorHandle(run))
    run.phase = INITIALIZED
    timer_values = _timer_values(spec, batch_time_ms, eviction_watermark_ms)

    drop_late = spec.time_mode == TimeMode.EVENT_TIME and spec.watermark_present and spec.event_time is not None
    grouped: dict[bytes, tuple[Any, list[Any]]] = {}
    dropped = 0
    for key, row in records:
        if drop_late and spec.event_time is not None and spec.event_time(row) <= late_watermark_ms:
            dropped += 1
            continue
        encoded = key_bytes(key)
        entry = grouped.get(encoded)
        if entry is None:
            grouped[encoded] = (key, [row])
        else:
            entry[1].append(row)
    initial = initial if initial and store.version == 0 else {}

    outputs: list[Any] = []
    initial_ns = 0
    for encoded in sorted(grouped.keys() | initial.keys()):
        if encoded in initial:
            started = time.perf_counter_ns()
            key, initial_rows = initial[encoded]
            run.set_key(encoded)
            for initial_row in initial_rows:
                _call("handleInitialState", _initial_state, processor, key, initial_row, timer_values)
            initial_ns += time.perf_counter_ns() - started
        if encoded in grouped:
            key, rows = grouped[encoded]
            run.set_key(encoded)
            outputs.extend(_call("handleInputRows", processor.handleInputRows, key, iter(rows), timer_values))
    if initial:
        run.count("initialStateProcessingTimeMs", initial_ns // 1_000_000)

    run.phase = DATA_PROCESSED
    threshold: int | None = None
    if spec.time_mode == TimeMode.PROCESSING_TIME:
        threshold = batch_time_ms
    elif spec.time_mode == TimeMode.EVENT_TIME and spec.watermark_present:
        threshold = eviction_watermark_ms
    if threshold is not None:
        started = time.perf_counter_ns()
        for row_key, encoded, expiry in due_timers(store, threshold):
            if store.get(row_key) is None:
                continue  # deleted by an earlier timer's call in this pass
            key = pickle.loads(encoded)
            run.set_key(encoded)
            run.count("numExpiredTimers")
            outputs.extend(_call("handleExpiredTimer", processor.handleExpiredTimer, key, timer_values,
                                 ExpiredTimerInfo(expiry)))
            if store.get(row_key) is not None:
                store.remove(row_key)
            run.count("numDeletedTimers")  # pyspark's worker deletes each fired timer through the handle
        run.count("timerProcessingTimeMs", (time.perf_counter_ns() - started) // 1_000_000)

    run.phase = TIMER_PROCESSED
    run.set_key(None)
    run.evict_expired()
    _call("close", processor.close)
    run.phase = CLOSED
    return TransformResult(outputs, dropped, len(grouped), run.metrics)


def run_transform_batch(provider: StateStoreProvider, batch_id: int, records: Iterable[tuple[Any, Any]],
                        spec: TransformWithStateSpec, batch_time_ms: int, eviction_watermark_ms: int,
                        late_watermark_ms: int, initial: Mapping[bytes, tuple[Any, list[Any]]] | None = None,
                        ) -> tuple[list[Any], StateOperatorStats]:
    """One partition's batch from load to commit: the store at ``batch_id``, :func:`run_transform_partition`, commit.

    Returns the outputs (in call order) and the partition's numbers. If the processor raises,
    the store is aborted (nothing of the batch is kept) and the error propagates.
    """
    store = provider.load(batch_id)
    try:
        result = run_transform_partition(records, store, spec, batch_time_ms, eviction_watermark_ms,
                                         late_watermark_ms, initial)
        rows = len(store)
    except BaseException:
        store.abort()
        raise
    version = store.commit()
    provider.maintain_after(version)  # a snapshot, when due, in the background
    metrics = provider.last_metrics
    assert metrics is not None
    custom = dict(result.custom_metrics)
    return result.outputs, StateOperatorStats(
        rows, metrics.num_rows_updated, metrics.num_rows_removed, result.num_rows_dropped_by_watermark,
        metrics.memory_used_bytes, metrics.commit_time_ms, custom.get("numExpiredTimers", 0), 1, 0, 0,
        int(store.loaded_from == "working copy"), int(store.loaded_from == "checkpoint"), 1 << provider.partition_id,
        custom)


def _schema_record(spec: TransformWithStateSpec, variables: Iterable[VariableInfo]) -> dict[str, Any]:
    return {"format": 1, "variables": [{"name": info.name, "kind": info.kind, "ttl": info.ttl_ms, "schema": info.schema}
                                       for info in variables],
            "timeMode": spec.time_mode, "outputMode": spec.output_mode}


def record_schema(checkpoint_root: str | os.PathLike[str] | CheckpointPath, operator_id: int,
                  spec: TransformWithStateSpec) -> None:
    """On the driver, at start: run the processor's ``init`` on a recording handle, then write the operator's
    schema file, or check the one the checkpoint holds against it and record the variables added.

    Raises:
        TransformWithStateError: ``init`` broke a rule or raised; the time mode, the output mode, a variable's
            kind or schema changed since the checkpoint was written (Spark's error classes). Variables may be
            added, and dropped (with ``deleteIfExists``).
        StateStoreError: the schema file is damaged (it names the file).
    """
    run = ProcessorRun(None, spec.time_mode, NO_TIMESTAMP, NO_TIMESTAMP)
    processor = copy.deepcopy(spec.processor)
    _call("init", processor.init, StatefulProcessorHandle(run))
    _call("close", processor.close)
    path = task_checkpoint_path(checkpoint_root) / "state" / str(operator_id) / SCHEMA_FILE
    data = path.read_bytes()
    variables = dict(run.variables)
    if data is not None:
        try:
            old = json.loads(data.decode())
            old_variables = {entry["name"]: entry for entry in old["variables"]}
            old_time_mode, old_output_mode = old["timeMode"], old["outputMode"]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
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
            if entry["kind"] != info.kind:
                raise TransformWithStateError(
                    "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE",
                    f"Cannot change {name} to {_kind_name(info.kind)} between query restarts. Please set {name} to "
                    f"{_kind_name(entry['kind'])}, or restart with a new checkpoint directory.")
            if entry["schema"] != info.schema:
                raise TransformWithStateError(
                    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
                    "Provided value schema does not match existing state value schema. Please check number and type "
                    f"of fields. Existing value_schema={entry['schema']} and new value_schema={info.schema}.")
            merged[name] = info
        variables = {**merged, **{name: info for name, info in variables.items() if name not in merged}}
        if _schema_record(spec, variables.values()) == old:
            return
    else:
        path.parent.mkdirs()
    path.write_replacing(json.dumps(_schema_record(spec, variables.values()), indent=1).encode())


def _kind_name(kind: str) -> str:
    return {"value": "ValueState", "list": "ListState", "map": "MapState"}.get(kind, kind)
