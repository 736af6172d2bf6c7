"""FrontDoor: the server side of an authenticated, bounded TCP port (what Spark's RPC auth and timeouts give its endpoints).

Every listening socket of the driver is reachable by strangers. A front door admits a connection
only after its hello proved the run's token, within a timeout, with at most a few connections
waiting to prove it; whatever goes wrong before that drops that one connection and is counted.
Admitted connections read frames or lines under an idle timeout and a size bound.
"""

from __future__ import annotations

import errno
import math
from typing import Any, Awaitable, Callable, Mapping, TypeVar, cast

import anyio
import anyio.abc
import attrs
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.stapled import MultiListener

from scheduler import StreamingError, library_logger, parse_long

from ..spark import time_string_as
from ._hello import (
    FRAME_HEADER,
    Hello,
    HelloError,
    RoleSchema,
    accept,
    encode_challenge,
    hello_size,
    new_challenge,
    parse_hello,
)

__all__ = [
    "ACCEPT_RETRY_S",
    "Admitted",
    "FrameTooLargeError",
    "FrontDoor",
    "FrontDoorSettings",
    "FrontDoorStatistics",
    "HELLO_TIMEOUT_KEY",
    "IDLE_TIMEOUT_KEY",
    "MAX_UNAUTHENTICATED_KEY",
    "accept_forever",
]

HELLO_TIMEOUT_KEY = "spark.network.auth.rpcTimeout"
"""Spark's timeout for its RPC authentication handshake; here: from accept to a complete hello (default 30 s)."""

IDLE_TIMEOUT_KEY = "spark.network.timeout"
"""Spark's default network timeout; here: how long an admitted connection may send nothing (default 120 s)."""

MAX_UNAUTHENTICATED_KEY = "spark.aiodstream.network.maxUnauthenticatedConnections"
"""How many connections may be proving their hello at once (default 16); one more closes the oldest of them."""

_MAX_TIMEOUT_MS = 86_400_000
"""Time settings of a front door are at most a day (a longer one is a typo, and would overflow a timer)."""

_MAX_UNAUTHENTICATED_LIMIT = 65_536
"""More handshakes at once than this would not bound anything."""

_CLOSED = (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


_Accepted = TypeVar("_Accepted")
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

ACCEPT_RETRY_S = 0.1
"""How long a front door's accept loop waits after a failed accept (as asyncio's own servers do) before the next."""


async def accept_forever(accept: Callable[[], Awaitable[_Accepted]], take: Callable[[_Accepted], None],
                         failed: Callable[[OSError], None], ready: Callable[[], Awaitable[None]] | None = None) -> None:
    """Accept connections with ``accept`` (a listener's ``accept``) until cancelled, handing each to ``take`` (which
    starts its task), in order.

    An accept that fails (the process out of file descriptors, which a flood of connections to
    any of its ports can bring about; a connection reset before it was taken) goes to ``failed``
    and the loop goes on, after :data:`ACCEPT_RETRY_S` when the process is out of resources:
    anyio's ``Listener.serve`` would raise it, and the port would be closed for good.
    With ``ready``, each accept waits for it first (e.g. for a free slot): meanwhile new
    connections wait in the kernel's backlog, not in this process.
    """
    while True:
        if ready is not None:
            await ready()
        try:
            accepted = await accept()
        except OSError as exc:
            failed(exc)
            if exc.errno in _OUT_OF_RESOURCES:  # as asyncio's servers: wait for some to be released
                await anyio.sleep(ACCEPT_RETRY_S)
            continue  # else (a connection aborted before it was taken, ...) the next one at once
        take(accepted)


class FrameTooLargeError(StreamingError, ValueError):
    """An admitted peer announced a frame (or a line) over the bound: the connection is dropped."""


@attrs.frozen
class FrontDoorSettings:
    """A front door's bounds.

    Attributes:
        hello_timeout_s: from accept to a complete, authentic hello (``spark.network.auth.rpcTimeout``).
        idle_timeout_s: how long an admitted connection may send nothing, and the bound on reading
            one frame or line (``spark.network.timeout``).
        max_unauthenticated: connections proving their hello at once
            (``spark.aiodstream.network.maxUnauthenticatedConnections``).
    """

    hello_timeout_s: float = 30.0
    idle_timeout_s: float = 120.0
    max_unauthenticated: int = 16

    def __attrs_post_init__(self) -> None:
        for name in ("hello_timeout_s", "idle_timeout_s"):
            check_seconds(name, getattr(self, name))
        count = self.max_unauthenticated
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{MAX_UNAUTHENTICATED_KEY} must be a positive whole number, got {count!r}")

    @classmethod
    def from_conf(cls, conf: Mapping[str, object]) -> FrontDoorSettings:
        """The settings named in ``conf`` (Spark's keys; values as Spark writes them: ``"30s"``, ``"500ms"``, ``"16"``).

        Time settings without a unit are in seconds, as Spark reads them. Keys not set keep their defaults.

        Raises:
            InvalidDurationError: a time setting that is not a Spark time string.
            ValueError: a value that is not positive.
        """
        values: dict[str, Any] = {}
        for key, field in ((HELLO_TIMEOUT_KEY, "hello_timeout_s"), (IDLE_TIMEOUT_KEY, "idle_timeout_s")):
            raw = conf.get(key)
            if raw is not None:
                values[field] = timeout_setting(key, raw)
        raw = conf.get(MAX_UNAUTHENTICATED_KEY)
        if raw is not None:
            values["max_unauthenticated"] = count_setting(MAX_UNAUTHENTICATED_KEY, raw, _MAX_UNAUTHENTICATED_LIMIT)
        return cls(**values)


def timeout_setting(key: str, raw: object) -> float:
    """Seconds from the Spark time setting ``key`` (``"30s"``, ``"500ms"``; a bare number is in seconds, as Spark reads it).

    Raises:
        InvalidDurationError: not a Spark time string.
        ValueError: not positive, or more than a day (a typo).
    """
    text = str(raw).strip()
    seconds = parse_long(text)  # a bare number is in seconds; ASCII digits within a long only
    millis = time_string_as(text, "ms", key) if seconds is None else seconds * 1000
    if millis <= 0 or millis > _MAX_TIMEOUT_MS:
        raise ValueError(f"{key} must be a positive time of at most a day, got {raw!r}; pass e.g. '30s'")
    return millis / 1000


def count_setting(key: str, raw: object, limit: int) -> int:
    """The whole number from 1 to ``limit`` the setting ``key`` holds (ASCII digits).

    Raises:
        ValueError: anything else, naming the setting.
    """
    count = parse_long(str(raw).strip())
    if count is None or not 1 <= count <= limit:
        raise ValueError(f"{key} must be a whole number from 1 to {limit}, got {raw!r}")
    return count


def check_seconds(name: str, value: object) -> None:
    """Refuse a number of seconds ``name`` that is not a positive finite int or float (a ValueError naming it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")


@attrs.frozen
class FrontDoorStatistics:
    """A snapshot of a front door's counters (trio's ``statistics()`` convention).

    Attributes:
        admitted: connections whose hello was authentic.
        refused: connections dropped before admission, by reason: ``"busy"`` (the oldest of too many
            proving their hello, closed for a newer one), ``"timeout"``, ``"closed"`` (the peer left),
            ``"hello"`` (a bad or inauthentic hello), ``"accept"`` (an accept that failed, e.g. out
            of file descriptors).
        unauthenticated: connections proving their hello now.
    """

    admitted: int
    refused: Mapping[str, int]
    unauthenticated: int


class Admitted:
    """An authenticated connection: its hello, and bounded reads under the idle timeout.

    The caller owns the stream (the front door's :meth:`FrontDoor.handler` closes it when the
    caller's handler returns).
    """

    def __init__(self, hello: Hello, stream: anyio.abc.SocketStream, reader: BufferedByteReceiveStream,
                 idle_timeout_s: float) -> None:
        """Wrap an admitted ``stream``; ``reader`` holds whatever arrived after the hello."""
        self.hello = hello
        self.stream = stream
        self.reader = reader
        self.idle_timeout_s = idle_timeout_s

    async def read_frame(self, max_bytes: int) -> bytes:
        """The next length-prefixed frame's payload.

        Raises:
            TimeoutError: nothing, or not the whole frame, within the idle timeout.
            FrameTooLargeError: the frame announces more than ``max_bytes``.
            anyio.EndOfStream, anyio.IncompleteRead: the peer closed the connection.
        """
        with anyio.fail_after(self.idle_timeout_s):
            (size,) = FRAME_HEADER.unpack(await self.reader.receive_exactly(FRAME_HEADER.size))
            if size > max_bytes:
                raise FrameTooLargeError(f"a frame is at most {max_bytes} bytes, the peer announced {size}")
            return await self.reader.receive_exactly(size)

    async def read_line(self, max_bytes: int) -> bytes:
        """The next line, without its ``\\n``.

        Raises:
            TimeoutError: no whole line within the idle timeout.
            FrameTooLargeError: no ``\\n`` within ``max_bytes`` bytes.
            anyio.EndOfStream, anyio.IncompleteRead: the peer closed the connection.
        """
        with anyio.fail_after(self.idle_timeout_s):
            try:
                return await self.reader.receive_until(b"\n", max_bytes)
            except anyio.DelimiterNotFound:
                raise FrameTooLargeError(f"a line is at most {max_bytes} bytes; the peer sent more without a newline") from None

    async def send(self, data: bytes) -> None:
        """Send ``data`` to the peer."""
        await self.stream.send(data)

    def __repr__(self) -> str:
        return f"<Admitted {self.hello.role} {dict(self.hello.fields)}>"


class FrontDoor:
    """Admits a connection once its hello proves the run's token; drops everything else, one connection at a time.

    The handshake: the server sends a random challenge; the peer answers with a hello (role,
    fields, ``HMAC(token, challenge + role + fields)``, at most 4 KiB) within ``hello_timeout_s``;
    the server checks it (constant-time compare) and sends ``ok``. The token never crosses the
    connection, so a captured hello is worth nothing to a replay. At most ``max_unauthenticated``
    connections may be in the handshake at once; a new one beyond that closes the oldest of them,
    not itself: a real peer's hello takes one round trip, so strangers that connect and say nothing
    cannot keep it out for a whole ``hello_timeout_s`` (they only evict each other). Nothing a stranger
    sends raises out of :meth:`admit` or :meth:`handler`: each failure is logged (the first of a
    kind, then at every power of two) and counted in :meth:`statistics`.

    Use it with an anyio listener::

        door = FrontDoor(token, {"task": {"partition": range(n)}}, settings, name="coordinator")
        await door.serve(listener, serve_one, tg)
    """

    def __init__(self, token: str, roles: RoleSchema, settings: FrontDoorSettings | None = None, *, name: str) -> None:
        """A front door for ``token``'s peers, in ``roles``.

        Raises:
            ValueError: an empty token or no roles.
        """
        if not token:
            raise ValueError("a front door needs a non-empty token; make one with new_token()")
        if not roles:
            raise ValueError("a front door needs at least one role")
        self._token = token
        self.roles = roles
        self.settings = settings if settings is not None else FrontDoorSettings()
        self.name = name
        self._unauthenticated = 0
        # The connections proving their hello, oldest first: the cancel scope of each one's handshake.
        self._handshakes: dict[object, anyio.CancelScope] = {}
        self._admitted = 0
        self._refused: dict[str, int] = {}
        self._log = library_logger("aiodstream.network", component="FrontDoor", name=name)

    async def admit(self, stream: anyio.abc.SocketStream) -> Admitted | None:
        """Run the handshake on a new connection: the admitted peer, or ``None`` (refused, logged, counted; the caller closes it).

        Never raises for what the peer sends or does; cancellation propagates.
        """
        handshakes = self._handshakes
        if len(handshakes) >= self.settings.max_unauthenticated:
            handshakes.pop(next(iter(handshakes))).cancel()  # the oldest makes room (its admit refuses it as busy)
        key = object()
        handshake = handshakes[key] = anyio.CancelScope()
        self._unauthenticated += 1
        try:
            with handshake, anyio.move_on_after(self.settings.hello_timeout_s):
                challenge = new_challenge()
                await stream.send(encode_challenge(challenge))
                reader = BufferedByteReceiveStream(stream)
                size = hello_size(await reader.receive_exactly(FRAME_HEADER.size))
                hello = parse_hello(await reader.receive_exactly(size), token=self._token, challenge=challenge,
                                    roles=self.roles)
                await stream.send(accept(self._token, challenge, hello.role, hello.fields))
                self._admitted += 1
                return Admitted(hello, stream, reader, self.settings.idle_timeout_s)
            if handshake.cancelled_caught:
                self._refuse("busy", f"closed for a newer connection: more than {self.settings.max_unauthenticated} "
                                     f"were proving their hello ({MAX_UNAUTHENTICATED_KEY})")
            else:
                self._refuse("timeout", f"no authentic hello within {self.settings.hello_timeout_s} s ({HELLO_TIMEOUT_KEY})")
        except HelloError as exc:
            self._refuse("hello", str(exc))
        except _CLOSED as exc:
            self._refuse("closed", f"the peer closed the connection during the hello ({type(exc).__name__})")
        except Exception as exc:  # a stranger's bytes must never reach the server's task group
            self._refuse("hello", f"the hello could not be read: {exc!r:.200}")
        finally:
            handshakes.pop(key, None)
            self._unauthenticated -= 1
        return None

    def handler(self, serve: Callable[[Admitted], Awaitable[None]]) -> Callable[[anyio.abc.SocketStream], Awaitable[None]]:
        """A connection handler for ``listener.serve``: admit, then ``await serve(admitted)``; the stream is closed after.

        Only ``serve``'s own exceptions propagate; a refused connection is closed quietly.
        """

        async def handle(stream: anyio.abc.SocketStream) -> None:
            async with stream:
                admitted = await self.admit(stream)
                if admitted is not None:
                    await serve(admitted)

        return handle

    async def serve(self, listener: anyio.abc.Listener[anyio.abc.SocketStream], serve: Callable[[Admitted], Awaitable[None]],
                    task_group: anyio.abc.TaskGroup) -> None:
        """Accept connections on ``listener`` until cancelled, each through :meth:`handler` (``serve``) in ``task_group``.

        An accept that fails (the process out of file descriptors, which a flood of connections
        to any of its ports can bring about; a connection reset before it was taken) is counted
        as an ``"accept"`` refusal, logged as the others, and tried again after
        :data:`ACCEPT_RETRY_S`: anyio's ``Listener.serve`` would raise it, and the port would be
        closed for good.
        """
        handle = self.handler(serve)
        sockets = listener.listeners if isinstance(listener, MultiListener) else [listener]

        async def run(stream: anyio.abc.SocketStream) -> None:
            await handle(stream)

        def take(stream: anyio.abc.SocketStream) -> None:
            task_group.start_soon(run, stream)

        def failed(exc: OSError) -> None:
            self._refuse("accept", f"accepting a connection failed: {exc}")

        async with anyio.create_task_group() as accepting:
            for one in sockets:
                accepting.start_soon(accept_forever, cast(anyio.abc.SocketListener, one).accept, take, failed)

    def _refuse(self, reason: str, detail: str) -> None:
        count = self._refused.get(reason, 0) + 1
        self._refused[reason] = count
        if count & (count - 1) == 0:  # the first, then at 2, 4, 8, ...: a flood cannot flood the log
            self._log.warning("connection refused before authentication", reason=reason, detail=detail, refused=count)

    def statistics(self) -> FrontDoorStatistics:
        """Connections admitted, refused by reason, and in the handshake now."""
        return FrontDoorStatistics(self._admitted, dict(self._refused), self._unauthenticated)

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<FrontDoor {self.name} [admitted: {s.admitted} | refused: {sum(s.refused.values())} | proving: {s.unauthenticated}]>"
