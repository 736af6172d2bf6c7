"""The UI history's kept completed batches: flat values in one preallocated ring, read back as rows when a page asks.

What Spark's ``StreamingJobProgressListener`` keeps of its retained batches (``BatchUIData``),
kept without an object per batch (see :class:`FlatBatches`).
"""

from __future__ import annotations

import datetime
import struct
from typing import Any, Mapping, NamedTuple, Sequence

from listeners import BatchInfo, BatchRecord, OutputOperationInfo
from scheduler import JobSet, StreamInputInfo, Time

from ._failures import headline

__all__ = ["FlatBatches", "KeptBatch", "iso_date"]


def iso_date(ms: int | None) -> str | None:
    """``ms`` in Spark's REST date format (``2016-12-14T18:45:24.873GMT``)."""
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "GMT"


def _time(ms: int | None) -> Time | None:
    return None if ms is None else Time(ms)


_Operation = tuple[str, str, "int | None", "int | None", "str | None"]
"""An output operation of a kept batch: ``(name, description, start ms, end ms, failure reason)``."""

_Shape = tuple[tuple[int, ...], tuple[tuple[str, str], ...]]
"""What consecutive batches of one program share: the input stream ids, and each output operation's name and description."""


class KeptBatch(NamedTuple):
    """A kept completed batch's values, as a view reads them: built when a page asks, never kept."""

    seq: int
    time: int
    inputs: dict[int, StreamInputInfo]
    submitted: int
    started: int | None
    ended: int | None
    operations: tuple[_Operation, ...]
    records: int

    def batch_info(self) -> BatchInfo:
        """A new :class:`BatchInfo` of these values: equal to the one the batch's ``BatchCompleted`` carried."""
        time = Time(self.time)
        operations = {n: OutputOperationInfo(time, n, name, description, _time(start), _time(end), reason)
                      for n, (name, description, start, end, reason) in enumerate(self.operations)}
        return BatchInfo(time, dict(self.inputs), Time(self.submitted), _time(self.started), _time(self.ended), operations)

    def json(self, interval_ms: int | None) -> dict[str, Any]:
        """What :func:`batch_json` gives of :meth:`batch_info` as a completed batch, without building it."""
        started, ended, submitted = self.started, self.ended, self.submitted
        failed = done = active = 0
        first_failure = None
        for _, _, start, end, reason in self.operations:
            if reason is not None:
                if not failed:
                    first_failure = reason
                failed += 1
            if end is not None:
                done += 1
            elif start is not None:
                active += 1
        return {
            "seq": self.seq,
            "batchId": self.time,
            "batchTime": iso_date(self.time),
            "status": "COMPLETED",
            "batchDuration": interval_ms,
            "inputSize": self.records,
            "inputs": {str(sid): info.num_records for sid, info in self.inputs.items()},
            "submissionTimeMs": submitted,
            "processingStartTimeMs": started,
            "processingEndTimeMs": ended,
            "schedulingDelay": None if started is None else started - submitted,
            "processingTime": None if started is None or ended is None else ended - started,
            "totalDelay": None if started is None or ended is None else ended - submitted,
            "numActiveOutputOps": active,
            "numCompletedOutputOps": done - failed,
            "numFailedOutputOps": failed,
            "numTotalOutputOps": len(self.operations),
            "firstFailureReason": headline(first_failure) if first_failure else None,
        }


# Bits of a slot's flags: which of its processing times is None, or that its values are a whole KeptBatch.
_NO_START, _NO_END, _WHOLE = 1, 2, 4

_SLOT = struct.Struct("<6q")
"""One kept batch's fixed values: its time, submission, processing start and end (ms), records and flags."""
_SLOT_BYTES = _SLOT.size

_SHAPES = 256
"""Distinct shapes (:data:`_Shape`) a history shares between its batches; a batch of any further shape keeps its own."""


_UNSET = object()


def _ms_or_none(time: Time | None) -> int | None:
    return None if time is None else time.milliseconds


class FlatBatches:
    """The last ``capacity`` completed batches as flat values: a preallocated buffer of machine ints, one slot per batch.

    Why not the batches themselves: a kept ``JobSet`` (its job, times and input infos) is about
    1.3 KB in a dozen objects, so 1,000 of them outgrow a core's L2 cache, and each new batch then
    frees the one kept 1,000 batches ago, reading its objects back from L3 or memory (about 25
    cache misses a batch, measured by ``bench/bench_ui_memory.py``). Here a batch is 48 bytes of
    ints in one buffer (:data:`_SLOT`: its times, records, flags), a reference to a shape that its
    program's batches share (input ids, output operations' names and descriptions), and, only when
    it has more than one input or output operation, input metadata, a failure, or an operation
    whose times are not the batch's, one tuple of the rest. Nothing is freed per batch, and keeping
    one writes a few cache lines next to those the previous batch wrote. A time beyond a signed
    64-bit int (possible only in a trace) keeps the whole batch as a :class:`KeptBatch`.

    Not thread-safe: the history holds its lock around every call.
    """

    def __init__(self, capacity: int) -> None:
        """Room for ``capacity`` batches."""
        self.capacity = capacity
        self.appended = 0
        self._values = bytearray(_SLOT.size * capacity)
        self._shape: list[_Shape | None] = [None] * capacity
        self._extra: list[Any] = [None] * capacity  # None, (inputs, operations) or a whole KeptBatch
        self._shapes: dict[_Shape, _Shape] = {}
        # The last simple batch's input (None: none), output operation and shape: add_entries
        # compares a batch with them field by field before it builds any tuple.
        self._last_sid: object = _UNSET
        self._last_name = self._last_description = ""
        self._last_shape: _Shape | None = None

    def __len__(self) -> int:
        return min(self.appended, self.capacity)

    def add_entries(self, entries: Sequence[JobSet | BatchRecord]) -> tuple[int, int]:
        """Keep the values of a batch log's items (unnumbered), in order; returns the failed batches and the records among them."""
        # Called for every completed batch, in runs. A batch of the last simple batch's shape (one
        # output operation, its times the batch's; the same input, without metadata, or none) is
        # kept in one inline pass with everything it touches in locals: its five ints packed into
        # its slot and the shared shape referenced. Any other goes through add(), which notes the
        # shape when it is simple, for the batches after it.
        values, shapes, extras, capacity, pack, size = self._values, self._shape, self._extra, self.capacity, _SLOT.pack_into, _SLOT_BYTES
        sid, name, description, shape = self._last_sid, self._last_name, self._last_description, self._last_shape
        appended = self.appended
        slot = appended % capacity
        offset = slot * size
        fast = failed = total = 0
        for batch in entries:
            if type(batch) is JobSet:  # every job succeeded (see listeners.BatchEntry)
                jobs = batch.jobs
                inputs = batch.input_infos
                if len(jobs) == 1:
                    job = jobs[0]
                    start, end = batch.processing_start, batch.processing_end
                    if job.start_time is start and job.end_time is end and job.name == name and job.description == description:
                        if inputs:
                            info = inputs.get(sid)  # type: ignore[call-overload]
                            simple = info is not None and len(inputs) == 1 and not info.metadata
                            records = info.num_records if simple else 0
                        else:
                            simple, records = sid is None, 0
                        if simple:
                            try:
                                pack(values, offset, batch.time.milliseconds, batch.submission_time.milliseconds,
                                     start.milliseconds, end.milliseconds, records, 0)  # type: ignore[union-attr]
                            except (struct.error, AttributeError):  # a time beyond 64 bits, or None: below
                                pass
                            else:
                                shapes[slot] = shape
                                extras[slot] = None
                                fast += 1
                                total += records
                                slot += 1
                                offset += size
                                if slot == capacity:
                                    slot = offset = 0
                                continue
                self.appended = appended + fast
                total += self._add_job_set(batch)
            else:  # a BatchRecord: some job failed
                self.appended = appended + fast
                failed += 1
                total += self.add_record(batch)  # type: ignore[arg-type]
            sid, name, description, shape = self._last_sid, self._last_name, self._last_description, self._last_shape
            appended, fast = self.appended, 0
            slot = appended % capacity
            offset = slot * size
        self.appended = appended + fast
        return failed, total

    def _add_job_set(self, job_set: JobSet) -> int:
        operations = tuple((job.name, job.description, _ms_or_none(job.start_time), _ms_or_none(job.end_time),
                            None if job.failure is None else job.failure_reason) for job in job_set.jobs)
        return self.add(job_set.time.milliseconds, job_set.input_infos, job_set.submission_time.milliseconds,
                        _ms_or_none(job_set.processing_start), _ms_or_none(job_set.processing_end), operations)

    def add_record(self, record: BatchRecord) -> int:
        """Keep a completed batch's record's values; returns its records."""
        return self.add(record.batch_time_ms, record.stream_id_to_input_info, record.submission_ms,
                        record.processing_start_ms, record.processing_end_ms, record.operations)

    def add(self, time: int, inputs: Mapping[int, StreamInputInfo], submitted: int, started: int | None,
            ended: int | None, operations: Sequence[_Operation]) -> int:
        """Keep a completed batch of these values (any number of inputs and operations); returns its records."""
        infos = list(inputs.values())
        records = 0
        plain = len(infos) <= 1
        for info in infos:
            records += info.num_records
            if info.metadata:
                plain = False
        kept_inputs = None if plain else tuple(info if info.metadata else info.num_records for info in infos)
        kept_operations = None
        if len(operations) != 1 or operations[0][2:] != (started, ended, None):
            kept_operations = tuple((start, end, reason) for _, _, start, end, reason in operations)
        shape = self._share((tuple(inputs), tuple((name, description) for name, description, *_ in operations)))
        flags = (_NO_START if started is None else 0) | (_NO_END if ended is None else 0)
        i = self.appended % self.capacity
        self.appended += 1
        try:
            _SLOT.pack_into(self._values, i * _SLOT_BYTES, time, submitted, started or 0, ended or 0, records, flags)
        except struct.error:  # a time beyond a 64-bit int (a trace's): kept whole
            _SLOT.pack_into(self._values, i * _SLOT_BYTES, 0, 0, 0, 0, 0, _WHOLE)
            self._extra[i] = KeptBatch(0, time, dict(inputs), submitted, started, ended, tuple(operations), records)
        else:
            if kept_inputs is None and kept_operations is None:
                self._extra[i] = None
                self._last_sid = shape[0][0] if shape[0] else None
                self._last_name, self._last_description = shape[1][0]
                self._last_shape = shape
            else:
                self._extra[i] = (kept_inputs, kept_operations)
        self._shape[i] = shape
        return records

    def _share(self, shape: _Shape) -> _Shape:
        shared = self._shapes.get(shape)
        if shared is not None:
            return shared
        if len(self._shapes) < _SHAPES:
            self._shapes[shape] = shape
        return shape

    def _kept(self, newest: int) -> range:
        """The ``newest`` last batches kept, oldest first, as their count from the first batch (slot: modulo capacity)."""
        return range(self.appended - min(newest, len(self)), self.appended)

    def find(self, time: int) -> KeptBatch | None:
        """The newest kept batch of batch time ``time`` (ms), or ``None``: only its row is built."""
        capacity, values, extras = self.capacity, self._values, self._extra
        for n in reversed(self._kept(capacity)):
            i = n % capacity
            kept, *_, flags = _SLOT.unpack_from(values, i * _SLOT_BYTES)
            if (extras[i].time if flags & _WHOLE else kept) == time:
                return self._row(i, n + 1)
        return None

    def rows(self, newest: int | None = None) -> list[KeptBatch]:
        """The kept batches (the ``newest`` last of them), oldest first, as :class:`KeptBatch` values."""
        capacity = self.capacity
        return [self._row(n % capacity, n + 1) for n in self._kept(capacity if newest is None else newest)]

    def _row(self, i: int, seq: int) -> KeptBatch:
        time, submitted, started, ended, records, flags = _SLOT.unpack_from(self._values, i * _SLOT_BYTES)
        extra = self._extra[i]
        if flags & _WHOLE:
            return KeptBatch(seq, *extra[1:])
        sids, names = self._shape[i]  # type: ignore[misc]
        kept_inputs, kept_operations = (None, None) if extra is None else extra
        if kept_inputs is None:
            inputs = {sids[0]: StreamInputInfo(sids[0], records)} if sids else {}
        else:
            inputs = {sid: StreamInputInfo(sid, kept) if type(kept) is int else kept
                      for sid, kept in zip(sids, kept_inputs, strict=True)}
        start = None if flags & _NO_START else started
        end = None if flags & _NO_END else ended
        if kept_operations is None:
            [(name, description)] = names
            operations: tuple[_Operation, ...] = ((name, description, start, end, None),)
        else:
            operations = tuple((name, description, op_start, op_end, reason)
                               for (name, description), (op_start, op_end, reason) in zip(names, kept_operations, strict=True))
        return KeptBatch(seq, time, inputs, submitted, start, end, operations, records)

    def timings(self) -> tuple[list[int], list[int], list[int | None], list[int | None]]:
        """The kept batches' records, submission, processing start and end times, oldest first: no row built."""
        slots = list(_SLOT.iter_unpack(self._values))
        capacity = self.capacity
        records, submitted, started, ended = [], [], [], []
        for n in self._kept(capacity):
            i = n % capacity
            _, sub, start, end, count, flags = slots[i]
            if flags:
                if flags & _WHOLE:
                    row = self._extra[i]
                    count, sub, start, end = row.records, row.submitted, row.started, row.ended
                else:
                    start = None if flags & _NO_START else start
                    end = None if flags & _NO_END else end
            records.append(count)
            submitted.append(sub)
            started.append(start)
            ended.append(end)
        return records, submitted, started, ended
