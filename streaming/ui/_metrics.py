"""Prometheus metrics of streaming contexts and queries, fed by their listener buses.

A ``StreamingMetrics`` holds the metric families in a registry (its own, or the host's); each
context or query attached to it gets a listener labelled with its name that turns the bus's
events into observations: the three delays of every batch, records, batches, failures, receiver
events, checkpoint write times, epochs. The listener queues and drops of each attached bus are read
when the registry is scraped. Spark has no Prometheus view of DStream batches at all; the names
follow Prometheus' conventions (base units, ``_total`` counters).
"""

from __future__ import annotations

import bisect
import collections
import threading
import weakref
from typing import Any, Callable, Iterable, Mapping, Sequence, cast

from listeners import (
    BatchCompleted,
    BatchRecord,
    ListenerBusStatistics,
    ProgressItem,
    QueryProgress,
    ReceiverError,
    ReceiverStarted,
    ReceiverStopped,
    StreamingListenerBus,
)
from scheduler import JobSet

from ..runtime import StreamingContextState
from ._extras import require
from ._histogram import Histogram
from ._history import ContextHistory, check_retained
from ._prometheus_app import guarded

__all__ = ["DELAY_BUCKETS_S", "StreamingMetrics"]

DELAY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Histogram buckets of the delays, in seconds: from a few ms (continuous epochs, tiny batches) to minutes (a backlog)."""

_CHECKPOINT_PHASES = {"walCommit": "offsets", "commitOffsets": "commits"}  # fold_progress inlines these two


class _QueryState:
    """Everything recorded for one attached context or query."""

    def __init__(self, query: str, base: str | None = None, *, named: bool = True) -> None:
        self.query = query
        self.base = query if base is None else base  # the name its label was made from (a label may be base-2)
        self.named = named  # a name of its own (a restart continues its series), or a context-<n> label
        self.swept = False  # seen stopped by the collector's sweep (and retired then)
        self.scheduling = Histogram(DELAY_BUCKETS_S)
        self.processing = Histogram(DELAY_BUCKETS_S)
        self.total = Histogram(DELAY_BUCKETS_S)
        self.delays = {"scheduling": self.scheduling, "processing": self.processing, "total": self.total}
        self.batches = {"succeeded": 0, "failed": 0}
        self.output_operations = {"succeeded": 0, "failed": 0}
        self.records: dict[int, int] = {}  # by stream id; its label is the id's text
        self.receiver_events: dict[tuple[str, str], int] = {}
        self.checkpoint_write = {log: Histogram(_CHECKPOINT_BUCKETS_S) for log in _CHECKPOINT_PHASES.values()}
        self.query_rows = 0
        self.progress_reports = 0
        self.bus: Callable[[], ListenerBusStatistics] | None = None
        # With a micro-batch runtime's bus: its batches and progress reports are read from the
        # bus's logs when the registry is scraped, not taken as events (see _fold_batches).
        self.readers: list[Callable[[], None]] = []
        # Whether what feeds this state may still run: a stopped one's label can be continued.
        self.live: Callable[[], bool] = lambda: True
        # The listener counters of the stopped runs this state continues, by listener name.
        self.retired_listeners: dict[str, tuple[int, int, int]] = {}

    def catch_up(self) -> None:
        """Fold what the bus's logs hold that was not folded yet (before a scrape reads the values)."""
        for catch_up in self.readers:
            catch_up()

    def retire(self) -> None:
        """The run feeding this state stopped and another continues it: fold its last entries and keep its listeners' counts."""
        self.catch_up()
        self.readers = []
        self.retired_listeners = self.listener_counts()
        self.bus = None

    def listener_counts(self) -> dict[str, tuple[int, int, int]]:
        """Queued, dropped and failed events by listener name, the stopped runs' added in."""
        counts = dict(self.retired_listeners)
        for listener in self.bus().listeners if self.bus is not None else ():
            queued, dropped, failed = counts.get(listener.name, (0, 0, 0))
            counts[listener.name] = (queued + listener.queued, dropped + listener.dropped, failed + listener.failed)
        return counts

    def fold_batches(self, batches: Sequence[JobSet | BatchRecord]) -> None:
        """Observe completed batches read from a batch log (its items, oldest first): what ``on_batch_completed`` does per
        event, in one loop.

        The histograms' observations are inlined (``Histogram.observe_ms``: the bucket's count, then
        the sum in whole milliseconds). A succeeded batch whose three delays all fall in the first
        bucket (most of them: a few ms) costs one count; the others are observed one by one.
        """
        limits = self.scheduling.limits
        for histogram in (self.processing, self.total):
            assert histogram.limits == limits
        scheduling, processing, total = self.scheduling.counts, self.processing.counts, self.total.counts
        # The run's sums start at 0 and are added once at the end: a sum of a run's few-ms delays
        # stays a small int (no allocation per add), where the whole history's sums never are.
        # A succeeded batch adds its scheduling and total delays; its processing delay is their
        # difference, so the run's processing sum is the difference of the two sums, plus
        # ``processing_extra`` (the scheduling delay of a batch that never ended, which has no other).
        scheduling_sum = total_sum = processing_extra = 0
        bucket = bisect.bisect_left
        first = limits[0]
        records = self.records
        # Counted down for a failed batch, not up for each one; the batches whose delays all fall in
        # the first buckets counted in a local and added once at the end.
        completed, failed, succeeded, failed_operations = len(batches), 0, 0, 0
        firsts = 0
        last_input: int | None = None
        last_records = 0
        # Typed Any: the common case is told by its attributes, not by a type test. A succeeded batch (a
        # JobSet, see BatchEntry) that started and ended is nearly every batch; a failed batch's
        # BatchRecord has no submission_time, and a JobSet's time not reached is None: both raise
        # AttributeError (once per such batch) and take the general path below.
        for batch in cast("Sequence[Any]", batches):
            try:
                submitted = batch.submission_time.milliseconds
                scheduled = batch.processing_start.milliseconds - submitted
                value = batch.processing_end.milliseconds - submitted
            except AttributeError:
                pass
            else:
                scheduling_sum += scheduled
                total_sum += value
                # With both delays at least 0 (so at most the total, their sum), a total in the first
                # bucket puts all three there.
                if value <= first and scheduled >= 0 and scheduled <= value:
                    firsts += 1
                else:
                    scheduling[0 if scheduled <= first else bucket(limits, scheduled)] += 1
                    total[0 if value <= first else bucket(limits, value)] += 1
                    value -= scheduled
                    processing[0 if value <= first else bucket(limits, value)] += 1
                succeeded += len(batch.jobs)
                # Summed in a local while the batches' one input is the same (the common case): the
                # records dict is updated when another input comes, and at the end.
                infos = batch.input_infos
                if len(infos) == 1 and last_input in infos:
                    last_records += infos[last_input].num_records
                    continue
                for stream_id in infos:  # the keys, then a lookup: no items iterator or tuple per input
                    if stream_id != last_input:
                        if last_input is not None:
                            records[last_input] = records.get(last_input, 0) + last_records
                        last_input, last_records = stream_id, 0
                    last_records += infos[stream_id].num_records
                continue
            if type(batch) is JobSet:
                start, end = batch.processing_start, batch.processing_end
                submitted = batch.submission_time.milliseconds
                began = None if start is None else start.milliseconds
                ended = None if end is None else end.milliseconds
                failures, operations, inputs = 0, len(batch.jobs), batch.input_infos
            else:
                assert isinstance(batch, BatchRecord)
                submitted, began, ended = batch.submission_ms, batch.processing_start_ms, batch.processing_end_ms
                failures, operations, inputs = batch.failures, len(batch.operations), batch.stream_id_to_input_info
            if began is not None:
                value = began - submitted
                scheduling[0 if value <= first else bucket(limits, value)] += 1
                scheduling_sum += value
                if ended is None:
                    processing_extra += value
                else:
                    value = ended - began
                    processing[0 if value <= first else bucket(limits, value)] += 1
                    value = ended - submitted
                    total[0 if value <= first else bucket(limits, value)] += 1
                    total_sum += value
            if failures:
                failed += 1
                completed -= 1
                failed_operations += failures
            succeeded += operations - failures
            for stream_id, input_info in inputs.items():
                records[stream_id] = records.get(stream_id, 0) + input_info.num_records
        if last_input is not None:
            records[last_input] = records.get(last_input, 0) + last_records
        scheduling[0] += firsts
        processing[0] += firsts
        total[0] += firsts
        self.scheduling.sum_ms += scheduling_sum
        self.processing.sum_ms += total_sum - scheduling_sum + processing_extra
        self.total.sum_ms += total_sum
        self.batches["succeeded"] += completed
        self.batches["failed"] += failed
        self.output_operations["succeeded"] += succeeded
        self.output_operations["failed"] += failed_operations

    @property
    def first_ms(self) -> int:
        """The delays' first bucket's bound in whole ms (see :class:`~streaming.ui._kept_batches.RunFold`)."""
        return self.scheduling.limits[0]

    def fold_simple(self, count: int, firsts: int, scheduling_sum: int, total_sum: int, others: list[tuple[int, int]],
                    records: dict[int, int]) -> None:
        """Observe ``count`` succeeded one-job batches that started and ended, summed by the UI history's pass over them.

        What :meth:`fold_batches` does for them: ``firsts`` have all three delays in the first
        bucket; ``others`` are the rest's (scheduling, total) delays; the sums are over all of them.
        """
        scheduling, processing, total = self.scheduling.counts, self.processing.counts, self.total.counts
        limits = self.scheduling.limits
        first = limits[0]
        bucket = bisect.bisect_left
        for scheduled, value in others:
            scheduling[0 if scheduled <= first else bucket(limits, scheduled)] += 1
            total[0 if value <= first else bucket(limits, value)] += 1
            value -= scheduled
            processing[0 if value <= first else bucket(limits, value)] += 1
        scheduling[0] += firsts
        processing[0] += firsts
        total[0] += firsts
        self.scheduling.sum_ms += scheduling_sum
        self.processing.sum_ms += total_sum - scheduling_sum
        self.total.sum_ms += total_sum
        self.batches["succeeded"] += count
        self.output_operations["succeeded"] += count
        kept = self.records
        for stream_id, n in records.items():
            kept[stream_id] = kept.get(stream_id, 0) + n

    def fold_progress(self, reports: Sequence[ProgressItem]) -> None:
        """Observe progress reports read from a progress log (its items, oldest first; none of them is built)."""
        # observe_progress, inline (the histograms' too: a bucket's count, then the sum in whole milliseconds).
        offsets, commits = self.checkpoint_write["offsets"], self.checkpoint_write["commits"]
        limits = offsets.limits
        offsets_counts, commits_counts = offsets.counts, commits.counts
        offsets_sum = commits_sum = 0  # the run's, added at the end (small ints: see fold_batches)
        bucket = bisect.bisect_left
        first = limits[0]
        rows_total = 0
        # A report whose writes both took no whole ms (in memory, and mostly on disk) adds nothing to the
        # sums and is in the first buckets: only its rows are read and it is counted at the end, as the
        # reports not counted otherwise (as in fold_batches: counted in a local, added once).
        counted = 0
        for _, rows, durations in reports:
            rows_total += rows
            try:  # a micro-batch query's report always has both phases: read without a test first
                wal, commit = durations["walCommit"], durations["commitOffsets"]
            except KeyError:  # a phase missing: each one that is there, on its own
                counted += 1
                if "walCommit" in durations:
                    wal = durations["walCommit"]
                    offsets_counts[0 if wal <= first else bucket(limits, wal)] += 1
                    offsets_sum += wal
                if "commitOffsets" in durations:
                    commit = durations["commitOffsets"]
                    commits_counts[0 if commit <= first else bucket(limits, commit)] += 1
                    commits_sum += commit
                continue
            if wal or commit:
                offsets_sum += wal
                commits_sum += commit
                if wal > first or commit > first:
                    counted += 1
                    offsets_counts[0 if wal <= first else bucket(limits, wal)] += 1
                    commits_counts[0 if commit <= first else bucket(limits, commit)] += 1
        firsts = len(reports) - counted
        offsets_counts[0] += firsts
        commits_counts[0] += firsts
        offsets.sum_ms += offsets_sum
        commits.sum_ms += commits_sum
        self.progress_reports += len(reports)
        self.query_rows += rows_total

    def observe_progress(self, rows: int, durations: Mapping[str, int]) -> None:
        """One progress report: its rows and its offsets/commits write times."""
        self.progress_reports += 1
        self.query_rows += rows
        for phase, log in _CHECKPOINT_PHASES.items():
            ms = durations.get(phase)
            if ms is not None:
                self.checkpoint_write[log].observe_ms(ms)


_CHECKPOINT_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


def _running() -> bool:
    return True


def _stopped() -> bool:
    return False


class _Collector:
    """Turns every query's state into Prometheus metric families when the registry is scraped."""

    def __init__(self, prometheus: Any, retained_unnamed: int) -> None:
        self._core = prometheus.metrics_core
        self._lock = threading.RLock()  # claim sweeps under it too
        self.queries: list[_QueryState] = []
        self.retained_unnamed = retained_unnamed
        self._stopped_unnamed: collections.deque[_QueryState] = collections.deque()  # oldest seen stopped first

    def sweep(self) -> None:
        """Retire the runs seen stopped (their last entries folded, their bus and logs let go of); beyond
        ``retained_unnamed`` stopped runs without a name of their own, drop the oldest one's series."""
        with self._lock:
            for state in self.queries:
                if not state.swept and not state.live():
                    state.swept, state.live = True, _stopped
                    state.retire()
                    if not state.named:
                        self._stopped_unnamed.append(state)
            while len(self._stopped_unnamed) > self.retained_unnamed:
                self.queries.remove(self._stopped_unnamed.popleft())

    def claim(self, base: str, live: Callable[[], bool], named: bool = True) -> tuple[_QueryState, bool]:
        """The state of a new run named ``base`` that is live while ``live()``, and whether it continues a stopped run's.

        Its label is the first of ``base``, ``base-2``, ... that no live run holds and no stopped run of another name
        holds (a context named ``q-2`` never continues the second ``q``'s series); all under the lock, so two runs
        claiming at once never share a label.
        """
        with self._lock:
            self.sweep()
            by_label = {state.query: state for state in self.queries}
            label, n = base, 1
            while label in by_label and (by_label[label].live() or by_label[label].base != base):
                n += 1
                label = f"{base}-{n}"
            state = by_label.get(label)
            continued = state is not None
            if state is None:
                state = _QueryState(label, base, named=named)
                self.queries.append(state)
            elif state in self._stopped_unnamed:
                self._stopped_unnamed.remove(state)
            state.live, state.swept = live, False
        return state, continued

    def collect(self) -> Iterable[Any]:
        core = self._core
        with self._lock:
            self.sweep()
            queries = list(self.queries)
        for state in queries:
            state.catch_up()
        helps = {"scheduling": "Batch submission to the start of its first job",
                 "processing": "First job's start to the last job's end of a batch",
                 "total": "Batch submission to its last job's end"}
        delays = {kind: core.HistogramMetricFamily(f"aiodstream_batch_{kind}_delay_seconds", text, labels=["query"])
                  for kind, text in helps.items()}
        batches = core.CounterMetricFamily("aiodstream_batches", "Completed batches, by outcome: failed (an output operation "
                                           "failed) or succeeded", labels=["query", "outcome"])
        records = core.CounterMetricFamily("aiodstream_input_records", "Records the batches took from each input",
                                           labels=["query", "input"])
        operations = core.CounterMetricFamily("aiodstream_output_operations", "Finished output operations, by outcome",
                                              labels=["query", "outcome"])
        receivers = core.CounterMetricFamily("aiodstream_receiver_events", "Receiver starts, errors and stops",
                                             labels=["query", "receiver", "event"])
        checkpoint = core.HistogramMetricFamily("aiodstream_checkpoint_write_seconds",
                                                "Writing a batch's or epoch's offsets or commits entry", labels=["query", "log"])
        rows = core.CounterMetricFamily("aiodstream_query_input_rows", "Rows read per progress report (batches or epochs)",
                                        labels=["query"])
        reports = core.CounterMetricFamily("aiodstream_query_progress_reports", "Progress reports (one per batch or epoch)",
                                           labels=["query"])
        queued = core.GaugeMetricFamily("aiodstream_listener_queue_events", "Events waiting in a listener's queue",
                                        labels=["query", "listener"])
        dropped = core.CounterMetricFamily("aiodstream_listener_dropped_events", "Events a full listener queue dropped",
                                           labels=["query", "listener"])
        failed = core.CounterMetricFamily("aiodstream_listener_failed_events", "Events whose callback raised",
                                          labels=["query", "listener"])
        for state in queries:
            q = state.query
            for kind, histogram in state.delays.items():
                delays[kind].add_metric([q], histogram.buckets(), histogram.sum)
            for outcome, n in state.batches.items():
                batches.add_metric([q, outcome], n)
            for outcome, n in state.output_operations.items():
                operations.add_metric([q, outcome], n)
            for input_name, n in sorted((str(stream_id), n) for stream_id, n in list(state.records.items())):
                records.add_metric([q, input_name], n)
            for (receiver, event), n in sorted(state.receiver_events.items()):
                receivers.add_metric([q, receiver, event], n)
            for log, histogram in state.checkpoint_write.items():
                checkpoint.add_metric([q, log], histogram.buckets(), histogram.sum)
            rows.add_metric([q], state.query_rows)
            reports.add_metric([q], state.progress_reports)
            for listener, (waiting, lost, raised) in state.listener_counts().items():
                queued.add_metric([q, listener], waiting)
                dropped.add_metric([q, listener], lost)
                failed.add_metric([q, listener], raised)
        yield from (*delays.values(), batches, records, operations, receivers, checkpoint, rows, reports, queued, dropped,
                    failed)


class StreamingMetrics:
    """Prometheus metrics for the contexts and queries attached to it.

    ::

        metrics = StreamingMetrics()            # or StreamingMetrics(registry=your_registry)
        metrics.attach(ssc)                      # a StreamingContext, a runtime or a continuous query
        app = metrics.asgi_app()                 # mount at /metrics in the host's ASGI server

    Each attached one is labelled ``query=<its name>`` (``queryName``, else ``context-<n>``).
    Two that run at once never share a label: the second of a name is ``<name>-2``, then ``-3``,
    ... A context attached under the label of one that has stopped (a restart of the same query
    in the same process) continues its series: counters and histograms go on from the stopped
    one's values, and its listeners' counters are added to the new run's of the same listener
    name.
    Attach before start to see every batch. Observations are plain arithmetic on the event loop
    (about a microsecond per batch); the metric families are built when the registry is scraped.

    Args:
        registry: a ``prometheus_client.CollectorRegistry`` to register in (default: a new one,
            not the process's global registry, so several hosts' metrics never collide).
        retained_unnamed: the stopped ``context-<n>`` series kept, the oldest dropped beyond it (as Spark's
            metrics system removes a stopped query's source); a named one's are kept for a restart to continue.
    """

    def __init__(self, registry: Any = None, *, retained_unnamed: int = 100) -> None:
        """Register the collector in ``registry``."""
        prometheus = require("prometheus_client", "streaming.ui's metrics")
        check_retained(retained_unnamed=retained_unnamed)
        self.registry = registry if registry is not None else prometheus.CollectorRegistry(auto_describe=True)
        self._collector = _Collector(prometheus, retained_unnamed)
        self.registry.register(self._collector)
        self._attached = 0
        self._prometheus = prometheus

    def listener(self, query: str) -> _QueryMetrics:
        """A listener recording ``query``'s events (for hosts that register listeners themselves).

        Its label is ``query``, or ``query-2``, ... when a context attached under that name still
        runs (its ``state.query``); a listener made for a name is never seen to stop, so a second one
        for the same name gets a label of its own.
        """
        return _QueryMetrics(self._state(query, None))

    def _state(self, base: str, runtime: Any, named: bool = True) -> _QueryState:
        """The state recording a run named ``base`` of ``runtime``: a new one, or the one of a stopped run of that label, continued."""
        live: Callable[[], bool] = _running
        if runtime is not None and hasattr(runtime, "state"):
            # Read through a weak reference: the metrics of a stopped run keep its values, not its engine.
            engine = weakref.ref(runtime)

            def live() -> bool:
                current = engine()
                return current is not None and current.state is not StreamingContextState.STOPPED

        state, continued = self._collector.claim(base, live, named)
        if continued:
            state.retire()
        return state

    def attach(self, target: Any, *, name: str | None = None, history: ContextHistory | None = None,
               default_name: str | None = None) -> str:
        """Record ``target``'s events from now on; return its ``query`` label.

        ``target`` is a ``StreamingContext``, a ``StreamingRuntime`` or a ``ContinuousExecution``
        (anything with ``add_listener``, or a context's ``addStreamingListener``). ``history``: a
        web UI's history of the same target (:meth:`StreamingUI.attach` passes its own); when it
        reads the bus's batch log, its one pass over each run of batches folds them into these
        metrics too, instead of a second reader of the log. ``default_name``: the label of a ``target``
        without a name (default ``context-<n>``; the UI passes its own label).

        Once the run is seen stopped (at the next attach or scrape) its last batches are folded in and
        its bus let go of; an unnamed one's series leave after ``retained_unnamed`` newer stopped ones.
        """
        self._attached += 1
        given = name or getattr(target, "name", None)
        base = str(given or default_name or f"context-{self._attached}")
        runtime = target.runtime if hasattr(target, "addStreamingListener") else target
        state = self._state(base, runtime, named=bool(given))
        label = state.query
        bus = getattr(runtime, "listener_bus", None)
        recorder: _QueryMetrics = _QueryMetrics(state)
        if isinstance(bus, StreamingListenerBus) and getattr(runtime, "kind", None) == "micro-batch":
            # A micro-batch runtime's bus keeps its batches and progress reports in logs: they
            # are folded in when the registry is scraped (and when a log would otherwise drop one
            # not folded yet), so the metrics cost the engine no event and no call per batch.
            batches, progress = bus.batch_log(), bus.progress_log()
            progress_reader = progress.reader(state.fold_progress, numbered=False)
            if history is not None and history.fold_into(state):
                catch_up_batches: Callable[[], None] = history.catch_up
            else:
                batch_reader = batches.reader(state.fold_batches, numbered=False)

                def catch_up_batches() -> None:
                    batches.catch_up(batch_reader)

            state.readers = [catch_up_batches, lambda: progress.catch_up(progress_reader)]
            recorder = _LoggedQueryMetrics(state)
        if hasattr(target, "addStreamingListener"):
            target.addStreamingListener(recorder)
        else:
            target.add_listener(recorder, name="StreamingMetrics")
        if bus is not None:
            state.bus = bus.statistics
        return label

    def asgi_app(self) -> Any:
        """An ASGI app serving the registry in Prometheus' text format (any path; mount it at ``/metrics``); a request
        prometheus_client cannot read gets a 400 (see :func:`guarded`)."""
        return guarded(self._prometheus.make_asgi_app(registry=self.registry))

    def scrape(self) -> str:
        """The registry in Prometheus' text format, now."""
        return str(self._prometheus.generate_latest(self.registry).decode("utf-8"))


class _QueryMetrics:
    """The listener of one attached context or query."""

    run_inline = True  # plain arithmetic: called inside post, no queue, no task switch

    def __init__(self, state: _QueryState) -> None:
        self.state = state

    def on_batch_completed(self, event: BatchCompleted) -> None:
        # Called for every batch, inside the bus's post: plain int arithmetic on the event's
        # BatchRecord (its BatchInfo is never built here), records keyed by stream id (its
        # label text is made when the registry is scraped). Output
        # operations are counted from the record's tuple of them and its failure count: one event
        # per batch instead of one more per output operation.
        info, state = event.record, self.state
        began = info.processing_start_ms
        if began is not None:
            submitted = info.submission_ms
            state.scheduling.observe_ms(began - submitted)
            ended = info.processing_end_ms
            if ended is not None:
                state.processing.observe_ms(ended - began)
                state.total.observe_ms(ended - submitted)
        operations = info.operations
        failures = info.failures
        if failures:
            state.batches["failed"] += 1
            state.output_operations["failed"] += failures
        else:
            state.batches["succeeded"] += 1
        state.output_operations["succeeded"] += len(operations) - failures
        records = state.records
        for stream_id, input_info in info.stream_id_to_input_info.items():
            records[stream_id] = records.get(stream_id, 0) + input_info.num_records

    def _receiver(self, name: str, kind: str) -> None:
        events = self.state.receiver_events
        events[(name, kind)] = events.get((name, kind), 0) + 1

    def on_receiver_started(self, event: ReceiverStarted) -> None:
        self._receiver(event.receiver_info.name, "started")

    def on_receiver_error(self, event: ReceiverError) -> None:
        self._receiver(event.receiver_info.name, "error")

    def on_receiver_stopped(self, event: ReceiverStopped) -> None:
        self._receiver(event.receiver_info.name, "stopped")

    def on_query_progress(self, event: QueryProgress) -> None:
        progress = event.progress
        self.state.observe_progress(progress.num_input_rows, progress.duration_ms)

    def __repr__(self) -> str:
        return f"<StreamingMetrics listener {self.state.query}>"


class _LoggedQueryMetrics(_QueryMetrics):
    """The listener of a micro-batch runtime's metrics: receiver events only; batches and progress come from the bus's logs."""

    # The name the bus's statistics (and so the scrape's listener rows) give it by default, as
    # for the listener that takes every event.
    __qualname__ = "_QueryMetrics"
    on_batch_completed = None  # type: ignore[assignment]
    on_query_progress = None  # type: ignore[assignment]
