"""The continuous SocketSource's reader without Spark: Java's line rules across reads, and lines of bounded length."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import anyio
import pytest

from scheduler import InvalidPipelineError, StreamingQueryException
from streaming.continuous import (
    Continuous,
    ContinuousExecution,
    ContinuousStream,
    MemorySink,
    PartitionReader,
    SocketSource,
    ThreadTaskLauncher,
)
from streaming.network import LineTooLongError
from tests.anyio_support import raises_exactly

GUARD = 60.0  # a read's deadline that only guards against a hang: every read here has data or an error before it


@pytest.fixture
def server() -> Iterator[socket.socket]:
    """A listening TCP socket on a free local port."""
    with socket.create_server(("127.0.0.1", 0)) as listening:
        yield listening


def read_lines(reader: PartitionReader, last: str) -> list[str]:
    """Read until a line ending in ``last`` came (however the bytes were split into reads)."""
    lines: list[str] = []
    while not (lines and lines[-1].endswith(last)):
        lines.extend(reader.read(time.monotonic() + GUARD))
    return lines


def send_in_thread(conn: socket.socket, payload: bytes) -> threading.Thread:
    """Send ``payload`` from a thread (the reader is read meanwhile), then close; a reader that hung up ends it."""
    def send() -> None:
        with conn:
            try:
                conn.sendall(payload)
            except OSError:
                pass  # the reader failed and closed: the rest is not wanted

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_lines_end_at_java_s_terminators_however_the_bytes_are_split(server: socket.socket) -> None:
    """\\n, \\r and \\r\\n end a line, also with the \\r\\n pair or a UTF-8 character split across sends; the offset counts lines."""
    reader = SocketSource([server.getsockname()]).open_reader(0, 0)
    conn, _ = server.accept()
    with conn:
        for part in (b"one\r", b"\ntwo\rthr", b"ee\n\xc3", b"\xa9t\xc3\xa9\r\n", b"end\n"):
            conn.sendall(part)
        assert read_lines(reader, "end") == ["one", "two", "three", "\u00e9t\u00e9", "end"]
    assert reader.offset() == 5
    reader.close()


def test_the_last_line_without_a_terminator_is_a_line_when_the_server_closes(server: socket.socket) -> None:
    """At the end of the stream an unterminated last line is read (Java's readLine), and a held-back \\r ends one too."""
    reader = SocketSource([server.getsockname()]).open_reader(0, 7)
    conn, _ = server.accept()
    with conn:
        conn.sendall(b"a\r\nb\rlast")
    assert read_lines(reader, "last") == ["a", "b", "last"]
    assert reader.offset() == 10
    assert reader.read(time.monotonic()) == []  # ended: nothing more, and no error
    reader.close()


def test_a_line_past_the_bound_fails_the_reader_as_soon_as_it_passes_it(server: socket.socket) -> None:
    """2 MiB without a line end, bound 1000: the lines before it are read first, then LineTooLongError names the bound and
    the address, raised once the line passes the bound (within one read of it), not after the 2 MiB or the server's close."""
    address = server.getsockname()
    reader = SocketSource([address], max_line_length=1000).open_reader(0, 0)
    conn, _ = server.accept()
    sender = send_in_thread(conn, b"ok\nfine\n" + b"x" * (2 << 20))
    lines: list[str] = []
    with pytest.raises(LineTooLongError) as raised:
        while not lines or len(lines[-1]) < 1 << 20:  # (a reader without a bound ends with the whole line)
            lines.extend(reader.read(time.monotonic() + GUARD))
    assert lines == ["ok", "fine"] and reader.offset() == 2
    message = str(raised.value)
    held = int(message.removeprefix("a line of at least ").split(" ", 1)[0])
    assert 1000 < held <= 1000 + 65536  # one read (64 KiB) past the bound at most: the 2 MiB line was never held
    assert message == (
        f"a line of at least {held} characters is longer than spark.aiodstream.receiver.maxLineLength (1000): the "
        f"continuous query reading {address[0]}:{address[1]} fails (its source is not reconnected, and dropping the line "
        "would lose data); raise spark.aiodstream.receiver.maxLineLength if such lines are expected, or make the source "
        "end its lines")
    with pytest.raises(LineTooLongError):  # spent: it does not go on reading the rest of the line as a new one
        reader.read(time.monotonic())
    reader.close()
    sender.join(GUARD)


def test_the_line_bound_is_a_positive_int() -> None:
    """SocketSource(max_line_length=0) is refused when the source is described, with the rule and an example."""
    with raises_exactly(InvalidPipelineError, "max_line_length must be a positive number of characters, got 0; "
                        "pass e.g. 1048576"):
        SocketSource([("localhost", 9)], max_line_length=0)
    assert SocketSource([("localhost", 9)]).max_line_length == 1 << 20


@contextlib.contextmanager
def serving_a_long_line(server: socket.socket, guard: float = GUARD) -> Iterator[None]:
    """While the block runs, serve ``server``'s first connection a line ``a`` and then 50 characters with no line end,
    the connection held open until the block ends (so a failure comes from the line, not the close)."""
    done = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"a\n" + b"x" * 50)
            done.wait(guard)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(guard)


@pytest.mark.anyio
async def test_a_line_past_the_bound_terminates_the_query_with_the_error(server: socket.socket) -> None:
    """A continuous query has no receiver to reconnect: the partition's too-long line fails its task and the query."""
    address = server.getsockname()
    plan = ContinuousStream(SocketSource([address], max_line_length=10)).to(MemorySink())
    with serving_a_long_line(server):
        async with ContinuousExecution(plan, Continuous(20), launcher=ThreadTaskLauncher(),
                                       options={"spark.sql.streaming.continuous.executorPollIntervalMs": 5}) as query:
            await query.start()
            with anyio.fail_after(GUARD), pytest.raises(StreamingQueryException) as raised:
                await query.await_termination()
    assert isinstance(raised.value.__cause__, LineTooLongError)
    assert (f"is longer than spark.aiodstream.receiver.maxLineLength (10): the continuous query reading "
            f"{address[0]}:{address[1]} fails" in str(raised.value))
