"""The state store's prefix operations transformWithState's rows rely on (scan, last_key, due with a prefix); StateOperatorStats' merge."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from streaming.state import NO_TIMESTAMP, TRANSFORM_WITH_STATE_OPERATOR, StateOperatorStats, StateStoreProvider
from streaming.state._processor_rows import prefix_end


@pytest.fixture
def provider(tmp_path: Path) -> StateStoreProvider:
    """One partition's provider, with rows under prefixes ``a``, ``ab``, ``b`` and one of all 0xff bytes."""
    provider = StateStoreProvider(tmp_path / "ck", 0, 0, local_dir=tmp_path / "local")
    store = provider.load(0)
    for key, timeout in [(b"a1", 30), (b"a2", NO_TIMESTAMP), (b"ab", 10), (b"b", 20), (b"\xff\xff", 5), (b"\xff\xff\x01", 40)]:
        store.put(key, key.upper(), timeout)
    store.commit()
    return provider


def test_scan_gives_one_prefix_in_key_order_with_this_batchs_changes(provider: StateStoreProvider) -> None:
    """scan sees uncommitted puts and removals, and only keys starting with the prefix."""
    store = provider.load(1)
    store.put(b"a0", b"new", NO_TIMESTAMP)
    store.remove(b"a2")
    assert [key for key, _ in store.scan(b"a")] == [b"a0", b"a1", b"ab"]
    assert store.scan(b"a1") == [(b"a1", (b"A1", 30))]
    assert [key for key, _ in store.scan(b"\xff\xff")] == [b"\xff\xff", b"\xff\xff\x01"]
    assert store.scan(b"c") == []
    store.abort()


def test_last_key_is_the_greatest_key_of_a_prefix(provider: StateStoreProvider) -> None:
    """last_key answers from the ordered keys, None for an empty prefix range."""
    store = provider.load(1)
    assert (store.last_key(b"a"), store.last_key(b"b"), store.last_key(b"\xff"), store.last_key(b"z")) == (
        b"ab", b"b", b"\xff\xff\x01", None)
    store.remove(b"ab")
    assert store.last_key(b"a") == b"a2"
    store.abort()


def test_due_with_a_prefix_is_strictly_before_the_threshold_earliest_first(provider: StateStoreProvider) -> None:
    """due(t, prefix) gives rows of the prefix whose timeout is set and below t, by timeout."""
    store = provider.load(1)
    assert [key for key, _ in store.due(31, b"a")] == [b"ab", b"a1"]
    assert [key for key, _ in store.due(30, b"a")] == [b"ab"]
    assert [key for key, _ in store.due(100)] == [b"\xff\xff", b"ab", b"b", b"a1", b"\xff\xff\x01"]
    assert [key for key, _ in store.due(100, b"\xff\xff")] == [b"\xff\xff", b"\xff\xff\x01"]
    store.abort()


@pytest.mark.parametrize(("prefix", "end"), [(b"a", b"b"), (b"a\xff", b"b"), (b"\xff\xff", None), (b"a\x00", b"a\x01")])
def test_prefix_end_bounds_the_keys_of_a_prefix(prefix: bytes, end: bytes | None) -> None:
    """The least key above every key of the prefix; none when the prefix is all 0xff."""
    assert prefix_end(prefix) == end


def test_operator_stats_merge_by_field_name_and_custom_metrics_by_metric_name() -> None:
    """Merging sums every count by name, the custom metrics by their names (missing ones count 0), unions partitions."""
    one = StateOperatorStats(1, 2, 3, 4, 5, 6, 7, 1, 8, 9, 1, 0, 0b01, {"numExpiredTimers": 2, "a": 1}, 12)
    two = StateOperatorStats(10, 20, 30, 40, 50, 60, 70, 1, 80, 90, 0, 1, 0b10, {"numExpiredTimers": 3, "b": 5}, 30)
    merged = one.merge(two)
    assert attrs.asdict(merged) == {
        "num_rows_total": 11, "num_rows_updated": 22, "num_rows_removed": 33, "num_rows_dropped_by_watermark": 44,
        "memory_used_bytes": 55, "commit_time_ms": 66, "num_timeouts": 77, "num_partitions": 2,
        "all_updates_time_ms": 88, "all_removals_time_ms": 99, "working_copy_hits": 1, "working_copy_misses": 1,
        "partitions": 0b11, "custom_metrics": {"numExpiredTimers": 5, "a": 1, "b": 5}, "input_rows": 42}
    assert one.merge(None) is one and one.custom_metrics == {"numExpiredTimers": 2, "a": 1}


def test_operator_stats_progress_carries_the_custom_metrics() -> None:
    """The progress names the operator as pyspark's row-based transformWithState; customMetrics add the operator's own."""
    stats = StateOperatorStats(1, 2, 3, 4, 5, 6, 0, 1, 0, 0, 1, 0, 1, {"numExpiredTimers": 2})
    progress = stats.progress(TRANSFORM_WITH_STATE_OPERATOR, 4)
    assert (progress.operator_name, dict(progress.custom_metrics)) == (
        "transformWithStateInPySparkExec", {"loadedMapCacheHitCount": 1, "loadedMapCacheMissCount": 0, "numExpiredTimers": 2})
