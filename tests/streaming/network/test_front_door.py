"""The front door: the hello's strict parse and proof without sockets, then the handshake on loopback (both backends)."""

from __future__ import annotations

import json
import re
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.network import (
    ACCEPTED_SIZE,
    CHALLENGE_BYTES,
    FRAME_HEADER,
    HELLO_MAX_BYTES,
    Admitted,
    FrameTooLargeError,
    FrontDoor,
    FrontDoorSettings,
    Hello,
    HelloError,
    HelloRefusedError,
    accept,
    connect,
    encode_challenge,
    encode_hello,
    hello_size,
    new_challenge,
    new_token,
    parse_hello,
    prove,
)
from tests.anyio_support import raises_exactly
from tests.support import capture_events, wait_until

TOKEN = "a" * 64
CHALLENGE = bytes(range(CHALLENGE_BYTES))
WRONG_PROOF = "the hello's proof does not match this run's token (a peer of another run, or a stranger)"
ROLES = {"task": {"partition": range(4), "attempt": range(1)}, "receiver": {"stream": range(100)}}


def body(hello: dict[str, Any]) -> bytes:
    return json.dumps(hello).encode()


def good(**fields: int) -> dict[str, Any]:
    values = fields or {"partition": 2, "attempt": 0}
    return {"v": 1, "role": "task", "fields": values, "proof": prove(TOKEN, CHALLENGE, "task", values)}


def parse(payload: bytes) -> Hello:
    return parse_hello(payload, token=TOKEN, challenge=CHALLENGE, roles=ROLES)


# -- the hello, without I/O --


def test_an_authentic_hello_names_its_role_and_fields() -> None:
    """The peer's own encoding parses back to its role and fields."""
    frame = encode_hello(TOKEN, CHALLENGE, "task", {"partition": 3, "attempt": 0})
    assert hello_size(frame[:4]) == len(frame) - 4
    assert parse(frame[4:]) == Hello("task", {"partition": 3, "attempt": 0})


def test_the_token_never_travels_in_the_hello() -> None:
    """What the peer sends is a proof bound to the challenge, not the token."""
    frame = encode_hello(TOKEN, CHALLENGE, "task", {"partition": 3, "attempt": 0})
    assert TOKEN.encode() not in frame
    other = encode_hello(TOKEN, new_challenge(), "task", {"partition": 3, "attempt": 0})
    with pytest.raises(HelloError, match=re.escape(WRONG_PROOF)):
        parse(other[4:])  # a captured hello answers another challenge: a replay is refused


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"v":1,"role":"task","fields":{"partition":Infinity,"attempt":0},"proof":"x"}',
         "the hello is not well-formed JSON (ValueError)"),
        (b"[" * 3000 + b"]" * 3000, "a hello is at most 4096 bytes, got 6000"),
        (b"[" * 2000 + b"]" * 2000, "the hello is not well-formed JSON (RecursionError)"),
        (b"\xff\xfe{}", "the hello is not well-formed JSON (UnicodeDecodeError)"),
        (b'{"v":1,"v":1,"role":"task","fields":{},"proof":""}', "the hello is not well-formed JSON (ValueError)"),
        (b"[1, 2]", "a hello is a JSON object with exactly the keys ['fields', 'proof', 'role', 'v'], got list"),
        (b'{"v":1,"role":"task","fields":{},"proof":"","token":"x"}',
         "a hello is a JSON object with exactly the keys ['fields', 'proof', 'role', 'v'], got "
         "['fields', 'proof', 'role', 'token', 'v']"),
        (b'{"v":true,"role":"task","fields":{},"proof":""}', "hello version 1 expected, got True"),
        (b'{"v":1,"role":"driver","fields":{},"proof":""}', "the hello's role must be one of ['receiver', 'task'], got 'driver'"),
        (b'{"v":1,"role":["task"],"fields":{},"proof":""}', "the hello's role must be one of ['receiver', 'task'], got ['task']"),
        (b'{"v":1,"role":"task","fields":{"partition":1},"proof":""}',
         "a 'task' hello has exactly the fields ['attempt', 'partition'], got ['partition']"),
        (b'{"v":1,"role":"task","fields":{"partition":1,"attempt":0,"x":1},"proof":""}',
         "a 'task' hello has exactly the fields ['attempt', 'partition'], got ['attempt', 'partition', 'x']"),
        (b'{"v":1,"role":"task","fields":[],"proof":""}', "a 'task' hello has exactly the fields ['attempt', 'partition'], got list"),
        (b'{"v":1,"role":"task","fields":{"partition":-1,"attempt":0},"proof":""}',
         "the hello's field 'partition' must be an integer in [0, 4), got -1"),
        (b'{"v":1,"role":"task","fields":{"partition":4,"attempt":0},"proof":""}',
         "the hello's field 'partition' must be an integer in [0, 4), got 4"),
        (b'{"v":1,"role":"task","fields":{"partition":1e400,"attempt":0},"proof":""}',
         "the hello's field 'partition' must be an integer in [0, 4), got inf"),
        (b'{"v":1,"role":"task","fields":{"partition":' + b"9" * 4000 + b',"attempt":0},"proof":""}',
         "the hello's field 'partition' must be an integer in [0, 4), got " + "9" * 40),
        (b'{"v":1,"role":"task","fields":{"partition":1.0,"attempt":0},"proof":""}',
         "the hello's field 'partition' must be an integer in [0, 4), got 1.0"),
        (b'{"v":1,"role":"task","fields":{"partition":true,"attempt":0},"proof":""}',
         "the hello's field 'partition' must be an integer in [0, 4), got True"),
        (b'{"v":1,"role":"task","fields":{"partition":1,"attempt":0},"proof":7}', "the hello's proof must be 64 hex digits"),
        (b'{"v":1,"role":"task","fields":{"partition":1,"attempt":0},"proof":"' + "é".encode() * 64 + b'"}',
         "the hello's proof does not match this run's token (a peer of another run, or a stranger)"),
    ],
)
def test_a_malformed_hello_is_one_hello_error(payload: bytes, message: str) -> None:
    """Infinity, deep nesting, bad UTF-8, duplicate or extra keys, wrong types, out-of-range numbers: each a HelloError, nothing else."""
    with pytest.raises(HelloError) as raised:
        parse(payload)
    assert str(raised.value).startswith(message)
    assert isinstance(raised.value, ValueError)


def test_a_wrong_token_fails_the_proof() -> None:
    """A peer of another run (another token) is refused; the message never quotes either token."""
    frame = encode_hello("b" * 64, CHALLENGE, "task", {"partition": 1, "attempt": 0})
    with pytest.raises(HelloError) as raised:
        parse(frame[4:])
    assert str(raised.value) == "the hello's proof does not match this run's token (a peer of another run, or a stranger)"


def test_the_proof_binds_the_fields() -> None:
    """A proof made for partition 1 does not admit partition 2."""
    hello = good(partition=1, attempt=0)
    hello["fields"] = {"partition": 2, "attempt": 0}
    with pytest.raises(HelloError, match=re.escape(WRONG_PROOF)):
        parse(body(hello))


def test_the_token_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof goes through hmac.compare_digest (a short-circuiting == would leak it byte by byte)."""
    import streaming.network._hello as hello_module

    compared: list[tuple[bytes, bytes]] = []

    def recording(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return True

    monkeypatch.setattr(hello_module.hmac, "compare_digest", recording)
    assert parse(body(good())).role == "task"
    assert compared == [(good()["proof"].encode(), good()["proof"].encode())]


@pytest.mark.parametrize("size", [0, HELLO_MAX_BYTES + 1, 2**32 - 1])
def test_a_hello_header_out_of_bounds_is_refused_before_reading(size: int) -> None:
    """A header announcing an empty or oversized hello is refused on its 4 bytes."""
    with pytest.raises(HelloError, match=f"^a hello is 1 to {HELLO_MAX_BYTES} bytes, this one announces {size}$"):
        hello_size(FRAME_HEADER.pack(size))


@pytest.mark.parametrize("value", [-1, 2**31, True, 1.5])
def test_the_peer_cannot_encode_a_field_out_of_range(value: Any) -> None:
    """encode_hello refuses a field that is not an integer in [0, 2**31 - 1]."""
    with pytest.raises(ValueError, match=rf"^hello field 'partition' must be an integer in \[0, 2147483647\], got {value!r}$"):
        encode_hello(TOKEN, CHALLENGE, "task", {"partition": value})


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.binary(max_size=600), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["v", "role", "fields", "proof", "x"]), inner),
    max_leaves=20).map(lambda x: json.dumps(x).encode())))
def test_any_bytes_are_a_hello_or_a_hello_error(payload: bytes) -> None:
    """Whatever a stranger sends, the parse returns or raises HelloError: nothing else escapes."""
    try:
        parse(payload)
    except HelloError:
        pass


def test_tokens_and_challenges_are_fresh() -> None:
    """Each run's token and each connection's challenge are new random values of the stated size."""
    assert len(new_token()) == 64 and new_token() != new_token()
    assert len(new_challenge()) == CHALLENGE_BYTES and new_challenge() != new_challenge()


# -- settings --


def test_settings_read_sparks_keys() -> None:
    """spark.network.auth.rpcTimeout and spark.network.timeout are Spark time strings (bare: seconds)."""
    s = FrontDoorSettings.from_conf({"spark.network.auth.rpcTimeout": "500ms", "spark.network.timeout": "2",
                                     "spark.aiodstream.network.maxUnauthenticatedConnections": "3"})
    assert (s.hello_timeout_s, s.idle_timeout_s, s.max_unauthenticated) == (0.5, 2.0, 3)
    assert FrontDoorSettings.from_conf({}) == FrontDoorSettings(30.0, 120.0, 16)


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"spark.network.timeout": "0s"}, "spark.network.timeout must be a positive time of at most a day, got '0s'; pass e.g. '30s'"),
        ({"spark.network.timeout": "10000000000"},
         "spark.network.timeout must be a positive time of at most a day, got '10000000000'; pass e.g. '30s'"),
        ({"spark.network.timeout": "1" + "0" * 29}, "spark.network.timeout: Time must be specified"),
        ({"spark.network.timeout": "\u00b2"}, "spark.network.timeout: Time must be specified"),
        ({"spark.aiodstream.network.maxUnauthenticatedConnections": "0"},
         "spark.aiodstream.network.maxUnauthenticatedConnections must be a whole number from 1 to 65536, got '0'"),
        ({"spark.aiodstream.network.maxUnauthenticatedConnections": "9" * 5000},
         "spark.aiodstream.network.maxUnauthenticatedConnections must be a whole number from 1 to 65536, got '" + "9" * 5000),
        ({"spark.network.auth.rpcTimeout": "soon"}, "spark.network.auth.rpcTimeout: Time must be specified"),
    ],
)
def test_bad_settings_say_which_and_why(conf: dict[str, str], message: str) -> None:
    """A bad value names the setting, the value and the fix."""
    with pytest.raises(ValueError) as raised:
        FrontDoorSettings.from_conf(conf)
    assert str(raised.value).startswith(message)


# -- the handshake on loopback --

@asynccontextmanager
async def serving(door: FrontDoor, serve: Any) -> AsyncIterator[int]:
    """A listener on 127.0.0.1 whose connections go through ``door`` to ``serve``; yields its port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
    async with anyio.create_task_group() as tg:
        tg.start_soon(door.serve, listener, serve, tg)
        yield port
        tg.cancel_scope.cancel()


async def echo(admitted: Admitted) -> None:
    """Answer each frame with the peer's role and the frame."""
    while True:
        try:
            frame = await admitted.read_frame(64)
        except (anyio.EndOfStream, anyio.IncompleteRead):
            return
        await admitted.send(FRAME_HEADER.pack(len(frame) + 5) + admitted.hello.role[:5].encode().ljust(5) + frame)


def blocking_roundtrip(port: int, token: str, payload: bytes) -> bytes:
    sock = connect("127.0.0.1", port, token, "task", {"partition": 1, "attempt": 0}, timeout_s=5)
    with sock:
        sock.sendall(FRAME_HEADER.pack(len(payload)) + payload)
        file = sock.makefile("rb")
        (size,) = FRAME_HEADER.unpack(file.read(4))
        return file.read(size)


async def until_closed(stream: anyio.abc.SocketStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while True:
        try:
            received += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
            return received


@pytest.mark.anyio
async def test_a_peer_with_the_token_is_admitted_and_served() -> None:
    """The blocking client proves the token; the handler sees its role and reads its frames."""
    door = FrontDoor(TOKEN, ROLES, name="test")
    async with serving(door, echo) as port:
        reply = await anyio.to_thread.run_sync(blocking_roundtrip, port, TOKEN, b"ping")
    assert reply == b"task ping"
    assert door.statistics().admitted == 1 and door.statistics().refused == {}


@pytest.mark.anyio
async def test_a_peer_of_another_run_is_refused_and_told_by_a_closed_connection() -> None:
    """A wrong token: the server closes; the client raises HelloRefusedError; the handler never runs."""
    door = FrontDoor(TOKEN, ROLES, name="test")
    async with serving(door, echo) as port:
        with pytest.raises(HelloRefusedError, match="closed the connection after the hello"):
            await anyio.to_thread.run_sync(blocking_roundtrip, port, "b" * 64, b"ping")
    assert door.statistics().refused == {"hello": 1} and door.statistics().admitted == 0


@pytest.mark.anyio
@pytest.mark.parametrize("payload", [
    b'{"v":1,"role":"task","fields":{"partition":Infinity,"attempt":0},"proof":"x"}',
    b"[" * 4000,
    b"\xff" * 100,
], ids=["infinity", "nested", "not-utf8"])
async def test_a_malformed_hello_drops_only_that_connection(payload: bytes) -> None:
    """Infinity, nesting, garbage: the connection is closed, the server goes on and admits the next peer."""
    door = FrontDoor(TOKEN, ROLES, name="test")
    with capture_events() as events:
        async with serving(door, echo) as port:
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(FRAME_HEADER.pack(len(payload)) + payload)
                assert len(await until_closed(stream)) == 4 + CHALLENGE_BYTES  # the challenge, and nothing more
            assert await anyio.to_thread.run_sync(blocking_roundtrip, port, TOKEN, b"next") == b"task next"
    assert door.statistics().refused == {"hello": 1}
    refusals = [e for e in events if e["event"] == "connection refused before authentication"]
    assert [(e["reason"], e["log_level"]) for e in refusals] == [("hello", "warning")]


@pytest.mark.anyio
async def test_an_oversized_hello_is_refused_on_its_header() -> None:
    """A hello announcing 1 GiB is refused after its 4-byte header; nothing of it is read."""
    door = FrontDoor(TOKEN, ROLES, name="test")
    async with serving(door, echo) as port, await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(struct.pack(">I", 1 << 30) + b"x" * 1000)
        await until_closed(stream)
    assert door.statistics().refused == {"hello": 1}


@pytest.mark.anyio
async def test_a_silent_peer_is_dropped_after_the_hello_timeout() -> None:
    """A connection that sends no hello is closed once hello_timeout_s passed (a short setting; the wait is the hang guard's)."""
    door = FrontDoor(TOKEN, ROLES, FrontDoorSettings(hello_timeout_s=0.05), name="test")
    async with serving(door, echo) as port, await anyio.connect_tcp("127.0.0.1", port) as stream:
        assert len(await until_closed(stream)) == 4 + CHALLENGE_BYTES  # the challenge, then the close
    assert door.statistics().refused == {"timeout": 1}


@pytest.mark.anyio
async def test_a_connection_beyond_the_unauthenticated_cap_closes_the_oldest_handshake_not_itself() -> None:
    """Strangers hold every handshake slot and say nothing: a real peer still gets in (its connection closes the oldest
    silent one, and its hello takes one round trip), instead of being refused for as long as they stay."""
    door = FrontDoor(TOKEN, ROLES, FrontDoorSettings(max_unauthenticated=2), name="test")
    async with serving(door, echo) as port:
        silent = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(2)]
        for stream in silent:  # each got its challenge: it is in the handshake
            assert len(await stream.receive()) == 4 + CHALLENGE_BYTES
        assert door.statistics().unauthenticated == 2
        assert await anyio.to_thread.run_sync(blocking_roundtrip, port, TOKEN, b"again") == b"task again"
        assert await until_closed(silent[0]) == b""  # the oldest was closed for it
        assert door.statistics().unauthenticated == 1
        for stream in silent:
            await stream.aclose()
        await wait_until(lambda: door.statistics().unauthenticated == 0)
    assert door.statistics().refused == {"busy": 1, "closed": 1}
    assert door.statistics().admitted == 1


@pytest.mark.anyio
async def test_an_admitted_peer_is_bounded_in_frame_size_and_idle_time() -> None:
    """After the hello, a frame over the bound raises FrameTooLargeError, and silence TimeoutError."""
    outcomes: list[str] = []

    async def serve(admitted: Admitted) -> None:
        for _ in range(2):
            try:
                await admitted.read_frame(8)
            except FrameTooLargeError as exc:
                outcomes.append(str(exc))
            except TimeoutError:
                outcomes.append("idle")

    door = FrontDoor(TOKEN, ROLES, FrontDoorSettings(idle_timeout_s=0.05), name="test")
    async with serving(door, serve) as port:

        def peer() -> None:
            with connect("127.0.0.1", port, TOKEN, "receiver", {"stream": 7}, timeout_s=5) as sock:
                sock.sendall(FRAME_HEADER.pack(9))
                assert sock.recv(1) == b""  # the server gave up on us after the second read

        await anyio.to_thread.run_sync(peer)
    assert outcomes == ["a frame is at most 8 bytes, the peer announced 9", "idle"]


@pytest.mark.anyio
async def test_a_line_without_newline_is_bounded() -> None:
    """read_line refuses more than its bound without a newline."""
    lines: list[object] = []

    async def serve(admitted: Admitted) -> None:
        lines.append(await admitted.read_line(16))
        try:
            await admitted.read_line(16)
        except FrameTooLargeError as exc:
            lines.append(str(exc))

    door = FrontDoor(TOKEN, ROLES, name="test")
    async with serving(door, serve) as port:

        def peer() -> None:
            with connect("127.0.0.1", port, TOKEN, "receiver", {"stream": 7}, timeout_s=5) as sock:
                sock.sendall(b"B 1 2\n" + b"x" * 40)
                assert sock.recv(1) == b""

        await anyio.to_thread.run_sync(peer)
    assert lines == [b"B 1 2", "a line is at most 16 bytes; the peer sent more without a newline"]


def test_the_client_refuses_a_port_that_is_not_a_front_door() -> None:
    """A server whose first frame is not a challenge: HelloError naming what was expected."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    with server:
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn, _ = server.accept()
        with conn, client:
            conn.sendall(FRAME_HEADER.pack(5) + b"hello")
            from streaming.network import handshake

            with pytest.raises(HelloError, match="sent a first frame of 5 bytes, not a 32-byte challenge"):
                handshake(client, TOKEN, "task", {"partition": 1, "attempt": 0})
    assert ACCEPTED_SIZE == 4 + 2 + 64


def test_the_client_refuses_a_server_that_does_not_prove_the_token() -> None:
    """A process holding the port without the token (it answers ``ok`` blindly): HelloRefusedError before anything is read."""
    from streaming.network import handshake

    for answer in (b"\x00\x00\x00\x02ok", accept("f" * 64, b"\x00" * CHALLENGE_BYTES, "task", {"partition": 1, "attempt": 0})):
        server = socket.create_server(("127.0.0.1", 0))
        with server:
            client = socket.create_connection(("127.0.0.1", server.getsockname()[1]), timeout=5)
            conn, _ = server.accept()
            with conn, client:
                conn.sendall(encode_challenge(new_challenge()))
                conn.sendall(answer.ljust(ACCEPTED_SIZE, b"x"))
                port = server.getsockname()[1]
                with raises_exactly(HelloRefusedError, f"the server at 127.0.0.1:{port} answered the hello without proving this "
                                    "run's token: it is not this run's driver (another process may hold the port); nothing "
                                    "it sends is read"):
                    handshake(client, TOKEN, "task", {"partition": 1, "attempt": 0})


def test_the_servers_answer_proves_the_token_and_differs_from_the_peers_proof() -> None:
    """accept() is ok + HMAC over a prefix no peer proof can take: another token or challenge gives another answer."""
    challenge = new_challenge()
    fields = {"partition": 1, "attempt": 0}
    answer = accept(TOKEN, challenge, "task", fields)
    assert answer[:6] == b"\x00\x00\x00\x42ok" and len(answer) == ACCEPTED_SIZE
    assert answer[6:].decode() != prove(TOKEN, challenge, "task", fields)
    assert accept("0" * 64, challenge, "task", fields) != answer
    assert accept(TOKEN, new_challenge(), "task", fields) != answer


@pytest.mark.anyio
async def test_an_accept_that_fails_is_counted_and_retried_and_the_port_keeps_serving() -> None:
    """An accept that raises (the process out of file descriptors, which a flood of connections to any of its ports can
    bring about) does not end the accept loop: anyio's Listener.serve would, closing the port for good."""
    import errno

    door = FrontDoor(TOKEN, ROLES, name="test")
    listeners = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    inner = listeners.listeners[0]
    port = int(inner.extra(anyio.abc.SocketAttribute.local_port))

    class OutOfDescriptors:
        """The real listener, whose first two accepts fail as with EMFILE."""

        failures = 2

        async def accept(self) -> anyio.abc.SocketStream:
            if self.failures:
                self.failures -= 1
                raise OSError(errno.EMFILE, "Too many open files")
            return await inner.accept()  # type: ignore[no-any-return, attr-defined]

    async with listeners, anyio.create_task_group() as tg:
        tg.start_soon(door.serve, OutOfDescriptors(), echo, tg)
        assert await anyio.to_thread.run_sync(blocking_roundtrip, port, TOKEN, b"again") == b"task again"
        tg.cancel_scope.cancel()
    assert door.statistics().refused == {"accept": 2} and door.statistics().admitted == 1
