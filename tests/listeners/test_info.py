"""BatchInfo and OutputOperationInfo (snapshots of a JobSet, Spark's delays, record counts); BatchRecord and its lazy BatchCompleted."""

from __future__ import annotations

import copy
import threading

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from listeners import BatchCompleted, BatchInfo, BatchRecord, OutputOperationInfo, ReceiverInfo
from scheduler import Job, JobSet, Milliseconds, StreamInputInfo, Time


def noop() -> None:
    """A job body that does nothing."""


def make_job_set(
    n_jobs: int = 2, *, time: int = 1000, submitted: int = 1100, infos: dict[int, StreamInputInfo] | None = None
) -> JobSet:
    jobs = [Job(Time(time), noop, name=f"foreachRDD at app.py:{10 + n}", description=f"op {n} long form") for n in range(n_jobs)]
    return JobSet(Time(time), jobs, Time(submitted), infos)


def test_a_submitted_batch_has_no_processing_times_and_no_delays() -> None:
    """At submission: start, end and every delay are None; each output op is listed by id with no times."""
    info = BatchInfo.from_job_set(make_job_set())
    assert info.batch_time == Time(1000)
    assert info.submission_time == Time(1100)
    assert info.processing_start_time is None and info.processing_end_time is None
    assert info.scheduling_delay is None and info.processing_delay is None and info.total_delay is None
    assert info.failed is False
    assert info.output_operation_infos == {
        0: OutputOperationInfo(Time(1000), 0, "foreachRDD at app.py:10", "op 0 long form", None, None, None),
        1: OutputOperationInfo(Time(1000), 1, "foreachRDD at app.py:11", "op 1 long form", None, None, None),
    }


def test_a_started_batch_has_a_scheduling_delay_only() -> None:
    """Once the first job starts: scheduling delay = start - submission; processing and total stay None."""
    job_set = make_job_set()
    job_set.handle_job_start(job_set.jobs[0], Time(1250))
    info = BatchInfo.from_job_set(job_set)
    assert info.processing_start_time == Time(1250)
    assert info.scheduling_delay == Milliseconds(150)
    assert info.processing_delay is None and info.total_delay is None
    assert info.output_operation_infos[0].start_time == Time(1250)
    assert info.output_operation_infos[1].start_time is None


def test_a_completed_batch_has_all_three_delays() -> None:
    """After the last job ends: processing = end - start and total = end - submission = scheduling + processing."""
    job_set = make_job_set()
    first, second = job_set.jobs
    job_set.handle_job_start(first, Time(1250))
    job_set.handle_job_completion(first, Time(1300))
    job_set.handle_job_start(second, Time(1300))
    job_set.handle_job_completion(second, Time(1420))
    info = BatchInfo.from_job_set(job_set)
    assert info.processing_end_time == Time(1420)
    assert info.scheduling_delay == Milliseconds(150)
    assert info.processing_delay == Milliseconds(170)
    assert info.total_delay == Milliseconds(320)
    assert info.output_operation_infos[1].duration == Milliseconds(120)


@given(
    submitted=st.integers(-(10**12), 10**12),
    waited=st.integers(0, 10**9),
    took=st.integers(0, 10**9),
)
def test_delay_arithmetic_for_any_times(submitted: int, waited: int, took: int) -> None:
    """For any submission <= start <= end, the delays are the differences and total = scheduling + processing."""
    job_set = make_job_set(1, submitted=submitted)
    (job,) = job_set.jobs
    job_set.handle_job_start(job, Time(submitted + waited))
    started = BatchInfo.from_job_set(job_set)
    job_set.handle_job_completion(job, Time(submitted + waited + took))
    done = BatchInfo.from_job_set(job_set)
    assert started.scheduling_delay == Milliseconds(waited)
    assert started.processing_delay is None and started.total_delay is None
    assert done.scheduling_delay == Milliseconds(waited)
    assert done.processing_delay == Milliseconds(took)
    assert done.total_delay == Milliseconds(waited + took)
    assert done.total_delay == done.scheduling_delay + done.processing_delay
    # The JobSet's own delays agree with the snapshot's.
    assert (job_set.scheduling_delay, job_set.processing_delay, job_set.total_delay) == (
        done.scheduling_delay,
        done.processing_delay,
        done.total_delay,
    )


def test_num_records_sums_every_input_stream() -> None:
    """num_records is the sum over the batch's input infos, 0 when no stream reported."""
    assert BatchInfo.from_job_set(make_job_set()).num_records == 0
    infos = {0: StreamInputInfo(0, 5), 3: StreamInputInfo(3, 0), 7: StreamInputInfo(7, 12, {"Description": "files"})}
    info = BatchInfo.from_job_set(make_job_set(infos=infos))
    assert info.num_records == 17
    assert info.stream_id_to_input_info == infos


def test_a_snapshot_does_not_change_when_the_batch_moves_on() -> None:
    """A BatchInfo taken at submission keeps its values after jobs start, end and fail, and after the input map changes."""
    infos = {0: StreamInputInfo(0, 4)}
    job_set = make_job_set(infos=infos)
    submitted = BatchInfo.from_job_set(job_set)
    before = copy.deepcopy(submitted)
    first, second = job_set.jobs
    job_set.handle_job_start(first, Time(1200))
    first.failure = ValueError("boom")
    job_set.handle_job_completion(first, Time(1300))
    job_set.handle_job_start(second, Time(1300))
    job_set.handle_job_completion(second, Time(1400))
    infos[1] = StreamInputInfo(1, 100)
    assert submitted == before
    assert submitted.processing_start_time is None and submitted.processing_end_time is None
    assert submitted.output_operation_infos[0].failure_reason is None
    assert submitted.num_records == 4 and list(submitted.stream_id_to_input_info) == [0]
    assert not submitted.failed


def test_snapshots_of_the_same_state_are_equal_values() -> None:
    """Two snapshots of an unchanged JobSet compare equal."""
    job_set = make_job_set()
    assert BatchInfo.from_job_set(job_set) == BatchInfo.from_job_set(job_set)


def test_a_failed_output_operation_carries_its_failure_and_marks_the_batch_failed() -> None:
    """failure_reason is the full exception text with traceback; BatchInfo.failed is True."""
    job_set = make_job_set()
    first = job_set.jobs[0]
    try:
        raise ValueError("boom")
    except ValueError as exc:
        first.failure = exc
    for job in job_set.jobs:
        job_set.handle_job_start(job, Time(1200))
        job_set.handle_job_completion(job, Time(1300))
    info = BatchInfo.from_job_set(job_set)
    reason = info.output_operation_infos[0].failure_reason
    assert reason is not None
    assert reason.startswith("Traceback (most recent call last):")
    assert reason.endswith("ValueError: boom")
    assert info.output_operation_infos[1].failure_reason is None
    assert info.failed


def test_output_operation_info_duration_needs_both_ends() -> None:
    """duration is end - start, None until both are known."""
    (job,) = make_job_set(1).jobs
    assert OutputOperationInfo.from_job(job).duration is None
    job.start_time = Time(1200)
    assert OutputOperationInfo.from_job(job).duration is None
    job.end_time = Time(1450)
    op = OutputOperationInfo.from_job(job)
    assert op.duration == Milliseconds(250)
    assert (op.batch_time, op.id, op.name) == (Time(1000), 0, "foreachRDD at app.py:10")


def test_receiver_info_defaults_mean_no_error_yet() -> None:
    """A ReceiverInfo without an error has empty error texts and no error time."""
    info = ReceiverInfo(3, "socket", True, "host-1", "executor-0")
    assert (info.last_error_message, info.last_error, info.last_error_time) == ("", "", None)


def test_info_records_are_frozen() -> None:
    """BatchInfo, OutputOperationInfo and ReceiverInfo cannot be modified."""
    info = BatchInfo.from_job_set(make_job_set())
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        info.submission_time = Time(0)  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        info.output_operation_infos[0].end_time = Time(0)  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ReceiverInfo(0, "r", True, "h", "e").active = False  # type: ignore[misc]


def completed_job_set(*, fail_first: bool) -> JobSet:
    """A two-job batch with two inputs, both jobs ended, the first failed if asked."""
    job_set = make_job_set(infos={0: StreamInputInfo(0, 5), 3: StreamInputInfo(3, 12)})
    first, second = job_set.jobs
    if fail_first:
        try:
            raise ValueError("boom")
        except ValueError as exc:
            first.failure = exc
    job_set.handle_job_start(first, Time(1200))
    job_set.handle_job_completion(first, Time(1300))
    job_set.handle_job_start(second, Time(1300))
    job_set.handle_job_completion(second, Time(1450))
    return job_set


@pytest.mark.parametrize("fail_first", [False, True])
def test_an_event_of_a_record_reads_the_batch_info_an_eager_snapshot_gives(fail_first: bool) -> None:
    """BatchCompleted.of_record's batch_info, equality, repr and asdict equal those of the event of BatchInfo.from_job_set at completion."""
    job_set = completed_job_set(fail_first=fail_first)
    eager = BatchCompleted(BatchInfo.from_job_set(job_set))
    lazy = BatchCompleted.of_record(BatchRecord(job_set))
    job_set.input_infos[9] = StreamInputInfo(9, 1000)  # later changes never show through
    job_set.jobs[1].failure = RuntimeError("later")
    assert lazy.batch_info == eager.batch_info
    assert lazy == eager and eager == lazy
    assert repr(lazy) == repr(eager)
    assert attrs.asdict(lazy) == attrs.asdict(eager)
    assert lazy.batch_info.failed is fail_first


def test_a_record_counts_records_and_failures_and_keeps_every_operation() -> None:
    """BatchRecord's totals and operations, the same taken from the JobSet and from an eager BatchInfo of it."""
    job_set = completed_job_set(fail_first=True)
    record = BatchRecord(job_set)
    reason = job_set.jobs[0].failure_reason
    assert (record.num_records, record.failures) == (17, 1)
    assert record.operations == (
        ("foreachRDD at app.py:10", "op 0 long form", 1200, 1300, reason),
        ("foreachRDD at app.py:11", "op 1 long form", 1300, 1450, None),
    )
    assert (record.batch_time_ms, record.submission_ms, record.processing_start_ms, record.processing_end_ms) == (
        1000, 1100, 1200, 1450)
    of_info = BatchRecord.of_info(BatchInfo.from_job_set(job_set))
    fields = ("batch_time_ms", "stream_id_to_input_info", "submission_ms", "processing_start_ms", "processing_end_ms",
              "operations", "failures", "num_records")
    assert [getattr(of_info, f) for f in fields] == [getattr(record, f) for f in fields]
    assert BatchCompleted(BatchInfo.from_job_set(job_set)).record.operations == record.operations


def test_an_event_builds_its_batch_info_once_and_only_when_read(built_batch_infos: list[BatchInfo]) -> None:
    """No BatchInfo is built until batch_info is read; every later read gives the same object, built once."""
    built = built_batch_infos
    event = BatchCompleted.of_record(BatchRecord(completed_job_set(fail_first=False)))
    assert event.record.num_records == 17 and built == []
    first = event.batch_info
    assert event.batch_info is first and built == [first]
    assert event == BatchCompleted(first) and len(built) == 1


def test_threads_reading_an_event_at_once_get_one_batch_info() -> None:
    """Eight threads released together on a fresh event all read the very same BatchInfo object."""
    event = BatchCompleted.of_record(BatchRecord(completed_job_set(fail_first=False)))
    barrier = threading.Barrier(8)
    seen: list[BatchInfo] = []

    def read() -> None:
        barrier.wait()
        seen.append(event.batch_info)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and all(info is event.batch_info for info in seen)
