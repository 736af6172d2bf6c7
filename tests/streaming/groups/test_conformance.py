"""flatMapGroupsWithState gives pyspark's applyInPandasWithState output, batch by batch, on the same keyed events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from tests.conftest import SPARK_TEST_CONF
from tests.pyspark_records import live, read_record, record_key, recorded_key
from tests.streaming.groups import reference
from tests.streaming.groups.reference import DELAY, PROGRAMS, Event, Output, run_spark
from tests.support import advance

RECORDS = Path(__file__).parent / "data" / "pyspark"

INTERVAL_MS = 1000

EVENTS: list[list[Event]] = [
    [("a", 1_000, 1), ("b", 2_000, 2), ("a", 3_000, 3)],
    [("a", 12_000, 1), ("c", 30_000, 5)],
    [("b", 500, 9), ("d", 40_000, 1), ("a", 26_000, 4)],  # b@500 is late; a@26000 reopens a session
    [],
    [("e", 70_000, 1), ("c", 39_000, 2)],  # c@39000 is after the late-event watermark (35_000): it extends c
    [("f", 71_000, 1)],
]


def run_ours(sc: Any, directory: Path, program: str, batches: list[list[Event]]) -> list[list[Output]]:
    """Each input batch, then an empty one (where Spark's no-data batch would fire timeouts); outputs per input batch."""
    spec = PROGRAMS[program]
    outputs: dict[int, list[Output]] = {}
    clock = ManualClock(0)
    ssc = StreamingContext(sc, INTERVAL_MS / 1000, clock=clock)
    queue = [ssc.sparkContext.parallelize(events, 2) for batch in batches for events in (batch, [])]
    stream = ssc.queueStream(queue, oneAtATime=True)
    if spec["watermark"]:
        stream = stream.withWatermark(lambda event: event[1], DELAY)
    result = stream.map(lambda event: (event[0], event)).flatMapGroupsWithState(
        spec["ours"], "append", spec["timeout"], numPartitions=2)
    result.foreachRDD(lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), rdd.collect()))
    ssc.checkpoint(str(directory))

    async def drive() -> None:
        async with ssc:
            await ssc.start_async()
            await ssc.runtime.wait_until_idle()
            for _ in queue:
                await advance(ssc.runtime, clock, INTERVAL_MS)
            await ssc.stop_async(stopSparkContext=False)

    anyio.run(drive)
    by_batch = [outputs.get((i + 1) * INTERVAL_MS, []) for i in range(len(queue))]
    return [sorted(by_batch[2 * i] + by_batch[2 * i + 1], key=repr) for i in range(len(batches))]


def program_key(program: str) -> str:
    """The key of a program's record of pyspark's output (``tests/pyspark_records.py``): this suite's code, its events, the settings."""
    settings = {name: SPARK_TEST_CONF[name] for name in ("spark.master", "spark.default.parallelism", "spark.sql.shuffle.partitions")}
    return record_key([Path(reference.__file__), Path(__file__)], program, settings)


def record_pyspark(spark_context: Any, program: str) -> list[list[Output]]:
    """applyInPandasWithState's output per input batch, run now."""
    from pyspark.sql import SparkSession

    return run_spark(SparkSession(spark_context), program, EVENTS)


def pyspark_outputs(spark_context: Any, program: str) -> list[list[Output]]:
    """applyInPandasWithState's output per input batch: the program's record when current, else run now."""
    record = None if live() else read_record(RECORDS / f"{program}.txt", program_key(program))
    return record if record is not None else record_pyspark(spark_context, program)


def test_every_recording_is_current() -> None:
    """Each program has a record of pyspark's output under its current key (else it runs pyspark live, slower)."""
    stale = [program for program in sorted(PROGRAMS) if recorded_key(RECORDS / f"{program}.txt") != program_key(program)]
    assert stale == [], "pyspark's outputs are not recorded for the current programs: run " \
        "PYTHONPATH=$PWD .venv/bin/python -m tests.streaming.conformance.record"


@pytest.mark.spark
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_the_same_output_per_batch_as_apply_in_pandas_with_state(spark_context: Any, tmp_path: Path, program: str) -> None:
    """Running totals without timeouts, and sessions closed by event-time timeouts under a watermark."""
    theirs = pyspark_outputs(spark_context, program)
    ours = run_ours(spark_context, tmp_path / "ck", program, EVENTS)
    assert any(theirs), "the reference produced nothing: the comparison would prove nothing"
    assert [[tuple(row) for row in batch] for batch in ours] == theirs
