"""What the web UI shows of one context, query or trace: a bounded history kept by an inline listener.

The counterpart of Spark's ``StreamingJobProgressListener`` (the Streaming tab's model) and of the
Structured Streaming tab's recent progress. Completed batches are kept as flat values
(:class:`FlatBatches`: ints in preallocated columns, no object per kept batch); the JSON the pages read, and a batch's
``BatchInfo``, are built when a page asks, in the shapes of Spark's streaming REST API
(``/api/v1/applications/<app>/streaming/...``), so a script written against Spark's reads ours.
"""

from __future__ import annotations

import collections
import itertools
import threading
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from listeners import (
    HANDLER_NAMES,
    BatchCompleted,
    BatchInfo,
    BatchLog,
    BatchRecord,
    BatchStarted,
    BatchSubmitted,
    ProgressLog,
    QueryProgress,
    QueryStarted,
    QueryTerminated,
    ReceiverError,
    ReceiverInfo,
    ReceiverStarted,
    ReceiverStopped,
    StreamingEvent,
    StreamingStarted,
)
from scheduler import JobSet

from ._failures import error_summary, headline
from ._kept_batches import FlatBatches, KeptBatch, RunFold, iso_date, ms_of

__all__ = ["ContextHistory", "SparkJobs", "batch_json", "check_retained", "failure_text", "operation_json"]

SparkJobs = Callable[[int, int], list[int]]
"""``(batch_time_ms, output_op_id) -> Spark job ids`` of that output operation (blocking: py4j)."""


def check_retained(**counts: int) -> None:
    """Each of ``counts`` (``retained_batches=...``) is a positive int, else a ValueError naming it."""
    for what, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{what} must be a positive int, got {n!r}")


def _newest_first(batch: dict[str, Any]) -> int:
    return -int(batch["batchId"])


class _Receiver:
    __slots__ = ("errors", "info", "started", "stopped")

    def __init__(self, info: ReceiverInfo) -> None:
        self.info = info
        self.started = self.errors = self.stopped = 0


class ContextHistory:
    """The retained history of one attached context, query or trace, and its JSON views.

    It is a listener (``run_inline``: called inside the bus's ``post``, a few microseconds per
    event) and keeps the last ``retained_batches`` completed batches (as flat values: a page's
    rows and a batch's ``BatchInfo`` are built when it asks), the running ones, the receivers and
    the last ``retained_progress`` progress reports, as Spark's UI keeps
    ``spark.streaming.ui.retainedBatches`` batches.

    Args:
        name: the label the UI shows and its URLs use.
        kind: ``"micro-batch"``, ``"continuous"`` or ``"trace"``.
        batch_interval_ms: the batch (or epoch) interval, if known.
        retained_batches: completed batches kept (older ones leave; totals still count them).
        retained_progress: progress reports kept.
        spark_ui: the Spark UI's address, for links to the jobs of each output operation.
        spark_jobs: finds the Spark job ids of an output operation (called off the loop).
        input_names: stream id -> the input's name.
        live: whether it follows a running engine (``False``: a trace).
        show_tracebacks: the JSON views give failures' full tracebacks; without it, each
            failure's type and message (:func:`error_summary`).
        active: reads the running batches when a view asks (snapshots of a ``JobScheduler``'s
            ``running_batches()``, or a bus's ``active_batches`` after its ``follow_batches``).
            With it, register :meth:`listener` rather than the history:
            it takes no ``BatchSubmitted`` or ``BatchStarted``, so the bus builds no snapshot for them.
        dropped: reads the batches the engine's stop dropped (submitted, never completed) once it
            stopped; ``active`` gives none then (an immediate stop drops the queued and running ones).
        batch_log: reads the completed batches from a bus's :class:`~listeners.BatchLog`
            instead of taking ``BatchCompleted`` (:meth:`listener` then takes none): its reader
            keeps each batch's values as the log folds it, so the log holds only a run of batches.
        progress_log: reads the progress reports from a bus's :class:`~listeners.ProgressLog`
            when a view asks instead of taking ``QueryProgress``; :meth:`listener` then takes none.
    """

    run_inline = True

    def __init__(
        self,
        name: str,
        *,
        kind: str = "micro-batch",
        batch_interval_ms: int | None = None,
        retained_batches: int = 1000,
        retained_progress: int = 1000,
        spark_ui: str | None = None,
        spark_jobs: SparkJobs | None = None,
        input_names: Mapping[int, str] | None = None,
        live: bool = True,
        show_tracebacks: bool = False,
        active: Callable[[], list[BatchInfo]] | None = None,
        dropped: Callable[[], list[BatchInfo]] | None = None,
        batch_log: BatchLog | None = None,
        progress_log: ProgressLog | None = None,
    ) -> None:
        """Start an empty history."""
        check_retained(retained_batches=retained_batches, retained_progress=retained_progress)
        self.name = name
        self.kind = kind
        self.batch_interval_ms = batch_interval_ms
        self.spark_ui = spark_ui
        self.spark_jobs = spark_jobs
        self.input_names: dict[int, str] = dict(input_names or {})
        self.live = live
        self.show_tracebacks = show_tracebacks
        self.start_time_ms: int | None = None
        self.terminated = False
        self.exception: str | None = None
        # The completed batches' values, flat (no object per kept batch); a view builds
        # what it shows from them when it asks.
        self._lock = threading.Lock()  # views may read from several threads, beside the loop that adds
        self._batches = FlatBatches(retained_batches)
        self._active: dict[int, tuple[str, BatchInfo]] = {}
        self._active_source = active
        self._dropped = dropped
        self._receivers: dict[int, _Receiver] = {}
        self._progress: collections.deque[tuple[int, Any]] = collections.deque(maxlen=retained_progress)
        self._progress_seq = itertools.count(1)
        self._completed_batches = 0
        self._failed_batches = 0
        self._records = 0
        self.query_id: str | None = None
        self.run_id: str | None = None
        # Read from the bus's logs when a view asks. The batch log's reader folds every batch into
        # the flat values (and the totals) in runs, while the log still holds it (the log keeps a run's
        # few batches, not this history's retained ones); a view folds what is new first.
        self._batch_log = batch_log
        self._progress_log = progress_log
        self._fold: RunFold | None = None  # the metrics of the same context, folded in the same pass (fold_into)
        self._batch_reader = None if batch_log is None else batch_log.reader(self._fold_batches, numbered=False)
        if progress_log is not None:
            progress_log.retain(retained_progress)
            self._progress_base = progress_log.appended

    # -- the totals --

    @property
    def completed_batches(self) -> int:
        """Completed batches seen, failed ones included."""
        self.catch_up()
        return self._completed_batches

    @property
    def failed_batches(self) -> int:
        """Completed batches with a failed output operation."""
        self.catch_up()
        return self._failed_batches

    @property
    def records(self) -> int:
        """Records of the completed batches."""
        self.catch_up()
        return self._records

    def catch_up(self) -> None:
        """Fold what the bus's batch log holds that this history has not seen yet (a view does this first)."""
        log, reader = self._batch_log, self._batch_reader
        if log is not None and reader is not None:
            log.catch_up(reader)

    def fold_into(self, fold: RunFold) -> bool:
        """From now on fold every batch read from the batch log into ``fold`` too, in the same pass; ``False`` without a log.

        For the metrics of the same context (:meth:`StreamingMetrics.attach` with ``history``): one
        pass over each run of batches instead of a second reader of the log. Only one fold.
        """
        if self._batch_log is None:
            return False
        if self._fold is not None:
            raise ValueError(f"the history of {self.name!r} already folds its batches into {self._fold!r}")
        self.catch_up()  # what was appended before is not the fold's (a reader of its own would not see it either)
        self._fold = fold
        return True

    def let_go(self) -> None:
        """The engine stopped: keep what the views show, as values, and let go of what reads the engine when asked.

        What the bus's logs still hold is folded, the retained progress reports are built, and the
        batches the stop dropped are read once; from then on the history holds no reference to the
        engine, its bus or its scheduler (a UI that outlives its contexts keeps only their histories).
        """
        self.catch_up()
        dropped = [] if self._dropped is None else self._dropped()
        self._dropped = dropped.copy
        self._active_source, self._active = None, {}
        log, self._progress_log, self._batch_log, self._batch_reader = self._progress_log, None, None, None
        if log is not None:
            base = self._progress_base
            kept = log.entries()[-(self._progress.maxlen or 1):]
            self._progress.extend((entry[0] - base, entry[1]()) for entry in kept)
            self._progress_seq = itertools.count(log.appended - base + 1)

    def _fold_batches(self, entries: Sequence[JobSet | BatchRecord]) -> None:
        # Called by the log's reader (once per entry, in order, in runs of up to the log's length):
        # on the loop before the log lets go of a batch not yet folded, or on a view's thread.
        with self._lock:
            failed, records = self._batches.add_entries(entries, self._fold)
            self._completed_batches += len(entries)
            self._failed_batches += failed
            self._records += records

    # -- the listener --

    def listener(self) -> object:
        """What to register on the bus: the history itself, or one that skips the events of what it reads when asked.

        With an ``active`` source it takes no running batches' events; with a ``batch_log`` no
        ``BatchCompleted``; with a ``progress_log`` no ``QueryProgress``.
        """
        skipped: set[type] = set()
        if self._active_source is not None:
            skipped.update((BatchSubmitted, BatchStarted))
        if self._batch_log is not None:
            skipped.add(BatchCompleted)
        if self._progress_log is not None:
            skipped.add(QueryProgress)
        if not skipped:
            return self
        return _HistoryFeed(self, skipped)

    def on_streaming_started(self, event: StreamingStarted) -> None:
        """Note the start time."""
        self.start_time_ms = event.time.milliseconds

    def on_batch_submitted(self, event: BatchSubmitted) -> None:
        """A queued batch."""
        info = event.batch_info
        self._active[info.batch_time.milliseconds] = ("QUEUED", info)

    def on_batch_started(self, event: BatchStarted) -> None:
        """A processing batch."""
        info = event.batch_info
        self._active[info.batch_time.milliseconds] = ("PROCESSING", info)

    def on_batch_completed(self, event: BatchCompleted) -> None:
        """A completed batch: kept (its values), counted."""
        record = event.record
        if self._active:
            self._active.pop(record.batch_time_ms, None)
        with self._lock:
            self._batches.add_record(record)
            self._completed_batches += 1
            self._records += record.num_records
            if record.failures:
                self._failed_batches += 1

    def _receiver(self, info: ReceiverInfo) -> _Receiver:
        entry = self._receivers.get(info.stream_id)
        if entry is None:
            entry = self._receivers[info.stream_id] = _Receiver(info)
        entry.info = info
        if info.name:
            self.input_names.setdefault(info.stream_id, info.name)
        return entry

    def on_receiver_started(self, event: ReceiverStarted) -> None:
        """A receiver started."""
        self._receiver(event.receiver_info).started += 1

    def on_receiver_error(self, event: ReceiverError) -> None:
        """A receiver reported an error."""
        self._receiver(event.receiver_info).errors += 1

    def on_receiver_stopped(self, event: ReceiverStopped) -> None:
        """A receiver stopped."""
        self._receiver(event.receiver_info).stopped += 1

    def on_query_started(self, event: QueryStarted) -> None:
        """A checkpointed query's run started."""
        self.query_id, self.run_id = str(event.id), str(event.run_id)
        self.terminated, self.exception = False, None

    def on_query_progress(self, event: QueryProgress) -> None:
        """A progress report: retained."""
        self._progress.append((next(self._progress_seq), event.progress))

    def on_query_terminated(self, event: QueryTerminated) -> None:
        """The query's run ended."""
        self.terminated, self.exception = True, event.exception

    def feed(self, events: Iterable[StreamingEvent]) -> None:
        """Take recorded events (a trace) as if they were posted now, in order."""
        for event in events:
            handler = getattr(self, HANDLER_NAMES[type(event)], None)
            if handler is not None:
                handler(event)

    # -- JSON views (Spark's streaming REST shapes) --

    def _rows(self, newest: int | None = None) -> list[KeptBatch]:
        """The kept completed batches (the ``newest`` last of them), oldest first, as they are now."""
        self.catch_up()
        with self._lock:
            return self._batches.rows(newest)

    def completed(self) -> list[tuple[int, BatchInfo]]:
        """The retained completed batches with their sequence numbers, oldest first.

        Each ``BatchInfo`` is built from the kept values on every call (it equals the one the
        batch's ``BatchCompleted`` carried); the pages read the values without building one.
        """
        return [(row.seq, row.batch_info()) for row in self._rows()]

    def active(self) -> dict[int, tuple[str, BatchInfo]]:
        """The running batches by time in ms, each ``("QUEUED" | "PROCESSING", its BatchInfo)``: as they are now."""
        if self._active_source is None:
            return dict(self._active)  # one C-level copy: safe beside the loop that writes
        return {info.batch_time.milliseconds: ("QUEUED" if info.processing_start_time is None else "PROCESSING", info)
                for info in self._active_source()}

    def statistics(self) -> dict[str, Any]:
        """Spark's ``/streaming/statistics`` of this context, plus our own fields (name, kind, links)."""
        self.catch_up()
        with self._lock:
            records, submitted, started, ended = self._batches.timings()
        receivers = list(self._receivers.values())
        interval = self.batch_interval_ms
        # As Spark's StreamingStatisticsResource: the rate and the scheduling delay average over the
        # queued, processing and retained completed batches; the times are Longs (integer division,
        # toward zero); numReceivedRecords counts a batch once it started (onBatchStarted).
        active = [info for _, info in self.active().values()]
        # Not a tick held behind a sequential batch (no output operation yet): its input is taken only when it is made.
        records = [*records, *(info.num_records for info in active if info.output_operation_infos)]
        received = self.records + sum(info.num_records for info in active if info.processing_start_time is not None)

        def avg(values: list[int]) -> int | None:
            if not values:
                return None
            whole = abs(sum(values)) // len(values)
            return whole if sum(values) >= 0 else -whole

        rates = [n * 1000 / interval for n in records] if interval else []
        scheduling = [start - sub for sub, start in zip(submitted, started, strict=True) if start is not None]
        scheduling += [info.scheduling_delay.milliseconds for info in active if info.scheduling_delay is not None]
        processing = [end - start for start, end in zip(started, ended, strict=True) if start is not None and end is not None]
        total = [end - sub for sub, start, end in zip(submitted, started, ended, strict=True)
                 if start is not None and end is not None]
        return {
            "name": self.name,
            "kind": self.kind,
            "live": self.live,
            "terminated": self.terminated,
            "exception": failure_text(self.exception, self.show_tracebacks),
            "exceptionHeadline": None if self.exception is None else headline(self.exception),
            "queryId": self.query_id,
            "runId": self.run_id,
            "sparkUi": self.spark_ui,
            "startTime": iso_date(self.start_time_ms),
            "startTimeMs": self.start_time_ms,
            "batchDuration": interval,
            "numReceivers": len(receivers),
            "numActiveReceivers": sum(1 for r in receivers if r.info.active),
            "numInactiveReceivers": sum(1 for r in receivers if not r.info.active),
            "numTotalCompletedBatches": self.completed_batches,
            "numFailedBatches": self.failed_batches,
            "numRetainedCompletedBatches": len(submitted),
            "numActiveBatches": len(active),
            "numDroppedBatches": 0 if self._dropped is None else len(self._dropped()),
            "numProcessedRecords": self.records,
            "numReceivedRecords": received,
            "avgInputRate": sum(rates) / len(rates) if rates else None,
            "avgSchedulingDelay": avg(scheduling),
            "avgProcessingTime": avg(processing),
            "avgTotalDelay": avg(total),
            "inputNames": {str(k): v for k, v in sorted(self.input_names.items())},
            "progressReports": self._last_progress_seq(),
        }

    def batches(self, *, since: int = 0, status: str | Collection[str] | None = None) -> list[dict[str, Any]]:
        """Spark's ``/streaming/batches``: running and completed ones, newest batch time first (Spark's ``-batchId`` order:
        with concurrent jobs a batch may complete before an older one).

        ``since``: only completed batches whose ``seq`` is above it (what a live page has not seen).
        ``status``: ``QUEUED``, ``PROCESSING`` or ``COMPLETED`` only, or a collection of them
        (Spark's repeated ``?status=``); ``None`` or empty: all.
        """
        wanted = {"QUEUED", "PROCESSING", "COMPLETED"} if not status else {status} if isinstance(status, str) else set(status)
        out: list[dict[str, Any]] = []
        if wanted & {"QUEUED", "PROCESSING"}:
            for _, (state, info) in sorted(self.active().items(), reverse=True):
                if state in wanted:
                    out.append(batch_json(info, state, None, self.batch_interval_ms))
        if "COMPLETED" in wanted:
            self.catch_up()
            with self._lock:
                rows = self._batches.rows(max(0, self._batches.appended - since))
            interval = self.batch_interval_ms
            out.extend(row.json(interval) for row in reversed(rows))
        out.sort(key=_newest_first)  # stable: completion order among equal times
        return out

    def batch(self, batch_id: int) -> tuple[dict[str, Any], BatchInfo] | None:
        """One batch (``batch_id`` is its time in ms, as in Spark) and its record, or ``None`` if not retained."""
        active = self.active().get(batch_id)
        if active is not None:
            return batch_json(active[1], active[0], None, self.batch_interval_ms), active[1]
        self.catch_up()
        with self._lock:
            row = self._batches.find(batch_id)
        return None if row is None else (row.json(self.batch_interval_ms), row.batch_info())

    def receivers(self) -> list[dict[str, Any]]:
        """Spark's ``/streaming/receivers``, with each receiver's event rate per retained batch."""
        receivers = sorted(dict(self._receivers).items())
        batches = self._rows() if receivers else []
        interval = self.batch_interval_ms
        out = []
        for sid, entry in receivers:
            info = entry.info
            rates = [[row.time, (row.inputs[sid].num_records * 1000 / interval)]
                     for row in batches if interval and sid in row.inputs]
            out.append({
                "streamId": sid,
                "streamName": info.name,
                "isActive": info.active,
                "executorId": info.executor_id,
                "executorHost": info.location,
                "lastErrorTime": iso_date(ms_of(info.last_error_time)),
                "lastErrorMessage": info.last_error_message or None,
                "lastError": failure_text(info.last_error or None, self.show_tracebacks),
                "avgEventRate": (sum(r for _, r in rates) / len(rates)) if rates else None,
                "eventRates": rates,
                "starts": entry.started,
                "errors": entry.errors,
                "stops": entry.stopped,
            })
        return out

    def _last_progress_seq(self) -> int:
        if self._progress_log is not None:
            return self._progress_log.appended - self._progress_base
        progress = list(self._progress)
        return progress[-1][0] if progress else 0

    def progress(self, *, since: int = 0) -> list[dict[str, Any]]:
        """Retained progress reports (Spark's ``StreamingQueryProgress`` JSON) newer than ``since``, oldest first."""
        log = self._progress_log
        if log is None:
            return [{"seq": seq, **p.json_value()} for seq, p in list(self._progress) if seq > since]
        base = self._progress_base
        # Each report is built on its first read (the log keeps its builder, which keeps the report).
        reports = [(entry[0] - base, entry[1]) for entry in log.entries()][-(self._progress.maxlen or 1):]
        return [{"seq": seq, **build().json_value()} for seq, build in reports if seq > since]


class _HistoryFeed:
    """A history's callbacks without those of the events it reads when asked (running batches, completed ones, progress).

    The bus finds a listener's callbacks by name; the history's own bound methods are this
    object's attributes, so a delivery calls the history directly, with no call in between.
    """

    # The name logs, the bus's statistics and the metrics' listener label give it by default,
    # as when the history itself was registered.
    __qualname__ = "ContextHistory"
    run_inline = True

    def __init__(self, history: ContextHistory, skipped: set[type]) -> None:
        self.history = history
        for event_type, name in HANDLER_NAMES.items():
            if event_type not in skipped and hasattr(history, name):
                setattr(self, name, getattr(history, name))

    def __repr__(self) -> str:
        return f"<ContextHistory {self.history.name} (what it reads when asked skipped)>"


def failure_text(reason: str | None, show_tracebacks: bool) -> str | None:
    """A failure as the UI shows it: the full text with ``show_tracebacks``, else its type and message."""
    if reason is None or show_tracebacks:
        return reason
    return error_summary(reason)


def operation_json(op: Any, jobs: list[int] | None, *, show_tracebacks: bool = False) -> dict[str, Any]:
    """Spark's ``/streaming/batches/<id>/operations`` entry, with the Spark job ids when known.

    ``failureReason`` is the full traceback only with ``show_tracebacks``; else the failure's type and message.
    """
    duration = op.duration
    return {
        "outputOpId": op.id,
        "name": op.name,
        "description": op.description,
        "startTime": iso_date(ms_of(op.start_time)),
        "endTime": iso_date(ms_of(op.end_time)),
        "startTimeMs": ms_of(op.start_time),
        "endTimeMs": ms_of(op.end_time),
        "duration": ms_of(duration),
        "failureReason": failure_text(op.failure_reason, show_tracebacks),
        "failureHeadline": None if op.failure_reason is None else headline(op.failure_reason),
        "jobIds": jobs,
    }


def batch_json(info: BatchInfo, status: str, seq: int | None, interval_ms: int | None = None) -> dict[str, Any]:
    """Spark's ``/streaming/batches`` entry of ``info``, plus our per-input records and raw times."""
    ops = info.output_operation_infos.values()
    failed = [op for op in ops if op.failure_reason is not None]
    done = [op for op in ops if op.end_time is not None]
    started = [op for op in ops if op.start_time is not None and op.end_time is None]
    first_failure = failed[0].failure_reason if failed else None
    return {
        "seq": seq,
        "batchId": info.batch_time.milliseconds,
        "batchTime": iso_date(info.batch_time.milliseconds),
        "status": status,
        "batchDuration": interval_ms,
        "inputSize": info.num_records,
        "inputs": {str(sid): i.num_records for sid, i in info.stream_id_to_input_info.items()},
        "submissionTimeMs": info.submission_time.milliseconds,
        "processingStartTimeMs": ms_of(info.processing_start_time),
        "processingEndTimeMs": ms_of(info.processing_end_time),
        "schedulingDelay": ms_of(info.scheduling_delay),
        "processingTime": ms_of(info.processing_delay),
        "totalDelay": ms_of(info.total_delay),
        "numActiveOutputOps": len(started),
        "numCompletedOutputOps": len(done) - len(failed),
        "numFailedOutputOps": len(failed),
        "numTotalOutputOps": len(info.output_operation_infos),
        "firstFailureReason": headline(first_failure) if first_failure else None,
    }
