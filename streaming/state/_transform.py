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
import inspect
import pickle
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from scheduler import InvalidPipelineError

from ._event_time import is_late
from ._operator_stats import StateOperatorStats
from ._partition_batch import group_by_key, run_committed
from ._processor import ExpiredTimerInfo, StatefulProcessor, TimerValues
from ._processor_errors import TimeMode, TransformWithStateError, call_user
from ._processor_state import (
    CLOSED,
    DATA_PROCESSED,
    INITIALIZED,
    TIMER_PROCESSED,
    ProcessorRun,
    StatefulProcessorHandle,
    due_timers,
)
from ._protocol import NO_TIMESTAMP, VersionedStore
from ._store_provider import StateStoreProvider

__all__ = [
    "TRANSFORM_WITH_STATE_OPERATOR",
    "TransformResult",
    "TransformWithStateSpec",
    "initial_rows_by_key",
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


def _check_processor(_spec: object, _attribute: attrs.Attribute[StatefulProcessor], value: Any) -> None:
    if not isinstance(value, StatefulProcessor):
        raise InvalidPipelineError(
            f"statefulProcessor must be an instance of a StatefulProcessor subclass, got {value!r}")


@attrs.frozen
class TransformWithStateSpec:
    """What an operator runs: the processor, its output and time modes, its event times.

    Attributes:
        processor: the user's :class:`StatefulProcessor`; each partition's batch runs a fresh copy.
        output_mode: ``"append"`` or ``"update"`` (any case; stored in lower case).
        time_mode: ``"none"``, ``"processingtime"`` or ``"eventtime"`` (any case; stored in lower case).
        watermark_present: whether the input has a watermark.
        event_time: the event time of a row (a ``datetime`` or epoch ms), for dropping late rows (time mode "EventTime" only).

    Raises:
        InvalidPipelineError: ``processor`` is not a :class:`StatefulProcessor`.
        TransformWithStateError: an unknown output or time mode (Spark's error classes).
    """

    processor: StatefulProcessor = attrs.field(validator=_check_processor)
    output_mode: str = attrs.field(converter=_check_output_mode)
    time_mode: str = attrs.field(converter=_check_time_mode)
    watermark_present: bool
    event_time: Callable[[Any], Any] | None = None


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
    return group_by_key(pairs)[0]


def _timer_values(spec: TransformWithStateSpec, batch_time_ms: int, watermark_ms: int) -> TimerValues:
    """pyspark 4.3's: -1 for both in time mode "None"; else the batch time and the eviction watermark, which is
    0 on an input without one (observed in ProcessingTime mode with and without ``withWatermark``)."""
    if spec.time_mode == TimeMode.NONE:
        return TimerValues(NO_TIMESTAMP, NO_TIMESTAMP)
    return TimerValues(batch_time_ms, watermark_ms if spec.watermark_present else 0)


def _initial_state(processor: StatefulProcessor, key: Any, row: Any, timer_values: TimerValues) -> None:
    """Hand over one initial row; the result is dropped unread, as pyspark does, but a generator is refused.

    pyspark never iterates what ``handleInitialState`` returns, so a handler written with ``yield``
    silently never runs and its key's initial state is lost; here the batch fails instead, saying so.
    """
    handler: Callable[..., object] = processor.handleInitialState  # typed None; a user's may still yield
    result = handler(key, row, timer_values)
    if inspect.isgenerator(result):
        result.close()
        raise TypeError("handleInitialState must not yield: its result is never read (as in pyspark), so a generator's "
                        "body would never run and the key's initial state would be lost; write the state through the "
                        "handle and return None")


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
    run = ProcessorRun(store, spec.time_mode, batch_time_ms)
    call_user("init", processor.init, StatefulProcessorHandle(run))
    run.phase = INITIALIZED
    timer_values = _timer_values(spec, batch_time_ms, eviction_watermark_ms)

    drop_late = spec.time_mode == TimeMode.EVENT_TIME and spec.watermark_present and spec.event_time is not None
    event_time = spec.event_time
    late_us = late_watermark_ms * 1000  # Spark compares at microsecond precision
    grouped, dropped = group_by_key(records, is_late(event_time, late_us) if drop_late and event_time is not None else None)
    initial = initial if initial and store.version == 0 else {}

    outputs: list[Any] = []
    initial_ns = 0
    for encoded in sorted(grouped.keys() | initial.keys()):
        if encoded in initial:
            started = time.perf_counter_ns()
            key, initial_rows = initial[encoded]
            run.set_key(encoded)
            for initial_row in initial_rows:
                call_user("handleInitialState", _initial_state, processor, key, initial_row, timer_values)
            initial_ns += time.perf_counter_ns() - started
        if encoded in grouped:
            key, rows = grouped[encoded]
            run.set_key(encoded)
            outputs.extend(call_user("handleInputRows", processor.handleInputRows, key, iter(rows), timer_values))
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
            outputs.extend(call_user("handleExpiredTimer", processor.handleExpiredTimer, key, timer_values,
                                 ExpiredTimerInfo(expiry)))
            if store.get(row_key) is not None:
                store.remove(row_key)
            run.count("numDeletedTimers")  # pyspark's worker deletes each fired timer through the handle
        run.count("timerProcessingTimeMs", (time.perf_counter_ns() - started) // 1_000_000)

    run.phase = TIMER_PROCESSED
    run.set_key(None)
    run.evict_expired()
    call_user("close", processor.close)
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
    committed = run_committed(provider, batch_id, lambda store: run_transform_partition(
        records, store, spec, batch_time_ms, eviction_watermark_ms, late_watermark_ms, initial))
    result = committed.result
    return result.outputs, committed.stats(result.num_rows_dropped_by_watermark,
                                           result.custom_metrics.get("numExpiredTimers", 0), result.custom_metrics)
