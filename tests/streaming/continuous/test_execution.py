"""The continuous query's driver on a manual clock: epochs, the coordinator over TCP, logs, progress, stop, recovery.

The tasks are played by the test through the real protocol (a ``ScriptedLauncher`` hands over
their specs), so every ordering is chosen, not raced; no Spark and no real time.
"""

from __future__ import annotations

import functools
import pickle
import shutil
import threading
from pathlib import Path
from typing import Any, Sequence

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from listeners import QueryProgress, QueryStarted, QueryTerminated
from scheduler import (
    CheckpointError,
    ConcurrentCheckpointUpdateError,
    ManualClock,
    Milliseconds,
    StreamingQueryException,
    as_checkpoint_path,
    checkpoint_claims,
    format_timestamp,
)
from streaming import StreamingContextState
from streaming.continuous import (
    EPOCH_QUEUE_EXCEEDED,
    OFFSET_QUEUE_EXCEEDED,
    CommitPartitionEpoch,
    Continuous,
    ContinuousExecution,
    ContinuousSource,
    ContinuousStream,
    FileSink,
    GetCurrentEpoch,
    IllegalStateError,
    MemorySink,
    PartitionReader,
    ReportPartitionOffset,
    TaskSpec,
)
from streaming.continuous._protocol import HEADER, TASK_ROLE, encode_frame
from streaming.network import CHALLENGE_BYTES, accept, encode_hello
from tests.anyio_support import HANG_GUARD_S
from tests.support import capture_events, wait_until

pytestmark = pytest.mark.anyio


class CountingSource(ContinuousSource):
    """A source whose offsets the fake tasks make up (it is never read here)."""

    def __init__(self, partitions: int = 2) -> None:
        self.partitions = partitions

    @property
    def num_partitions(self) -> int:
        return self.partitions

    def initial_offset(self, partition: int) -> Any:
        return 0

    def open_reader(self, partition: int, offset: Any) -> PartitionReader:  # pragma: no cover - never read here
        raise AssertionError("the scripted tasks do not read")

    def __repr__(self) -> str:
        return f"Counting[{self.partitions}]"


class ScriptedLauncher:
    """Hands the specs to the test and runs until cancelled or released."""

    def __init__(self) -> None:
        self.specs: list[TaskSpec] = []
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.cancelled: list[str] = []
        self.fail_with: BaseException | None = None

    def driver_host(self) -> str:
        return "127.0.0.1"

    def bind_address(self) -> str:
        return "127.0.0.1"

    def check(self, num_partitions: int) -> None:
        pass

    async def run(self, specs: Sequence[TaskSpec], group: str) -> None:
        self.specs = list(specs)
        self.started.set()
        await self.release.wait()
        if self.fail_with is not None:
            raise self.fail_with

    def cancel(self, group: str) -> None:
        self.cancelled.append(group)
        self.release.set()


class FakeTask:
    """One task's connection, driven by the test."""

    def __init__(self, stream: anyio.abc.SocketStream, buffered: BufferedByteReceiveStream | None = None) -> None:
        self.stream = stream
        self.buffered = buffered if buffered is not None else BufferedByteReceiveStream(stream)

    @classmethod
    async def connect(cls, spec: TaskSpec, token: str | None = None, partition: int | None = None) -> FakeTask:
        """Connect through the coordinator's front door (its handshake); with the run's token, wait until admitted."""
        stream = await anyio.connect_tcp(spec.host, spec.port)
        buffered = BufferedByteReceiveStream(stream)
        challenge = (await buffered.receive_exactly(4 + CHALLENGE_BYTES))[4:]
        fields = {"partition": spec.partition if partition is None else partition, "attempt": 0}
        await stream.send(encode_hello(token or spec.token, challenge, TASK_ROLE, fields))
        if token is None:
            answer = accept(spec.token, challenge, TASK_ROLE, fields)
            assert await buffered.receive_exactly(len(answer)) == answer
        task = cls(stream, buffered)
        task._partition = fields["partition"]
        return task

    async def send(self, message: object) -> None:
        await self.stream.send(encode_frame(pickle.dumps(message)))

    async def ask(self, message: object) -> Any:
        await self.send(message)
        (size,) = HEADER.unpack(await self.buffered.receive_exactly(HEADER.size))
        return pickle.loads(await self.buffered.receive_exactly(size))

    async def close_epoch(self, epoch: int, offset: Any, rows: Any = None, sink: Any = None) -> None:
        """Report the epoch's end and commit it; with ``sink``, through a real writer of that sink."""
        message = rows
        if sink is not None:
            writer = sink.open_writer(self.partition_of(), epoch)
            for row in rows or ():
                writer.write(row)
            message = writer.commit()
        await self.send(ReportPartitionOffset(self.partition_of(), epoch, offset, 0 if rows is None else len(rows)))
        await self.send(CommitPartitionEpoch(self.partition_of(), epoch, message))

    def partition_of(self) -> int:
        return self._partition

    _partition = 0


class Harness:
    """A query on a manual clock with scripted tasks, inside the test's task group."""

    def __init__(self, tmp_path: Path | None, *, partitions: int = 2, sink: Any = None,
                 options: dict[str, object] | None = None, interval_ms: int = 1000, name: str = "scripted",
                 **settings: Any) -> None:
        self.clock = ManualClock(1_000_000)
        self.launcher = ScriptedLauncher()
        self.sink = sink if sink is not None else MemorySink()
        self.source = CountingSource(partitions)
        self.events: list[object] = []
        plan = ContinuousStream(self.source).to(self.sink)
        self.query = ContinuousExecution(plan, Continuous(interval_ms), launcher=self.launcher, clock=self.clock,
                                         checkpoint_location=None if tmp_path is None else tmp_path / "ckpt",
                                         options=options, name=name, **settings)
        self.query.add_listener(self.events.append, on_loop=True)
        self.tasks: list[FakeTask] = []

    async def __aenter__(self) -> Harness:
        await self.query.__aenter__()
        await self.query.start()
        await self.launcher.started.wait()
        for spec in self.launcher.specs:
            task = await FakeTask.connect(spec)
            task._partition = spec.partition
            self.tasks.append(task)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self.tasks:
            await task.stream.aclose()
        self.launcher.release.set()  # the scripted tasks end; a graceful exit then has nothing to wait for
        await self.query.__aexit__(*exc)  # type: ignore[arg-type]

    async def tick(self) -> None:
        """One epoch interval on the manual clock; waits until the timer handled it."""
        epoch = self.query.coordinator.current_epoch  # type: ignore[union-attr]
        self.clock.advance(Milliseconds(1000))
        await wait_until(lambda: self.query.coordinator.current_epoch == epoch + 1)  # type: ignore[union-attr]


async def test_first_tick_fires_at_once_and_each_interval_opens_an_epoch(tmp_path: Path) -> None:
    """The start epoch is short (Spark's first tick fires immediately); then one epoch per interval."""
    async with Harness(tmp_path) as h:
        assert h.query.coordinator is not None
        await wait_until(lambda: h.query.coordinator.current_epoch == 1)  # type: ignore[union-attr]
        reply = await h.tasks[0].ask(GetCurrentEpoch())
        assert (reply.epoch, reply.stop) == (1, False)
        await h.tick()
        await h.tick()
        assert (await h.tasks[1].ask(GetCurrentEpoch())).epoch == 3


async def test_a_clock_jump_opens_one_epoch_not_one_per_missed_interval(tmp_path: Path) -> None:
    """The wall clock steps 6 hours (a resumed laptop or VM): one epoch opens, as Spark's ProcessingTimeExecutor fires
    once, and the next opens an interval after now. One per missed interval (21,600) filled the epoch backlog past
    epochBacklogQueueSize and ended the query."""
    async with Harness(tmp_path) as h:
        coordinator = h.query.coordinator
        assert coordinator is not None
        await wait_until(lambda: coordinator.current_epoch == 1)
        h.clock.advance(Milliseconds(6 * 3600 * 1000))
        await wait_until(lambda: coordinator.current_epoch == 2)
        for _ in range(20):
            await anyio.lowlevel.checkpoint()  # a timer firing the missed ticks would have gone on by now
        assert coordinator.current_epoch == 2
        await h.tick()
        assert coordinator.current_epoch == 3 and h.query.is_active
        for epoch in range(3):  # epochs 0 to 2 close and commit: the progress of the epoch opened after the jump
            for task in h.tasks:
                await task.close_epoch(epoch, epoch)
        await h.query.wait_for_epoch(2)
    progress = {p.batch_id: p for p in h.query.recent_progress}
    assert progress[2].duration_ms["triggerExecution"] == 1000  # opened when the timer fired, after the jump, not before it
    assert progress[2].timestamp == format_timestamp(1_000_000 + 6 * 3600 * 1000)


async def test_process_all_available_waits_for_an_epoch_the_tasks_were_still_in_at_the_call(tmp_path: Path) -> None:
    """An epoch without new data reported before the call, its commit held by a slow sink, does not end the wait when it
    commits (data written at the call is read in a later epoch): only such an epoch the tasks were in at the call does."""
    import threading

    class SlowSink(MemorySink):
        gate = threading.Event()

        def commit_epoch(self, epoch: int, messages: Any) -> None:
            if epoch == 1:
                self.gate.wait(60)  # a hang guard: the test opens it
            super().commit_epoch(epoch, messages)

    sink = SlowSink()
    async with Harness(tmp_path, sink=sink) as h:
        await h.tick()
        await h.tick()  # the driver's epoch is 3
        a, b = h.tasks
        for epoch in (0, 1):  # epoch 1 has no new data; its offsets are logged, its commit waits for the sink
            await a.close_epoch(epoch, 5)
            await b.close_epoch(epoch, 5)
        await wait_until(lambda: (tmp_path / "ckpt/offsets/1").exists())
        returned: list[bool] = []

        async def wait() -> None:
            await h.query.process_all_available()
            returned.append(True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            sink.gate.set()
            await h.query.wait_for_epoch(1)
            await anyio.wait_all_tasks_blocked()
            assert returned == []
            for epoch, offset in ((2, 6), (3, 6)):  # the data written at the call, then an epoch with nothing new
                await a.close_epoch(epoch, offset)
                await b.close_epoch(epoch, offset)
                await h.tick()
            await h.query.wait_for_epoch(3)
        assert returned == [True]


async def test_out_of_order_commits_are_committed_in_epoch_order_with_logs_and_progress(tmp_path: Path) -> None:
    """Epoch 1 complete before epoch 0: epoch 0 commits first, then 1; offsets and commits logs in Spark's format."""
    sink = MemorySink()
    async with Harness(tmp_path, sink=sink) as h:
        await h.tick()
        a, b = h.tasks
        await a.close_epoch(1, 20, ["a1"])
        await b.close_epoch(1, 21, ["b1"])
        await b.close_epoch(0, 11, ["b0"])
        await wait_until(lambda: (tmp_path / "ckpt/offsets/1").exists())
        assert sink.rows() == []  # epoch 1 is parked
        await a.close_epoch(0, 10, ["a0"])
        await h.query.wait_for_epoch(1)
        await h.query.listener_bus.wait_delivered()
        assert sink.epochs() == {0: ["a0", "b0"], 1: ["a1", "b1"]}
        assert (tmp_path / "ckpt/offsets/0").read_text() == 'v1\n\n{"0":10,"1":11}'
        assert (tmp_path / "ckpt/commits/1").read_text() == 'v1\n{"nextBatchWatermarkMs":0}'
        progress = [e.progress for e in h.events if isinstance(e, QueryProgress)]
        assert [p.batch_id for p in progress] == [0, 1]
        assert progress[1].sources[0].start_offset == '{"0":10,"1":11}'
        assert progress[1].sources[0].end_offset == '{"0":20,"1":21}'
        assert progress[1].num_input_rows == 2 and progress[1].sink.num_output_rows == -1
    assert isinstance(h.events[0], QueryStarted) and isinstance(h.events[-1], QueryTerminated)


async def test_a_task_of_another_run_is_refused(tmp_path: Path) -> None:
    """A connection with the wrong token is closed before anything it sends is read."""
    async with Harness(tmp_path) as h:
        stranger = await FakeTask.connect(h.launcher.specs[0], token="not-this-run")
        with pytest.raises((anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, ConnectionError)):
            await stranger.ask(GetCurrentEpoch())
        await stranger.stream.aclose()


async def test_graceful_stop_closes_the_epoch_in_progress(tmp_path: Path) -> None:
    """A graceful stop opens a final epoch with the stop flag; the tasks close the current one; it is committed."""
    sink = MemorySink()
    async with Harness(tmp_path, sink=sink) as h:
        a, b = h.tasks
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(h.query.stop, graceful=True))
            await wait_until(lambda: h.query.coordinator.stopping)  # type: ignore[union-attr]
            reply = await a.ask(GetCurrentEpoch())
            assert reply.stop and reply.epoch == 2
            for task in (a, b):
                await task.close_epoch(0, 1, [f"{task.partition_of()}-0"])
                await task.close_epoch(1, 2, [f"{task.partition_of()}-1"])
            h.launcher.release.set()  # the tasks end
        assert sink.epochs() == {0: ["0-0", "1-0"], 1: ["0-1", "1-1"]}
        assert h.query.status.message == "Stopped"


async def test_immediate_stop_commits_nothing_more_and_cancels_the_tasks(tmp_path: Path) -> None:
    """After an immediate stop, a complete epoch arriving late is dropped; the job group is cancelled."""
    sink = MemorySink()
    async with Harness(tmp_path, sink=sink) as h:
        a, b = h.tasks
        await a.close_epoch(0, 1, ["a"])
        await h.query.stop()
        assert h.launcher.cancelled == [f"aiodstream-continuous-{h.query.run_id}"]
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, anyio.IncompleteRead, ConnectionError, OSError)):
            await b.close_epoch(0, 1, ["b"])
            await b.ask(GetCurrentEpoch())
    assert sink.epochs() == {}


async def test_an_immediate_stop_tells_polling_tasks_to_end_before_it_cancels_them(tmp_path: Path) -> None:
    """Tasks that poll during an immediate stop are told to stop in their epoch, and once they ended the job group is
    never cancelled: Spark's cancel would reach some tasks after the coordinator closed, and they would fail (each a
    traceback in Spark's log) rather than end. Nothing more is committed."""
    sink = MemorySink()
    async with Harness(tmp_path, sink=sink) as h:
        a, b = h.tasks
        await a.close_epoch(0, 1, ["a"])
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.query.stop)
            await wait_until(lambda: h.query.coordinator is not None and h.query.coordinator.stopping)
            for task in (a, b):
                assert (await task.ask(GetCurrentEpoch())).stop  # what they write now is not committed (below)
            await b.close_epoch(0, 1, ["b"])
            h.launcher.release.set()  # so they end, and the job with them
        assert h.launcher.cancelled == []
        assert h.query.state.value == "STOPPED"
    assert sink.epochs() == {}
    assert not (tmp_path / "ckpt/commits/0").exists()


async def test_offset_backlog_stops_the_query_with_sparks_message(tmp_path: Path) -> None:
    """One partition racing ahead of a stuck one overflows the offset queue: the query terminates with Spark's error."""
    async with Harness(tmp_path, options={"spark.sql.streaming.continuous.epochBacklogQueueSize": 2}) as h:
        await h.tick()
        await h.tick()  # the driver is in epoch 3: a task may close epochs 0 to 2
        for epoch in range(3):
            await h.tasks[0].send(ReportPartitionOffset(0, epoch, epoch))
        with pytest.raises(StreamingQueryException) as raised:
            await h.query.await_termination()
        assert isinstance(raised.value.__cause__, IllegalStateError)
        assert str(raised.value.__cause__) == OFFSET_QUEUE_EXCEEDED
        assert raised.value.message == OFFSET_QUEUE_EXCEEDED
    terminated = [e for e in h.events if isinstance(e, QueryTerminated)]
    assert len(terminated) == 1 and OFFSET_QUEUE_EXCEEDED in (terminated[0].exception or "")
    assert EPOCH_QUEUE_EXCEEDED != OFFSET_QUEUE_EXCEEDED


async def test_a_failing_task_fails_the_query(tmp_path: Path) -> None:
    """What a task raised terminates the query as a StreamingQueryException with that cause."""
    async with Harness(tmp_path) as h:
        h.launcher.fail_with = RuntimeError("Continuous execution does not support task retry")
        h.launcher.release.set()
        with pytest.raises(StreamingQueryException, match="terminated with exception: Continuous execution does not support task"):
            await h.query.await_termination()
        assert h.query.status.message == "Terminated with exception: Continuous execution does not support task retry"


async def test_restart_resumes_after_the_last_committed_epoch(tmp_path: Path) -> None:
    """A second run starts at the epoch after the last commit, from that epoch's offsets; uncommitted offsets are ignored."""
    async with Harness(tmp_path) as h:
        await h.tick()
        for task in h.tasks:
            await task.close_epoch(0, 5 + task.partition_of())
        await h.query.wait_for_epoch(0)
        for task in h.tasks:  # epoch 1's offsets are logged, never committed
            await task.send(ReportPartitionOffset(task.partition_of(), 1, 50))
        await wait_until(lambda: (tmp_path / "ckpt/offsets/1").exists())
        first_id = h.query.id
    async with Harness(tmp_path) as again:
        assert again.query.id == first_id and again.query.run_id != h.query.run_id
        assert [(s.start_epoch, s.start_offset) for s in again.launcher.specs] == [(1, 5), (1, 6)]
        assert not (tmp_path / "ckpt/offsets/1").exists()  # the dead run's uncommitted epoch is cut anew
        assert again.query.status.message == "Running"


async def test_file_sink_epochs_committed_by_the_sink_alone_count_as_committed(tmp_path: Path) -> None:
    """A crash between the sink's commit and the commits log: the restart records the epoch and goes on after it."""
    out = tmp_path / "out"
    async with Harness(tmp_path, sink=FileSink(out)) as h:
        await h.tick()
        for task in h.tasks:
            await task.close_epoch(0, 1, [f"row{task.partition_of()}"], sink=h.sink)
        await h.query.wait_for_epoch(0)
    assert list(FileSink.read_committed(out)) == ["row0", "row1"]
    (tmp_path / "ckpt/offsets/1").write_text('v1\n\n{"0":7,"1":8}')
    (out / "_epochs/1").write_text("")  # as if the sink had committed epoch 1 just before a crash
    async with Harness(tmp_path, sink=FileSink(out)) as again:
        assert [s.start_offset for s in again.launcher.specs] == [7, 8]
        assert (tmp_path / "ckpt/commits/1").read_text() == 'v1\n{"nextBatchWatermarkMs":0}'


async def test_a_lost_commits_log_with_a_file_sink_resumes_from_the_sinks_last_epoch(tmp_path: Path) -> None:
    """The commits log is gone after the purge removed the oldest offsets entries: the exactly-once sink's record of its
    committed epochs is the resume point (their offsets entries are still logged), not a refusal that calls the sink's
    output another query's."""
    out = tmp_path / "out"
    retain = {"spark.sql.streaming.minBatchesToRetain": 2}
    async with Harness(tmp_path, sink=FileSink(out), options=retain) as h:
        for epoch in range(4):
            await h.tick()
            for task in h.tasks:
                await task.close_epoch(epoch, 10 * (epoch + 1) + task.partition_of(), [f"e{epoch}p{task.partition_of()}"],
                                       sink=h.sink)
            await h.query.wait_for_epoch(epoch)
    assert not (tmp_path / "ckpt/offsets/0").exists()  # purged
    shutil.rmtree(tmp_path / "ckpt/commits")
    async with Harness(tmp_path, sink=FileSink(out), options=retain) as again:
        assert [s.start_offset for s in again.launcher.specs] == [40, 41]  # after epoch 3, the sink's last
        assert again.query.last_committed_epoch == 3
        assert sorted(int(p.name) for p in (tmp_path / "ckpt/commits").iterdir()) == [2, 3]


async def test_a_checkpoint_of_another_plan_is_refused(tmp_path: Path) -> None:
    """Restarting with another number of sources fails with Spark's message and leaves the query stopped."""
    async with Harness(tmp_path) as h:
        await h.tick()
        for task in h.tasks:
            await task.close_epoch(0, 1)
        await h.query.wait_for_epoch(0)
    (tmp_path / "ckpt/offsets/0").write_text('v1\n\n{"0":1,"1":1}\n{"0":1}')
    h2 = Harness(tmp_path)
    async with h2.query:
        with pytest.raises(ValueError, match=r"There are \[2\] sources in the checkpoint offsets and now there are \[1\] sources"):
            await h2.query.start()
        assert h2.query.state.value == "STOPPED"


async def test_an_unreadable_frame_closes_only_that_connection(tmp_path: Path) -> None:
    """Garbage after a valid hello: that connection is closed, the query and the other tasks go on."""
    sink = MemorySink()
    async with Harness(tmp_path, sink=sink) as h:
        a, b = h.tasks
        await a.stream.send(encode_frame(b"not a pickle"))
        with pytest.raises((anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, ConnectionError)):
            await a.ask(GetCurrentEpoch())
        assert h.query.is_active
        assert (await b.ask(GetCurrentEpoch())).epoch >= 1


class FailingSink(MemorySink):
    """A memory sink whose driver-side commit of one epoch raises."""

    def __init__(self, failing_epoch: int) -> None:
        super().__init__()
        self.failing_epoch = failing_epoch

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:
        if epoch == self.failing_epoch:
            raise OSError(f"disk full while committing epoch {epoch}")
        super().commit_epoch(epoch, messages)


async def test_a_failed_epoch_commit_stops_the_query_and_nothing_after_it_commits(tmp_path: Path) -> None:
    """The sink's commit of epoch 0 raises while epoch 1 is queued behind it: the query fails, epoch 1 is never committed."""
    sink = FailingSink(failing_epoch=0)
    async with Harness(tmp_path, sink=sink) as h:
        await h.tick()
        a, b = h.tasks
        for task in (a, b):  # both epochs complete back to back, so epoch 1's commit is queued behind epoch 0's
            await task.send(ReportPartitionOffset(task.partition_of(), 0, 1))
            await task.send(CommitPartitionEpoch(task.partition_of(), 0, ["x"]))
            await task.send(ReportPartitionOffset(task.partition_of(), 1, 2))
            await task.send(CommitPartitionEpoch(task.partition_of(), 1, ["y"]))
        with pytest.raises(StreamingQueryException, match="disk full while committing epoch 0"):
            await h.query.await_termination()
    assert sink.epochs() == {}
    assert not (tmp_path / "ckpt/commits/0").exists() and not (tmp_path / "ckpt/commits/1").exists()


async def test_a_task_failing_during_a_graceful_stop_is_the_querys_failure(tmp_path: Path) -> None:
    """An error of the last epoch is not swallowed by the stop: exception() and await_termination carry it."""
    async with Harness(tmp_path) as h:
        h.launcher.fail_with = RuntimeError("the writer failed on the last epoch")
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(h.query.stop, graceful=True))
            await wait_until(lambda: h.query.coordinator.stopping)  # type: ignore[union-attr]
            h.launcher.release.set()
        assert isinstance(h.query.exception(), StreamingQueryException)
        with pytest.raises(StreamingQueryException, match="the writer failed on the last epoch"):
            await h.query.await_termination()


async def test_an_immediate_stop_during_a_graceful_one_ends_its_wait_for_the_last_epoch(tmp_path: Path) -> None:
    """The graceful stop waits for the tasks to close the epoch it opened (they never do here); an immediate stop asked
    for meanwhile ends that wait at once, on a clock that never reaches the graceful timeout, and commits nothing."""
    with anyio.fail_after(HANG_GUARD_S), capture_events() as logs:
        async with Harness(tmp_path) as h:
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(h.query.stop, graceful=True))
                await wait_until(lambda: h.query.coordinator.stopping)  # type: ignore[union-attr]
                await h.query.stop(graceful=False)
                assert h.query.state is StreamingContextState.STOPPED
    events = [e["event"] for e in logs]
    assert "an immediate stop was asked for while a graceful one drains: stopping now" in events
    assert "graceful stop timed out; stopping now" not in events
    assert h.sink.epochs() == {}


class FailingAtOnceLauncher(ScriptedLauncher):
    async def run(self, specs: Sequence[TaskSpec], group: str) -> None:
        raise RuntimeError("no executor could start the tasks")


async def test_a_task_failing_while_the_query_starts_fails_the_start() -> None:
    """start() raises the failure and leaves the query stopped; waiting for it returns at once."""
    query = ContinuousExecution(ContinuousStream(CountingSource()).to(MemorySink()), Continuous(1000),
                                launcher=FailingAtOnceLauncher(), clock=ManualClock(0))
    async with query:
        with pytest.raises(StreamingQueryException, match="no executor could start the tasks"):
            await query.start()
        assert query.state.value == "STOPPED"
        with pytest.raises(StreamingQueryException):
            await query.await_termination()


async def test_a_memory_sink_holding_an_earlier_runs_epochs_is_refused_by_another_query(tmp_path: Path) -> None:
    """A second query given the first one's MemorySink would replace its epochs 0, 1, ... with its own rows: refused
    before anything is written (without a checkpoint, and with a checkpoint of its own), the first run's rows kept; the
    first query's restart from its checkpoint goes on after epoch 1."""
    sink = MemorySink()
    async with Harness(tmp_path, sink=sink) as h:
        await complete_epochs(h, 2)
        await h.query.wait_for_epoch(1)
    kept = sink.epochs()
    assert sorted(kept) == [0, 1]
    fresh = ContinuousExecution(ContinuousStream(CountingSource()).to(sink), Continuous(1000), launcher=ScriptedLauncher(),
                                clock=ManualClock(0))
    async with fresh:
        with pytest.raises(ValueError, match=r"^MemorySink holds the epochs of an earlier run \(up to 1\), and this query "
                                             r"has no checkpoint to continue from"):
            await fresh.start()
    other = ContinuousExecution(ContinuousStream(CountingSource()).to(sink), Continuous(1000), launcher=ScriptedLauncher(),
                                clock=ManualClock(0), checkpoint_location=tmp_path / "other")
    async with other:
        with pytest.raises(CheckpointError, match="the sink committed epoch 0 but the checkpoint has no offsets for it"):
            await other.start()
    assert sink.epochs() == kept
    async with Harness(tmp_path, sink=sink) as again:  # the same query, from its checkpoint: after epoch 1
        assert again.query.last_committed_epoch == 1


async def test_an_abandoned_commit_keeps_the_checkpoint_claimed_until_its_thread_ends(tmp_path: Path) -> None:
    """The stop abandons epoch 0's held commit: a restart meanwhile is refused (the commit could still write into the
    sink the restart reads); once the held commit ends (the sink took epoch 0, the commits log did not), the restart
    takes epoch 0 from the sink's record and goes on after it: epoch 0 committed once."""
    sink = HeldSink()
    with anyio.fail_after(HANG_GUARD_S):
        async with Harness(tmp_path, sink=sink, abandon_after=Milliseconds(50)) as h:
            await complete_epochs(h, 1)
            await anyio.to_thread.run_sync(sink.entered.wait, HANG_GUARD_S)
            await h.query.stop()
        early = Harness(tmp_path, sink=sink)
        async with early.query:
            with pytest.raises(ConcurrentCheckpointUpdateError, match="stopped but keeps it until the sink's commit its "
                                                                      "stop abandoned ends; start again once that has ended"):
                await early.query.start()
        sink.release.set()
        await anyio.to_thread.run_sync(sink.returned.wait, HANG_GUARD_S)
        await wait_until(lambda: checkpoint_claims.holder(as_checkpoint_path(tmp_path / "ckpt")) is None)
        assert not (tmp_path / "ckpt/commits/0").exists()
        async with Harness(tmp_path, sink=sink) as again:
            assert again.query.last_committed_epoch == 0
            assert (tmp_path / "ckpt/commits/0").exists()
    assert sink.epochs() == {0: ["p0e0", "p1e0"]}


async def test_a_file_sink_with_epochs_of_an_earlier_run_needs_its_checkpoint(tmp_path: Path) -> None:
    """Without a checkpoint, a file sink directory that holds committed epochs is refused instead of being overwritten."""
    out = tmp_path / "out"
    (out / "_epochs").mkdir(parents=True)
    (out / "_epochs" / "3").write_text("")
    query = ContinuousExecution(ContinuousStream(CountingSource()).to(FileSink(out)), Continuous(1000),
                                launcher=ScriptedLauncher(), clock=ManualClock(0))
    async with query:
        with pytest.raises(ValueError, match=r"^FileSink\[.*\] holds the epochs of an earlier run \(up to 3\), and this query "
                                             r"has no checkpoint to continue from"):
            await query.start()
    assert (out / "_epochs" / "3").exists()


async def test_tasks_ending_on_their_own_fail_the_query(tmp_path: Path) -> None:
    """The Spark job finishing while the query runs is a failure, not a quiet end."""
    async with Harness(tmp_path) as h:
        h.launcher.release.set()
        with pytest.raises(StreamingQueryException, match="the continuous query's tasks ended while the query was running"):
            await h.query.await_termination()


async def test_a_graceful_stop_that_times_out_goes_on_as_an_immediate_one(tmp_path: Path) -> None:
    """Tasks that never close their epoch: after graceful_stop_timeout on the query's clock, the stop cancels them."""
    async with Harness(tmp_path) as h:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(h.query.stop, graceful=True))
            await wait_until(lambda: h.query.coordinator.stopping)  # type: ignore[union-attr]
            await h.clock.wait_for_sleepers()
            h.clock.advance(Milliseconds(10_000))  # 10 intervals: the default bound
        assert h.launcher.cancelled and h.query.state.value == "STOPPED"
        assert h.query.exception() is None


class HeldSink(MemorySink):
    """A memory sink whose driver-side commit of epoch 0 waits on its thread until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:
        if epoch == 0:
            self.entered.set()
            self.release.wait(HANG_GUARD_S)
        super().commit_epoch(epoch, messages)
        if epoch == 0:
            self.returned.set()


async def complete_epochs(h: Harness, epochs: int) -> None:
    """The tasks close epochs 0 .. epochs - 1 (the driver moved past each)."""
    for epoch in range(epochs):
        await h.tick()
        for task in h.tasks:
            await task.close_epoch(epoch, epoch + 1, [f"p{task.partition_of()}e{epoch}"])


async def test_a_graceful_stop_that_times_out_commits_nothing_queued_after_the_timeout(tmp_path: Path) -> None:
    """Epoch 0's commit is held by the sink and epoch 1 is queued behind it when the graceful stop times out: the stop
    goes on as an immediate one, so epoch 0's commit in progress ends and epoch 1 is never committed."""
    sink = HeldSink()
    with anyio.fail_after(HANG_GUARD_S), capture_events() as logs:
        async with Harness(tmp_path, sink=sink) as h:
            await complete_epochs(h, 2)
            await anyio.to_thread.run_sync(sink.entered.wait, HANG_GUARD_S)
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(h.query.stop, graceful=True))
                await wait_until(lambda: h.query.coordinator.stopping)  # type: ignore[union-attr]
                await h.clock.wait_for_sleepers()
                h.clock.advance(Milliseconds(10_000))  # the default graceful_stop_timeout: the tasks never close the last epoch
                await wait_until(lambda: any(e["event"] == "graceful stop timed out; stopping now" for e in logs))
                sink.release.set()
            assert h.query.state is StreamingContextState.STOPPED
    assert sorted(sink.epochs()) == [0]
    assert (tmp_path / "ckpt/commits/0").exists() and not (tmp_path / "ckpt/commits/1").exists()


async def test_a_sink_commit_that_does_not_end_is_abandoned_by_the_stop_and_its_epoch_stays_uncommitted(
        tmp_path: Path) -> None:
    """An immediate stop waits abandon_after for the sink's commit in progress, then goes on without it; the commit,
    when its thread ends later, writes no commits entry, so a restart commits the epoch again."""
    sink = HeldSink()
    with anyio.fail_after(HANG_GUARD_S), capture_events() as logs:
        async with Harness(tmp_path, sink=sink, abandon_after=Milliseconds(50)) as h:
            await complete_epochs(h, 1)
            await anyio.to_thread.run_sync(sink.entered.wait, HANG_GUARD_S)
            await h.query.stop()
            assert h.query.state is StreamingContextState.STOPPED
        assert ("the sink's commit did not end in time; abandoned, its epoch stays uncommitted and the checkpoint stays "
                "claimed until its thread ends") in [e["event"] for e in logs]
        sink.release.set()
        await anyio.to_thread.run_sync(sink.returned.wait, HANG_GUARD_S)
    assert sorted(sink.epochs()) == [0]  # the sink's own commit went on, on its thread
    assert not (tmp_path / "ckpt/commits/0").exists()
    assert h.query.last_committed_epoch == -1


async def test_old_log_entries_are_purged_as_epochs_commit(tmp_path: Path) -> None:
    """With minBatchesToRetain 2, committing epoch e removes offsets and commits below e - 1 (Spark's continuous purge)."""
    async with Harness(tmp_path, options={"spark.sql.streaming.minBatchesToRetain": 2,
                                          "spark.sql.streaming.numRecentProgressUpdates": 3}) as h:
        for epoch in range(5):
            await h.tick()  # a task closes an epoch once the driver moved past it
            for task in h.tasks:
                await task.close_epoch(epoch, epoch)
        await h.query.wait_for_epoch(4)
        assert sorted(int(p.name) for p in (tmp_path / "ckpt/offsets").iterdir()) == [3, 4]
        assert sorted(int(p.name) for p in (tmp_path / "ckpt/commits").iterdir()) == [3, 4]
        assert [p.batch_id for p in h.query.recent_progress] == [3, 4]  # one fewer than the bound, as in Spark
