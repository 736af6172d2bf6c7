"""The served UI's public port: requests relayed to Hypercorn, a cap that evicts the longest idle, idle and write timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import struct
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, AsyncIterator, Iterator

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import pytest
import sniffio

from scheduler import LOGGER_ROOT, InvalidDurationError, event_fields
from streaming.spark import SparkSettings
from streaming.ui import ConnectionLimits, RelayStatistics, StreamingUI, UISecurity

pytestmark = pytest.mark.anyio

TOKEN = "relay-token-6f0e2b"
DAY = "1d"  # a timeout that never trips in a test
GUARD_S = 60  # a generous hang guard: only a broken relay reaches it
SCRIPT = (resources.files("streaming.ui") / "static" / "app.js").read_bytes()


@asynccontextmanager
async def served(**settings: str) -> AsyncIterator[tuple[StreamingUI, int]]:
    """A served UI (no metrics) with the ``spark.aiodstream.ui.*`` settings given by their short names: it and its port."""
    security = UISecurity.from_settings({f"spark.aiodstream.ui.{k}": v for k, v in settings.items()}.get)
    ui = StreamingUI(metrics=False, security=security)
    async with anyio.create_task_group() as tg:
        url = await tg.start(ui.serve, "127.0.0.1", 0)
        yield ui, int(url.rsplit(":", 1)[1].strip("/"))
        tg.cancel_scope.cancel()


@contextlib.contextmanager
def closes_logged() -> Iterator[anyio.Event]:
    """An event set when a relay logs that it closed a connection (a domain event to wait on, not a sleep)."""
    closed = anyio.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if (event_fields(record) or {}).get("event") == "web UI connection closed":
                closed.set()

    root = logging.getLogger(LOGGER_ROOT)
    handler, previous = Watch(logging.DEBUG), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield closed
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def statistics(ui: StreamingUI) -> RelayStatistics:
    found = ui.connection_statistics()
    assert found is not None
    return found


def counts(ui: StreamingUI) -> RelayStatistics:
    """The relay's statistics but ``closing`` (an ended connection may still be waiting for the private end's close)."""
    return attrs.evolve(statistics(ui), closing=0)


async def request(stream: anyio.abc.SocketStream, path: str, port: int, headers: dict[str, str] | None = None,
                  host: str | None = None) -> tuple[int, bytes]:
    """One HTTP/1.1 GET on a kept-alive connection: its status and body."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}",
             *[f"{k}: {v}" for k, v in (headers or {}).items()], "", ""]
    await stream.send("\r\n".join(lines).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    head, _, body = data.partition(b"\r\n\r\n")
    found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(found.group(1)) if found else 0  # a 204 has none
    while len(body) < length:
        body += await stream.receive()
    return int(head.split(b" ", 2)[1]), body


async def closed(stream: anyio.abc.SocketStream) -> bool:
    """Whether the server ended ``stream``: read (and drop) what is left until the end or a reset."""
    try:
        while await stream.receive():
            pass
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
        return True
    return True


async def test_requests_pass_through_the_relay_with_host_check_and_credentials() -> None:
    """Statuses and bodies come back through the relay, the Host check and the token still apply, and it counts them."""
    with anyio.fail_after(GUARD_S):
        async with served(token=TOKEN) as (ui, port), await anyio.connect_tcp("127.0.0.1", port) as stream:
            status, body = await request(stream, "/api/v1/contexts", port)
            assert (status, body.startswith(b"401 Unauthorized: this web UI needs its token")) == (401, True)
            assert await request(stream, "/api/v1/contexts", port, {"Authorization": f"Bearer {TOKEN}"}) == (200, b"[]")
            assert await request(stream, "/api/v1/contexts", port, {"Authorization": f"Bearer {TOKEN}"},
                                 host="attacker.example") == (400, b"Invalid host header")
            async with await anyio.connect_tcp("127.0.0.1", port) as second:
                assert await request(second, "/favicon.ico", port, {"Authorization": f"Bearer {TOKEN}"}) == (204, b"")
                assert statistics(ui) == RelayStatistics(accepted=2, open=2, closed={})


async def test_a_connection_beyond_the_cap_evicts_the_longest_idle_and_is_served() -> None:
    """With maxConnections=2, a third connection closes the one idle the longest (not the oldest) and is answered."""
    with anyio.fail_after(GUARD_S):
        async with served(maxConnections="2", idleTimeout=DAY, writeTimeout=DAY) as (ui, port):
            first = await anyio.connect_tcp("127.0.0.1", port)
            second = await anyio.connect_tcp("127.0.0.1", port)
            async with first, second:
                for stream in (first, second, first):  # the second is now idle the longest
                    assert (await request(stream, "/api/v1/contexts", port))[0] == 200
                async with await anyio.connect_tcp("127.0.0.1", port) as third:
                    assert await request(third, "/api/v1/contexts", port) == (200, b"[]")
                    assert await closed(second)
                    assert await request(first, "/api/v1/contexts", port) == (200, b"[]")
                    assert counts(ui) == RelayStatistics(accepted=3, open=2, closed={"evicted": 1})


async def test_a_client_that_never_reads_its_answers_is_reset_after_the_write_timeout() -> None:
    """Pipelined GETs of the script (far more answer than any buffer holds), not read: reset once a send stalls for writeTimeout."""
    pipelined = 300  # ~15 KB of requests (Hypercorn holds at most 16 KiB unread), ~7.5 MB of answers
    with anyio.fail_after(GUARD_S), closes_logged() as closed_event:
        async with served(idleTimeout=DAY, writeTimeout="10ms") as (ui, port):
            # A plain socket, not an anyio stream: asyncio's transports read whatever arrives, and this client must not.
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as raw:
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
                raw.connect(("127.0.0.1", port))  # loopback, to a listening relay: at once
                raw.sendall(f"GET /static/app.js HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode() * pipelined)
                await closed_event.wait()  # the relay gave up on us; without a write timeout: the hang guard
                raw.setblocking(False)
                received = 0
                with pytest.raises(ConnectionResetError):  # reset: what we never took is dropped
                    while True:
                        await anyio.wait_readable(raw)
                        chunk = raw.recv(65536)
                        assert chunk, "closed, not reset"
                        received += len(chunk)
                assert received < pipelined * len(SCRIPT)  # cut short
            assert statistics(ui).closed == {"write_timeout": 1}


async def test_an_idle_connection_is_closed_after_the_idle_timeout() -> None:
    """A connection that sends nothing is closed once idleTimeout passes, and counted."""
    with anyio.fail_after(GUARD_S):
        async with served(idleTimeout="1ms") as (ui, port), await anyio.connect_tcp("127.0.0.1", port) as stream:
            assert await closed(stream)
            assert counts(ui) == RelayStatistics(accepted=1, open=0, closed={"idle": 1})


def test_connection_limits_are_read_and_bad_values_refused() -> None:
    """maxConnections, idleTimeout and writeTimeout build ConnectionLimits (Spark time strings); bad ones are refused naming the setting."""
    conf = {"spark.aiodstream.ui.maxConnections": "8", "spark.aiodstream.ui.idleTimeout": "2min",
            "spark.aiodstream.ui.writeTimeout": "500ms"}
    assert ConnectionLimits.from_settings(conf.get) == ConnectionLimits(8, 120.0, 0.5)
    assert UISecurity.from_settings(SparkSettings(1, conf).get).limits == ConnectionLimits(8, 120.0, 0.5)
    assert ConnectionLimits.from_settings({"spark.aiodstream.ui.idleTimeout": "45"}.get).idle_timeout_s == 45.0  # seconds
    assert UISecurity.from_settings({}.get).limits == ConnectionLimits() == ConnectionLimits(64, 30.0, 10.0)
    for value in ("0", "-1", "many", "65537", "1.5"):
        with pytest.raises(ValueError, match=re.escape(
                f"spark.aiodstream.ui.maxConnections must be a whole number from 1 to 65536, got {value!r}")):
            UISecurity.from_settings({"spark.aiodstream.ui.maxConnections": value}.get)
    for key in ("spark.aiodstream.ui.idleTimeout", "spark.aiodstream.ui.writeTimeout"):
        for value in ("0", "0ms", "2d"):
            with pytest.raises(ValueError, match=re.escape(
                    f"{key} must be a positive time of at most a day, got {value!r}; pass e.g. '30s'")):
                ConnectionLimits.from_settings({key: value}.get)
        with pytest.raises(InvalidDurationError, match=re.escape(key)):
            ConnectionLimits.from_settings({key: "soon"}.get)
    bad: Any
    for bad in (0, True, "8"):
        with pytest.raises(ValueError, match=re.escape(f"max_connections must be a whole number from 1 to 65536, got {bad!r}")):
            ConnectionLimits(max_connections=bad)
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="write_timeout_s must be a positive finite number of seconds"):
            ConnectionLimits(write_timeout_s=bad)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd (Linux)")
async def test_a_flood_of_connections_holds_a_bounded_number_of_descriptors_and_a_visitor_is_still_served() -> None:
    """100 connections held open against maxConnections=4: at every eviction the relay holds at most the cap plus its
    closing slots, the process at most three descriptors a slot more than before, and nothing is logged by the loop
    (anyio's Unix stream logs InvalidStateError for a read cancelled as it turns readable); then a request is answered."""
    cap, flood, slack = 4, 100, 8  # 100: within the port's backlog (128), so no connect waits on a SYN retry
    loop_errors: list[str] = []
    if sniffio.current_async_library() == "asyncio":
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: loop_errors.append(context["message"]))
    held: list[socket.socket] = []
    peaks = {"descriptors": 0, "slots": 0}

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if (event_fields(record) or {}).get("event") == "web UI connection closed":
                peaks["descriptors"] = max(peaks["descriptors"], open_descriptors() - len(held))
                now = statistics(ui)
                peaks["slots"] = max(peaks["slots"], now.open + now.closing)

    root = logging.getLogger(LOGGER_ROOT)
    handler, previous = Watch(logging.DEBUG), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with anyio.fail_after(GUARD_S):
            async with served(maxConnections=str(cap), idleTimeout=DAY, writeTimeout=DAY) as (ui, port):
                async with await anyio.connect_tcp("127.0.0.1", port) as warm:  # what serving one request opens for good
                    assert (await request(warm, "/api/v1/contexts", port))[0] == 200
                base = open_descriptors()
                try:
                    for _ in range(flood):
                        raw = socket.socket()
                        held.append(raw)
                        raw.setblocking(False)
                        with contextlib.suppress(BlockingIOError):
                            raw.connect(("127.0.0.1", port))
                    async with await anyio.connect_tcp("127.0.0.1", port) as visitor:  # accepted after the flood
                        assert await request(visitor, "/api/v1/contexts", port) == (200, b"[]")
                        now = statistics(ui)
                        assert (now.accepted, now.open) == (flood + 2, cap)
                        assert now.closed["evicted"] >= flood + 1 - cap  # (and the warm-up's, if its close was not seen yet)
                finally:
                    for raw in held:
                        raw.close()
                    held.clear()
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
    assert peaks["slots"] <= cap + slack
    assert peaks["descriptors"] <= base + 3 * (cap + slack), (peaks, base)
    assert loop_errors == []


async def test_a_client_that_sends_faster_than_the_server_takes_waits_in_the_kernel_not_in_memory(tmp_path: Any) -> None:
    """A client pipelining requests without reading the answers, to a server that takes nothing more: the relay reads a
    chunk at a time and only as the server takes it, so the client's sends stop once the kernel's buffers are full (a
    few MiB). Through anyio's TCP stream the relay read everything into memory (lane K5: 800 MiB in 20 s, one
    connection, no credentials)."""
    from streaming.ui import ConnectionRelay

    path = str(tmp_path / "server.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)  # never accepted, never read: the connection's bytes wait in its buffer until it is full
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    relay = ConnectionRelay(ConnectionLimits(idle_timeout_s=GUARD_S, write_timeout_s=GUARD_S), path, name="test")
    limit = 64 << 20
    chunk = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 2048
    with server, contextlib.closing(socket.create_connection(("127.0.0.1", port))) as client:
        client.setblocking(False)
        async with anyio.create_task_group() as tg:
            listener = await anyio.abc.SocketListener.from_socket(listening)
            tg.start_soon(relay.serve, listener, tg)
            sent, still = 0, 0
            while sent < limit and still < 200:  # 200 turns of the loop in a row with no room: the relay reads no more
                try:
                    sent += client.send(chunk)
                    still = 0
                except BlockingIOError:
                    still += 1
                    await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()
    assert sent < limit // 4, f"the client sent {sent >> 20} MiB into a server that took none"


@pytest.mark.parametrize("attempt", [
    [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"],  # HTTP/2 with prior knowledge
    [b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
     b"HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"],
    [b"GET /metrics/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"],
], ids=["prior-knowledge", "h2c", "websocket"])
async def test_a_request_for_another_protocol_than_http_1_1_is_refused_before_the_server_sees_it(attempt: list[bytes]) -> None:
    """HTTP/2 lets a client open and reset streams faster than the host's loop serves them (lane K5's rapid reset stalled
    it for hundreds of milliseconds, no credentials needed), and the UI needs no upgrade: the relay closes such a
    connection, counted as "upgrade", even when the header comes across two reads; a plain request is still served."""
    with anyio.fail_after(GUARD_S):
        async with served(idleTimeout=DAY, writeTimeout=DAY) as (ui, port):
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                for part in attempt:
                    await stream.send(part)
                assert await closed(stream)
            while counts(ui).open:
                await anyio.lowlevel.checkpoint()
            assert counts(ui).closed == {"upgrade": 1}
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                assert await request(stream, "/api/v1/contexts", port) == (200, b"[]")


class Chunks:
    """A relayed end that gives ``chunks`` one read at a time (then the end), and keeps what is sent to it."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks, self.sent, self.eof = list(chunks), b"", False

    async def receive(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    async def send(self, data: bytes) -> None:
        self.sent += data

    def send_eof(self) -> None:
        self.eof = True


@pytest.mark.parametrize("split", [1, 5, 9, 12])
async def test_an_upgrade_split_across_two_reads_is_refused_too(split: int) -> None:
    """The relay looks at the end of the bytes before with each read: an Upgrade header or HTTP/2's preface that one read
    ends in the middle of is refused at the next, and nothing of that read reaches the server."""
    from streaming.ui import ConnectionRelay
    from streaming.ui._relay import _Connection

    for marker in (b"\r\nUpgrade: h2c\r\n", b"PRI * HTTP/2.0\r\n"):
        head = b"GET / HTTP/1.1\r\nHost: x" + marker[:split]
        client, server = Chunks(head, marker[split:] + b"\r\n"), Chunks()
        relay = ConnectionRelay(ConnectionLimits(), "unused", name="test")
        connection = _Connection(anyio.CancelScope())
        await relay._to_server(object(), connection, client, server)  # type: ignore[arg-type]
        assert connection.reason == "upgrade" and server.sent in (head, b"") and not server.eof  # at the latest read
    plain, server = Chunks(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade-Insecure-Requests: 1\r\n\r\n"), Chunks()
    connection = _Connection(anyio.CancelScope())
    await ConnectionRelay(ConnectionLimits(), "unused", name="test")._to_server(object(), connection, plain, server)  # type: ignore[arg-type]
    assert (connection.reason, server.eof) == (None, True)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts the process's descriptors in /proc")
async def test_a_client_reset_while_pipelined_answers_flow_leaves_no_descriptor_behind() -> None:
    """Clients that pipeline requests and reset their connection while the answers flow: once the relay is done with
    them, the process holds the descriptors it held before. On trio, Hypercorn's side of a connection the relay closed
    while it still had pipelined answers to send was never closed (lane K6: one descriptor per such client, for good):
    the relay now takes what the server still sends for up to 10 s before it closes its end."""
    pipelined = b"GET /static/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 50
    with anyio.fail_after(GUARD_S):
        async with served(idleTimeout=DAY, writeTimeout=DAY) as (ui, port):
            async with await anyio.connect_tcp("127.0.0.1", port) as warm:
                assert (await request(warm, "/static/app.js", port))[0] == 200
            await wait_settled(ui)
            before = open_descriptors()
            for _ in range(10):
                stream = await anyio.connect_tcp("127.0.0.1", port)
                await stream.send(pipelined)
                assert await stream.receive(1)  # the answers flow
                _reset(stream)
                await stream.aclose()
            await wait_settled(ui)
            while open_descriptors() > before:  # what the server still holds goes once it ends its side
                await anyio.lowlevel.checkpoint()


async def wait_settled(ui: StreamingUI) -> None:
    """Until the relay holds no connection, open or closing (its every socket closed)."""
    while (found := statistics(ui)).open or found.closing:
        await anyio.lowlevel.checkpoint()


def _reset(stream: anyio.abc.SocketStream) -> None:
    stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
