"""The state reader (read_state, read_state_changes, read_state_metadata, ``aiodstream state``) on real checkpoints."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler import ManualClock, Seconds
from streaming import StreamingRuntime
from streaming._cli import main
from streaming.state import (
    NO_TIMESTAMP,
    TRANSFORM_WITH_STATE_OPERATOR,
    ExpiredTimerInfo,
    StateChange,
    StatefulProcessor,
    StatefulProcessorHandle,
    StateNotFoundError,
    StateOperatorMetadata,
    StateRecord,
    StateStoreError,
    StateStoreProvider,
    TimerValues,
    TransformWithStateSpec,
    read_state,
    read_state_changes,
    read_state_metadata,
    record_schema,
)
from streaming.state._processor_rows import (
    SCHEMA_FILE,
    encode_index,
    encode_map_key,
    key_bytes,
    timer_key,
    variable_prefix,
)
from tests.anyio_support import raises_exactly
from tests.streaming.groups.test_pipeline_groups import program
from tests.support import advance, run_pipeline_for

MINUTE = 60_000


pytestmark = pytest.mark.usefixtures("keep_logging_config")  # the command line configures the library's logger


def run_pipeline(pipeline: Any, directory: Path, seconds: int) -> None:
    """Run ``pipeline`` with its checkpoint in ``directory`` for ``seconds`` one-second batches on a manual clock."""
    anyio.run(run_pipeline_for, pipeline, directory, 0, seconds * 1000)


def sessions_checkpoint(directory: Path, seconds: int = 6) -> list[Any]:
    """A Pipeline's flatMapGroupsWithState checkpoint (the sessions program, two clicks a batch) after ``seconds`` batches."""
    closed: list[Any] = []
    run_pipeline(program(closed), directory, seconds)
    return closed


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sessions checkpoint after six batches (shared: the reader only reads it)."""
    directory = tmp_path_factory.mktemp("sessions") / "ck"
    assert sessions_checkpoint(directory) == [(4_000, "bob", 2, 2 * MINUTE, 3 * MINUTE),
                                              (5_000, "ada", 3, 1 * MINUTE, 50 * MINUTE)]
    return directory


def group(key: str, value: Any, timeout: int | None) -> StateRecord:
    """A flatMapGroupsWithState row of partition 0."""
    return StateRecord(0, "state", None, key, None, value, timeout)


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` with its size and modification time (to see that nothing changed)."""
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*") if p.is_file()}


# -- flatMapGroupsWithState --


def test_the_rows_after_each_batch_are_the_sessions_state_then(sessions: Path) -> None:
    """By default the newest committed batch's state; after batch 2 the three open sessions (each key's GroupState and
    its event-time timeout), by pickled key."""
    assert read_state(sessions) == [
        group("cy", (2, 40 * MINUTE, 96 * MINUTE), 126 * MINUTE),
        group("dee", (1, 95 * MINUTE, 95 * MINUTE), 125 * MINUTE),
    ]
    assert read_state(sessions, 0, 5) == read_state(sessions)
    assert read_state(sessions, batch=2) == [
        group("cy", (1, 40 * MINUTE, 40 * MINUTE), 70 * MINUTE),
        group("ada", (3, 1 * MINUTE, 50 * MINUTE), 80 * MINUTE),
        group("bob", (2, 2 * MINUTE, 3 * MINUTE), 33 * MINUTE),
    ]
    assert read_state(sessions, batch=0) == [
        group("ada", (1, 1 * MINUTE, 1 * MINUTE), 31 * MINUTE),
        group("bob", (1, 2 * MINUTE, 2 * MINUTE), 32 * MINUTE),
    ]


def test_the_change_feed_gives_each_batchs_writes_and_removals(sessions: Path) -> None:
    """Batches 3 and 4: dee's session opens and bob's closes (a delete), then cy's grows and ada's closes."""
    def changed(batch: int, kind: str, key: str, value: Any = None, timeout: int | None = None) -> StateChange:
        return StateChange(batch, kind, group(key, value, timeout))

    assert read_state_changes(sessions, 0, 3, 4) == [
        changed(3, "update", "dee", (1, 95 * MINUTE, 95 * MINUTE), 125 * MINUTE),
        changed(3, "delete", "bob"),
        changed(4, "update", "cy", (2, 40 * MINUTE, 96 * MINUTE), 126 * MINUTE),
        changed(4, "delete", "ada"),
    ]
    assert read_state_changes(sessions, 0, 5) == []  # to the newest committed batch, which changed nothing


def test_the_metadata_names_the_operator_its_partitions_and_batches(sessions: Path) -> None:
    """One flatMapGroupsWithState operator with one partition (a Pipeline's), readable after batches 0 to 5."""
    assert read_state_metadata(sessions) == [StateOperatorMetadata(0, "flatMapGroupsWithState", 1, 0, 5, "{}")]


def test_reading_changes_nothing_in_the_checkpoint_and_leaves_its_leftovers(tmp_path: Path) -> None:
    """The reader writes nothing under the checkpoint: not even the temporary files a store's sweep would remove."""
    directory = tmp_path / "ck"
    sessions_checkpoint(directory, seconds=3)
    leftover = directory / "stateful" / "state" / "0" / "0" / ".2.delta.0f0e.tmp"
    leftover.write_bytes(b"a killed writer's")
    before = listing(directory)
    read_state(directory)
    read_state(directory, batch=0)
    read_state_changes(directory, 0, 0)
    read_state_metadata(directory)
    assert listing(directory) == before


def test_reading_while_the_query_runs_leaves_it_as_if_nobody_had(tmp_path: Path) -> None:
    """Reads between the batches of a running Pipeline: the sessions close as without them, and every batch after the
    first still loads its working copy (no rebuild: the reader never touched it)."""
    closed: list[Any] = []
    seen: list[list[StateRecord]] = []

    async def run() -> list[Any]:
        clock = ManualClock(0)
        async with StreamingRuntime(program(closed), Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
            await rt.start()
            for _ in range(6):
                await advance(rt, clock, 1_000)
                seen.append(read_state(tmp_path / "ck"))
                read_state_changes(tmp_path / "ck", 0, 0)
            progress = rt.recent_progress
            await rt.stop()
        return progress

    progress = anyio.run(run)
    assert closed == [(4_000, "bob", 2, 2 * MINUTE, 3 * MINUTE), (5_000, "ada", 3, 1 * MINUTE, 50 * MINUTE)]
    assert seen == [read_state(tmp_path / "ck", batch=b) for b in range(6)]
    assert [p.state_operators[0].custom_metrics["loadedMapCacheMissCount"] for p in progress] == [0] * 6


def test_a_checkpoint_on_another_file_system_reads_through_fsspec(sessions: Path) -> None:
    """The sessions checkpoint copied to a ``memory://`` file system reads the same rows, changes and metadata."""
    import uuid

    import fsspec

    memory = fsspec.filesystem("memory")
    root = f"/aiodstream-test-{uuid.uuid4().hex}"
    memory.put(str(sessions), f"{root}/ck", recursive=True)
    try:
        uri = f"memory://{root}/ck"
        assert read_state(uri) == read_state(sessions)
        assert read_state(uri, batch=1) == read_state(sessions, batch=1)
        assert read_state_changes(uri, 0, 0) == read_state_changes(sessions, 0, 0)
        assert read_state_metadata(uri) == read_state_metadata(sessions)
    finally:
        memory.rm(root, recursive=True)


def test_a_batch_whose_delta_is_written_but_not_committed_is_not_the_default(tmp_path: Path) -> None:
    """Commits 4 and 5 gone (a crash after their deltas): the default is batch 3's state, and the metadata ends there."""
    directory = tmp_path / "ck"
    sessions_checkpoint(directory)
    for batch in (4, 5):
        (directory / "commits" / str(batch)).unlink()
    assert read_state(directory) == read_state(directory, batch=3) != read_state(directory, batch=5)
    assert read_state_metadata(directory) == [StateOperatorMetadata(0, "flatMapGroupsWithState", 1, 0, 3, "{}")]
    for batch in range(4):
        (directory / "commits" / str(batch)).unlink()
    with raises_exactly(StateNotFoundError, f"no committed batch in {directory}: operator 0 holds no state version yet"):
        read_state(directory)
    assert read_state_metadata(directory) == [StateOperatorMetadata(0, "flatMapGroupsWithState", 1, None, None, "{}")]


def test_a_batch_not_written_yet_is_refused_naming_the_newest_one(sessions: Path) -> None:
    """Batch 50 of a checkpoint of six batches: refused with the batches held, for the rows and for the change feed."""
    message = f"no state of batch 50 in {sessions}: operator 0 has written batches up to 5"
    with raises_exactly(StateNotFoundError, message):
        read_state(sessions, batch=50)
    with raises_exactly(StateNotFoundError, message):
        read_state_changes(sessions, 0, 3, 50)
    assert len(read_state_changes(sessions, 0, 3, 5)) == len(read_state_changes(sessions, 0, 3))


def test_the_reader_sees_committed_versions_while_the_operator_holds_its_store_open(tmp_path: Path) -> None:
    """A store loaded for the next batch, with a write not yet committed: the reader gives the committed version, and
    the operator commits afterwards as if nothing happened."""
    root = tmp_path / "ck" / "stateful"
    provider = StateStoreProvider(root, 0, 0, local_dir=tmp_path / "wc")
    store = provider.load(0)
    store.put(key_bytes("a"), pickle.dumps(1), NO_TIMESTAMP)
    store.commit()
    store = provider.load(1)
    store.put(key_bytes("a"), pickle.dumps(2), NO_TIMESTAMP)
    assert read_state(tmp_path / "ck") == [group("a", 1, None)]
    assert store.commit() == 2
    assert read_state(tmp_path / "ck") == [group("a", 2, None)]
    assert provider.statistics().rebuilt == 0
    provider.close()


def test_a_value_whose_class_is_not_importable_here_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    """A state value of a class the reading process cannot import: StateStoreError naming the row and PYTHONPATH."""
    root = tmp_path / "ck" / "stateful"
    provider = StateStoreProvider(root, 0, 0, local_dir=tmp_path / "wc")
    store = provider.load(0)
    store.put(key_bytes("a"), b"cno_such_module_here\nThing\n.", NO_TIMESTAMP)  # a pickled global of a missing module
    store.commit()
    provider.close()
    with raises_exactly(StateStoreError, f"cannot decode a row of {root / 'state' / '0' / '0'} at version 1 "
                                         "(ModuleNotFoundError(\"No module named 'no_such_module_here'\")); its key starts "
                                         f"{key_bytes('a')!r}; a class of the program's state must be importable where "
                                         "the state is read: put the program's modules on PYTHONPATH"):
        read_state(tmp_path / "ck")


# -- transformWithState rows (written through the store in the shared layout) --


SCHEMA = {"format": 1, "timeMode": "ProcessingTime", "outputMode": "Update", "variables": [
    {"name": "count", "kind": "value", "ttl": None, "schema": "int"},
    {"name": "seen", "kind": "list", "ttl": 60_000, "schema": "str"},
    {"name": "per", "kind": "map", "ttl": None, "schema": "str -> int"},
]}


def tws_checkpoint(directory: Path, local: Path, *, snapshot_every: int = 10, retain: int = 100) -> None:
    """A two-partition transformWithState operator's store after three batches, written row by row in the shared layout.

    Partition 0 holds user "u": batch 0 sets count 1, appends "a" and "b" to seen (ttl expiry 61000), puts per["x"]=1
    and a timer at 5000; batch 1 sets count 2, removes seen's first element, puts per["y"]=2; batch 2 deletes the
    timer and registers one at 9000. Partition 1 holds ("v", 7): count 10 in batch 0, nothing after.
    """
    root = directory / "stateful"
    (root / "state" / "0").mkdir(parents=True)
    (root / "state" / "0" / SCHEMA_FILE).write_text(json.dumps(SCHEMA))
    (root / "state" / "0" / "partitions").write_text("2")
    u, v = key_bytes("u"), key_bytes(("v", 7))
    batches: list[dict[int, list[tuple[bytes, Any, int]]]] = [
        {0: [(variable_prefix("count", u), 1, NO_TIMESTAMP), (variable_prefix("seen", u) + encode_index(0), "a", 61_000),
             (variable_prefix("seen", u) + encode_index(1), "b", 61_000),
             (variable_prefix("per", u) + encode_map_key("x"), 1, NO_TIMESTAMP), (timer_key(u, 5_000), None, 5_000)],
         1: [(variable_prefix("count", v), 10, NO_TIMESTAMP)]},
        {0: [(variable_prefix("count", u), 2, NO_TIMESTAMP), (variable_prefix("seen", u) + encode_index(0), "-", -2),
             (variable_prefix("per", u) + encode_map_key("y"), 2, NO_TIMESTAMP)]},
        {0: [(timer_key(u, 5_000), None, -2), (timer_key(u, 9_000), None, 9_000)]},
    ]
    for partition in (0, 1):
        provider = StateStoreProvider(root, 0, partition, local_dir=local, snapshot_every=snapshot_every,
                                      min_versions_to_retain=retain)
        for batch, writes in enumerate(batches):
            store = provider.load(batch)
            for key, value, timeout in writes.get(partition, []):
                if timeout == -2:
                    store.remove(key)
                else:
                    store.put(key, None if value is None else pickle.dumps(value), timeout)
            store.commit()
            provider.maintenance()
        provider.close()


def test_transform_with_state_rows_are_named_by_variable_element_entry_and_timer(tmp_path: Path) -> None:
    """Every value, list element (with its index and TTL expiry), map entry and timer, partition by partition, in the
    store's order (timers first, then the variables by name length and name, each by grouping key)."""
    tws_checkpoint(tmp_path / "ck", tmp_path / "wc")
    assert read_state(tmp_path / "ck") == [
        StateRecord(0, "timer", None, "u", None, None, 9_000),
        StateRecord(0, "map", "per", "u", "x", 1, None),
        StateRecord(0, "map", "per", "u", "y", 2, None),
        StateRecord(0, "list", "seen", "u", 1, "b", 61_000),
        StateRecord(0, "value", "count", "u", None, 2, None),
        StateRecord(1, "value", "count", ("v", 7), None, 10, None),
    ]
    assert read_state(tmp_path / "ck", batch=0) == [
        StateRecord(0, "timer", None, "u", None, None, 5_000),
        StateRecord(0, "map", "per", "u", "x", 1, None),
        StateRecord(0, "list", "seen", "u", 0, "a", 61_000),
        StateRecord(0, "list", "seen", "u", 1, "b", 61_000),
        StateRecord(0, "value", "count", "u", None, 1, None),
        StateRecord(1, "value", "count", ("v", 7), None, 10, None),
    ]
    assert read_state_changes(tmp_path / "ck", 0, 1, 2) == [
        StateChange(1, "update", StateRecord(0, "value", "count", "u", None, 2, None)),
        StateChange(1, "delete", StateRecord(0, "list", "seen", "u", 0, None, None)),
        StateChange(1, "update", StateRecord(0, "map", "per", "u", "y", 2, None)),
        StateChange(2, "delete", StateRecord(0, "timer", None, "u", None, None, 5_000)),
        StateChange(2, "update", StateRecord(0, "timer", None, "u", None, None, 9_000)),
    ]
    (metadata,) = read_state_metadata(tmp_path / "ck")
    assert (metadata.operator_name, metadata.num_partitions, metadata.min_batch_id, metadata.max_batch_id) == (
        TRANSFORM_WITH_STATE_OPERATOR, 2, 0, 2)
    assert json.loads(metadata.operator_properties) == SCHEMA


def test_versions_come_from_snapshots_and_purged_ones_are_refused_by_name(tmp_path: Path) -> None:
    """Snapshots every 2 versions, 1 retained: version 3 loads from snapshot 2 plus delta 3; the metadata says batches
    1..2 remain; batch 0 needs delta 1, which is gone, and the error names it."""
    tws_checkpoint(tmp_path / "ck", tmp_path / "wc", snapshot_every=2, retain=1)
    partition = tmp_path / "ck" / "stateful" / "state" / "0" / "0"
    assert sorted(p.name for p in partition.iterdir()) == ["2.snapshot", "3.delta"]
    assert read_state(tmp_path / "ck")[0] == StateRecord(0, "timer", None, "u", None, None, 9_000)
    assert [(m.min_batch_id, m.max_batch_id) for m in read_state_metadata(tmp_path / "ck")] == [(1, 2)]
    with raises_exactly(StateStoreError, f"state store file {partition}/1.delta is missing"):
        read_state(tmp_path / "ck", batch=0)


def test_a_pipelines_transform_with_state_checkpoint_reads_back_sessions_and_timers(tmp_path: Path) -> None:
    """The event-time sessions of transformWithState on a Pipeline after six batches: bob's and ada's sessions closed
    (their values cleared, their timers fired); cy's and dee's open, each with its timer 30 minutes after its last click."""
    from tests.streaming.tws.test_pipeline_tws import EXPECTED
    from tests.streaming.tws.test_pipeline_tws import program as tws_program

    closed: list[Any] = []
    run_pipeline(tws_program(closed), tmp_path / "ck", 6)
    assert closed == EXPECTED
    assert read_state(tmp_path / "ck") == [
        StateRecord(0, "timer", None, "cy", None, None, 126 * MINUTE),
        StateRecord(0, "timer", None, "dee", None, None, 125 * MINUTE),
        StateRecord(0, "value", "session", "cy", None, (2, 40 * MINUTE, 96 * MINUTE), None),
        StateRecord(0, "value", "session", "dee", None, (1, 95 * MINUTE, 95 * MINUTE), None),
    ]
    changes = read_state_changes(tmp_path / "ck", 0, 4, 4)  # cy's click at 96 min moves her timer; ada's fires
    assert [(c.change_type, c.record.kind, c.record.key, c.record.timeout_ms) for c in changes] == [
        ("delete", "timer", "cy", 70 * MINUTE), ("update", "value", "cy", None), ("update", "timer", "cy", 126 * MINUTE),
        ("delete", "value", "ada", None), ("delete", "timer", "ada", 85 * MINUTE)]
    (metadata,) = read_state_metadata(tmp_path / "ck")
    assert (metadata.operator_name, metadata.num_partitions, metadata.min_batch_id, metadata.max_batch_id) == (
        TRANSFORM_WITH_STATE_OPERATOR, 1, 0, 5)
    assert [(v["name"], v["kind"]) for v in json.loads(metadata.operator_properties)["variables"]] == [("session", "value")]


# -- refusals --


def test_a_damaged_delta_or_snapshot_is_refused_with_its_name(tmp_path: Path) -> None:
    """A flipped byte in a delta fails its checksum, the message names the file; a truncated snapshot too."""
    directory = tmp_path / "ck"
    sessions_checkpoint(directory, seconds=3)
    delta = directory / "stateful" / "state" / "0" / "0" / "2.delta"
    data = bytearray(delta.read_bytes())
    data[-40] ^= 1
    delta.write_bytes(bytes(data))
    damaged = f"state store file {delta} is damaged: its checksum does not match (a torn or altered write)"
    with raises_exactly(StateStoreError, damaged):
        read_state(directory)
    with raises_exactly(StateStoreError, damaged):
        read_state_changes(directory, 0, 0, 2)
    assert read_state(directory, batch=0) == [group("ada", (1, MINUTE, MINUTE), 31 * MINUTE),
                                              group("bob", (1, 2 * MINUTE, 2 * MINUTE), 32 * MINUTE)]
    snapshot = tmp_path / "tws" / "stateful" / "state" / "0" / "1" / "2.snapshot"
    tws_checkpoint(tmp_path / "tws", tmp_path / "wc", snapshot_every=2, retain=1)
    snapshot.write_bytes(snapshot.read_bytes()[:100])
    with raises_exactly(StateStoreError, f"state store file {snapshot} is damaged: its checksum does not match (a torn or "
                                         "altered write)"):
        read_state(tmp_path / "tws")


def test_missing_checkpoints_operators_and_schemas_are_refused_clearly(sessions: Path, tmp_path: Path) -> None:
    """No directory, no state store in it, no such operator, a schema file that is not JSON: each named."""
    with raises_exactly(StateStoreError, f"no checkpoint at {tmp_path / 'nope'}: the directory does not exist"):
        read_state(tmp_path / "nope")
    with raises_exactly(StateStoreError, f"no state store in {tmp_path}: neither {tmp_path}/stateful/state nor "
                                         f"{tmp_path}/state is a directory (the checkpoint of a query without "
                                         "mapGroupsWithState, flatMapGroupsWithState or transformWithState?)"):
        read_state_metadata(tmp_path)
    state = sessions / "stateful" / "state"
    with raises_exactly(StateStoreError, f"no state of operator 2 in {state}: {state}/2 does not exist (operators held: [0])"):
        read_state(sessions, 2)
    with raises_exactly(ValueError, "the batches of a change feed are 0 <= start <= end, got 4 to 3"):
        read_state_changes(sessions, 0, 4, 3)
    tws_checkpoint(tmp_path / "ck", tmp_path / "wc")
    schema = tmp_path / "ck" / "stateful" / "state" / "0" / SCHEMA_FILE
    schema.write_text("{not json")
    with pytest.raises(StateStoreError, match=f"^state store file {schema} is damaged: not a transformWithState schema"):
        read_state(tmp_path / "ck")


# -- the command line --


def test_the_command_line_shows_operators_rows_and_changes(sessions: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``aiodstream state DIR`` lists the operators; --operator the rows; --changes a range's changes; --json as JSON."""
    assert main(["state", str(sessions)]) == 0
    assert capsys.readouterr().out == (
        f"checkpoint  {sessions}\n"
        "operator 0  flatMapGroupsWithState, 1 partition, batches 0..5\n"
    )
    assert main(["state", str(sessions), "--operator", "0"]) == 0
    assert capsys.readouterr().out == (
        "partition  kind   variable  key    item  value                  timeout_ms\n"
        "0          state  -         'cy'   -     (2, 2400000, 5760000)  7560000\n"
        "0          state  -         'dee'  -     (1, 5700000, 5700000)  7500000\n"
        "(2 rows)\n"
    )
    assert main(["state", str(sessions), "--operator", "0", "--changes", "3:3"]) == 0
    assert capsys.readouterr().out == (
        "batch  change  partition  kind   variable  key    item  value                  timeout_ms\n"
        "3      update  0          state  -         'dee'  -     (1, 5700000, 5700000)  7500000\n"
        "3      delete  0          state  -         'bob'  -     -                      -\n"
        "(2 rows)\n"
    )
    assert main(["state", str(sessions), "--operator", "0", "--batch", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"partition": 0, "kind": "state", "variable": None, "key": "cy", "item": None, "value": [2, 2400000, 5760000],
         "timeout_ms": 7560000},
        {"partition": 0, "kind": "state", "variable": None, "key": "dee", "item": None, "value": [1, 5700000, 5700000],
         "timeout_ms": 7500000},
    ]
    assert main(["state", str(sessions), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"operatorId": 0, "operatorName": "flatMapGroupsWithState",
                                                    "numPartitions": 1, "minBatchId": 0, "maxBatchId": 5,
                                                    "operatorProperties": {}}]


def test_the_command_line_shows_a_transform_with_state_operators_variables(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The operator line lists the variables with their kinds and TTLs."""
    tws_checkpoint(tmp_path / "ck", tmp_path / "wc")
    assert main(["state", str(tmp_path / "ck")]) == 0
    assert capsys.readouterr().out == (
        f"checkpoint  {tmp_path / 'ck'}\n"
        f"operator 0  {TRANSFORM_WITH_STATE_OPERATOR}, 2 partitions, batches 0..2; variables: count (value), seen (list, "
        "ttl 60000 ms), per (map)\n"
    )


def test_the_command_line_reports_damage_and_misuse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing delta exits 4 with its name on stderr; --batch without --operator exits 2."""
    directory = tmp_path / "ck"
    sessions_checkpoint(directory, seconds=2)
    delta = directory / "stateful" / "state" / "0" / "0" / "1.delta"
    os.remove(delta)
    assert main(["state", str(directory), "--operator", "0"]) == 4
    assert capsys.readouterr().err == f"aiodstream state: error: state store file {delta} is missing\n"
    assert main(["state", str(directory), "--batch", "1"]) == 2
    assert capsys.readouterr().err == "aiodstream state: error: --batch and --changes need --operator\n"


@pytest.mark.parametrize(("args", "message"), [
    (["{missing}"], "no checkpoint at {missing}: the directory does not exist"),
    (["{file}"], "no checkpoint at {file}: it is a file, not a directory"),
    # (lane L4: a link looping to itself was called "a file")
    (["{loop}"], "no checkpoint at {loop}: it is a loop of symbolic links, not a directory"),
    (["{fifo}"], "no checkpoint at {fifo}: it is a FIFO, not a directory"),
    (["{ck}", "--operator", "7"], "no state of operator 7 in {ck}/stateful/state: {ck}/stateful/state/7 does not exist "
     "(operators held: [0])"),
    (["{ck}", "--operator", "0", "--batch", "1000"], "no state of batch 1000 in {ck}: operator 0 has written batches up to 5"),
    (["{ck}", "--operator", "0", "--changes", "3:1000"],
     "no state of batch 1000 in {ck}: operator 0 has written batches up to 5"),
])
def test_the_command_line_exits_2_for_what_the_checkpoint_does_not_hold(
        sessions: Path, tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing checkpoint, a file in its place, an operator or a batch it does not hold: the arguments' fault, exit 2
    (4 is for damage)."""
    (tmp_path / "file").write_text("not a checkpoint")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    os.mkfifo(tmp_path / "fifo")
    names = {"missing": tmp_path / "missing", "file": tmp_path / "file", "loop": tmp_path / "loop",
             "fifo": tmp_path / "fifo", "ck": sessions}
    for command in ("state", "checkpoint") if args[0] in ("{loop}", "{fifo}") else ("state",):
        assert main([command, *(a.format(**names) for a in args)]) == 2
        assert capsys.readouterr().err == f"aiodstream {command}: error: {message.format(**names)}\n"


def test_an_empty_checkpoint_path_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """`aiodstream state ""` and `aiodstream checkpoint ""` exit 2 naming the mistake (not the current directory)."""
    for command in ("state", "checkpoint"):
        with pytest.raises(SystemExit) as exited:
            main([command, ""])
        assert exited.value.code == 2
        assert capsys.readouterr().err.endswith(f"aiodstream {command}: error: argument directory: the checkpoint directory "
                                                "is empty; give its path ('.' for this directory)\n")


# -- on Spark: a DStream program's checkpoint, and DataFrames --


@pytest.mark.spark
def test_a_dstream_programs_state_reads_back_and_comes_as_dataframes(spark_context: Any, tmp_path: Path) -> None:
    """mapGroupsWithState over two partitions on Spark: after two batches x counted 2 beats (timeout 2000 + 2500 ms)
    and y one (1000 + 2500); the same rows as a DataFrame, and the metadata and changes as DataFrames too."""
    from pyspark.sql import SparkSession

    from tests.streaming.groups.test_dstream_groups import run

    directory = tmp_path / "ck"
    outputs, _ = run(spark_context, directory, [["x", "y"], ["x"]])
    assert outputs == {1000: [("x", "online", 1), ("y", "online", 1)], 2000: [("x", "online", 2)]}
    records = read_state(directory)
    assert sorted((r.kind, r.key, r.value, r.timeout_ms) for r in records) == [("state", "x", 2, 4_500),
                                                                                 ("state", "y", 1, 3_500)]
    assert [r.partition_id for r in records] == sorted(r.partition_id for r in records)
    assert read_state_metadata(directory) == [StateOperatorMetadata(0, "flatMapGroupsWithState", 2, 0, 1, "{}")]
    spark = SparkSession(spark_context)
    frame = read_state(directory, spark=spark)
    assert frame.columns == ["partition_id", "kind", "variable", "key", "item", "value", "timeout_ms"]
    assert [tuple(row) for row in frame.collect()] == [(r.partition_id, "state", None, r.key, None, r.value, r.timeout_ms)
                                                       for r in records]
    assert [tuple(row) for row in read_state_metadata(directory, spark=spark).collect()] == [
        (0, "flatMapGroupsWithState", 2, 0, 1, "{}")]
    changes = read_state_changes(directory, 0, 1, spark=spark)
    assert [(row.batch_id, row.change_type, row.key, row.value) for row in changes.collect()] == [(1, "update", "x", 2)]


@pytest.mark.spark
def test_a_dataframe_column_of_mixed_types_holds_their_repr(spark_context: Any, tmp_path: Path) -> None:
    """transformWithState rows mix keys (str and tuple: no Spark type holds both, so their repr), items (str map keys and
    int list indexes) and values (int and str: Spark's inference merges both into strings)."""
    from pyspark.sql import SparkSession

    tws_checkpoint(tmp_path / "ck", tmp_path / "wc")
    frame = read_state(tmp_path / "ck", spark=SparkSession(spark_context))
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [
        ("partition_id", "bigint"), ("kind", "string"), ("variable", "string"), ("key", "string"), ("item", "string"),
        ("value", "string"), ("timeout_ms", "bigint")]
    assert [tuple(row) for row in frame.collect()] == [
        (0, "timer", None, "'u'", None, None, 9_000),
        (0, "map", "per", "'u'", "x", "1", None),
        (0, "map", "per", "'u'", "y", "2", None),
        (0, "list", "seen", "'u'", "1", "b", 61_000),
        (0, "value", "count", "'u'", None, "2", None),
        (1, "value", "count", "('v', 7)", None, "10", None),
    ]


# -- against the processor's own view --


class Ledger(StatefulProcessor):
    """Per account: a count, the recent amounts (a list with a 2.5 s TTL), the total per merchant (a map) and a timer
    3 s after each amount over 100; an amount of 0 forgets its merchant; a fired timer clears the map. A ``"dump"``
    row writes nothing and outputs everything the processor sees of its key."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Three variables of the three kinds."""
        self.handle = handle
        self.count = handle.getValueState("count", "int")
        self.recent = handle.getListState("recent", "int", 2_500)
        self.per = handle.getMapState("per", "str", "int")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        """Apply the amounts, or dump the state."""
        for row in rows:
            if row == "dump":
                yield (key, self.count.get(), list(self.recent.get()), dict(self.per.iterator()),
                       list(self.handle.listTimers()))
                continue
            merchant, amount = row
            self.count.update((self.count.get() or 0) + 1)
            self.recent.appendValue(amount)
            if amount == 0:
                self.per.removeKey(merchant)
            else:
                self.per.updateValue(merchant, (self.per.getValue(merchant) or 0) + amount)
            if amount > 100:
                self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 3_000)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,  # noqa: N803
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Any]:  # noqa: N803
        """Clear the map."""
        self.per.clear()
        return iter(())


def view(records: list[StateRecord]) -> list[tuple[Any, ...]]:
    """The reader's rows as Ledger's dump: per key, the count, the recent amounts by index, the map, the timers."""
    result = []
    for key in sorted({r.key for r in records}):
        mine = [r for r in records if r.key == key]
        count = next((r.value for r in mine if r.kind == "value"), None)
        recent = [r.value for r in sorted((r for r in mine if r.kind == "list"), key=lambda r: r.item)]
        per = {r.item: r.value for r in mine if r.kind == "map"}
        timers = sorted(r.timeout_ms for r in mine if r.kind == "timer")
        result.append((key, count, recent, per, timers))
    return result


def test_the_reader_gives_exactly_the_state_the_processor_holds_after_n_batches(tmp_path: Path) -> None:
    """Six batches of a processor using the three kinds of state, a TTL and timers; then a batch at the same time that
    only dumps what the processor sees: the reader's rows after batch 5 (and 6) are exactly that, TTL expiries included."""
    from tests.streaming.tws.tws_support import Batches

    spec = TransformWithStateSpec(Ledger(), "update", "ProcessingTime", False)
    record_schema(tmp_path / "ck", 0, spec)
    runs = Batches(tmp_path, spec)
    batches = [
        [("ann", ("shop", 10)), ("bo", ("cafe", 5))],
        [("ann", ("shop", 150)), ("cy", ("bar", 7))],
        [("bo", ("cafe", 0)), ("ann", ("book", 3))],
        [],
        [("cy", ("bar", 200)), ("bo", ("pub", 4))],
        [("ann", ("shop", 1))],
    ]
    for second, records in enumerate(batches, start=1):
        runs.run(records, batch_ms=second * 1_000)
    dump = runs.run([(key, "dump") for key in ("ann", "bo", "cy")], batch_ms=6_000)
    # ann's timer (2 s + 3 s) fired at 5 s and cleared her map; the amounts of 1-3 s expired (TTL 2.5 s) by 6 s.
    assert sorted(dump) == [("ann", 4, [1], {"shop": 1}, []), ("bo", 3, [4], {"pub": 4}, []),
                            ("cy", 2, [200], {"bar": 207}, [8_000])]
    assert view(read_state(tmp_path / "ck", batch=5)) == sorted(dump)
    assert read_state(tmp_path / "ck", batch=6) == read_state(tmp_path / "ck", batch=5)
    recent = [(r.key, r.value, r.timeout_ms) for r in read_state(tmp_path / "ck") if r.kind == "list"]
    assert recent == [("bo", 4, 7_500), ("cy", 200, 7_500), ("ann", 1, 8_500)]  # by pickled key: shorter names first


class TextLedger(Ledger):
    """:class:`Ledger` over text rows: ``"merchant=amount"`` or ``"dump"``."""

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        """Parse the rows, then as Ledger."""
        parsed = (row if row == "dump" else (row.split("=")[0], int(row.split("=")[1])) for row in rows)
        return super().handleInputRows(key, parsed, timerValues)


@pytest.mark.spark
def test_a_dstream_transform_with_state_checkpoint_holds_what_the_processor_sees(spark_context: Any, tmp_path: Path) -> None:
    """Ledger on Spark over two partitions, six batches, then a batch that only dumps (at 7 s: nothing expires or
    fires between 6 s and 7 s): the rows read after batch 5 are exactly what the processor saw, partition by partition."""
    from tests.streaming.tws.test_dstream_tws import run

    lines = [["ann:shop=10", "bo:cafe=5"], ["ann:shop=150", "cy:bar=7"], ["bo:cafe=0", "ann:book=3"], [],
             ["cy:bar=200", "bo:pub=4"], ["ann:shop=1"], ["ann:dump", "bo:dump", "cy:dump"]]
    outputs, _, errors = run(spark_context, tmp_path / "ck", lines, processor=TextLedger())
    assert errors == []
    assert outputs[7_000] == [("ann", 4, [1], {"shop": 1}, []), ("bo", 3, [4], {"pub": 4}, []),
                              ("cy", 2, [200], {"bar": 207}, [8_000])]
    records = read_state(tmp_path / "ck", batch=5)
    assert view(records) == outputs[7_000]
    homes = {(r.key, r.partition_id) for r in records}  # each key's rows in the one partition its hash picks
    assert len(homes) == 3 and {p for _, p in homes} <= {0, 1}
    assert [r.partition_id for r in records] == sorted(r.partition_id for r in records)
    assert read_state(tmp_path / "ck") == records
