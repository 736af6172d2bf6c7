"""The UI history's kept completed batches: flat values in one preallocated ring, read back as rows when a page asks.

What Spark's ``StreamingJobProgressListener`` keeps of its retained batches (``BatchUIData``),
kept without an object per batch (see :class:`FlatBatches`).
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping, NamedTuple, Protocol, Sequence

from listeners import BatchInfo, BatchRecord, OutputOperationInfo
from scheduler import JobSet, StreamInputInfo, Time

from ._failures import headline

__all__ = ["FlatBatches", "KeptBatch", "RunFold", "iso_date", "ms_of"]


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


_SHAPES = 256
"""Distinct shapes (:data:`_Shape`) a history shares between its batches; a batch of any further shape keeps its own."""


_UNSET = object()


def ms_of(value: Any) -> int | None:
    """A ``Time``'s or a ``Duration``'s whole milliseconds, or ``None`` for ``None`` (a time not reached)."""
    return None if value is None else int(value.milliseconds)


class RunFold(Protocol):
    """What folds the same batches as a :class:`FlatBatches` in its one pass over them (the metrics' histograms and counters).

    :meth:`FlatBatches.add_entries` hands it, per run, the *simple* batches (one job that
    succeeded, its times the batch's, started and ended, one input without metadata or none) as
    sums and counts, and the other batches themselves.
    """

    @property
    def first_ms(self) -> int:
        """The first histogram bucket's bound in whole ms: a simple batch whose delays all fall at or under it is only counted."""
        ...

    def fold_simple(self, count: int, firsts: int, scheduling_sum: int, total_sum: int, others: list[tuple[int, int]],
                    records: dict[int, int]) -> None:
        """``count`` simple batches: ``firsts`` of them with every delay in the first bucket, the others' (scheduling,
        total) delays, the sums of both delays over all ``count``, and their records by input."""
        ...

    def fold_batches(self, batches: Sequence[JobSet | BatchRecord]) -> None:
        """The other batches of the run (a batch log's items)."""
        ...


class FlatBatches:
    """The last ``capacity`` completed batches as flat values: preallocated columns of ints, one slot per batch.

    Why not the batches themselves: a kept ``JobSet`` (its job, times and input infos) is about
    1.3 KB in a dozen objects, so 1,000 of them outgrow a core's L2 cache, and each new batch then
    frees the one kept 1,000 batches ago, reading its objects back from L3 or memory (about 25
    cache misses a batch, measured by ``bench/bench_ui_memory.py``). Here a batch is five
    references in five preallocated lists (its time, submission, processing start and end in ms,
    ``None`` for a time not reached, and its records: ints, which the garbage collector does not
    track), a reference to a shape that its program's batches share (input ids, output
    operations' names and descriptions), and, only when it has more than one input or output
    operation, input metadata, a failure, or an operation whose times are not the batch's, one
    tuple of that shape and the rest, in the shape's place (a simple batch stores six references).
    Storing a reference in a list is a few bytecodes; packing the same ints into a buffer
    (``struct.pack_into``, issue 28's sixth pass) cost about 2k instructions a batch.

    Not thread-safe: the history holds its lock around every call.
    """

    def __init__(self, capacity: int) -> None:
        """Room for ``capacity`` batches."""
        self.capacity = capacity
        self.appended = 0
        self._time: list[int] = [0] * capacity
        self._submitted: list[int] = [0] * capacity
        self._started: list[int | None] = [None] * capacity
        self._ended: list[int | None] = [None] * capacity
        self._records: list[int] = [0] * capacity
        # A batch's shape, or with the rest of its values (see _add) (shape, inputs, operations): a 3-tuple.
        self._shape: list[Any] = [None] * capacity
        self._shapes: dict[_Shape, _Shape] = {}
        # The last simple batch's input (None: none), output operation and shape: add_entries
        # compares a batch with them field by field before it builds any tuple.
        self._last_sid: object = _UNSET
        self._last_name = self._last_description = ""
        self._last_shape: _Shape | None = None

    def __len__(self) -> int:
        return min(self.appended, self.capacity)

    def add_entries(self, entries: Sequence[JobSet | BatchRecord], fold: RunFold | None = None) -> tuple[int, int]:
        """Keep the values of a batch log's items (unnumbered), in order; returns the failed batches and the records among them.

        With ``fold``, the same pass folds them into it too (see :class:`RunFold`).
        """
        # Called for every completed batch, in runs. A batch of the last simple batch's shape (one
        # output operation, its times the batch's; the same input, without metadata, or none) is
        # kept in one inline pass with everything it touches in locals: its five ints stored in
        # their columns and the shared shape referenced, and, with a fold, its two delays summed
        # (and counted once when both are in the first bucket, as nearly all are). Any other goes
        # through add(), which notes the shape when it is simple, for the batches after it; with a
        # fold it is folded on its own (fold_batches), after the run.
        times, submits, starts, ends, records_of = self._time, self._submitted, self._started, self._ended, self._records
        shapes, capacity = self._shape, self.capacity
        sid, name, description, shape = self._last_sid, self._last_name, self._last_description, self._last_shape
        observe = fold is not None
        first = fold.first_ms if fold is not None else 0
        slot = self.appended % capacity
        fast = failed = total = 0
        # The fold's sums over the simple batches; their records by input (``total`` less ``segment``,
        # its value when the simple batches of one input began, added to ``by_input`` when they end).
        simple_count = firsts = scheduling_sum = total_sum = segment = 0
        others: list[tuple[int, int]] = []
        by_input: dict[int, int] = {}
        slow: list[JobSet | BatchRecord] = []
        for batch in entries:
            # The simple batch's checks in one try: a BatchRecord (a failed batch) has no jobs, a batch of
            # several jobs does not unpack to one, and a time not reached has no milliseconds.
            try:
                [job] = batch.jobs  # type: ignore[union-attr]
                start, end = batch.processing_start, batch.processing_end  # type: ignore[union-attr]
                if job.start_time is start and job.end_time is end and job.name == name and job.description == description:
                    # Its records, or -1 if its inputs are not the shape's one input without metadata (or none).
                    inputs = batch.input_infos  # type: ignore[union-attr]
                    if inputs:
                        info = inputs.get(sid)  # type: ignore[call-overload]
                        records = -1 if info is None or info.metadata or len(inputs) != 1 else info.num_records
                    else:
                        records = 0 if sid is None else -1
                    if records >= 0:
                        submitted = batch.submission_time.milliseconds  # type: ignore[union-attr]
                        began = start.milliseconds  # type: ignore[union-attr]
                        ended = end.milliseconds  # type: ignore[union-attr]
                        times[slot] = batch.time.milliseconds  # type: ignore[union-attr]
                        submits[slot] = submitted
                        starts[slot] = began
                        ends[slot] = ended
                        records_of[slot] = records
                        shapes[slot] = shape
                        fast += 1
                        total += records
                        slot += 1
                        if slot == capacity:
                            slot = 0
                        if observe:
                            began -= submitted
                            ended -= submitted
                            scheduling_sum += began
                            total_sum += ended
                            if ended <= first and began >= 0 and began <= ended:
                                firsts += 1
                            else:
                                others.append((began, ended))
                        continue
            except (AttributeError, ValueError):
                pass
            self.appended += fast
            if observe:  # the simple batches before this one end a segment: their records are total's growth
                slow.append(batch)
                simple_count += fast
                if fast and sid is not None:
                    by_input[sid] = by_input.get(sid, 0) + total - segment  # type: ignore[index, call-overload]
            if type(batch) is JobSet:  # every job succeeded (see listeners.BatchEntry)
                total += self._add_job_set(batch)
            else:  # a BatchRecord: some job failed
                failed += 1
                total += self._add_record(batch)  # type: ignore[arg-type]
            # _add() wrote the next slot and may have noted a new simple shape.
            self.appended += 1
            segment = total
            fast = 0
            sid, name, description, shape = self._last_sid, self._last_name, self._last_description, self._last_shape
            slot = self.appended % capacity
        self.appended += fast
        if fold is not None:
            simple_count += fast
            if fast and sid is not None:
                by_input[sid] = by_input.get(sid, 0) + total - segment  # type: ignore[index, call-overload]
            if simple_count:
                fold.fold_simple(simple_count, firsts, scheduling_sum, total_sum, others, by_input)
            if slow:
                fold.fold_batches(slow)
        return failed, total

    def _add_job_set(self, job_set: JobSet) -> int:
        operations = tuple((job.name, job.description, ms_of(job.start_time), ms_of(job.end_time),
                            None if job.failure is None else job.failure_reason) for job in job_set.jobs)
        return self._add(job_set.time.milliseconds, job_set.input_infos, job_set.submission_time.milliseconds,
                         ms_of(job_set.processing_start), ms_of(job_set.processing_end), operations)

    def add_record(self, record: BatchRecord) -> int:
        """Keep a completed batch's record's values; returns its records."""
        records = self._add_record(record)
        self.appended += 1
        return records

    def _add_record(self, record: BatchRecord) -> int:
        return self._add(record.batch_time_ms, record.stream_id_to_input_info, record.submission_ms,
                         record.processing_start_ms, record.processing_end_ms, record.operations)

    def add(self, time: int, inputs: Mapping[int, StreamInputInfo], submitted: int, started: int | None,
            ended: int | None, operations: Sequence[_Operation]) -> int:
        """Keep a completed batch of these values (any number of inputs and operations); returns its records."""
        records = self._add(time, inputs, submitted, started, ended, operations)
        self.appended += 1
        return records

    def _add(self, time: int, inputs: Mapping[int, StreamInputInfo], submitted: int, started: int | None,
             ended: int | None, operations: Sequence[_Operation]) -> int:
        # Writes the slot after the last one (the caller counts it in appended).
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
        i = self.appended % self.capacity
        self._time[i], self._submitted[i], self._started[i], self._ended[i], self._records[i] = (
            time, submitted, started, ended, records)
        if kept_inputs is None and kept_operations is None:
            self._shape[i] = shape
            self._last_sid = shape[0][0] if shape[0] else None
            self._last_name, self._last_description = shape[1][0]
            self._last_shape = shape
        else:
            self._shape[i] = (shape, kept_inputs, kept_operations)
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
        capacity, times = self.capacity, self._time
        for n in reversed(self._kept(capacity)):
            if times[n % capacity] == time:
                return self._row(n % capacity, n + 1)
        return None

    def rows(self, newest: int | None = None) -> list[KeptBatch]:
        """The kept batches (the ``newest`` last of them), oldest first, as :class:`KeptBatch` values."""
        capacity = self.capacity
        return [self._row(n % capacity, n + 1) for n in self._kept(capacity if newest is None else newest)]

    def _row(self, i: int, seq: int) -> KeptBatch:
        records, start, end = self._records[i], self._started[i], self._ended[i]
        kept = self._shape[i]
        if len(kept) == 2:  # a shape (input ids, operations' names), without the rest of the values
            (sids, names), kept_inputs, kept_operations = kept, None, None
        else:
            (sids, names), kept_inputs, kept_operations = kept
        if kept_inputs is None:
            inputs = {sids[0]: StreamInputInfo(sids[0], records)} if sids else {}
        else:
            inputs = {sid: StreamInputInfo(sid, kept) if type(kept) is int else kept
                      for sid, kept in zip(sids, kept_inputs, strict=True)}
        if kept_operations is None:
            [(name, description)] = names
            operations: tuple[_Operation, ...] = ((name, description, start, end, None),)
        else:
            operations = tuple((name, description, op_start, op_end, reason)
                               for (name, description), (op_start, op_end, reason) in zip(names, kept_operations, strict=True))
        return KeptBatch(seq, self._time[i], inputs, self._submitted[i], start, end, operations, records)

    def timings(self) -> tuple[list[int], list[int], list[int | None], list[int | None]]:
        """The kept batches' records, submission, processing start and end times, oldest first: no row built."""
        capacity = self.capacity
        kept = self._kept(capacity)
        if not kept:
            return [], [], [], []
        first, count = kept.start % capacity, len(kept)

        def ordered(column: list[Any]) -> list[Any]:  # the ring's oldest slot first: one or two slices
            return column[first:] + column[:first] if count == capacity else column[first:first + count]

        return ordered(self._records), ordered(self._submitted), ordered(self._started), ordered(self._ended)
