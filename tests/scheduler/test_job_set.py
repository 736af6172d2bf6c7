"""JobSet: a batch's jobs ending, counted once each."""

from __future__ import annotations

import gc

from scheduler import Job, JobSet, Time


def _job() -> Job:
    return Job(Time(1000), lambda: None)


def test_ending_the_same_job_twice_does_not_complete_the_batch() -> None:
    """A job's end counts once: the batch completes when its last other job ends, at that job's end time."""
    first, second = _job(), _job()
    job_set = JobSet(Time(1000), [first, second], Time(1000))
    assert job_set.handle_job_completion(first, Time(1010)) is False
    assert job_set.handle_job_completion(first, Time(1020)) is False
    assert not job_set.has_completed and job_set.processing_end is None
    assert job_set.handle_job_completion(second, Time(1030)) is True
    assert job_set.has_completed and job_set.processing_end == Time(1030)
    assert repr(job_set) == "<JobSet 1000 ms [jobs: 2/2 done]>"


def test_a_batch_without_jobs_is_complete_from_the_start() -> None:
    """A JobSet of no jobs has completed before anything ends."""
    assert JobSet(Time(1000), [], Time(1000)).has_completed


def test_a_completed_job_set_holds_no_set_of_pending_jobs() -> None:
    """What a JobSet keeps besides its values is its jobs' tuple: no container of the pending jobs the collector would track."""
    job = _job()
    job_set = JobSet(Time(1000), [job], Time(1000))
    job_set.handle_job_start(job, Time(1000))
    job_set.handle_job_completion(job, Time(1005))
    containers = [obj for obj in gc.get_referents(job_set) if isinstance(obj, (set, frozenset, list, dict)) and gc.is_tracked(obj)]
    assert containers == []
