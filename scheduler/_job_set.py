"""JobSet: the jobs of one batch and its timing (Spark's ``JobSet``)."""

from __future__ import annotations

from typing import Mapping, Sequence

from ._input_info import StreamInputInfo
from ._job import Job
from ._time import Duration, Time

__all__ = ["JobSet"]


class JobSet:
    """The jobs generated for one batch time, with submission, start and end times.

    Unlike Spark, every time here comes from the one injected clock (Spark mixes the wall clock
    and the streaming clock), so delays are exact under a manual or virtual clock.
    """

    __slots__ = ("_remaining", "input_infos", "jobs", "processing_end", "processing_start", "submission_time", "time")

    def __init__(
        self,
        time: Time,
        jobs: Sequence[Job],
        submission_time: Time,
        input_infos: Mapping[int, StreamInputInfo] | None = None,
    ) -> None:
        """Group ``jobs`` for batch ``time``, numbering them 0..n-1 in order."""
        self.time = time
        self.jobs = tuple(jobs)
        for n, job in enumerate(self.jobs):
            job.set_output_op_id(n)  # raises if the job already belongs to a JobSet
        self.input_infos: Mapping[int, StreamInputInfo] = input_infos or {}
        self.submission_time = submission_time
        self.processing_start: Time | None = None
        self.processing_end: Time | None = None
        # How many jobs have not ended: a count, not a set of them (a completed batch kept by a log
        # or a view holds no empty set, one object fewer for the garbage collector).
        self._remaining = len(self.jobs)

    def handle_job_start(self, job: Job, now: Time) -> bool:
        """Record that ``job`` started; True if it is the batch's first job to start."""
        first = self.processing_start is None
        if first:
            self.processing_start = now
        job.start_time = now
        return first

    def handle_job_completion(self, job: Job, now: Time) -> bool:
        """Record that ``job`` (one of this batch's) ended; True if it was the batch's last job.

        A job already ended does not count again.
        """
        if job.end_time is None:
            self._remaining -= 1
        job.end_time = now
        if not self._remaining:
            self.processing_end = now
            return True
        return False

    @property
    def has_started(self) -> bool:
        """Whether any job of the batch has started."""
        return self.processing_start is not None

    @property
    def has_completed(self) -> bool:
        """Whether every job of the batch has ended."""
        return not self._remaining

    @property
    def failed(self) -> bool:
        """Whether any job of the batch failed."""
        # A loop, not any() over a generator: asked twice per batch, and jobs rarely fail.
        for job in self.jobs:
            if job.failure is not None:
                return True
        return False

    @property
    def num_records(self) -> int:
        """Records reported by all input streams for this batch."""
        total = 0
        for info in self.input_infos.values():
            total += info.num_records
        return total

    @property
    def scheduling_delay(self) -> Duration | None:
        """Processing start minus submission."""
        if self.processing_start is None:
            return None
        return self.processing_start.since(self.submission_time)

    @property
    def processing_delay(self) -> Duration | None:
        """Processing end minus processing start."""
        if self.processing_start is None or self.processing_end is None:
            return None
        return self.processing_end.since(self.processing_start)

    @property
    def total_delay(self) -> Duration | None:
        """Processing end minus submission (BatchInfo's total delay)."""
        if self.processing_end is None:
            return None
        return self.processing_end.since(self.submission_time)

    def __repr__(self) -> str:
        done = len(self.jobs) - self._remaining
        return f"<JobSet {self.time} [jobs: {done}/{len(self.jobs)} done{' | failed' if self.failed else ''}]>"
