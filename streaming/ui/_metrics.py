"""Prometheus metrics of streaming contexts and queries, fed by their listener buses.

A ``StreamingMetrics`` holds the metric families in a registry (its own, or the host's); each
context or query attached to it gets a listener labelled with its name that turns the bus's
events into observations: the three delays of every batch, records, batches, failures, receiver
events, checkpoint write times, epochs. The listener queues and drops of each attached bus are read
when the registry is scraped. Spark has no Prometheus view of DStream batches at all; the names
follow Prometheus' conventions (base units, ``_total`` counters).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from listeners import (
    BatchCompleted,
    ListenerBusStatistics,
    OutputOperationCompleted,
    QueryProgress,
    ReceiverError,
    ReceiverStarted,
    ReceiverStopped,
)

__all__ = ["DELAY_BUCKETS_S", "StreamingMetrics"]

DELAY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Histogram buckets of the delays, in seconds: from a few ms (continuous epochs, tiny batches) to minutes (a backlog)."""

_CHECKPOINT_PHASES = {"walCommit": "offsets", "commitOffsets": "commits"}


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:  # pragma: no cover - the extra is part of the test setup
        raise ImportError("streaming.ui's metrics need prometheus_client: pip install 'aiodstream[ui]'") from exc
    return prometheus_client


class _BusCollector:
    """Reads every watched bus's statistics at scrape time (queue depth, drops, failures per listener)."""

    def __init__(self, prometheus: Any) -> None:
        self._prometheus = prometheus
        self._lock = threading.Lock()
        self._buses: dict[str, Callable[[], ListenerBusStatistics]] = {}

    def watch(self, query: str, statistics: Callable[[], ListenerBusStatistics]) -> None:
        with self._lock:
            self._buses[query] = statistics

    def collect(self) -> Iterable[Any]:
        core = self._prometheus.metrics_core
        queued = core.GaugeMetricFamily("aiodstream_listener_queue_events", "Events waiting in a listener's queue",
                                        labels=["query", "listener"])
        dropped = core.CounterMetricFamily("aiodstream_listener_dropped_events", "Events a full listener queue dropped",
                                           labels=["query", "listener"])
        failed = core.CounterMetricFamily("aiodstream_listener_failed_events", "Events whose callback raised",
                                          labels=["query", "listener"])
        with self._lock:
            buses = list(self._buses.items())
        for query, statistics in buses:
            for listener in statistics().listeners:
                labels = [query, listener.name]
                queued.add_metric(labels, listener.queued)
                dropped.add_metric(labels, listener.dropped)
                failed.add_metric(labels, listener.failed)
        yield from (queued, dropped, failed)


class StreamingMetrics:
    """Prometheus metrics for the contexts and queries attached to it.

    ::

        metrics = StreamingMetrics()            # or StreamingMetrics(registry=your_registry)
        metrics.attach(ssc)                      # a StreamingContext, a runtime or a continuous query
        app = metrics.asgi_app()                 # mount at /metrics in the host's ASGI server

    Each attached one is labelled ``query=<its name>`` (``queryName``, else ``context-<n>``).
    Attach before start to see every batch; observations are made on the event loop (a few
    microseconds per batch).

    Args:
        registry: a ``prometheus_client.CollectorRegistry`` to register in (default: a new one,
            not the process's global registry, so several hosts' metrics never collide).
    """

    def __init__(self, registry: Any = None) -> None:
        """Create the metric families in ``registry``."""
        prometheus = _prometheus()
        self.registry = registry if registry is not None else prometheus.CollectorRegistry(auto_describe=True)
        histogram, counter = prometheus.Histogram, prometheus.Counter
        labels = ["query"]
        self.scheduling_delay = histogram("aiodstream_batch_scheduling_delay_seconds",
                                          "Batch submission to the start of its first job", labels,
                                          buckets=DELAY_BUCKETS_S, registry=self.registry)
        self.processing_delay = histogram("aiodstream_batch_processing_delay_seconds",
                                          "First job's start to the last job's end of a batch", labels,
                                          buckets=DELAY_BUCKETS_S, registry=self.registry)
        self.total_delay = histogram("aiodstream_batch_total_delay_seconds", "Batch submission to its last job's end",
                                     labels, buckets=DELAY_BUCKETS_S, registry=self.registry)
        self.batches = counter("aiodstream_batches", "Completed batches, by outcome (an output operation failed or not)",
                               ["query", "outcome"], registry=self.registry)
        self.records = counter("aiodstream_input_records", "Records the batches took from each input", ["query", "input"],
                               registry=self.registry)
        self.output_operations = counter("aiodstream_output_operations", "Finished output operations, by outcome",
                                         ["query", "outcome"], registry=self.registry)
        self.receiver_events = counter("aiodstream_receiver_events", "Receiver starts, errors and stops",
                                       ["query", "receiver", "event"], registry=self.registry)
        self.checkpoint_write = histogram("aiodstream_checkpoint_write_seconds",
                                          "Writing a batch's or epoch's offsets or commits entry", ["query", "log"],
                                          buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
                                          registry=self.registry)
        self.query_rows = counter("aiodstream_query_input_rows", "Rows read per progress report (batches or epochs)",
                                  labels, registry=self.registry)
        self.progress_reports = counter("aiodstream_query_progress_reports", "Progress reports (one per batch or epoch)",
                                        labels, registry=self.registry)
        self._buses = _BusCollector(prometheus)
        self.registry.register(self._buses)
        self._attached = 0
        self._prometheus = prometheus

    def listener(self, query: str) -> _QueryMetrics:
        """A listener recording ``query``'s events (for hosts that register listeners themselves)."""
        return _QueryMetrics(self, query)

    def attach(self, target: Any, *, name: str | None = None) -> str:
        """Record ``target``'s events from now on; return its ``query`` label.

        ``target`` is a ``StreamingContext``, a ``StreamingRuntime`` or a ``ContinuousExecution``
        (anything with ``add_listener``, or a context's ``addStreamingListener``).
        """
        self._attached += 1
        label = name or getattr(target, "name", None) or f"context-{self._attached}"
        recorder = self.listener(label)
        if hasattr(target, "addStreamingListener"):
            target.addStreamingListener(recorder)
            runtime = target.runtime
        else:
            target.add_listener(recorder, name="StreamingMetrics")
            runtime = target
        bus = getattr(runtime, "listener_bus", None)
        if bus is not None:
            self._buses.watch(label, bus.statistics)
        return str(label)

    def asgi_app(self) -> Any:
        """An ASGI app serving the registry in Prometheus' text format (any path; mount it at ``/metrics``)."""
        return self._prometheus.make_asgi_app(registry=self.registry)

    def scrape(self) -> str:
        """The registry in Prometheus' text format, now."""
        return str(self._prometheus.generate_latest(self.registry).decode("utf-8"))


class _QueryMetrics:
    """The listener of one attached context or query."""

    run_on_loop = True  # a few counter and histogram updates: cheaper than a thread hop

    def __init__(self, metrics: StreamingMetrics, query: str) -> None:
        self._m = metrics
        self._query = query

    def on_batch_completed(self, event: BatchCompleted) -> None:
        info, m, q = event.batch_info, self._m, self._query
        for delay, histogram in ((info.scheduling_delay, m.scheduling_delay), (info.processing_delay, m.processing_delay),
                                 (info.total_delay, m.total_delay)):
            if delay is not None:
                histogram.labels(q).observe(delay.milliseconds / 1000)
        failed = any(op.failure_reason is not None for op in info.output_operation_infos.values())
        m.batches.labels(q, "failed" if failed else "completed").inc()
        for stream_id, input_info in info.stream_id_to_input_info.items():
            m.records.labels(q, str(stream_id)).inc(input_info.num_records)

    def on_output_operation_completed(self, event: OutputOperationCompleted) -> None:
        failed = event.output_operation_info.failure_reason is not None
        self._m.output_operations.labels(self._query, "failed" if failed else "succeeded").inc()

    def _receiver(self, name: str, kind: str) -> None:
        self._m.receiver_events.labels(self._query, name, kind).inc()

    def on_receiver_started(self, event: ReceiverStarted) -> None:
        self._receiver(event.receiver_info.name, "started")

    def on_receiver_error(self, event: ReceiverError) -> None:
        self._receiver(event.receiver_info.name, "error")

    def on_receiver_stopped(self, event: ReceiverStopped) -> None:
        self._receiver(event.receiver_info.name, "stopped")

    def on_query_progress(self, event: QueryProgress) -> None:
        progress, m, q = event.progress, self._m, self._query
        m.progress_reports.labels(q).inc()
        m.query_rows.labels(q).inc(progress.num_input_rows)
        for phase, log in _CHECKPOINT_PHASES.items():
            ms = progress.duration_ms.get(phase)
            if ms is not None:
                m.checkpoint_write.labels(q, log).observe(ms / 1000)

    def __repr__(self) -> str:
        return f"<StreamingMetrics listener {self._query}>"
