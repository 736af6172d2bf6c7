"""The checkpoint's record of which stateful operator keeps an operator id's state: a restart with another operator, or
another timeout kind, is refused with Spark's error class before its state is read or written (lane K3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from scheduler import ManualClock, Seconds, StreamingQueryException
from streaming import Batch, ListSource, Pipeline, StreamingRuntime
from streaming.state import (
    FLAT_MAP_GROUPS_WITH_STATE,
    TRANSFORM_WITH_STATE_OPERATOR,
    StatefulProcessor,
    StatefulProcessorHandle,
    StateOperatorMismatchError,
    StateStoreError,
    TimerValues,
    check_operator,
)
from tests.support import advance

pytestmark = pytest.mark.anyio

WORDS = ["a", "b", "a", "c", "a", "b"]


def count(key: Any, words: Iterator[Any], state: Any) -> Iterator[Any]:
    total = (state.get if state.exists else 0) + sum(1 for _ in words)
    state.update(total)
    yield key, total


class Count(StatefulProcessor):
    """The same running count per word, in a value state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.getValueState("total", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        total = (self.total.get() or (0,))[0] + sum(1 for _ in rows)
        self.total.update((total,))
        yield key, total


def program(kind: str, seen: list[Any]) -> Pipeline:
    """A running word count kept by ``kind``: ``groups`` (no timeout), ``groups-event``, ``groups-processing`` or ``tws``."""
    p = Pipeline()
    p.add_source(ListSource(WORDS, max_per_batch=2), name="words")
    p.add_watermark("words", lambda word: 10**12, "1 hour")  # nothing late: every word at one time
    if kind == "tws":
        name = p.add_transform_with_state("words", Count(), "Update", "None", key=lambda word: word)
    else:
        timeout = {"groups": "NoTimeout", "groups-event": "EventTimeTimeout",
                   "groups-processing": "ProcessingTimeTimeout"}[kind]
        name = p.add_groups_with_state("words", count, key=lambda word: word, timeout=timeout)

    def out(batch: Batch) -> None:
        seen.extend(sorted(batch.inputs[name]))

    p.add_output(out, name="out")
    return p


async def run(checkpoint: Path, kind: str, start_ms: int, batches: int = 1) -> list[Any]:
    seen: list[Any] = []
    clock = ManualClock(start_ms)
    async with StreamingRuntime(program(kind, seen), Seconds(1), clock=clock, checkpoint_location=checkpoint) as rt:
        await rt.start()
        await advance(rt, clock, batches * 1_000)
        await rt.stop()
    return seen


async def refused(checkpoint: Path, kind: str, start_ms: int) -> StateOperatorMismatchError:
    seen: list[Any] = []
    clock = ManualClock(start_ms)
    with pytest.raises(StreamingQueryException) as failed:
        async with StreamingRuntime(program(kind, seen), Seconds(1), clock=clock, checkpoint_location=checkpoint) as rt:
            await rt.start()
            await advance(rt, clock, 1_000)
            await rt.await_termination()
    assert seen == []
    cause = failed.value.__cause__
    assert isinstance(cause, StateOperatorMismatchError)
    return cause


def operator_dir(checkpoint: Path) -> Path:
    return checkpoint / "stateful" / "state" / "0"


@pytest.mark.parametrize(("first", "then", "before", "after"), [
    ("groups", "tws", FLAT_MAP_GROUPS_WITH_STATE, TRANSFORM_WITH_STATE_OPERATOR),
    ("tws", "groups", TRANSFORM_WITH_STATE_OPERATOR, FLAT_MAP_GROUPS_WITH_STATE),
])
@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "before-the-record"])
async def test_a_restart_with_another_stateful_operator_is_refused_before_its_state_is_touched(
        tmp_path: Path, first: str, then: str, before: str, after: str, recorded: bool) -> None:
    """The operator kept its count in two batches; a restart with the other operator fails its first batch with Spark's
    error, and the checkpoint's state is as it was (transformWithState wrote its schema over flatMapGroupsWithState's
    store, then started from nothing; flatMapGroupsWithState then unpickled its rows as its own). A checkpoint written
    before the record tells its operator by its files."""
    ck = tmp_path / "ck"
    assert await run(ck, first, 0, 2) == [("a", 1), ("b", 1), ("a", 2), ("c", 1)]
    record = operator_dir(ck) / "operator"
    if not recorded:
        record.unlink()
    files = sorted(str(p.relative_to(ck)) for p in (ck / "stateful").rglob("*") if p.is_file())
    error = await refused(ck, then, 2_000)
    assert error.error_class == "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"
    assert f"(OperatorId: 0 -> OperatorName: {before})]; Stateful operators in current batch: [(OperatorId: 0 -> " \
           f"OperatorName: {after})]" in str(error)
    assert sorted(str(p.relative_to(ck)) for p in (ck / "stateful").rglob("*") if p.is_file()) == files
    assert await run(ck, first, 2_000) == [("a", 3), ("b", 2)]  # the right operator goes on where it stopped
    assert json.loads(record.read_text())["operatorName"] == before


async def test_a_restart_with_another_timeout_kind_is_refused(tmp_path: Path) -> None:
    """Event-time timeouts are watermark times: read as processing-time ones they would all expire at once."""
    ck = tmp_path / "ck"
    whole = await run(tmp_path / "whole", "groups-event", 0, 3)
    first = await run(ck, "groups-event", 0, 2)
    assert json.loads((operator_dir(ck) / "operator").read_text()) == {
        "operatorName": FLAT_MAP_GROUPS_WITH_STATE, "timeout": "EventTimeTimeout"}
    error = await refused(ck, "groups-processing", 2_000)
    assert error.error_class == "STATE_STORE_INVALID_CONFIG_AFTER_RESTART"
    assert "Cannot change timeoutConf from EventTimeTimeout to ProcessingTimeTimeout between restarts" in str(error)
    assert first + await run(ck, "groups-event", 2_000) == whole and len(whole) > len(first)


async def test_a_record_from_before_the_timeout_was_kept_takes_the_timeout_of_the_next_run(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    await run(ck, "groups", 0, 2)
    record = operator_dir(ck) / "operator"
    record.write_text(json.dumps({"operatorName": FLAT_MAP_GROUPS_WITH_STATE}))
    assert await run(ck, "groups", 2_000) == [("a", 3), ("b", 2)]
    assert json.loads(record.read_text())["timeout"] == "NoTimeout"


@pytest.mark.parametrize("content", [b"", b"\xff", b"[1]", b'{"timeout": "NoTimeout"}', b'{"operatorName": 3}', b"[" * 100_000])
def test_a_damaged_record_names_its_file(tmp_path: Path, content: bytes) -> None:
    record = tmp_path / "state" / "0" / "operator"
    record.parent.mkdir(parents=True)
    record.write_bytes(content)
    with pytest.raises(StateStoreError, match=f"state store file {record} is damaged: it must name the operator") as failed:
        check_operator(tmp_path, 0, FLAT_MAP_GROUPS_WITH_STATE, "NoTimeout")
    assert not isinstance(failed.value, StateOperatorMismatchError)
    assert record.read_bytes() == content


async def test_a_restart_from_no_timeout_to_a_timeout_is_refused_with_spark_s_value_schema_error(tmp_path: Path) -> None:
    """As pyspark 4.3: its state rows hold a timeout timestamp only with a timeout, so NoTimeout to a timeout is
    STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE (lane K4; it was the config error, which pyspark raises for neither)."""
    ck = tmp_path / "ck"
    await run(ck, "groups", 0, 2)
    error = await refused(ck, "groups-event", 2_000)
    assert error.error_class == "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
    assert ("Existing value_schema=struct<groupState:binary> and new value_schema=struct<groupState:binary,"
            "timeoutTimestamp:bigint>. (operator 0") in str(error)
