"""The web UI without a browser: its history against the delivered events, its JSON API over real HTTP, its server's life."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import anyio
import anyio.to_thread
import pytest

from listeners import BatchInfo, EventRecorder, QueryProgress
from scheduler import ManualClock, Milliseconds, Seconds, Time
from streaming import Batch, ListSource, Pipeline, StreamingContext, StreamingRuntime
from streaming._cli import main as cli
from streaming._cli import trace_names
from streaming.simulation import TraceRecorder
from streaming.ui import StreamingUI, retained_contexts_setting
from tests.streaming.ui.test_metrics import pipeline
from tests.support import advance, holds, wait_until

pytestmark = pytest.mark.anyio


def get(url: str) -> tuple[int, str]:
    """GET ``url`` (blocking): status and body, also for error statuses."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def fetch(url: str) -> tuple[int, str]:
    return await anyio.to_thread.run_sync(get, url)


async def fetch_json(url: str) -> Any:
    status, body = await fetch(url)
    assert status == 200, body
    return json.loads(body)


def expected_row(info: BatchInfo) -> dict[str, Any]:
    """What the batches API must say of a delivered batch."""
    failed = [op for op in info.output_operation_infos.values() if op.failure_reason]
    return {
        "batchId": info.batch_time.milliseconds,
        "inputSize": info.num_records,
        "schedulingDelay": info.scheduling_delay.milliseconds,  # type: ignore[union-attr]
        "processingTime": info.processing_delay.milliseconds,  # type: ignore[union-attr]
        "totalDelay": info.total_delay.milliseconds,  # type: ignore[union-attr]
        "numFailedOutputOps": len(failed),
        "numTotalOutputOps": len(info.output_operation_infos),
    }


async def run_batches(runtime: StreamingRuntime, clock: ManualClock, n: int, interval: Any = Seconds(1)) -> None:
    await runtime.start()
    await advance(runtime, clock, interval, times=n)
    await runtime.listener_bus.wait_delivered()


async def test_the_history_reports_the_batches_the_bus_delivered(clock: ManualClock) -> None:
    """Every completed batch's delays, records and failures, and the averages, equal the BatchCompleted events."""
    ui = StreamingUI(metrics=False)
    recorder = EventRecorder()
    async with StreamingRuntime(pipeline([3, 5, 0, 7], fail_at=3000), Seconds(1), clock=clock, name="numbers") as runtime:
        history = ui.attach(runtime)
        runtime.add_listener(recorder)
        await run_batches(runtime, clock, 4)
        rows = history.batches()
        stats = history.statistics()
        await runtime.stop()
    delivered = sorted(recorder.completed_batches, key=lambda b: b.batch_time.milliseconds, reverse=True)
    assert len(delivered) == 4 and [r["status"] for r in rows] == ["COMPLETED"] * 4
    assert [{k: r[k] for k in expected_row(delivered[0])} for r in rows] == [expected_row(b) for b in delivered]
    failed = [r for r in rows if r["numFailedOutputOps"]]
    assert [r["batchId"] for r in failed] == [3000] and failed[0]["firstFailureReason"] == "RuntimeError: output failed"
    assert stats["numTotalCompletedBatches"] == 4 and stats["numFailedBatches"] == 1
    assert stats["numProcessedRecords"] == 15 and stats["batchDuration"] == 1000
    assert stats["avgInputRate"] == pytest.approx(sum(b.num_records for b in delivered) / 4)
    assert stats["avgTotalDelay"] == sum(b.total_delay.milliseconds for b in delivered) // 4  # type: ignore[union-attr]
    listener = next(s for s in runtime.listener_bus.statistics().listeners if s.name == "StreamingUI")
    assert listener.queued == 0 and listener.delivered > 0  # an inline listener: no queue


async def test_retention_is_bounded_and_since_returns_only_what_is_new(clock: ManualClock) -> None:
    """Only the newest retained_batches stay; totals count all; ``since`` gives the batches after a seen one."""
    ui = StreamingUI(metrics=False, retained_batches=3)
    async with StreamingRuntime(pipeline([1] * 8), Seconds(1), clock=clock, name="bounded") as runtime:
        history = ui.attach(runtime)
        await run_batches(runtime, clock, 5)
        first = history.batches()
        await run_batches_more(runtime, clock, 2)
        newer = history.batches(since=first[0]["seq"])
        stats = history.statistics()
        await runtime.stop()
    assert [r["batchId"] for r in first] == [5000, 4000, 3000]
    assert [r["batchId"] for r in newer] == [7000, 6000]
    assert stats["numTotalCompletedBatches"] == 7 and stats["numRetainedCompletedBatches"] == 3


async def run_batches_more(runtime: StreamingRuntime, clock: ManualClock, n: int) -> None:
    await advance(runtime, clock, times=n)
    await runtime.listener_bus.wait_delivered()


async def test_running_and_queued_batches_are_active_until_they_complete(clock: ManualClock) -> None:
    """With one job slot and a held output, the first batch is PROCESSING and the next QUEUED; then both complete."""
    release = anyio.Event()
    p = Pipeline()
    p.add_source(lambda t: [1], name="one")

    async def held(batch: Batch) -> None:
        await release.wait()

    p.add_output(held, name="held")
    ui = StreamingUI(metrics=False)
    async with StreamingRuntime(p, Seconds(1), clock=clock, name="held") as runtime:
        history = ui.attach(runtime)
        await runtime.start()
        clock.advance(Seconds(2))
        await wait_until(lambda: [(r["batchId"], r["status"]) for r in history.batches()] == [(2000, "QUEUED"),
                                                                                            (1000, "PROCESSING")])
        assert [r["batchId"] for r in history.batches(status="QUEUED")] == [2000]
        stats = history.statistics()
        assert stats["numActiveBatches"] == 2
        # As Spark's: the rate and scheduling delay average the running batches too; records count once a batch started.
        shown = ["numProcessedRecords", "numReceivedRecords", "avgInputRate", "avgSchedulingDelay", "avgProcessingTime"]
        assert [stats[k] for k in shown] == [0, 1, 1.0, 0, None]
        # Read from the runtime's scheduler when asked: the bus keeps no running batch for the UI.
        assert runtime.listener_bus.active_batches() == []
        assert [job_set.time.milliseconds for job_set in runtime.scheduler.running_batches()] == [1000, 2000]
        assert {time: state for time, (state, _) in history.active().items()} == {1000: "PROCESSING", 2000: "QUEUED"}
        release.set()
        await runtime.wait_until_idle()
        await runtime.listener_bus.wait_delivered()
        done = history.batches()
        await runtime.stop()
    assert [(r["batchId"], r["status"]) for r in done] == [(2000, "COMPLETED"), (1000, "COMPLETED")]
    assert history.active() == {}


async def test_batches_are_listed_newest_batch_time_first_whatever_their_completion_order(clock: ManualClock) -> None:
    """With two job slots, batch 2000 completes while 1000 still runs, then 1000 completes: the list is by batch time,
    newest first (Spark's -batchId order), running and completed alike; ``since`` still follows completion order."""
    release = anyio.Event()
    p = Pipeline()
    p.add_source(lambda t: [t.milliseconds], name="time")

    async def first_held(batch: Batch) -> None:
        if batch.time.milliseconds == 1000:
            await release.wait()

    p.add_output(first_held, name="first-held")
    ui = StreamingUI(metrics=False)
    async with StreamingRuntime(p, Seconds(1), clock=clock, name="two-slots", concurrent_jobs=2) as runtime:
        history = ui.attach(runtime)
        await runtime.start()
        clock.advance(Seconds(2))
        await wait_until(lambda: [(r["batchId"], r["status"]) for r in history.batches()] == [(2000, "COMPLETED"),
                                                                                            (1000, "PROCESSING")])
        [early] = history.batches(status="COMPLETED")
        release.set()
        await runtime.wait_until_idle()
        await runtime.listener_bus.wait_delivered()
        done = history.batches()
        later = history.batches(since=early["seq"])
        await runtime.stop()
    assert [(r["batchId"], r["status"]) for r in done] == [(2000, "COMPLETED"), (1000, "COMPLETED")]
    assert done[0]["seq"] < done[1]["seq"]  # 2000 completed first
    assert [r["batchId"] for r in later] == [1000]


async def test_ticks_held_behind_a_sequential_batch_are_queued_batches_without_input(clock: ManualClock,
                                                                                    tmp_path: Path) -> None:
    """A watermarked pipeline runs its batches one after another: while batch 1000 is held, the ticks of 2000 and 3000
    are QUEUED batches (submitted at their ticks), and the input rate averages only the batches whose input was taken
    (a held tick's is taken when it is made: counting it as 0 records halved the rate as the program fell behind)."""
    from streaming import ListSource

    release = anyio.Event()
    p = Pipeline()
    p.add_source(ListSource([1, 2, 3, 4, 5], max_per_batch=2), name="one")
    p.add_watermark("one", lambda r: 0, "0 seconds")

    async def held(batch: Batch) -> None:
        await release.wait()

    p.add_output(held, name="held")
    ui = StreamingUI(metrics=False)
    async with StreamingRuntime(p, Seconds(1), clock=clock, name="held", checkpoint_location=tmp_path / "ck") as runtime:
        history = ui.attach(runtime)
        await runtime.start()
        clock.advance(Seconds(3))
        await wait_until(lambda: [(r["batchId"], r["status"]) for r in history.batches()] == [
            (3000, "QUEUED"), (2000, "QUEUED"), (1000, "PROCESSING")])
        stats = history.statistics()
        assert (stats["numActiveBatches"], stats["avgInputRate"], stats["avgSchedulingDelay"]) == (3, 2.0, 0)
        release.set()
        await runtime.wait_until_idle()
        await runtime.stop()


async def test_batches_an_immediate_stop_dropped_are_not_active_afterwards_but_counted_as_dropped(clock: ManualClock) -> None:
    """A UI that outlives its runtime: a queued batch an immediate stop dropped leaves the active ones, counted as dropped."""
    p = Pipeline()
    p.add_source(lambda t: [1], name="one")

    async def held(batch: Batch) -> None:
        if batch.time.milliseconds > 1000:
            await anyio.sleep_forever()

    p.add_output(held, name="held")
    ui = StreamingUI(metrics=False)
    async with StreamingRuntime(p, Seconds(1), clock=clock, name="dropped", abandon_after=Seconds(2)) as runtime:
        history = ui.attach(runtime)
        await runtime.start()
        clock.advance(Seconds(3))
        await wait_until(lambda: [r["status"] for r in history.batches()] == ["QUEUED", "PROCESSING", "COMPLETED"])
        assert (history.statistics()["numActiveBatches"], history.statistics()["numDroppedBatches"]) == (2, 0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: runtime.stop(graceful=False))
            await wait_until(lambda: clock.next_deadline == Time(5000))  # the grace period of the running batch
            clock.advance(Seconds(2))
    stats = history.statistics()
    # The running batch was cancelled after its grace period and completed (failed); the queued one never ran.
    assert [(r["batchId"], r["status"]) for r in history.batches()] == [(2000, "COMPLETED"), (1000, "COMPLETED")]
    assert (stats["numActiveBatches"], stats["numDroppedBatches"], stats["numTotalCompletedBatches"]) == (0, 1, 2)


async def test_stopped_contexts_beyond_retained_contexts_leave_and_the_kept_ones_hold_no_runtime() -> None:
    """retained_contexts=2, four contexts of one name in turn: the last two stopped ones are shown as they were at their
    stop (batches, statistics, progress), holding neither runtime nor batch log (each was kept, runtime and all)."""
    ui = StreamingUI(metrics=False, retained_contexts=2)
    shown: dict[str, Any] = {}
    stopped = []
    for _ in range(4):
        clock = ManualClock(0)
        p = Pipeline()
        p.add_source(ListSource([[1, 2], [3], [4, 5, 6]]), name="list")
        p.add_output(lambda batch: None, name="out")
        async with StreamingRuntime(p, Seconds(1), clock=clock, name="svc", track_progress=True) as runtime:
            history = ui.attach(runtime)
            await run_batches(runtime, clock, 3)
            await runtime.stop()
        shown[history.name] = (history.statistics(), history.batches(), history.progress())
        stopped += [runtime, runtime.listener_bus.batch_log()]  # the batch log: its batches, read while it ran
    kept = ui.histories
    assert list(kept) == ["svc-3", "svc"]  # the first svc and svc-2 left; the fourth took the name set free
    assert {name: (h.statistics(), h.batches(), h.progress()) for name, h in kept.items()} == {
        name: shown[name] for name in kept}
    assert len(kept["svc"].progress()) == 3
    assert [holds(ui, engine) for engine in stopped] == [False] * 8


async def test_the_ui_takes_no_event_per_batch_and_reads_the_batches_when_asked(clock: ManualClock) -> None:
    """The UI's listener gets StreamingStarted only: no batch event is posted; its pages read the bus's batch log."""
    ui = StreamingUI(metrics=False)
    async with StreamingRuntime(pipeline([1, 2, 3]), Seconds(1), clock=clock, name="no-event") as runtime:
        history = ui.attach(runtime)
        await run_batches(runtime, clock, 3)
        stats = runtime.listener_bus.statistics()
        shown = [(r["batchId"], r["inputSize"], r["seq"]) for r in history.batches()]
        await runtime.stop()
    assert [(s.name, s.delivered) for s in stats.listeners] == [("StreamingUI", 1)]
    assert stats.posted == 1
    assert shown == [(3000, 3, 3), (2000, 2, 2), (1000, 1, 1)]


async def test_the_app_serves_pages_api_and_metrics_over_http(tmp_path: Path, clock: ManualClock) -> None:
    """Pages and scripts, the JSON API (with progress reports), the error statuses and /metrics, from a real server."""
    ui = StreamingUI()
    recorder = EventRecorder()
    p = Pipeline()
    p.add_source(ListSource([[1, 2], [3], [4, 5, 6]]), name="list")
    p.add_output(lambda batch: None, name="noop")
    async with anyio.create_task_group() as tg:
        async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path / "ck", name="listed") as rt:
            ui.attach(rt)
            rt.add_listener(recorder)
            url = await tg.start(ui.serve, "127.0.0.1", 0)
            await run_batches(rt, clock, 3, Milliseconds(100))
            await wait_until(lambda: len(recorder.of_type(QueryProgress)) >= 3)
            await rt.listener_bus.wait_delivered()
            api = url + "api/v1/contexts/listed/"
            status, page = await fetch(url)
            assert status == 200 and "static/app.js" in page
            status, script = await fetch(url + "static/app.js")
            assert status == 200 and "function timeline" in script
            contexts = await fetch_json(url + "api/v1/contexts")
            assert [c["name"] for c in contexts] == ["listed"]
            rows = await fetch_json(api + "streaming/batches")
            batches = sorted(recorder.completed_batches, key=lambda b: b.batch_time.milliseconds, reverse=True)
            assert [r["inputSize"] for r in rows] == [b.num_records for b in batches] and sum(r["inputSize"] for r in rows) > 0
            one = await fetch_json(api + f"streaming/batches/{rows[0]['batchId']}")
            assert one == rows[0]
            ops = await fetch_json(api + f"streaming/batches/{rows[0]['batchId']}/operations")
            shown = [(o["outputOpId"], o["name"].split(" at ")[0], o["failureReason"], o["jobIds"]) for o in ops]
            assert shown == [(0, "noop", None, None)]
            progress = await fetch_json(api + "progress")
            delivered = [e.progress for e in recorder.of_type(QueryProgress)]  # type: ignore[attr-defined]
            assert [q["batchId"] for q in progress] == [q.batch_id for q in delivered]
            assert [q["numInputRows"] for q in progress] == [q.num_input_rows for q in delivered]
            assert await fetch_json(api + f"progress?since={progress[-1]['seq']}") == []
            assert (await fetch(api + "streaming/batches?status=DONE"))[0] == 400
            assert (await fetch(api + "streaming/batches?status=COMPLETED&status=DONE"))[0] == 400
            both = await fetch_json(api + "streaming/batches?status=QUEUED&status=COMPLETED")  # Spark's repeated status
            assert [r["batchId"] for r in both] == [r["batchId"] for r in rows]
            assert await fetch_json(api + f"streaming/batches/{rows[0]['batchId']}/operations/0") == ops[0]
            assert await fetch(api + f"streaming/batches/{rows[0]['batchId']}/operations/1") == (404, "unknown output operation: 1")
            assert (await fetch(api + f"streaming/batches/{rows[0]['batchId']}/operations/x"))[0] == 400
            assert await fetch(api + "streaming/receivers/0") == (404, "unknown receiver: 0")
            assert (await fetch(api + "streaming/receivers/x"))[0] == 400
            assert (await fetch(api + "streaming/batches?since=x"))[0] == 400
            assert (await fetch(api + "streaming/batches/12x"))[0] == 400
            assert (await fetch(api + "streaming/batches/999"))[0] == 404
            assert (await fetch(url + "api/v1/contexts/nobody/streaming/statistics"))[0] == 404
            status, text = await fetch(url + "metrics/")
            assert status == 200 and 'aiodstream_batches_total{outcome="succeeded",query="listed"}' in text
            await rt.stop()
        tg.cancel_scope.cancel()


async def test_a_service_started_on_a_runtime_ends_when_the_runtime_stops(clock: ManualClock) -> None:
    """runtime.start_service(ui.serve, ...) reports the URL; after stop nothing listens there."""
    ui = StreamingUI(metrics=False)
    async with StreamingRuntime(pipeline([1, 1]), Seconds(1), clock=clock, name="served") as runtime:
        ui.attach(runtime)
        url = await runtime.start_service(ui.serve, "127.0.0.1", 0)
        await run_batches(runtime, clock, 2)
        stats = await fetch_json(url + "api/v1/contexts/served/streaming/statistics")
        assert stats["numTotalCompletedBatches"] == 2
        await runtime.stop()
    port = int(url.rsplit(":", 1)[1].strip("/"))
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


@pytest.fixture
def taken() -> Iterator[int]:
    """A port of 127.0.0.1 another socket listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


async def test_a_service_that_cannot_start_raises_its_own_error_on_a_runtime(clock: ManualClock, taken: int) -> None:
    """runtime.start_service(ui.serve, ...) on a taken port raises the web UI's OSError itself, not a group around it."""
    ui = StreamingUI(metrics=False)
    async with StreamingRuntime(pipeline([1]), Seconds(1), clock=clock, name="taken") as runtime:
        ui.attach(runtime)
        with pytest.raises(OSError, match=f"^\\[Errno [0-9]+\\] cannot serve the web UI on 127.0.0.1:{taken}: "):
            await runtime.start_service(ui.serve, "127.0.0.1", taken)
        await runtime.stop()


async def test_a_taken_port_is_named_and_retries_take_the_next_ones(taken: int) -> None:
    """Serving on a taken port fails with the port in the message; port_retries moves on to a free one."""
    ui = StreamingUI(metrics=False)
    async with anyio.create_task_group() as tg:
        with pytest.raises(OSError, match=f"cannot serve the web UI on 127.0.0.1:{taken}: .*pick another port"):
            await tg.start(ui.serve, "127.0.0.1", taken)
        url = await tg.start(ui.serve, "127.0.0.1", taken, 8)
        port = int(url.rsplit(":", 1)[1].strip("/"))
        assert taken < port <= taken + 8
        assert (await fetch(url + "api/v1/contexts"))[0] == 200
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("host", ["not a host!", "192.0.2.77"])
async def test_a_host_that_is_not_this_machine_is_named_not_the_port(host: str) -> None:
    """A host name that does not resolve, or an address this machine does not have, is what is wrong: the message says
    so (it advised another port)."""
    ui = StreamingUI(metrics=False)
    async with anyio.create_task_group() as tg:
        with pytest.raises(OSError, match=f"^\\[Errno -?[0-9]+\\] cannot serve the web UI on {re.escape(host)}: .*; give a "
                                          "host name or address of this machine \\(spark.aiodstream.ui.host, --host\\)$"):
            await tg.start(ui.serve, host, 0)
        tg.cancel_scope.cancel()


async def test_a_trace_opens_in_the_same_views(tmp_path: Path, clock: ManualClock) -> None:
    """A recorded trace gives the same batches and statistics as the live history of the run it recorded."""
    ui = StreamingUI(metrics=False)
    path = tmp_path / "run.jsonl"
    with TraceRecorder(path, batch_interval=Seconds(1)) as trace:
        async with StreamingRuntime(pipeline([3, 5, 0, 7], fail_at=2000), Seconds(1), clock=clock, name="live") as runtime:
            live = ui.attach(runtime)
            runtime.add_listener(trace, on_loop=True)
            await run_batches(runtime, clock, 4)
            await runtime.stop()
    replayed = ui.add_trace(path)
    assert replayed.name == "run" and replayed.kind == "trace" and not replayed.live
    assert replayed.batches() == live.batches()
    keys = ["numTotalCompletedBatches", "numFailedBatches", "numProcessedRecords", "avgInputRate", "avgSchedulingDelay",
            "avgProcessingTime", "avgTotalDelay", "batchDuration", "startTimeMs"]
    assert {k: replayed.statistics()[k] for k in keys} == {k: live.statistics()[k] for k in keys}
    assert replayed.statistics()["numTotalCompletedBatches"] == 4


NAMES = ["team/job", "a%2Fb", "50% done", "q#1", "what?", "dots..", "..", "."]


async def asgi_get(app: Any, raw_path: bytes, root_path: str = "") -> tuple[int, str]:
    """GET ``raw_path`` from an ASGI app as an HTTP server passes it (the decoded path and the raw one)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    path = urllib.parse.unquote(raw_path.decode())
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": raw_path, "query_string": b"", "headers": [],
             "http_version": "1.1", "scheme": "http", "root_path": root_path, "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()


async def test_any_context_name_reaches_its_context_encoded_as_the_pages_encode_it(tmp_path: Path, clock: ManualClock) -> None:
    """Names with '/', '%', '#', '?' and dots: each one's statistics and operations over HTTP, and mounted under a prefix."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    ui = StreamingUI(metrics=False)
    path = tmp_path / "run.jsonl"
    with TraceRecorder(path, batch_interval=Seconds(1)) as trace:
        async with StreamingRuntime(pipeline([3]), Seconds(1), clock=clock, name="live") as runtime:
            runtime.add_listener(trace, on_loop=True)
            await run_batches(runtime, clock, 1)
            await runtime.stop()
    for name in NAMES:
        ui.add_trace(path, name=name)
    mounted = Starlette(routes=[Mount("/ui/x", app=ui.asgi_app())])
    async with anyio.create_task_group() as tg:
        url = await tg.start(ui.serve, "127.0.0.1", 0)
        assert [c["name"] for c in await fetch_json(url + "api/v1/contexts")] == NAMES
        for name in NAMES:
            quoted = urllib.parse.quote(name, safe="")  # what encodeURIComponent gives
            stats = await fetch_json(url + f"api/v1/contexts/{quoted}/streaming/statistics")
            assert stats["name"] == name
            ops = await fetch_json(url + f"api/v1/contexts/{quoted}/streaming/batches/1000/operations")
            assert [o["outputOpId"] for o in ops] == [0]
            status, body = await asgi_get(mounted, f"/ui/x/api/v1/contexts/{quoted}/streaming/statistics".encode(), "")
            assert status == 200 and json.loads(body)["name"] == name
            # Hypercorn's root_path: the root is in neither path nor raw_path (the name was decoded twice, or 404)
            status, body = await asgi_get(ui.asgi_app(), f"/api/v1/contexts/{quoted}/streaming/statistics".encode(), "/ui")
            assert status == 200 and json.loads(body)["name"] == name
        for name in (".", ".."):  # as app.js sends them: a browser would resolve a dot segment, even as %2E
            stats = await fetch_json(url + "api/v1/contexts/" + name.replace(".", "%252E") + "/streaming/statistics")
            assert stats["name"] == name
        status, body = await fetch(url + "api/v1/contexts/team%2Fnobody/streaming/statistics")
        assert status == 404 and "no context named 'team/nobody'" in body
        for bad in ("1_000", "%D9%A3000", "+", "1" * 30):  # Spark's toLong takes ASCII digits only (int() took these)
            status, body = await fetch(url + f"api/v1/contexts/what%3F/streaming/batches/{bad}")
            assert status == 400 and "a batch id is its time in ms" in body
        tg.cancel_scope.cancel()


def test_bad_settings_are_refused_with_what_was_wrong() -> None:
    """Retention, refresh, ports and duplicate names: each refused with a message naming it."""
    with pytest.raises(ValueError, match="retained_batches must be a positive int, got 0"):
        StreamingUI(retained_batches=0)
    with pytest.raises(ValueError, match="refresh_ms must be an int of at least 50"):
        StreamingUI(refresh_ms=5)
    with pytest.raises(ValueError, match="retained_contexts must be a positive int, got 0"):
        StreamingUI(retained_contexts=0)
    conf = {"spark.sql.streaming.ui.retainedQueries": "none"}
    with pytest.raises(ValueError, match=re.escape("spark.sql.streaming.ui.retainedQueries must be a positive number of "
                                                   "contexts, got 'none'")):
        retained_contexts_setting(conf.get)
    assert (retained_contexts_setting({}.get), retained_contexts_setting({"spark.sql.streaming.ui.retainedQueries": "7"}.get)) \
        == (100, 7)
    with pytest.raises(ValueError, match="the UI port must be an int from 0 to 65535"):
        StreamingContext(None, 1, uiPort=70000)
    with pytest.raises(ValueError, match="the UI port must be an int from 0 to 65535"):
        StreamingContext(None, 1, uiPort=True)  # type: ignore[arg-type]
    ui = StreamingUI(metrics=False)
    runtime = StreamingRuntime(pipeline([1]), Seconds(1), name="twice")
    ui.attach(runtime)
    with pytest.raises(ValueError, match="the UI already shows 'twice'"):
        ui.attach(StreamingRuntime(pipeline([1]), Seconds(1)), name="twice")
    assert ui.attach(StreamingRuntime(pipeline([1]), Seconds(1), name="twice")).name == "twice-2"


async def test_a_context_s_ui_keeps_spark_s_retained_batches_setting(clock: ManualClock) -> None:
    """spark.streaming.ui.retainedBatches=3 (read with the context's settings): the served UI keeps 3; a malformed one is named."""
    from streaming._settings import ContextArguments, ContextSettings
    from streaming.spark import SparkSettings
    from streaming.ui import ContextUI

    def ui_setting(retained: str) -> Any:
        conf = {"spark.aiodstream.ui.port": "0", "spark.streaming.ui.retainedBatches": retained}
        return ContextSettings.read(SparkSettings(2, conf), ContextArguments(), continuous=False).ui

    with pytest.raises(ValueError, match=re.escape("spark.streaming.ui.retainedBatches must be a positive number of batches, got '0'")):
        ui_setting("0")
    context_ui = ContextUI()
    async with StreamingRuntime(pipeline([1] * 5), Seconds(1), clock=clock, name="kept") as runtime:
        context_ui.prepare(ui_setting("3"), runtime, "kept")
        await run_batches(runtime, clock, 5)
        await context_ui.serve(runtime)
        url = context_ui.url(runtime)
        assert url is not None
        config = await fetch_json(url + "api/v1/config")
        stats = await fetch_json(url + "api/v1/contexts/kept/streaming/statistics")
        await runtime.stop()
    assert (config["retainedBatches"], stats["numRetainedCompletedBatches"], stats["numTotalCompletedBatches"]) == (3, 3, 5)


def test_the_ui_command_refuses_zero_retained_batches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--retained-batches 0`` exits 2 saying what to do, instead of passing for "every batch" (the flag's default)."""
    path = tmp_path / "run.jsonl"
    with TraceRecorder(path, batch_interval=Seconds(1)):
        pass
    # --host 0.0.0.0 without --allow-remote: had the flag been taken, the command would not start serving either
    assert cli(["ui", str(path), "--retained-batches", "0", "--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err == ("aiodstream ui: error: --retained-batches must be at least 1, got 0; leave it out to "
                                       "keep every batch\n")


def test_the_ui_command_names_traces_by_file_and_by_path_where_two_share_a_name() -> None:
    """Two runs' traces of the same file name were refused ("the UI already shows 'events'"): they get their paths."""
    assert trace_names(["a/run.jsonl", "b/other.jsonl"]) == ["run", "other"]
    assert trace_names(["one/events.jsonl", "two/events.jsonl", "x.jsonl"]) == ["one/events", "two/events", "x"]


def test_the_ui_command_refuses_missing_and_malformed_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``aiodstream ui`` exits 2 naming the file and what is wrong with it."""
    assert cli(["ui", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"event": "BatchCompleted"}\n')
    assert cli(["ui", str(bad)]) == 2
    assert f"{bad}: " in capsys.readouterr().err


def test_the_ui_command_refuses_a_trace_its_parser_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Too deep, not UTF-8, or a malformed header: exit status 2 and the file's line, as for a line that is not JSON."""
    cases = {
        "deep": (b"[" * 100_000 + b"\n", "line 1: JSON nested too deeply to read"),
        "bin": (b"\xff\xfe\x00garbage\n", "line 1: not UTF-8 text: invalid start byte at byte 1"),
        "hdr": (b'{"format": "aiodstream-trace", "version": 1, "batch_interval_ms": "abc"}\n',
                "line 1.batch_interval_ms: must be a positive whole number of milliseconds, got 'abc'"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(content)
        assert cli(["ui", str(path)]) == 2
        assert capsys.readouterr().err == f"aiodstream ui: error: {path}: {message}\n"
