"""The direct stream's arithmetic without Spark or a broker: Spark's maxMessagesPerPartition and clamp, and batch planning."""

from __future__ import annotations

import pytest

from streaming.kafka import TopicAndPartition
from streaming.kafka._planning import BatchEnd, plan_batch_end
from streaming.kafka._rate import KafkaRateSettings, clamp_offsets, max_messages_per_partition

P0, P1, P2 = (TopicAndPartition("t", p) for p in range(3))


def limits(latest: dict[TopicAndPartition, int], current: dict[TopicAndPartition, int], *, batch_ms: int = 1000,
           max_rate: int = 0, min_rate: int = 1, rate: float | None = None) -> dict[TopicAndPartition, int] | None:
    return max_messages_per_partition(latest, current, batch_ms=batch_ms, settings=KafkaRateSettings(max_rate, min_rate),
                                      estimated_rate=rate)


def test_without_any_rate_nothing_is_limited() -> None:
    """No maxRatePerPartition and no backpressure: no limit (Spark's None)."""
    assert limits({P0: 100}, {P0: 0}) is None


def test_max_rate_per_partition_times_the_batch_seconds_truncated() -> None:
    """maxRatePerPartition 7 at 1.5 s batches: 10.5 records, truncated to 10, for every partition whatever its lag."""
    assert limits({P0: 100, P1: 3}, {P0: 0, P1: 0}, batch_ms=1500, max_rate=7) == {P0: 10, P1: 10}


def test_backpressure_shares_the_rate_by_lag() -> None:
    """Rate 500 over lags 900 and 100: 450 and 50 records per second, so per 1 s batch."""
    assert limits({P0: 900, P1: 100}, {P0: 0, P1: 0}, rate=500) == {P0: 450, P1: 50}


def test_max_rate_caps_the_backpressure_share() -> None:
    """Rate 500 over lags 900 and 100 with maxRatePerPartition 300: 300 and 50."""
    assert limits({P0: 900, P1: 100}, {P0: 0, P1: 0}, rate=500, max_rate=300) == {P0: 300, P1: 50}


def test_a_small_share_is_raised_to_min_rate_per_partition() -> None:
    """Rate 10 over lags 3 and 1 at 250 ms: 1.875 and 0.625 records, truncated to 1 and 0; the 0 is raised to minRate (1)."""
    assert limits({P0: 3, P1: 1}, {P0: 0, P1: 0}, batch_ms=250, rate=10) == {P0: 1, P1: 1}
    assert limits({P0: 3, P1: 1}, {P0: 0, P1: 0}, batch_ms=250, rate=10, min_rate=0) == {P0: 1, P1: 0}


def test_no_lag_anywhere_means_no_limit() -> None:
    """Spark divides the rate by a total lag of 0: NaN rates, whose sum is not positive, so no limit."""
    assert limits({P0: 5, P1: 7}, {P0: 5, P1: 7}, rate=100, max_rate=10) is None


def test_lag_counts_from_zero_for_a_new_partition_and_never_below_zero() -> None:
    """A partition missing from the current offsets lags from 0; one whose end moved back has lag 0."""
    assert limits({P0: 30, P1: 10, P2: 2}, {P0: 10, P1: 20}, rate=22) == {P0: 20, P1: 1, P2: 2}


def test_clamp_stops_at_the_limit_or_the_latest_offset() -> None:
    """Each end is min(current + limit, latest), or latest without limits."""
    assert clamp_offsets({P0: 100, P1: 5}, {P0: 10, P1: 0}, {P0: 20, P1: 20}) == {P0: 30, P1: 5}
    assert clamp_offsets({P0: 100}, {P0: 10}, None) == {P0: 100}


@pytest.mark.parametrize(("backpressure", "latest_rate", "initial", "expected"), [
    (False, 50, 10, None), (True, -1, 0, 0), (True, -1, 10, 10), (True, 50, 10, 50)])
def test_the_estimated_rate_is_the_controllers_or_the_initial_rate(
        backpressure: bool, latest_rate: int, initial: int, expected: int | None) -> None:
    """DirectKafkaRateController's rate once it has one, spark.streaming.backpressure.initialRate before; nothing when off."""
    assert KafkaRateSettings(backpressure=backpressure, initial_rate=initial).estimated_rate(latest_rate) == expected


def test_rate_settings_are_read_as_spark_reads_them() -> None:
    """Spark's keys and defaults; a rate that is not a whole number names its key."""
    conf = {"spark.streaming.kafka.maxRatePerPartition": "100", "spark.streaming.backpressure.enabled": "TRUE",
            "spark.streaming.backpressure.initialRate": "20"}
    assert KafkaRateSettings.from_settings(conf.get) == KafkaRateSettings(100, 1, True, 20)
    assert KafkaRateSettings.from_settings({}.get) == KafkaRateSettings(0, 1, False, 0)
    with pytest.raises(ValueError, match=r"^spark.streaming.kafka.minRatePerPartition must be a whole number of records per "
                                         r"second, got '1.5'$"):
        KafkaRateSettings.from_settings({"spark.streaming.kafka.minRatePerPartition": "1.5"}.get)
    with pytest.raises(ValueError, match=r'^For input string: "on" \(spark.streaming.backpressure.enabled must be true or false\)$'):
        KafkaRateSettings.from_settings({"spark.streaming.backpressure.enabled": "on"}.get)


def plan(start: dict[TopicAndPartition, int], latest: dict[TopicAndPartition, int],
         earliest_of_new: dict[TopicAndPartition, int] | None = None, **rate: int) -> BatchEnd:
    return plan_batch_end(start, sorted(latest), latest=latest, earliest_of_new=earliest_of_new or {}, batch_ms=1000,
                          rate=KafkaRateSettings(**rate), estimated_rate=None)


def test_a_batch_ends_at_the_latest_offsets() -> None:
    """Without limits and losses, the end is each partition's latest offset."""
    assert plan({P0: 3, P1: 0}, {P0: 5, P1: 2}) == BatchEnd({P0: 5, P1: 2})


def test_a_new_partition_is_read_from_zero_and_one_that_lost_records_is_reported() -> None:
    """A partition not in the start begins at 0; if its first offset is not 0 that is Structured Streaming's data loss."""
    assert plan({P0: 3}, {P0: 3, P1: 4}, {P1: 0}, max_rate_per_partition=3) == BatchEnd({P0: 3, P1: 3})
    assert plan({P0: 3}, {P0: 3, P1: 4}, {P1: 2}).losses == ("Added partition t-1 starts from 2 instead of 0. Some data may have "
                                                             "been missed",)


def test_a_new_partition_that_lost_its_first_records_is_limited_from_its_first_record_held() -> None:
    """A rate limit counts from the first record a new partition still holds, not from 0: the first batch reads its
    first records (its range is logged from 0 and the gap below reported), not a range that lies wholly in the gap."""
    planned = plan({P0: 3}, {P0: 3, P1: 1_000_500}, {P1: 1_000_000}, max_rate_per_partition=100)
    assert planned.end == {P0: 3, P1: 1_000_100}
    assert planned.losses == ("Added partition t-1 starts from 1000000 instead of 0. Some data may have been missed",)


def test_partitions_gone_and_offsets_moved_back_are_data_loss() -> None:
    """Partitions in the start but not in the cluster are gone; a latest offset below the start moved back (Spark's words)."""
    planned = plan({P0: 9, P1: 1, P2: 4}, {P0: 4})
    assert planned.end == {P0: 4}
    assert planned.losses == ("Set(t-1, t-2) are gone. Some data may have been missed",
                              "Partition t-0's offset was changed from 9 to 4, some data may have been missed")
