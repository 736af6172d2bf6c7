"""The coordinator's port is a front door: strangers' hellos, tasks' forbidden messages, bounds and the bind address.

The tasks are played by the test through the real protocol (``Harness`` of test_execution, a
manual clock, no Spark); each test states a hole the coordinator once had and what closes it.
"""

from __future__ import annotations

import pickle
import struct
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from scheduler import InvalidPipelineError, StreamingQueryException
from streaming.continuous import (
    EPOCH_QUEUE_EXCEEDED,
    OFFSET_QUEUE_EXCEEDED,
    CommitPartitionEpoch,
    Continuous,
    ContinuousExecution,
    ContinuousOptions,
    ContinuousStream,
    GetCurrentEpoch,
    IllegalStateError,
    IncrementAndGetEpoch,
    MemorySink,
    ReportPartitionOffset,
    SetReaderPartitions,
    SetWriterPartitions,
    SparkTaskLauncher,
    StopContinuousExecutionWrites,
)
from streaming.continuous._protocol import encode_frame, task_message_error
from streaming.network import CHALLENGE_BYTES
from streaming.spark import driver_bind_address
from tests.streaming.continuous.test_execution import CountingSource, FakeTask, Harness, ScriptedLauncher
from tests.support import capture_events, wait_until

pytestmark = pytest.mark.anyio

CLOSED = (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, ConnectionError)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


async def send_as_stranger(h: Harness, data: bytes) -> bytes:
    """Connect to the coordinator, send ``data``, and return everything it sent until it closed the connection."""
    spec = h.launcher.specs[0]
    received = b""
    async with await anyio.connect_tcp(spec.host, spec.port) as stream:
        if data:
            await stream.send(data)
        while True:
            try:
                received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                return received


async def still_serving(h: Harness) -> None:
    """The query is active, its tasks are answered, and an epoch they close commits."""
    assert h.query.is_active
    a, b = h.tasks
    epoch = (await a.ask(GetCurrentEpoch())).epoch
    assert (await b.ask(GetCurrentEpoch())).epoch == epoch
    await a.close_epoch(0, 1, ["a0"])
    await b.close_epoch(0, 1, ["b0"])
    await h.query.wait_for_epoch(0)
    assert h.sink.epochs()[0] == ["a0", "b0"]


# -- strangers: what reaches the port before any token is proved --


@pytest.mark.parametrize(
    "payload",
    [
        b'{"token": "x", "partition": Infinity, "attempt": 0}',  # the OverflowError
        b"[" * 4000,  # a RecursionError within the hello's bound
        b"[" * 100_000,  # a RecursionError beyond it
        b"\xff\xfe" * 20,
    ],
    ids=["infinity", "nested", "deeply-nested", "not-utf8"],
)
async def test_a_malformed_hello_drops_only_that_connection(tmp_path: Path, payload: bytes) -> None:
    """Infinity, deep nesting, bad UTF-8 in a hello: that connection is closed; the query and its tasks go on."""
    async with Harness(tmp_path) as h:
        received = await send_as_stranger(h, frame(payload))
        assert len(received) <= 4 + CHALLENGE_BYTES  # at most the challenge: nothing was read as a message
        await still_serving(h)


async def test_an_oversized_hello_is_refused_on_its_header(tmp_path: Path) -> None:
    """A hello announcing 200 MiB is refused after its 4-byte header: the driver neither waits for nor keeps it."""
    async with Harness(tmp_path) as h:
        await send_as_stranger(h, struct.pack(">I", 200 << 20) + b"x" * 65536)
        assert h.query.statistics().connections == 2
        await still_serving(h)


async def test_a_peer_that_sends_no_hello_is_dropped_after_the_auth_timeout(tmp_path: Path) -> None:
    """With spark.network.auth.rpcTimeout 100ms, a silent connection is closed (the wait is bounded by the hang guard only)."""
    async with Harness(tmp_path, options={"spark.network.auth.rpcTimeout": "100ms"}) as h:
        assert len(await send_as_stranger(h, b"")) == 4 + CHALLENGE_BYTES
        assert len(await send_as_stranger(h, struct.pack(">I", 50) + b"{")) == 4 + CHALLENGE_BYTES  # a slow hello too
        await still_serving(h)


async def test_a_connection_beyond_the_unauthenticated_cap_closes_the_oldest_handshake(tmp_path: Path) -> None:
    """With 2 silent connections proving their hello, a third gets its challenge and the oldest is closed (strangers
    cannot keep a task out by holding every slot); the tasks are untouched."""
    async with Harness(tmp_path, options={"spark.aiodstream.network.maxUnauthenticatedConnections": 2}) as h:
        spec = h.launcher.specs[0]
        waiting = [await anyio.connect_tcp(spec.host, spec.port) for _ in range(2)]
        for stream in waiting:
            assert len(await stream.receive()) == 4 + CHALLENGE_BYTES
        async with await anyio.connect_tcp(spec.host, spec.port) as third:
            assert len(await third.receive()) == 4 + CHALLENGE_BYTES  # in the handshake: the oldest made room
            with pytest.raises(anyio.EndOfStream):
                await waiting[0].receive()
        for stream in waiting:
            await stream.aclose()
        await still_serving(h)
        await wait_until(lambda: h.query.statistics().refused_connections == {"busy": 1, "closed": 2})


async def test_a_wrong_token_is_refused_by_a_constant_time_compare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof of a task of another run goes through hmac.compare_digest and the connection is closed."""
    import streaming.network._hello as hello_module

    real = hello_module.hmac.compare_digest
    compared: list[bool] = []

    def recording(a: bytes, b: bytes) -> bool:
        compared.append(real(a, b))
        return compared[-1]

    monkeypatch.setattr(hello_module.hmac, "compare_digest", recording)
    async with Harness(tmp_path) as h:
        assert compared == [True, True]  # the two tasks
        stranger = await FakeTask.connect(h.launcher.specs[0], token="f" * 64)
        with pytest.raises(CLOSED):
            await stranger.ask(GetCurrentEpoch())
        await stranger.stream.aclose()
        assert compared == [True, True, False]
        await still_serving(h)


# -- tasks: what an authenticated task may send --


@pytest.mark.parametrize(
    "message",
    [IncrementAndGetEpoch(), SetReaderPartitions(1), SetWriterPartitions(7), StopContinuousExecutionWrites()],
    ids=lambda m: type(m).__name__,
)
async def test_a_task_cannot_send_driver_messages(tmp_path: Path, message: object) -> None:
    """A driver-only message from a task closes its connection and changes nothing in the coordinator."""
    async with Harness(tmp_path) as h:
        coordinator = h.query.coordinator
        assert coordinator is not None
        epoch = coordinator.current_epoch
        with capture_events() as events:
            await h.tasks[0].send(message)
            with pytest.raises(CLOSED):
                await h.tasks[0].ask(GetCurrentEpoch())
        assert (coordinator.current_epoch, coordinator.num_reader_partitions, coordinator.num_writer_partitions,
                coordinator.writes_stopped) == (epoch, 2, 2, False)
        refused = [e for e in events if e["event"] == "a task sent a message it may not send; its connection was closed"]
        assert [e["error"] for e in refused] == [
            f"{type(message).__name__} is a driver-only message; a task may send only GetCurrentEpoch, ReportPartitionOffset, "
            "CommitPartitionEpoch"]
        assert h.query.is_active
        assert (await h.tasks[1].ask(GetCurrentEpoch())).epoch == epoch


@pytest.mark.parametrize(
    "message",
    [ReportPartitionOffset(1, 0, 5), CommitPartitionEpoch(1, 0, ["b0"]), ReportPartitionOffset(0, 99, 5),
     CommitPartitionEpoch(0, -1, None), {"not": "a message"}],
    ids=["report-other-partition", "commit-other-partition", "future-epoch", "negative-epoch", "unknown"],
)
async def test_a_task_may_report_only_its_own_partition_and_closed_epochs(tmp_path: Path, message: object) -> None:
    """Another partition's report or commit, an epoch the driver has not passed, an unknown object: the connection closes."""
    async with Harness(tmp_path) as h:
        await h.tasks[0].send(message)
        with pytest.raises(CLOSED):
            await h.tasks[0].ask(GetCurrentEpoch())
        coordinator = h.query.coordinator
        assert coordinator is not None
        stats = coordinator.statistics()
        assert (stats.partition_offsets, stats.partition_commits) == (0, 0)
        assert h.query.is_active


class _RaisesOnLoad:
    def __reduce__(self) -> tuple[Any, ...]:
        return (int, (1, 2, 3))  # int() takes at most 2 arguments: TypeError when the driver unpickles it


async def test_a_frame_that_fails_to_unpickle_closes_the_connection_not_the_query(tmp_path: Path) -> None:
    """Any error unpickling a task's frame (here a TypeError) closes that connection; the query is not failed."""
    async with Harness(tmp_path) as h:
        await h.tasks[0].stream.send(encode_frame(pickle.dumps(_RaisesOnLoad())))
        with pytest.raises(CLOSED):
            await h.tasks[0].ask(GetCurrentEpoch())
        assert h.query.is_active and h.query.exception() is None


async def test_a_task_frame_over_the_rpc_message_bound_is_refused(tmp_path: Path) -> None:
    """With spark.rpc.message.maxSize 1 (MiB), a task announcing a 2 MiB frame is closed before it is read."""
    async with Harness(tmp_path, options={"spark.rpc.message.maxSize": "1"}) as h:
        await h.tasks[0].stream.send(struct.pack(">I", 2 << 20) + b"x" * 1024)
        with pytest.raises(CLOSED):
            await h.tasks[0].ask(GetCurrentEpoch())
        assert h.query.is_active


async def test_a_second_connection_for_a_partition_is_refused(tmp_path: Path) -> None:
    """While partition 0's task is connected, another connection claiming partition 0 is closed; the first goes on."""
    async with Harness(tmp_path) as h:
        twin = await FakeTask.connect(h.launcher.specs[0])
        with pytest.raises(CLOSED):
            await twin.ask(GetCurrentEpoch())
        await twin.stream.aclose()
        await still_serving(h)


def test_task_message_rules_without_sockets() -> None:
    """The per-role rule as a plain function: own partition, closed epochs, non-negative rows, task messages only."""
    assert task_message_error(GetCurrentEpoch(), 0, 0) is None
    assert task_message_error(ReportPartitionOffset(2, 4, "o", 3), 2, 5) is None
    assert task_message_error(ReportPartitionOffset(2, 5, "o"), 2, 5) == (
        "ReportPartitionOffset for epoch 5: a task closes only epochs from 0 to 4 (the driver is in epoch 5)")
    assert task_message_error(CommitPartitionEpoch(True, 1), 1, 5) == (  # type: ignore[arg-type]
        "the task of partition 1 sent CommitPartitionEpoch for partition True")
    assert task_message_error(ReportPartitionOffset(2, 1, "o", -3), 2, 5) == (
        "ReportPartitionOffset with -3 rows: a row count is a non-negative integer")
    assert task_message_error(3, 0, 1) == (
        "a task may send only GetCurrentEpoch, ReportPartitionOffset, CommitPartitionEpoch, got int")


# -- the action queue --


class StuckSink(MemorySink):
    """A memory sink whose driver-side commit waits until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:
        self.entered.set()
        self.release.wait(30)
        super().commit_epoch(epoch, messages)


async def test_a_sink_slower_than_the_epochs_fails_the_query_with_sparks_epoch_queue_message(tmp_path: Path) -> None:
    """With epochBacklogQueueSize 4 and the sink stuck in epoch 0's commit, the queued epochs overflow: the query fails at once."""
    sink = StuckSink()
    async with Harness(tmp_path, sink=sink, options={"spark.sql.streaming.continuous.epochBacklogQueueSize": 4}) as h:
        try:
            # Epoch 0's commit holds the performer; epochs 1 to 4 queue 8 actions; epoch 5's first overflows.
            for epoch in range(6):
                await h.tick()
                for task in h.tasks:
                    await task.close_epoch(epoch, epoch, [f"{task.partition_of()}-{epoch}"])
                if epoch == 0:
                    await anyio.to_thread.run_sync(sink.entered.wait, 5)
            await wait_until(lambda: h.query.exception() is not None)
        finally:
            sink.release.set()
        with pytest.raises(StreamingQueryException) as raised:
            await h.query.await_termination()
    cause = raised.value.__cause__
    assert isinstance(cause, IllegalStateError)
    assert str(cause) == (
        f"{EPOCH_QUEUE_EXCEEDED}: 8 actions of complete epochs wait for the sink's commit and the checkpoint's writes "
        "(spark.sql.streaming.continuous.epochBacklogQueueSize is 4 epochs); make the sink keep up with the trigger "
        "interval, lengthen the interval, or raise the setting")
    assert sorted(sink.epochs()) == [0]  # the epoch in the sink when it failed; nothing after it


async def test_the_coordinators_backlog_failure_does_not_wait_behind_a_stuck_sink(tmp_path: Path) -> None:
    """With the sink stuck in epoch 0's commit, the offset queue's overflow fails the query at once, not once the sink returns."""
    sink = StuckSink()
    async with Harness(tmp_path, sink=sink, options={"spark.sql.streaming.continuous.epochBacklogQueueSize": 2}) as h:
        try:
            await h.tick()
            await h.tick()
            for task in h.tasks:
                await task.close_epoch(0, 0, ["x"])
            await anyio.to_thread.run_sync(sink.entered.wait, 5)
            await h.tasks[0].send(ReportPartitionOffset(0, 1, 1))  # 3 stored offsets > 2
            await wait_until(lambda: h.query.exception() is not None)
        finally:
            sink.release.set()
        with pytest.raises(StreamingQueryException) as raised:
            await h.query.await_termination()
        assert raised.value.message == OFFSET_QUEUE_EXCEEDED


# -- where the coordinator listens --


class AdvertisingLauncher(ScriptedLauncher):
    """Tasks reach the driver at a name; the coordinator listens on another address."""

    def driver_host(self) -> str:
        return "localhost"

    def bind_address(self) -> str:
        return "127.0.0.1"


async def test_the_coordinator_listens_on_the_bind_address_and_tasks_get_the_driver_host() -> None:
    """The launcher's bind address (spark.driver.bindAddress with Spark) is where the port listens; specs carry the driver host."""
    launcher = AdvertisingLauncher()
    query = ContinuousExecution(ContinuousStream(CountingSource()).to(MemorySink()), Continuous(1000), launcher=launcher)
    async with query:
        await query.start()
        await launcher.started.wait()
        assert query.coordinator_address is not None and query.coordinator_address[0] == "127.0.0.1"
        assert {spec.host for spec in launcher.specs} == {"localhost"}
        launcher.release.set()
        await query.stop()


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Context:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = _Conf(values)

    def getConf(self) -> _Conf:
        return self.conf


@pytest.mark.parametrize(
    ("conf", "bound"),
    [({"spark.driver.bindAddress": "10.0.0.5", "spark.driver.host": "driver.example"}, "10.0.0.5"),
     ({"spark.driver.host": "driver.example"}, "driver.example"),
     ({}, "127.0.0.1")],
)
def test_spark_launcher_binds_spark_driver_bind_address_falling_back_to_the_driver_host(conf: dict[str, str], bound: str) -> None:
    """spark.driver.bindAddress, else spark.driver.host, as Spark's driver binds its own ports."""
    assert driver_bind_address(_Context(conf)) == bound  # type: ignore[arg-type]
    assert SparkTaskLauncher(lambda: _Context(conf)).bind_address() == bound


# -- the settings --


def test_the_network_options_take_sparks_names_and_forms() -> None:
    """Time strings for the timeouts, MiB for spark.rpc.message.maxSize, names case-insensitive; defaults are Spark's."""
    options = ContinuousOptions({"SPARK.NETWORK.TIMEOUT": "2min", "spark.network.auth.rpcTimeout": "250ms",
                                 "spark.rpc.message.maxSize": 3, "spark.aiodstream.network.maxUnauthenticatedConnections": "5"})
    assert (options.network.idle_timeout_s, options.network.hello_timeout_s, options.network.max_unauthenticated) == (120, 0.25, 5)
    assert options.max_frame_bytes == 3 << 20
    defaults = ContinuousOptions()
    assert (defaults.network.idle_timeout_s, defaults.network.hello_timeout_s, defaults.max_frame_bytes) == (120, 30, 128 << 20)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"spark.rpc.message.maxSize": 4096}, "spark.rpc.message.maxSize should not be greater than 2047 MB, got 4096"),
        ({"spark.rpc.message.maxSize": "0"}, "option spark.rpc.message.maxSize must be a positive whole number, got '0'"),
        ({"spark.network.timeout": "-1s"}, "spark.network.timeout must be a positive time of at most a day, got '-1s'; pass e.g. '30s'"),
        ({"spark.network.timeout": "1s", "spark.sql.streaming.continuous.executorPollIntervalMs": 1000},
         "spark.sql.streaming.continuous.executorPollIntervalMs (1000 ms) must be shorter than spark.network.timeout (1 s): "
         "the coordinator closes a task's connection once it was silent that long; shorten the poll interval or lengthen "
         "the timeout"),
    ],
)
def test_bad_network_options_are_refused_with_the_rule(options: dict[str, object], message: str) -> None:
    """A frame bound beyond Spark's 2047 MiB, a non-positive value, a poll interval the idle timeout would cut: refused."""
    with pytest.raises(InvalidPipelineError) as raised:
        ContinuousOptions(options)
    assert str(raised.value) == message


class _Hollow:
    """Unpickles as a ReportPartitionOffset built without __init__: no fields at all."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (object.__new__, (ReportPartitionOffset,))


async def test_a_message_record_without_its_fields_closes_the_connection(tmp_path: Path) -> None:
    """A task message unpickled without its fields is refused like any malformed message; nothing escapes the server."""
    async with Harness(tmp_path) as h:
        await h.tasks[0].stream.send(encode_frame(pickle.dumps(_Hollow())))
        with pytest.raises(CLOSED):
            await h.tasks[0].ask(GetCurrentEpoch())
        assert h.query.is_active and h.query.exception() is None
        assert (await h.tasks[1].ask(GetCurrentEpoch())).epoch >= 1
