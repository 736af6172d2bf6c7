"""The examples run to completion on a small fixed number of batches, so they cannot rot."""

from __future__ import annotations

import inspect
import re
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.crash import ROOT, run_python
from tests.support import connect_opt_in

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found,unused-ignore]

SESSIONIZATION_OUTPUT = [
    "session closed: bob, 2 click(s), 09:05-09:15",
    "session closed: cy, 1 click(s), 09:11-09:11",
    "2 sessions closed in 8 batches",
]
"""What sessionization.py prints with the arguments its test gives (on Spark Connect too)."""

FRAUD_DETECTION_OUTPUT = [
    "batch 1: ALERT repeat: card 4222 paid bar 3 times",
    "batch 1: ALERT velocity: card 4222 made 3 transactions within 10 minutes",
    "batch 2: ALERT velocity: card 4222 made 4 transactions within 10 minutes",
    "batch 6: card 4222 quiet: 4 transactions at 2 merchants",
    "batch 7: card 4111 quiet: 4 transactions at 3 merchants",
    "5 reports in 8 batches",
]
"""What fraud_detection.py prints with the arguments its test gives (on Spark Connect too)."""

DEVICE_MONITOR_OUTPUT = [
    "batch 0: fan online: last 100, average 100 of 1",
    "batch 0: pump online: last 10, average 10 of 1",
    "batch 1: door online: last 1, average 1 of 1",
    "batch 1: fan reporting: last 200, average 150 of 2",
    "batch 1: pump reporting: last 11, average 10.5 of 2",
    "batch 2: fan reporting: last 300, average 200 of 3",
    "batch 2: pump reporting: last 12, average 11 of 3",
    "batch 3: pump reporting: last 13, average 12 of 3",
    "batch 4: door offline: silent for 3 intervals, 0 readings left",
    "batch 4: pump reporting: last 14, average 13 of 3",
    "batch 5: fan offline: silent for 3 intervals, 0 readings left",
    "batch 5: pump reporting: last 15, average 14 of 3",
    "batch 6: pump reporting: last 16, average 15 of 3",
    "batch 7: pump reporting: last 17, average 16 of 3",
    "14 reports in 8 batches; 11 values removed by their time-to-live",
]
"""What device_monitor.py prints with the arguments its test gives (on Spark Connect too)."""

HEARTBEAT_MONITOR_OUTPUT = ["offline: sensor-2", "still online: sensor-1, sensor-3"]
"""What heartbeat_monitor.py prints with the arguments its test gives (on Spark Connect too)."""


CONNECT_EXTRA = ("pyarrow", "pandas", "grpc", "google.protobuf")
"""What pyspark's Connect client imports (the ``connect`` extra): an example run with ``--remote`` needs them."""


def run_example(name: str, *args: str, timeout: float = 120, allow: tuple[str, ...] = ()) -> str:
    """Run an example as a plain install would: none of the optional dependencies importable, but those in ``allow``."""
    allowed = ["--allow", ",".join(allow)] if allow else []
    result = run_python(["-m", "tests.without_extras", *allowed, str(ROOT / "examples" / name), *args], timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize(("name", "interrupted"), [
    ("demo.py", "anyio.run"),  # the demo's whole run
    ("capacity_planning.py", "streaming.simulation.sweep"),
    ("network_wordcount.py", "pyspark.SparkContext.getOrCreate"),
    ("async_service.py", "asyncio.run"),
    ("file_stream.py", "pyspark.SparkContext.getOrCreate"),
    ("stateful_wordcount.py", "pyspark.SparkContext.getOrCreate"),
    ("recoverable_wordcount.py", "pyspark.SparkContext.getOrCreate"),
    ("direct_kafka_wordcount.py", "pyspark.SparkContext.getOrCreate"),
    ("sessionization.py", "streaming.StreamingContext.__init__"),
    ("heartbeat_monitor.py", "streaming.StreamingContext.__init__"),
    ("device_monitor.py", "streaming.StreamingContext.__init__"),
    ("fraud_detection.py", "streaming.StreamingContext.__init__"),
    ("filter_and_route.py", "anyio.run"),
    ("exactly_once_files.py", "subprocess.run"),  # its first run, a child it kills
    ("kafka_service.py", "anyio.run"),
    pytest.param("kafka_service.py", "anyio.run", id="kafka_service.py-trio-group"),  # trio's: in an exception group
])
def test_ctrl_c_ends_an_example_quietly_with_status_130(name: str, interrupted: str, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest,
                                                        tmp_path: Path) -> None:
    """Ctrl-C (a KeyboardInterrupt out of what the example is doing, alone or in trio's exception group) exits with 130,
    the shell's status, and no traceback."""
    in_group = request.node.callspec.id.endswith("trio-group")

    def interrupt(*args: object, **kwargs: object) -> None:
        for arg in args:  # a coroutine handed to the interrupted runner is never awaited
            if inspect.iscoroutine(arg):
                arg.close()
        if in_group:
            raise BaseExceptionGroup("unhandled errors in a TaskGroup", [KeyboardInterrupt()])
        raise KeyboardInterrupt

    monkeypatch.setattr(interrupted, interrupt)
    arguments = {"direct_kafka_wordcount.py": ["localhost:9092", "words"],
                 "exactly_once_files.py": ["--dir", str(tmp_path / "work")]}
    monkeypatch.setattr(sys, "argv", [name, *arguments.get(name, [])])
    try:
        with pytest.raises(SystemExit) as exited:
            runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    except KeyboardInterrupt:
        pytest.fail(f"{name} let the KeyboardInterrupt out: Python prints its traceback")
    assert exited.value.code == 130
    assert capsys.readouterr().err == ""


def test_exactly_once_files_refuses_a_directory_a_previous_run_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Run again with the same --dir, the example would resume the old checkpoint, never crash, and wait for ever: it is
    refused with the usage status instead."""
    (tmp_path / "checkpoint").mkdir()
    monkeypatch.setattr(sys, "argv", ["exactly_once_files.py", "--dir", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(ROOT / "examples" / "exactly_once_files.py"), run_name="__main__")
    assert exited.value.code == 2
    assert f"--dir {tmp_path} is not an empty directory" in capsys.readouterr().err


@pytest.mark.spark
def test_demo_prints_batches_with_delays_and_exits() -> None:
    """The demo runs three batches on the wall clock, prints each with its delays, and exits by itself."""
    out = run_example("demo.py", "--batches", "3", "--interval-ms", "500")
    lines = [line for line in out.splitlines() if line.startswith("batch ")]
    assert len(lines) >= 3
    assert all("scheduling" in line and "processing" in line and "total" in line for line in lines)
    assert "0 failed" in out


@pytest.mark.spark
def test_network_wordcount_counts_words_from_its_own_socket_server() -> None:
    """network_wordcount.py reads lines over a real localhost socket, counts words per batch and stops after N batches."""
    out = run_example("network_wordcount.py", "--batches", "3", "--interval", "1")
    summary = out.strip().splitlines()[-1]
    match = re.fullmatch(r"counted (\d+) words in (\d+) batches \(the server sent (\d+)\)", summary)
    assert match, summary
    counted, batches, sent = (int(g) for g in match.groups())
    assert batches >= 3 and 0 < counted <= sent


@pytest.mark.spark
def test_file_stream_reads_the_files_written_while_it_runs() -> None:
    """file_stream.py reads each file it moves into the watched directory once, and never the pre-existing one."""
    out = run_example("file_stream.py", "--files", "3", "--interval", "0.5")
    assert "read 3 files: part-0000.txt, part-0001.txt, part-0002.txt" in out
    assert "counted 32 words; 'the' appeared 5 times" in out
    assert "predates" not in out


@pytest.mark.spark
def test_stateful_wordcount_keeps_running_counts() -> None:
    """stateful_wordcount.py's final state is the count of every word over all its batches."""
    out = run_example("stateful_wordcount.py", "--batches", "4", "--interval", "0.5")
    assert out.strip().splitlines()[-1] == "final: a=5 is=3 red=3 rose=6 the=1"


@pytest.mark.spark
def test_async_service_stores_batches_from_its_async_source() -> None:
    """async_service.py runs a context inside asyncio.run: clicks in through an async source, counts out through an async sink."""
    out = run_example("async_service.py", "--batches", "3", "--interval", "0.5")
    batch_lines = [line for line in out.splitlines() if line.startswith("batch ")]
    assert len(batch_lines) == 3 and all("clicks" in line and "total" in line for line in batch_lines)
    match = re.fullmatch(r"(\d+) batches stored, (\d+) clicks; the loop beat (\d+) times meanwhile", out.strip().splitlines()[-1])
    assert match, out
    stored, clicks, beats = (int(g) for g in match.groups())
    assert stored >= 3 and clicks > 0 and beats > 0


@pytest.mark.spark
def test_recoverable_wordcount_resumes_after_a_crash_with_exact_counts() -> None:
    """recoverable_wordcount.py crashes its getOrCreate program mid-stream, resumes it, and its final counts equal the input."""
    out = run_example("recoverable_wordcount.py", "--files", "3", "--interval", "1", timeout=300)
    assert "-- run 2: resumed from the checkpoint" in out
    final = [line for line in out.splitlines() if line.startswith(("final:", "expected:"))]
    assert len(final) == 2 and final[0].split(":", 1)[1] == final[1].split(":", 1)[1], final


@pytest.mark.spark
def test_sessionization_closes_the_sessions_whose_users_went_quiet() -> None:
    """bob and cy stop clicking: their sessions close once the watermark passes their last click + 30 min; a late click is dropped."""
    out = run_example("sessionization.py", "--batches", "8", "--interval", "0.5")
    assert out.splitlines() == SESSIONIZATION_OUTPUT


@pytest.mark.spark
def test_fraud_detection_raises_alerts_and_reports_quiet_cards_by_event_time() -> None:
    """fraud_detection.py: 4222's burst trips the velocity and repeat rules; both cards are reported quiet once the
    watermark passes their last transaction + 30 min; the late transaction is dropped."""
    out = run_example("fraud_detection.py", "--batches", "8", "--interval", "0.5", timeout=300)
    assert out.splitlines() == FRAUD_DETECTION_OUTPUT


@pytest.mark.spark
def test_device_monitor_forgets_silent_devices_by_their_time_to_live() -> None:
    """device_monitor.py: averages over the readings of the last three intervals; door and fan are reported offline
    exactly three intervals after their last reading, when it expired; 11 values expire in 8 batches."""
    out = run_example("device_monitor.py", "--batches", "8", "--interval", "0.5", timeout=300)
    assert out.splitlines() == DEVICE_MONITOR_OUTPUT


@pytest.mark.spark
def test_heartbeat_monitor_reports_the_silent_device_offline() -> None:
    """sensor-2 stops beating after two batches: with a 2 s timeout it is reported offline, the others stay online."""
    out = run_example("heartbeat_monitor.py", "--timeout", "2", "--interval", "0.5")
    assert out.splitlines() == HEARTBEAT_MONITOR_OUTPUT


@pytest.mark.spark
def test_filter_and_route_routes_every_event_once_in_continuous_mode() -> None:
    """filter_and_route.py reads two TCP partitions continuously, drops heartbeats and routes each other event exactly once."""
    out = run_example("filter_and_route.py", "--events", "1000", "--rate", "1000")
    routes = dict(re.findall(r"^(alerts|orders|payments): (\d+) events$", out, re.MULTILINE))
    assert set(routes) == {"alerts", "orders", "payments"}
    match = re.search(r"routed (\d+) of 1000 events \((\d+) heartbeats dropped\), each once: True", out)
    assert match, out
    assert int(match.group(1)) == sum(int(n) for n in routes.values()) and int(match.group(2)) > 0
    assert re.search(r"producer to file: p50 [0-9.]+ ms, p99 [0-9.]+ ms", out), out


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_kafka_service_publishes_exact_totals_through_transactions(backend: str) -> None:
    """kafka_service.py consumes orders from Kafka in its own loop, keeps totals in state, and publishes them exactly."""
    out = run_example("kafka_service.py", "--orders", "120", "--interval", "0.2", "--backend", backend,
                      allow=("confluent_kafka", "trio"))
    lines = out.strip().splitlines()
    assert lines[-1] == "120 orders from 8 customers; totals in Kafka match the orders sent"
    assert sum(int(m.group(1)) for m in re.finditer(r"^batch \d+: (\d+) orders$", out, re.M)) == 120
    published = re.fullmatch(r"(\d+) transactions published, 0 skipped; the loop beat (\d+) times meanwhile", lines[-2])
    assert published and int(published.group(1)) >= 1 and int(published.group(2)) >= 1, lines[-2]


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["classic", pytest.param("connect", marks=[pytest.mark.connect, connect_opt_in(
    "the direct stream on Connect runs by default in tests/streaming/kafka/test_dstream_connect.py")])])
def test_direct_kafka_wordcount_counts_the_words_produced_while_it_runs(kafka_cluster: Any, kafka_topic: str, engine: str,
                                                                         request: pytest.FixtureRequest) -> None:
    """direct_kafka_wordcount.py (pyspark 2.4's, imports changed) against the mock broker: the lines produced once its first
    batch printed are counted exactly once over its batches, as pprint shows them (it is stopped two batches later).
    With ``--remote`` it runs on the test run's Spark Connect server, whose Python workers read the topic: the same counts."""
    import collections
    import sys
    import threading

    from tests.crash import child_env, kill, spawn

    expected = {"to": 6, "be": 9, "or": 3, "not": 3, "quick": 3}
    kafka_cluster.create_topic(kafka_topic, 3)
    remote = []
    if engine == "connect":
        from tests.conftest import CONNECT_TOKEN

        remote = ["--remote", f"sc://{request.getfixturevalue('connect_address')}/;token={CONNECT_TOKEN}"]
    child = spawn([str(ROOT / "examples" / "direct_kafka_wordcount.py"), kafka_cluster.bootstrap_servers, kafka_topic, "--interval", "1",
                   "--batches", "200", *remote], env=child_env({"PYTHONUNBUFFERED": "1", "PYSPARK_PYTHON": sys.executable}))
    out: list[str] = []
    totals: collections.Counter[str] = collections.Counter()
    headers_after_total: list[int] = [0]
    changed = threading.Condition()

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            with changed:
                out.append(line.rstrip("\n"))
                match = re.fullmatch(r"\('(\w+)', (\d+)\)", out[-1])
                if match:
                    totals[match.group(1)] += int(match.group(2))
                if out[-1].startswith("Time: ") and dict(totals) == expected:
                    headers_after_total[0] += 1
                changed.notify_all()

    threading.Thread(target=read, daemon=True).start()
    try:
        with changed:
            assert changed.wait_for(lambda: any(line.startswith("Time: ") for line in out) or child.poll() is not None, 180), out
        kafka_cluster.produce(kafka_topic, ["to be or not to be", "be quick"] * 3)  # spread over the partitions
        with changed:  # the counts complete, then two more batches print (nothing is counted twice)
            assert changed.wait_for(lambda: headers_after_total[0] >= 3 or child.poll() is not None, 180), out
    finally:
        kill(child)
    with changed:
        assert dict(totals) == expected, out
        assert headers_after_total[0] >= 3, out
