"""StatefulProcessorHandle and the state variables it makes, on one partition's state store.

Spark's ``StatefulProcessorHandleImpl``, ``ValueStateImpl``, ``ListStateImpl``, ``MapStateImpl``
and ``TimerStateImpl`` (with their TTL variants), over the row layout of ``_processor_rows``:
every read and write goes to the store's rows of the current grouping key, so a batch costs what
it touches. A variable made with ``ttlDurationMs`` writes each row with the expiry ``batch time +
ttl`` and hides rows whose expiry is at or before the batch time; the operator removes them after
the timers (:meth:`ProcessorRun.evict_expired`).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import attrs

from ._processor_errors import INVALID_HANDLE_STATE, INVALID_TIME_MODE, TimeMode, TransformWithStateError
from ._processor_rows import (
    LIST,
    MAP,
    TIMER_PREFIX,
    VALUE,
    encode_index,
    encode_map_key,
    timer_key,
    timer_prefix,
    variable_prefix,
)
from ._protocol import NO_TIMESTAMP, StateRow, VersionedStore

__all__ = [
    "CLOSED",
    "CREATED",
    "DATA_PROCESSED",
    "INITIALIZED",
    "TIMER_PROCESSED",
    "ListState",
    "MapState",
    "ProcessorRun",
    "StatefulProcessorHandle",
    "ValueState",
    "METRICS",
    "VariableInfo",
    "due_timers",
]

CREATED = "CREATED"
"""Handle states, Spark's names: ``init`` is running (state variables may be made)."""
INITIALIZED = "INITIALIZED"
"""``init`` returned: the data pass (initial state, input rows)."""
DATA_PROCESSED = "DATA_PROCESSED"
"""The timer pass."""
TIMER_PROCESSED = "TIMER_PROCESSED"
"""Timers done: TTL clean-up, ``close``."""
CLOSED = "CLOSED"
"""``close`` returned."""

METRICS = ("numValueStateVars", "numListStateVars", "numMapStateVars", "numDeletedStateVars", "numValueStateWithTTLVars",
           "numListStateWithTTLVars", "numMapStateWithTTLVars", "numRegisteredTimers", "numDeletedTimers",
           "numExpiredTimers", "numValuesRemovedDueToTTLExpiry", "timerProcessingTimeMs", "initialStateProcessingTimeMs")
"""Spark's custom metrics of the operator (``TransformWithStateExec``'s), each reported every batch, 0 when unused."""


@attrs.frozen
class VariableInfo:
    """A state variable as ``init`` declared it (what the checkpoint's schema file records).

    Attributes:
        name: its name.
        kind: ``value``, ``list`` or ``map``.
        ttl_ms: its time to live, or None.
        schema: the schema the processor gave (a DDL string, or a map's key and value schemas), as text.
    """

    name: str
    kind: str
    ttl_ms: int | None
    schema: str | list[str]


def _schema_text(schema: Any) -> str:
    """A schema argument as text: a DDL string as is, a pyspark type as its simple string, else its repr."""
    if isinstance(schema, str):
        return schema
    simple = getattr(schema, "simpleString", None)
    return str(simple()) if callable(simple) else repr(schema)


class ProcessorRun:
    """One partition's batch of a processor: the store, the times, the handle's state and the current grouping key.

    ``store`` is None for the driver's recording run (``init`` only: variables are declared, none is read).
    """

    def __init__(self, store: VersionedStore | None, time_mode: str, batch_time_ms: int) -> None:
        """Before ``init``: the handle is CREATED, no key is current."""
        self.store = store
        self.time_mode = time_mode
        self.batch_time_ms = batch_time_ms
        self.phase = CREATED
        self.variables: dict[str, VariableInfo] = {}
        self.deleted: list[str] = []
        self.metrics: dict[str, int] = dict.fromkeys(METRICS, 0)
        self.list_ends: dict[bytes, int] = {}  # a list's next index, once known in this batch
        self._key_bytes: bytes | None = None

    def count(self, name: str, by: int = 1) -> None:
        """Add to a custom metric."""
        self.metrics[name] = self.metrics.get(name, 0) + by

    def set_key(self, encoded: bytes | None) -> None:
        """Make the grouping key pickled as ``encoded`` the one state operations act on (None: no key)."""
        self._key_bytes = encoded

    def key_bytes(self, operation: str) -> bytes:
        """The current grouping key, pickled.

        Raises:
            TransformWithStateError: no key is current (in ``init`` or ``close``).
        """
        if self._key_bytes is None:
            raise self._invalid_handle_state(operation)
        return self._key_bytes

    def _invalid_handle_state(self, operation: str) -> TransformWithStateError:
        return TransformWithStateError(INVALID_HANDLE_STATE, f"Failed to perform stateful processor operation={operation} "
                                       f"with invalid handle state={self.phase}.")

    def open_store(self, operation: str = "a state operation") -> VersionedStore:
        """The store.

        Raises:
            TransformWithStateError: the recording run of ``init`` and ``close`` on the driver, which has no store (no
                key is ever current in it: the same refusal as :meth:`key_bytes`'s, whichever the call reaches first).
        """
        store = self.store
        if store is None:
            raise self._invalid_handle_state(operation)
        return store

    def expiry(self, ttl_ms: int | None) -> int:
        """The timeout of a row written now by a variable with ``ttl_ms``."""
        return NO_TIMESTAMP if ttl_ms is None else self.batch_time_ms + ttl_ms

    def alive(self, row: StateRow | None) -> bool:
        """Whether ``row`` holds a value that has not expired (expired: expiry at or before the batch time)."""
        return row is not None and row[0] is not None and (row[1] == NO_TIMESTAMP or row[1] > self.batch_time_ms)

    def check_phase(self, operation: str, allowed: tuple[str, ...]) -> None:
        """Refuse ``operation`` unless the handle is in one of the ``allowed`` states."""
        if self.phase not in allowed:
            raise TransformWithStateError(INVALID_HANDLE_STATE, f"Failed to perform stateful processor "
                                          f"operation={operation} with invalid handle state={self.phase}.")

    def check_timers(self, operation: str) -> None:
        """Refuse a timer operation in time mode "None", or outside the data and timer passes."""
        if self.time_mode == TimeMode.NONE:
            raise TransformWithStateError(INVALID_TIME_MODE, f"Failed to perform stateful processor "
                                          f"operation={operation} with invalid timeMode={TimeMode.SCALA_NAMES[TimeMode.NONE]}")
        self.check_phase(operation, (INITIALIZED, DATA_PROCESSED))

    def declare(self, operation: str, info: VariableInfo) -> None:
        """Record a variable made by ``init``.

        Raises:
            TransformWithStateError: outside ``init``, a name used twice, a TTL that is not positive or not
                in processing time.
        """
        self.check_phase(operation, (CREATED,))
        if not isinstance(info.name, str) or not info.name or info.name != info.name.strip() or info.name == "default":
            raise TransformWithStateError(
                "STATE_STORE_CANNOT_USE_COLUMN_FAMILY_WITH_INVALID_NAME",
                f"Failed to perform column family operation={operation} with invalid name={info.name}. Column family "
                "name cannot be empty or include leading/trailing spaces or use the reserved keyword=default")
        if info.name in self.variables:
            raise TransformWithStateError("STATEFUL_PROCESSOR_DUPLICATE_STATE_VARIABLE_DEFINED",
                                          f"State variable with name {info.name} has already been defined in the "
                                          "StatefulProcessor.")
        if info.ttl_ms is not None:
            if self.time_mode != TimeMode.PROCESSING_TIME:
                raise TransformWithStateError(
                    "STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL",
                    f"Cannot use TTL for state={info.name} in timeMode={TimeMode.SCALA_NAMES[self.time_mode]}, use "
                    "TimeMode.ProcessingTime() instead.")
            if isinstance(info.ttl_ms, bool) or not isinstance(info.ttl_ms, int) or info.ttl_ms <= 0:
                raise TransformWithStateError("STATEFUL_PROCESSOR_TTL_DURATION_MUST_BE_POSITIVE",
                                              f"TTL duration must be greater than zero for State store "
                                              f"operation=update on state={info.name}.")
        self.variables[info.name] = info
        kind = {VALUE: "numValueStateVars", LIST: "numListStateVars", MAP: "numMapStateVars"}[info.kind]
        # as pyspark 4.3 reports them: a variable with a TTL counts in its kind's ...WithTTLVars only
        self.count(kind if info.ttl_ms is None else kind.replace("Vars", "WithTTLVars"))

    def remove_rows(self, prefix: bytes) -> int:
        """Delete every row under ``prefix``; returns how many."""
        store = self.open_store()
        rows = store.scan(prefix)
        for key, _ in rows:
            store.remove(key)
        return len(rows)

    def evict_expired(self) -> None:
        """Remove the rows of TTL variables whose expiry is at or before the batch time (``numValuesRemovedDueToTTLExpiry``)."""
        store = self.open_store()
        for info in self.variables.values():
            if info.ttl_ms is None:
                continue
            expired = store.due(self.batch_time_ms + 1, variable_prefix(info.name))
            for key, _ in expired:
                store.remove(key)
            self.count("numValuesRemovedDueToTTLExpiry", len(expired))


def _checked(run: ProcessorRun, name: str, value: Any) -> bytes:
    if value is None:
        raise TransformWithStateError("ILLEGAL_STATE_STORE_VALUE.NULL_VALUE", "Illegal value provided to the State "
                                      f"Store. Cannot write null values to State Store for StateName {name}.")
    return pickle.dumps(value, protocol=5)


def _non_empty(name: str, values: Any) -> list[Any]:
    items = None if values is None else list(values)
    if not items:
        raise TransformWithStateError("ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE", "Illegal value provided to the "
                                      f"State Store. Cannot write empty list values to State Store for StateName {name}.")
    return items


class _Variable:
    """What the three kinds of state variable share: the run, the name, the TTL, the current key's prefix."""

    def __init__(self, run: ProcessorRun, name: str, ttl_ms: int | None) -> None:
        self._run = run
        self._name = name
        self._ttl = ttl_ms

    def _prefix(self, operation: str) -> bytes:
        return variable_prefix(self._name, self._run.key_bytes(operation))

    def _alive_rows(self, operation: str) -> list[tuple[bytes, bytes]]:
        prefix = self._prefix(operation)
        return [(key[len(prefix):], row[0]) for key, row in self._run.open_store().scan(prefix)
                if self._run.alive(row) and row[0] is not None]

    def clear(self) -> None:
        """Remove the current key's value(s)."""
        self._run.remove_rows(self._prefix("clear"))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r}{'' if self._ttl is None else f' ttl={self._ttl} ms'}>"


class ValueState(_Variable):
    """One value per grouping key (pyspark's ``ValueState``)."""

    def exists(self) -> bool:
        """Whether the current key has a value."""
        return self.get() is not None

    def get(self) -> Any:
        """The current key's value, or None."""
        row = self._run.open_store("get").get(self._prefix("get"))
        return pickle.loads(row[0]) if self._run.alive(row) and row is not None and row[0] is not None else None

    def update(self, newValue: Any) -> None:  # noqa: N803
        """Set the current key's value (with a TTL: its expiry becomes the batch time plus the TTL)."""
        row_key = self._prefix("update")
        self._run.open_store().put(row_key, _checked(self._run, self._name, newValue), self._run.expiry(self._ttl))

    def clear(self) -> None:
        """Remove the current key's value."""
        self._run.open_store("clear").remove(self._prefix("clear"))


class ListState(_Variable):
    """A list per grouping key, one row per element (pyspark's ``ListState``); with a TTL, each element expires on its own."""

    def exists(self) -> bool:
        """Whether the current key has at least one element."""
        if self._ttl is None:
            return self._next_index(self._prefix("exists")) > 0
        return bool(self._alive_rows("exists"))

    def get(self) -> Iterator[Any]:
        """The current key's elements, in order."""
        return iter([pickle.loads(value) for _, value in self._alive_rows("get")])

    def put(self, newState: list[Any]) -> None:  # noqa: N803
        """Replace the current key's list (it must not be empty or hold None)."""
        items = _non_empty(self._name, newState)
        encoded = [_checked(self._run, self._name, item) for item in items]
        prefix = self._prefix("put")
        store = self._run.open_store()
        held = [key for key, _ in store.scan(prefix)]
        # overwrite in place (an update of a row the scan saw costs less than a delete and an insert),
        # then drop what lies beyond the new end
        self._write(prefix, 0, encoded)
        for key in held:
            if int.from_bytes(key[len(prefix):], "big") >= len(encoded):
                store.remove(key)

    def appendValue(self, newState: Any) -> None:  # noqa: N803
        """Add an element at the end."""
        encoded = _checked(self._run, self._name, newState)
        prefix = self._prefix("appendValue")
        self._write(prefix, self._next_index(prefix), [encoded])

    def appendList(self, newState: list[Any]) -> None:  # noqa: N803
        """Add elements at the end (at least one, none of them None)."""
        encoded = [_checked(self._run, self._name, item) for item in _non_empty(self._name, newState)]
        prefix = self._prefix("appendList")
        self._write(prefix, self._next_index(prefix), encoded)

    def clear(self) -> None:
        """Remove the current key's elements."""
        prefix = self._prefix("clear")
        self._run.remove_rows(prefix)
        self._run.list_ends[prefix] = 0

    def _next_index(self, prefix: bytes) -> int:
        """One past the greatest index held (the store is asked once per key and batch, then the run keeps it)."""
        end = self._run.list_ends.get(prefix)
        if end is None:
            last = self._run.open_store().last_key(prefix)
            end = self._run.list_ends[prefix] = 0 if last is None else int.from_bytes(last[len(prefix):], "big") + 1
        return end

    def _write(self, prefix: bytes, first: int, encoded: list[bytes]) -> None:
        store, expiry = self._run.open_store(), self._run.expiry(self._ttl)
        for offset, value in enumerate(encoded):
            store.put(prefix + encode_index(first + offset), value, expiry)
        self._run.list_ends[prefix] = first + len(encoded)


class MapState(_Variable):
    """A map per grouping key, one row per entry (pyspark's ``MapState``); with a TTL, each entry expires on its own."""

    def exists(self) -> bool:
        """Whether the current key has at least one entry."""
        if self._ttl is None:
            return self._run.open_store("exists").last_key(self._prefix("exists")) is not None
        return bool(self._alive_rows("exists"))

    def getValue(self, key: Any) -> Any:
        """The value under map key ``key``, or None."""
        row = self._run.open_store("getValue").get(self._prefix("getValue") + encode_map_key(key))
        return pickle.loads(row[0]) if self._run.alive(row) and row is not None and row[0] is not None else None

    def containsKey(self, key: Any) -> bool:
        """Whether map key ``key`` has a value."""
        return self.getValue(key) is not None

    def updateValue(self, key: Any, value: Any) -> None:
        """Set the value under map key ``key`` (neither may be None)."""
        encoded_key = encode_map_key(key) if key is not None else _checked(self._run, self._name, key)
        encoded = _checked(self._run, self._name, value)
        self._run.open_store("updateValue").put(self._prefix("updateValue") + encoded_key, encoded, self._run.expiry(self._ttl))

    def iterator(self) -> Iterator[tuple[Any, Any]]:
        """The entries, ``(key, value)``, in the order of the keys' pickled bytes."""
        return iter([(pickle.loads(key), pickle.loads(value)) for key, value in self._alive_rows("iterator")])

    def keys(self) -> Iterator[Any]:
        """The map keys."""
        return iter([pickle.loads(key) for key, _ in self._alive_rows("keys")])

    def values(self) -> Iterator[Any]:
        """The values."""
        return iter([pickle.loads(value) for _, value in self._alive_rows("values")])

    def removeKey(self, key: Any) -> None:
        """Remove the entry under map key ``key`` (nothing if none)."""
        self._run.open_store("removeKey").remove(self._prefix("removeKey") + encode_map_key(key))


class StatefulProcessorHandle:
    """What ``init`` and the handler methods use to reach state and timers (pyspark's ``StatefulProcessorHandle``).

    State variables are made in ``init`` only; their operations act on the grouping key being
    handled. Timers need time mode "ProcessingTime" or "EventTime".
    """

    def __init__(self, run: ProcessorRun) -> None:
        """A handle on one partition's batch."""
        self._run = run

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> ValueState:  # noqa: N803
        """A value state variable (``schema`` is recorded as the variable's type tag)."""
        self._run.declare("get_value_state", VariableInfo(stateName, VALUE, ttlDurationMs, _schema_text(schema)))
        return ValueState(self._run, stateName, ttlDurationMs)

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> ListState:  # noqa: N803
        """A list state variable."""
        self._run.declare("get_list_state", VariableInfo(stateName, LIST, ttlDurationMs, _schema_text(schema)))
        return ListState(self._run, stateName, ttlDurationMs)

    def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any,  # noqa: N803
                    ttlDurationMs: int | None = None) -> MapState:  # noqa: N803
        """A map state variable."""
        schema = [_schema_text(userKeySchema), _schema_text(valueSchema)]
        self._run.declare("get_map_state", VariableInfo(stateName, MAP, ttlDurationMs, schema))
        return MapState(self._run, stateName, ttlDurationMs)

    def registerTimer(self, expiryTimestampMs: int) -> None:  # noqa: N803
        """A timer of the current key at ``expiryTimestampMs`` (epoch ms); one already registered there is kept."""
        self._run.check_timers("register_timer")
        row_key = timer_key(self._run.key_bytes("register_timer"), _expiry(expiryTimestampMs))
        store = self._run.open_store()
        if store.get(row_key) is None:
            store.put(row_key, None, expiryTimestampMs)
        self._run.count("numRegisteredTimers")  # every call, as Spark's handle counts them

    def deleteTimer(self, expiryTimestampMs: int) -> None:  # noqa: N803
        """Delete the current key's timer at ``expiryTimestampMs`` (nothing if none)."""
        self._run.check_timers("delete_timer")
        row_key = timer_key(self._run.key_bytes("delete_timer"), _expiry(expiryTimestampMs))
        store = self._run.open_store()
        if store.get(row_key) is not None:
            store.remove(row_key)
        self._run.count("numDeletedTimers")  # every call, as Spark's handle counts them

    def listTimers(self) -> Iterator[int]:
        """The current key's timers (expiry, ms), earliest first."""
        self._run.check_timers("list_timers")
        prefix = timer_prefix(self._run.key_bytes("list_timers"))
        return iter([int.from_bytes(key[len(prefix):], "big") for key, _ in self._run.open_store().scan(prefix)])

    def deleteIfExists(self, stateName: str) -> None:  # noqa: N803
        """In ``init``: delete variable ``stateName`` and all its rows, of every key (a variable the processor dropped)."""
        self._run.check_phase("delete_if_exists", (CREATED,))
        self._run.deleted.append(stateName)
        if self._run.store is not None and self._run.remove_rows(variable_prefix(stateName)):
            self._run.count("numDeletedStateVars")

    def __repr__(self) -> str:
        return f"<StatefulProcessorHandle {self._run.phase} | {len(self._run.variables)} variables>"


def _expiry(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        raise ValueError(f"a timer's expiry is epoch milliseconds, an int from 0, got {value!r}")
    return value


def due_timers(store: VersionedStore, threshold_ms: int) -> list[tuple[bytes, bytes, int]]:
    """The timers due at ``threshold_ms`` (expiry at or before it), earliest first: each one's row, pickled
    grouping key and expiry."""
    due = []
    for row_key, row in store.due(threshold_ms + 1, TIMER_PREFIX):
        size = int.from_bytes(row_key[1:5], "big")  # the layout: b"t", the key's length (4 bytes), the key, the expiry
        due.append((row_key, row_key[5:5 + size], row[1]))
    return due
