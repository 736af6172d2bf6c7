"""The QueryRuntime contract, one lifecycle suite run against both runtimes: micro-batch and continuous.

A kind builds its runtime on a manual clock without Spark: the micro-batch one over a Pipeline of a
ListSource, the continuous one with scripted tasks through the real coordinator protocol. Time moves
only through the clock; a kind's ``nudge`` is what lets a graceful stop parked on it finish.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any, Callable, Coroutine, Protocol

import anyio
import anyio.abc
import pytest

from listeners import QueryStarted, QueryTerminated
from scheduler import (
    ChangeSignal,
    ConcurrentCheckpointUpdateError,
    InvalidDurationError,
    InvalidPipelineError,
    ManualClock,
    Milliseconds,
    Seconds,
    StreamingQueryException,
    StreamingStateError,
)
from streaming import ListSource, Pipeline, QueryRuntime, StreamingContextState, StreamingRuntime
from streaming.continuous import Continuous, ContinuousExecution, ContinuousStream, MemorySink
from streaming.runtime._micro_batch_query import wait_no_new_data
from streaming.ui import StreamingUI
from tests.anyio_support import settle
from tests.streaming.continuous.test_execution import CountingSource, FakeTask, ScriptedLauncher
from tests.support import wait_until

pytestmark = pytest.mark.anyio


class Kind(Protocol):
    """How the suite builds and drives one kind of runtime."""

    clock: ManualClock

    def make(self, name: str | None = None, checkpoint: Path | None = None) -> QueryRuntime:
        """A new runtime, not entered."""

    async def run_data(self, rt: QueryRuntime) -> None:
        """Let the started runtime process one batch or epoch with new input."""

    async def run_no_data(self, rt: QueryRuntime) -> None:
        """Let the started runtime process one batch or epoch without new input."""

    async def fail(self, rt: QueryRuntime) -> None:
        """Make the started query fail (its failure terminates it)."""

    async def nudge(self, rt: QueryRuntime) -> None:
        """Let a graceful stop that is parked (on the clock or on the tasks) finish."""

    async def close(self) -> None:
        """Release what the kind opened."""


class MicroBatch:
    """StreamingRuntime with query tracking over one ListSource; the output fails on demand."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.failing = False

    def make(self, name: str | None = None, checkpoint: Path | None = None) -> QueryRuntime:
        pipeline = Pipeline()
        pipeline.add_source(ListSource(["a"], max_per_batch=1), name="in")
        pipeline.add_output(self._out, name="out")
        return StreamingRuntime(pipeline, Seconds(1), clock=self.clock, track_progress=True, stop_on_failure=True, name=name,
                                checkpoint_location=checkpoint)

    async def _out(self, batch: Any) -> None:
        if self.failing:
            raise RuntimeError("boom")

    async def _batch(self, rt: QueryRuntime) -> None:
        assert isinstance(rt, StreamingRuntime)
        self.clock.advance(Seconds(1))
        await rt.wait_until_idle()

    async def run_data(self, rt: QueryRuntime) -> None:
        await self._batch(rt)  # the source's one record

    async def run_no_data(self, rt: QueryRuntime) -> None:
        await self._batch(rt)

    async def fail(self, rt: QueryRuntime) -> None:
        self.failing = True
        await self._batch(rt)

    async def nudge(self, rt: QueryRuntime) -> None:
        self.clock.advance(Seconds(1))  # the one more tick a graceful stop waits for

    async def close(self) -> None:
        pass


class ContinuousKind:
    """ContinuousExecution of one partition whose task the test plays through the coordinator's protocol."""

    def __init__(self) -> None:
        self.clock = ManualClock(1_000_000)
        self.launchers: dict[int, ScriptedLauncher] = {}
        self.tasks: dict[int, FakeTask] = {}
        self.next_epoch: dict[int, int] = {}
        self.offset = 0

    def make(self, name: str | None = None, checkpoint: Path | None = None) -> QueryRuntime:
        launcher = ScriptedLauncher()
        plan = ContinuousStream(CountingSource(1)).to(MemorySink())
        query = ContinuousExecution(plan, Continuous(1000), launcher=launcher, clock=self.clock, name=name,
                                    checkpoint_location=checkpoint)
        self.launchers[id(query)] = launcher
        return query

    async def _epoch(self, rt: QueryRuntime, offset: int) -> None:
        assert isinstance(rt, ContinuousExecution) and rt.coordinator is not None
        task = self.tasks.get(id(rt))
        if task is None:
            launcher = self.launchers[id(rt)]
            await launcher.started.wait()
            task = self.tasks[id(rt)] = await FakeTask.connect(launcher.specs[0])
        coordinator = rt.coordinator
        epoch = self.next_epoch.get(id(rt), 0)
        if coordinator.current_epoch <= epoch:  # the epoch must have ended before its task can close it
            self.clock.advance(Milliseconds(1000))
            await wait_until(lambda: coordinator.current_epoch > epoch)
        await task.close_epoch(epoch, offset, ["row"] if offset != self.offset else [])
        self.offset = offset
        self.next_epoch[id(rt)] = epoch + 1
        await rt.wait_for_epoch(epoch)

    async def run_data(self, rt: QueryRuntime) -> None:
        await self._epoch(rt, self.offset + 1)

    async def run_no_data(self, rt: QueryRuntime) -> None:
        await self._epoch(rt, self.offset)

    async def fail(self, rt: QueryRuntime) -> None:
        launcher = self.launchers[id(rt)]
        launcher.fail_with = RuntimeError("boom")
        launcher.release.set()  # the tasks end with the failure

    async def nudge(self, rt: QueryRuntime) -> None:
        task = self.tasks.pop(id(rt), None)
        if task is not None:
            await task.stream.aclose()
        self.launchers[id(rt)].release.set()  # the tasks end

    async def close(self) -> None:
        for task in self.tasks.values():
            await task.stream.aclose()


@pytest.fixture(params=["micro-batch", "continuous"])
def kind(request: pytest.FixtureRequest) -> Kind:
    """Each kind of runtime."""
    return MicroBatch() if request.param == "micro-batch" else ContinuousKind()


async def stop_gracefully(kind: Kind, rt: QueryRuntime, stop: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Run ``stop`` (a graceful stop, or leaving the ``async with``) and nudge it once it is parked."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop)
        await settle()
        await kind.nudge(rt)


async def test_both_runtimes_keep_the_protocol(kind: Kind) -> None:
    """Each runtime is a QueryRuntime; before start it has no query id."""
    rt = kind.make()
    assert isinstance(rt, QueryRuntime)
    assert rt.id is None and rt.state is StreamingContextState.INITIALIZED and not rt.is_active


async def test_the_state_moves_one_way_and_a_start_happens_once(kind: Kind) -> None:
    """INITIALIZED -> ACTIVE -> STOPPED; a second start and a start after the stop are refused with Spark's messages."""
    async with kind.make() as rt:
        states = [(rt.state, rt.is_active)]
        await rt.start()
        states.append((rt.state, rt.is_active))
        assert isinstance(rt.id, uuid.UUID) and isinstance(rt.run_id, uuid.UUID)
        with pytest.raises(StreamingStateError, match=r"^StreamingContext has already been started$"):
            await rt.start()
        await rt.stop()
        states.append((rt.state, rt.is_active))
        assert states == [(StreamingContextState.INITIALIZED, False), (StreamingContextState.ACTIVE, True),
                          (StreamingContextState.STOPPED, False)]
        with pytest.raises(StreamingStateError, match=r"^StreamingContext has already been stopped$"):
            await rt.start()
    await kind.close()


async def test_start_outside_the_async_with_is_refused(kind: Kind) -> None:
    """start() needs the runtime's task group, and says how to give it one."""
    rt = kind.make()
    with pytest.raises(StreamingStateError, match=r"^start\(\) needs the (runtime|query)'s task group: use 'async with "):
        await rt.start()


async def test_an_immediate_stop_ends_the_query_and_is_idempotent(kind: Kind) -> None:
    """stop() ends an active query with its data processed so far; a second stop returns at once."""
    async with kind.make() as rt:
        await rt.start()
        await kind.run_data(rt)
        await rt.stop()
        await rt.stop()
        assert rt.state is StreamingContextState.STOPPED
        assert await rt.await_termination() is True
    await kind.close()


async def test_a_graceful_stop_ends_once_what_is_in_flight_finished(kind: Kind) -> None:
    """stop(graceful=True) waits for the batch or epoch in flight, then the query is STOPPED."""
    async with kind.make() as rt:
        await rt.start()
        await stop_gracefully(kind, rt, lambda: rt.stop(graceful=True))
        assert rt.state is StreamingContextState.STOPPED
    await kind.close()


async def test_leaving_the_async_with_stops_the_query(kind: Kind) -> None:
    """A normal exit stops an active query gracefully; an exception stops it at once and propagates."""
    async with anyio.create_task_group() as tg:
        async with kind.make() as rt:
            await rt.start()
            tg.start_soon(lambda: stop_gracefully(kind, rt, anyio.lowlevel.checkpoint))
    assert rt.state is StreamingContextState.STOPPED
    with pytest.raises(KeyError, match="host"):
        async with kind.make() as other:
            await other.start()
            raise KeyError("host")
    assert other.state is StreamingContextState.STOPPED
    await kind.close()


async def test_await_termination_times_out_on_the_runtimes_clock(kind: Kind) -> None:
    """await_termination(timeout) returns False once the timeout passed on the clock, True once stopped; bad timeouts are refused."""
    async with kind.make() as rt:
        await rt.start()
        result: list[bool] = []

        async def wait() -> None:
            result.append(await rt.await_termination(Seconds(3)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await kind.clock.wait_for_sleepers(2)  # the trigger's timer and the waiter
            kind.clock.advance(Seconds(3))
        assert result == [False]
        with pytest.raises(InvalidDurationError, match=r"^timeout must be a non-negative Duration or None, got "):
            await rt.await_termination(Milliseconds(-1))
        await rt.stop()
        assert await rt.await_termination() is True
        assert await rt.await_termination(Seconds(0)) is True
    await kind.close()


async def test_a_failure_terminates_the_query_and_is_raised_by_every_wait(kind: Kind) -> None:
    """A failed query stops; exception() is its StreamingQueryException, which await_termination raises, also later."""
    async with kind.make() as rt:
        await rt.start()
        assert rt.exception() is None
        await kind.fail(rt)
        with anyio.fail_after(5), pytest.raises(StreamingQueryException, match="boom"):
            await rt.await_termination()
        assert rt.state is StreamingContextState.STOPPED
        error = rt.exception()
        assert isinstance(error, StreamingQueryException) and "boom" in str(error)
        with pytest.raises(StreamingQueryException, match="boom"):
            await rt.await_termination(Seconds(0))
    await kind.close()


async def test_process_all_available_returns_once_a_trigger_found_no_new_data(kind: Kind) -> None:
    """process_all_available waits through a batch or epoch with data and returns after one without."""
    async with kind.make() as rt:
        await rt.start()
        done = anyio.Event()

        async def wait() -> None:
            await rt.process_all_available()
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await settle()
            await kind.run_data(rt)
            await settle()
            assert not done.is_set()
            await kind.run_no_data(rt)
            with anyio.fail_after(5):
                await done.wait()
        assert rt.last_progress is not None and rt.recent_progress[-1] is rt.last_progress
        await rt.stop()
    await kind.close()


class PendingPipeline(Pipeline):
    """A Pipeline whose graph says, as a DStream graph with a file stream does, whether a batch left input it saw to a
    later batch time."""

    pending = False

    def input_pending(self) -> bool:
        return self.pending


async def test_process_all_available_waits_past_a_batch_that_left_input_to_a_later_time() -> None:
    """A batch without new input that saw input only a later batch time takes (a late batch before a file's time) is not
    one that found nothing new: the wait goes on to a batch that left nothing behind."""
    clock = ManualClock()
    pipeline = PendingPipeline()
    pipeline.add_source(ListSource([]), name="in")
    pipeline.add_output(lambda batch: None, name="out")
    async with StreamingRuntime(pipeline, Seconds(1), clock=clock, track_progress=True) as rt:
        await rt.start()
        done = anyio.Event()

        async def wait() -> None:
            await rt.process_all_available()
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await settle()
            pipeline.pending = True
            clock.advance(Seconds(1))
            await rt.wait_until_idle()
            await settle()
            assert not done.is_set()
            pipeline.pending = False
            clock.advance(Seconds(1))
            with anyio.fail_after(5):
                await done.wait()
        await rt.stop()


async def test_a_change_between_the_check_and_the_wait_still_wakes_process_all_available() -> None:
    """The batch that ends the wait may be reported between its check and the start of the tasks that wait for the
    next change: both wake-ups are taken before each check, so that report is not lost."""

    class Tracker:
        def __init__(self) -> None:
            self.changed = ChangeSignal()
            self.checks = 0

        def changed_event(self) -> anyio.Event:
            return self.changed.armed()

        def no_new_data_since(self, sequence: int) -> bool:
            self.checks += 1
            if self.checks == 1:
                self.changed.notify()  # the batch commits right after this check said no
                return False
            return True

    class Core:
        stopped = False

        def __init__(self) -> None:
            self.changed = ChangeSignal()

        def changed_event(self) -> anyio.Event:
            return self.changed.armed()

        def raise_error(self) -> None:
            pass

    tracker = Tracker()
    with anyio.fail_after(5):
        await wait_no_new_data(tracker, Core(), 0)  # type: ignore[arg-type]
    assert tracker.checks == 2


async def test_listeners_are_added_and_removed(kind: Kind) -> None:
    """A listener added before start hears QueryStarted; once removed it hears nothing more, while another still does."""
    kept: list[object] = []
    removed: list[object] = []
    listener = removed.append
    async with kind.make() as rt:
        rt.add_listener(kept.append, on_loop=True)
        rt.add_listener(listener, on_loop=True)
        await rt.start()
        assert any(isinstance(e, QueryStarted) for e in removed)
        rt.remove_listener(listener)
        heard = len(removed)
        await rt.stop()
    assert any(isinstance(e, QueryTerminated) for e in kept)
    assert len(removed) == heard
    await kind.close()


async def test_a_service_runs_until_the_query_stops(kind: Kind) -> None:
    """start_service returns what the service reported ready, and the service is cancelled at the stop."""
    ended: list[str] = []

    async def service(greeting: str, *, task_status: anyio.abc.TaskStatus[str]) -> None:
        task_status.started(greeting)
        try:
            await anyio.sleep_forever()
        finally:
            ended.append(greeting)

    async with kind.make() as rt:
        await rt.start()
        assert await rt.start_service(service, "ready") == "ready"
        assert ended == []
        await rt.stop()
    assert ended == ["ready"]
    await kind.close()


@pytest.mark.parametrize("second", ["micro-batch", "continuous"])
async def test_query_names_are_unique_across_kinds(kind: Kind, second: str) -> None:
    """While a query named q is active, no query of either kind named q starts; after its stop one does."""
    other: Kind = MicroBatch() if second == "micro-batch" else ContinuousKind()
    async with kind.make("q") as first:
        await first.start()
        async with other.make("q") as rt:
            with pytest.raises(InvalidPipelineError, match=r"^cannot start query 'q': a query with that name is already "
                                                           r"active in this process; give each active query its own name$"):
                await rt.start()
            assert rt.state is StreamingContextState.STOPPED
        await first.stop()
    async with other.make("q") as again:
        await again.start()
        await again.stop()
    await kind.close()
    await other.close()


@pytest.mark.parametrize("second", ["micro-batch", "continuous"])
async def test_checkpoints_and_query_ids_are_unique_across_kinds(kind: Kind, second: str, tmp_path: Path) -> None:
    """While a query runs on a checkpoint, no query of either kind starts on it, nor on a copy of it (the same query id)."""
    other: Kind = MicroBatch() if second == "micro-batch" else ContinuousKind()
    ck = tmp_path / "ck"
    async with kind.make(checkpoint=ck) as first:
        await first.start()
        async with other.make(checkpoint=ck) as rt:
            with pytest.raises(ConcurrentCheckpointUpdateError,
                               match=rf"^Multiple streaming queries are concurrently using {ck}: .* is active on it in this process"):
                await rt.start()
        copy = Path(shutil.copytree(ck, tmp_path / "copy"))
        async with other.make(checkpoint=copy) as rt:
            with pytest.raises(StreamingStateError, match=rf"^cannot start query {first.id}: it is already active in this process"):
                await rt.start()
        await first.stop()
    await kind.close()
    await other.close()


async def test_the_web_ui_shows_each_kind_with_its_interval(kind: Kind) -> None:
    """The web UI learns the engine and the batch or epoch interval from the protocol (1 s for both kinds here)."""
    rt = kind.make(name="shown")
    history = StreamingUI().attach(rt)
    expected = "micro-batch" if isinstance(kind, MicroBatch) else "continuous"
    assert (rt.kind, history.name, history.kind, history.batch_interval_ms) == (expected, "shown", expected, 1000)
    await kind.close()


async def test_a_query_keeps_the_critical_path_of_its_last_thousand_batches() -> None:
    """critical_path_ns, which only bench/ reads, keeps the last 1,000 batches (it kept 100,000: some 4 MB a query)."""
    clock = ManualClock(0)
    pipeline = Pipeline()
    pipeline.add_source(ListSource([1, 2, 3]), name="in")

    async def out(batch: Any) -> None:
        return None

    pipeline.add_output(out, name="out")
    async with StreamingRuntime(pipeline, Seconds(1), clock=clock, track_progress=True) as runtime:
        await runtime.start()
        clock.advance(Seconds(1_050))
        await runtime.wait_until_idle()
        await runtime.stop()
    tracker = runtime.tracker
    assert tracker is not None and tracker.statistics().batches_committed == 1_050
    assert len(tracker.critical_path_ns) == 1_000
