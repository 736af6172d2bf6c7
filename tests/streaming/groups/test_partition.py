"""One partition of flatMapGroupsWithState over batches (Spark's §7.2 rules), on a real store, without Spark."""

from __future__ import annotations

import collections
import datetime
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from streaming.state import (
    DUPLICATE_INITIAL_STATE,
    GroupState,
    GroupsWithStateError,
    GroupsWithStateSpec,
    PartitionResult,
    StateStoreProvider,
    initial_state_by_key,
    parse_delay_threshold,
    parse_interval_ms,
    run_partition,
)


class Batches:
    """Runs batches of one partition, each on the version the previous one committed."""

    def __init__(self, root: Path, spec: GroupsWithStateSpec) -> None:
        self.provider = StateStoreProvider(root / "ck", 0, 0, local_dir=root / "local")
        self.spec = spec
        self.version = 0

    def run(self, records: list[tuple[Any, Any]], batch_ms: int, eviction: int = 0, late: int = 0,
            initial: list[tuple[Any, Any]] | None = None) -> PartitionResult:
        store = self.provider.load(self.version)
        try:
            result = run_partition(records, store, self.spec, batch_ms, eviction, late,
                                   initial_state_by_key(initial) if initial else None)
        except BaseException:
            store.abort()
            raise
        self.version = store.commit()
        return result


def heartbeat(key: str, values: Iterator[int], state: GroupState) -> Iterator[tuple[str, str, int]]:
    """Processing-time timeout: a device is offline after 10 s without a heartbeat."""
    if state.hasTimedOut:
        state.remove()
        yield (key, "offline", state.getCurrentProcessingTimeMs())
        return
    beats = (state.getOption or 0) + sum(1 for _ in values)
    state.update(beats)
    state.setTimeoutDuration(10_000)
    yield (key, "online", beats)


def test_processing_time_timeouts_fire_strictly_after_their_time_and_reset_on_each_call(tmp_path: Path) -> None:
    """A heartbeat at 1 s times out at the first batch after 11 s (strictly), a later heartbeat moves it."""
    spec = GroupsWithStateSpec(heartbeat, True, "ProcessingTimeTimeout", False)
    runs = Batches(tmp_path, spec)
    assert runs.run([("d1", 1), ("d2", 1)], 1_000).outputs == [("d1", "online", 1), ("d2", "online", 1)]
    assert runs.run([("d2", 1)], 6_000).outputs == [("d2", "online", 2)]
    assert runs.run([], 11_000).outputs == []  # d1's timeout is 11_000: not strictly before 11_000
    fired = runs.run([], 12_000)
    assert fired.outputs == [("d1", "offline", 12_000)] and fired.num_timeouts == 1 and fired.num_rows_removed == 1
    assert runs.run([], 16_001).outputs == [("d2", "offline", 16_001)]
    assert runs.run([], 30_000).outputs == []


def counts_without_timeout(key: str, values: Iterator[int], state: GroupState) -> tuple[str, int]:
    """mapGroupsWithState: the running sum; a call on a timeout does not happen here."""
    total = (state.getOption or 0) + sum(values)
    state.update(total)
    return (key, total)


def test_equal_keys_are_one_group_whatever_objects_they_are_made_of(tmp_path: Path) -> None:
    """A tuple of one string object twice and one of two equal strings, -0.0 and 0.0: one call and one state row each,
    as Spark groups by value (pickle alone wrote the first pair differently: a reference to a repeated object)."""
    import json
    import pickle

    from streaming.state._processor_rows import key_bytes

    def count(key: Any, values: Iterator[Any], state: GroupState) -> tuple[Any, int]:
        total = (state.getOption or 0) + sum(1 for _ in values)
        state.update(total)
        return (key, total)

    parsed = json.loads('{"src": "alice", "dst": "alice"}')
    same = "alice"
    two_objects, one_object = (parsed["src"], parsed["dst"]), (same, same)
    assert two_objects == one_object and two_objects[0] is not two_objects[1]
    batches = Batches(tmp_path, GroupsWithStateSpec(count, False, "NoTimeout", False))
    result = batches.run([(two_objects, 1), (one_object, 2), (-0.0, 3), (0.0, 4)], 1000)
    assert sorted(result.outputs, key=repr) == sorted([(two_objects, 2), (-0.0, 2)], key=repr)
    assert result.num_keys_called == 2
    store = batches.provider.load(batches.version)
    assert len(store) == 2
    store.abort()
    euro = "\u20ac"  # one character outside Latin-1: not one shared object per value in CPython
    assert key_bytes((euro, euro)) == key_bytes((euro, euro.encode().decode()))
    # A key with no object in it twice is written as before: existing checkpoints keep finding their rows.
    assert key_bytes(two_objects) == pickle.dumps(two_objects, protocol=5)
    assert key_bytes(("ab", 1, (2.5, b"xy"))) == pickle.dumps(("ab", 1, (2.5, b"xy")), protocol=5)


Pair = collections.namedtuple("Pair", "src dst")


def test_equal_namedtuple_row_datetime_and_decimal_keys_are_one_group(tmp_path: Path) -> None:
    """Namedtuples and Rows holding one string object twice against two equal strings, one datetime or Decimal object
    twice against two equal ones: one call and one state row each (they were two groups, the state split); keys without
    an object twice pickle as before, and come back as their own type."""
    import datetime
    import decimal
    import pickle

    from pyspark.sql import Row

    from streaming.state._processor_rows import key_bytes

    def count(key: Any, values: Iterator[Any], state: GroupState) -> tuple[Any, int]:
        total = (state.getOption or 0) + sum(1 for _ in values)
        state.update(total)
        return (key, total)

    pair = Pair
    same, other = "alice", "".join(["ali", "ce"])
    when = datetime.datetime(2026, 11, 27, 9, 0, tzinfo=datetime.timezone.utc)
    amount = decimal.Decimal("12.50")
    keys = [
        (pair(same, same), pair(same, other)),
        (Row(src=same, dst=same), Row(src=same, dst=other)),
        ((when, when), (when, when.replace())),
        ((amount, amount), (amount, decimal.Decimal("12.50"))),
    ]
    records = []
    for one_object, two_objects in keys:
        assert one_object == two_objects and pickle.dumps(one_object, protocol=5) != pickle.dumps(two_objects, protocol=5)
        records += [(one_object, 1), (two_objects, 2)]
    batches = Batches(tmp_path, GroupsWithStateSpec(count, False, "NoTimeout", False))
    result = batches.run(records, 1000)
    assert result.num_keys_called == len(keys) and sorted(total for _, total in result.outputs) == [2] * len(keys)
    store = batches.provider.load(batches.version)
    assert len(store) == len(keys)
    store.abort()
    for one_object, two_objects in keys:
        assert key_bytes(two_objects) == pickle.dumps(two_objects, protocol=5)  # as before: no object in it twice
        assert type(pickle.loads(key_bytes(one_object))) is type(one_object)
    assert key_bytes(pair(1, (2, "x"))) == pickle.dumps(pair(1, (2, "x")), protocol=5)


def test_map_groups_emits_one_value_per_key_and_keys_in_a_stable_order(tmp_path: Path) -> None:
    """One output per key with data, keys ordered by their pickled bytes, values in arrival order."""
    runs = Batches(tmp_path, GroupsWithStateSpec(counts_without_timeout, False, "NoTimeout", False))
    first = runs.run([("b", 1), ("a", 2), ("b", 3)], 1_000)
    assert first.outputs == [("a", 2), ("b", 4)] and first.num_rows_updated == 2 and first.num_keys_called == 2
    assert runs.run([("a", 5)], 2_000).outputs == [("a", 7)]


def test_a_call_that_sets_no_timeout_clears_the_stored_one(tmp_path: Path) -> None:
    """The contract (and Scala): the timeout resets on every call; pyspark would keep it."""

    def once_then_quiet(key: str, values: Iterator[int], state: GroupState) -> Iterator[str]:
        list(values)
        if not state.exists:
            state.update(1)
            state.setTimeoutDuration(1_000)
        yield f"{key}:{state.oldTimeoutTimestamp}"

    runs = Batches(tmp_path, GroupsWithStateSpec(once_then_quiet, True, "ProcessingTimeTimeout", False))
    assert runs.run([("k", 0)], 1_000).outputs == ["k:-1"]
    second = runs.run([("k", 0)], 1_500)
    assert second.outputs == ["k:2000"] and second.num_rows_updated == 1  # the timeout changed: written
    assert runs.run([], 5_000).outputs == []  # no timeout left to fire


def test_a_removed_state_keeps_its_timeout_row_until_it_fires(tmp_path: Path) -> None:
    """remove() plus a timeout keeps a row without a value: exists is False when it times out; then it is deleted."""

    def remove_but_remind(key: str, values: Iterator[int], state: GroupState) -> Iterator[tuple[str, bool, bool]]:
        list(values)
        if state.hasTimedOut:
            yield (key, True, state.exists)
            return
        state.update(1)
        state.remove()
        state.setTimeoutDuration(100)
        yield (key, False, state.exists)

    runs = Batches(tmp_path, GroupsWithStateSpec(remove_but_remind, True, "ProcessingTimeTimeout", False))
    first = runs.run([("k", 0)], 1_000)
    assert first.outputs == [("k", False, False)] and first.num_rows_updated == 1 and first.num_rows_removed == 0
    fired = runs.run([], 2_000)
    assert fired.outputs == [("k", True, False)]
    # The timed-out call reset the timeout: neither value nor timeout is left, so the row goes
    # (Spark would keep an unreadable row for good).
    assert fired.num_rows_removed == 1 and fired.num_rows_updated == 0
    store = runs.provider.load(runs.version)
    assert dict(store) == {}
    store.abort()


def sessions(key: str, values: Iterator[tuple[str, int]], state: GroupState) -> Iterator[tuple[str, str, int]]:
    if state.hasTimedOut:
        count = state.get
        state.remove()
        yield (key, "closed", count)
        return
    times = [t for _, t in values]
    state.update((state.getOption or 0) + len(times))
    state.setTimeoutTimestamp(max(times) + 10_000)
    yield (key, "open", state.get)


def test_event_time_timeouts_use_the_watermark_and_only_they_drop_late_rows(tmp_path: Path) -> None:
    """Rows at or before the late-event watermark are dropped under EventTimeTimeout; the eviction watermark fires."""
    spec = GroupsWithStateSpec(sessions, True, "EventTimeTimeout", True, event_time=lambda record: record[1])
    runs = Batches(tmp_path, spec)
    assert runs.run([("a", ("a", 1_000))], 1, eviction=0, late=0).outputs == [("a", "open", 1)]
    late = runs.run([("a", ("a", 500)), ("b", ("b", 30_000))], 2, eviction=20_000, late=500)
    assert late.num_rows_dropped_by_watermark == 1  # a@500 <= 500: late (inclusive)
    assert late.outputs == [("b", "open", 1), ("a", "closed", 1)]  # data pass, then a's timeout (11_000 < 20_000)
    with pytest.raises(GroupsWithStateError) as info:
        runs.run([("c", ("c", 25_000 - 10_001))], 3, eviction=25_000, late=0)
    assert "INVALID_TIMEOUT_TIMESTAMP" in str(info.value.__cause__)  # a timeout before the watermark: refused


@pytest.mark.parametrize(("value", "cause"), [(12.5, "TypeError: 'float' object is not subscriptable"),
                                              (("a", "noon"), "TypeError: Event time must be defined on a window")])
def test_an_event_time_that_cannot_be_read_names_the_function_that_reads_it(tmp_path: Path, value: Any,
                                                                            cause: str) -> None:
    """The watermark's function applied to a value it was not written for (a map between them): the error says whose
    function it is and how to give the operator its own (eventTime=), not a bare TypeError inside the task."""
    spec = GroupsWithStateSpec(sessions, True, "EventTimeTimeout", True, event_time=lambda record: record[1])
    with pytest.raises(TypeError, match=rf"^cannot read the event time of the operator's input value of type "
                                        rf"{type(value).__name__} \({re.escape(cause)}.*pass the operator eventTime="):
        Batches(tmp_path, spec).run([("a", value)], 1, eviction=0, late=0)


def test_late_rows_are_judged_in_microseconds(tmp_path: Path) -> None:
    """A datetime 0.5 ms after the late-event watermark is kept (Spark compares microseconds); one at it is dropped."""
    def seen(key: str, values: Iterator[Any], state: GroupState) -> list[str]:
        return [key for _ in values]

    spec = GroupsWithStateSpec(seen, True, "EventTimeTimeout", True, event_time=lambda record: record[1])
    at = datetime.datetime(1970, 1, 1, 0, 0, 15)  # naive: UTC
    result = Batches(tmp_path, spec).run(
        [("a", ("a", at)), ("b", ("b", at + datetime.timedelta(microseconds=500)))], 1, eviction=0, late=15_000)
    assert result.num_rows_dropped_by_watermark == 1
    assert result.outputs == ["b"]


def test_a_raising_function_fails_the_batch_and_leaves_the_state_as_it_was(tmp_path: Path) -> None:
    """The user's error comes wrapped with Spark's error class; the store is not committed; a retry sees the old state."""
    calls: list[int] = []

    def flaky(key: str, values: Iterator[int], state: GroupState) -> Iterator[int]:
        total = (state.getOption or 0) + sum(values)
        calls.append(total)
        state.update(total)
        if total == 3:
            raise ValueError("three")
        yield total

    runs = Batches(tmp_path, GroupsWithStateSpec(flaky, True, "NoTimeout", False))
    assert runs.run([("k", 1)], 1_000).outputs == [1]
    with pytest.raises(GroupsWithStateError, match=r"^\[FLATMAPGROUPSWITHSTATE_USER_FUNCTION_ERROR\] An error occurred in "
                                                   r"the user provided function in flatMapGroupsWithState\. Reason: "
                                                   r"ValueError: three$"):
        runs.run([("k", 2)], 2_000)
    assert runs.run([("k", 5)], 2_000).outputs == [6]  # the failed batch's update did not stay


def test_a_flat_function_returning_none_fails_the_batch_as_pyspark_does(tmp_path: Path) -> None:
    """A forgotten ``return`` fails the batch (pyspark: not iterable) instead of losing the key's outputs; map's None is a value."""
    def forgot_return(key: str, values: Iterator[int], state: GroupState) -> None:
        state.update(sum(values))

    runs = Batches(tmp_path, GroupsWithStateSpec(forgot_return, True, "NoTimeout", False))
    with pytest.raises(GroupsWithStateError, match=r"Reason: TypeError: the function returned None for key 'k': "
                                                   r"flatMapGroupsWithState's function returns an iterable"):
        runs.run([("k", 1)], 1_000)
    mapped = Batches(tmp_path / "map", GroupsWithStateSpec(forgot_return, False, "NoTimeout", False))
    assert mapped.run([("k", 1)], 1_000).outputs == [None]


def test_an_initial_state_seeds_the_first_batch_and_calls_its_keys(tmp_path: Path) -> None:
    """Keys only in the initial state are called with no values; a duplicate key is refused with Spark's message."""
    runs = Batches(tmp_path, GroupsWithStateSpec(counts_without_timeout, False, "NoTimeout", False))
    assert runs.run([("a", 1)], 1_000, initial=[("a", 10), ("z", 5)]).outputs == [("a", 11), ("z", 5)]
    with pytest.raises(ValueError, match=r"^The initial state provided contained multiple rows\(state\) with the same key"):
        initial_state_by_key([("a", 1), ("a", 2)])
    assert DUPLICATE_INITIAL_STATE.endswith("de-duplicate the initial state before passing it.")


@pytest.mark.parametrize(("text", "ms"), [
    ("10 seconds", 10_000), ("1 second", 1_000), ("interval 2 minutes 30 seconds", 150_000), ("1 HOUR", 3_600_000),
    ("1.5 seconds", 1_500), ("1 day", 86_400_000), ("1 week", 604_800_000), ("1 month", 31 * 86_400_000),
    ("250 milliseconds", 250), ("1500 microseconds", 1), ("1 hour - 30 minutes", 1_800_000), ("+ 1 second", 1_000),
    ("-1500 microseconds", -1), ("9223372036854775 milliseconds", 9_223_372_036_854_775),
])
def test_interval_strings_read_as_spark_reads_them(text: str, ms: int) -> None:
    """Units singular or plural, any case, an optional 'interval', fractional seconds, 31-day months, a sign apart."""
    assert parse_interval_ms(text) == ms


@pytest.mark.parametrize(("text", "ms"), [("interval '10' second", 10_000), ("interval '1.5' seconds '2' minutes", 121_500),
                                          ("interval \"1\" hour", 3_600_000), ("interval '10 seconds'", 10_000),
                                          ("INTERVAL '1 day 2 hours'", 93_600_000)])
def test_a_delay_threshold_may_quote_its_numbers(text: str, ms: int) -> None:
    """withWatermark reads its delay with Spark's SQL parser: after 'interval', a number or the whole may be a string
    literal (pyspark 4.3: 10000 ms for "interval '10 seconds'")."""
    assert parse_delay_threshold(text) == ms
    with pytest.raises(ValueError, match=r"is not a number|expected pairs"):
        parse_interval_ms(text)  # a continuous trigger's interval (Spark's stringToInterval) takes no literals


@pytest.mark.parametrize("text", ["'10' second", '"10" seconds', "'10 seconds'", "'1.5' seconds '2' minutes"])
def test_a_quoted_delay_without_interval_is_refused_as_spark_does(text: str) -> None:
    """Without SQL's 'interval' keyword Spark reads no literal (CANNOT_PARSE_INTERVAL); these were taken as numbers."""
    with pytest.raises(ValueError, match=r"^Error parsing "):
        parse_delay_threshold(text)


@pytest.mark.parametrize("text", [
    "9223372036854775807 seconds", "100000000000 days", "2147483648 months", "9223372036854775808 microseconds",
    "300000 years", "106751992 days 1 day",
])
def test_intervals_beyond_sparks_range_are_refused(text: str) -> None:
    """Months and days are 32-bit ints and the whole interval a long of microseconds: beyond, Spark cannot parse it."""
    with pytest.raises(ValueError, match=r"overflows Spark's interval"):
        parse_delay_threshold(text)


@pytest.mark.parametrize(("text", "message"), [
    ("-1 seconds", r"^requirement failed: delay threshold \(-1 seconds\) should not be negative\.$"),
    ("- 1 second", r"^requirement failed: delay threshold \(- 1 second\) should not be negative\.$"),
    ("1 second -", r"expected pairs of a number and a unit"),
    ("- - 1 second", r"expected pairs of a number and a unit"),
    ("10", r"expected pairs of a number and a unit"),
    ("ten seconds", r"'ten' is not a number"),
    ("10 fortnights", r"unknown unit 'fortnights'"),
    ("1.5 minutes", r"only seconds may have a fraction"),
])
def test_bad_delay_thresholds_are_refused(text: str, message: str) -> None:
    """Negative delays get Spark's requirement message; unreadable ones say what is wrong."""
    with pytest.raises(ValueError, match=message):
        parse_delay_threshold(text)


def test_event_times_are_datetimes_or_epoch_milliseconds() -> None:
    """An aware datetime by its offset, a naive one as UTC, an int as is; anything else is refused with Spark's words."""
    import datetime

    from streaming.state import event_time_ms

    utc = datetime.timezone.utc
    assert event_time_ms(datetime.datetime(2024, 1, 1, tzinfo=utc)) == 1_704_067_200_000
    assert event_time_ms(datetime.datetime(2024, 1, 1)) == 1_704_067_200_000
    plus_one = datetime.timezone(datetime.timedelta(hours=1))
    assert event_time_ms(datetime.datetime(2024, 1, 1, 1, tzinfo=plus_one)) == 1_704_067_200_000
    assert event_time_ms(1_234) == 1_234
    for bad in ("2024-01-01", 1.5, True, None):
        with pytest.raises(TypeError, match=r"^Event time must be defined on a window or a timestamp, but the event "
                                            rf"time of a record is of type {type(bad).__name__}"):
            event_time_ms(bad)


def test_the_state_partition_hash_is_pysparks_but_takes_every_nan_as_one_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys keep the partitions pyspark's portable_hash gave them (checkpoints keep their state); a NaN, alone or in a
    tuple, hashes the same whichever object it is (hash(nan) is the object's id since Python 3.10)."""
    from pyspark.rdd import portable_hash

    from streaming.state import partition_hash

    monkeypatch.setenv("PYTHONHASHSEED", "0")
    for key in ["a", "", 1, -7, 2.5, -0.0, None, True, ("a", 1), ("a", (2, 3.5)), (), b"x"]:
        assert partition_hash(key) == portable_hash(key), key
    nans = [float("nan") for _ in range(3)]
    assert {partition_hash(n) for n in nans} == {0}
    assert len({partition_hash(("k", n)) for n in nans}) == 1
    import decimal

    import numpy

    for nan in (numpy.float64("nan"), numpy.float32("nan"), complex(float("nan"), 0), decimal.Decimal("NaN"),
                decimal.Decimal("sNaN")):
        assert partition_hash(nan) == 0 and partition_hash(("k", nan)) == partition_hash(("k", float("nan"))), nan
    for number in (numpy.float64(2.5), numpy.int64(7), decimal.Decimal("1.5"), complex(1, 2)):
        assert partition_hash(number) == portable_hash(number), number
