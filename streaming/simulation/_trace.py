"""Trace record and replay: listener events as JSON lines, and simulation models built from them.

Record a real run with :class:`TraceRecorder` (any runtime, any clock); read it back with
:func:`read_trace`; replay it under another interval, concurrency or input rate with
:func:`model_from_trace`. Spark keeps such history only in its UI; here it is a plain file.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import reprlib
from typing import IO, Any, Iterable, Mapping, Sequence

import attrs

from listeners import (
    BatchCompleted,
    BatchInfo,
    BatchStarted,
    BatchSubmitted,
    OutputOperationCompleted,
    OutputOperationInfo,
    OutputOperationStarted,
    ReceiverError,
    ReceiverInfo,
    ReceiverStarted,
    ReceiverStopped,
    StreamingEvent,
    StreamingStarted,
)
from scheduler import Duration, StreamInputInfo, Time

from ._input_rates import ReplayRate
from ._model_checks import ModelError, number_too_long
from ._output_model import OutputModel
from ._processing_times import Replay
from ._simulation_model import SimulationModel
from ._spark_jobs import SparkJob, spark_job_from_dict, spark_job_to_dict

__all__ = ["TRACE_FORMAT", "Trace", "TraceRecorder", "event_from_dict", "event_to_dict", "model_from_trace", "read_trace"]

TRACE_FORMAT = "aiodstream-trace"
SPARK_JOBS = "SparkJobs"
_VERSION = 1


# -- events <-> JSON --


def _t(t: Time | None) -> int | None:
    return None if t is None else t.milliseconds


def _op_to_dict(op: OutputOperationInfo) -> dict[str, Any]:
    return {
        "batch_time": op.batch_time.milliseconds,
        "id": op.id,
        "name": op.name,
        "description": op.description,
        "start_time": _t(op.start_time),
        "end_time": _t(op.end_time),
        "failure_reason": op.failure_reason,
    }


def _batch_to_dict(b: BatchInfo) -> dict[str, Any]:
    return {
        "batch_time": b.batch_time.milliseconds,
        "submission_time": b.submission_time.milliseconds,
        "processing_start_time": _t(b.processing_start_time),
        "processing_end_time": _t(b.processing_end_time),
        "inputs": [
            {"stream_id": sid, "num_records": info.num_records, "metadata": dict(info.metadata)}
            for sid, info in b.stream_id_to_input_info.items()
        ],
        "output_operations": [_op_to_dict(op) for op in b.output_operation_infos.values()],
    }


def _receiver_to_dict(r: ReceiverInfo) -> dict[str, Any]:
    return {
        "stream_id": r.stream_id,
        "name": r.name,
        "active": r.active,
        "location": r.location,
        "executor_id": r.executor_id,
        "last_error_message": r.last_error_message,
        "last_error": r.last_error,
        "last_error_time": _t(r.last_error_time),
    }


def event_to_dict(event: StreamingEvent) -> dict[str, Any]:
    """A JSON-ready dict of ``event``: ``{"event": <type name>, ...}``, times in milliseconds."""
    if isinstance(event, StreamingStarted):
        return {"event": "StreamingStarted", "time": event.time.milliseconds}
    if isinstance(event, (BatchSubmitted, BatchStarted, BatchCompleted)):
        return {"event": type(event).__name__, "batch_info": _batch_to_dict(event.batch_info)}
    if isinstance(event, (OutputOperationStarted, OutputOperationCompleted)):
        return {"event": type(event).__name__, "output_operation_info": _op_to_dict(event.output_operation_info)}
    if isinstance(event, (ReceiverStarted, ReceiverError, ReceiverStopped)):
        return {"event": type(event).__name__, "receiver_info": _receiver_to_dict(event.receiver_info)}
    raise TypeError(f"not a streaming event: {event!r}")


def _time(d: Mapping[str, Any], key: str, *, optional: bool = False) -> Time | None:
    value = d.get(key)
    if value is None:
        if optional:
            return None
        raise ModelError(key, "is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(key, f"must be integer milliseconds, got {value!r}")
    return Time(value)


def _req_time(d: Mapping[str, Any], key: str) -> Time:
    t = _time(d, key)
    assert t is not None
    return t


def _whole(d: Mapping[str, Any], key: str) -> int:
    # An id or a count as the recorder writes it: a JSON integer (int() would truncate 1.5 and read "12").
    value = d[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(key, f"must be a whole number, got {reprlib.repr(value)}")
    return value


def _ordered(start: Time | None, end: Time | None, key: str) -> None:
    if start is not None and end is not None and end < start:
        raise ModelError(key, f"is {end.milliseconds} ms, before the start time {start.milliseconds} ms")


def _op_from_dict(d: Mapping[str, Any]) -> OutputOperationInfo:
    start, end = _time(d, "start_time", optional=True), _time(d, "end_time", optional=True)
    _ordered(start, end, "end_time")
    return OutputOperationInfo(
        batch_time=_req_time(d, "batch_time"),
        id=_whole(d, "id"),
        name=str(d.get("name", "")),
        description=str(d.get("description", "")),
        start_time=start,
        end_time=end,
        failure_reason=d.get("failure_reason"),
    )


def _batch_from_dict(d: Mapping[str, Any]) -> BatchInfo:
    inputs: dict[int, StreamInputInfo] = {}
    for n, entry in enumerate(d.get("inputs", [])):
        try:
            stream = _whole(entry, "stream_id")
            inputs[stream] = StreamInputInfo(stream, _whole(entry, "num_records"), dict(entry.get("metadata") or {}))
        except ModelError as exc:
            raise exc.within(f"inputs[{n}]") from None
    ops: dict[int, OutputOperationInfo] = {}
    for n, entry in enumerate(d.get("output_operations", [])):
        try:
            op = _op_from_dict(entry)
        except ModelError as exc:
            raise exc.within(f"output_operations[{n}]") from None
        if op.id in ops:
            raise ModelError(f"output_operations[{n}].id", f"repeats output operation {op.id}")
        ops[op.id] = op
    start, end = _time(d, "processing_start_time", optional=True), _time(d, "processing_end_time", optional=True)
    _ordered(start, end, "processing_end_time")
    return BatchInfo(
        batch_time=_req_time(d, "batch_time"),
        stream_id_to_input_info=inputs,
        submission_time=_req_time(d, "submission_time"),
        processing_start_time=start,
        processing_end_time=end,
        output_operation_infos=ops,
    )


_BATCH_EVENTS: dict[str, type[BatchSubmitted] | type[BatchStarted] | type[BatchCompleted]] = {
    "BatchSubmitted": BatchSubmitted,
    "BatchStarted": BatchStarted,
    "BatchCompleted": BatchCompleted,
}
_OP_EVENTS: dict[str, type[OutputOperationStarted] | type[OutputOperationCompleted]] = {
    "OutputOperationStarted": OutputOperationStarted,
    "OutputOperationCompleted": OutputOperationCompleted,
}
_RECEIVER_EVENTS: dict[str, type[ReceiverStarted] | type[ReceiverError] | type[ReceiverStopped]] = {
    "ReceiverStarted": ReceiverStarted,
    "ReceiverError": ReceiverError,
    "ReceiverStopped": ReceiverStopped,
}


def event_from_dict(d: Mapping[str, Any]) -> StreamingEvent:
    """The event :func:`event_to_dict` made ``d`` from.

    Raises:
        ModelError: ``d`` is not a known event or misses a field (the field is named).
    """
    kind = d.get("event")
    try:
        if kind == "StreamingStarted":
            return StreamingStarted(_req_time(d, "time"))
        if kind in _BATCH_EVENTS:
            try:
                return _BATCH_EVENTS[kind](_batch_from_dict(d["batch_info"]))
            except ModelError as exc:
                raise exc.within("batch_info") from None
        if kind in _OP_EVENTS:
            try:
                return _OP_EVENTS[kind](_op_from_dict(d["output_operation_info"]))
            except ModelError as exc:
                raise exc.within("output_operation_info") from None
        if kind in _RECEIVER_EVENTS:
            r = d["receiver_info"]
            info = ReceiverInfo(
                _whole(r, "stream_id"), str(r["name"]), bool(r["active"]), str(r["location"]), str(r["executor_id"]),
                str(r.get("last_error_message", "")), str(r.get("last_error", "")), _time(r, "last_error_time", optional=True),
            )
            return _RECEIVER_EVENTS[kind](info)
    except KeyError as exc:
        raise ModelError(str(exc.args[0]), "is missing") from None
    except (TypeError, ValueError, AttributeError) as exc:  # (AttributeError: a table that is not a JSON object)
        if isinstance(exc, ModelError):
            raise
        raise ModelError("event", f"malformed {kind} event: {exc}") from None
    raise ModelError("event", f"unknown event type {kind!r}")


# -- recording --


# The events a trace holds: the scheduling story of a run. Query events (progress of a
# checkpointed run) carry nothing a replay uses.
_TRACED = (StreamingStarted, BatchSubmitted, BatchStarted, BatchCompleted, OutputOperationStarted, OutputOperationCompleted,
           ReceiverStarted, ReceiverError, ReceiverStopped)


class TraceRecorder:
    """A listener that writes every streaming event it receives as one JSON line.

    Query events of a checkpointed run (started, progress, idle, terminated) are not written;
    ``events_skipped`` counts them.

    Add it to any runtime (``runtime.add_listener(TraceRecorder("run.jsonl"))``) or pass it to
    :func:`simulate`'s ``listeners``. The first line is a header carrying the batch interval and
    concurrency, when given, so a replay needs no flags. Lines are written on the event loop
    through a buffered file: cheap, but a slow disk slows only this listener's queue, never the
    scheduler. Close it (or use it as a context manager) once the runtime has stopped.
    """

    def __init__(
        self,
        file: str | os.PathLike[str] | IO[str],
        *,
        batch_interval: Duration | None = None,
        concurrent_jobs: int | None = None,
        meta: Mapping[str, Any] | None = None,
        keep_batches: bool = False,
        sequential_batches: bool | None = None,
    ) -> None:
        """Open ``file`` (a path, or a text file this recorder will not close) and write the header.

        ``sequential_batches``: whether the recorded program runs its batches one after another (``None``: not known).

        With ``keep_batches``, :attr:`batches` lists each completed batch's time and output
        operation ids (what :meth:`write_spark_jobs` is then called for).
        """
        if isinstance(file, (str, os.PathLike)):
            self._file: IO[str] = open(file, "w", encoding="utf-8", buffering=1 << 16)
            self._owns = True
            self.path: str | None = os.fspath(file)
        else:
            self._file = file
            self._owns = False
            self.path = None
        self._keep = keep_batches
        self.batches: list[tuple[int, tuple[int, ...]]] = []
        self.events_written = 0
        self.events_skipped = 0
        self.spark_jobs_written = 0
        header = {
            "format": TRACE_FORMAT,
            "version": _VERSION,
            "batch_interval_ms": None if batch_interval is None else batch_interval.milliseconds,
            "concurrent_jobs": concurrent_jobs,
            "sequential_batches": sequential_batches,
            "meta": dict(meta or {}),
        }
        self._file.write(json.dumps(header) + "\n")

    def __call__(self, event: StreamingEvent) -> None:
        """Write ``event`` as a line (a query event is skipped)."""
        if not isinstance(event, _TRACED):
            self.events_skipped += 1
            return
        if self._keep and type(event) is BatchCompleted:
            info = event.batch_info
            self.batches.append((info.batch_time.milliseconds, tuple(sorted(info.output_operation_infos))))
        self._file.write(json.dumps(event_to_dict(event), default=str, separators=(",", ":")) + "\n")
        self.events_written += 1

    def write_spark_jobs(self, batch_time: Time, output_op_id: int, jobs: Sequence[SparkJob]) -> None:
        """Write the Spark jobs one output operation of one batch ran (a ``SparkJobs`` line).

        What a replay on the cluster model re-schedules: each job's stages and task times
        (see :func:`~streaming.simulation.fetch_spark_jobs`). Call it once the run has stopped.
        """
        line = {"event": SPARK_JOBS, "batch_time": batch_time.milliseconds, "output_op_id": output_op_id,
                "jobs": [spark_job_to_dict(j) for j in jobs]}
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.spark_jobs_written += 1

    def close(self) -> None:
        """Flush, and close the file if this recorder opened it."""
        if self._owns:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<TraceRecorder [{self.events_written} events]>"


# -- reading --


@attrs.frozen
class Trace:
    """A recorded run: its header and its events.

    Attributes:
        batch_interval: from the header, if recorded.
        concurrent_jobs: from the header, if recorded.
        meta: free-form header metadata.
        sequential_batches: from the header: the program ran its batches one after another (false if not recorded).
        events: every event, in recorded order.
        spark_jobs: the Spark jobs of each output operation, keyed by ``(batch time ms, output
            operation id)``, when the trace recorded them (``spark.aiodstream.trace.path`` does).
    """

    batch_interval: Duration | None
    concurrent_jobs: int | None
    meta: Mapping[str, Any]
    events: tuple[StreamingEvent, ...] = attrs.field(repr=lambda e: f"<{len(e)} events>")
    spark_jobs: Mapping[tuple[int, int], tuple[SparkJob, ...]] = attrs.field(factory=dict, repr=lambda j: f"<{len(j)} operations>")
    sequential_batches: bool = False

    @property
    def completed_batches(self) -> tuple[BatchInfo, ...]:
        """The BatchInfo of every BatchCompleted event, in batch-time order."""
        done = [e.batch_info for e in self.events if type(e) is BatchCompleted]
        return tuple(sorted(done, key=lambda b: b.batch_time.milliseconds))


def read_trace(file: str | os.PathLike[str] | IO[str]) -> Trace:
    """Read a trace written by :class:`TraceRecorder`.

    Raises:
        ModelError: a line is not UTF-8, not JSON (or nested too deeply, or a number too long,
            to read), or not a header or event as the recorder writes them; the field is
            ``line N`` (and the key).
        OSError: the file cannot be read.
    """
    if isinstance(file, (str, os.PathLike)):
        with open(file, "rb") as f:  # decoded line by line, so a bad byte is reported with its line
            return _read(f)
    return _read(file)


def _text(n: int, line: str | bytes) -> str:
    if isinstance(line, str):
        return line
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError(f"line {n}", f"not UTF-8 text: {exc.reason} at byte {exc.start + 1}") from None


def _parse(n: int, line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ModelError(f"line {n}", f"not JSON: {exc.msg}") from None
    except RecursionError:
        raise ModelError(f"line {n}", "JSON nested too deeply to read") from None
    except ValueError as exc:  # what the decoder's int() refuses: more digits than Python converts
        raise ModelError(f"line {n}", f"JSON that cannot be read: {number_too_long(exc)}") from None


def _header_number(data: Mapping[str, Any], key: str, what: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"line 1.{key}", f"must be a positive whole number of {what}, got {reprlib.repr(value)}")
    return value


def _read(f: Iterable[str | bytes]) -> Trace:
    interval: Duration | None = None
    concurrency: int | None = None
    sequential = False
    meta: dict[str, Any] = {}
    events: list[StreamingEvent] = []
    spark_jobs: dict[tuple[int, int], tuple[SparkJob, ...]] = {}
    completed: dict[int, int] = {}  # the line of each batch's BatchCompleted, by batch time
    for n, raw in enumerate(f, start=1):
        line = _text(n, raw)
        if not line.strip():
            continue
        data = _parse(n, line)
        if not isinstance(data, dict):
            raise ModelError(f"line {n}", f"must be a JSON object, got {type(data).__name__}")
        if n == 1 and data.get("format") == TRACE_FORMAT:
            if data.get("version") != _VERSION:
                raise ModelError("line 1.version", f"unsupported trace version {reprlib.repr(data.get('version'))}; "
                                 f"this reader knows {_VERSION}")
            ms = _header_number(data, "batch_interval_ms", "milliseconds")
            interval = None if ms is None else Duration(ms)
            concurrency = _header_number(data, "concurrent_jobs", "jobs")
            sequential = data.get("sequential_batches") or False
            if not isinstance(sequential, bool):
                raise ModelError("line 1.sequential_batches", f"must be true, false or null, got {reprlib.repr(sequential)}")
            if not isinstance(data.get("meta") or {}, dict):
                raise ModelError("line 1.meta", f"must be a JSON object, got {type(data['meta']).__name__}")
            meta = dict(data.get("meta") or {})
            continue
        try:
            if data.get("event") == SPARK_JOBS:
                key = (_whole(data, "batch_time"), _whole(data, "output_op_id"))
                spark_jobs[key] = tuple(spark_job_from_dict(j) for j in data["jobs"])
                continue
            event = event_from_dict(data)
            if type(event) is BatchCompleted:
                time = event.batch_info.batch_time.milliseconds
                first = completed.setdefault(time, n)
                if first != n:
                    raise ModelError("event", f"a second BatchCompleted of batch {time} (the first is on line {first}): "
                                              "a trace records one run; record each run to a file of its own")
            events.append(event)
        except ModelError as exc:
            raise exc.within(f"line {n}") from None
        except KeyError as exc:
            raise ModelError(f"line {n}.{exc.args[0]}", "is missing") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise ModelError(f"line {n}", f"malformed {SPARK_JOBS} line: {exc}") from None
    return Trace(interval, concurrency, meta, tuple(events), spark_jobs, sequential)


# -- replay --


# Below this relative spread of batch sizes (standard deviation / mean) a regression cannot tell
# fixed from per-record cost: noise in the durations would decide the slope.
_MIN_SIZE_SPREAD = 0.05


def _fit_per_record(durations: Sequence[int], records: Sequence[int]) -> float:
    # Least-squares slope of duration on batch size, never negative. When the size hardly
    # varied the fixed and per-record parts cannot be told apart: attribute everything to the
    # records (the cautious choice when asking "what if input grows?").
    n = len(durations)
    mr = sum(records) / n
    md = sum(durations) / n
    var = sum((r - mr) ** 2 for r in records)
    if mr == 0:
        return 0.0
    if math.sqrt(var / n) < _MIN_SIZE_SPREAD * mr:
        return md / mr
    slope = sum((r - mr) * (d - md) for r, d in zip(records, durations, strict=True)) / var
    return max(0.0, slope)


def _infer_interval(batches: Sequence[BatchInfo]) -> Duration:
    gaps = [b.batch_time.milliseconds - a.batch_time.milliseconds for a, b in itertools.pairwise(batches)]
    positive = [g for g in gaps if g > 0]
    if not positive:
        raise ModelError("batch_interval", "the trace has no header interval and fewer than two batches to infer it from")
    return Duration(math.gcd(*positive))


def model_from_trace(
    trace: Trace,
    *,
    batch_interval: Duration | None = None,
    concurrent_jobs: int | None = None,
    rate_factor: float = 1.0,
    duration: Duration | None = None,
    batches: int | None = None,
    seed: int = 0,
) -> SimulationModel:
    """A model that replays ``trace``, optionally under another configuration.

    Input: each traced batch's records arrive evenly over its interval (:class:`ReplayRate`),
    times ``rate_factor``. Work: each output operation replays its traced durations in order
    (:class:`Replay`), corrected by a per-record cost fitted from the trace when a batch holds
    more or fewer records than its traced counterpart (a longer interval, a rate factor). The
    cost is the least-squares slope of duration on records; if batch sizes in the trace hardly
    varied (spread under 5 % of the mean), fixed and per-record cost cannot be told apart and
    the whole mean duration is taken as per-record cost, the cautious choice for more input.

    Args:
        trace: a trace read with :func:`read_trace`.
        batch_interval: the interval to simulate (default: the traced one).
        concurrent_jobs: the concurrency to simulate (default: the traced one, else 1).
        rate_factor: multiplies the traced input rate.
        duration: the horizon (default: the traced run's).
        batches: the number of batches instead of ``duration``.
        seed: the seed (replay draws nothing at random; kept for models built on top).

    Raises:
        ModelError: the trace has no completed batch, or a batch lacks an output operation's times.
    """
    done = trace.completed_batches
    if not done:
        raise ModelError("events", "the trace holds no BatchCompleted event to replay")
    traced_interval = trace.batch_interval or _infer_interval(done)
    records = [b.num_records for b in done]
    op_ids = sorted(done[0].output_operation_infos)
    if not op_ids:
        raise ModelError("output_operations", f"batch {done[0].batch_time} has no output operations")
    outputs = []
    for op_id in op_ids:
        durations = []
        for b in done:
            op = b.output_operation_infos.get(op_id)
            if op is None or op.start_time is None or op.end_time is None:
                raise ModelError(f"batch {b.batch_time.milliseconds}.output_operations[{op_id}]", "has no start and end time")
            durations.append(op.end_time.milliseconds - op.start_time.milliseconds)
        name = done[0].output_operation_infos[op_id].name or f"output-{op_id}"
        outputs.append(OutputModel(name, Replay(durations, records, _fit_per_record(durations, records))))
    return SimulationModel(
        batch_interval=batch_interval or traced_interval,
        outputs=outputs,
        input=ReplayRate(traced_interval.milliseconds, records),
        concurrent_jobs=concurrent_jobs or trace.concurrent_jobs or 1,
        sequential_batches=trace.sequential_batches,
        duration=duration or traced_interval * len(done),
        batches=batches,
        seed=seed,
        rate_factor=rate_factor,
    )
