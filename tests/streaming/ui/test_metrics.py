"""Prometheus metrics: the scraped values match the batches and progress reports the bus delivered."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from listeners import BatchCompleted, BatchInfo, BatchRecord, EventRecorder, QueryProgress
from scheduler import Job, JobSet, ManualClock, Milliseconds, Seconds, StreamInputInfo, Time
from streaming import Batch, ListSource, Pipeline, StreamingRuntime
from streaming.ui import StreamingMetrics, StreamingUI
from tests.support import advance, holds, wait_until

pytestmark = pytest.mark.anyio


async def scrape(app: Any, headers: list[tuple[bytes, bytes]] | None = None, query: bytes = b"",
                 kind: str = "http") -> tuple[int, str, dict[str, str]]:
    """GET the ASGI app as a Prometheus server would; return status, body and headers."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": kind, "method": "GET", "path": "/metrics", "query_string": query, "headers": headers or [],
             "http_version": "1.1", "scheme": "http", "root_path": ""}
    await app(scope, receive, send)
    if kind == "websocket":
        return sent[0]["code"], "", {}
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
    return start["status"], body, {k.decode().lower(): v.decode() for k, v in start["headers"]}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def pipeline(records_per_batch: list[int], fail_at: int | None = None) -> Pipeline:
    p = Pipeline()
    calls = iter(records_per_batch)
    p.add_source(lambda t: list(range(next(calls, 0))), name="numbers")

    def output(batch: Batch) -> None:
        if fail_at is not None and batch.time.milliseconds == fail_at:
            raise RuntimeError("output failed")

    p.add_output(output, name="out")
    return p


async def test_scraped_delays_records_and_batches_match_the_delivered_batches(clock: ManualClock) -> None:
    """Histogram counts and sums, record and batch counters equal what BatchCompleted reported, scraped while running."""
    metrics = StreamingMetrics()
    recorder = EventRecorder()
    async with StreamingRuntime(pipeline([3, 5, 0, 7], fail_at=3000), Seconds(1), clock=clock, name="numbers") as runtime:
        label = metrics.attach(runtime)
        runtime.add_listener(recorder)
        await runtime.start()
        await advance(runtime, clock, Seconds(4))
        status, body, headers = await scrape(metrics.asgi_app())
        assert runtime.is_active  # scraped during the run
        await runtime.stop()
    assert label == "numbers"
    assert status == 200 and headers["content-type"].startswith("text/plain")
    found = samples(body)
    batches = recorder.completed_batches
    assert len(batches) == 4
    failed = sum(1 for b in batches if any(op.failure_reason for op in b.output_operation_infos.values()))
    assert failed == 1
    assert value(found, "aiodstream_batches_total", query="numbers", outcome="succeeded") == 3
    assert value(found, "aiodstream_batches_total", query="numbers", outcome="failed") == 1
    assert value(found, "aiodstream_output_operations_total", query="numbers", outcome="failed") == 1
    assert value(found, "aiodstream_input_records_total", query="numbers", input="0") == 15 == sum(
        i.num_records for b in batches for i in b.stream_id_to_input_info.values())
    for kind, attribute in (("scheduling", "scheduling_delay"), ("processing", "processing_delay"), ("total", "total_delay")):
        delays = [getattr(b, attribute).milliseconds / 1000 for b in batches]
        assert value(found, f"aiodstream_batch_{kind}_delay_seconds_count", query="numbers") == len(delays)
        assert value(found, f"aiodstream_batch_{kind}_delay_seconds_sum", query="numbers") == pytest.approx(sum(delays))
    assert ("aiodstream_listener_queue_events", (("listener", "StreamingMetrics"), ("query", "numbers"))) in found


async def test_checkpointed_progress_feeds_rows_and_checkpoint_write_times(tmp_path: Path, clock: ManualClock) -> None:
    """Each progress report adds its rows and its offsets/commits write times."""
    metrics = StreamingMetrics(registry=CollectorRegistry())
    recorder = EventRecorder()
    p = Pipeline()
    p.add_source(ListSource([[1, 2], [3], [4, 5, 6]]), name="list")
    p.add_output(lambda batch: None, name="noop")
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path / "ck", name="listed") as runtime:
        metrics.attach(runtime)
        runtime.add_listener(recorder)
        await runtime.start()
        await advance(runtime, clock, Milliseconds(300))
        await wait_until(lambda: len(recorder.of_type(QueryProgress)) >= 3)
        await runtime.listener_bus.wait_delivered()
        found = samples(metrics.scrape())
        progress = [e.progress for e in recorder.of_type(QueryProgress)]  # type: ignore[attr-defined]
        await runtime.stop()
    assert value(found, "aiodstream_query_progress_reports_total", query="listed") == len(progress)
    rows = sum(p.num_input_rows for p in progress)
    assert rows > 0 and value(found, "aiodstream_query_input_rows_total", query="listed") == rows
    assert value(found, "aiodstream_checkpoint_write_seconds_count", query="listed", log="offsets") >= 3
    assert value(found, "aiodstream_checkpoint_write_seconds_count", query="listed", log="commits") >= 3


async def test_two_contexts_in_one_registry_are_told_apart(clock: ManualClock) -> None:
    """Unnamed attachments get their own labels; the host's registry holds both."""
    registry = CollectorRegistry()
    metrics = StreamingMetrics(registry=registry)
    async with StreamingRuntime(pipeline([1, 1]), Seconds(1), clock=clock) as a, \
            StreamingRuntime(pipeline([2, 2]), Seconds(1), clock=clock) as b:
        labels = [metrics.attach(a), metrics.attach(b)]
        await a.start()
        await b.start()
        await advance(a, clock, Seconds(2))
        await b.wait_until_idle()
        await anyio.lowlevel.checkpoint()
        found = samples(metrics.scrape())
        await a.stop()
        await b.stop()
    assert labels == ["context-1", "context-2"]
    assert value(found, "aiodstream_input_records_total", query="context-1", input="0") == 2
    assert value(found, "aiodstream_input_records_total", query="context-2", input="0") == 4


class _Quiet:
    def on_batch_completed(self, event: BatchCompleted) -> None:
        """Nothing."""


def series(text: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    return [(s.name, tuple(sorted(s.labels.items()))) for f in text_string_to_metric_families(text) for s in f.samples]


async def test_two_listeners_of_one_class_have_a_series_each(clock: ManualClock) -> None:
    """The listener rows of two listeners with one name are labelled by the bus's names for them: no series twice."""
    metrics = StreamingMetrics()
    async with StreamingRuntime(pipeline([1]), Seconds(1), clock=clock, name="q") as runtime:
        metrics.attach(runtime)
        runtime.add_listener(_Quiet())
        runtime.add_listener(_Quiet())
        text = metrics.scrape()
    found = series(text)
    assert len(found) == len(set(found))
    assert sorted(dict(labels)["listener"] for name, labels in found if name == "aiodstream_listener_queue_events") == [
        "StreamingMetrics", "_Quiet", "_Quiet-2"]


async def test_a_restarted_context_of_one_name_continues_its_series_and_two_live_ones_do_not_share_one() -> None:
    """A context attached under a stopped one's name continues its counters; one attached while a namesake runs gets -2."""
    metrics = StreamingMetrics()
    labels = []
    for _ in range(2):
        clock = ManualClock(0)
        async with StreamingRuntime(pipeline([1, 2]), Seconds(1), clock=clock, name="same") as runtime:
            labels.append(metrics.attach(runtime))
            await runtime.start()
            await advance(runtime, clock, Seconds(1), times=2)
            await runtime.stop()
    clock = ManualClock(0)
    async with StreamingRuntime(pipeline([5]), Seconds(1), clock=clock, name="same") as a, \
            StreamingRuntime(pipeline([7]), Seconds(1), clock=clock, name="same") as b:
        labels += [metrics.attach(a), metrics.attach(b)]
        await a.start()
        await b.start()
        await advance(a, clock, Seconds(1))
        await b.wait_until_idle()
        await a.listener_bus.wait_delivered()
        text = metrics.scrape()
        await a.stop()
        await b.stop()
    assert labels == ["same", "same", "same", "same-2"]
    found = series(text)
    assert len(found) == len(set(found))
    values = samples(text)
    assert value(values, "aiodstream_batches_total", query="same", outcome="succeeded") == 5
    assert value(values, "aiodstream_input_records_total", query="same", input="0") == 1 + 2 + 1 + 2 + 5
    assert value(values, "aiodstream_batches_total", query="same-2", outcome="succeeded") == 1
    assert value(values, "aiodstream_input_records_total", query="same-2", input="0") == 7
    # Both stopped: a context literally named "same-2" gets a label of its own; it continued the second one's counters.
    async with StreamingRuntime(pipeline([100]), Seconds(1), clock=clock, name="same-2") as other:
        assert metrics.attach(other) == "same-2-2"


async def test_stopped_unnamed_contexts_beyond_the_bound_leave_and_no_stopped_runtime_or_bus_is_held() -> None:
    """retained_unnamed=2: of four unnamed stopped contexts the last two are scraped, with their final values, beside a
    named one (kept for a restart to continue); no runtime or bus is held (each stayed, with a series, for good)."""
    metrics = StreamingMetrics(retained_unnamed=2)
    stopped = []
    for n in range(5):
        clock = ManualClock(0)
        async with StreamingRuntime(pipeline([n + 1]), Seconds(1), clock=clock, name=None if n else "named") as runtime:
            metrics.attach(runtime)
            await runtime.start()
            await advance(runtime, clock, Seconds(1))
            await runtime.stop()
        stopped += [runtime, runtime.listener_bus]
    values = samples(metrics.scrape())
    assert {dict(labels)["query"] for _, labels in values} == {"named", "context-4", "context-5"}
    assert [value(values, "aiodstream_input_records_total", query=q, input="0") for q in ("named", "context-4", "context-5")] \
        == [1, 4, 5]
    assert [holds(metrics, engine) for engine in stopped] == [False] * 10
    clock = ManualClock(0)
    async with StreamingRuntime(pipeline([10]), Seconds(1), clock=clock, name="named") as runtime:
        assert metrics.attach(runtime) == "named"  # continued
        await runtime.start()
        await advance(runtime, clock, Seconds(1))
        await runtime.stop()
    assert value(samples(metrics.scrape()), "aiodstream_input_records_total", query="named", input="0") == 11


def test_runs_claiming_one_name_at_once_from_threads_never_share_a_label() -> None:
    """The label was chosen under the lock and the run added after it: two threads could both take "q" (in about two
    trials of three with the GIL switching every microsecond; the test makes 20)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _claim_from_threads(20)
    finally:
        sys.setswitchinterval(interval)


def _claim_from_threads(trials: int) -> None:
    for _ in range(trials):
        metrics = StreamingMetrics()
        barrier = threading.Barrier(8)
        labels: list[str] = []

        def claim(metrics: StreamingMetrics = metrics, barrier: threading.Barrier = barrier, labels: list[str] = labels) -> None:
            barrier.wait()
            labels.append(metrics.listener("q").state.query)

        threads = [threading.Thread(target=claim) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(labels) == sorted(["q", *(f"q-{n}" for n in range(2, 9))])


def test_events_of_records_and_of_eager_snapshots_scrape_the_same_text() -> None:
    """The metrics of BatchCompleted events made from records equal, byte for byte, those of the same batches' eager BatchInfo events."""
    job_sets = []
    for n in range(6):
        jobs = [Job(Time(n * 1000), lambda: None, name=f"out {k}") for k in range(2)]
        job_set = JobSet(Time(n * 1000), jobs, Time(n * 1000 + 3), {0: StreamInputInfo(0, n), 2: StreamInputInfo(2, 10 * n)})
        for k, job in enumerate(jobs):
            if n % 3 == 1 and k == 0:
                job.failure = RuntimeError("output failed")
            job_set.handle_job_start(job, Time(n * 1000 + 10 + 40 * n))
            job_set.handle_job_completion(job, Time(n * 1000 + 20 + 700 * n))
        job_sets.append(job_set)
    texts = []
    for make in (lambda js: BatchCompleted(BatchInfo.from_job_set(js)), lambda js: BatchCompleted.of_record(BatchRecord(js))):
        metrics = StreamingMetrics()
        recorder = metrics.listener("q")
        for job_set in job_sets:
            recorder.on_batch_completed(make(job_set))
        texts.append(metrics.scrape())
    eager, lazy = texts
    assert lazy == eager
    found = samples(lazy)
    assert value(found, "aiodstream_batches_total", query="q", outcome="failed") == 2
    assert value(found, "aiodstream_output_operations_total", query="q", outcome="succeeded") == 10
    assert value(found, "aiodstream_input_records_total", query="q", input="2") == 150
    assert value(found, "aiodstream_batch_total_delay_seconds_sum", query="q") == pytest.approx(sum(17 + 700 * n for n in range(6)) / 1000)


async def test_metrics_read_from_the_bus_logs_scrape_as_event_fed_ones(tmp_path: Path, clock: ManualClock) -> None:
    """Metrics attached to a micro-batch runtime, read from its bus's logs at scrape time (140 batches: the ring of 128
    wraps before the scrape), scrape byte for byte as a listener fed the same batches' and progress reports' events."""
    logged, fed = StreamingMetrics(), StreamingMetrics()
    p = Pipeline()
    p.add_source(ListSource([[n] * (n % 4) for n in range(140)]), name="list")
    p.add_output(lambda batch: None, name="out")
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path / "ck", name="q") as runtime:
        logged.attach(runtime)
        runtime.add_listener(fed.listener("q"))
        await runtime.start()
        await advance(runtime, clock, Milliseconds(100), times=140)
        await runtime.listener_bus.wait_delivered()
        text = logged.scrape()
        await runtime.stop()

    def families(scraped: str) -> str:  # the listener rows describe the bus's listeners: the event-fed one has none
        return "\n".join(line for line in scraped.splitlines() if "aiodstream_listener_" not in line)

    assert families(text) == families(fed.scrape())
    found = samples(text)
    assert value(found, "aiodstream_batches_total", query="q", outcome="succeeded") == 140
    assert value(found, "aiodstream_query_progress_reports_total", query="q") > 128
    assert value(found, "aiodstream_checkpoint_write_seconds_count", query="q", log="offsets") > 128


async def test_the_ui_s_metrics_fold_in_the_history_s_pass_and_scrape_as_event_fed_ones(tmp_path: Path,
                                                                                         clock: ManualClock) -> None:
    """A StreamingUI's metrics are folded in its history's one pass over the bus's batch log (the log has one reader,
    not two) and scrape byte for byte as a listener fed the same events, over 300 batches (the ring wraps twice)."""
    logged, fed = StreamingMetrics(), StreamingMetrics()
    p = Pipeline()
    p.add_source(ListSource([[n] * (n % 4) for n in range(300)]), name="list")
    p.add_output(lambda batch: None, name="out")
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path / "ck", name="q") as runtime:
        history = StreamingUI(metrics=logged).attach(runtime)
        runtime.add_listener(fed.listener("q"))
        await runtime.start()
        await advance(runtime, clock, Milliseconds(100), times=300)
        await runtime.listener_bus.wait_delivered()
        text = logged.scrape()
        readers = repr(runtime.listener_bus.batch_log())
        records = history.records
        await runtime.stop()

    def families(scraped: str) -> str:  # the listener rows describe the bus's listeners: the event-fed one has none
        return "\n".join(line for line in scraped.splitlines() if "aiodstream_listener_" not in line)

    assert families(text) == families(fed.scrape())
    assert readers.endswith("1 readers]>")
    found = samples(text)
    assert value(found, "aiodstream_batches_total", query="q", outcome="succeeded") == 300
    assert value(found, "aiodstream_input_records_total", query="q", input="0") == records > 0


async def test_metrics_of_a_micro_batch_runtime_take_no_batch_or_progress_event(tmp_path: Path, clock: ManualClock) -> None:
    """With the metrics alone attached, the bus posts only StreamingStarted and QueryStarted: batches and progress
    reports are read from its logs."""
    metrics = StreamingMetrics()
    p = Pipeline()
    p.add_source(ListSource([[1, 2], [3], [4, 5, 6]]), name="list")
    p.add_output(lambda batch: None, name="noop")
    async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path / "ck", name="q") as runtime:
        metrics.attach(runtime)
        await runtime.start()
        await advance(runtime, clock, Milliseconds(100), times=3)
        posted = runtime.listener_bus.statistics().posted
        found = samples(metrics.scrape())
        await runtime.stop()
    assert posted == 2
    assert value(found, "aiodstream_batches_total", query="q", outcome="succeeded") == 3
    assert value(found, "aiodstream_query_progress_reports_total", query="q") >= 2
    assert value(found, "aiodstream_query_input_rows_total", query="q") > 0


def test_a_histogram_of_whole_milliseconds_buckets_each_as_its_value_in_seconds_would() -> None:
    """The metrics count whole ms against bounds in whole ms: every ms from 0 to 400 s lands where ms / 1000 would."""
    import bisect

    from streaming.ui._histogram import Histogram
    from streaming.ui._metrics import _CHECKPOINT_BUCKETS_S, DELAY_BUCKETS_S

    for bounds in (DELAY_BUCKETS_S, _CHECKPOINT_BUCKETS_S):
        histogram = Histogram(bounds)
        assert all(bisect.bisect_left(histogram.limits, ms) == bisect.bisect_left(bounds, ms / 1000)
                   for ms in range(0, 400_001))
        histogram.observe_ms(5)
        histogram.observe_ms(1)
        assert histogram.sum == 0.006 and sum(histogram.counts) == 2


def folded_and_fed(batches: list[Any]) -> str:
    """The scrape of metrics that folded ``batches`` as a log's run, checked byte for byte against metrics fed their events."""
    logged, fed = StreamingMetrics(), StreamingMetrics()
    logged.listener("q").state.fold_batches(batches)
    recorder = fed.listener("q")
    for batch in batches:
        recorder.on_batch_completed(BatchCompleted.of_completed(batch) if type(batch) is JobSet else
                                    BatchCompleted.of_record(batch))
    text = logged.scrape()
    assert text == fed.scrape()
    return text


def test_a_folded_run_of_logged_batches_scrapes_as_their_events() -> None:
    """A batch log's run folded at once (succeeded JobSets, failed batches' records, delays in the first bucket and past
    it, two inputs) scrapes byte for byte as the same batches' BatchCompleted events, one at a time."""
    from listeners import completed_batch

    batches = []
    for n in range(12):
        jobs = [Job(Time(n * 1000), lambda: None, name=f"out {k}") for k in range(1 + n % 2)]
        job_set = JobSet(Time(n * 1000), jobs, Time(n * 1000 + 1), {0: StreamInputInfo(0, n), 2: StreamInputInfo(2, 10 * n)})
        for k, job in enumerate(jobs):
            if n % 5 == 3 and k == 0:
                job.failure = RuntimeError("output failed")
            job_set.handle_job_start(job, Time(n * 1000 + 1 + (n % 3) * 4))  # scheduling delays 0, 4 and 8 ms
            job_set.handle_job_completion(job, Time(n * 1000 + 1 + (n % 3) * 4 + (0 if n % 2 else 300 * n)))
        batches.append(completed_batch(job_set))
    assert sum(type(batch) is JobSet for batch in batches) == 10
    text = folded_and_fed(batches)
    found = samples(text)
    assert value(found, "aiodstream_batches_total", query="q", outcome="failed") == 2
    assert value(found, "aiodstream_batches_total", query="q", outcome="succeeded") == 10
    assert value(found, "aiodstream_input_records_total", query="q", input="2") == 660
    assert value(found, "aiodstream_batch_scheduling_delay_seconds_bucket", query="q", le="0.005") == 8


def test_a_folded_run_counts_every_delay_as_its_events_do_when_a_clock_steps_back_or_a_batch_never_ends() -> None:
    """Delays whose total is in the first bucket but one part is not (a clock that stepped back: a negative part), a
    total just past it, and a failed batch that started and never ended scrape byte for byte as their events."""
    from listeners import completed_batch

    batches = []
    # (submitted, started, ended) in ms after the batch time: all three in the first bucket; a scheduling delay of -20
    # with a processing delay of 23 (total 3); a processing delay of -20 after a scheduling delay of 23; totals of 5
    # and 6 ms around the first bound; and every delay large.
    for n, (started, ended) in enumerate([(0, 0), (-20, 3), (23, 3), (2, 5), (3, 6), (900, 70_000)]):
        job = Job(Time(n * 1000), lambda: None, name="out")
        job_set = JobSet(Time(n * 1000), [job], Time(n * 1000 + 100), {0: StreamInputInfo(0, n)})
        job_set.handle_job_start(job, Time(n * 1000 + 100 + started))
        job_set.handle_job_completion(job, Time(n * 1000 + 100 + ended))
        batches.append(completed_batch(job_set))
    never_ended = [Job(Time(9000), lambda: None, name="a"), Job(Time(9000), lambda: None, name="b")]
    job_set = JobSet(Time(9000), never_ended, Time(9001), {0: StreamInputInfo(0, 4)})
    job_set.handle_job_start(never_ended[0], Time(9009))
    never_ended[0].failure = RuntimeError("output failed")
    job_set.handle_job_completion(never_ended[0], Time(9012))  # the second job never ran: the batch has no end
    batches.append(completed_batch(job_set))
    assert type(batches[-1]) is BatchRecord and batches[-1].processing_end_ms is None
    text = folded_and_fed(batches)
    found = samples(text)
    assert value(found, "aiodstream_batch_processing_delay_seconds_count", query="q") == 6
    assert value(found, "aiodstream_batch_scheduling_delay_seconds_count", query="q") == 7
    assert value(found, "aiodstream_batch_processing_delay_seconds_sum", query="q") == pytest.approx(
        (0 + 23 - 20 + 3 + 3 + 69_100) / 1000)
    assert value(found, "aiodstream_batch_total_delay_seconds_bucket", query="q", le="0.005") == 4


def logged_and_fed_progress(reports: list[tuple[int, dict[str, int]]]) -> str:
    """The scrape of metrics that folded ``reports`` (rows, phase durations) from a progress log, checked byte for byte
    against metrics that observed them one at a time."""
    from listeners import ProgressLog

    def build() -> Any:
        raise AssertionError("the metrics never build a report")

    log = ProgressLog()
    logged, fed = StreamingMetrics(), StreamingMetrics()
    reader = log.reader(logged.listener("q").state.fold_progress, numbered=False)
    recorder = fed.listener("q").state
    for rows, durations in reports:
        log.append(build, rows, durations)
        recorder.observe_progress(rows, durations)
    log.catch_up(reader)
    text = logged.scrape()
    assert text == fed.scrape()
    return text


def test_a_folded_run_of_kept_progress_reports_scrapes_as_their_events() -> None:
    """Progress reports read from a progress log (with and without each checkpoint phase, writes in the first bucket and
    past it) scrape byte for byte as observing the same reports one at a time."""
    phases = [{"commitOffsets": 0}, {"walCommit": 3, "commitOffsets": 1}, {"walCommit": 40}, {}, {"commitOffsets": 700},
              {"walCommit": 0, "commitOffsets": 0, "addBatch": 9}]
    text = logged_and_fed_progress([(n % 7, phases[n % len(phases)]) for n in range(300)])
    found = samples(text)
    assert value(found, "aiodstream_query_progress_reports_total", query="q") == 300
    assert value(found, "aiodstream_checkpoint_write_seconds_count", query="q", log="commits") == 200
    assert value(found, "aiodstream_checkpoint_write_seconds_bucket", query="q", log="offsets", le="0.0025") == 50


def test_folded_writes_that_took_no_whole_ms_some_ms_or_past_the_first_bucket_scrape_as_their_events() -> None:
    """fold_progress reads only the rows of a report whose writes both took 0 ms and counts it at the end: runs of those
    mixed with writes of a few ms (first bucket), past it in either phase, and with a phase missing scrape as the events."""
    phases = [{"walCommit": 0, "commitOffsets": 0}, {"walCommit": 6, "commitOffsets": 0}, {"walCommit": 0, "commitOffsets": 2},
              {"walCommit": 0, "commitOffsets": 30}, {"walCommit": 5, "commitOffsets": 5}, {"walCommit": 0}]
    text = logged_and_fed_progress([(n % 5, phases[0] if n % 3 else phases[n // 3 % len(phases)]) for n in range(400)])
    found = samples(text)
    assert value(found, "aiodstream_checkpoint_write_seconds_bucket", query="q", log="offsets", le="0.005") == 400 - 23
    assert value(found, "aiodstream_checkpoint_write_seconds_sum", query="q", log="commits") == pytest.approx(
        (22 * 2 + 22 * 30 + 22 * 5) / 1000)


@pytest.mark.parametrize(("headers", "query", "kind", "status"), [
    ([(b"accept", b"\xff\xfe")], b"", "http", 400),
    ([(b"accept-encoding", b"gzip\xff")], b"", "http", 400),
    ([(b"x-\xff", b"1")], b"", "http", 400),
    ([], b"name[]=\xff", "http", 400),
    ([], b"", "websocket", 1003),
    ([(b"accept", b"")], b"", "http", 200),
    ([(b"user-agent", b"\xff")], b"", "http", 200),  # a value prometheus_client never reads
], ids=["accept", "accept-encoding", "header-name", "query", "websocket", "empty-accept", "other-header"])
async def test_a_request_prometheus_client_cannot_decode_gets_a_400_not_a_logged_traceback(
        headers: list[tuple[bytes, bytes]], query: bytes, kind: str, status: int) -> None:
    """prometheus_client's app decodes these as strict UTF-8 and asserts an HTTP scope: each such request raised, and the
    server logged its traceback, so any client reaching /metrics/ could fill the log (lane K5)."""
    assert (await scrape(StreamingMetrics().asgi_app(), headers, query, kind))[0] == status
