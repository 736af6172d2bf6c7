"""Receiver building blocks without Spark: the socket line decoder, the bounded record buffer, the executor task."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.inputs import DEFAULT_MAX_LINE_LENGTH, LineDecoder, LineTooLongError, RecordBuffer
from streaming.network import JavaUtf8Decoder, max_line_length
from tests.anyio_support import raises_exactly, settle


def java_read_lines(data: bytes) -> list[str]:
    """What Java's BufferedReader.readLine yields for ``data`` decoded as UTF-8 with replacement (all of it at once)."""
    text = JavaUtf8Decoder().decode(data, final=True)
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


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"e\xed\xa0\x80f", "e\ufffdf"),  # an encoded surrogate: one U+FFFD for its three bytes (pyspark 4.3's)
        (b"e\xed\xbf\xbff", "e\ufffdf"),
        (b"e\xed\xa0\x80\xed\xb0\x80f", "e\ufffd\ufffdf"),  # a surrogate pair (CESU-8): one each
        (b"e\xed\xa0f", "e\ufffdf"),  # ED A0-BF then no continuation: one for the two bytes
        (b"e\xed\xa0", "e\ufffd"),  # ... or then the end of the stream
        (b"e\xed\x9f\xbff", "e\ud7fff"),  # ED 80-9F: a valid character
        (b"e\xe2\x82\xed\xa0\x80f", "e\ufffd\ufffdf"),  # a sequence cut short by ED, then the surrogate
        (b"c\xc0\xafd", "c\ufffd\ufffdd"),  # overlong: one per byte
        (b"g\xf0\x9f\x98h", "g\ufffdh"),  # truncated: one
        (b"i\xf4\x90\x80\x80j", "i\ufffd\ufffd\ufffd\ufffdj"),  # beyond U+10FFFF: one per byte
        (b"\xf8\x88\x80\x80\x80five", "\ufffd\ufffd\ufffd\ufffd\ufffdfive"),  # a 5-byte form: one per byte
        (b"partial\xe2\x82", "partial\ufffd"),  # truncated at the end of the stream: one
    ],
)
def test_malformed_utf8_is_replaced_as_javas_decoder_replaces_it(data: bytes, line: str) -> None:
    """Each malformed sequence gives the U+FFFD that Java's UTF-8 decoder (Spark's socket receiver) gives, whatever the
    reads' boundaries."""
    assert decode_in_chunks(data, []) == [line]
    assert decode_in_chunks(data, list(range(len(data)))) == [line]


def test_a_crlf_split_across_reads_is_one_line_end() -> None:
    """A \\r at the end of one read followed by \\n at the start of the next ends one line, not two."""
    assert decode_in_chunks(b"a\r\nb\n", [2]) == ["a", "b"]


def test_an_unterminated_last_line_comes_out_at_the_end() -> None:
    """The bytes after the last line end form a final line once the stream ends."""
    decoder = LineDecoder()
    assert decoder.feed(b"one\ntw") == ["one"]
    assert decoder.feed(b"o") == []
    assert decoder.finish() == ["two"]


@given(st.binary(max_size=200) | st.lists(st.sampled_from([b"a", b"\r", b"\n", b"\xc3\xa9", b"\xe2\x80\xa8", b"\xff", b"\xed",
                                                     b"\xa0", b"\x80"])).map(b"".join),
       st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_chunking_never_changes_the_lines(data: bytes, cuts: list[int]) -> None:
    """However the bytes are split into reads, the lines are Java's readLine lines of the whole."""
    assert decode_in_chunks(data, [c for c in cuts if c <= len(data)]) == java_read_lines(data)


@given(st.lists(st.sampled_from([b"ab", b"c", b"\r", b"\n", b"\xc3\xa9", b"\xff"])).map(b"".join),
       st.lists(st.integers(min_value=0, max_value=200), max_size=6), st.integers(min_value=1, max_value=6))
def test_a_line_over_the_bound_fails_after_the_lines_before_it(data: bytes, cuts: list[int], limit: int) -> None:
    """With a bound, the lines out are Java's lines up to the first one longer than the bound, then LineTooLongError."""
    decoder = LineDecoder(limit)
    lines: list[str] = []
    failed = False
    start = 0
    try:
        for cut in [*sorted({c for c in cuts if c <= len(data)}), len(data)]:
            lines += decoder.feed(data[start:cut])
            start = cut
        lines += decoder.finish()
    except LineTooLongError as exc:
        lines += exc.lines
        failed = True
    expected = java_read_lines(data)
    long = [i for i, line in enumerate(expected) if len(line) > limit]
    assert lines == expected[:long[0]] if long else lines == expected
    assert failed == bool(long)


def test_a_line_without_end_fails_once_it_passes_the_bound_and_holds_no_more() -> None:
    """A source that never ends its line is refused as soon as the line passes the bound, not when (if ever) it ends;
    the lines before it come with the error; by default the bound is 1 MiB of characters."""
    decoder = LineDecoder(10)
    assert decoder.feed(b"one\ntwo\nxxxxx") == ["one", "two"]
    assert decoder.feed(b"xxxxx") == []  # 10 characters: at the bound, not past it
    with raises_exactly(LineTooLongError, "a line of at least 11 characters is longer than "
                        "spark.aiodstream.receiver.maxLineLength (10): the connection is dropped and made again after the "
                        "restart delay; raise spark.aiodstream.receiver.maxLineLength if such lines are expected, or make "
                        "the source end its lines") as info:
        decoder.feed(b"x")
    assert info.value.lines == [] and isinstance(info.value, ValueError)
    with pytest.raises(LineTooLongError, match=r"^a line of 12 characters is longer than") as info:
        LineDecoder(10).feed(b"ok\n" + b"y" * 12 + b"\nnext\n")
    assert info.value.lines == ["ok"]
    assert LineDecoder().max_line_length == DEFAULT_MAX_LINE_LENGTH == 1 << 20
    assert LineDecoder(None).feed(b"z" * (DEFAULT_MAX_LINE_LENGTH + 1) + b"\n") == ["z" * (DEFAULT_MAX_LINE_LENGTH + 1)]


def test_the_decoder_holds_at_most_the_bound_and_words_the_consequence_it_is_given() -> None:
    """Fed 64 KiB reads of one endless line with a bound of 100,000: one read is held, the next fails and holds
    nothing; ``consequence`` replaces the receivers' reconnect wording."""
    decoder = LineDecoder(100_000, consequence="the query fails")
    assert decoder.feed(b"x" * 65536) == [] and decoder.pending_length == 65536
    with raises_exactly(LineTooLongError, "a line of at least 131072 characters is longer than "
                        "spark.aiodstream.receiver.maxLineLength (100000): the query fails; raise "
                        "spark.aiodstream.receiver.maxLineLength if such lines are expected, or make the source end its lines"):
        decoder.feed(b"x" * 65536)
    assert decoder.pending_length == 0


def test_the_line_bound_setting_is_a_positive_number_of_characters() -> None:
    """spark.aiodstream.receiver.maxLineLength: unset or blank is the default; anything but a positive int is refused."""
    assert max_line_length(None) == max_line_length(" ") == DEFAULT_MAX_LINE_LENGTH and max_line_length(" 64 ") == 64
    for bad in ("0", "-1", "1k", "1.5", "\u00b2", "9" * 30):
        with raises_exactly(ValueError, f"spark.aiodstream.receiver.maxLineLength must be a positive number of characters, "
                            f"got {bad!r}; pass e.g. 1048576"):
            max_line_length(bad)
    with raises_exactly(ValueError, "spark.aiodstream.receiver.maxLineLength must be a positive number of characters, got 0; "
                        "pass e.g. 1048576"):
        LineDecoder(0)


@pytest.mark.anyio
async def test_a_paused_buffer_holds_the_producer_back_with_room_to_spare() -> None:
    """While the log's writes fail the buffer is paused: puts wait though there is room; blocks are cut from the front
    (peek, then drop once written); resume lets the producer store again."""
    buffer = RecordBuffer(10)
    await buffer.put_many([1, 2, 3])
    buffer.pause()
    async with anyio.create_task_group() as tg:
        tg.start_soon(buffer.put_many, [4, 5])
        await settle()
        assert buffer.peek() == [1, 2, 3] and buffer.paused
        buffer.drop(2)  # a block of two was written: still paused
        await settle()
        assert buffer.peek() == [3]
        buffer.resume()
    assert buffer.take_all() == [3, 4, 5] and buffer.waits == 2
    assert repr(buffer) == "<RecordBuffer [0/10 records | waited 2x]>"


@pytest.mark.anyio
async def test_a_full_buffer_makes_the_producer_wait_until_a_batch_takes_it() -> None:
    """put_many stores up to capacity, waits, and resumes with the rest once take_all empties the buffer."""
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


@pytest.mark.anyio
async def test_a_producer_waiting_for_room_can_be_cancelled() -> None:
    """Cancelling a waiting put keeps what was stored and adds nothing more."""
    buffer = RecordBuffer(2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(buffer.put_many, ["a", "b", "c"])
        await settle()  # parked: "c" has no room
        tg.cancel_scope.cancel()
    assert buffer.take_all() == ["a", "b"]


def test_the_buffer_bound_must_be_positive() -> None:
    """A zero bound is refused with the rule and a fix."""
    with raises_exactly(ValueError, "maxBufferedRecords must be a positive int, got 0; pass e.g. 100000"):
        RecordBuffer(0)


def test_the_task_pacer_allows_a_rate_with_a_seconds_burst_and_takes_new_rates() -> None:
    """Pacer (the executor receiver's limit): pays records off at the rate, keeps at most 1 s of unused allowance; a new
    rate applies at once, to what is still owed too (repriced: no stale debt, nothing forgiven); no rate means no wait;
    slices hold an interval's worth at the rate."""
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
    assert pacer.slice_size(0.2) == 20
    pacer.set_rate(10.0, now=20.0)  # backpressure: a lower rate from now on; the 10 records owed are paid off at it
    assert pacer.wait(20.0) == pytest.approx(1.0) and pacer.slice_size(0.2) == 2
    pacer.take(5, now=20.0)
    assert pacer.wait(20.0) == pytest.approx(1.5)
    pacer.set_rate(1000.0, now=20.5)  # a higher rate: the 1 s left (10 records at 10/s) takes 10 ms
    assert pacer.wait(20.5) == pytest.approx(0.01)
    pacer.set_rate(0.5, now=20.5)
    assert pacer.slice_size(0.2) == 1
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
    from tests.streaming.control_support import accept_task

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
                            first_entry=7, block_interval_ms=20, restart_delay_ms=10, token="t0k3n")
    task = threading.Thread(target=run_receiver_task, args=(spec,), daemon=True)
    task.start()
    control = accept_task(driver, "t0k3n", 0)
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


def test_a_paced_receiver_task_takes_a_slice_at_a_time_and_writes_what_it_read_at_a_stop(tmp_path: Path) -> None:
    """At 0.001 records/s the task takes one line of what it read (its first slice is free; the next is 1000 s away) and
    reads nothing more meanwhile; a stop writes the lines it had read, in order, none lost and none twice."""
    import socket
    import threading

    from streaming.inputs import ReceiverTaskSpec, read_block_file
    from streaming.inputs._executor_receiver import run_receiver_task
    from tests.streaming.control_support import accept_task

    source = socket.create_server(("127.0.0.1", 0))
    driver = socket.create_server(("127.0.0.1", 0))
    lines = [f"a{i}" for i in range(50)]
    spec = ReceiverTaskSpec(0, "127.0.0.1", source.getsockname()[1], "127.0.0.1", driver.getsockname()[1], str(tmp_path),
                            first_entry=0, block_interval_ms=20, restart_delay_ms=10, rate=0.001, token="t0k3n")
    task = threading.Thread(target=run_receiver_task, args=(spec,), daemon=True)
    task.start()
    control = accept_task(driver, "t0k3n", 0)
    reports = control.makefile("r", encoding="utf-8")
    conn, _ = source.accept()
    conn.sendall("".join(f"{line}\n" for line in lines).encode())
    seen = [reports.readline().strip() for _ in range(3)]
    assert seen[1:] == ["S", "B 0 1"]  # one line: the pacer's first slice
    control.sendall(b"stop\n")
    while seen[-1] != "X":
        seen.append(reports.readline().strip())
    task.join(10)
    assert not task.is_alive()
    entries = [int(line.split()[1]) for line in seen if line.startswith("B ")]
    written = [r for e in entries for r in read_block_file(str(tmp_path / str(e)))]
    assert written[:1] == ["a0"] and written == lines[:len(written)]
    for sock in (conn, source, driver, control):
        sock.close()


def test_a_retried_receiver_task_returns_at_once_without_connecting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-attempt of the receiver's task (Spark retried it after its worker died) neither reports nor reads: as in Spark."""
    import socket
    import threading

    from pyspark import TaskContext

    from streaming.inputs import ReceiverTaskSpec
    from streaming.inputs._executor_receiver import run_receiver_tasks

    monkeypatch.setattr(TaskContext, "_taskContext", None)  # restored at teardown: no task context leaks into later tests
    context = TaskContext()  # pyspark's constructor installs itself as the current task's context
    context._attemptNumber = 1  # what pyspark's worker sets from the task's attempt
    source = socket.create_server(("127.0.0.1", 0))
    driver = socket.create_server(("127.0.0.1", 0))
    spec = ReceiverTaskSpec(0, "127.0.0.1", source.getsockname()[1], "127.0.0.1", driver.getsockname()[1], str(tmp_path),
                            first_entry=3, block_interval_ms=20, restart_delay_ms=10, token="0" * 64)
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


# -- the control channel's reports (the driver checks each before believing it) --


def test_reports_that_keep_the_rules_are_parsed() -> None:
    """Every kind of report a task sends, parsed: blocks in order, hello with and without Spark ids, rates, errors."""
    from streaming.inputs._control import Report, parse_report

    assert parse_report(b"B 7 120", 7) == Report("B", entry=7, count=120)
    assert parse_report(b"B 8 0", 8) == Report("B", entry=8, count=0)
    assert parse_report(b"H worker-1.example", 0) == Report("H", host="worker-1.example")
    assert parse_report(b"H w1 3 12", 0) == Report("H", host="w1", task=(3, 12))
    assert parse_report(b"R none", 0) == Report("R") and parse_report(b"R 12.5", 0) == Report("R", rate=12.5)
    assert parse_report("E Error connecting to h:9: é".encode(), 0) == Report("E", message="Error connecting to h:9: é")
    assert [parse_report(k, 0).kind for k in (b"S", b"P", b"X")] == ["S", "P", "X"]


@pytest.mark.parametrize(("line", "rule"), [
    (b"B 1000000000000 1", "blocks are reported once each and in order: block 5 was next, not 1000000000000"),
    (b"B 9 1", "blocks are reported once each and in order: block 5 was next, not 9"),
    (b"B 4 1", "blocks are reported once each and in order: block 5 was next, not 4"),
    (b"B 5 9999999999", "a block holds at most 2147483647 records, this one claims 9999999999"),
    (b"B -1 3", "a block report is 'B <entry> <count>' in decimal digits"),
    (b"B 5 -3", "a block report is 'B <entry> <count>' in decimal digits"),
    (b"B 1" + b"0" * 5000 + b" 1", "a block report is 'B <entry> <count>' in decimal digits"),
    ("B \u0665 1".encode(), "a block report is 'B <entry> <count>' in decimal digits"),
    (b"B 5 1 extra", "a block report is 'B <entry> <count>' in decimal digits"),
    (b"R nan", "a rate report is 'R none' or 'R <records per second>', finite and not negative"),
    (b"R 1e999", "a rate report is 'R none' or 'R <records per second>', finite and not negative"),
    (b"R -5", "a rate report is 'R none' or 'R <records per second>', finite and not negative"),
    (b"H", "a task's first report is 'H <host> [<stage> <task>]'"),
    (b"H host 1", "a task's first report is 'H <host> [<stage> <task>]'"),
    (b"\xff\xfe", "a report is UTF-8 text"),
    (b"QUIT", "a report is one of H, S, B, R, E, P, X"),
    (b"", "a report is one of H, S, B, R, E, P, X"),
    (b"E" + b"x" * 70000, "a report is at most 65536 bytes, this one is 70001"),
])
def test_a_report_that_breaks_the_rules_is_refused_before_it_is_believed(line: bytes, rule: str) -> None:
    """Huge, repeated, skipped or negative block numbers, unbounded counts, non-finite rates, bad text: each a
    ReceiverProtocolError naming the rule (no int of thousands of digits is ever built)."""
    from streaming.inputs._control import ReceiverProtocolError, parse_report

    with raises_exactly(ReceiverProtocolError, f"a receiver task's report breaks the control protocol: {rule}; "
                                               f"got {line[:80]!r}") as info:
        parse_report(line, 5)
    assert isinstance(info.value, ValueError)
