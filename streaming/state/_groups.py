"""One partition of one batch of ``mapGroupsWithState`` / ``flatMapGroupsWithState`` (Spark's ``FlatMapGroupsWithStateExec``).

Per partition and batch, in Spark's order: drop late rows (only under event-time timeouts: an
event time at or before the previous batch's watermark); a data pass calling the function once
per key with input (keys in the order of their pickled bytes, values in arrival order); then,
after every data-pass write, a timeout pass calling it with no values and ``hasTimedOut`` for
each key whose timeout is strictly before the threshold (the batch time for processing-time
timeouts, the batch's watermark for event-time ones). After each call, once its output was
consumed, the state is written back by Spark's rules: removed with no timeout set deletes the
row; else an update, a removal or a changed timeout writes (value, or none for a removed state
that keeps a timeout, and the timeout); else nothing. The timeout is reset on every call. One
departure: a row that would be left with neither value nor timeout is deleted (Spark keeps it
for good, unreadable).

Keys and values cross the store pickled; keys must pickle the same way every time (str, int,
tuples of them, ...), since their bytes are the key.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from ._event_time import is_late
from ._group_state import NO_TIMESTAMP, GroupState, GroupStateTimeout
from ._operator_stats import StateOperatorStats
from ._partition_batch import group_by_key, run_committed
from ._processor_rows import key_bytes
from ._protocol import VersionedStore
from ._store_provider import StateStoreProvider

__all__ = [
    "DUPLICATE_INITIAL_STATE",
    "EVENT_TIME_WITHOUT_WATERMARK",
    "USER_FUNCTION_ERROR",
    "GroupsWithStateError",
    "GroupsWithStateSpec",
    "PartitionResult",
    "initial_state_by_key",
    "run_batch",
    "run_partition",
]

USER_FUNCTION_ERROR = "FLATMAPGROUPSWITHSTATE_USER_FUNCTION_ERROR"
EVENT_TIME_WITHOUT_WATERMARK = (
    "Watermark must be specified in the query using '[Dataset/DataFrame].withWatermark()' for using event-time timeout "
    "in a [map|flatMap]GroupsWithState. Event-time timeout not supported without watermark."
)
"""Spark's refusal of an event-time timeout on an input without a watermark."""
DUPLICATE_INITIAL_STATE = ("The initial state provided contained multiple rows(state) with the same key. Make sure to "
                           "de-duplicate the initial state before passing it.")


class GroupsWithStateError(RuntimeError):
    """The user's function raised; the original is the ``__cause__``. The batch fails and its state is not committed."""

    def __init__(self, operator: str, cause: BaseException) -> None:
        """Spark's message for ``cause``."""
        super().__init__(f"[{USER_FUNCTION_ERROR}] An error occurred in the user provided function in {operator}. "
                         f"Reason: {type(cause).__name__}: {cause}")
        self.error_class = USER_FUNCTION_ERROR


@attrs.frozen
class GroupsWithStateSpec:
    """What an operator runs: the function, one output (map) or many (flatMap), its timeout, its event times.

    Attributes:
        func: ``func(key, values, state)``.
        flat: True for flatMapGroupsWithState (the result is iterated), False for map (one value).
        timeout: a :class:`GroupStateTimeout` kind.
        watermark_present: whether the input has a watermark.
        event_time: the event time of a value (a ``datetime`` or epoch ms), for dropping late rows; None without a watermark.
    """

    func: Callable[[Any, Iterator[Any], GroupState], Any]
    flat: bool
    timeout: str
    watermark_present: bool
    event_time: Callable[[Any], Any] | None = None

    @property
    def operator(self) -> str:
        """The operator's name in messages."""
        return "flatMapGroupsWithState" if self.flat else "mapGroupsWithState"


@attrs.frozen
class PartitionResult:
    """A partition's output and numbers for one batch."""

    outputs: list[Any]
    num_rows_updated: int
    num_rows_removed: int
    num_rows_dropped_by_watermark: int
    num_timeouts: int
    num_keys_called: int
    updates_ns: int = 0
    removals_ns: int = 0


def run_batch(provider: StateStoreProvider, batch_id: int, records: Iterable[tuple[Any, Any]], spec: GroupsWithStateSpec,
              batch_time_ms: int, eviction_watermark_ms: int, late_watermark_ms: int,
              initial: Mapping[bytes, tuple[Any, Any]] | None = None) -> tuple[list[Any], StateOperatorStats]:
    """One partition's batch from load to commit: the store at ``batch_id``, :func:`run_partition`, commit, a snapshot if due.

    Returns the outputs and the partition's numbers. If the function raises, the store is
    aborted (nothing of the batch is kept) and the error propagates.
    """
    committed = run_committed(provider, batch_id, lambda store: run_partition(
        records, store, spec, batch_time_ms, eviction_watermark_ms, late_watermark_ms, initial))
    result = committed.result
    return result.outputs, committed.stats(
        result.num_rows_dropped_by_watermark, result.num_timeouts, {"numTimeoutsFired": result.num_timeouts},
        num_rows_updated=result.num_rows_updated, num_rows_removed=result.num_rows_removed,
        all_updates_time_ms=result.updates_ns // 1_000_000, all_removals_time_ms=result.removals_ns // 1_000_000)


def initial_state_by_key(pairs: Iterable[tuple[Any, Any]]) -> dict[bytes, tuple[Any, Any]]:
    """An initial state's ``(key, state)`` pairs by pickled key.

    Raises:
        ValueError: a key appears twice (Spark's message), or a state is None.
    """
    by_key: dict[bytes, tuple[Any, Any]] = {}
    for key, value in pairs:
        encoded = key_bytes(key)
        if encoded in by_key:
            raise ValueError(DUPLICATE_INITIAL_STATE)
        if value is None:
            raise ValueError(f"the initial state of key {key!r} is None: a state value cannot be None")
        by_key[encoded] = (key, value)
    return by_key


def run_partition(
    records: Iterable[tuple[Any, Any]],
    store: VersionedStore,
    spec: GroupsWithStateSpec,
    batch_time_ms: int,
    eviction_watermark_ms: int,
    late_watermark_ms: int,
    initial: Mapping[bytes, tuple[Any, Any]] | None = None,
) -> PartitionResult:
    """Run one batch of the operator over this partition's ``(key, value)`` records; the caller commits ``store``.

    Raises:
        GroupsWithStateError: the user's function raised (nothing of this batch may be committed).
    """
    timeout = spec.timeout
    drop_late = timeout == GroupStateTimeout.EventTimeTimeout and spec.watermark_present and spec.event_time is not None
    watermark = eviction_watermark_ms if spec.watermark_present else NO_TIMESTAMP
    event_time = spec.event_time
    late_us = late_watermark_ms * 1000  # Spark compares at microsecond precision
    grouped, dropped = group_by_key(records, is_late(event_time, late_us) if drop_late and event_time is not None else None)
    if initial:
        for encoded, (key, value) in initial.items():
            store.put(encoded, pickle.dumps(value, protocol=5), NO_TIMESTAMP)
            grouped.setdefault(encoded, (key, []))

    counts = {"updated": 0, "removed": 0, "updates_ns": 0, "removals_ns": 0}
    outputs: list[Any] = []

    def call(encoded: bytes, key: Any, values: list[Any], row: tuple[bytes | None, int] | None, timed_out: bool) -> None:
        stored = None if row is None or row[0] is None else pickle.loads(row[0])
        old_timeout = NO_TIMESTAMP if row is None else row[1]
        state = GroupState(stored, row is not None and row[0] is not None, batch_time_ms, watermark, timeout, timed_out,
                           spec.watermark_present, old_timeout)
        try:
            result = spec.func(key, iter(values), state)
            if not spec.flat:
                produced = [result]
            elif result is None:  # as pyspark's flatMap: a forgotten return fails rather than losing the outputs
                raise TypeError(f"the function returned None for key {key!r:.80}: flatMapGroupsWithState's function "
                                "returns an iterable of outputs (an empty one for none)")
            else:
                produced = list(result)
        except Exception as exc:
            raise GroupsWithStateError(spec.operator, exc) from exc
        outputs.extend(produced)
        if (state.removed or (row is not None and not state.exists)) and state.timeout_timestamp == NO_TIMESTAMP:
            # Spark deletes a removed state without a timeout; a row left with neither a value nor
            # a timeout (a timed-out call that did not remove a value-less state) Spark keeps
            # forever, and nothing could ever read it: it is deleted too.
            started = time.perf_counter_ns()
            store.remove(encoded)
            counts["removals_ns"] += time.perf_counter_ns() - started
            counts["removed"] += 1
        elif state.updated or state.removed or state.timeout_timestamp != old_timeout:
            started = time.perf_counter_ns()
            value = pickle.dumps(state.get, protocol=5) if state.exists else None
            store.put(encoded, value, state.timeout_timestamp)
            counts["updates_ns"] += time.perf_counter_ns() - started
            counts["updated"] += 1

    for encoded in sorted(grouped):
        key, values = grouped[encoded]
        call(encoded, key, values, store.get(encoded), False)
    fired = 0
    threshold: int | None = None
    if timeout == GroupStateTimeout.ProcessingTimeTimeout:
        threshold = batch_time_ms
    elif timeout == GroupStateTimeout.EventTimeTimeout and spec.watermark_present:
        threshold = eviction_watermark_ms
    if threshold is not None:
        for encoded, row in store.due(threshold):
            fired += 1
            call(encoded, pickle.loads(encoded), [], row, True)
    return PartitionResult(outputs, counts["updated"], counts["removed"], dropped, fired, len(grouped) + fired,
                           counts["updates_ns"], counts["removals_ns"])
