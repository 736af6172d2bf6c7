"""Built-in listeners: EventRecorder (awaitable record of events) and StatsReportListener (delay distributions)."""

from __future__ import annotations

import anyio
import pytest

from listeners import (
    BatchCompleted,
    BatchInfo,
    BatchStarted,
    BatchSubmitted,
    EventRecorder,
    StatsReportListener,
    StreamingListenerBus,
    StreamingStarted,
)
from scheduler import Job, JobSet, Time
from tests.anyio_support import BACKENDS, run, settle
from tests.support import capture_events


def batch(time: int, *, submitted: int, started: int | None = None, ended: int | None = None) -> BatchInfo:
    """A one-job batch with the given times (None: not reached yet)."""
    job = Job(Time(time), lambda: None)
    job_set = JobSet(Time(time), [job], Time(submitted))
    if started is not None:
        job_set.handle_job_start(job, Time(started))
    if ended is not None:
        job_set.handle_job_completion(job, Time(ended))
    return BatchInfo.from_job_set(job_set)


def completed(time: int, *, scheduling: int, processing: int) -> BatchCompleted:
    """BatchCompleted for a batch submitted at its batch time with the given delays."""
    return BatchCompleted(batch(time, submitted=time, started=time + scheduling, ended=time + scheduling + processing))


# -- EventRecorder --


def test_event_recorder_keeps_every_event_in_order_and_filters_by_type() -> None:
    """The recorder keeps events as received; of_type and completed_batches select from them."""
    recorder = EventRecorder()
    first, second = completed(1000, scheduling=5, processing=10), completed(2000, scheduling=1, processing=2)
    events = [StreamingStarted(Time(0)), BatchSubmitted(batch(1000, submitted=1000)), first, second]
    for event in events:
        recorder(event)
    assert recorder.events == events
    assert recorder.of_type(BatchCompleted) == [first, second]
    assert recorder.of_type(BatchStarted) == []
    assert recorder.completed_batches == [first.batch_info, second.batch_info]


@pytest.mark.anyio
async def test_event_recorder_wait_for_wakes_when_the_predicate_holds() -> None:
    """wait_for returns at once if the predicate already holds, else as soon as an event makes it hold."""
    recorder = EventRecorder()
    recorder(StreamingStarted(Time(0)))
    await recorder.wait_for(lambda events: len(events) == 1)
    returned = anyio.Event()

    async def waiter() -> None:
        await recorder.wait_for(lambda events: len(events) >= 3)
        returned.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await settle()
        recorder(StreamingStarted(Time(1)))
        await settle()
        assert not returned.is_set()
        recorder(StreamingStarted(Time(2)))
        await returned.wait()


@pytest.mark.anyio
async def test_event_recorder_on_a_bus_waits_for_completed_batches() -> None:
    """As a bus listener, wait_for_batches(n) returns the first n completed batches once they arrive."""
    recorder = EventRecorder()
    bus = StreamingListenerBus()
    bus.add_listener(recorder)
    infos: list[BatchInfo] = []

    async def waiter() -> None:
        infos.extend(await recorder.wait_for_batches(2))

    async with anyio.create_task_group() as tg:
        await tg.start(bus.run)
        tg.start_soon(waiter)
        for n in range(1, 4):
            await bus.post(BatchSubmitted(batch(n * 1000, submitted=n * 1000)))
            await bus.post(completed(n * 1000, scheduling=n, processing=10 * n))
        bus.close()
    assert [i.batch_time for i in infos] == [Time(1000), Time(2000)]
    assert len(recorder.completed_batches) == 3
    assert len(recorder.events) == 6


# -- StatsReportListener --


def test_stats_report_logs_delay_distributions_over_the_last_batches() -> None:
    """Each completed batch logs min/quartiles/max of total and processing delay over the kept batches."""
    listener = StatsReportListener()
    with capture_events() as logs:
        for n, (scheduling, processing) in enumerate([(0, 100), (100, 100), (100, 200), (200, 200)], start=1):
            listener.on_batch_completed(completed(n * 1000, scheduling=scheduling, processing=processing))
    assert logs[0] == {
        "event": "batch delay distribution",
        "log_level": "info",
        "component": "StatsReportListener",
        "batches": 1,
        "total_delay_ms": {"min": 100, "p25": 100, "p50": 100, "p75": 100, "max": 100},
        "processing_delay_ms": {"min": 100, "p25": 100, "p50": 100, "p75": 100, "max": 100},
    }
    assert logs[-1] == {
        "event": "batch delay distribution",
        "log_level": "info",
        "component": "StatsReportListener",
        "batches": 4,
        # total delays 100, 200, 300, 400; processing delays 100, 100, 200, 200
        "total_delay_ms": {"min": 100, "p25": 175.0, "p50": 250.0, "p75": 325.0, "max": 400},
        "processing_delay_ms": {"min": 100, "p25": 100.0, "p50": 150.0, "p75": 200.0, "max": 200},
    }
    assert len(logs) == 4


def test_stats_report_keeps_only_the_last_n_batches() -> None:
    """With num_batch_infos=2 the distributions cover only the two most recent batches."""
    listener = StatsReportListener(num_batch_infos=2)
    with capture_events() as logs:
        for n, processing in enumerate([1000, 10, 30], start=1):
            listener.on_batch_completed(completed(n * 1000, scheduling=0, processing=processing))
    assert [b.batch_time for b in listener.batch_infos] == [Time(2000), Time(3000)]
    assert logs[-1]["batches"] == 2
    assert logs[-1]["processing_delay_ms"] == {"min": 10, "p25": 15.0, "p50": 20.0, "p75": 25.0, "max": 30}


def test_stats_report_default_keeps_ten_batches_like_spark() -> None:
    """The default window is Spark's 10 batches."""
    listener = StatsReportListener()
    with capture_events():
        for n in range(1, 13):
            listener.on_batch_completed(completed(n * 1000, scheduling=0, processing=n))
    assert len(listener.batch_infos) == 10
    assert listener.batch_infos[0].batch_time == Time(3000)


def test_stats_report_without_known_delays_logs_none() -> None:
    """Batches whose delays are unknown are left out; with none known the distribution is None."""
    listener = StatsReportListener()
    unfinished = BatchCompleted(batch(1000, submitted=1000, started=1010))
    with capture_events() as logs:
        listener.on_batch_completed(unfinished)
        listener.on_batch_completed(completed(2000, scheduling=5, processing=20))
    assert logs[0]["total_delay_ms"] is None and logs[0]["processing_delay_ms"] is None
    assert logs[1]["batches"] == 2
    assert logs[1]["total_delay_ms"] == {"min": 25, "p25": 25, "p50": 25, "p75": 25, "max": 25}


@pytest.mark.parametrize("backend", BACKENDS)
def test_stats_report_listens_only_for_completed_batches_on_a_bus(backend: str) -> None:
    """On a bus, StatsReportListener handles BatchCompleted and ignores the other events."""

    async def body() -> None:
        listener = StatsReportListener()
        bus = StreamingListenerBus()
        bus.add_listener(listener)
        async with anyio.create_task_group() as tg:
            await tg.start(bus.run)
            await bus.post(StreamingStarted(Time(0)))
            await bus.post(BatchSubmitted(batch(1000, submitted=1000)))
            await bus.post(completed(1000, scheduling=3, processing=4))
            bus.close()
        assert [b.batch_time for b in listener.batch_infos] == [Time(1000)]
        assert bus.statistics().failed == 0

    with capture_events() as logs:
        run(backend, body)
    assert [e["event"] for e in logs] == ["batch delay distribution"]


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "10"])
def test_stats_report_listener_refuses_a_bad_window(value: object) -> None:
    """num_batch_infos must be a positive int."""
    with pytest.raises(ValueError, match="num_batch_infos must be a positive int"):
        StatsReportListener(value)  # type: ignore[arg-type]
