"""The state reader: an operator's rows at a batch, the changes between two batches, and what operators a checkpoint holds.

Spark's ``statestore`` data source (with its ``readChangeFeed`` option) and its ``state-metadata`` source.
"""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, overload

import attrs

from scheduler import CheckpointPath, CommitLog, parse_batch_file_name, task_checkpoint_path
from scheduler.query import local_entry_kind

from ._batch_versions import BatchVersions
from ._partition_files import PartitionFiles, parse_partition_count
from ._processor_rows import LIST, MAP, SCHEMA_FILE, VALUE, decode_row_key
from ._protocol import NO_TIMESTAMP
from ._rebuild import open_base, rebuild
from ._store_format import DELTA, REMOVED, SNAPSHOT, Change, StateNotFoundError, StateStoreError, read_delta
from ._transform import TRANSFORM_WITH_STATE_OPERATOR

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "FLAT_MAP_GROUPS_WITH_STATE",
    "TIMER",
    "StateChange",
    "StateOperatorMetadata",
    "StateRecord",
    "read_state",
    "read_state_changes",
    "read_state_metadata",
]

FLAT_MAP_GROUPS_WITH_STATE = "flatMapGroupsWithState"
"""The operator name of a ``mapGroupsWithState`` or ``flatMapGroupsWithState`` operator (Spark names both so)."""
TIMER = "timer"
"""The kind of a ``transformWithState`` timer's row (the others: ``value``, ``list``, ``map``, and ``state`` for GroupState)."""
GROUP_STATE = "state"

# Where a DStream program's or a Pipeline's operators keep their stores, under the query's checkpoint
# (``STATE_STORE_DIRECTORY`` of the DStream node, ``STATE_DIRECTORY`` of the Pipeline: both "stateful").
_STATEFUL = "stateful"
_STATE = "state"
_COMMITS = "commits"
_OFFSETS = "offsets"


@attrs.frozen
class StateRecord:
    """One row of an operator's state at a version (a row of Spark's ``statestore`` source).

    Attributes:
        partition_id: the operator partition holding the row.
        kind: ``"state"`` (a ``flatMapGroupsWithState`` key's GroupState), ``"value"``, ``"list"``
            (one element), ``"map"`` (one entry) or ``"timer"``.
        variable: the ``transformWithState`` state variable's name; None for a timer or a GroupState.
        key: the grouping key.
        item: a list element's index or a map entry's key; None otherwise.
        value: the state, list element or map value (None for a timer, or a GroupState removed
            while its timeout stays set).
        timeout_ms: the GroupState's timeout timestamp, a variable's time-to-live expiry or a
            timer's expiry (epoch ms); None when there is none.
    """

    partition_id: int
    kind: str
    variable: str | None
    key: Any
    item: Any
    value: Any
    timeout_ms: int | None


@attrs.frozen
class StateChange:
    """One change a batch made to an operator's state (a row of Spark's change feed).

    Attributes:
        batch_id: the batch that made it (it wrote store version ``batch_id + 1``).
        change_type: ``"update"`` (the row was written) or ``"delete"`` (removed; ``value`` is
            then None, and ``timeout_ms`` too except a timer's expiry, which is part of its name).
        record: the row as written, or the removed row's name.
    """

    batch_id: int
    change_type: str
    record: StateRecord


@attrs.frozen
class StateOperatorMetadata:
    """One stateful operator of a checkpoint (a row of Spark's ``state-metadata`` source).

    Attributes:
        operator_id: the operator's number in its graph (``state/<operator_id>``).
        operator_name: :data:`~streaming.state.TRANSFORM_WITH_STATE_OPERATOR` (pyspark's
            ``transformWithStateInPySparkExec``) when it has a schema file, else :data:`FLAT_MAP_GROUPS_WITH_STATE`.
        num_partitions: its partitions: the count its checkpoint recorded, else the partition directories.
        min_batch_id: the oldest batch whose state every partition can still load, or None.
        max_batch_id: the newest such batch, or None (nothing committed yet).
        operator_properties: the schema file's JSON text for ``transformWithState`` (its
            variables, time mode, output mode); ``"{}"`` otherwise.
    """

    operator_id: int
    operator_name: str
    num_partitions: int
    min_batch_id: int | None
    max_batch_id: int | None
    operator_properties: str


# -- where things are --


def _state_root(checkpoint: str | os.PathLike[str] | CheckpointPath) -> tuple[CheckpointPath, CheckpointPath]:
    """The checkpoint, and the directory holding its operators' stores (``<ckpt>/stateful/state``, or ``<ckpt>/state``)."""
    root = task_checkpoint_path(checkpoint)
    if not root.is_dir():
        what = "the directory does not exist"
        if root.exists():
            what = f"it is {local_entry_kind(os.fspath(root)) if root.is_local else 'a file'}, not a directory"
        raise StateNotFoundError(f"no checkpoint at {root}: {what}")
    root.listdir()  # one the user may not read raises its OSError naming it, not "no state store in it"
    for base in (root / _STATEFUL, root):
        if (base / _STATE).is_dir():
            return root, base / _STATE
    raise StateNotFoundError(f"no state store in {root}: neither {root / _STATEFUL / _STATE} nor {root / _STATE} is a directory "
                          "(the checkpoint of a query without mapGroupsWithState, flatMapGroupsWithState or transformWithState?)")


def _numbered(directory: CheckpointPath) -> list[int]:
    return sorted(n for name in directory.listdir() if (n := parse_batch_file_name(name)) is not None)


class _Operator:
    """One operator's directory: its partitions, its schema (transformWithState), its variables' kinds."""

    def __init__(self, state: CheckpointPath, operator_id: int) -> None:
        self.id = operator_id
        self.directory = state / str(operator_id)
        if not self.directory.is_dir():
            held = _numbered(state)
            raise StateNotFoundError(f"no state of operator {operator_id} in {state}: {self.directory} does not exist "
                                  f"(operators held: {held or 'none'})")
        self.partitions = _numbered(self.directory)
        self.num_partitions = self._recorded_count()
        schema_path = self.directory / SCHEMA_FILE
        data = schema_path.read_bytes()
        self.schema_text: str | None = None
        self.kinds: dict[str, str] = {}
        if data is not None:
            try:
                self.schema_text = data.decode()
                schema = json.loads(self.schema_text)
                self.kinds = {str(v["name"]): str(v["kind"]) for v in schema["variables"]}
            except (UnicodeDecodeError, ValueError, TypeError, KeyError, RecursionError) as exc:  # nested too deep: damage too
                raise StateStoreError(f"state store file {schema_path} is damaged: not a transformWithState schema "
                                      f"({exc!r})") from exc

    def _recorded_count(self) -> int:
        path = self.directory / "partitions"
        data = path.read_bytes()
        if data is None:  # a Pipeline's operator: one store, partition 0
            return len(self.partitions)
        return parse_partition_count(data, path)

    @property
    def name(self) -> str:
        return TRANSFORM_WITH_STATE_OPERATOR if self.schema_text is not None else FLAT_MAP_GROUPS_WITH_STATE

    def files(self, partition: int) -> PartitionFiles:
        return PartitionFiles(self.directory / str(partition))

    def decode(self, partition: int, key: bytes, value: bytes | None, timeout: int) -> StateRecord:
        """A stored row as a record (the checkpoint is trusted as the program is: keys and values are unpickled)."""
        loaded = None if value is None or timeout == REMOVED else pickle.loads(value)
        expiry = None if timeout in (NO_TIMESTAMP, REMOVED) else timeout
        if self.schema_text is None:
            return StateRecord(partition, GROUP_STATE, None, pickle.loads(key), None, loaded, expiry)
        name = decode_row_key(key, self.kinds)
        if name.variable is None:
            return StateRecord(partition, TIMER, None, name.grouping_key, None, None, name.suffix)
        kind = self.kinds.get(name.variable, VALUE if name.suffix is None else "unknown")
        item = name.suffix if kind in (LIST, MAP) else None
        return StateRecord(partition, kind, name.variable, name.grouping_key, item, loaded, expiry)


def _latest_batch(root: CheckpointPath, operator: _Operator) -> int | None:
    """The newest batch of the query's commits log; for a stores' root without logs, the newest version every partition
    holds, minus one. None: nothing committed yet."""
    if (root / _COMMITS).is_dir() or (root / _OFFSETS).is_dir():  # a query's checkpoint: what its commits log says
        committed = CommitLog(root / _COMMITS).batch_ids()
        return committed[-1] if committed else None
    newest = _written(operator)
    return newest - 1 if newest else None


def _operator_at(checkpoint: str | os.PathLike[str] | CheckpointPath, operator: int,
                 batch: int | None) -> tuple[CheckpointPath, _Operator, int, BatchVersions]:
    """The checkpoint, its operator ``operator``, ``batch`` or else the newest committed batch, and the batches' versions."""
    root, state = _state_root(checkpoint)
    op = _Operator(state, operator)
    if batch is None:
        batch = _latest_batch(root, op)
        if batch is None:
            raise StateNotFoundError(f"no committed batch in {root}: operator {operator} holds no state version yet")
    return root, op, batch, _versions(root)


def _versions(root: CheckpointPath) -> BatchVersions:
    """The state version each batch committed: a query's checkpoint records it in its offsets log."""
    return BatchVersions(root / _OFFSETS if (root / _COMMITS).is_dir() or (root / _OFFSETS).is_dir() else None)


def _written(operator: _Operator) -> int:
    """The newest version every partition of ``operator`` holds a file of (0: none)."""
    return min((max([0, *files.versions(DELTA), *files.versions(SNAPSHOT)])
                for files in map(operator.files, range(operator.num_partitions))), default=0)


def _check_written(root: CheckpointPath, operator: _Operator, batch: int, versions: BatchVersions) -> int:
    """The version batch ``batch`` committed; refused beyond what every partition has written (rather than name the
    first delta it lacks)."""
    written = _written(operator)
    version = versions.committed_by(batch)
    if version > written:
        newest = versions.batch_of(written) if written else None
        held = "no batch" if not written else f"batches up to {newest}" if newest is not None else f"state versions up to {written}"
        raise StateNotFoundError(f"no state of batch {batch} in {root}: operator {operator.id} has written {held}")
    return version


# -- loading one version into a private copy --


def _load(files: PartitionFiles, version: int, into: Path) -> sqlite3.Connection:
    """Version ``version`` of a partition, rebuilt from its snapshot and deltas in a new SQLite file at ``into``.

    Only reads the checkpoint. A replay that meets a delta of another history starts over from an
    older snapshot, down to the empty state (the store's own rebuild: :func:`rebuild`).
    """
    return rebuild(files, version, lambda base: open_base(files, base, into), verb="read")


# -- the three readers --


@overload
def read_state(checkpoint: str | os.PathLike[str] | CheckpointPath, operator: int = 0, batch: int | None = None, *,
               spark: None = None) -> list[StateRecord]: ...


@overload
def read_state(checkpoint: str | os.PathLike[str] | CheckpointPath, operator: int = 0, batch: int | None = None, *,
               spark: SparkSession) -> DataFrame: ...


def read_state(checkpoint: str | os.PathLike[str] | CheckpointPath, operator: int = 0, batch: int | None = None, *,
               spark: SparkSession | None = None) -> list[StateRecord] | DataFrame:
    """The rows of an operator's state after batch ``batch`` (store version ``batch + 1``), by partition, in the store's order.

    ``checkpoint`` is the query's checkpoint directory (a DStream program's or a Pipeline's; its
    stores are under ``stateful/state``) or a stores' root holding ``state/`` (a path, or a URI
    reached through fsspec). ``batch`` defaults to the newest batch of the query's commits log
    (a batch whose delta is written but not committed is not shown; for a stores' root without
    logs, the newest version every partition holds). A ``flatMapGroupsWithState``
    operator gives one :class:`StateRecord` per key (kind ``"state"``); a ``transformWithState``
    operator one per value state, list element, map entry and timer, named through its schema file.

    It never disturbs a running query: it only reads the checkpoint's files, rebuilding each
    partition's version from its newest snapshot and deltas in a private temporary directory
    (mode 0700, removed afterwards), never the operator's working copy. A query that purges the
    files of old versions meanwhile makes the read of such a version fail, nothing else.

    With ``spark``, the rows come as a DataFrame instead, with the columns ``partition_id``,
    ``kind``, ``variable``, ``key``, ``item``, ``value`` and ``timeout_ms``: a column of keys,
    items or values has the type Spark infers from them (its own merge of their types: ints and
    strings become strings), or is their ``repr`` text when Spark infers none (a string beside a
    tuple, a class it cannot convert).

    Raises:
        StateNotFoundError: no such checkpoint or operator, nothing committed yet, or a batch not written yet.
        StateStoreError: a file the version needs is missing or damaged (the message names it).
        ValueError: a negative ``batch``.
        OSError: the system refuses to read the checkpoint or a file of it (no permission); it names the path.
    """
    root, op, batch, versions = _operator_at(checkpoint, operator, batch)
    if batch < 0:
        raise ValueError(f"a batch id is >= 0, got {batch}")
    version = _check_written(root, op, batch, versions)
    records: list[StateRecord] = []
    with tempfile.TemporaryDirectory(prefix="aiodstream-state-reader-") as private:  # mkdtemp: mode 0700
        for partition in range(op.num_partitions):
            files = op.files(partition)
            conn = _load(files, version, Path(private) / f"{partition}.sqlite")
            try:
                for key, value, timeout in conn.execute("SELECT key, value, timeout FROM state ORDER BY key"):
                    records.append(_decoded(op, files, version, partition, bytes(key), value, timeout))
            finally:
                conn.close()
    return records if spark is None else _dataframe(spark, [attrs.astuple(r, recurse=False) for r in records],
                                                    [f.name for f in attrs.fields(StateRecord)])


def _decoded(op: _Operator, files: PartitionFiles, version: int, partition: int, key: bytes, value: bytes | None,
             timeout: int) -> StateRecord:
    try:
        return op.decode(partition, key, value, timeout)
    except (pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError, IndexError) as exc:
        hint = ("; a class of the program's state must be importable where the state is read: put the program's "
                "modules on PYTHONPATH") if isinstance(exc, (ImportError, AttributeError)) else ""
        raise StateStoreError(f"cannot decode a row of {files.directory} at version {version} ({exc!r}); "
                              f"its key starts {key[:40]!r}{hint}") from exc


@overload
def read_state_changes(checkpoint: str | os.PathLike[str] | CheckpointPath, operator: int, start_batch: int,
                       end_batch: int | None = None, *, spark: None = None) -> list[StateChange]: ...


@overload
def read_state_changes(checkpoint: str | os.PathLike[str] | CheckpointPath, operator: int, start_batch: int,
                       end_batch: int | None = None, *, spark: SparkSession) -> DataFrame: ...


def read_state_changes(checkpoint: str | os.PathLike[str] | CheckpointPath, operator: int, start_batch: int,
                       end_batch: int | None = None, *, spark: SparkSession | None = None) -> list[StateChange] | DataFrame:
    """What batches ``start_batch`` to ``end_batch`` (inclusive; default: the newest committed) changed, from the deltas.

    By batch, then partition, then the order the batch wrote them; a row written and then
    removed in one batch appears once, as its last change. The deltas of consecutive batches
    must form one history (each names its parent's digest). Only reads the checkpoint.

    With ``spark``, a DataFrame with ``batch_id`` and ``change_type`` before :func:`read_state`'s columns.

    Raises:
        StateNotFoundError: as :func:`read_state` (``end_batch`` not written yet).
        StateStoreError: a delta of the range is missing (purged) or damaged, or two deltas are of different histories.
    """
    root, op, end_batch, versions = _operator_at(checkpoint, operator, end_batch)
    if start_batch < 0 or end_batch < start_batch:
        raise ValueError(f"the batches of a change feed are 0 <= start <= end, got {start_batch} to {end_batch}")
    _check_written(root, op, end_batch, versions)
    batches = [(batch, versions.committed_by(batch)) for batch in versions.batches(start_batch, end_batch)]
    by_partition: list[list[tuple[int, int, list[Change]]]] = []
    for partition in range(op.num_partitions):
        files, deltas, parent_digest = op.files(partition), [], None
        for batch, version in batches:
            path = files.path(version, DELTA)
            digest, parent, changes = read_delta(path)
            if parent_digest is not None and parent is not None and parent != parent_digest:
                raise StateStoreError(f"{path} was written on top of another history than {files.path(version - 1, DELTA)}")
            parent_digest = digest
            deltas.append((batch, version, changes))
        by_partition.append(deltas)
    result: list[StateChange] = []
    for i in range(len(batches)):
        for partition, deltas in enumerate(by_partition):
            batch, version, changes = deltas[i]
            files = op.files(partition)
            for key, value, timeout in changes:
                record = _decoded(op, files, version, partition, key, value, timeout)
                result.append(StateChange(batch, "delete" if timeout == REMOVED else "update", record))
    if spark is None:
        return result
    names = ["batch_id", "change_type", *(f.name for f in attrs.fields(StateRecord))]
    return _dataframe(spark, [(c.batch_id, c.change_type, *attrs.astuple(c.record, recurse=False)) for c in result], names)


@overload
def read_state_metadata(checkpoint: str | os.PathLike[str] | CheckpointPath, *,
                        spark: None = None) -> list[StateOperatorMetadata]: ...


@overload
def read_state_metadata(checkpoint: str | os.PathLike[str] | CheckpointPath, *, spark: SparkSession) -> DataFrame: ...


def read_state_metadata(checkpoint: str | os.PathLike[str] | CheckpointPath, *,
                        spark: SparkSession | None = None) -> list[StateOperatorMetadata] | DataFrame:
    """The stateful operators of a checkpoint, by id: name, partitions, the batches their state can be read at.

    The batches are those every partition can load (a snapshot or the empty state, then unbroken
    deltas), up to the newest committed one; files are listed, not read (a damaged one shows
    when :func:`read_state` reads it). With ``spark``, a DataFrame of the same columns.

    Raises:
        StateNotFoundError: no such checkpoint, or no state store in it.
        StateStoreError: a damaged schema or partition count file.
        OSError: the system refuses to read the checkpoint or a file of it (no permission); it names the path.
    """
    root, state = _state_root(checkpoint)
    versions = _versions(root)
    result = []
    for operator_id in _numbered(state):
        op = _Operator(state, operator_id)
        latest = _latest_batch(root, op)
        spans = [_loadable(op.files(p)) for p in range(op.num_partitions)]
        low = max((s[0] for s in spans if s is not None), default=None)
        high = min((s[1] for s in spans if s is not None), default=None)
        if latest is not None and high is not None:
            high = min(high, versions.committed_by(latest))
        if latest is None or any(s is None for s in spans) or low is None or high is None or low > high:
            low = high = None
        # The versions' batches; with recorded versions, the oldest batch whose entry is still logged
        first = None if low is None or high is None else next(
            (b for b in map(versions.batch_of, range(low, high + 1)) if b is not None), None)
        result.append(StateOperatorMetadata(operator_id, op.name, op.num_partitions, first,
                                            None if high is None else versions.batch_of(high), op.schema_text or "{}"))
    if spark is None:
        return result
    return _dataframe(spark, [attrs.astuple(m) for m in result], [f.name for f in attrs.fields(StateOperatorMetadata)])


def _loadable(files: PartitionFiles) -> tuple[int, int] | None:
    """The oldest and newest versions (at least 1) that a partition's files can rebuild, or None."""
    deltas = set(files.versions(DELTA))
    bases = [0, *files.versions(SNAPSHOT)]
    versions = set()
    for base in bases:
        v = base
        if base:
            versions.add(base)
        while v + 1 in deltas:
            v += 1
            versions.add(v)
    return (min(versions), max(versions)) if versions else None


_LONGS = frozenset({"partition_id", "timeout_ms", "batch_id", "operator_id", "num_partitions", "min_batch_id",
                    "max_batch_id"})
_STRINGS = frozenset({"kind", "variable", "change_type", "operator_name", "operator_properties"})


def _dataframe(spark: SparkSession, rows: Sequence[tuple[Any, ...]], names: Sequence[str]) -> DataFrame:
    """The rows as a DataFrame: the reader's own columns typed; keys, items and values as Spark infers them, else as repr text."""
    from pyspark.sql.types import DataType, LongType, NullType, StringType, StructField, StructType

    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    fields, text = [], set()
    for i, (name, values) in enumerate(zip(names, columns, strict=True)):
        present = [(v,) for v in values if v is not None]
        kind: DataType
        if name in _LONGS:
            kind = LongType()
        elif name in _STRINGS:
            kind = StringType()
        elif not present:
            kind = NullType()
        else:
            try:
                kind = spark.createDataFrame(present, [name]).schema[0].dataType
            except (TypeError, ValueError):  # pyspark's inference errors (PySparkTypeError, PySparkValueError) are these
                kind = StringType()
                text.add(i)
        fields.append(StructField(name, kind))
    if text:
        rows = [tuple(repr(v) if i in text and v is not None else v for i, v in enumerate(row)) for row in rows]
    return spark.createDataFrame(list(rows), StructType(fields))
