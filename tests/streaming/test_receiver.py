"""Receiver building blocks without Spark: the socket line decoder and the bounded record buffer."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.inputs import LineDecoder, RecordBuffer
from tests.anyio_support import BACKENDS, raises_exactly, run, settle


def java_read_lines(data: bytes) -> list[str]:
    """What Java's BufferedReader.readLine yields for ``data`` decoded as UTF-8 with replacement."""
    text = data.decode("utf-8", errors="replace")
    lines = re.split("\r\n|\r|\n", text)
    if lines[-1] == "":
        lines.pop()
    return lines


def decode_in_chunks(data: bytes, cuts: list[int]) -> list[str]:
    decoder = LineDecoder()
    lines: list[str] = []
    start = 0
    for cut in sorted(set(cuts)):
        lines += decoder.feed(data[start:cut])
        start = cut
    lines += decoder.feed(data[start:])
    return lines + decoder.finish()


def test_lines_end_at_lf_cr_and_crlf_only() -> None:
    """\\n, \\r and \\r\\n end a line; \\x0b and U+2028 do not; bad UTF-8 becomes U+FFFD (as pyspark's socket stream)."""
    data = "a\r\nb\rc\n\nd\xe9 \x0bx\u2028y\nlast".encode() + b"\xff\n"
    assert decode_in_chunks(data, []) == ["a", "b", "c", "", "d\xe9 \x0bx\u2028y", "last\ufffd"]


def test_a_crlf_split_across_reads_is_one_line_end() -> None:
    """A \\r at the end of one read followed by \\n at the start of the next ends one line, not two."""
    assert decode_in_chunks(b"a\r\nb\n", [2]) == ["a", "b"]


def test_an_unterminated_last_line_comes_out_at_the_end() -> None:
    """The bytes after the last line end form a final line once the stream ends."""
    decoder = LineDecoder()
    assert decoder.feed(b"one\ntw") == ["one"]
    assert decoder.feed(b"o") == []
    assert decoder.finish() == ["two"]


@given(st.binary(max_size=200) | st.lists(st.sampled_from([b"a", b"\r", b"\n", b"\xc3\xa9", b"\xe2\x80\xa8", b"\xff"])).map(b"".join),
       st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_chunking_never_changes_the_lines(data: bytes, cuts: list[int]) -> None:
    """However the bytes are split into reads, the lines are Java's readLine lines of the whole."""
    assert decode_in_chunks(data, [c for c in cuts if c <= len(data)]) == java_read_lines(data)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_full_buffer_makes_the_producer_wait_until_a_batch_takes_it(backend: str) -> None:
    """put_many stores up to capacity, waits, and resumes with the rest once take_all empties the buffer."""

    async def body() -> None:
        buffer = RecordBuffer(3)
        done = anyio.Event()

        async def produce() -> None:
            await buffer.put_many([1, 2, 3, 4, 5])
            await buffer.put(6)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            await settle()
            assert len(buffer) == 3 and not done.is_set()
            assert buffer.take_all() == [1, 2, 3]
            await settle()
            assert buffer.take_all() == [4, 5, 6]
            await done.wait()
        assert buffer.waits == 1

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_producer_waiting_for_room_can_be_cancelled(backend: str) -> None:
    """Cancelling a waiting put keeps what was stored and adds nothing more."""

    async def body() -> None:
        buffer = RecordBuffer(2)
        async with anyio.create_task_group() as tg:
            tg.start_soon(buffer.put_many, ["a", "b", "c"])
            await settle()  # parked: "c" has no room
            tg.cancel_scope.cancel()
        assert buffer.take_all() == ["a", "b"]

    run(backend, body)


def test_the_buffer_bound_must_be_positive() -> None:
    """A zero bound is refused with the rule and a fix."""
    with raises_exactly(ValueError, "maxBufferedRecords must be a positive int, got 0; pass e.g. 100000"):
        RecordBuffer(0)


def test_the_task_pacer_allows_a_rate_with_a_seconds_burst_and_takes_new_rates() -> None:
    """Pacer (the executor receiver's limit): pays records off at the rate, keeps at most 1 s of unused allowance; a new
    rate keeps what is owed (a change never forgives a burst); no rate means no wait."""
    from streaming.inputs._executor_receiver import Pacer

    pacer = Pacer(100.0, now=10.0)
    assert pacer.wait(10.0) == 0.0
    pacer.take(50, now=10.0)  # half a second's worth
    assert pacer.wait(10.0) == pytest.approx(0.5) and pacer.wait(10.25) == pytest.approx(0.25)
    assert pacer.wait(10.5) == 0.0
    pacer.take(100, now=20.0)  # idle for 9.5 s: only 1 s of allowance was kept, so 100 records are paid off at 20.0
    assert pacer.wait(20.0) == 0.0
    pacer.take(10, now=20.0)
    assert pacer.wait(20.0) == pytest.approx(0.1)
    pacer.set_rate(10.0, now=20.0)  # backpressure: a lower rate from now on; the 0.1 s still owed stays owed
    assert pacer.wait(20.0) == pytest.approx(0.1)
    pacer.take(5, now=20.0)
    assert pacer.wait(20.0) == pytest.approx(0.6)
    pacer.set_rate(None, now=20.0)
    pacer.take(10**6, now=20.0)
    assert pacer.wait(20.0) == 0.0
    pacer.set_rate(100.0, now=30.0)  # from no limit: afresh, nothing owed and no stored burst
    pacer.take(100, now=30.0)
    assert pacer.wait(30.0) == pytest.approx(1.0)


def test_a_receiver_task_writes_blocks_reports_them_reconnects_and_stops_when_told(tmp_path: Path) -> None:
    """The executor side without Spark: blocks in the log with their reports, an ended source reported and reconnected,
    rates from the driver applied and acknowledged (R), stop -> X."""
    import socket
    import threading

    from streaming.inputs import ReceiverTaskSpec, read_block_file
    from streaming.inputs._executor_receiver import run_receiver_task

    source = socket.create_server(("127.0.0.1", 0))
    driver = socket.create_server(("127.0.0.1", 0))
    first = [f"a{i}" for i in range(300)]
    second = [f"b{i}" for i in range(5)]

    def serve() -> None:
        for lines in (first, second):
            conn, _ = source.accept()
            with conn:
                conn.sendall("".join(f"{line}\n" for line in lines).encode())
                if lines is second:
                    conn.recv(1)  # hold the second connection open until the task goes away

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    spec = ReceiverTaskSpec(0, "127.0.0.1", source.getsockname()[1], "127.0.0.1", driver.getsockname()[1], str(tmp_path),
                            first_entry=7, block_interval_ms=20, restart_delay_ms=10)
    task = threading.Thread(target=run_receiver_task, args=(spec,), daemon=True)
    task.start()
    control, _ = driver.accept()
    reports = control.makefile("r", encoding="utf-8")
    seen: list[str] = []
    received = 0
    while received < len(first) + len(second):
        line = reports.readline().strip()
        seen.append(line)
        if line.startswith("B "):
            received += int(line.split()[2])
    control.sendall(b"rate 1e9\nrate no")  # a rate, and one split across two sends
    control.sendall(b"ne\n")
    while seen[-1] != "R none":
        seen.append(reports.readline().strip())
    control.sendall(b"stop\n")
    while seen[-1] != "X":
        seen.append(reports.readline().strip())
    task.join(10)
    assert not task.is_alive()
    assert seen[0] == f"H {socket.gethostname()}" and seen[1] == "S"
    assert "E Socket data stream had no more data" in seen and seen.count("S") == 2
    assert [line for line in seen if line.startswith("R ")] in (["R 1000000000.0", "R none"], ["R none"])
    entries = [int(line.split()[1]) for line in seen if line.startswith("B ")]
    assert entries == list(range(7, 7 + len(entries)))
    assert [r for e in entries for r in read_block_file(str(tmp_path / str(e)))] == first + second
    source.close()
    driver.close()


def test_a_retried_receiver_task_returns_at_once_without_connecting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-attempt of the receiver's task (Spark retried it after its worker died) neither reports nor reads: as in Spark."""
    import socket
    import threading

    from pyspark import TaskContext

    from streaming.inputs import ReceiverTaskSpec
    from streaming.inputs._executor_receiver import run_receiver_tasks

    context = TaskContext()
    context._attemptNumber = 1  # what pyspark's worker sets from the task's attempt
    monkeypatch.setattr(TaskContext, "_taskContext", context)
    source = socket.create_server(("127.0.0.1", 0))
    driver = socket.create_server(("127.0.0.1", 0))
    spec = ReceiverTaskSpec(0, "127.0.0.1", source.getsockname()[1], "127.0.0.1", driver.getsockname()[1], str(tmp_path),
                            first_entry=3, block_interval_ms=20, restart_delay_ms=10)
    task = threading.Thread(target=run_receiver_tasks, args=([spec],), daemon=True)
    task.start()
    task.join(10)
    assert not task.is_alive()
    for server in (source, driver):
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
        server.close()
    assert list(tmp_path.iterdir()) == []
