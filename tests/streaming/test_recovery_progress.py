"""Query progress: Spark-shaped records and JSON, numbers that add up, status, events, processAllAvailable."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from listeners import EventRecorder, QueryIdle, QueryProgress, QueryStarted, QueryTerminated
from scheduler import (
    ManualClock,
    Milliseconds,
    Offset,
    Seconds,
    SinkProgress,
    SourceProgress,
    StreamingQueryProgress,
    StreamingQueryStatus,
    VirtualClock,
    format_timestamp,
)
from streaming import Batch, ListSource, Pipeline, StreamingRuntime, Trigger
from tests.streaming.test_recovery import Recorder, pipeline
from tests.support import advance

ID = uuid.UUID("8c3b9e2a-1f5d-4a7e-9c61-2d4b8f0a7e13")
RUN = uuid.UUID("0f9e8d7c-6b5a-4938-8271-605f4e3d2c1b")


def sample_progress() -> StreamingQueryProgress:
    sources = (SourceProgress("DirectorySource[/in]", None, '{"files":2,"lastFile":"b"}', '{"files":3,"lastFile":"c"}', 12,
                              float("nan"), 342.857142),)
    return StreamingQueryProgress(ID, RUN, None, "2023-11-14T22:13:20.000Z", 0, 35,
                                  {"walCommit": 2, "addBatch": 30, "triggerExecution": 35}, sources, SinkProgress("out"))


def test_progress_json_has_sparks_keys_order_and_number_format() -> None:
    """Compact JSON: Spark's key order, null name, parsed offsets, one-decimal rates, NaN left out, sorted durations."""
    assert sample_progress().json() == (
        '{"id":"8c3b9e2a-1f5d-4a7e-9c61-2d4b8f0a7e13","runId":"0f9e8d7c-6b5a-4938-8271-605f4e3d2c1b","name":null,'
        '"timestamp":"2023-11-14T22:13:20.000Z","batchId":0,"batchDuration":35,"numInputRows":12,'
        '"processedRowsPerSecond":342.9,"durationMs":{"addBatch":30,"triggerExecution":35,"walCommit":2},'
        '"stateOperators":[],"sources":[{"description":"DirectorySource[/in]","startOffset":null,'
        '"endOffset":{"files":2,"lastFile":"b"},"latestOffset":{"files":3,"lastFile":"c"},"numInputRows":12,'
        '"processedRowsPerSecond":342.9}],"sink":{"description":"out","numOutputRows":-1}}'
    )


def test_pretty_json_is_indented_like_jacksons_default_printer() -> None:
    """prettyJson: objects indented by two with ' : ', arrays inline ('[ {', '} ]', '[ ]')."""
    assert sample_progress().pretty_json() == """{
  "id" : "8c3b9e2a-1f5d-4a7e-9c61-2d4b8f0a7e13",
  "runId" : "0f9e8d7c-6b5a-4938-8271-605f4e3d2c1b",
  "name" : null,
  "timestamp" : "2023-11-14T22:13:20.000Z",
  "batchId" : 0,
  "batchDuration" : 35,
  "numInputRows" : 12,
  "processedRowsPerSecond" : 342.9,
  "durationMs" : {
    "addBatch" : 30,
    "triggerExecution" : 35,
    "walCommit" : 2
  },
  "stateOperators" : [ ],
  "sources" : [ {
    "description" : "DirectorySource[/in]",
    "startOffset" : null,
    "endOffset" : {
      "files" : 2,
      "lastFile" : "b"
    },
    "latestOffset" : {
      "files" : 3,
      "lastFile" : "c"
    },
    "numInputRows" : 12,
    "processedRowsPerSecond" : 342.9
  } ],
  "sink" : {
    "description" : "out",
    "numOutputRows" : -1
  }
}"""


def test_status_json_and_timestamps() -> None:
    """Status JSON has Spark's three keys; timestamps are UTC with milliseconds and a Z."""
    assert StreamingQueryStatus("Waiting for next trigger", False, True).json() == (
        '{"message":"Waiting for next trigger","isDataAvailable":false,"isTriggerActive":true}')
    assert format_timestamp(1700000000123) == "2023-11-14T22:13:20.123Z"
    assert format_timestamp(0) == "1970-01-01T00:00:00.000Z"


@given(st.integers(min_value=-62_135_596_800_000, max_value=253_402_300_799_999))
def test_a_timestamp_datetime_can_hold_is_its_iso_text(ms: int) -> None:
    """Years 1 to 9999: the text is datetime's, and the whole-number path (for any other year) agrees with it."""
    from scheduler.query._progress import _format_any_timestamp

    expected = (datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds") + "Z"
    assert format_timestamp(ms) == _format_any_timestamp(ms) == expected


@pytest.mark.anyio
async def test_an_event_time_beyond_year_9999_is_reported_not_fatal(tmp_path: Path) -> None:
    """An event time in microseconds taken for milliseconds (year 55,840): the event-time stats are printed with a
    five-digit year, as Spark prints any long; it ended the query with 'date value out of range'."""
    seen: list[int] = []
    p = Pipeline()
    p.add_source(ListSource([("a", 1_700_000_000_123_456)], max_per_batch=1), name="ev")
    p.add_watermark("ev", lambda r: r[1], "10 seconds")
    p.add_output(lambda batch: seen.append(len(batch.inputs["ev"])), name="out")
    recorder = EventRecorder()
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(0), checkpoint_location=tmp_path,
                                trigger=Trigger.AVAILABLE_NOW) as rt:
        rt.add_listener(recorder)
        await rt.start()
        await rt.await_termination()
        progress = rt.recent_progress
    assert seen[0] == 1 and rt.exception() is None
    assert {k: progress[0].event_time[k] for k in ("min", "avg", "max")} == dict.fromkeys(("min", "avg", "max"),
                                                                                         "55840-11-08T22:15:23.456Z")
    assert len(recorder.of_type(QueryProgress)) == len(progress)


class SlowListSource(ListSource):
    """A ListSource whose latest_offset takes 5 ms on the clock."""

    def __init__(self, clock: VirtualClock, records: list[str]) -> None:
        super().__init__(records, max_per_batch=2)
        self.clock = clock

    async def latest_offset(self) -> Offset:
        await self.clock.sleep(Milliseconds(5))
        return await super().latest_offset()


@pytest.mark.anyio
async def test_progress_numbers_add_up() -> None:
    """Phases sum to triggerExecution; rows and rates follow Spark's formulas (first input rate 0, then rows per second)."""
    clock = VirtualClock(0)
    p = Pipeline()
    p.add_source(SlowListSource(clock, list("abcdef")), name="in")

    async def work(batch: Batch) -> None:
        await clock.sleep(Milliseconds(30))

    p.add_output(work, name="work")
    recorder = EventRecorder()
    async with anyio.create_task_group() as tg:
        await tg.start(clock.run)
        async with StreamingRuntime(p, Seconds(1), clock=clock, track_progress=True) as rt:
            rt.add_listener(recorder)
            await rt.start()
            await recorder.wait_for(lambda events: sum(type(e) is QueryProgress for e in events) >= 2)
            first, second = rt.recent_progress[:2]
            await rt.stop()
        tg.cancel_scope.cancel()
    assert dict(first.duration_ms) == {"latestOffset": 5, "walCommit": 0, "queryPlanning": 0, "addBatch": 30, "commitOffsets": 0,
                                       "triggerExecution": 35}
    assert sum(v for k, v in first.duration_ms.items() if k != "triggerExecution") == first.duration_ms["triggerExecution"]
    assert (first.batch_id, first.timestamp, first.batch_duration, first.num_input_rows) == (0, "1970-01-01T00:00:01.000Z", 35, 2)
    assert first.input_rows_per_second == 0.0
    assert first.processed_rows_per_second == pytest.approx(2 / 0.035)
    assert (first.sources[0].start_offset, first.sources[0].end_offset, first.sources[0].latest_offset) == (None, "2", "6")
    assert second.input_rows_per_second == pytest.approx(2.0)  # 2 rows over the 1 s since the previous trigger
    assert second.sources[0].start_offset == "2" and second.sink.description.startswith("work at ")


@pytest.mark.anyio
async def test_recent_progress_keeps_one_fewer_than_the_bound(tmp_path: Path, clock: ManualClock) -> None:
    """numRecentProgressUpdates=3 keeps the newest 2 entries, as Spark's buffer does; lastProgress is the newest."""
    p, _ = pipeline(Recorder())
    async with StreamingRuntime(p, Seconds(1), clock=clock, track_progress=True,
                                options={"spark.sql.streaming.numRecentProgressUpdates": 3}) as rt:
        await rt.start()
        await advance(rt, clock, 1000, times=5)
        assert [e.batch_id for e in rt.recent_progress] == [3, 4]
        assert rt.last_progress is rt.recent_progress[-1]
        await rt.stop()


@pytest.mark.anyio
async def test_query_events_bracket_the_progress_of_a_run(tmp_path: Path, clock: ManualClock) -> None:
    """A run posts QueryStarted, one QueryProgress per batch and QueryTerminated (no exception) with its ids."""
    p, _ = pipeline(Recorder())
    recorder = EventRecorder()
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path, name="q") as rt:
        rt.add_listener(recorder)
        await rt.start()
        await advance(rt, clock, 2000)
        await rt.stop()
    events = [e for e in recorder.events if isinstance(e, (QueryStarted, QueryProgress, QueryIdle, QueryTerminated))]
    assert [type(e) for e in events] == [QueryStarted, QueryProgress, QueryProgress, QueryTerminated]
    started, terminated = events[0], events[-1]
    assert isinstance(started, QueryStarted) and isinstance(terminated, QueryTerminated)
    assert (started.id, started.run_id, started.name, started.timestamp) == (rt.id, rt.run_id, "q", "1970-01-01T00:00:00.000Z")
    assert (terminated.id, terminated.run_id, terminated.exception) == (rt.id, rt.run_id, None)


@pytest.mark.anyio
async def test_a_failed_query_reports_its_exception_at_termination(tmp_path: Path, clock: ManualClock) -> None:
    """QueryTerminated carries the failure with its traceback; the status says 'Terminated with exception'."""
    p, _ = pipeline(Recorder(fail_at={1000}))
    recorder = EventRecorder()
    async with StreamingRuntime(p, Seconds(1), clock=clock, track_progress=True, stop_on_failure=True) as rt:
        rt.add_listener(recorder)
        await rt.start()
        await advance(rt, clock, 1000)
        await rt.stop()
        assert rt.status.message == "Terminated with exception: boom at 1000"  # the cause's, as Spark's status says
        assert not rt.status.is_trigger_active and not rt.status.is_data_available
    terminated = recorder.of_type(QueryTerminated)[0]
    assert isinstance(terminated, QueryTerminated) and terminated.exception is not None
    assert "RuntimeError: boom at 1000" in terminated.exception and "Traceback" in terminated.exception


@pytest.mark.anyio
async def test_status_follows_the_query(tmp_path: Path, clock: ManualClock) -> None:
    """Status is 'Initializing StreamExecution' before start, 'Waiting for next trigger' between batches, 'Stopped' after."""
    p, _ = pipeline(Recorder())
    async with StreamingRuntime(p, Seconds(1), clock=clock, track_progress=True) as rt:
        assert rt.status == StreamingQueryStatus("Initializing StreamExecution", False, False)
        await rt.start()
        await advance(rt, clock, 1000)
        assert rt.status == StreamingQueryStatus("Waiting for next trigger", True, False)
        await rt.stop()
        assert rt.status == StreamingQueryStatus("Stopped", False, False)


@pytest.mark.anyio
async def test_process_all_available_returns_after_a_batch_without_new_data(tmp_path: Path, clock: ManualClock) -> None:
    """process_all_available() returns once a batch planned after the call found nothing new and has finished."""
    p, _ = pipeline(Recorder(), records=list("abcde"))
    returned_at: list[int] = []
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path) as rt:
        await rt.start()

        async def waiter() -> None:
            await rt.process_all_available()
            returned_at.append(clock.now().milliseconds)

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            for _ in range(4):
                assert returned_at == []
                await advance(rt, clock, 1000)
        assert returned_at == [4000]  # batches 1000..3000 took a..e; 4000 found nothing new
        await rt.stop()
        await rt.process_all_available()  # not active: returns at once


@pytest.mark.anyio
async def test_an_idle_trigger_after_batches_posts_a_query_idle_event(tmp_path: Path) -> None:
    """AvailableNow's final no-data trigger records idle progress and, after executed batches, posts QueryIdle."""
    p, _ = pipeline(Recorder(), records=list("ab"))
    recorder = EventRecorder()
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(0), checkpoint_location=tmp_path,
                                trigger=Trigger.AVAILABLE_NOW,
                                options={"spark.sql.streaming.noDataProgressEventInterval": "0"}) as rt:
        rt.add_listener(recorder)
        await rt.start()
        await rt.await_termination()
        assert [(e.batch_id, e.num_input_rows) for e in rt.recent_progress] == [(0, 2), (1, 0)]
        data, no_data = rt.recent_progress
        assert no_data.sink.description == data.sink.description != "no outputs"  # the query's sink, as Spark names it
    idle = recorder.of_type(QueryIdle)
    assert len(idle) == 1 and isinstance(idle[0], QueryIdle) and idle[0].id == rt.id


@pytest.mark.anyio
async def test_an_idle_trigger_before_any_batch_names_the_query_outputs_as_its_sink(tmp_path: Path) -> None:
    """With nothing to read, the run's first trigger is idle: its progress still names the query's outputs."""
    p, _ = pipeline(Recorder(), records=[])
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(0), checkpoint_location=tmp_path,
                                trigger=Trigger.AVAILABLE_NOW) as rt:
        await rt.start()
        await rt.await_termination()
        [idle] = rt.recent_progress
        assert idle.num_input_rows == 0
        [name] = p.output_names()
        assert name.startswith("out at ")  # the output's name and call site, as a batch's job carries it
        assert idle.sink.description == name
