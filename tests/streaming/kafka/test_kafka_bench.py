"""``bench/bench_kafka.py``'s code paths on tiny data: the sustained test, the rate search, the writers and the reader floor.

No timed assertions: the figures are the benchmark's to measure (``python -m bench.bench_kafka``).
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from bench import bench_kafka


def batch(processing: int, scheduling: int = 0, failed: int = 0, ops: list[int] | None = None) -> dict[str, Any]:
    """One recorded batch, as the benchmark's listener records it."""
    return {"processing": processing, "scheduling": scheduling, "failed": failed, "ops_ms": ops or [processing]}


def test_a_rate_is_sustained_when_every_condition_holds_after_the_warmup() -> None:
    """Records at the rate, mean processing under the interval, a last scheduling delay under it: sustained (warm-up left out)."""
    batches = [batch(3000, 0), batch(900, 2000), batch(990, 500), batch(950, 10)]
    result = bench_kafka.assess(batches, [1, 1000, 1000, 960], 1000, warmup=2)
    assert result == {"rate": 1000, "records_per_batch_mean": 980, "processing_ms": [990, 950],
                      "output_ms_mean": [970.0], "processing_ms_mean": 970.0, "scheduling_ms": [500, 10],
                      "failed_batches": 0, "first_failure": None, "sustained": True}


@pytest.mark.parametrize(("batches", "seen"), [
    ([batch(900), batch(1100)], [1000, 1000]),  # mean processing 1000 ms: not below the interval
    ([batch(500), batch(500, scheduling=1000)], [1000, 1000]),  # a queue of batches formed
    ([batch(500), batch(500, failed=1)], [1000, 1000]),  # a failed batch
    ([batch(500), batch(500)], [1000, 899]),  # 94.95% of the offered records
    ([batch(500), batch(500)], [1000]),  # a batch whose output never ran
])
def test_a_rate_is_not_sustained_when_any_condition_fails(batches: list[dict[str, Any]], seen: list[int]) -> None:
    """Each condition of the definition alone makes a rate unsustained."""
    assert bench_kafka.assess(batches, seen, 1000, warmup=0)["sustained"] is False


def test_the_search_doubles_then_bisects_to_the_highest_sustained_rate() -> None:
    """Doubling until the first failure, then bisection between the last success and it, in thousands."""
    tried: list[int] = []

    def step(rate: int) -> dict[str, Any]:
        tried.append(rate)
        return {"rate": rate, "sustained": rate <= 330_000, "processing_ms_mean": 1.0,
                "records_per_batch_mean": rate, "load_average": [0.0, 0.0, 0.0]}

    result = bench_kafka.search("fake", step, 50_000, 3_200_000, bisect=3, retries=0)
    assert tried == [50_000, 100_000, 200_000, 400_000, 300_000, 350_000, 325_000]
    assert result["max_sustained_records_per_s"] == 325_000
    assert result["first_failed_records_per_s"] == 350_000
    assert result["at_max"]["rate"] == 325_000


def test_a_failed_rate_is_tried_again_and_fails_only_if_every_try_fails() -> None:
    """With one retry, a rate that fails once and then holds counts as sustained; one failing twice ends the doubling."""
    outcomes = {1000: [True], 2000: [False, True], 4000: [False, False], 3000: [True]}

    def step(rate: int) -> dict[str, Any]:
        return {"rate": rate, "sustained": outcomes[rate].pop(0), "processing_ms_mean": 1.0,
                "records_per_batch_mean": rate, "load_average": [0.0, 0.0, 0.0]}

    result = bench_kafka.search("fake", step, 1000, 8000, bisect=1, retries=1)
    assert [(s["rate"], s["sustained"]) for s in result["steps"]] == [
        (1000, True), (2000, False), (2000, True), (4000, False), (4000, False), (3000, True)]
    assert (result["max_sustained_records_per_s"], result["first_failed_records_per_s"]) == (3000, 4000)


def test_alternating_searches_take_turns_one_rate_each() -> None:
    """Two sides alternate rate by rate; the one that finishes first leaves the other to go on alone."""
    order: list[tuple[str, int]] = []

    def side(name: str, limit: int) -> bench_kafka.RateSearch:
        def step(rate: int) -> dict[str, Any]:
            order.append((name, rate))
            return {"rate": rate, "sustained": rate <= limit, "processing_ms_mean": 1.0,
                    "records_per_batch_mean": rate, "load_average": [0.0, 0.0, 0.0]}
        return bench_kafka.RateSearch(name, step, 1000, 16000, bisect=0, retries=0)

    bench_kafka.alternate(side("a", 1000), side("b", 4000))
    assert order == [("a", 1000), ("b", 1000), ("a", 2000), ("b", 2000), ("b", 4000), ("b", 8000)]


def test_a_rate_the_broker_cannot_hold_is_reported_apart_from_a_failed_one() -> None:
    """A step that could not be offered ends the doubling like a failure and is named as such in the summary."""
    def step(rate: int) -> dict[str, Any]:
        base = {"rate": rate, "processing_ms_mean": 1.0, "records_per_batch_mean": rate, "load_average": [0.0, 0.0, 0.0]}
        if rate > 2000:
            return {**base, "sustained": False, "not_measured": "the mock broker kept less"}
        return {**base, "sustained": True}

    result = bench_kafka.search("fake", step, 1000, 8000, bisect=1, retries=1)
    assert [s["rate"] for s in result["steps"]] == [1000, 2000, 4000, 3000]  # not measurable: never retried
    assert (result["max_sustained_records_per_s"], result["first_not_measurable_records_per_s"]) == (2000, 3000)


def test_the_search_stops_at_the_top_rate_without_a_failure() -> None:
    """A side that sustains every rate up to the top reports the top and no failed rate."""
    result = bench_kafka.search("fake", lambda rate: {"rate": rate, "sustained": True, "processing_ms_mean": 1.0,
                                                      "records_per_batch_mean": rate, "load_average": [0.0, 0.0, 0.0]},
                                1000, 4000, bisect=2)
    assert [s["rate"] for s in result["steps"]] == [1000, 2000, 4000]
    assert (result["max_sustained_records_per_s"], result["first_failed_records_per_s"]) == (4000, None)


@pytest.mark.spark
def test_the_reader_floor_reads_every_record_of_the_prefilled_ranges(spark_context: Any) -> None:
    """The floor's writer process pre-fills the topic; RangeReader and a plain Spark job both read all of it."""
    floor = bench_kafka.reader_floor(spark_context, records=300, partitions=2, repeats=1)
    assert (floor["records_per_range"], floor["spark_job_records"], floor["partitions"]) == (300, 600, 2)
    assert len(floor["one_thread_runs"]) == 1


@pytest.mark.spark
def test_a_socket_step_counts_the_lines_its_writer_sent(spark_context: Any) -> None:
    """A socket step runs its count() on the receiver's batches; the writer process reports what it sent."""
    args = argparse.Namespace(warmup=0, batches=2, timeout=60)
    step = bench_kafka.socket_step(spark_context, bench_kafka.count_program, 500, args)
    assert step["rate"] == 500 and len(step["processing_ms"]) == 2
    assert step["writer"]["sent"] > 0
    assert 0 < step["records_per_batch_mean"] <= step["writer"]["sent"]


@pytest.mark.spark
def test_a_kafka_step_takes_the_offered_rate_from_the_prefilled_backlog(spark_context: Any) -> None:
    """maxRatePerPartition = rate / partitions caps each batch of the direct stream at the rate; the cap is restored after."""
    args = argparse.Namespace(warmup=0, batches=2, timeout=60, partitions=2)
    before = spark_context._conf.get(bench_kafka.MAX_RATE_KEY, None)
    step = bench_kafka.kafka_step(spark_context, bench_kafka.count_program, 301, args)
    assert step["rate"] == 300 and len(step["processing_ms"]) == 2
    assert step["writer"]["records"] == 600
    assert 0 < step["records_per_batch_mean"] <= 300
    assert spark_context._conf.get(bench_kafka.MAX_RATE_KEY, None) == (before or "0")
