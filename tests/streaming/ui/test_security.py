"""The web UI's front door: loopback unless allowed, credentials for pages, API and metrics, the Host check, tracebacks on request."""

from __future__ import annotations

import base64
import json
import logging
import re
import sys
import traceback
import urllib.error
import urllib.request
import uuid
from typing import Any

import anyio
import anyio.to_thread
import pytest

import streaming.ui as ui_package
from listeners import OutputOperationInfo, QueryTerminated, ReceiverError, ReceiverInfo
from scheduler import ManualClock, Seconds, Time
from streaming import StreamingRuntime
from streaming._cli import main as cli
from streaming.spark import SparkSettings
from streaming.ui import StreamingUI
from streaming.ui._history import operation_json
from tests.streaming.ui.test_metrics import pipeline
from tests.support import advance, capture_events

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token-4c1d6b0e9a7f"
PATHS = ["/", "/api/v1/contexts", "/metrics/"]


async def call(app: Any, path: str, headers: dict[str, str] | None = None,
               host: str = "127.0.0.1:4050") -> tuple[int, dict[str, list[str]], str]:
    """GET ``path`` from an ASGI app in this process, as a server would pass it: status, headers (lists), body."""
    raw_path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": raw_path, "raw_path": raw_path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", host.encode()), *[(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 4050)}
    sent: list[dict[str, Any]] = []
    received = []

    async def receive() -> dict[str, Any]:
        if received:  # the client stays connected: a response listening for a disconnect waits (and is cancelled)
            await anyio.sleep_forever()
        received.append(True)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    found: dict[str, list[str]] = {}
    for key, value in start["headers"]:
        found.setdefault(key.decode().lower(), []).append(value.decode())
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], found, body.decode("utf-8", "replace")


def get(url: str, host: str | None = None) -> tuple[int, str]:
    """GET ``url`` over real HTTP (blocking), with another Host header if given: status and body."""
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def refused_message(shown: str) -> str:
    return (f"the web UI listens on loopback addresses only unless spark.aiodstream.ui.allowRemote=true, got {shown}: "
            "anyone who reaches that port reads every page, the JSON API and /metrics; listen on 127.0.0.1, or set "
            "spark.aiodstream.ui.allowRemote=true (UISecurity(allow_remote=True); aiodstream ui --allow-remote) together "
            "with spark.aiodstream.ui.token or spark.aiodstream.ui.user and spark.aiodstream.ui.password")


# -- binding beyond loopback --


async def test_a_non_loopback_host_is_refused_without_allow_remote() -> None:
    """serve('0.0.0.0') without allow_remote raises naming the setting, and nothing listens."""
    ui = StreamingUI(metrics=False)
    async with anyio.create_task_group() as tg:
        with pytest.raises(ValueError, match=re.escape(refused_message("0.0.0.0"))) as caught:
            await tg.start(ui.serve, "0.0.0.0", 0)
        tg.cancel_scope.cancel()
    assert isinstance(caught.value, ui_package.RemoteUIRefusedError)


def test_the_ui_command_refuses_a_remote_host_without_allow_remote(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``aiodstream ui --host 0.0.0.0`` exits 2 naming the setting and the flag."""
    path = tmp_path / "run.jsonl"
    assert cli(["simulate", "--interval", "1s", "--rate", "10", "--op", "kind=constant,value=100ms", "--batches", "3",
                "--events", str(path), "--no-progress"]) == 0
    capsys.readouterr()
    assert cli(["ui", str(path), "--host", "0.0.0.0", "--port", "0"]) == 2
    assert capsys.readouterr().err == f"aiodstream ui: error: {refused_message('0.0.0.0')}\n"


async def test_allow_remote_serves_beyond_loopback_and_logs_a_warning() -> None:
    """With allow_remote the UI listens on every interface and says so in a warning naming the setting."""
    ui = StreamingUI(metrics=False, security=ui_package.UISecurity(allow_remote=True, token=TOKEN))
    with capture_events(logging.WARNING) as events:
        async with anyio.create_task_group() as tg:
            url = await tg.start(ui.serve, "0.0.0.0", 0)
            port = int(url.rsplit(":", 1)[1].strip("/"))
            status, _ = await anyio.to_thread.run_sync(get, f"http://127.0.0.1:{port}/api/v1/contexts")
            tg.cancel_scope.cancel()
    assert url == f"http://0.0.0.0:{port}/" and status == 401
    warnings = [e for e in events if e["event"] == "web UI reachable beyond this machine"]
    assert len(warnings) == 1
    assert {k: warnings[0][k] for k in ("log_level", "url", "host", "setting", "authentication")} == {
        "log_level": "warning", "url": url, "host": "0.0.0.0", "setting": "spark.aiodstream.ui.allowRemote",
        "authentication": "token"}


# -- credentials --


@pytest.mark.parametrize("path", PATHS)
async def test_a_token_or_basic_auth_is_required_for_pages_api_and_metrics(path: str) -> None:
    """Without credentials 401 (with both challenges); a bearer token or basic auth gives 200; wrong ones 401."""
    security = ui_package.UISecurity(token=TOKEN, user="ops", password="pass word:1")
    app = StreamingUI(security=security).asgi_app()
    status, headers, body = await call(app, path)
    assert status == 401
    assert headers["www-authenticate"] == ['Basic realm="aiodstream UI", charset="UTF-8"', 'Bearer realm="aiodstream UI"']
    assert body == ("401 Unauthorized: this web UI needs its token (an 'Authorization: Bearer <token>' header, or once in "
                    "a browser: ?token=<token>) or its user and password (HTTP basic auth)\n")
    assert (await call(app, path, {"Authorization": f"Bearer {TOKEN}"}))[0] == 200
    assert (await call(app, path, basic("ops", "pass word:1")))[0] == 200
    for wrong in ({"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": "Bearer "}, basic("ops", "pass word"),
                  basic("root", "pass word:1"), {"Authorization": "Basic !!notbase64"}, {"Cookie": f"aiodstream_ui={TOKEN}"}):
        assert (await call(app, path, wrong))[0] == 401, wrong


async def test_metrics_scraped_with_a_bearer_token(clock: ManualClock) -> None:
    """/metrics/ answers a Prometheus scrape carrying the token (its ``authorization`` option), not one without."""
    ui = StreamingUI(security=ui_package.UISecurity(token=TOKEN))
    async with StreamingRuntime(pipeline([2, 3]), Seconds(1), clock=clock, name="scraped") as runtime:
        ui.attach(runtime)
        await runtime.start()
        await advance(runtime, clock, times=2)
        await runtime.listener_bus.wait_delivered()
        app = ui.asgi_app()
        status, _, text = await call(app, "/metrics/", {"Authorization": f"Bearer {TOKEN}"})
        denied = await call(app, "/metrics/")
        await runtime.stop()
    assert status == 200 and 'aiodstream_batches_total{outcome="succeeded",query="scraped"} 2.0' in text
    assert denied[0] == 401 and "aiodstream_batches_total" not in denied[2]


async def test_a_token_link_sets_an_httponly_cookie_and_redirects_without_the_token() -> None:
    """``?token=`` answers 303 to the same address without it and an HttpOnly SameSite cookie that is not the token."""
    app = StreamingUI(security=ui_package.UISecurity(token=TOKEN)).asgi_app()
    status, headers, _ = await call(app, f"/api/v1/contexts?x=1&token={TOKEN}")
    assert status == 303 and headers["location"] == ["/api/v1/contexts?x=1"]
    assert headers["referrer-policy"] == ["no-referrer"] and headers["cache-control"] == ["no-store"]
    (cookie,) = headers["set-cookie"]
    name, value = cookie.split(";", 1)[0].split("=", 1)
    attributes = [a.strip() for a in cookie.split(";")[1:]]
    assert sorted(attributes) == ["HttpOnly", "Path=/", "SameSite=lax"]
    assert name.startswith("aiodstream_ui_") and TOKEN not in cookie and len(value) == 64
    assert (await call(app, "/api/v1/contexts", {"Cookie": f"{name}={value}"}))[0] == 200
    assert (await call(app, "/api/v1/contexts", {"Cookie": f"{name}={value[:-1]}0"}))[0] == 401
    # A wrong token sets nothing; a path of two slashes cannot send the browser to another site.
    status, headers, _ = await call(app, f"/?token={TOKEN}x")
    assert status == 401 and "set-cookie" not in headers
    status, headers, _ = await call(app, f"//evil.example/?token={TOKEN}")
    assert status == 303 and headers["location"] == ["/evil.example/"]
    # The link's token repeated is still the token; a stale one beside a valid cookie or header does not undo them.
    status, headers, _ = await call(app, f"/api/v1/contexts?token={TOKEN}&token={TOKEN}")
    assert status == 303 and headers["location"] == ["/api/v1/contexts"] and "set-cookie" in headers
    assert (await call(app, f"/api/v1/contexts?token={TOKEN}&token=stale"))[0] == 401
    assert (await call(app, "/api/v1/contexts?token=stale", {"Cookie": f"{name}={value}"}))[0] == 200
    assert (await call(app, "/api/v1/contexts?token=stale", {"Authorization": f"Bearer {TOKEN}"}))[0] == 200


@pytest.mark.parametrize(("header", "secure"), [
    ({"X-Forwarded-Proto": "https"}, True), ({"X-Forwarded-Proto": "HTTPS, http"}, True),
    ({"Forwarded": 'for=192.0.2.1;proto="https";host=ui.example'}, True), ({"Forwarded": "proto=http, proto=https"}, False),
    ({"X-Forwarded-Proto": "http"}, False), ({}, False)])
async def test_behind_a_tls_proxy_that_says_so_the_cookie_is_secure(header: dict[str, str], secure: bool) -> None:
    """The relay speaks plain HTTP to a TLS-terminating proxy: its X-Forwarded-Proto or Forwarded header (first hop)
    makes the cookie Secure, so the browser never sends it over plain HTTP."""
    app = StreamingUI(security=ui_package.UISecurity(token=TOKEN)).asgi_app()
    status, headers, _ = await call(app, f"/?token={TOKEN}", header)
    (cookie,) = headers["set-cookie"]
    assert status == 303 and ("Secure" in [a.strip() for a in cookie.split(";")]) is secure


# -- the Host check --


async def test_a_foreign_host_header_is_rejected() -> None:
    """A served UI answers its own address and localhost; another name (DNS rebinding) gets 400 unless allowed."""
    async with anyio.create_task_group() as tg:
        url = await tg.start(StreamingUI(metrics=False).serve, "127.0.0.1", 0)
        port = int(url.rsplit(":", 1)[1].strip("/"))
        api = url + "api/v1/contexts"
        results = {host: await anyio.to_thread.run_sync(get, api, host)
                   for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1:{port}", f"localhost:{port}",
                                f"ui.example.com:{port}")}
        tg.cancel_scope.cancel()
    assert {h: s for h, (s, _) in results.items()} == {f"attacker.example:{port}": 400, "attacker.example": 400,
                                                       f"127.0.0.1:{port}": 200, f"localhost:{port}": 200,
                                                       f"ui.example.com:{port}": 400}
    assert results["attacker.example"][1] == "Invalid host header"
    allowed = StreamingUI(metrics=False, security=ui_package.UISecurity(allowed_hosts=("UI.example.com", "*.corp.example")))
    async with anyio.create_task_group() as tg:
        url = await tg.start(allowed.serve, "127.0.0.1", 0)
        statuses = [(await anyio.to_thread.run_sync(get, url + "api/v1/contexts", host))[0]
                    for host in ("ui.example.com", "a.corp.example:80", "corp.example", "attacker.example")]
        tg.cancel_scope.cancel()
    assert statuses == [200, 200, 400, 400]


async def test_a_mounted_app_checks_the_host_only_when_allowed_hosts_are_set() -> None:
    """asgi_app() leaves the Host to the host's server, unless allowed_hosts names some (plus loopback names)."""
    assert (await call(StreamingUI(metrics=False).asgi_app(), "/api/v1/contexts", host="service.example"))[0] == 200
    app = StreamingUI(metrics=False, security=ui_package.UISecurity(allowed_hosts=("service.example",))).asgi_app()
    assert [(await call(app, "/api/v1/contexts", host=h))[0] for h in ("service.example", "localhost:1", "[::1]:80",
                                                                      "other.example")] == [200, 200, 200, 400]


# -- tracebacks --


def failure_events(history: Any) -> None:
    """A receiver error and a query's death, with real tracebacks, delivered to ``history``."""
    def boom(kind: type[Exception], message: str) -> str:
        try:
            raise kind(message)
        except Exception as exc:
            return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    info = ReceiverInfo(0, "socket", True, "localhost", "driver", last_error_message="connection reset",
                        last_error=boom(ConnectionResetError, "peer reset"), last_error_time=Time(500))
    history.feed([ReceiverError(info), QueryTerminated(uuid.uuid4(), uuid.uuid4(), boom(KeyError, "gone"))])


async def failed_run(ui: StreamingUI) -> dict[str, Any]:
    """Three batches, the second failing, plus a receiver error and a query failure: every API view that shows errors."""
    clock = ManualClock(0)
    async with StreamingRuntime(pipeline([3, 5, 2], fail_at=2000), Seconds(1), clock=clock, name="failing") as runtime:
        history = ui.attach(runtime)
        await runtime.start()
        await advance(runtime, clock, times=3)
        await runtime.listener_bus.wait_delivered()
        await runtime.stop()
    failure_events(history)
    app = ui.asgi_app()
    api = "/api/v1/contexts/failing/"
    views = {}
    for name, path in (("contexts", "/api/v1/contexts"), ("statistics", api + "streaming/statistics"),
                       ("batches", api + "streaming/batches"), ("batch", api + "streaming/batches/2000"),
                       ("operations", api + "streaming/batches/2000/operations"), ("receivers", api + "streaming/receivers"),
                       ("operation", api + "streaming/batches/2000/operations/0"), ("receiver", api + "streaming/receivers/0")):
        status, _, body = await call(app, path)
        assert status == 200, (path, body)
        views[name] = body
    return views


async def test_failures_show_type_and_message_without_tracebacks_by_default() -> None:
    """No view of the API holds a traceback; each failure reads as its type and message."""
    views = await failed_run(StreamingUI(metrics=False))
    for name, body in views.items():
        assert "Traceback" not in body and 'File \\"' not in body, name
    (op,) = json.loads(views["operations"])
    assert (op["failureReason"], op["failureHeadline"]) == ("RuntimeError: output failed", "RuntimeError: output failed")
    assert json.loads(views["batches"])[1]["firstFailureReason"] == "RuntimeError: output failed"
    statistics = json.loads(views["statistics"])
    assert (statistics["exception"], statistics["exceptionHeadline"]) == ("KeyError: 'gone'", "KeyError: 'gone'")
    (receiver,) = json.loads(views["receivers"])
    assert (receiver["lastErrorMessage"], receiver["lastError"]) == ("connection reset", "ConnectionResetError: peer reset")
    assert (json.loads(views["operation"]), json.loads(views["receiver"])) == (op, receiver)  # Spark's one-item paths


async def test_tracebacks_are_shown_with_show_tracebacks() -> None:
    """With show_tracebacks the operation, the query's death and the receiver's error carry their full tracebacks."""
    views = await failed_run(StreamingUI(metrics=False, security=ui_package.UISecurity(show_tracebacks=True)))
    (op,) = json.loads(views["operations"])
    assert op["failureReason"].startswith("Traceback (most recent call last):\n")
    assert op["failureReason"].endswith("RuntimeError: output failed") and op["failureHeadline"] == "RuntimeError: output failed"
    statistics = json.loads(views["statistics"])
    exception = statistics["exception"]
    assert exception.startswith("Traceback (most recent call last):\n") and exception.endswith("KeyError: 'gone'\n")
    assert statistics["exceptionHeadline"] == "KeyError: 'gone'"
    (receiver,) = json.loads(views["receivers"])
    assert receiver["lastError"].startswith("Traceback") and "ConnectionResetError: peer reset" in receiver["lastError"]


PY4J_WORKER_FAILURE = """\
Traceback (most recent call last):
  File "/app/job.py", line 8, in <module>
    sc.parallelize([1]).map(fail).count()
  File "/venv/lib/python3.11/site-packages/py4j/protocol.py", line 327, in get_return_value
    raise Py4JJavaError(
py4j.protocol.Py4JJavaError: An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.
: org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the Python worker: \
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 4327, in invoke_udf
    run_process()
  File "/app/job.py", line 6, in fail
    raise ValueError("boom\\nsecond line")
ValueError: boom
second line
 SQLSTATE: 38000
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:1097)
\tat java.base/java.lang.Thread.run(Thread.java:840)
\t... 12 more
"""


def test_an_error_summary_drops_python_worker_and_jvm_stack_traces() -> None:
    """A PySpark job failure keeps its exception lines and messages; frames of both stacks go; the headline is the worker's error."""
    assert ui_package.error_summary(PY4J_WORKER_FAILURE) == (
        "py4j.protocol.Py4JJavaError: An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
        ": org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the Python worker:\n"
        "ValueError: boom\nsecond line\n SQLSTATE: 38000")
    (op,) = json.loads(ui_failure_operations(PY4J_WORKER_FAILURE))
    assert op["failureHeadline"] == "ValueError: boom"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup and its traceback format are Python 3.11's")
def test_an_error_summary_keeps_the_last_exception_of_a_chain_and_a_group_s_members() -> None:
    """A chained error reads as the raised one; an exception group as its line and its members' lines."""
    def raised() -> BaseException:
        try:
            try:
                raise KeyError("k")
            except KeyError as exc:
                raise RuntimeError("outer") from exc
        except RuntimeError as exc:
            try:
                raise ExceptionGroup("several", [exc, ValueError("v")])  # noqa: F821 - Python 3.11+ builtin
            except BaseException as group:
                return group

    chained = raised().exceptions[0]  # type: ignore[attr-defined]
    text = "".join(traceback.format_exception(type(chained), chained, chained.__traceback__))
    assert ui_package.error_summary(text) == "RuntimeError: outer"
    group = raised()
    text = "".join(traceback.format_exception(type(group), group, group.__traceback__))
    assert ui_package.error_summary(text) == ("ExceptionGroup: several (2 sub-exceptions)\n"
                                              "KeyError: 'k'\n\nRuntimeError: outer\nValueError: v")


def ui_failure_operations(reason: str) -> str:
    """The operations view of one operation that failed with ``reason``."""
    op = OutputOperationInfo(Time(0), 0, "out", "out", Time(0), Time(1), reason)
    return json.dumps([operation_json(op, None)])


# -- settings --


def test_settings_are_read_and_bad_values_refused() -> None:
    """The spark.aiodstream.ui.* settings build a UISecurity; malformed ones are refused naming it; secrets stay out of its repr."""
    conf = {"spark.aiodstream.ui.allowRemote": "TRUE", "spark.aiodstream.ui.allowedHosts": "ui.example.com, [::1],10.0.0.5",
            "spark.aiodstream.ui.token": TOKEN, "spark.aiodstream.ui.user": "ops", "spark.aiodstream.ui.password": "hunter22",
            "spark.aiodstream.ui.showTracebacks": "true"}
    security = ui_package.UISecurity.from_settings(conf.get)
    assert (security.allow_remote, security.allowed_hosts, security.show_tracebacks, security.authentication) == (
        True, ("ui.example.com", "[::1]", "10.0.0.5"), True, "token or basic")
    assert TOKEN not in repr(security) and "hunter22" not in repr(security) and "user='ops'" in repr(security)
    assert ui_package.UISecurity.from_settings({}.get) == ui_package.UISecurity()
    assert ui_package.UISecurity.from_settings(SparkSettings(1, conf).get) == security  # the keys a context reads
    with pytest.raises(ValueError, match=re.escape("spark.aiodstream.ui.allowRemote must be true or false, got 'yes'")):
        ui_package.UISecurity.from_settings({"spark.aiodstream.ui.allowRemote": "yes"}.get)
    with pytest.raises(ValueError, match=re.escape(
            "spark.aiodstream.ui.allowedHosts takes host names without a port (a name, an IP address, '*.example.com' "
            "or '*' for any host), comma-separated; got 'ui.example.com:4050'")):
        ui_package.UISecurity.from_settings({"spark.aiodstream.ui.allowedHosts": "ui.example.com:4050"}.get)
    with pytest.raises(ValueError, match=re.escape(
            "basic auth needs both spark.aiodstream.ui.user and spark.aiodstream.ui.password, non-empty, got a user and no password")):
        ui_package.UISecurity.from_settings({"spark.aiodstream.ui.user": "ops"}.get)
    with pytest.raises(ValueError, match=re.escape("spark.aiodstream.ui.token must not be empty")):
        ui_package.UISecurity(token="  ")
