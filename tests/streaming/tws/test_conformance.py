"""transformWithState gives pyspark 4.3's transformWithStateInPandas output, batch by batch, on the same keyed events."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import anyio
import pytest

from scheduler import ManualClock, Seconds
from streaming import ListSource, Pipeline, StreamingContext, StreamingRuntime
from tests.streaming.tws.reference import (
    COUNTERS,
    DELAY,
    FLUSH,
    PROGRAMS,
    Event,
    Output,
    by_key,
    ours_processors,
    rocksdb_session,
    run_spark,
)
from tests.support import advance

pytestmark = pytest.mark.spark

INTERVAL_MS = 1000

EVENTS: list[list[Event]] = [
    [("a", 1_000, 1), ("b", 2_000, 2), ("a", 3_000, 3)],  # timers: a 13_000, b 12_000
    [("c", 18_000, 4)],  # watermark 13_000: b's timer fires, and a's exactly at the watermark
    # late-event watermark 13_000: a@12_000 is late, d@13_000 exactly at it; c's flush timer (at the
    # watermark, 13_000) is due as it is registered and fires in this batch, after c's input
    [("a", 14_000, 5), ("a", 12_000, 6), ("d", 13_000, 7), ("c", 19_000, FLUSH)],
    [],
    [("e", 40_000, 8), ("z", 40_000, 10)],  # watermark 35_000: a, c (and d if kept) close
    [("b", 41_000, 9), ("e", 36_000, FLUSH)],  # e's flush fires with its input; its session timer moves
    [("f", 60_000, 11)],  # watermark 55_000: b, e and z close
]


def paired_counters(progress: list[Any], inputs: int) -> list[dict[str, int]]:
    """:data:`COUNTERS` of each input batch and the empty batch after it, from our progress reports."""
    assert len(progress) == 2 * inputs
    paired = []
    for pair in range(inputs):
        operators = [op for p in progress[2 * pair:2 * pair + 2] for op in p.state_operators]
        paired.append({"numRowsDroppedByWatermark": sum(op.num_rows_dropped_by_watermark for op in operators),
                       **{counter: sum(op.custom_metrics.get(counter, 0) for op in operators) for counter in COUNTERS[:2]}})
    return paired


def paired_outputs(outputs: dict[int, list[Output]], inputs: int) -> list[list[Output]]:
    """Per input batch (batch times 1 s, 3 s, ...), its outputs and the next batch's, in :func:`by_key` order."""
    by_batch = [outputs.get((i + 1) * INTERVAL_MS, []) for i in range(2 * inputs)]
    return [by_key(by_batch[2 * i] + by_batch[2 * i + 1]) for i in range(inputs)]


def run_ours(sc: Any, directory: Path, program: str, batches: list[list[Event]],
             metrics: list[dict[str, int]]) -> list[list[Output]]:
    """Each input batch, then an empty one (where Spark's no-data batch would fire timers); outputs per input batch.

    ``metrics`` gets the progress counters (:data:`COUNTERS`) of each input batch and its empty one.
    """
    processor = ours_processors()[program]()
    initial, time_mode = PROGRAMS[program]["initial"], PROGRAMS[program]["time_mode"]
    outputs: dict[int, list[Output]] = {}
    clock = ManualClock(0)
    ssc = StreamingContext(sc, INTERVAL_MS / 1000, clock=clock)
    queue = [ssc.sparkContext.parallelize(events, 2) for batch in batches for events in (batch, [])]
    stream = ssc.queueStream(queue, oneAtATime=True).withWatermark(lambda event: event[1], DELAY)
    result = stream.map(lambda event: (event[0], event)).transformWithState(
        processor, "append", time_mode, initialState=initial, eventTime=lambda event: event[1], numPartitions=2)
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
    metrics.extend(paired_counters(ssc.runtime.recent_progress, len(batches)))
    return paired_outputs(outputs, len(batches))


def run_pipeline(directory: Path, program: str, batches: list[list[Event]], metrics: list[dict[str, int]],
                 restart_after: int | None = None) -> list[list[Output]]:
    """The same on a plain-Python pipeline (one state store, no Spark): each input batch, then an empty one.

    With ``restart_after``, the runtime stops after that many input batches and a new one
    (a new pipeline and source holding the records read, a clock at the stop time) resumes
    from the checkpoint: the state, the timers and the watermark carry over, the initial
    state is not applied again.
    """
    initial, time_mode = PROGRAMS[program]["initial"], PROGRAMS[program]["time_mode"]
    outputs: dict[int, list[Output]] = {}
    progress: list[Any] = []

    def build(records: list[Event]) -> tuple[Pipeline, ListSource]:
        source = ListSource(records, name="events")
        pipeline = Pipeline()
        pipeline.add_source(source, name="events")
        pipeline.add_watermark("events", lambda event: event[1], DELAY)
        name = pipeline.add_transform_with_state("events", ours_processors()[program](), "append", time_mode,
                                                 key=lambda event: event[0], initialState=initial,
                                                 eventTime=lambda event: event[1])
        pipeline.add_output(lambda batch: outputs.__setitem__(batch.time.milliseconds, list(batch.inputs[name])),
                            name="out")
        return pipeline, source

    async def drive(first: int, last: int) -> None:
        pipeline, source = build([event for events in batches[:first] for event in events])
        clock = ManualClock(2 * first * INTERVAL_MS)
        async with StreamingRuntime(pipeline, Seconds(INTERVAL_MS / 1000), clock=clock,
                                    checkpoint_location=directory) as runtime:
            await runtime.start()
            for events in batches[first:last]:
                source.append(*events)
                await advance(runtime, clock, INTERVAL_MS, times=2)
            progress.extend(runtime.recent_progress)
            await runtime.stop()

    stop = len(batches) if restart_after is None else restart_after
    anyio.run(drive, 0, stop)
    if stop < len(batches):
        anyio.run(drive, stop, len(batches))
    metrics.extend(paired_counters(progress, len(batches)))
    return paired_outputs(outputs, len(batches))


@pytest.fixture
def spark(spark_context: Any) -> Iterator[Any]:
    """The shared session with the RocksDB state store provider for the test."""
    with rocksdb_session(spark_context) as session:
        yield session


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_the_same_output_per_batch_as_transform_with_state_in_pandas(spark: Any, spark_context: Any,
                                                                      tmp_path: Path, program: str) -> None:
    """DStream, pipeline, restarted pipeline: three kinds of state, event-time timers, late rows, initial state."""
    their_metrics: list[dict[str, int]] = []
    our_metrics: list[dict[str, int]] = []
    pipeline_metrics: list[dict[str, int]] = []
    theirs = run_spark(spark, program, EVENTS, their_metrics)
    ours = run_ours(spark_context, tmp_path / "ck", program, EVENTS, our_metrics)
    pipeline = run_pipeline(tmp_path / "pipeline", program, EVENTS, pipeline_metrics)
    restarted_metrics: list[dict[str, int]] = []
    restarted = run_pipeline(tmp_path / "restarted", program, EVENTS, restarted_metrics, restart_after=3)
    timers = PROGRAMS[program]["time_mode"] == "EventTime"
    assert any(kind == "closed" for batch in theirs for _, kind, *_ in batch) == timers
    assert [[tuple(row) for row in batch] for batch in ours] == theirs
    assert sum(m["numRowsDroppedByWatermark"] for m in their_metrics) == (2 if timers else 0)
    assert our_metrics == their_metrics
    assert pipeline == ours and pipeline_metrics == our_metrics
    assert restarted == ours and restarted_metrics == our_metrics
