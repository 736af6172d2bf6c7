"""FrameRDD's take against pyspark's: partitions scanned a few at a time (partition 0 first), so the partitions it
never needs never run, on the classic shared SparkContext and on a Connect session alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from tests.support import connect_opt_in, run_dstream_batches

pytestmark = pytest.mark.connect


def _fails_on_six(x: int) -> int:
    if x == 6:
        raise ValueError(f"bad record {x}")
    return x


# parallelize(range(10), 3): [0, 1, 2] [3, 4, 5] [6, 7, 8, 9]; the record 6 of partition 2 fails.
TAKE_CASES: dict[str, Callable[[Any], Any]] = {
    "take_1": lambda sc: sc.parallelize(range(10), 3).map(_fails_on_six).take(1),
    "first": lambda sc: sc.parallelize(range(10), 3).map(_fails_on_six).first(),
    "take_4": lambda sc: sc.parallelize(range(10), 3).map(_fails_on_six).take(4),  # partitions 0 then 1
    "isEmpty": lambda sc: sc.parallelize(range(10), 3).map(_fails_on_six).isEmpty(),
    "take_sorted_partitions": lambda sc: sc.parallelize(range(10), 3).mapPartitions(lambda it: sorted(map(_fails_on_six, it))).take(2),
    "take_after_shuffle": lambda sc: sc.parallelize(range(10), 3).map(lambda x: (x % 3, x)).groupByKey(3)
                                       .mapValues(sorted).map(lambda kv: kv if kv[0] != 2 else 1 // 0).take(1),
}


@pytest.mark.parametrize("case", TAKE_CASES)
def test_take_runs_only_the_partitions_it_scans(case: str, spark_context: Any, frame_context: Any) -> None:
    """take, first and isEmpty return pyspark's answer where a partition they need not scan would fail."""
    run = TAKE_CASES[case]
    assert run(frame_context) == run(spark_context)


@connect_opt_in("take's partitions scanned per round are checked by default (above)")
def test_take_scans_partitions_as_pyspark(spark_context: Any, frame_context: Any, tmp_path: Path) -> None:
    """take's rounds run pyspark's partitions: 0, then 4 times as many while none is found, then an estimate."""

    def scanned(sc: Any, num: int) -> list[int]:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()

        def mark(index: int, values: Any) -> Any:
            (folder / str(index)).touch()  # a file, not an accumulator: classic's arrive asynchronously
            return values

        sc.parallelize(range(100), 20).mapPartitionsWithIndex(mark).filter(lambda x: x >= 80 or x == 7).take(num)
        return sorted(int(path.name) for path in folder.iterdir())

    for num in (1, 2, 3, 6):
        assert scanned(frame_context, num) == scanned(spark_context, num)
    assert scanned(spark_context, 1) == list(range(5))  # partition 0, then 1 to 4 (partition 1 holds 7)
    assert scanned(spark_context, 3) == list(range(20))  # then 5 to 19: 1.5 * 3 * 5 / 1 - 5 = 17 more


def test_pprint_does_not_run_partitions_past_what_it_prints(connect_session: Any, spark_context: Any,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """pprint (take(11)) prints what classic Spark prints when a partition it never reads would fail."""

    def run(spark: Any) -> list[BaseException]:
        clock = ManualClock(0)
        ssc = StreamingContext(spark, 1, clock=clock)
        ssc.queueStream([list(range(30))]).repartition(3).map(lambda x: 1 // (x - 29) if x == 29 else x).pprint()
        return run_dstream_batches(ssc, clock, 1)

    assert run(spark_context) == []
    classic = capsys.readouterr().out
    assert run(connect_session) == []
    assert capsys.readouterr().out == classic
    assert "..." in classic
