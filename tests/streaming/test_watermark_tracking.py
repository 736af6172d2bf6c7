"""The query tracker's watermark: advanced after each batch, logged in offsets and commits as Spark does, restored on restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pytest

from scheduler import (
    WATERMARK_POLICY_KEY,
    BatchWatermarks,
    EventTimeStats,
    InvalidPipelineError,
    ManualClock,
    Seconds,
    Time,
    format_timestamp,
)
from streaming import Batch, ListSource, Pipeline, StreamingRuntime
from tests.anyio_support import raises_exactly
from tests.support import advance

pytestmark = pytest.mark.anyio


class EventTimePipeline(Pipeline):
    """One watermarked input whose records are their own event times (ms); the output records what each batch saw."""

    def __init__(self, records: list[int], delay_ms: int = 1_000, fail_at: set[int] | None = None) -> None:
        super().__init__()
        self.delay_ms = delay_ms
        self.fail_at = fail_at or set()
        self.seen: dict[int, list[int]] = {}
        self.told: dict[int, BatchWatermarks] = {}
        self.add_source(ListSource(records, max_per_batch=2), name="in")
        self.add_output(self._out, name="out")

    async def _out(self, batch: Batch) -> None:
        if batch.time.milliseconds in self.fail_at:
            raise RuntimeError(f"boom at {batch.time.milliseconds}")
        self.seen[batch.time.milliseconds] = list(batch.inputs["in"])

    def watermark_delays(self) -> Sequence[int]:
        return [self.delay_ms]

    def set_batch_watermarks(self, time: Time, watermarks: BatchWatermarks) -> None:
        self.told[time.milliseconds] = watermarks

    def event_time_stats(self, time: Time) -> Sequence[EventTimeStats | None]:
        return [EventTimeStats.of(self.seen.pop(time.milliseconds, []))]


def entry(path: Path) -> dict[str, Any]:
    """The JSON on line 2 of an offsets or commits entry."""
    result: dict[str, Any] = json.loads(path.read_text().splitlines()[1])
    return result


RECORDS = [10_000, 12_000, 11_500, 30_000, 5_000, 6_000, 40_000, 41_000]


async def test_batch_n_runs_with_the_watermark_of_the_batches_before_it_and_logs_it(tmp_path: Path, clock: ManualClock) -> None:
    """Each batch gets max-so-far minus delay from the earlier ones (late-event: the previous batch's); logs match Spark's."""
    ck = tmp_path / "ck"
    p = EventTimePipeline(RECORDS)
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock, 4_000)
        progress = rt.recent_progress
        await rt.stop()
    assert p.told == {
        1_000: BatchWatermarks(0, 0),
        2_000: BatchWatermarks(11_000, 0),
        3_000: BatchWatermarks(29_000, 11_000),
        4_000: BatchWatermarks(29_000, 29_000),  # 5_000 and 6_000 are older: the watermark holds
    }
    assert [entry(ck / "offsets" / str(n))["batchWatermarkMs"] for n in range(4)] == [0, 11_000, 29_000, 29_000]
    assert [entry(ck / "commits" / str(n))["nextBatchWatermarkMs"] for n in range(4)] == [11_000, 29_000, 29_000, 40_000]
    assert entry(ck / "offsets" / "0")["conf"][WATERMARK_POLICY_KEY] == "min"
    assert progress[1].event_time == {
        "avg": format_timestamp(20_750), "max": format_timestamp(30_000), "min": format_timestamp(11_500),
        "watermark": format_timestamp(11_000),
    }


async def test_a_restart_resumes_the_watermark_and_a_rerun_sees_the_logged_ones(tmp_path: Path) -> None:
    """Batch 2 fails; after a restart it re-runs with the watermarks logged for it, and the next batch continues from there."""
    ck = tmp_path / "ck"
    first = EventTimePipeline(RECORDS, fail_at={3_000})
    clock = ManualClock(0)
    async with StreamingRuntime(first, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock, 3_000)
        await rt.stop()
    assert first.told[3_000] == BatchWatermarks(29_000, 11_000)

    second = EventTimePipeline(RECORDS)
    clock = ManualClock(3_500)
    async with StreamingRuntime(second, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await rt.wait_until_idle()
        await advance(rt, clock, 500)
        await rt.stop()
    assert second.told[3_000] == BatchWatermarks(29_000, 11_000)  # the re-run: as logged, not recomputed
    assert second.told[4_000] == BatchWatermarks(29_000, 29_000)
    assert entry(ck / "commits" / "3")["nextBatchWatermarkMs"] == 40_000


def two_inputs() -> Pipeline:
    """A fast input (event times near 100 s) and a slow one (near 20 s), each watermarked with a 5 s delay."""
    p = Pipeline()
    p.add_source(ListSource([100_000, 101_000], max_per_batch=1), name="fast")
    p.add_source(ListSource([20_000, 21_000], max_per_batch=1), name="slow")
    p.add_watermark("fast", lambda t: t, "5 seconds")
    p.add_watermark("slow", lambda t: t, "5 seconds")
    p.add_output(lambda batch: None, name="out")
    return p


@pytest.mark.parametrize(("options", "policy", "watermarks"), [
    ({}, "min", [0, 15_000, 16_000]),
    ({WATERMARK_POLICY_KEY: "max"}, "max", [0, 95_000, 96_000]),
    ({WATERMARK_POLICY_KEY.upper(): "MAX"}, "max", [0, 95_000, 96_000]),  # names and values in any case, as Spark's
])
async def test_the_policy_setting_chooses_the_global_watermark_of_several_inputs(
        tmp_path: Path, clock: ManualClock, options: dict[str, str], policy: str, watermarks: list[int]) -> None:
    """spark.sql.streaming.multipleWatermarkPolicy: min follows the slow input, max the fast one; offsets record it."""
    ck = tmp_path / "ck"
    async with StreamingRuntime(two_inputs(), Seconds(1), clock=clock, checkpoint_location=ck, options=options) as rt:
        await rt.start()
        await advance(rt, clock, 1_000, times=3)
        await rt.stop()
    assert [entry(ck / "offsets" / str(n))["batchWatermarkMs"] for n in range(3)] == watermarks
    assert entry(ck / "offsets" / "0")["conf"][WATERMARK_POLICY_KEY] == policy


async def test_an_unknown_policy_is_refused_with_sparks_message(tmp_path: Path, clock: ManualClock) -> None:
    """A value other than min or max (any case, no surrounding space) is Spark 4.3's INVALID_CONF_VALUE at the start."""
    with raises_exactly(InvalidPipelineError, (
            "[INVALID_CONF_VALUE.REQUIREMENT] The value ' max' in the config \"spark.sql.streaming.multipleWatermarkPolicy\" "
            "is invalid. Invalid value for 'spark.sql.streaming.multipleWatermarkPolicy'. Valid values are 'min' and 'max' "
            "SQLSTATE: 22022")):
        StreamingRuntime(two_inputs(), Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck",
                         options={WATERMARK_POLICY_KEY: " max"})


async def test_a_restart_keeps_the_policy_its_checkpoint_recorded(tmp_path: Path) -> None:
    """A checkpoint written with max stays on max after a restart asking for min (Spark restores the policy)."""
    ck = tmp_path / "ck"
    clock = ManualClock(0)
    async with StreamingRuntime(two_inputs(), Seconds(1), clock=clock, checkpoint_location=ck,
                                options={WATERMARK_POLICY_KEY: "max"}) as rt:
        await rt.start()
        await advance(rt, clock, 1_000)
        await rt.stop()
    clock = ManualClock(1_500)
    async with StreamingRuntime(two_inputs(), Seconds(1), clock=clock, checkpoint_location=ck,
                                options={WATERMARK_POLICY_KEY: "min"}) as rt:
        await rt.start()
        assert rt.tracker is not None and rt.tracker.watermarks.policy == "max"
        await advance(rt, clock, 500)
        await rt.stop()
    assert entry(ck / "offsets" / "1")["batchWatermarkMs"] == 95_000


async def test_an_entry_without_a_policy_means_min_on_restart(tmp_path: Path) -> None:
    """An offsets entry that recorded no policy (an older log) restarts on min, whatever is configured (Spark's default)."""
    ck = tmp_path / "ck"
    clock = ManualClock(0)
    async with StreamingRuntime(two_inputs(), Seconds(1), clock=clock, checkpoint_location=ck,
                                options={WATERMARK_POLICY_KEY: "max"}) as rt:
        await rt.start()
        await advance(rt, clock, 1_000)
        await rt.stop()
    lines = (ck / "offsets" / "0").read_text().splitlines()
    metadata = json.loads(lines[1])
    del metadata["conf"][WATERMARK_POLICY_KEY]
    (ck / "offsets" / "0").write_text("\n".join([lines[0], json.dumps(metadata), *lines[2:]]))
    clock = ManualClock(1_500)
    async with StreamingRuntime(two_inputs(), Seconds(1), clock=clock, checkpoint_location=ck,
                                options={WATERMARK_POLICY_KEY: "max"}) as rt:
        await rt.start()
        assert rt.tracker is not None and rt.tracker.watermarks.policy == "min"
        await rt.stop()


async def test_without_watermarks_the_logs_say_zero_and_progress_has_no_event_time(tmp_path: Path, clock: ManualClock) -> None:
    """A plain pipeline: batchWatermarkMs and nextBatchWatermarkMs 0, no policy key, an empty eventTime."""
    ck = tmp_path / "ck"
    p = Pipeline()
    p.add_source(ListSource(["a", "b"]), name="in")
    p.add_output(lambda batch: None, name="out")
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock, 1_000)
        progress = rt.recent_progress
        await rt.stop()
    assert entry(ck / "offsets" / "0")["batchWatermarkMs"] == 0
    assert WATERMARK_POLICY_KEY not in entry(ck / "offsets" / "0")["conf"]
    assert entry(ck / "commits" / "0")["nextBatchWatermarkMs"] == 0
    assert progress[0].event_time == {}


class PlainPipeline(Pipeline):
    """No watermarked input; the graph records the watermarks handed to it and the ones taken back."""

    def __init__(self) -> None:
        super().__init__()
        self.told: dict[int, BatchWatermarks] = {}
        self.add_source(ListSource([1, 2, 3], max_per_batch=1), name="in")
        self.add_output(lambda batch: None, name="out")

    def set_batch_watermarks(self, time: Time, watermarks: BatchWatermarks) -> None:
        self.told[time.milliseconds] = watermarks

    def event_time_stats(self, time: Time) -> Sequence[EventTimeStats | None]:
        self.told.pop(time.milliseconds, None)
        return []


async def test_a_query_without_watermarks_leaves_no_watermark_per_batch_in_its_graph(clock: ManualClock) -> None:
    """Without watermarked inputs the graph keeps no watermark of a finished batch (it used to keep one per batch, forever)."""
    p = PlainPipeline()
    async with StreamingRuntime(p, Seconds(1), clock=clock, track_progress=True) as rt:
        await rt.start()
        await advance(rt, clock, 4_000)
        await rt.stop()
    assert p.told == {}
