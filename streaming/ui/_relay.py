"""ConnectionRelay: the web UI's public port, bounded: at most so many connections, each closed when idle or not reading.

Hypercorn has no cap on connections and no write timeout; the served UI's public socket is
accepted here instead, and each connection's bytes are relayed to Hypercorn listening on a
private Unix socket. Spark's UI gets the same bounds from Jetty's connector (``idleTimeout``,
``acceptQueueSize``) and its thread pool.
"""

from __future__ import annotations

import contextlib
import functools
import re
import socket
import struct
from collections import OrderedDict
from typing import Callable, Mapping

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from scheduler import library_logger

from ..network import accept_forever, check_seconds, count_setting, timeout_setting

__all__ = ["IDLE_TIMEOUT", "MAX_CONNECTIONS", "WRITE_TIMEOUT", "ConnectionLimits", "ConnectionRelay", "RelayStatistics"]

MAX_CONNECTIONS = "spark.aiodstream.ui.maxConnections"
IDLE_TIMEOUT = "spark.aiodstream.ui.idleTimeout"
WRITE_TIMEOUT = "spark.aiodstream.ui.writeTimeout"
SETTINGS = (MAX_CONNECTIONS, IDLE_TIMEOUT, WRITE_TIMEOUT)
"""The Spark settings :meth:`ConnectionLimits.from_settings` reads."""

_MAX_CONNECTIONS_LIMIT = 65_536
_CHUNK = 65_536
_CLOSING_SLOTS = 4
"""Slots beyond ``max_connections``, held by connections ended but not yet closed (the evicted ones)."""
_CLOSE_WAIT_S = 10.0
"""How long an ended connection takes what the private server still sends, until it closes its end: at once on our NUL
and EOF, or once it has answered the requests already pipelined. Hypercorn on trio never closes a connection whose
pipelined answers could not be sent (lane K6: a client resetting while they flowed left a descriptor for good), so the
answers are taken and dropped rather than refused; 1 s was too short on a busy machine."""


@attrs.frozen
class ConnectionLimits:
    """What a served UI's port holds: how many connections, and how long one may stall.

    Attributes:
        max_connections: connections open at once (``spark.aiodstream.ui.maxConnections``); a new
            one beyond it closes the connection idle the longest.
        idle_timeout_s: a connection that moves no byte either way for this long is closed
            (``spark.aiodstream.ui.idleTimeout``); Hypercorn's own keep-alive is never shorter.
        write_timeout_s: a client that takes none of a chunk of the answer for this long has its
            connection reset (``spark.aiodstream.ui.writeTimeout``).

    Raises:
        ValueError: a count below 1 or a timeout that is not a positive finite number.
    """

    max_connections: int = 64
    idle_timeout_s: float = 30.0
    write_timeout_s: float = 10.0

    def __attrs_post_init__(self) -> None:
        """Check the bounds."""
        count = self.max_connections
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _MAX_CONNECTIONS_LIMIT:
            raise ValueError(f"max_connections must be a whole number from 1 to {_MAX_CONNECTIONS_LIMIT}, got {count!r}")
        for name in ("idle_timeout_s", "write_timeout_s"):
            check_seconds(name, getattr(self, name))

    @classmethod
    def from_settings(cls, get: Callable[[str], str | None]) -> ConnectionLimits:
        """Read :data:`SETTINGS` through ``get`` (e.g. ``SparkConf.get``); unset ones keep their defaults.

        Raises:
            InvalidDurationError: a timeout that is not a Spark time string.
            ValueError: a value out of range (the message names the setting).
        """
        found: dict[str, int | float] = {}
        raw = get(MAX_CONNECTIONS)
        if raw is not None and raw.strip():
            found["max_connections"] = count_setting(MAX_CONNECTIONS, raw, _MAX_CONNECTIONS_LIMIT)
        for key, field in ((IDLE_TIMEOUT, "idle_timeout_s"), (WRITE_TIMEOUT, "write_timeout_s")):
            raw = get(key)
            if raw is not None and raw.strip():
                found[field] = timeout_setting(key, raw)
        return cls(**found)  # type: ignore[arg-type]


@attrs.frozen
class RelayStatistics:
    """A snapshot of a relay's counters (trio's ``statistics()`` convention).

    Attributes:
        accepted: connections taken from the public port.
        open: connections relayed now.
        closed: connections the relay ended, by reason: ``"evicted"`` (the longest idle, for a new
            one beyond ``max_connections``), ``"idle"``, ``"write_timeout"``, ``"upstream"`` (the
            private server could not be reached), ``"upgrade"`` (the client asked for HTTP/2 or another
            protocol), ``"accept"`` (an accept that failed, e.g. out of
            file descriptors). Connections that end by their client or the server are not counted here.
        closing: connections ended whose sockets are not all closed yet (the private server's end
            included); each still holds a slot, so the port takes no new connection while
            ``open + closing`` is at ``max_connections`` plus a few.
    """

    accepted: int
    open: int
    closed: Mapping[str, int]
    closing: int = 0


class _Connection:
    """One relayed connection: its cancel scope (deadline: the idle timeout) and why the relay ended it."""

    __slots__ = ("ended", "reason", "scope")

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.ended = False
        self.reason: str | None = None

    def end(self, reason: str | None = None) -> None:
        """End the connection: by the relay for ``reason``, or (``None``) because its client or server ended it."""
        if not self.ended:
            self.ended = True
            self.reason = reason
        self.scope.cancel()


class ConnectionRelay:
    """Accepts a public port's connections, at most ``max_connections`` at once, and relays each to a private server.

    Connections are kept in the order of their last activity (a byte moved either way), so the
    one idle the longest is the first: a new connection beyond the cap closes it, not itself, so
    a stranger holding connections open cannot keep a visitor out (they only evict each other).
    A connection that moves nothing for ``idle_timeout_s`` is closed; one whose client takes none
    of a chunk of the answer for ``write_timeout_s`` is reset (its unsent bytes dropped). Each
    refusal is counted in :meth:`statistics` and logged (at debug; the first of a kind and then at
    every power of two at info). Nothing a client sends raises out of :meth:`serve`.

    Descriptors are bounded too: a connection holds one of ``max_connections`` plus
    :data:`_CLOSING_SLOTS` slots until its sockets are closed, the private server's end
    included (an ended connection sends it EOF and waits, at most :data:`_CLOSE_WAIT_S`, for it
    to close), and the port accepts only while a slot is free: a flood waits in the kernel's
    backlog, and the process's descriptors stay at about three per slot.
    """

    def __init__(self, limits: ConnectionLimits, upstream_path: str, *, name: str) -> None:
        """A relay to the server listening on the Unix socket at ``upstream_path``."""
        self.limits = limits
        self.name = name
        self._path = upstream_path
        self._slots = limits.max_connections + _CLOSING_SLOTS
        self._held = 0
        self._freed: anyio.Event | None = None
        self._open: OrderedDict[object, _Connection] = OrderedDict()
        self._accepted = 0
        self._closed: dict[str, int] = {}
        self._log = library_logger("aiodstream.ui", component="ConnectionRelay", name=name)

    async def serve(self, listener: anyio.abc.SocketListener, task_group: anyio.abc.TaskGroup) -> None:
        """Accept connections on ``listener`` until cancelled, relaying each in a task of ``task_group``.

        Cancelling this stops accepting only; the connections end with ``task_group`` (or when
        their server closes them). A failed accept is counted and retried, as a front door's.
        """
        # Its raw socket, accepted here: anyio's stream of an accepted connection reads what the client sends into
        # memory without bound while the relay waits to pass it on (its transport pauses only after a read waited).
        sock = listener.extra(anyio.abc.SocketAttribute.raw_socket)
        sock.setblocking(False)
        await accept_forever(functools.partial(_accept, sock), lambda client: self._take(client, task_group),
                             lambda exc: self._count("accept", f"accepting a connection failed: {exc}"),
                             ready=self._free_slot)

    async def _free_slot(self) -> None:
        while self._held >= self._slots:
            self._freed = anyio.Event()
            await self._freed.wait()

    def _release_slot(self) -> None:
        self._held -= 1
        if self._freed is not None:
            self._freed.set()

    def _take(self, client: _RawStream, task_group: anyio.abc.TaskGroup) -> None:
        # Registered here, in accept order, not in the connection's task: tasks start in no set order (trio shuffles).
        self._accepted += 1
        self._held += 1  # released by the connection's task once its every socket is closed
        if len(self._open) >= self.limits.max_connections:
            _, oldest = self._open.popitem(last=False)
            oldest.end("evicted")
        key = object()
        connection = self._open[key] = _Connection(anyio.CancelScope(deadline=anyio.current_time() + self.limits.idle_timeout_s))
        task_group.start_soon(self._relay, key, connection, client)

    def _touch(self, key: object, connection: _Connection) -> None:
        if key in self._open:
            self._open.move_to_end(key)
        connection.scope.deadline = anyio.current_time() + self.limits.idle_timeout_s

    async def _relay(self, key: object, connection: _Connection, client: _RawStream) -> None:
        upstream: _RawStream | None = None
        try:
            with client.sock:
                with connection.scope:
                    try:
                        upstream = await _RawStream.connect(self._path)
                    except OSError as exc:
                        connection.end("upstream")
                        self._log.warning("web UI server unreachable", error=str(exc))
                    else:
                        async with anyio.create_task_group() as pumps:
                            pumps.start_soon(self._to_server, key, connection, client, upstream)
                            pumps.start_soon(self._to_client, key, connection, upstream, client)
                if not connection.ended:  # its deadline passed: nothing moved for the idle timeout
                    connection.end("idle")
                # Counted before the close: whoever sees the connection closed sees it counted.
                self._open.pop(key, None)
                if connection.reason is not None:
                    self._count(connection.reason, _DETAILS[connection.reason].format(limits=self.limits))
                if connection.reason == "write_timeout":
                    _reset(client.sock)
            if upstream is not None:
                await upstream.finish()
        finally:
            if upstream is not None:
                upstream.close()
            self._open.pop(key, None)
            self._release_slot()

    async def _to_server(self, key: object, connection: _Connection, client: _RawStream, upstream: _RawStream) -> None:
        # A chunk at a time: while the server takes none, nothing more is read, and the client's bytes wait in the kernel.
        tail = b""  # the end of the bytes before, where an upgrade's first bytes may be
        try:
            while data := await client.receive():
                self._touch(key, connection)
                seen = tail + data
                if _UPGRADE.search(seen):
                    connection.end("upgrade")
                    return
                tail = seen[-_UPGRADE_TAIL:]
                await upstream.send(data)
            upstream.send_eof()  # the client is done sending: the server still answers
        except OSError:  # either end reset the connection
            connection.end()

    async def _to_client(self, key: object, connection: _Connection, upstream: _RawStream, client: _RawStream) -> None:
        try:
            while data := await upstream.receive():
                self._touch(key, connection)
                with anyio.move_on_after(self.limits.write_timeout_s) as writing:
                    await client.send(data)
                if writing.cancelled_caught:
                    connection.end("write_timeout")
                    return
                # A slow send was no idleness; the order of activity was set when the bytes arrived.
                connection.scope.deadline = anyio.current_time() + self.limits.idle_timeout_s
        except OSError:  # the server reset the connection (or the client went): it is over
            pass
        connection.end()  # also when the server closed it

    def _count(self, reason: str, detail: str) -> None:
        count = self._closed.get(reason, 0) + 1
        self._closed[reason] = count
        level = self._log.info if count & (count - 1) == 0 else self._log.debug  # a flood cannot flood the log
        level("web UI connection closed", reason=reason, detail=detail, closed=count)

    def statistics(self) -> RelayStatistics:
        """Connections accepted, open now, and closed by the relay by reason."""
        return RelayStatistics(self._accepted, len(self._open), dict(self._closed), self._held - len(self._open))

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"<ConnectionRelay {self.name} [open: {s.open}/{self.limits.max_connections} | closing: {s.closing}"
                f" | closed: {sum(s.closed.values())}]>")


_DETAILS = {
    "evicted": f"the longest idle, closed for a new connection beyond {{limits.max_connections}} ({MAX_CONNECTIONS})",
    "idle": f"nothing moved for {{limits.idle_timeout_s}} s ({IDLE_TIMEOUT})",
    "write_timeout": f"the client took none of the answer for {{limits.write_timeout_s}} s ({WRITE_TIMEOUT}); reset",
    "upstream": "the UI's private server could not be reached",
    "upgrade": "the UI speaks HTTP/1.1 only: a request for HTTP/2 or another protocol (an Upgrade header) was refused",
}

_UPGRADE = re.compile(rb"(?i)\nupgrade:|PRI \* HTTP/2\.0")
"""What makes Hypercorn leave HTTP/1.1: an ``Upgrade`` header (``h2c``, a websocket), or HTTP/2's connection preface (a
``PRI * HTTP/2.0`` request). The UI needs neither, and HTTP/2 lets a client open and reset streams faster than the
host's loop serves them (lane K5's "rapid reset": the loop stalled for hundreds of milliseconds, without credentials)."""
_UPGRADE_TAIL = 13


def _reset(sock: socket.socket) -> None:
    """Make the close of ``sock`` a reset: the kernel drops the bytes the client never took instead of keeping them."""
    if sock.fileno() >= 0:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:  # the peer already reset it (BSDs refuse the option then): it closes all the same
            pass


async def _accept(listening: socket.socket) -> _RawStream:
    """The next connection on the non-blocking ``listening`` socket (the kernel's backlog holds the rest)."""
    while True:
        await anyio.lowlevel.checkpoint()
        try:
            sock, _ = listening.accept()
        except BlockingIOError:
            await anyio.wait_readable(listening)
            continue
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as anyio's streams: answers go out at once
        return _RawStream(sock)


class _RawStream:
    """One end of a relayed connection: a non-blocking socket, waited on by ``anyio.wait_*``: the client's, or the
    relay's to the private server (a Unix socket).

    Not anyio's streams. Its TCP stream reads what the client sends into memory without bound until a read of the
    relay has to wait (then it pauses reading), so a client that sends faster than the server takes grew the process
    by its whole stream (lane K5: hundreds of MiB a second, no credentials needed). And on asyncio, one of a
    ``UNIXSocketStream``'s reads cancelled in the same turn of the loop as its socket becomes readable logs
    ``InvalidStateError`` ("Exception in callback Future.set_result(None)"; its waiter is a bare
    ``Future.set_result``), and the relay cancels reads all the time (every eviction and timeout).
    ``anyio.wait_readable`` guards its waiter, and deregisters it before returning.
    """

    __slots__ = ("sock",)

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    @classmethod
    async def connect(cls, path: str) -> _RawStream:
        """Connect to the server at ``path``, waiting while its backlog is full."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            while True:
                await anyio.lowlevel.checkpoint()
                try:
                    sock.connect(path)
                    return cls(sock)
                except BlockingIOError:  # a Unix socket's backlog is full: wait, then try again
                    await anyio.wait_writable(sock)
        except BaseException:
            sock.close()
            raise

    async def receive(self) -> bytes:
        """The next bytes (at most a chunk) from the other end; ``b""`` once it closed its end.

        Raises:
            OSError: the connection was reset.
        """
        while True:
            await anyio.lowlevel.checkpoint()
            try:
                return self.sock.recv(_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.sock)

    async def send(self, data: bytes) -> None:
        """Send all of ``data``.

        Raises:
            OSError: the server closed or reset the connection.
        """
        view = memoryview(data)
        while view:
            await anyio.lowlevel.checkpoint()
            try:
                view = view[self.sock.send(view):]
            except BlockingIOError:
                await anyio.wait_writable(self.sock)

    def send_eof(self) -> None:
        """Tell the other end we send no more (the server may still answer)."""
        self.sock.shutdown(socket.SHUT_WR)

    async def finish(self) -> None:
        """End the connection and wait, at most :data:`_CLOSE_WAIT_S`, until the server closed its end (dropping what it sends).

        A bare EOF is not enough: Hypercorn keeps a connection that ends between two requests
        until its keep-alive timeout. A byte that starts no request (NUL), then EOF, is a broken
        request: it answers 400 and closes at once (HTTP/1.1; an HTTP/2 connection drops it as
        a broken frame).
        """
        with anyio.move_on_after(_CLOSE_WAIT_S):
            try:
                with contextlib.suppress(OSError):  # already half-closed (the client's EOF was passed on), or reset
                    self.sock.send(b"\x00")
                    self.send_eof()
                while await self.receive():
                    pass
            except OSError:  # not connected any more, or reset: its end is closed too
                pass

    def close(self) -> None:
        self.sock.close()
