"""The web UI in a real headless Chromium: a live pyspark-style program's pages, and a trace file in the same views.

The browser is Debian's ``chromium`` (``./run tests`` installs it when missing), driven by
Playwright's Python client; nothing is downloaded. Set ``AIODSTREAM_UI_SCREENSHOTS=<dir>`` to keep a
screenshot of each page (``docs/ui/`` holds the ones in the docs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from listeners import BatchInfo, EventRecorder, QueryProgress
from scheduler import Duration
from streaming import StreamingContext
from streaming.simulation import read_trace

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium for this module (module scope: Playwright's sync client owns an event loop while it lives)."""
    chromium = os.environ.get("AIODSTREAM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.fail("the web UI tests drive Debian's chromium, which is not installed: './run tests' installs it "
                    "(apt-get install chromium), or set AIODSTREAM_CHROMIUM to a Chromium binary")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def screenshot(page: Any, name: str) -> None:
    folder = os.environ.get("AIODSTREAM_UI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def open_page(browser: Any, url: str) -> Any:
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors
    page.goto(url)
    return page


def chart_points(page: Any, chart: str) -> dict[int, float]:
    """The points a timeline drew (batch time -> value), after checking each dot sits where its value says."""
    found = page.eval_on_selector_all(
        f'svg.timeline[data-chart="{chart}"] circle.pt',
        """dots => dots.map(d => { const s = d.ownerSVGElement.dataset;
            return [Number(d.dataset.x), Number(d.dataset.y), Number(d.getAttribute("cy")),
                    Number(s.ymax), Number(s.plotTop), Number(s.plotHeight)]; })""")
    for _, y, cy, ymax, top, height in found:
        assert cy == pytest.approx(top + height * (1 - y / ymax), abs=0.01)  # drawn at its value
    return {int(x): y for x, y, *_ in found}


def histogram_counts(page: Any, chart: str) -> list[tuple[float, float, int]]:
    return [tuple(bar) for bar in page.eval_on_selector_all(  # type: ignore[misc]
        f'svg.histogram[data-chart="{chart}"] rect.bar',
        "bars => bars.map(b => [Number(b.dataset.lo), Number(b.dataset.hi), Number(b.dataset.count)])")]


def check_histogram(page: Any, chart: str, values: list[float]) -> None:
    bins = histogram_counts(page, chart)
    assert sum(count for _, _, count in bins) == len(values) > 0
    top = max(values) if max(values) > 0 else 1
    for i, (lo, hi, count) in enumerate(bins):
        inside = [v for v in values if min(len(bins) - 1, int(v / top * len(bins))) == i]
        assert count == len(inside), (chart, lo, hi)


def expected_delays(batches: list[BatchInfo]) -> dict[str, dict[int, float]]:
    def ms(d: Duration | None) -> float:
        assert d is not None
        return float(d.milliseconds)

    return {
        "schedulingDelay": {b.batch_time.milliseconds: ms(b.scheduling_delay) for b in batches},
        "processingTime": {b.batch_time.milliseconds: ms(b.processing_delay) for b in batches},
        "totalDelay": {b.batch_time.milliseconds: ms(b.total_delay) for b in batches},
    }


@pytest.mark.spark
def test_a_live_program_s_pages_show_what_the_listener_bus_reported(spark_context: Any, browser: Any) -> None:
    """uiPort serves a pyspark-style program: its batches, charts, histograms, a failed batch's page with
    links to its Spark jobs, and the query page, each equal to the events the bus delivered."""
    sizes = [5, 12, 30, 7, 50, 21, 9, 40]
    recorder = EventRecorder()
    ssc = StreamingContext(spark_context, 0.3, uiPort=0, queryName="ui-live")
    stream = ssc.queueStream([spark_context.parallelize(range(n), 2) for n in sizes])
    stream.map(lambda x: x * 2).foreachRDD(lambda rdd: rdd.count())

    def check(rdd: Any) -> None:
        if rdd.count() == 50:
            raise ValueError("fifty records is too many")

    stream.foreachRDD(check)
    ssc.addStreamingListener(recorder)
    ssc.start()
    try:
        url = ssc.uiWebUrl
        assert url is not None and url.startswith("http://127.0.0.1:")
        page = open_page(browser, url)  # one context: the home page goes to its Streaming page
        page.wait_for_function("document.querySelectorAll('#completed-batches tbody tr').length >= 10", timeout=60_000)
        page.wait_for_function("document.body.dataset.rendered > 2")  # refreshed live, more than once
        rows = page.eval_on_selector_all(
            "#completed-batches tbody tr",
            "rows => rows.map(r => [Number(r.dataset.batchId), r.cells[1].textContent, r.className])")
        points = {chart: chart_points(page, chart) for chart in ("inputRate", "schedulingDelay", "processingTime", "totalDelay")}
        histograms = {chart: histogram_counts(page, chart) for chart in points}
        screenshot(page, "streaming")
        failed_row = next(batch_id for batch_id, _, css in rows if css == "failed")
        page.click(f'#completed-batches tr[data-batch-id="{failed_row}"] a')
        page.wait_for_selector("#operations tbody tr")
        operations = page.eval_on_selector_all(
            "#operations tbody tr",
            """rows => rows.map(r => [Number(r.dataset.opId), r.querySelector('[data-field="duration"]').textContent,
                                     [...r.querySelectorAll('a.spark-job')].map(a => a.href), r.cells[5].textContent])""")
        screenshot(page, "batch")
        page.click("text=Structured Streaming")
        page.wait_for_function("document.querySelectorAll('#progress tbody tr').length >= 5")
        progress_points = chart_points(page, "numInputRows")
        progress_rows = page.eval_on_selector_all("#progress tbody tr", "rows => rows.map(r => Number(r.dataset.batch))")
        screenshot(page, "query")
        assert page.errors == []
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    assert ssc.uiWebUrl is None

    delivered = {b.batch_time.milliseconds: b for b in recorder.completed_batches}
    shown = [delivered[batch_id] for batch_id, _, _ in rows]  # every row is a delivered batch
    assert [int(records) for _, records, _ in rows] == [b.num_records for b in shown]
    assert sorted(b.num_records for b in shown if b.num_records) == sorted(n for n in sizes if n in {b.num_records for b in shown})
    assert {b.batch_time.milliseconds for b in shown if b.failed} == {failed_row}
    assert delivered[failed_row].num_records == 50
    for chart, expected in expected_delays(list(delivered.values())).items():
        drawn = points[chart]
        assert len(drawn) >= 10 and drawn == {t: expected[t] for t in drawn}
        values = list(drawn.values())
        assert sum(c for *_, c in histograms[chart]) == len(values)
    assert points["inputRate"] == {t: delivered[t].num_records * 1000 / 300 for t in points["inputRate"]}

    ops = delivered[failed_row].output_operation_infos
    assert [op_id for op_id, *_ in operations] == [0, 1]
    for op_id, duration, links, _ in operations:
        op_duration = ops[op_id].duration
        assert op_duration is not None
        ms = op_duration.milliseconds
        assert duration == (f"{ms} ms" if ms < 1000 else f"{ms / 1000:.2f} s" if ms < 10_000 else duration)
        assert len(links) == 1, operations
        assert links[0].startswith(spark_context.uiWebUrl + "/jobs/job/?id=")
        job = spark_context.statusTracker().getJobInfo(int(links[0].rsplit("=", 1)[1]))
        assert job is not None and job.status == "SUCCEEDED"  # the check raised after its count succeeded
    assert operations[1][3].startswith("ValueError: fifty records is too many")
    assert operations[0][3] == "-"

    reported = {e.progress.batch_id: e.progress for e in recorder.of_type(QueryProgress)}  # type: ignore[attr-defined]
    assert progress_rows and all(b in reported for b in progress_rows)
    by_time = {int(_timestamp_ms(p.timestamp)): p.num_input_rows for p in reported.values()}
    assert progress_points and progress_points == {t: by_time[t] for t in progress_points}


def _timestamp_ms(timestamp: str) -> int:
    import datetime

    return int(datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ")
               .replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)


def test_a_simulated_trace_opens_in_the_same_views(browser: Any, tmp_path: Path) -> None:
    """``aiodstream ui TRACE``: a simulated day's batches and delays, drawn in the Streaming page's charts."""
    path = tmp_path / "simulated.jsonl"
    # The way a user makes one (and a process of its own: Playwright's client holds this thread's event loop).
    subprocess.run([sys.executable, "-m", "streaming._cli", "simulate", "--interval", "1s", "--rate", "100", "--op",
                    "kind=constant,value=1300ms", "--batches", "120", "--events", str(path)], check=True, capture_output=True)
    batches = list(read_trace(path).completed_batches)
    assert len(batches) == 120
    server = subprocess.Popen([sys.executable, "-m", "streaming._cli", "ui", str(path), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "serving 1 trace at http://127.0.0.1:" in line, (line, server.stderr.read() if server.poll() is not None else "")
        url = line.split(" at ", 1)[1].split()[0]
        page = open_page(browser, url)
        page.wait_for_selector("#completed-batches tbody tr")
        assert page.text_content("#status").startswith("not live")
        drawn = {chart: chart_points(page, chart) for chart in ("schedulingDelay", "processingTime", "totalDelay")}
        expected = expected_delays(batches)
        for chart, values in drawn.items():
            assert values == expected[chart]  # every batch of the trace, not only the table's 100
            check_histogram(page, chart, list(values.values()))
        # Work of 1.3 s on a 1 s interval: the scheduling delay grows by 300 ms a batch, as the trace says.
        assert max(drawn["schedulingDelay"].values()) == expected["schedulingDelay"][batches[-1].batch_time.milliseconds] > 0
        assert page.eval_on_selector_all("#completed-batches tbody tr", "rows => rows.length") == 100
        screenshot(page, "trace")
        assert page.errors == []
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_token_link_opens_a_protected_ui_and_its_cookie_carries_the_pages(browser: Any, tmp_path: Path) -> None:
    """With a token, a bare visit gets 401; the ``?token=`` link leaves a clean address, an HttpOnly cookie, and live pages."""
    path = tmp_path / "run.jsonl"
    subprocess.run([sys.executable, "-m", "streaming._cli", "simulate", "--interval", "1s", "--rate", "10", "--op",
                    "kind=constant,value=200ms", "--batches", "5", "--events", str(path)], check=True, capture_output=True)
    token = "browser-token-9f8e7d6c5b4a"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    server = subprocess.Popen([sys.executable, "-m", "streaming._cli", "ui", str(path), "--port", "0", "--token-file",
                               str(token_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "serving 1 trace at http://127.0.0.1:" in line, (line, server.stderr.read() if server.poll() is not None else "")
        url = line.split(" at ", 1)[1].split()[0]
        context = browser.new_context()
        page = context.new_page()
        response = page.goto(url)
        assert response.status == 401 and "this web UI needs its token" in page.text_content("body")
        page.goto(url + f"#/streaming/run?token={token}")  # a fragment is not sent: the token must be in the query
        assert page.evaluate("document.body.textContent").startswith("401")
        page.goto(url + f"?token={token}#/streaming/run")
        page.wait_for_selector("#completed-batches tbody tr")
        assert page.url == url + "#/streaming/run"
        assert page.eval_on_selector_all("#completed-batches tbody tr", "rows => rows.length") == 5
        (cookie,) = context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and token not in cookie["value"]
        assert page.evaluate("document.cookie") == ""  # HttpOnly: the page's scripts cannot read it
        context.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


_SERVE_NAMED_TRACES = """
import sys, anyio
from streaming.ui import StreamingUI

async def main():
    ui = StreamingUI(metrics=False)
    for name in sys.argv[2:]:
        ui.add_trace(sys.argv[1], name=name)
    async with anyio.create_task_group() as tg:
        print(await tg.start(ui.serve, "127.0.0.1", 0), flush=True)

anyio.run(main)
"""


def test_every_context_name_opens_its_pages_and_durations_read_in_whole_units(browser: Any, tmp_path: Path) -> None:
    """Names with '/', '%', '#', '?' and dots ('.', '..' too) open their Streaming and batch pages; fmtMs never shows 60 s;
    the query page's watermark gap is Spark's."""
    path = tmp_path / "run.jsonl"
    subprocess.run([sys.executable, "-m", "streaming._cli", "simulate", "--interval", "1s", "--rate", "10", "--op",
                    "kind=constant,value=200ms", "--batches", "3", "--events", str(path)], check=True, capture_output=True)
    names = ["team/job", "a%2Fb", "50% done", "q#1", "what?", "..", "."]
    server = subprocess.Popen([sys.executable, "-c", _SERVE_NAMED_TRACES, str(path), *names],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), (url, server.stderr.read() if server.poll() is not None else "")
        page = open_page(browser, url)
        for name in names:
            page.goto(url + "#/streaming/" + page.evaluate("name => encodeURIComponent(name)", name))
            page.wait_for_selector("#completed-batches tbody tr")
            assert page.eval_on_selector_all("#completed-batches tbody tr", "rows => rows.length") == 3
            assert page.text_content("#completed-batches thead th") == "Batch Time (UTC)"  # the zone it is shown in
            page.click("#completed-batches tbody tr a")
            page.wait_for_selector("#operations tbody tr")
            assert page.text_content("#status").startswith("not live"), (name, page.text_content("#status"))
        shown = page.evaluate("[59999, 119600, 179500, 3599999, 7170000, 9.96, 999.6, 9994].map(fmtMs)")
        assert shown == ["1 min 0 s", "2 min 0 s", "3 min 0 s", "1 h 0 min", "2 h 0 min", "10 ms", "1.00 s", "9.99 s"]
        # The query page's "Global Watermark Gap", as Spark's: the batch's timestamp less the watermark, once it is above 0
        # (not the newest event's lead over it), for batches with data or without.
        gaps = page.evaluate("""[
            {timestamp: "2026-01-01T00:10:00.000Z", eventTime: {watermark: "1970-01-01T00:00:00.000Z", max: "2026-01-01T00:09:00.000Z"}},
            {timestamp: "2026-01-01T00:10:01.000Z", eventTime: {watermark: "2026-01-01T00:08:00.000Z", max: "2026-01-01T00:09:50.000Z"}},
            {timestamp: "2026-01-01T00:10:02.500Z", eventTime: {watermark: "2026-01-01T00:08:00.000Z"}},
            {timestamp: "2026-01-01T00:10:03.000Z", eventTime: {}},
            {timestamp: "2026-01-01T00:10:04.000Z"},
        ].map(watermarkGapMs)""")
        assert gaps == [None, 121_000, 122_500, None, None]
        # A timeline's line goes by time, whatever order the batches completed in (2000 completed before 1000).
        line = page.evaluate("""timeline([{name: "d", points: [[2000, 5], [1000, 7], [3000, 6]]}], {name: "order"})
            .querySelector("polyline").getAttribute("points").split(" ").map(p => Number(p.split(",")[0]))""")
        assert line == sorted(line) and len(line) == 3
        assert page.errors == []
    finally:
        server.terminate()
        server.wait(timeout=30)
