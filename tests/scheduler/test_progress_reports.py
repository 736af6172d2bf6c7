"""Progress reports cost what is read: a batch's report is built only when read or wanted, once, in the ring's order and bound."""

from __future__ import annotations

import uuid
from typing import Any, Mapping

import pytest

from scheduler import Job, JobSet, ProgressRing, ProgressTrackingOptions, ReplayableInput, StreamInputInfo, Time, library_logger
from scheduler.query._planned_batch import PlannedBatch
from scheduler.query._progress import SinkProgress, StreamingQueryProgress
from scheduler.query._progress_reporter import ProgressReporter

QUERY, RUN = uuid.UUID(int=1), uuid.UUID(int=2)


def report(batch_id: int) -> StreamingQueryProgress:
    return StreamingQueryProgress(QUERY, RUN, None, "1970-01-01T00:00:00.000Z", batch_id, 0, {}, (), SinkProgress("s"))


def test_a_deferred_report_is_built_once_when_first_read() -> None:
    """The ring builds a deferred report on the first read only, and every read returns that one report."""
    ring = ProgressRing(10)
    built: list[int] = []

    def build() -> StreamingQueryProgress:
        built.append(1)
        return report(7)

    get = ring.add_deferred(build)
    assert built == []
    assert ring.last is get() is ring.recent()[0]
    assert built == [1]


def test_deferred_and_built_reports_keep_their_order_and_the_bound() -> None:
    """Deferred and built reports mix in adding order, and the ring keeps at most capacity - 1 (Spark's rule)."""
    ring = ProgressRing(3)
    ring.add(report(0))
    ring.add_deferred(lambda: report(1))
    ring.add(report(2))
    ring.add_deferred(lambda: report(3))
    assert [p.batch_id for p in ring.recent()] == [2, 3]
    assert len(ring) == 2


class Listener:
    """A progress listener that wants reports or not, and records what it gets."""

    def __init__(self, wants: bool) -> None:
        self.wants = wants
        self.got: list[StreamingQueryProgress] = []

    async def on_query_progress(self, progress: StreamingQueryProgress) -> None:
        self.got.append(progress)

    async def on_query_idle(self, query_id: uuid.UUID, run_id: uuid.UUID, timestamp: str) -> None:
        raise AssertionError("no idle trigger here")

    def wants_progress(self) -> bool:
        return self.wants


def reporter(listener: Listener) -> ProgressReporter:
    return ProgressReporter(ProgressTrackingOptions(), "q", listener, lambda: None, library_logger("aiodstream.test"))


async def report_batch(progress: ProgressReporter) -> None:
    batch = PlannedBatch(4, Time(5000), ("1",), ("3",), ("3",), 4000, 3000, 1, True, False)
    batch.durations["triggerExecution"] = 1000
    job_set = JobSet(Time(5000), [Job(Time(5000), lambda: None, name="out")], Time(4000), {0: StreamInputInfo(0, 2)})
    await progress.report_batch(batch, job_set, 5000, [ReplayableInput(0, "Queue stream [0]")], QUERY, RUN, False)


@pytest.mark.anyio
async def test_a_listener_that_wants_reports_gets_the_one_the_ring_keeps() -> None:
    """A listener that wants progress gets each batch's report, the very one ``last`` returns, with the batch's figures."""
    listener = Listener(wants=True)
    progress = reporter(listener)
    await report_batch(progress)
    assert listener.got == [progress.ring.last]
    got = listener.got[0]
    assert (got.batch_id, got.timestamp, got.duration_ms, got.sink.description) == (
        4, "1970-01-01T00:00:04.000Z", {"triggerExecution": 1000}, "out")
    assert [(s.start_offset, s.end_offset, s.num_input_rows) for s in got.sources] == [("1", "3", 2)]


@pytest.mark.anyio
async def test_nobody_wanting_a_report_gets_none_and_reading_builds_it() -> None:
    """Without a listener that wants progress none is posted, and the ring still gives the batch's report when read."""
    listener = Listener(wants=False)
    progress = reporter(listener)
    await report_batch(progress)
    assert listener.got == []
    last = progress.ring.last
    assert last is not None and last.batch_id == 4


def test_the_status_record_follows_the_last_values_set() -> None:
    """The status read after several updates holds the last message and flags set, and is one record until they change."""
    progress = reporter(Listener(wants=False))
    progress.set_status("Getting offsets", True, True)
    progress.set_status("Waiting for next trigger", False, True)
    first = progress.status
    assert (first.message, first.is_data_available, first.is_trigger_active) == ("Waiting for next trigger", False, True)
    assert progress.status is first
    progress.set_status("Stopped")
    assert (progress.status.message, progress.status.is_trigger_active, progress.data_available) == ("Stopped", False, False)


class Keeping(Listener):
    """A listener whose views keep every report's builder, input rows and durations (as the bus's progress log does),
    resting every third report."""

    def __init__(self) -> None:
        super().__init__(wants=False)
        self.items: list[tuple[Any, int, Mapping[str, int]]] = []
        self.kept = self.items
        self.left = 3
        self.rests: list[int] = []  # how many reports were kept at each rest

    def progress_keeper(self) -> Keeping:
        return self

    def rest(self) -> None:
        self.rests.append(len(self.items))
        self.left = 3


@pytest.mark.anyio
async def test_a_kept_report_counts_the_rows_of_the_query_s_inputs_as_the_built_report_does() -> None:
    """The rows kept beside a report are its num_input_rows: one input, several inputs (one with no info for the batch, one
    that is not the query's), and inputs that change between runs."""
    listener = Keeping()
    progress = reporter(listener)
    infos = {0: StreamInputInfo(0, 2), 1: StreamInputInfo(1, 5), 7: StreamInputInfo(7, 100)}
    runs = [[ReplayableInput(0, "a")], [ReplayableInput(0, "a"), ReplayableInput(1, "b"), ReplayableInput(3, "c")],
            [ReplayableInput(3, "c")], [ReplayableInput(1, "b")]]
    for inputs in runs:
        for _ in range(2):
            batch = PlannedBatch(4, Time(5000), ("1",) * len(inputs), ("3",) * len(inputs), ("3",) * len(inputs), 4000,
                                 3000, 1, True, False)
            job_set = JobSet(Time(5000), [Job(Time(5000), lambda: None, name="out")], Time(4000), infos)
            await progress.report_batch(batch, job_set, 5000, inputs, QUERY, RUN, False)
    assert [rows for _, rows, _ in listener.kept] == [2, 2, 7, 7, 0, 0, 5, 5]
    assert [build().num_input_rows for build, _, _ in listener.kept] == [2, 2, 7, 7, 0, 0, 5, 5]
    assert listener.rests == [3, 6]  # the reporter counts the keeper's left down and lets it rest at 0
