"""BatchInfo, OutputOperationInfo and ReceiverInfo: frozen snapshots carried by listener events.

The counterparts of Spark's ``BatchInfo``, ``OutputOperationInfo`` and ``ReceiverInfo``. Each is
a value taken at the moment its event was posted; later changes to the batch never show through.
"""

from __future__ import annotations

from typing import Mapping

import attrs

from scheduler import Duration, Job, JobSet, StreamInputInfo, Time

__all__ = ["BatchInfo", "BatchRecord", "OutputOperationInfo", "ReceiverInfo"]


# Frozen records with a __dict__ rather than slots: attrs builds a slotted frozen instance with one
# object.__setattr__ call per field, a dict one with plain item stores, and the bus builds one
# BatchInfo (and an OutputOperationInfo per output operation) for every completed batch.
@attrs.frozen(slots=False)
class OutputOperationInfo:
    """One output operation of one batch: its identity, timing and failure."""

    batch_time: Time
    id: int
    name: str
    description: str
    start_time: Time | None
    end_time: Time | None
    failure_reason: str | None

    @classmethod
    def from_job(cls, job: Job) -> OutputOperationInfo:
        """Snapshot ``job`` as it is now."""
        # failure_reason formats a traceback; only a failed job has one to format.
        reason = None if job.failure is None else job.failure_reason
        return cls(job.time, job.output_op_id, job.name, job.description, job.start_time, job.end_time, reason)

    @property
    def duration(self) -> Duration | None:
        """End minus start, once both are known."""
        if self.start_time is None or self.end_time is None:
            return None
        return self.end_time.since(self.start_time)


@attrs.frozen(slots=False)
class BatchInfo:
    """One batch: its input, timing and output operations (Spark's ``BatchInfo``).

    Delays, as in Spark: scheduling = processing start - submission; processing = processing end
    - processing start; total = processing end - submission. Each is ``None`` until known.
    """

    batch_time: Time
    stream_id_to_input_info: Mapping[int, StreamInputInfo]
    submission_time: Time
    processing_start_time: Time | None
    processing_end_time: Time | None
    output_operation_infos: Mapping[int, OutputOperationInfo]

    @classmethod
    def from_job_set(cls, job_set: JobSet) -> BatchInfo:
        """Snapshot ``job_set`` as it is now."""
        # One OutputOperationInfo.from_job per job, keyed by its id, built here: a JobSet numbers
        # its jobs 0, 1, ... in order, so the id is the position (no checked property to ask),
        # and this runs for every completed batch.
        operations = {}
        for n, job in enumerate(job_set.jobs):
            # failure_reason formats a traceback; only a failed job has one to format.
            reason = None if job.failure is None else job.failure_reason
            operations[n] = OutputOperationInfo(job.time, n, job.name, job.description, job.start_time, job.end_time, reason)
        return cls(
            job_set.time,
            dict(job_set.input_infos),  # a copy: the snapshot must not see later changes
            job_set.submission_time,
            job_set.processing_start,
            job_set.processing_end,
            operations,
        )

    @property
    def scheduling_delay(self) -> Duration | None:
        """How long the batch waited for its first job to start."""
        if self.processing_start_time is None:
            return None
        return self.processing_start_time.since(self.submission_time)

    @property
    def processing_delay(self) -> Duration | None:
        """How long the batch's jobs took, first start to last end."""
        if self.processing_start_time is None or self.processing_end_time is None:
            return None
        return self.processing_end_time.since(self.processing_start_time)

    @property
    def total_delay(self) -> Duration | None:
        """Scheduling plus processing delay."""
        if self.processing_end_time is None or self.processing_start_time is None:
            return None
        return self.processing_end_time.since(self.submission_time)

    @property
    def num_records(self) -> int:
        """Records received by all input streams for this batch."""
        # A loop, not sum() over a generator: the web UI asks once per completed batch.
        total = 0
        for info in self.stream_id_to_input_info.values():
            total += info.num_records
        return total

    @property
    def failed(self) -> bool:
        """Whether any output operation of the batch failed."""
        for op in self.output_operation_infos.values():
            if op.failure_reason is not None:
                return True
        return False


def _ms(time: Time | None) -> int | None:
    return None if time is None else time.milliseconds


def _time(ms: int | None) -> Time | None:
    return None if ms is None else Time(ms)


_Operation = tuple[str, str, int | None, int | None, str | None]


class BatchRecord:
    """A completed batch's values, taken when it completed: what its :class:`BatchInfo` is built from, when read.

    Plain values only: times as milliseconds (``batch_time_ms``, ``submission_ms``,
    ``processing_start_ms``, ``processing_end_ms``; ``None`` when not reached), the input infos
    copied (``stream_id_to_input_info``), one tuple per output operation (name, description, start
    ms, end ms, failure reason), and the two totals every view of a completed batch wants, counted
    once here: ``num_records`` and ``failures`` (output operations that failed). Not the ``JobSet``:
    its jobs' closures hold RDDs. Taking one costs a few tuples of ints and strings (which the
    garbage collector stops tracking) where a ``BatchInfo`` costs a record per output operation; a
    ``BatchCompleted`` carries one and builds its ``batch_info`` from it the first time a listener
    reads it.
    """

    __slots__ = ("batch_time_ms", "failures", "num_records", "operations", "processing_end_ms", "processing_start_ms",
                 "stream_id_to_input_info", "submission_ms")

    def __init__(self, job_set: JobSet) -> None:
        """Take ``job_set``'s values now."""
        self.batch_time_ms: int = job_set.time.milliseconds
        self.stream_id_to_input_info = inputs = dict(job_set.input_infos)  # a copy: later changes must not show
        self.submission_ms: int = job_set.submission_time.milliseconds
        start, end = job_set.processing_start, job_set.processing_end
        self.processing_start_ms = None if start is None else start.milliseconds
        self.processing_end_ms = None if end is None else end.milliseconds
        operations: list[_Operation] = []
        failures = 0
        for job in job_set.jobs:
            start, end = job.start_time, job.end_time
            if job.failure is None:
                reason = None
            else:  # formats a traceback: only a failed job has one to format
                failures += 1
                reason = job.failure_reason
            operations.append((job.name, job.description, None if start is None else start.milliseconds,
                               None if end is None else end.milliseconds, reason))
        self.operations: tuple[_Operation, ...] = tuple(operations)
        self.failures = failures
        total = 0
        for info in inputs.values():
            total += info.num_records
        self.num_records = total

    @classmethod
    def of_values(cls, batch_time_ms: int, submission_ms: int, start_ms: int, end_ms: int, name: str, description: str,
                  inputs: Mapping[int, StreamInputInfo] | int | None, records: int = 0) -> BatchRecord:
        """The record of a completed batch whose one output operation, ``name``, ran from ``start_ms`` to ``end_ms`` and succeeded.

        What ``BatchRecord(job_set)`` takes of such a batch, from the values a ``BatchCompleted`` keeps instead of it.
        ``inputs`` is the batch's input infos, the stream id of its one input without metadata (with its
        ``records``), or None for none.
        """
        record = cls.__new__(cls)
        record.batch_time_ms = batch_time_ms
        if isinstance(inputs, int):
            total = records
            record.stream_id_to_input_info = {inputs: StreamInputInfo(inputs, records)}
        elif inputs is None:
            total = 0
            record.stream_id_to_input_info = {}
        else:
            record.stream_id_to_input_info = dict(inputs)
            total = 0
            for info in inputs.values():
                total += info.num_records
        record.submission_ms = submission_ms
        record.processing_start_ms = start_ms
        record.processing_end_ms = end_ms
        record.operations = ((name, description, start_ms, end_ms, None),)
        record.failures = 0
        record.num_records = total
        return record

    @classmethod
    def of_info(cls, info: BatchInfo) -> BatchRecord:
        """The record of an already built ``info`` (an event made from a ``BatchInfo``, e.g. a trace's)."""
        record = cls.__new__(cls)
        record.batch_time_ms = info.batch_time.milliseconds
        record.stream_id_to_input_info = dict(info.stream_id_to_input_info)
        record.submission_ms = info.submission_time.milliseconds
        record.processing_start_ms = _ms(info.processing_start_time)
        record.processing_end_ms = _ms(info.processing_end_time)
        ops = [info.output_operation_infos[n] for n in sorted(info.output_operation_infos)]
        record.operations = tuple((op.name, op.description, _ms(op.start_time), _ms(op.end_time), op.failure_reason)
                                  for op in ops)
        record.failures = sum(1 for op in ops if op.failure_reason is not None)
        record.num_records = info.num_records
        return record

    def batch_info(self) -> BatchInfo:
        """A new :class:`BatchInfo` of these values: equal to the snapshot ``BatchInfo.from_job_set`` took at completion."""
        time = Time(self.batch_time_ms)
        operations = {n: OutputOperationInfo(time, n, name, description, _time(start), _time(end), reason)
                      for n, (name, description, start, end, reason) in enumerate(self.operations)}
        return BatchInfo(time, dict(self.stream_id_to_input_info), Time(self.submission_ms), _time(self.processing_start_ms),
                         _time(self.processing_end_ms), operations)

    def __repr__(self) -> str:
        return f"<BatchRecord {self.batch_time_ms} ms [{len(self.operations)} output operations, {self.failures} failed]>"


@attrs.frozen
class ReceiverInfo:
    """A receiver's identity and last error (Spark's ``ReceiverInfo``)."""

    stream_id: int
    name: str
    active: bool
    location: str
    executor_id: str
    last_error_message: str = ""
    last_error: str = ""
    last_error_time: Time | None = None
