"""bench_transform_state: its workload computes what it says, on the operator's runner, and its TTL run evicts what it says."""

from __future__ import annotations

from pathlib import Path

from bench.bench_transform_state import batch_keys, initial_values, ours_processor, run_ttl, seed_lines, to_pair
from streaming.state import StateStoreProvider, TransformWithStateSpec, run_transform_batch


def test_a_batch_touches_distinct_held_keys_shifted_each_batch() -> None:
    """10 keys of 100 held: a spread with step 10, starting where the batch number puts it."""
    assert batch_keys(1, 100, 10) == [19, 29, 39, 49, 59, 69, 79, 89, 99, 9]
    assert len(set(batch_keys(2, 1_000_000, 1000))) == 1000


def test_the_seed_then_batches_keep_each_keys_last_ten_values_and_output_their_sum(tmp_path: Path) -> None:
    """A seed row gives key 3 the values 3..12; a value 100 then drops the 3: the sum is 3+...+12 - 3 + 100."""
    spec = TransformWithStateSpec(ours_processor(), "update", "None", False)
    provider = StateStoreProvider(tmp_path / "ck", 0, 0, local_dir=tmp_path / "local")
    try:
        seed = [to_pair(line) for line in seed_lines(5)]
        assert seed[3] == (3, list(initial_values(3)))
        outputs, _ = run_transform_batch(provider, 0, seed, spec, 0, -1, -1)
        assert outputs == [(k, sum(range(k, k + 10))) for k in range(5)]
        outputs, stats = run_transform_batch(provider, 1, [to_pair('{"key": 3, "value": 100}')], spec, 0, -1, -1)
        assert outputs == [(3, sum(range(4, 13)) + 100)]
        assert stats.num_rows_total == 50
    finally:
        provider.close()


def test_each_measured_ttl_batch_evicts_the_values_written_that_many_batches_before() -> None:
    """20 held values stay; each of 2 input-free batches evicts the 5 short-lived values of one earlier batch."""
    run = run_ttl(20, 5, 2)
    assert run["evicted_per_batch"] == [5, 5]
    assert run["rows_after"] == 20
