"""The web UI: an ASGI app (Starlette) a host mounts in its own server, or serves itself (Hypercorn).

Pages are static files (HTML, one script, one style sheet, shipped in the package: nothing is
loaded from the internet and nothing is built); the script reads the JSON API below and draws
the charts as SVG, polling for what is new. The API keeps the shapes of Spark's streaming REST
API under ``/api/v1/contexts/<name>/streaming/...``.
"""

from __future__ import annotations

import decimal
import ipaddress
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import urllib.parse
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import anyio
import anyio.abc
import anyio.to_thread
import sniffio

from listeners import BatchInfo, StreamingListenerBus
from scheduler import Duration, JobScheduler, library_logger

from ..runtime import QueryRuntime, StreamingContextState
from ._extras import require
from ._history import ContextHistory, check_retained, operation_json
from ._listen import listen, machine_names
from ._relay import ConnectionRelay, RelayStatistics
from ._retention import DEFAULT_RETAINED_CONTEXTS, RetainedContexts
from ._security import UISecurity, is_loopback_address, secure_app

__all__ = ["DEFAULT_UI_PORT", "StreamingUI"]

DEFAULT_UI_PORT = 4050
"""Where a standalone UI listens by default: beside Spark's own UI (4040 and up)."""


class StreamingUI:
    """A web UI of the contexts, queries and traces added to it: Spark's Streaming and Structured Streaming tabs.

    ::

        ui = StreamingUI()
        ui.attach(ssc)                               # before start, to see every batch
        app = ui.asgi_app()                          # mount it in the host's ASGI server
        # or: async with anyio.create_task_group() as tg: await tg.start(ui.serve, "127.0.0.1", 4050)

    Each attached one gets an inline listener (a few microseconds per batch) that keeps a bounded
    history; pages read it as JSON when they poll. With ``metrics`` (the default) the same
    contexts are also recorded by a :class:`StreamingMetrics`, served at ``/metrics``.

    Args:
        retained_batches: completed batches kept per context (Spark's ``spark.streaming.ui.retainedBatches``).
        retained_progress: progress reports kept per query.
        retained_contexts: stopped contexts kept, the oldest let go of beyond it (:class:`RetainedContexts`; Spark's
            ``spark.sql.streaming.ui.retainedQueries``, read by ``retained_contexts_setting(conf.get)``).
        metrics: a ``StreamingMetrics`` to feed and serve, ``True`` for a new one, ``False`` for none.
        refresh_ms: how often the pages poll.
        security: who may reach the UI and what it shows (:class:`UISecurity`): by default it
            serves on loopback only, without credentials, and shows failures without tracebacks.
    """

    def __init__(self, *, retained_batches: int = 1000, retained_progress: int = 1000, metrics: Any = True,
                 refresh_ms: int = 1000, security: UISecurity | None = None,
                 retained_contexts: int = DEFAULT_RETAINED_CONTEXTS) -> None:
        """Create a UI with nothing attached."""
        if isinstance(refresh_ms, bool) or not isinstance(refresh_ms, int) or refresh_ms < 50:
            raise ValueError(f"refresh_ms must be an int of at least 50, got {refresh_ms!r}")
        check_retained(retained_batches=retained_batches, retained_progress=retained_progress, retained_contexts=retained_contexts)
        self.retained_batches = retained_batches
        self.retained_progress = retained_progress
        self.refresh_ms = refresh_ms
        self.security = security if security is not None else UISecurity()
        if metrics is True:
            from ._metrics import StreamingMetrics

            metrics = StreamingMetrics(retained_unnamed=retained_contexts)
        self.metrics = metrics or None
        self._histories: dict[str, ContextHistory] = {}
        self._retention, self._added = RetainedContexts(retained_contexts), 0  # _added: the default names' numbers
        self._relay: ConnectionRelay | None = None
        self._lookups = anyio.CapacityLimiter(1)  # Spark job-id lookups: one thread at most, never the host's
        self._log = library_logger("aiodstream.ui", component="StreamingUI")

    @property
    def histories(self) -> dict[str, ContextHistory]:
        """Each attached context's or trace's history, by name (stopped contexts: the last ``retained_contexts``)."""
        self._retention.sweep(self._histories)
        return dict(self._histories)

    def _name(self, wanted: str | None, target: object) -> str:
        self._added += 1
        base = str(wanted or getattr(target, "name", None) or f"context-{self._added}")
        if wanted is not None and wanted in self._histories:
            raise ValueError(f"the UI already shows {wanted!r}; give this one another name")
        name, n = base, 1
        while name in self._histories:
            n += 1
            name = f"{base}-{n}"
        return name

    def attach(self, target: Any, *, name: str | None = None) -> ContextHistory:
        """Show ``target`` from now on: a ``StreamingContext``, a ``StreamingRuntime`` or a continuous query.

        Returns its history (its ``name`` is the label in the pages and URLs: the context's name,
        or ``<name>-2``, ... when the UI still shows one of that name, stopped or not). Its
        metrics' ``query`` label is the name too, but continues the series of a stopped context of
        that name (see :class:`StreamingMetrics`).
        """
        runtime: QueryRuntime = target.runtime if hasattr(target, "addStreamingListener") else target
        self._retention.sweep(self._histories)
        label = self._name(name, runtime)
        interval: Duration = runtime.interval
        describe = getattr(target, "ui_links", None)
        links = describe() if callable(describe) else {}
        # The running batches are read when a page asks: no snapshot events for them. A runtime with a
        # JobScheduler has them already (nothing to keep per batch); another runtime's bus follows them.
        bus = getattr(runtime, "listener_bus", None)
        logs: dict[str, Any] = {}
        active: Callable[[], list[BatchInfo]] | None = None
        if isinstance(getattr(runtime, "scheduler", None), JobScheduler):
            source: Any = runtime

            def running() -> list[BatchInfo]:
                # The scheduler read at each call: a runtime makes a new one when its checkpoint location is set again.
                return [BatchInfo.from_job_set(job_set) for job_set in source.scheduler.running_batches()]

            active = running
        elif isinstance(bus, StreamingListenerBus):
            bus.follow_batches()
            active = bus.active_batches
        dropped: Callable[[], list[BatchInfo]] | None = None
        if active is not None:
            # What is still running when the runtime has STOPPED is what its immediate stop dropped: no longer
            # active, counted as dropped. Read when a page asks, so the engine pays nothing per batch.
            unfinished = active

            def active_now() -> list[BatchInfo]:
                return [] if runtime.state is StreamingContextState.STOPPED else unfinished()

            def dropped_at_stop() -> list[BatchInfo]:
                return unfinished() if runtime.state is StreamingContextState.STOPPED else []

            active, dropped = active_now, dropped_at_stop
        if isinstance(bus, StreamingListenerBus):
            if runtime.kind == "micro-batch":
                # The completed batches and progress reports too: the bus keeps them once for
                # every view, and the history reads them when a page asks. The batch log keeps
                # only a reader's run of batches: the history keeps its retained ones as values.
                logs = {"batch_log": bus.batch_log(),
                        "progress_log": bus.progress_log(self.retained_progress)}
        history = ContextHistory(
            label, kind=runtime.kind, batch_interval_ms=int(interval.milliseconds),
            retained_batches=self.retained_batches, retained_progress=self.retained_progress,
            spark_ui=links.get("spark_ui"), spark_jobs=links.get("spark_jobs"),
            show_tracebacks=self.security.show_tracebacks,
            active=active, dropped=dropped, **logs,
        )
        if hasattr(target, "addStreamingListener"):
            target.addStreamingListener(history.listener())
        else:
            target.add_listener(history.listener(), name="StreamingUI")
        if self.metrics is not None:
            # Under the name it was given, not this UI's label: the metrics continue the series of a
            # stopped context of that name (a restart), where the UI keeps showing the stopped one.
            self.metrics.attach(target, name=name or getattr(runtime, "name", None), default_name=label, history=history)
        self._histories[label] = history
        self._retention.add(label, runtime, history)
        return history

    def add_trace(self, trace: Any, *, name: str | None = None) -> ContextHistory:
        """Show a recorded or simulated run: a ``Trace``, or the path of a trace file (``TraceRecorder``, ``simulate --events``);
        a file that is not a trace raises ``ModelError`` naming its line (as ``read_trace``), an unreadable one ``OSError``."""
        from streaming.simulation import read_trace

        if isinstance(trace, (str, os.PathLike)):
            label_source = Path(trace).stem
            trace = read_trace(trace)
        else:
            label_source = "trace"
        label = self._name(name or label_source, None)
        interval = trace.batch_interval
        history = ContextHistory(label, kind="trace", live=False, retained_batches=self.retained_batches,
                                 retained_progress=self.retained_progress,
                                 batch_interval_ms=None if interval is None else interval.milliseconds,
                                 show_tracebacks=self.security.show_tracebacks)
        history.feed(trace.events)
        self._histories[label] = history
        return history

    # -- the ASGI app --

    def asgi_app(self) -> Any:
        """A Starlette app with the pages, the JSON API and (with metrics) ``/metrics``; runs on asyncio and trio.

        Every path asks for the credentials :attr:`security` names, if any. Mounted in a host's
        own server, the app checks the Host header only when ``security.allowed_hosts`` is set
        (then: those names and loopback ones); the host's server owns that policy otherwise.
        :meth:`serve` always checks it.
        """
        security = self.security
        return self._secured(security.hosts_for(None, None) if security.allowed_hosts else None)

    def _secured(self, allowed_hosts: list[str] | None) -> Any:
        return secure_app(self._routes_app(), self.security, allowed_hosts)

    def _routes_app(self) -> Any:
        require("starlette", "streaming.ui's web UI")
        from starlette.applications import Starlette
        from starlette.exceptions import HTTPException
        from starlette.responses import FileResponse, RedirectResponse, Response
        from starlette.routing import Mount, Route

        static = Path(str(resources.files("streaming.ui") / "static"))
        JSONResponse = _json_response_class()  # noqa: N806
        ui = self

        def history_of(request: Any) -> ContextHistory:
            name = request.path_params["name"]
            ui._retention.sweep(ui._histories)
            if request.scope.get(_NAME_QUOTED):  # quoted by _ContextSegment (else the server decoded it once already)
                name = urllib.parse.unquote(name)
            history = ui._histories.get(name)
            if history is None and name.upper() in ("%2E", "%2E%2E"):
                # "." and "..": a browser resolves them as dot segments even percent-encoded once,
                # so the pages send their dots encoded twice (app.js's ctx()).
                name = urllib.parse.unquote(name)
                history = ui._histories.get(name)
            if history is None:
                raise HTTPException(404, f"no context named {name!r}")
            return history

        def int_param(request: Any, key: str, default: int = 0) -> int:
            raw = request.query_params.get(key)
            if raw is None:
                return default
            try:
                return int(raw)
            except ValueError:
                raise HTTPException(400, f"{key} must be an integer, got {raw!r}") from None

        async def index(request: Any) -> Any:
            return FileResponse(static / "index.html", headers={"Cache-Control": "no-cache"})

        async def config(request: Any) -> Any:
            return JSONResponse({"refreshMs": ui.refresh_ms, "retainedBatches": ui.retained_batches,
                                 "metrics": ui.metrics is not None})

        async def contexts(request: Any) -> Any:
            return JSONResponse([h.statistics() for h in list(ui.histories.values())])

        async def statistics(request: Any) -> Any:
            return JSONResponse(history_of(request).statistics())

        async def batches(request: Any) -> Any:
            statuses = request.query_params.getlist("status")  # repeated, as Spark's takes a list
            for status in statuses:
                if status not in ("QUEUED", "PROCESSING", "COMPLETED"):
                    raise HTTPException(400, f"status must be QUEUED, PROCESSING or COMPLETED, got {status!r}")
            return JSONResponse(history_of(request).batches(since=int_param(request, "since"), status=statuses))

        def id_param(request: Any, key: str, what: str) -> int:
            raw = request.path_params[key]
            if not _JAVA_LONG.fullmatch(raw) or len(raw) > 20:  # as Spark's toLong: ASCII digits, no "_", a sign
                raise HTTPException(400, f"{what}, got {raw!r}")
            return int(raw)

        def batch_of(request: Any) -> tuple[ContextHistory, dict[str, Any], Any]:
            history = history_of(request)
            batch_id = id_param(request, "batch_id", "a batch id is its time in ms")
            found = history.batch(batch_id)
            if found is None:
                raise HTTPException(404, f"batch {request.path_params['batch_id']} is not retained")
            return history, found[0], found[1]

        async def batch(request: Any) -> Any:
            return JSONResponse(batch_of(request)[1])

        async def operations(request: Any) -> Any:
            return JSONResponse(await operations_of(request))

        async def operation(request: Any) -> Any:
            op_id = id_param(request, "op_id", "an output operation id is an integer")
            found = [op for op in await operations_of(request) if op["outputOpId"] == op_id]
            if not found:
                raise HTTPException(404, f"unknown output operation: {op_id}")
            return JSONResponse(found[0])

        async def operations_of(request: Any) -> list[dict[str, Any]]:
            history, _, info = batch_of(request)
            ops = list(info.output_operation_infos.values())
            jobs: list[list[int] | None] = [None] * len(ops)
            if history.spark_jobs is not None:
                lookup = history.spark_jobs
                batch_ms = info.batch_time.milliseconds

                def find() -> None:
                    for i, op in enumerate(ops):
                        jobs[i] = lookup(batch_ms, op.id)

                try:
                    with anyio.fail_after(5):
                        await anyio.to_thread.run_sync(find, abandon_on_cancel=True, limiter=ui._lookups)
                except Exception as exc:  # Spark gone or slow: the table still shows, without links
                    ui._log.warning("could not look up Spark job ids", error=repr(exc))
            tracebacks = ui.security.show_tracebacks
            return [operation_json(op, j, show_tracebacks=tracebacks) for op, j in zip(ops, jobs, strict=True)]

        async def receivers(request: Any) -> Any:
            return JSONResponse(history_of(request).receivers())

        async def receiver(request: Any) -> Any:
            history = history_of(request)
            stream_id = id_param(request, "stream_id", "a receiver's id is its stream id, an integer")
            found = [r for r in history.receivers() if r["streamId"] == stream_id]
            if not found:
                raise HTTPException(404, f"unknown receiver: {stream_id}")
            return JSONResponse(found[0])

        async def progress(request: Any) -> Any:
            return JSONResponse(history_of(request).progress(since=int_param(request, "since")))

        async def favicon(request: Any) -> Any:
            return Response(status_code=204)

        api = "/api/v1/contexts/{name}"
        routes = [
            Route("/", index),
            Route("/favicon.ico", favicon),
            Route("/api/v1/config", config),
            Route("/api/v1/contexts", contexts),
            Route(api + "/streaming/statistics", statistics),
            Route(api + "/streaming/batches", batches),
            Route(api + "/streaming/batches/{batch_id}", batch),
            Route(api + "/streaming/batches/{batch_id}/operations", operations),
            Route(api + "/streaming/batches/{batch_id}/operations/{op_id}", operation),
            Route(api + "/streaming/receivers", receivers),
            Route(api + "/streaming/receivers/{stream_id}", receiver),
            Route(api + "/progress", progress),
            Mount("/static", app=_static(static)),
        ]
        if self.metrics is not None:
            routes.append(Mount("/metrics", app=self.metrics.asgi_app()))
            routes.append(Route("/metrics", lambda request: RedirectResponse("/metrics/")))
        return _ContextSegment(Starlette(routes=routes))

    # -- serving it --

    async def serve(self, host: str = "127.0.0.1", port: int = DEFAULT_UI_PORT, port_retries: int = 0, *,
                    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the UI on ``host:port`` (``0``: any free port) until cancelled; reports its URL to ``task_status``.

        With ``port_retries``, a taken port is followed by the next ones, up to that many more
        (as Spark's UI does with ``spark.port.maxRetries``).

        Runs Hypercorn on the running event loop (asyncio or trio), without touching the
        process's signal handlers (the host or the context owns those), quiet unless the host
        configures logging (its loggers are ``hypercorn.error`` and ``hypercorn.access``).
        Hypercorn listens on a private Unix socket (in a new 0700 directory, removed at the end);
        the public port is accepted by a :class:`ConnectionRelay`, which holds at most
        ``security.limits.max_connections`` connections (a new one closes the one idle the longest)
        and closes those idle or not reading their answer (:meth:`connection_statistics`).

        Cancelled, it stops accepting at once; open requests finish within Hypercorn's graceful
        timeout (1 s), then every connection ends.

        Beyond loopback (``0.0.0.0``, a routable address or a name that resolves to one) it
        listens only with ``security.allow_remote``, and logs a warning when it does. It answers
        only requests whose Host header names its address, a loopback name (``localhost``), the
        machine's host name when bound to every interface, or one of ``security.allowed_hosts``
        (others get 400): a page on another site cannot reach it by rebinding its own name
        to this address.

        Raises:
            OSError: the port is taken (the message names it).
            RemoteUIRefusedError: ``host`` is not a loopback address and ``security.allow_remote`` is off.
        """
        from hypercorn.config import Config

        security = self.security
        limits = security.limits
        sock = listen(host, port, port_retries, check=lambda address: security.check_bind(host, address))
        bound_host, bound_port = sock.getsockname()[:2]
        url = f"http://{_url_host(bound_host)}:{bound_port}/"
        extra: tuple[str, ...] = ()
        if ipaddress.ip_address(bound_host.split("%", 1)[0]).is_unspecified:
            extra = machine_names()
        try:
            allowed_hosts = security.hosts_for(host, bound_host, extra)
            private = _PrivateSocket()
        except BaseException:
            sock.close()
            raise
        config = Config()
        config.bind = [f"fd://{os.dup(private.sock.fileno())}"]  # Hypercorn owns (and closes) the duplicate
        config.errorlog = logging.getLogger("hypercorn.error")
        config.accesslog = None
        config.graceful_timeout = 1.0
        # Hypercorn's own keep-alive (5 s) ends a connection idle between requests, and with it the relay's (a client's
        # close reaches Hypercorn only as an EOF, which it answers only at that timeout); the relay's idle timeout bounds
        # the rest (a request or an answer that stalls).
        app = self._secured(allowed_hosts)
        stop = anyio.Event()
        relay = self._relay = ConnectionRelay(limits, private.path, name=url)
        accepting = anyio.CancelScope()
        # Shielded: a cancellation of serve() stops the accepting, and the connections live on through
        # Hypercorn's graceful shutdown (open requests finish, within graceful_timeout); then they end.
        connections = anyio.CancelScope(shield=True)

        async def run_server() -> None:
            try:
                with anyio.CancelScope(shield=True):  # Hypercorn's own graceful shutdown, not a teardown mid-request
                    if sniffio.current_async_library() == "trio":
                        from hypercorn.trio import serve as trio_serve

                        await trio_serve(app, config, mode="asgi", shutdown_trigger=stop.wait)
                    else:
                        from hypercorn.asyncio import serve as asyncio_serve

                        await asyncio_serve(app, config, mode="asgi", shutdown_trigger=stop.wait)
            finally:
                connections.cancel()

        async def run_relay() -> None:
            with connections:
                async with anyio.create_task_group() as relayed:
                    async with await anyio.abc.SocketListener.from_socket(sock) as listener:  # closed when accepting stops
                        with accepting:
                            await relay.serve(listener, relayed)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_server)
                tg.start_soon(run_relay)
                self._log.info("web UI serving", url=url, authentication=security.authentication,
                               max_connections=limits.max_connections)
                if not is_loopback_address(bound_host):
                    self._log.warning("web UI reachable beyond this machine", url=url, host=host,
                                      setting="spark.aiodstream.ui.allowRemote", authentication=security.authentication,
                                      allowed_hosts=",".join(allowed_hosts))
                task_status.started(url)
                try:
                    await anyio.sleep_forever()
                finally:
                    accepting.cancel()
                    stop.set()
        finally:
            sock.close()
            private.close()

    def connection_statistics(self) -> RelayStatistics | None:
        """The served port's connection counters (:class:`RelayStatistics`): of the current or last :meth:`serve`, else ``None``."""
        return None if self._relay is None else self._relay.statistics()


_UNIX_PATH_ROOM = 90  # bytes of a Unix socket's directory (sun_path holds 108 on Linux, 104 on macOS and BSD)


class _PrivateSocket:
    """Hypercorn's listening socket: a Unix socket in a new 0700 directory, so only the relay (and this user) reach it."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="aiodstream-ui-")  # mode 0700
        if len(os.fsencode(self.directory)) > _UNIX_PATH_ROOM:  # a long TMPDIR: a socket path holds about 100 bytes
            os.rmdir(self.directory)
            self.directory = tempfile.mkdtemp(prefix="aiodstream-ui-", dir="/tmp")
        self.path = os.path.join(self.directory, "ui.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.bind(self.path)
            self.sock.listen(128)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class _ContextSegment:
    """ASGI middleware: reads the context's name in ``/api/v1/contexts/<name>/...`` from the raw path, as sent.

    Routing matches the decoded path, where a name's encoded ``/`` (``team%2Fjob``) would split it
    in two: the name's segment is decoded here, once, from ``raw_path`` (which HTTP servers pass),
    and given to the routes quoted again, so any name reaches its context.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope = _with_context_segment(scope)
        await self.app(scope, receive, send)


_CONTEXTS = ["api", "v1", "contexts"]


_JAVA_LONG = re.compile(r"[+-]?[0-9]+")

_NAME_QUOTED = "aiodstream.context_name_quoted"
"""Set in a request's scope by :func:`_with_context_segment` once the context name's segment is quoted in its path."""


def _with_context_segment(scope: Any) -> Any:
    """``scope`` with the context name's segment of its path quoted (``/`` as ``%2F``), or as it is."""
    root_path = scope.get("root_path", "")
    path: str = scope["path"]
    # A mount (Starlette's) keeps its prefix in path and raw_path; a server's root_path (Hypercorn's) leaves it out of both.
    rooted = bool(root_path) and path.startswith(root_path)
    raw = scope.get("raw_path")
    if raw is not None:
        segments = [urllib.parse.unquote_to_bytes(segment).decode("utf-8", "replace")
                    for segment in bytes(raw).split(b"?", 1)[0].split(b"/")[1 + (root_path.count("/") if rooted else 0):]]
    else:  # a server that passes no raw_path: the decoded path's segments
        segments = (path[len(root_path):] if rooted else path).split("/")[1:]
    if len(segments) < 5 or segments[:3] != _CONTEXTS:
        return scope
    name = urllib.parse.quote(segments[3], safe="")
    rest = segments[4:]
    return {**scope, "path": "/".join([root_path if rooted else "", *_CONTEXTS, name, *rest]), _NAME_QUOTED: True}


def _json_response_class() -> Any:
    from starlette.responses import JSONResponse

    class _JSON(JSONResponse):
        """Progress reports hold Decimals (Spark's exact rates): sent as JSON numbers."""

        def render(self, content: Any) -> bytes:
            return json.dumps(content, default=_number, separators=(",", ":")).encode("utf-8")

    return _JSON


def _number(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _static(root: Path) -> Any:
    from starlette.staticfiles import StaticFiles

    return StaticFiles(directory=str(root))
