"""The UI history keeps its completed batches as flat values: every view equals what the delivered batches give."""

from __future__ import annotations

import decimal
import gc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from listeners import (
    BatchCompleted,
    BatchInfo,
    BatchLog,
    OutputOperationInfo,
    ReceiverInfo,
    ReceiverStarted,
    completed_batch,
)
from listeners._batch_log import READER_BATCH
from scheduler import Job, JobSet, ManualClock, Seconds, StreamInputInfo, Time
from streaming import StreamingRuntime
from streaming.ui import ContextHistory, StreamingUI
from streaming.ui._history import batch_json
from tests.streaming.ui.test_metrics import pipeline
from tests.streaming.ui.test_ui import run_batches

INTERVAL = 1000


def expected_statistics(infos: list[BatchInfo]) -> dict[str, Any]:
    """The averages the statistics view gives, computed from the delivered BatchInfos."""

    def avg(values: list[int]) -> int | None:  # Spark's avgTime: a Long, the division toward zero
        return None if not values else int(decimal.Decimal(sum(values)) / len(values))

    def delays(which: str) -> list[int]:
        return [d.milliseconds for info in infos if (d := getattr(info, which)) is not None]

    return {"numRetainedCompletedBatches": len(infos),
            "avgInputRate": sum(info.num_records * 1000 / INTERVAL for info in infos) / len(infos) if infos else None,
            "avgSchedulingDelay": avg(delays("scheduling_delay")), "avgProcessingTime": avg(delays("processing_delay")),
            "avgTotalDelay": avg(delays("total_delay"))}


def check_views(history: ContextHistory, kept: list[BatchInfo], total: int) -> None:
    """Every view of ``history`` equals what ``kept`` (the last retained batches, oldest first) give; ``total`` were added."""
    first_seq = total - len(kept) + 1
    assert history.completed() == list(enumerate(kept, first_seq))
    newest_completed_first = [batch_json(info, "COMPLETED", seq, INTERVAL) for seq, info in enumerate(kept, first_seq)][::-1]
    rows = sorted(newest_completed_first, key=lambda row: -row["batchId"])  # by batch time (Spark's -batchId), stable
    assert history.batches() == rows
    for since in (0, first_seq, total - 1, total):
        assert history.batches(since=since) == [row for row in rows if row["seq"] > since]
    stats = history.statistics()
    assert {k: stats[k] for k in expected_statistics(kept)} == expected_statistics(kept)
    newest = {info.batch_time.milliseconds: (seq, info) for seq, info in enumerate(kept, first_seq)}  # a page finds the newest
    for batch_id, (seq, info) in newest.items():
        assert history.batch(batch_id) == (batch_json(info, "COMPLETED", seq, INTERVAL), info)
    receivers = {r["streamId"]: r["eventRates"] for r in history.receivers()}
    assert receivers == {sid: [[info.batch_time.milliseconds, info.stream_id_to_input_info[sid].num_records * 1000 / INTERVAL]
                               for info in kept if sid in info.stream_id_to_input_info] for sid in receivers}


times = st.one_of(st.none(), st.integers(0, 10**6), st.integers(-(2**70), 2**70))
operations = st.lists(st.tuples(st.sampled_from(["out", "print"]), st.sampled_from(["", "out at app.py:3"]), times, times,
                                st.one_of(st.none(), st.sampled_from(["", "RuntimeError: boom", "Traceback ...\nKeyError: 'k'"]))),
                      max_size=3)
inputs = st.dictionaries(st.integers(0, 3), st.tuples(st.integers(0, 10**12), st.sampled_from([{}, {"Description": "offsets 1-2"}])),
                         max_size=3)


@st.composite
def batch_infos(draw: Any, n: int) -> BatchInfo:
    time = Time(draw(st.integers(0, 2**45)) if draw(st.booleans()) else n * INTERVAL)  # within the pages' dates
    ops = {k: OutputOperationInfo(time, k, name, description, None if start is None else Time(start),
                                  None if end is None else Time(end), reason)
           for k, (name, description, start, end, reason) in enumerate(draw(operations))}
    infos = {sid: StreamInputInfo(sid, records, metadata) for sid, (records, metadata) in draw(inputs).items()}
    started, ended = draw(times), draw(times)
    return BatchInfo(time, infos, Time(draw(st.integers(-(2**70), 2**70))), None if started is None else Time(started),
                     None if ended is None else Time(ended), ops)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(1, 6))
def test_batches_of_any_shape_fed_as_events_read_back_as_delivered(data: Any, retained: int) -> None:
    """Inputs with metadata or not, any number of outputs, failures, missing times and times past 64 bits: kept, read back equal."""
    history = ContextHistory("fed", batch_interval_ms=INTERVAL, retained_batches=retained)
    history.feed([ReceiverStarted(ReceiverInfo(sid, f"in-{sid}", True, "here", "driver")) for sid in range(4)])
    infos = [data.draw(batch_infos(n)) for n in range(data.draw(st.integers(0, 2 * retained + 1)))]
    history.feed([BatchCompleted(info) for info in infos])
    check_views(history, infos[len(infos) - min(retained, len(infos)):], len(infos))
    assert history.completed_batches == len(infos) and history.failed_batches == sum(info.failed for info in infos)
    assert history.records == sum(info.num_records for info in infos)


def job_set(n: int, jobs: int, inputs: dict[int, StreamInputInfo], *, fail: bool = False, started: bool = True,
            name: str = "out") -> JobSet:
    """Batch ``n`` with ``jobs`` jobs, completed (the first job failed if ``fail``; none started unless ``started``)."""
    time = Time(n * INTERVAL)
    batch = JobSet(time, [Job(time, lambda: None, name=f"{name}-{k}", description=f"{name}-{k} at app.py") for k in range(jobs)],
                   Time(n * INTERVAL + 1), inputs)
    for k, job in enumerate(batch.jobs):
        if started:
            batch.handle_job_start(job, Time(n * INTERVAL + 2 + k))
            if fail and k == 0:
                job.failure = RuntimeError("output failed")
            batch.handle_job_completion(job, Time(n * INTERVAL + 5 + k * n))
    return batch


def started_later(batch: JobSet) -> JobSet:
    """``batch`` with its first job's start moved 1 ms after the batch's processing start."""
    batch.jobs[0].start_time = Time(batch.processing_start.milliseconds + 1)  # type: ignore[union-attr]
    return batch


SHAPES = [
    lambda n: job_set(n, 1, {0: StreamInputInfo(0, n)}),  # the common batch
    lambda n: job_set(n, 1, {}),
    lambda n: job_set(n, 1, {1: StreamInputInfo(1, n)}),  # another input
    lambda n: job_set(n, 1, {1: StreamInputInfo(1, n)}, name="other"),  # another output operation
    lambda n: job_set(n, 1, {1: StreamInputInfo(1, n, {"Description": f"offsets {n}"})}, name="other"),  # metadata
    lambda n: job_set(n, 1, {1: StreamInputInfo(1, n), 2: StreamInputInfo(2, 1)}, name="other"),  # two inputs
    lambda n: job_set(n, 1, {1: StreamInputInfo(1, n)}, name="other"),
    lambda n: started_later(job_set(n, 1, {1: StreamInputInfo(1, n)}, name="other")),  # its operation's times not the batch's
    lambda n: job_set(n, 1, {2: StreamInputInfo(2, n, {"Description": f"offsets {n}"})}),
    lambda n: job_set(n, 3, {0: StreamInputInfo(0, n), 1: StreamInputInfo(1, 2 * n)}),
    lambda n: job_set(n, 2, {0: StreamInputInfo(0, n)}, fail=True),
    lambda n: job_set(n, 1, {0: StreamInputInfo(0, n)}, fail=True),
    lambda n: job_set(n, 1, {3: StreamInputInfo(3, 7)}, started=False),
]


@pytest.mark.parametrize("retained", [1, 4, 130])
def test_batches_read_from_a_batch_log_read_back_as_their_snapshots(retained: int) -> None:
    """JobSets of every shape through a bus's batch log, across the log's and the history's wraps: views equal their snapshots."""
    log = BatchLog()
    history = ContextHistory("logged", batch_interval_ms=INTERVAL, retained_batches=retained, batch_log=log)
    history.feed([ReceiverStarted(ReceiverInfo(sid, f"in-{sid}", True, "here", "driver")) for sid in range(4)])
    snapshots = []
    for n in range(1, 400):
        batch = SHAPES[(n // 3) % len(SHAPES)](n)  # runs of one shape, then the next
        snapshots.append(BatchInfo.from_job_set(batch))
        log.append(completed_batch(batch))
        if n % 97 == 0:
            check_views(history, snapshots[-retained:], n)
    check_views(history, snapshots[-retained:], len(snapshots))
    assert history.failed_batches == sum(info.failed for info in snapshots)
    assert history.records == sum(info.num_records for info in snapshots)


@pytest.mark.anyio
async def test_the_ui_keeps_its_retained_batches_as_values_not_the_batches(clock: ManualClock) -> None:
    """With 1,000 retained and 400 run, the pages show all 400 while only the batch log's last run of JobSets is alive."""
    ui = StreamingUI(metrics=False)
    async with StreamingRuntime(pipeline([1, 2, 3] * 134), Seconds(1), clock=clock, name="kept") as runtime:
        history = ui.attach(runtime)
        await run_batches(runtime, clock, 400)
        shown = history.batches()
        gc.collect()
        alive = sum(1 for obj in gc.get_objects() if type(obj) is JobSet)
        await runtime.stop()
    assert [r["batchId"] for r in shown] == [n * 1000 for n in range(400, 0, -1)]
    assert [r["inputSize"] for r in shown[::-1]] == [1, 2, 3] * 133 + [1]
    assert alive <= READER_BATCH + 2  # the log's run of batches (and any still running), not the 400 shown


def slow(batch: JobSet, n: int) -> JobSet:
    """``batch`` (one job, completed) with delays past the metrics' first bucket: scheduling ``n`` ms, total ``3 n + 4`` ms."""
    job = batch.jobs[0]
    start, end = Time(batch.submission_time.milliseconds + n), Time(batch.submission_time.milliseconds + 3 * n + 4)
    job.start_time, job.end_time = start, end
    batch.processing_start, batch.processing_end = start, end
    return batch


FOLDED_SHAPES = [*SHAPES, lambda n: slow(job_set(n, 1, {0: StreamInputInfo(0, n)}), n % 9),
                 lambda n: slow(job_set(n, 1, {}), 200 * n)]


def metrics_values(state: Any) -> dict[str, Any]:
    """Everything a scrape reads of a metrics state's batches."""
    return {"delays": {kind: (list(h.counts), h.sum_ms) for kind, h in state.delays.items()}, "batches": dict(state.batches),
            "operations": dict(state.output_operations), "records": dict(sorted(state.records.items()))}


@pytest.mark.parametrize("retained", [1, 4, 130])
def test_metrics_folded_in_the_history_pass_equal_their_own_reader_of_the_log(retained: int) -> None:
    """A metrics state folded in the history's one pass over a batch log (``fold_into``, as a StreamingUI attaches its
    metrics) equals one that reads the log itself, at every scrape, across wraps, for batches of every shape and delays."""
    from streaming.ui._metrics import _QueryState

    log = BatchLog()
    history = ContextHistory("logged", batch_interval_ms=INTERVAL, retained_batches=retained, batch_log=log)
    own, shared = _QueryState("own"), _QueryState("shared")
    reader = log.reader(own.fold_batches, numbered=False)
    assert history.fold_into(shared)
    snapshots = []
    for n in range(1, 400):
        batch = FOLDED_SHAPES[(n // 3) % len(FOLDED_SHAPES)](n)
        snapshots.append(BatchInfo.from_job_set(batch))
        log.append(completed_batch(batch))
        if n % 61 == 0:  # a scrape: each view folds what is new first
            history.catch_up()
            log.catch_up(reader)
            assert metrics_values(shared) == metrics_values(own)
    history.catch_up()
    log.catch_up(reader)
    assert metrics_values(shared) == metrics_values(own)
    assert shared.processing.counts[1:] != [0] * len(shared.processing.counts[1:])  # delays past the first bucket folded
    check_views(history, snapshots[-retained:], len(snapshots))


def test_a_history_folds_into_one_metrics_state_and_only_with_a_batch_log() -> None:
    """``fold_into`` takes one fold, and answers ``False`` for a history fed by events (no batch log)."""
    from streaming.ui._metrics import _QueryState

    history = ContextHistory("logged", batch_log=BatchLog())
    assert history.fold_into(_QueryState("a"))
    with pytest.raises(ValueError, match="the history of 'logged' already folds its batches into"):
        history.fold_into(_QueryState("b"))
    assert not ContextHistory("fed").fold_into(_QueryState("c"))
