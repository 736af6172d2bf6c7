"""GroupState: pyspark's names, semantics and exceptions (checked against pyspark's own GroupState where they agree)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from pyspark.errors import PySparkRuntimeError, PySparkTypeError, PySparkValueError
from pyspark.sql.streaming.state import GroupState as PySparkGroupState
from pyspark.sql.types import LongType, StructField, StructType

from streaming.state import NO_TIMESTAMP, GroupState, GroupStateTimeout


def ours(timeout: str = "NoTimeout", *, value: Any = None, watermark: int = NO_TIMESTAMP, batch: int = 10_000,
         present: bool = False, timed_out: bool = False, old: int = NO_TIMESTAMP) -> GroupState:
    return GroupState(value, value is not None, batch, watermark, timeout, timed_out, present, old)


def theirs(timeout: str = "NoTimeout", *, value: tuple[int, ...] | None = None, watermark: int = NO_TIMESTAMP,
           batch: int = 10_000, present: bool = False) -> PySparkGroupState:
    schema = StructType([StructField("v", LongType())])
    return PySparkGroupState(value, batch, watermark, timeout, False, present, value is not None, False, False,
                             NO_TIMESTAMP, b"", schema)


def failure(call: Any) -> tuple[type[BaseException], str | None, str]:
    with pytest.raises(Exception) as info:  # any type: the caller compares the exact type with pyspark's
        call()
    error = info.value
    return type(error), getattr(error, "getCondition", lambda: None)(), str(error)


def test_value_lifecycle_exists_get_update_remove() -> None:
    """No value, update, remove, update again: exists/get/getOption follow; updated/removed record the last word."""
    state = ours()
    assert not state.exists and state.getOption is None and str(state) == "GroupState(<undefined>)"
    state.update({"n": 1})
    assert state.exists and state.get == {"n": 1} and state.updated and not state.removed
    state.remove()
    assert not state.exists and state.removed and not state.updated and state.getOption is None
    state.update(2)
    assert state.get == 2 and state.updated and not state.removed and str(state) == "GroupState(2)"


def test_the_errors_are_pysparks_for_the_same_misuse() -> None:
    """get without a value, update(None), a string duration: the same class, condition and message as pyspark."""
    for mine, pysparks in [
        (lambda: ours().get, lambda: theirs().get),
        (lambda: ours().update(None), lambda: theirs().update(None)),
        (lambda: ours("ProcessingTimeTimeout").setTimeoutDuration("1 hour"),
         lambda: theirs("ProcessingTimeTimeout").setTimeoutDuration("1 hour")),
        (lambda: ours("EventTimeTimeout", watermark=5_000).setTimeoutTimestamp(4_999),
         lambda: theirs("EventTimeTimeout", watermark=5_000).setTimeoutTimestamp(4_999)),
    ]:
        assert failure(mine) == failure(pysparks)


def test_timeouts_need_their_kind_and_positive_values() -> None:
    """Each setter refuses the other kind with CANNOT_WITHOUT naming its own kind, and non-positive values."""
    kind, condition, message = failure(lambda: ours("EventTimeTimeout").setTimeoutDuration(10))
    assert (kind, condition) == (PySparkRuntimeError, "CANNOT_WITHOUT")
    assert "Cannot set timeout duration without enabling processing time timeout in [map|flatMap]GroupsWithState" in message
    kind, condition, message = failure(lambda: ours("ProcessingTimeTimeout").setTimeoutTimestamp(10))
    assert (kind, condition) == (PySparkRuntimeError, "CANNOT_WITHOUT")
    assert "Cannot set timeout timestamp without enabling event time timeout in [map|flatMap]GroupsWithState" in message
    assert failure(lambda: ours("ProcessingTimeTimeout").setTimeoutDuration(0))[:2] == (PySparkValueError,
                                                                                      "VALUE_NOT_POSITIVE")
    assert failure(lambda: ours("EventTimeTimeout").setTimeoutTimestamp(-5))[:2] == (PySparkValueError,
                                                                                   "VALUE_NOT_POSITIVE")
    assert failure(lambda: ours("ProcessingTimeTimeout").setTimeoutDuration(float("nan")))[:2] == (PySparkTypeError,
                                                                                                 "NOT_EXPECTED_TYPE")
    assert failure(lambda: ours("ProcessingTimeTimeout").setTimeoutDuration("10"))[:2] == (PySparkTypeError,
                                                                                         "NOT_EXPECTED_TYPE")


def test_a_timeout_past_a_java_long_is_refused_when_it_is_set() -> None:
    """Spark keeps timeouts as longs of milliseconds: a duration or timestamp beyond one (which ended the query in the
    state store's write, naming no timeout) is refused at the call; a timestamp that is not a number or a datetime
    too, with the duration's error class."""
    long_max = 2**63 - 1
    for call in (lambda: ours("ProcessingTimeTimeout", batch=10_000).setTimeoutDuration(long_max - 9_999),
                 lambda: ours("ProcessingTimeTimeout").setTimeoutDuration(10**30),
                 lambda: ours("ProcessingTimeTimeout").setTimeoutDuration(1e300),
                 lambda: ours("EventTimeTimeout").setTimeoutTimestamp(2**63)):
        kind, condition, message = failure(call)
        assert (kind, condition) == (PySparkValueError, "VALUE_OUT_OF_BOUNDS") and "must be between 1 and" in message
    state = ours("ProcessingTimeTimeout", batch=10_000)
    state.setTimeoutDuration(long_max - 10_000)
    assert state.timeout_timestamp == long_max
    event = ours("EventTimeTimeout")
    event.setTimeoutTimestamp(long_max)
    event.setTimeoutTimestamp(1500.9)
    assert event.timeout_timestamp == 1500
    for bad in ("abc", float("nan"), float("inf"), True, None):
        assert failure(lambda bad=bad: ours("EventTimeTimeout").setTimeoutTimestamp(bad))[:2] == (PySparkTypeError,
                                                                                               "NOT_EXPECTED_TYPE")


def test_a_float_duration_is_taken_as_pyspark_takes_it() -> None:
    """pyspark refuses only a string: setTimeoutDuration(1500.7) sets a timeout (it was refused here, failing the batch
    of a program pyspark runs); its whole milliseconds count from the batch time."""
    state = ours("ProcessingTimeTimeout", batch=10_000)
    state.setTimeoutDuration(1500.7)
    assert state.timeout_timestamp == 11_500
    pysparks = theirs("ProcessingTimeTimeout", batch=10_000)
    pysparks.setTimeoutDuration(1500.7)  # accepted
    assert failure(lambda: ours("ProcessingTimeTimeout").setTimeoutDuration(0.5))[:2] == (PySparkValueError,
                                                                                        "VALUE_NOT_POSITIVE")


def test_timeout_values_watermark_and_processing_time() -> None:
    """A duration counts from the batch time; a timestamp may equal the watermark; a datetime is converted."""
    state = ours("ProcessingTimeTimeout", batch=10_000)
    assert state.timeout_timestamp == NO_TIMESTAMP  # reset for every call
    state.setTimeoutDuration(2_500)
    assert state.timeout_timestamp == 12_500 and state.getCurrentProcessingTimeMs() == 10_000
    event = ours("EventTimeTimeout", watermark=5_000, present=True)
    event.setTimeoutTimestamp(5_000)
    assert event.timeout_timestamp == 5_000 and event.getCurrentWatermarkMs() == 5_000
    event.setTimeoutTimestamp(datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc))
    assert event.timeout_timestamp == 1_704_067_200_000
    kind, condition, message = failure(lambda: ours("EventTimeTimeout").getCurrentWatermarkMs())
    assert (kind, condition) == (PySparkRuntimeError, "CANNOT_WITHOUT") and "setting watermark before" in message


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Tokyo"])
def test_a_naive_timeout_timestamp_is_read_as_event_times_are_in_any_local_time_zone(
        zone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A timeout set from a naive event time plus ten minutes lands ten minutes after the event as the watermark reads
    it (both in UTC), whatever the process's time zone: not hours off (west), nor before the watermark (east)."""
    import time

    from streaming.state._event_time import event_time_ms

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        event = datetime.datetime(2024, 1, 1, 3, 0)
        state = ours("EventTimeTimeout", watermark=event_time_ms(event) - 60_000, present=True)
        state.setTimeoutTimestamp(event + datetime.timedelta(minutes=10))
        assert state.timeout_timestamp == event_time_ms(event) + 600_000 == 1_704_078_600_000
    finally:
        monkeypatch.undo()
        time.tzset()


def test_timed_out_calls_and_the_old_timeout() -> None:
    """hasTimedOut and oldTimeoutTimestamp are what the operator passed; a timeout without a kind is an internal error."""
    state = ours("EventTimeTimeout", value=3, timed_out=True, old=7_000)
    assert state.hasTimedOut and state.oldTimeoutTimestamp == 7_000 and state.get == 3
    with pytest.raises(RuntimeError, match="internal error"):
        ours("NoTimeout", timed_out=True)
    assert failure(lambda: ours("Sometimes"))[:2] == (PySparkValueError, "VALUE_NOT_ALLOWED")
    assert GroupStateTimeout.check("EventTimeTimeout") == "EventTimeTimeout"
