"""ProgressReporter: a micro-batch run's status, recent progress and idle-trigger reports (Spark's ``ProgressReporter``).

It builds each committed batch's ``StreamingQueryProgress`` (durations, rates, watermark, state
operators), keeps the recent ones, and applies Spark's rule for triggers that found no new data.
"""

from __future__ import annotations

import functools
import logging
import math
import uuid
from typing import Any, Callable, Mapping, Protocol, Sequence

from .._input_info import StreamInputInfo
from .._job_set import JobSet
from .._protocols import Offset, ReplayableInput
from ._planned_batch import PlannedBatch
from ._progress import SinkProgress, SourceProgress, StreamingQueryProgress, StreamingQueryStatus, format_timestamp
from ._progress_ring import ProgressRing
from ._query_options import ProgressTrackingOptions

__all__ = ["ProgressKeeper", "ProgressReporter", "QueryProgressListener"]


class ProgressKeeper(Protocol):
    """What keeps committed batches' reports for the views that read them when asked (a bus's ``ProgressLog``).

    The reporter appends each report itself, on the query's per-batch path (one Python call fewer
    than an ``append`` method): ``items.append((build, rows, durations))`` (the report's builder,
    called only if a view reads it; its input rows; its phase durations), then ``left -= 1``, and
    :meth:`rest` once ``left`` is 0.
    """

    items: Any
    """Where the reports go: anything with ``append`` (a ``ProgressLog``'s deque)."""

    left: int
    """Reports until the next :meth:`rest`."""

    def rest(self) -> None:
        """Called by the appender when ``left`` reaches 0."""
        ...


class QueryProgressListener(Protocol):
    """Receives the tracker's progress reports (implemented by the runtime, which posts them to the bus)."""

    async def on_query_progress(self, progress: StreamingQueryProgress) -> None:
        """A batch was committed; ``progress`` describes it."""
        ...

    def wants_progress(self) -> bool:
        """Whether a batch's report would reach anyone now: without, the reporter builds none for it."""
        ...

    def progress_keeper(self) -> ProgressKeeper | None:
        """What keeps the committed batches' reports (see :class:`ProgressKeeper`) for the views that read them when
        asked, or ``None`` while no view does; optional.

        Once it gives one, that one serves for the rest of the run (a view that keeps reports keeps
        them until the run ends): the reporter asks no more and appends to it for every batch.
        """
        ...

    async def on_query_idle(self, query_id: uuid.UUID, run_id: uuid.UUID, timestamp: str) -> None:
        """A trigger found no new data and ran no batch (rate-limited as in Spark)."""
        ...


class ProgressReporter:
    """One run's progress: status, the start of the latest trigger, the recent reports, and the listener.

    A committed batch's report is built only when something reads it: the ring keeps its builder
    (see :meth:`ProgressRing.add_deferred`), and the listener gets it built only when it wants
    it. The status is kept as its three values and made a record when read.

    Attributes:
        ring: the recent progress reports.
        last_trigger_start: when the latest trigger started (ms on the clock), or ``None``.
    """

    def __init__(self, options: ProgressTrackingOptions, name: str | None, listener: QueryProgressListener | None,
                 changed: Callable[[], None], log: Any, outputs: Callable[[], Sequence[str]] | None = None) -> None:
        """A reporter for a query named ``name``; ``changed`` is called at every report.

        ``outputs`` names the query's output operations (the graph's optional ``output_names``): an
        idle trigger's progress names them as its sink until a batch of the run has run.
        """
        self._options = options
        self._name = name
        self._listener = listener
        # Optional in the protocol (listeners written before it keep working): None without.
        self._keeper: Callable[[], Any] | None = getattr(listener, "progress_keeper", None)
        self._keep: ProgressKeeper | None = None
        # The inputs whose rows a kept report counts, and their stream ids (taken once per run).
        self._rows_of: Sequence[ReplayableInput] = ()
        self._row_ids: tuple[int, ...] = ()
        self._row_id: int | None = None  # the one input's, if there is one
        self._changed = changed
        self._log = log
        self.ring = ProgressRing(options.num_recent_progress_updates)
        self._status: tuple[str, bool, bool] = ("Initializing StreamExecution", False, False)
        self._status_record: StreamingQueryStatus | None = None
        self.last_trigger_start: int | None = None
        self._last_no_execution_progress: int | None = None  # None: Spark's Long.MinValue
        # The outputs of the last batch reported: an idle trigger's progress names them as its sink, as Spark names the
        # query's sink (before any batch of this run: every output operation the graph has, asked when needed).
        self._sink: str | None = None
        self._outputs = outputs

    def set_status(self, message: str, data_available: bool = False, trigger_active: bool = False) -> None:
        """Set the status (several times a batch: the record is made when :attr:`status` is read)."""
        self._status = (message, data_available, trigger_active)

    @property
    def status(self) -> StreamingQueryStatus:
        """What the query is doing now."""
        values = self._status
        record = self._status_record
        if record is None or (record.message, record.is_data_available, record.is_trigger_active) != values:
            record = self._status_record = StreamingQueryStatus(*values)
        return record

    @property
    def data_available(self) -> bool:
        """The status's ``isDataAvailable``."""
        return self._status[1]

    def trigger_started(self, at_ms: int) -> int | None:
        """A trigger started at ``at_ms``; returns when the one before it started."""
        previous, self.last_trigger_start = self.last_trigger_start, at_ms
        return previous

    async def report_batch(self, batch: PlannedBatch, job_set: JobSet, end_at: int, inputs: Sequence[ReplayableInput],
                           query_id: uuid.UUID, run_id: uuid.UUID, watermark: bool) -> None:
        """Keep the report of a committed batch (with the watermark it ran with, if ``watermark``) and hand it to the listener.

        Nothing of ``batch`` may change after this call: the report is built from it when first read.
        """
        self._last_no_execution_progress = end_at
        # What the report needs of the JobSet, taken now: the ring must not hold the batch's jobs
        # (their functions hold the batch's RDDs) for as long as it keeps the report.
        sink = self._sink = ", ".join([job.name for job in job_set.jobs]) or "no outputs"
        get = self.ring.add_deferred(functools.partial(self._batch_progress, batch, job_set.input_infos, sink, end_at,
                                                       inputs, query_id, run_id, watermark))
        self._changed()
        if self._log.is_enabled_for(logging.DEBUG):
            progress = get()
            self._log.debug("query made progress", batch_id=progress.batch_id, num_input_rows=progress.num_input_rows,
                            duration_ms=dict(progress.duration_ms))
        listener = self._listener
        if listener is not None:
            keep = self._keep
            if keep is None and self._keeper is not None:
                keep = self._keep = self._keeper()
            if keep is not None:  # the web UI's and the metrics' log: read when they are asked
                infos = job_set.input_infos
                if inputs is not self._rows_of:  # the run's inputs: their stream ids taken once
                    self._rows_of, self._row_ids = inputs, tuple(source.stream_id for source in inputs)
                    self._row_id = self._row_ids[0] if len(self._row_ids) == 1 else None
                stream_id = self._row_id
                if stream_id is not None:  # one input (the common case): a test and a lookup, no loop
                    rows = infos[stream_id].num_records if stream_id in infos else 0
                else:
                    rows = 0
                    for stream_id in self._row_ids:
                        if stream_id in infos:
                            rows += infos[stream_id].num_records
                # ProgressKeeper's append, inline: this is the query's per-batch path.
                keep.items.append((get, rows, batch.durations))
                keep.left -= 1
                if not keep.left:
                    keep.rest()
            if listener.wants_progress():
                await listener.on_query_progress(get())

    def _batch_progress(self, batch: PlannedBatch, infos: Mapping[int, StreamInputInfo], sink: str, end_at: int,
                        inputs: Sequence[ReplayableInput], query_id: uuid.UUID, run_id: uuid.UUID,
                        watermark: bool) -> StreamingQueryProgress:
        sources = []
        for i, source in enumerate(inputs):
            info = infos.get(source.stream_id)
            rows = info.num_records if info is not None else 0
            input_rate, processed = _rates(rows, batch, end_at)
            latest = None if not source.reports_latest else batch.latest[i] if batch.latest is not None else batch.end[i]
            sources.append(SourceProgress(source.description, batch.start[i], batch.end[i], latest, rows, input_rate, processed))
        event_time: dict[str, str] = {}
        if batch.event_time is not None:
            seen = batch.event_time
            event_time.update(avg=format_timestamp(seen.avg_ms), max=format_timestamp(seen.max_ms),
                              min=format_timestamp(seen.min_ms))
        if watermark:
            event_time["watermark"] = format_timestamp(batch.watermarks.eviction_ms)
        return StreamingQueryProgress(
            query_id, run_id, self._name, format_timestamp(batch.trigger_start), batch.batch_id,
            end_at - batch.trigger_start, dict(batch.durations), tuple(sources), SinkProgress(sink), event_time,
            batch_time_ms=batch.time.milliseconds, state_operators=batch.state_operators,
        )

    async def idle_trigger(self, start_ms: int, end_ms: int, next_id: int, inputs: Sequence[ReplayableInput],
                           last_end: Sequence[Offset], latest: Sequence[Offset], query_id: uuid.UUID,
                           run_id: uuid.UUID) -> None:
        """A trigger from ``start_ms`` to ``end_ms`` found no new data: record it (Spark's rules).

        It gets a progress entry (at most one per ``noDataProgressEventInterval``) and, once
        something was recorded in this run, an idle report to the listener.
        """
        self.last_trigger_start = start_ms
        self.set_status("Waiting for data to arrive")
        last = self._last_no_execution_progress
        if last is not None and end_ms - self._options.no_data_progress_event_interval_ms < last:
            return
        sources = tuple(SourceProgress(s.description, last_end[i], last_end[i], latest[i] if s.reports_latest else None, 0, 0.0, 0.0)
                        for i, s in enumerate(inputs))
        sink = self._sink
        if sink is None:
            sink = ", ".join(self._outputs()) if self._outputs is not None else ""
            sink = sink or "no outputs"
        self.ring.add(StreamingQueryProgress(
            query_id, run_id, self._name, format_timestamp(start_ms), next_id, end_ms - start_ms,
            {"latestOffset": end_ms - start_ms, "triggerExecution": end_ms - start_ms}, sources, SinkProgress(sink),
        ))
        if last is not None and self._listener is not None:
            await self._listener.on_query_idle(query_id, run_id, format_timestamp(start_ms))
        self._last_no_execution_progress = end_ms


def _rates(rows: int, batch: PlannedBatch, end_at: int) -> tuple[float, float]:
    previous = batch.previous_trigger_start
    if previous is None:
        input_rate = 0.0  # first trigger of the run: Spark divides by an infinite interval
    else:
        elapsed = (batch.trigger_start - previous) / 1000
        input_rate = rows / elapsed if elapsed > 0 else (math.inf if rows else math.nan)
    processed = rows / (max(1, end_at - batch.trigger_start) / 1000)
    return input_rate, processed
