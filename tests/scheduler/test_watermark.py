"""WatermarkTracker and EventTimeStats: Spark's rules for advancing the global watermark (§8.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import EventTimeStats, InvalidPipelineError, WatermarkTracker, parse_watermark_policy
from tests.anyio_support import raises_exactly


def seen(*times: int) -> EventTimeStats | None:
    return EventTimeStats.of(times)


def test_event_time_stats_count_min_max_and_a_mean_rounded_down() -> None:
    """Statistics of a batch; the merge of two partitions; nothing for no rows."""
    a, b = seen(5, 1, 9), seen(20, 3)
    assert a == EventTimeStats(3, 1, 9, 15) and a.avg_ms == 5
    assert b is not None and a is not None
    merged = a.merge(b)
    assert merged == EventTimeStats(5, 1, 20, 38) and merged.avg_ms == 7
    assert a.merge(None) is a
    assert seen() is None


def test_min_policy_waits_for_every_input_and_counts_an_unset_one_as_zero() -> None:
    """Two inputs: until both saw data the global watermark stays 0; then the slower one decides."""
    tracker = WatermarkTracker([1_000, 500])
    assert tracker.enabled and tracker.current_ms == 0
    assert tracker.update([seen(10_000), None]) is False
    assert tracker.input_watermarks_ms == (9_000, None) and tracker.current_ms == 0
    assert tracker.update([None, seen(4_000)]) is True
    assert tracker.current_ms == 3_500
    assert tracker.update([seen(20_000), seen(6_000, 8_000)]) is True
    assert tracker.current_ms == 7_500


def test_max_policy_follows_the_fastest_input() -> None:
    """With max, one input's data is enough, and the faster input decides."""
    tracker = WatermarkTracker([1_000, 0], policy="MAX")
    assert tracker.policy == "max"
    tracker.update([seen(10_000), None])
    assert tracker.current_ms == 9_000
    tracker.update([None, seen(12_000)])
    assert tracker.current_ms == 12_000


def test_the_watermark_never_moves_back_and_an_input_never_lowers_its_own() -> None:
    """Older data after newer: neither the input's watermark nor the global one goes back; a restored one holds."""
    tracker = WatermarkTracker([100], watermark_ms=5_000)
    assert tracker.update([seen(3_000)]) is False
    assert tracker.current_ms == 5_000
    tracker.update([seen(9_100)])
    assert tracker.current_ms == 9_000
    tracker.update([seen(2_000)])
    assert tracker.input_watermarks_ms == (9_000,) and tracker.current_ms == 9_000


def test_without_watermarked_inputs_nothing_moves() -> None:
    """No input: disabled, and an update changes nothing."""
    tracker = WatermarkTracker([])
    assert not tracker.enabled
    assert tracker.update([]) is False and tracker.current_ms == 0


def test_bad_policies_delays_and_statistics_are_refused() -> None:
    """Spark's message for an unknown policy; negative delays and a wrong number of statistics are errors."""
    with raises_exactly(InvalidPipelineError, (
            "[INVALID_CONF_VALUE.REQUIREMENT] The value 'median' in the config \"spark.sql.streaming.multipleWatermarkPolicy\" "
            "is invalid. Invalid value for 'spark.sql.streaming.multipleWatermarkPolicy'. Valid values are 'min' and 'max' "
            "SQLSTATE: 22022")):
        parse_watermark_policy("median")
    with raises_exactly(ValueError, "watermark delays must not be negative, got [-1]"):
        WatermarkTracker([-1])
    with raises_exactly(ValueError, "expected event-time statistics for 1 watermarked inputs, got 2"):
        WatermarkTracker([0]).update([None, None])


@given(st.lists(st.lists(st.one_of(st.none(), st.lists(st.integers(0, 10**9), min_size=1)), min_size=2, max_size=2),
                max_size=20),
       st.sampled_from(["min", "max"]))
def test_the_global_watermark_is_the_policy_over_running_maxima_minus_delays(
        batches: list[list[list[int] | None]], policy: str) -> None:
    """A reference model: each input's watermark is the max over its batches of (max - delay); global = policy, unset = 0."""
    delays = [250, 0]
    tracker = WatermarkTracker(delays, policy=policy)
    best: list[int | None] = [None, None]
    expected_global = 0
    for batch in batches:
        tracker.update([None if times is None else EventTimeStats.of(times) for times in batch])
        for i, times in enumerate(batch):
            if times is not None:
                candidate = max(times) - delays[i]
                best[i] = candidate if best[i] is None else max(best[i], candidate)  # type: ignore[type-var]
        values = [0 if b is None else b for b in best]
        expected_global = max(expected_global, min(values) if policy == "min" else max(values))
        assert tracker.current_ms == expected_global


@pytest.mark.parametrize("text", ["min", "MIN", "Max"])
def test_policies_are_read_in_any_case(text: str) -> None:
    """The setting is case-insensitive, as Spark's is."""
    assert parse_watermark_policy(text) == text.lower()


@pytest.mark.parametrize("text", [" max", "max ", ""])
def test_policies_with_space_are_refused(text: str) -> None:
    """Spark 4.3 does not trim the setting: a space around the name makes it invalid."""
    with pytest.raises(InvalidPipelineError, match="INVALID_CONF_VALUE"):
        parse_watermark_policy(text)
