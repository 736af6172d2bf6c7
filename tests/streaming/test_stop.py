"""Stops that end: the listener bus's exit timeout, cancellation of a stop, and a graceful stop behind late batches.

Everything here runs on a manual clock: the deadlines are the runtime's, so the test decides
when they pass, and "returns within the deadline" is exact.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from pathlib import Path

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from listeners import DEFAULT_LISTENER_EXIT_TIMEOUT, BatchCompleted, ListenerStatistics, QueryStarted, StreamingEvent
from scheduler import (
    Duration,
    InvalidDurationError,
    Job,
    ManualClock,
    Milliseconds,
    Seconds,
    StreamingQueryException,
    StreamingStateError,
    Time,
)
from streaming import Batch, ListSource, Pipeline, StreamingContext, StreamingContextState, StreamingRuntime
from streaming.continuous import Continuous, ContinuousExecution, ContinuousStream, MemorySink
from streaming.spark import SparkSettings, listener_exit_timeout
from tests.anyio_support import HANG_GUARD_S, raises_exactly, settle
from tests.streaming.continuous.test_execution import CountingSource, Harness, ScriptedLauncher
from tests.support import Gate, ScriptedGraph, capture_events, held_then_recorded, hold_first_then_queue, wait_until

pytestmark = pytest.mark.anyio

DROPPED = "listener bus stopped before this listener received every queued event; they were dropped"


class HungOnBatch:
    """An async listener that hangs on the first completed batch, on an event nobody sets."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.never = anyio.Event()

    async def __call__(self, event: StreamingEvent) -> None:
        if isinstance(event, BatchCompleted):
            self.entered.set()
            await self.never.wait()


class HungOnThread:
    """A plain listener (it runs on its own worker thread) that blocks on its first completed batch until released."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.entered = threading.Event()
        self.received: list[str] = []

    def __call__(self, event: StreamingEvent) -> None:
        self.received.append(type(event).__name__)
        if isinstance(event, BatchCompleted) and not self.entered.is_set():
            self.entered.set()
            self.release.wait()


def pipeline() -> Pipeline:
    p = Pipeline()
    p.add_source(lambda t: [t.milliseconds], name="t")

    async def out(batch: Batch) -> None:
        pass

    p.add_output(out)
    return p


# -- the listener bus's deadline at stop --


async def test_a_hung_listener_holds_a_runtime_stop_only_until_the_exit_timeout(clock: ManualClock) -> None:
    """A listener hung on a batch: stop() returns exactly when the default exit timeout has passed on the
    runtime's clock, the runtime is STOPPED, and the hung listener's events are dropped, counted and named."""
    hung = HungOnBatch()
    with capture_events() as logs:
        async with StreamingRuntime(pipeline(), Seconds(1), clock=clock) as rt:
            rt.add_listener(hung, name="hung")
            await rt.start()
            clock.advance(Seconds(1))
            await hung.entered.wait()
            began = clock.now()
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.stop)
                # The timer is gone; then the bus's deadline is the one thing sleeping on the clock.
                await wait_until(lambda: rt.scheduler.generator.timer.next_tick is None and clock.sleepers == 1)
                clock.advance(DEFAULT_LISTENER_EXIT_TIMEOUT)
            assert clock.now() - began == DEFAULT_LISTENER_EXIT_TIMEOUT == Seconds(10)
            assert rt.state is StreamingContextState.STOPPED
    [stats] = rt.listener_bus.statistics().listeners
    # StreamingStarted, BatchSubmitted, BatchStarted, OutputOperationStarted and -Completed were
    # delivered; BatchCompleted (in progress) is dropped.
    assert stats == ListenerStatistics("hung", queued=0, delivered=5, failed=0, dropped=1)
    assert [(e["listener"], e["dropped"]) for e in logs if e["event"] == DROPPED] == [("hung", 1)]


async def test_a_listener_blocked_on_its_thread_is_abandoned_at_the_exit_timeout(clock: ManualClock) -> None:
    """A plain callback blocked on its worker thread cannot be interrupted: the stop ends at the deadline
    (listener_exit_timeout on the clock), and the thread, released later, delivers nothing more."""
    release = threading.Event()
    hung = HungOnThread(release)
    try:
        async with StreamingRuntime(pipeline(), Seconds(1), clock=clock, listener_exit_timeout=Seconds(2)) as rt:
            rt.add_listener(hung, name="hung-thread")
            await rt.start()
            clock.advance(Seconds(1))
            assert await anyio.to_thread.run_sync(hung.entered.wait, HANG_GUARD_S)
            clock.advance(Seconds(1))  # batch 2000: its events queue behind the hung callback
            await wait_until(lambda: rt.scheduler.statistics().batches_completed == 2)
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.stop)
                await wait_until(lambda: clock.sleepers == 1 and rt.scheduler.generator.timer.next_tick is None)
                clock.advance(Seconds(2))
            assert rt.state is StreamingContextState.STOPPED
        [stats] = rt.listener_bus.statistics().listeners
        assert stats.queued == 0 and stats.dropped == 6  # 2000's five events and the one in progress
    finally:
        release.set()
    assert hung.received[-1] == "BatchCompleted"  # nothing was delivered after the hung callback


async def test_a_stop_cancelled_from_outside_returns_and_leaves_the_runtime_stopped(clock: ManualClock) -> None:
    """A move_on_after around stop() is honoured while a listener hangs: the stop returns, the runtime is
    STOPPED with the undelivered events counted as dropped, and leaving the runtime's block does not hang."""
    hung = HungOnBatch()
    async with StreamingRuntime(pipeline(), Seconds(1), clock=clock, listener_exit_timeout=None) as rt:
        rt.add_listener(hung, name="hung")
        await rt.start()
        clock.advance(Seconds(1))
        await hung.entered.wait()
        with anyio.move_on_after(0.2) as scope:
            await rt.stop()
        assert scope.cancelled_caught
        assert rt.state is StreamingContextState.STOPPED
    assert rt.listener_bus.statistics().dropped == 1


async def test_a_stop_asked_in_an_already_cancelled_scope_still_stops(clock: ManualClock) -> None:
    """stop() called where the host has already cancelled (nothing hung): the runtime is STOPPED, not left ACTIVE."""
    async with StreamingRuntime(pipeline(), Seconds(1), clock=clock) as rt:
        await rt.start()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await rt.stop(graceful=True)
        assert rt.state is StreamingContextState.STOPPED


async def test_a_stop_asked_in_a_cancelled_scope_during_a_start_stops_what_the_start_makes_active(
        tmp_path: Path, clock: ManualClock) -> None:
    """A start still attaching its sources in one task, a stop asked in a cancelled scope in another: the stop waits for
    the start (shielded) and ends the runtime STOPPED, not left to become ACTIVE after the stop gave up."""
    attaching, go_on = anyio.Event(), anyio.Event()

    class SlowToAttach(ListSource):
        async def attach_checkpoint(self, path: object) -> None:
            attaching.set()
            await go_on.wait()

    p = Pipeline()
    p.add_source(SlowToAttach([1, 2]), name="in")
    p.add_output(lambda batch: None, name="out")
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck") as rt:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.start)
            await attaching.wait()

            async def release() -> None:  # the start goes on while the stop below waits for it
                go_on.set()

            tg.start_soon(release)
            with anyio.CancelScope() as scope:
                scope.cancel()
                await rt.stop()
        assert rt.state is StreamingContextState.STOPPED


async def test_an_async_with_left_while_a_start_runs_in_another_task_waits_for_it_and_stops_it(
        tmp_path: Path, clock: ManualClock) -> None:
    """The block raises while a host task's start() still attaches the sources: leaving it waits for the start and stops
    what it made ACTIVE, so the name is free after (the block once marked the runtime stopped under the start, which then
    made it ACTIVE, or died on the closed task group, the name claimed for good)."""
    attaching, go_on = anyio.Event(), anyio.Event()

    class SlowToAttach(ListSource):
        async def attach_checkpoint(self, path: object) -> None:
            attaching.set()
            await go_on.wait()

    async def release_once_all_wait() -> None:  # once the block's exit waits for the start, the start may go on
        await anyio.wait_all_tasks_blocked()
        go_on.set()

    def runtime(source: ListSource, ck: str) -> StreamingRuntime:
        p = Pipeline()
        p.add_source(source, name="in")
        p.add_output(lambda batch: None, name="out")
        return StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path / ck, name="tenant")

    rt = runtime(SlowToAttach([1, 2]), "ck")
    async with anyio.create_task_group() as host:
        with pytest.raises(KeyError):
            async with rt:
                host.start_soon(rt.start)
                await attaching.wait()
                host.start_soon(release_once_all_wait)
                raise KeyError("the request failed")
    assert rt.state is StreamingContextState.STOPPED
    async with runtime(ListSource([1]), "ck2") as again:  # the name is free
        await again.start()
        await again.stop()


async def test_a_stop_from_inside_the_start_is_refused_rather_than_waiting_for_itself(tmp_path: Path, clock: ManualClock) -> None:
    """A source's attach (code the start runs) calls stop(): refused with a StreamingStateError, which fails the start;
    the runtime ends STOPPED (a stop waiting for the start it is part of would wait for good)."""
    refused: list[BaseException] = []

    class StopsOnAttach(ListSource):
        async def attach_checkpoint(self, path: object) -> None:
            try:
                await rt.stop()
            except StreamingStateError as exc:
                refused.append(exc)
                raise

    p = Pipeline()
    p.add_source(StopsOnAttach([1]), name="in")
    p.add_output(lambda batch: None, name="out")
    rt = StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck")
    with anyio.fail_after(HANG_GUARD_S):
        async with rt:
            with pytest.raises(StreamingStateError, match=r"cannot be stopped from inside its own start\(\)"):
                await rt.start()
    assert len(refused) == 1 and rt.state is StreamingContextState.STOPPED


async def test_a_start_failing_while_the_block_s_exit_waits_for_it_raises_its_own_error(tmp_path: Path, clock: ManualClock) -> None:
    """The block raises while a host task's start attaches; the attach then fails. The start raises its own error (not
    anyio's closed-group one), the runtime is stopped for good, and await_termination returns at once."""
    attaching, fail = anyio.Event(), anyio.Event()
    raised: list[BaseException] = []

    class FailsToAttach(ListSource):
        async def attach_checkpoint(self, path: object) -> None:
            attaching.set()
            await fail.wait()
            raise OSError("storage unreachable")

    async def start() -> None:
        try:
            await rt.start()
        except Exception as exc:
            raised.append(exc)

    async def fail_once_all_wait() -> None:
        await anyio.wait_all_tasks_blocked()
        fail.set()

    p = Pipeline()
    p.add_source(FailsToAttach([1]), name="in")
    p.add_output(lambda batch: None, name="out")
    rt = StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path / "ck")
    async with anyio.create_task_group() as host:
        with pytest.raises(KeyError):
            async with rt:
                host.start_soon(start)
                await attaching.wait()
                host.start_soon(fail_once_all_wait)
                raise KeyError("the request failed")
    assert [type(e) for e in raised] == [OSError] and rt.state is StreamingContextState.STOPPED
    with anyio.fail_after(HANG_GUARD_S):
        assert await rt.await_termination(Milliseconds(0))


async def test_a_continuous_start_cancelled_while_it_announces_the_query_leaves_it_stopped(tmp_path: Path) -> None:
    """start() cancelled while an onQueryStarted listener holds it (Spark calls it before start() returns): the start
    raises and the query is STOPPED with its name free, as a runtime's (it once stayed ACTIVE, claiming its name)."""
    q = ContinuousExecution(ContinuousStream(CountingSource(2)).to(MemorySink()), Continuous(1000), launcher=ScriptedLauncher(),
                            clock=ManualClock(1_000_000), checkpoint_location=tmp_path / "ck", name="announced")
    scope = anyio.CancelScope()

    async def holds_the_start(event: StreamingEvent) -> None:
        if isinstance(event, QueryStarted):
            scope.cancel()
            await anyio.sleep_forever()

    q.add_listener(holds_the_start, on_loop=True)
    async with q:
        with scope:
            await q.start()
        assert scope.cancelled_caught and q.state is StreamingContextState.STOPPED
    again = ContinuousExecution(ContinuousStream(CountingSource(2)).to(MemorySink()), Continuous(1000),
                                launcher=ScriptedLauncher(), clock=ManualClock(1_000_000), name="announced")
    async with again:  # the name is free
        await again.start()
        await again.stop()


@pytest.mark.parametrize("checkpoints", [1, 3, 5])
async def test_a_continuous_async_with_left_while_its_start_runs_in_another_task_ends(
        tmp_path: Path, checkpoints: int) -> None:
    """The block raises while a host task's start() runs: leaving it ends (it once hung for good, shielded, waiting for
    an epoch committer whose task never ran) with the query STOPPED."""
    q = ContinuousExecution(ContinuousStream(CountingSource(2)).to(MemorySink()), Continuous(1000), launcher=ScriptedLauncher(),
                            clock=ManualClock(1_000_000), checkpoint_location=tmp_path / "ck", name="raced")

    async def start() -> None:
        with contextlib.suppress(Exception):
            await q.start()

    with anyio.fail_after(HANG_GUARD_S):
        async with anyio.create_task_group() as host:
            with pytest.raises(KeyError):
                async with q:
                    host.start_soon(start)
                    for _ in range(checkpoints):
                        await anyio.lowlevel.checkpoint()
                    raise KeyError("the request failed")
    assert q.state is StreamingContextState.STOPPED


@pytest.mark.parametrize("graceful_exit", [True, False], ids=["body-ends", "body-raises-cancelled"])
async def test_an_async_with_left_in_a_cancelled_host_stops_the_runtime_and_frees_its_name(
        tmp_path: Path, clock: ManualClock, graceful_exit: bool) -> None:
    """The host's group cancelled as the block ends (its last line, or the cancellation raised in it): STOPPED, and
    the query's name is free for the next run (it once stayed ACTIVE, claiming the name, when the block just ended)."""
    for run in range(2):
        p = Pipeline()
        p.add_source(ListSource([[1]]), name="list")
        p.add_output(lambda batch: None, name="noop")
        async with anyio.create_task_group() as host:
            async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=tmp_path / f"ck{run}",
                                        name="tenant") as rt:
                await rt.start()
                host.cancel_scope.cancel()
                if not graceful_exit:
                    await anyio.lowlevel.checkpoint()
        assert rt.state is StreamingContextState.STOPPED, run


async def test_a_continuous_stop_asked_in_an_already_cancelled_scope_still_stops(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await h.query.stop(graceful=True)
        assert h.query.state is StreamingContextState.STOPPED
        assert h.launcher.cancelled == [f"aiodstream-continuous-{h.query.run_id}"]


async def test_a_graceful_stop_cancelled_behind_a_hung_job_still_ends_the_runtime(clock: ManualClock) -> None:
    """A move_on_after around a graceful stop waiting for a job that never ends: the stop returns, the job is
    abandoned as in an immediate stop, and leaving the runtime's block does not wait for it."""
    gate = Gate()
    async with StreamingRuntime(ScriptedGraph(lambda t: [gate.job(t, str(t.milliseconds))]), Seconds(1), clock=clock) as rt:
        await rt.start()
        clock.advance(Seconds(1))
        await gate.wait_started("1000")
        with anyio.move_on_after(0.2) as scope:
            await rt.stop(graceful=True)
        assert scope.cancelled_caught
        assert rt.state is StreamingContextState.STOPPED
    assert gate.started == ["1000"] and gate.running == 0
    assert rt.scheduler.pending_times() == [Time(1000)]


async def test_a_hung_listener_holds_a_continuous_stop_only_until_the_exit_timeout(tmp_path: Path) -> None:
    """Continuous: a listener hung on QueryTerminated; the stop ends when the exit timeout passes on the
    query's clock, and QueryTerminated reached the other listeners."""
    async with Harness(tmp_path) as h:
        never = anyio.Event()
        entered = anyio.Event()

        async def hung(event: StreamingEvent) -> None:
            entered.set()
            await never.wait()

        h.query.add_listener(hung, name="hung")
        began = h.clock.now()
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.query.stop)
            await entered.wait()
            await wait_until(lambda: h.clock.sleepers == 1)  # the bus's deadline
            h.clock.advance(DEFAULT_LISTENER_EXIT_TIMEOUT)
        assert h.clock.now() - began == DEFAULT_LISTENER_EXIT_TIMEOUT
        assert h.query.state is StreamingContextState.STOPPED
        assert type(h.events[-1]).__name__ == "QueryTerminated"
        by_name = {s.name: s for s in h.query.listener_bus.statistics().listeners}
        assert (by_name["hung"].delivered, by_name["hung"].dropped) == (0, 1)


async def test_a_continuous_stop_cancelled_from_outside_returns(tmp_path: Path) -> None:
    """Continuous: a move_on_after around stop() is honoured while a listener hangs; the query is STOPPED."""
    async with Harness(tmp_path) as h:
        never = anyio.Event()

        async def hung(event: StreamingEvent) -> None:
            await never.wait()

        h.query.add_listener(hung, name="hung")
        with anyio.move_on_after(0.2) as scope:
            await h.query.stop()
        assert scope.cancelled_caught
        assert h.query.state is StreamingContextState.STOPPED
        assert h.query.listener_bus.statistics().dropped == 1


# -- the setting --


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, DEFAULT_LISTENER_EXIT_TIMEOUT), ("0", None), ("0s", None), ("1500", Milliseconds(1500)), ("2s", Seconds(2)),
     ("1min", Seconds(60))],
)
def test_spark_scheduler_listenerbus_exit_timeout_is_read_as_spark_reads_it(value: str | None, expected: Duration | None) -> None:
    """Milliseconds by default, Spark's suffixes, 0 for Spark's unbounded wait, and our bounded default when unset."""
    assert listener_exit_timeout(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [("-1", "'-1' in spark.scheduler.listenerbus.exitTimeout is invalid. Listener bus exit timeout must be non-negative duration"),
     ("soon", "spark.scheduler.listenerbus.exitTimeout: Time must be specified as seconds (s), milliseconds (ms), microseconds "
              "(us), minutes (m or min), hour (h), or day (d). E.g. 50s, 100ms, or 250us.\nFailed to parse time string: soon")],
)
def test_a_bad_exit_timeout_is_refused_with_sparks_message(value: str, message: str) -> None:
    """A negative or malformed spark.scheduler.listenerbus.exitTimeout is refused as Spark refuses it."""
    with raises_exactly(InvalidDurationError, message):
        listener_exit_timeout(value)


@pytest.mark.parametrize("continuous", [False, True])
def test_a_context_gives_its_runtime_the_exit_timeout_setting(continuous: bool) -> None:
    """StreamingContext reads spark.scheduler.listenerbus.exitTimeout into its runtime's bus (micro-batch and continuous)."""
    from streaming.continuous import Continuous

    ssc = StreamingContext(None, Continuous(1000) if continuous else 1)  # type: ignore[arg-type]
    ssc._spark._settings = SparkSettings(2, {"spark.scheduler.listenerbus.exitTimeout": "750ms"})
    assert ssc.runtime.listener_bus.exit_timeout == Milliseconds(750)


# -- a graceful stop behind late batches --


async def test_a_graceful_stop_behind_late_batches_drains_them_all(clock: ManualClock) -> None:
    """Seven batches behind, each taking 2 s of the clock, and a 5 s graceful-stop timeout: the stop drains
    every one (the timeout counts time without progress, not the whole drain) and abandons nothing."""
    gate = Gate()
    done: list[int] = []

    def make(t: Time) -> list[Job]:
        if t.milliseconds == 1000:
            return [gate.job(t, "1000")]

        async def slow() -> None:
            clock.advance(Seconds(2))  # the batch takes 2 s...
            await settle()  # ...during which whatever that time woke has run (a stop's deadline, say)
            done.append(t.milliseconds)

        return [Job(t, slow, name=str(t.milliseconds))]

    with capture_events() as logs:
        async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock, graceful_stop_timeout=Seconds(5)) as rt:
            await rt.start()
            clock.advance(Seconds(1))
            await gate.wait_started("1000")
            clock.advance(Seconds(5))  # batches 2000..6000 fall behind the one that holds the only job slot
            await wait_until(lambda: rt.scheduler.generator.timer.last_tick == Time(6000))
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(rt.stop, graceful=True))
                await settle()  # stop() waits for the tick at 7000
                clock.advance(Seconds(1))
                await settle()
                gate.open("1000")
            assert rt.state is StreamingContextState.STOPPED
    assert done == [2000, 3000, 4000, 5000, 6000, 7000]
    assert clock.now() == Time(7000 + 6 * 2000)  # 12 s of draining, more than the timeout
    assert rt.scheduler.pending_times() == []
    assert not [e for e in logs if e["event"] == "timed out while stopping the job generator"]


async def test_an_immediate_stop_during_a_graceful_one_ends_its_drain_now(clock: ManualClock) -> None:
    """A graceful stop drains five batches queued behind a hung job; an immediate stop asked for meanwhile (a service
    out of time, a second Ctrl-C) makes it immediate: no queued batch runs, the hung job is abandoned, both calls
    return, and the queued batches are left pending (a checkpointed query runs them after a restart)."""
    gate = Gate()
    done: list[int] = []
    with anyio.fail_after(HANG_GUARD_S), capture_events() as logs:  # the manual clock never reaches a timeout
        async with StreamingRuntime(ScriptedGraph(held_then_recorded(gate, done)), Seconds(1), clock=clock,
                                    abandon_after=Milliseconds(0)) as rt:
            await rt.start()
            await hold_first_then_queue(rt, clock, gate, 5)
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(rt.stop, graceful=True))
                await settle()  # the graceful stop waits for its one more tick (7000)
                clock.advance(Seconds(1))
                await settle()  # ...and now drains, behind the hung job
                assert rt.state is StreamingContextState.ACTIVE and done == []
                await rt.stop(graceful=False)
                assert rt.state is StreamingContextState.STOPPED
    assert done == []
    assert [t.milliseconds for t in rt.scheduler.pending_times()] == [1000, 2000, 3000, 4000, 5000, 6000, 7000]
    events = [e["event"] for e in logs]
    assert events.count("an immediate stop was asked for while a graceful one drains: stopping now") == 1
    assert "graceful stop ends without draining: new work was refused" in events
    assert "timed out while stopping the job generator" not in events


class HostBlockError(Exception):
    """What ended the host's block while a graceful stop drained (a Ctrl-C's KeyboardInterrupt, say)."""


async def test_an_error_leaving_the_block_while_a_graceful_stop_drains_makes_it_immediate(clock: ManualClock) -> None:
    """The host's block ends with an error while a graceful stop it began elsewhere drains behind a hung job: the exit
    no longer waits for that drain (it never ends here); the stop becomes immediate and the queued batches are left."""
    gate = Gate()
    done: list[int] = []
    with anyio.fail_after(HANG_GUARD_S):  # the manual clock never moves again: before, the exit waited here for ever
        async with anyio.create_task_group() as outer:
            with pytest.raises(HostBlockError):
                async with StreamingRuntime(ScriptedGraph(held_then_recorded(gate, done)), Seconds(1), clock=clock,
                                            abandon_after=Milliseconds(0)) as rt:
                    await rt.start()
                    await hold_first_then_queue(rt, clock, gate, 3)
                    outer.start_soon(functools.partial(rt.stop, graceful=True))
                    await settle()
                    clock.advance(Seconds(1))  # its one more tick: now it drains
                    await settle()
                    raise HostBlockError
    assert rt.state is StreamingContextState.STOPPED and done == []
    assert [t.milliseconds for t in rt.scheduler.pending_times()] == [1000, 2000, 3000, 4000, 5000]


async def test_an_immediate_stop_while_a_graceful_one_waits_for_its_tick_stops_now(clock: ManualClock) -> None:
    """Before its drain a graceful stop waits for the tick the timer is waiting for (a minute here); an immediate stop
    asked for meanwhile ends that wait: the tick never fires, and both stops return while the clock stands still."""
    done: list[int] = []

    def make(t: Time) -> list[Job]:
        async def out() -> None:
            done.append(t.milliseconds)

        return [Job(t, out, name=str(t.milliseconds))]

    with anyio.fail_after(HANG_GUARD_S):  # the manual clock never reaches the tick: before, this hung
        async with StreamingRuntime(ScriptedGraph(make), Seconds(60), clock=clock, abandon_after=Milliseconds(0)) as rt:
            await rt.start()
            clock.advance(Seconds(60))
            await rt.wait_until_idle()
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(rt.stop, graceful=True))
                await settle()  # the graceful stop waits for the tick at 120 s
                await rt.stop(graceful=False)
                assert rt.state is StreamingContextState.STOPPED
    assert done == [60_000] and clock.now() == Time(60_000)
    assert rt.scheduler.generator.timer.last_tick == Time(60_000)


@pytest.mark.parametrize("graceful", [False, True])
async def test_a_stop_from_inside_one_of_the_runtimes_jobs_returns_and_the_runtime_stops_after_the_job(
        clock: ManualClock, graceful: bool) -> None:
    """The stop would wait for the very job that asked for it (and, once abandon_after passed, cancel the stop itself
    and hang in its shielded clean-up): it starts beside the job and returns, the job goes on to its end, then the
    runtime stops."""
    box: list[StreamingRuntime] = []
    outcome: list[str] = []

    def make(t: Time) -> list[Job]:
        async def run() -> None:
            if t.milliseconds == 1000:
                await box[0].stop(graceful=graceful)
                outcome.append("stop returned inside the job")
            outcome.append(f"job {t.milliseconds} ended")
        return [Job(t, run, name="stopper")]

    with anyio.fail_after(HANG_GUARD_S):
        async with StreamingRuntime(ScriptedGraph(make), Seconds(1), clock=clock, abandon_after=Milliseconds(0),
                                    graceful_stop_timeout=Milliseconds(0)) as rt:
            box.append(rt)
            await rt.start()
            for _ in range(3):  # a graceful stop fires one more tick, on this clock
                clock.advance(Seconds(1))
                await settle()
            await rt.await_termination()
            assert rt.state is StreamingContextState.STOPPED
    assert outcome[:2] == ["stop returned inside the job", "job 1000 ended"]


async def test_a_stop_while_the_start_is_under_way_stops_the_started_runtime_and_a_second_start_is_refused(
        clock: ManualClock) -> None:
    """A stop that comes while start() is still setting up waits for it and stops what it started (it marked the runtime
    STOPPED and returned, and the start then made it ACTIVE: jobs ran after the stop); a second start meanwhile is
    refused as one of a started context."""
    from tests.support import noop_job

    ran: list[tuple[str, int]] = []
    log: list[str] = []
    async with StreamingRuntime(ScriptedGraph(lambda t: [noop_job(t, "a", ran)]), Seconds(1), clock=clock) as rt:
        async def start(name: str) -> None:
            try:
                await rt.start()
                log.append(f"{name} returned")
            except StreamingStateError as exc:
                log.append(f"{name} refused: {exc}")

        async def stop() -> None:
            await rt.stop(graceful=False)
            log.append(f"stop returned {rt.state.name}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(start, "start")
            await anyio.lowlevel.checkpoint()  # the start runs to its first wait: it is under way
            tg.start_soon(start, "second start")
            tg.start_soon(stop)
        clock.advance(Seconds(3))
        await settle()
        assert rt.state is StreamingContextState.STOPPED and ran == []
    assert "second start refused: StreamingContext has already been started" in log
    assert log.index("start returned") < log.index("stop returned STOPPED")


async def stop_while_the_clock_moves(rt: StreamingRuntime, clock: ManualClock, *, graceful: bool = False,
                                     seconds: int = 8) -> Duration:
    """Stop ``rt`` while the clock moves one second at a time (at most ``seconds``), whenever something sleeps on it,
    until the stop returned; how long it took on the clock."""
    began = clock.now()
    stopped = anyio.Event()

    async def stop() -> None:
        await rt.stop(graceful=graceful)
        stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop)
        for _ in range(seconds):
            await settle()
            await wait_until(lambda: stopped.is_set() or clock.sleepers >= 1)
            if stopped.is_set():
                break
            clock.advance(Seconds(1))
    return clock.now() - began


# -- a batch whose generation never ends --


class HungGeneration(ScriptedGraph):
    """Batch 1000 is generated; batch 2000's generation never returns (on the loop, or blocked on a thread)."""

    def __init__(self, on_thread: bool, release: threading.Event) -> None:
        super().__init__(lambda t: [Job(t, noop, name=str(t.milliseconds))])
        self.on_thread = on_thread
        self.release = release
        self.entered = anyio.Event()

    async def generate_jobs(self, time: Time) -> list[Job]:
        jobs = list(await super().generate_jobs(time))
        if time.milliseconds == 2000:
            self.entered.set()
            if self.on_thread:  # a PySpark call that blocks for good, on a thread (as DStreamGraph generates)
                await anyio.to_thread.run_sync(self.release.wait, abandon_on_cancel=True)
            else:
                await anyio.Event().wait()
        return jobs


async def noop() -> None:
    pass


@pytest.mark.parametrize("graceful", [False, True])
@pytest.mark.parametrize("on_thread", [False, True])
async def test_a_batch_whose_generation_never_ends_holds_a_stop_only_until_abandon_after(
        clock: ManualClock, graceful: bool, on_thread: bool) -> None:
    """A graph or planner call that never returns (a transform's Spark call that hangs): the stop (after the graceful
    timeout, for a graceful one) gives the generation ``abandon_after`` on the runtime's clock, then abandons it, says
    so, and ends; the batch was never submitted (a restart generates it again, as a down-time batch)."""
    release = threading.Event()
    graph = HungGeneration(on_thread, release)
    try:
        with anyio.fail_after(HANG_GUARD_S), capture_events() as logs:
            async with StreamingRuntime(graph, Seconds(1), clock=clock, abandon_after=Seconds(2),
                                        graceful_stop_timeout=Seconds(3)) as rt:
                await rt.start()
                clock.advance(Seconds(1))
                await wait_until(lambda: rt.scheduler.statistics().batches_completed == 1)
                clock.advance(Seconds(1))
                await graph.entered.wait()
                # The graceful stop's one more tick, its timeout, then abandon_after.
                waited = await stop_while_the_clock_moves(rt, clock, graceful=graceful)
                assert rt.state is StreamingContextState.STOPPED
                assert waited == (Seconds(1 + 3 + 2) if graceful else Seconds(2))
    finally:
        release.set()
    [abandoned] = [e for e in logs if e["event"] == "abandoned a batch's generation that did not end"]
    assert abandoned["batch_time"] == 2000
    assert rt.scheduler.pending_times() == [] and graph.calls[-1] == ("generate", 2000)


async def test_under_the_block_policy_a_hung_listener_holds_a_stop_only_until_the_exit_timeout(clock: ManualClock) -> None:
    """OverflowPolicy.BLOCK and a listener hung with its queue full: the scheduler's posts wait for room, and the stop
    waited for them before the bus's deadline ever began (for good). From the stop on, a post waits for room at most
    the exit timeout, then drops that listener's event; the bus then gives up on the hung listener at once: the whole
    stop takes the exit timeout, and every event it did not get is counted as dropped."""
    from listeners import OverflowPolicy

    hung = HungOnBatch()
    with anyio.fail_after(HANG_GUARD_S):
        async with StreamingRuntime(pipeline(), Seconds(1), clock=clock, listener_overflow=OverflowPolicy.BLOCK,
                                    listener_bus_capacity=1, listener_exit_timeout=Seconds(4)) as rt:
            rt.add_listener(hung, name="hung")
            await rt.start()
            clock.advance(Seconds(1))
            await hung.entered.wait()
            clock.advance(Seconds(1))  # batch 2000's first event fills the queue; its next post waits for room
            await settle()
            assert await stop_while_the_clock_moves(rt, clock) == Seconds(4)
            assert rt.state is StreamingContextState.STOPPED
            assert rt.exception() is None  # the batch whose submission a post held is not queued after the stop
    [stats] = rt.listener_bus.statistics().listeners
    assert stats.queued == 0 and stats.delivered == 5 and stats.dropped >= 2


class FailingFirstBatch:
    """A stop-on-failure query whose batch 1000 fails once released, while batch 2000 waits behind it: ``started``
    lists the batches whose output ran."""

    def __init__(self, clock: ManualClock) -> None:
        self.started: list[int] = []
        self.release = anyio.Event()
        pipeline = Pipeline()
        pipeline.add_source(ListSource(["a", "b", "c"], max_per_batch=1), name="in")
        pipeline.add_output(self._out, name="out")
        self.runtime = StreamingRuntime(pipeline, Seconds(1), clock=clock, track_progress=True, stop_on_failure=True)
        self._clock = clock

    async def _out(self, batch: Batch) -> None:
        self.started.append(batch.time.milliseconds)
        if batch.time.milliseconds == 1000:
            await self.release.wait()
            raise RuntimeError("boom")

    async def start_with_batch_2000_queued(self) -> None:
        """Start the entered runtime, run batch 1000 until it waits for ``release``, and queue batch 2000 behind it."""
        rt = self.runtime
        await rt.start()
        self._clock.advance(Seconds(1))
        await wait_until(lambda: self.started == [1000])
        self._clock.advance(Seconds(1))
        await wait_until(lambda: Time(2000) in rt.scheduler.pending_times())


async def test_no_job_of_a_later_batch_starts_once_a_query_failed(clock: ManualClock) -> None:
    """stop_on_failure: batch 2's job, queued behind batch 1's slow failing job, never runs (Spark runs no batch after
    the failed one). Before, the worker took it at once, ahead of the stop the failure started."""
    query = FailingFirstBatch(clock)
    async with query.runtime as rt:
        await query.start_with_batch_2000_queued()
        query.release.set()
        with anyio.fail_after(HANG_GUARD_S), pytest.raises(StreamingQueryException, match="boom"):
            await rt.await_termination()
    assert query.started == [1000]


async def test_a_batch_whose_submission_a_blocked_post_held_past_a_stop_is_dropped_quietly(clock: ManualClock) -> None:
    """BLOCK, a hung listener, its queue full: batch 3000's BatchSubmitted post waits in the generator while an immediate
    stop closes the job queue. The batch is not queued then, as one generated after the stop began: before, queuing its
    jobs raised ClosedResourceError, reported as a failure of the job generator after an orderly stop."""
    from listeners import OverflowPolicy

    hung = HungOnBatch()
    with anyio.fail_after(HANG_GUARD_S):
        async with StreamingRuntime(pipeline(), Seconds(1), clock=clock, listener_overflow=OverflowPolicy.BLOCK,
                                    listener_bus_capacity=1, listener_exit_timeout=Seconds(4)) as rt:
            rt.add_listener(hung, name="hung")
            await rt.start()
            clock.advance(Seconds(1))
            await hung.entered.wait()
            clock.advance(Seconds(1))  # BatchSubmitted of 2000 fills the queue; its BatchStarted waits in the worker
            await settle()
            clock.advance(Seconds(1))  # BatchSubmitted of 3000 waits in the generator
            await settle()
            assert await stop_while_the_clock_moves(rt, clock) <= Seconds(4 + 2)  # the exit timeout, abandon_after
            assert rt.state is StreamingContextState.STOPPED
        assert rt.exception() is None


async def test_a_start_cancelled_while_it_announces_the_query_leaves_the_runtime_stopped(clock: ManualClock) -> None:
    """start() waits for onQueryStarted (as Spark does); cancelled there, the runtime was left ACTIVE while its caller
    let go of the checkpoint (a second context then ran on it). A start that raises now leaves the runtime stopped."""
    entered = anyio.Event()
    never = anyio.Event()

    class SlowStart:
        async def on_query_started(self, event: object) -> None:
            entered.set()
            await never.wait()

    pipeline = Pipeline()
    pipeline.add_source(ListSource(["a"], max_per_batch=1), name="in")
    pipeline.add_output(lambda batch: None, name="out")
    with anyio.fail_after(HANG_GUARD_S):
        # No exit timeout: the stop after a cancelled start drops what the hung listener has not taken, as a cancelled
        # stop does, instead of waiting for it (for good here) under the shield that keeps the rest of the stop whole.
        async with StreamingRuntime(pipeline, Seconds(1), clock=clock, track_progress=True, listener_exit_timeout=None) as rt:
            rt.add_listener(SlowStart())
            async with anyio.create_task_group() as tg:
                async def start() -> None:
                    with pytest.raises(anyio.get_cancelled_exc_class()):
                        await rt.start()
                    assert rt.state is StreamingContextState.STOPPED

                scope = anyio.CancelScope()

                async def cancellable_start() -> None:
                    with scope:
                        await start()

                tg.start_soon(cancellable_start)
                await entered.wait()
                scope.cancel()
            assert rt.state is StreamingContextState.STOPPED


async def test_a_query_failing_during_a_graceful_stop_ends_it_without_waiting_for_the_refused_batches(clock: ManualClock) -> None:
    """stop_on_failure: a batch fails while a graceful stop drains. Its later batch's job is refused (it never runs), so
    the drain cannot finish: the stop goes on as an immediate one instead of waiting out graceful_stop_timeout."""
    query = FailingFirstBatch(clock)
    release = query.release
    with anyio.fail_after(HANG_GUARD_S):  # the manual clock never reaches the graceful timeout: before, this hung
        async with query.runtime as rt:
            await query.start_with_batch_2000_queued()
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(rt.stop, graceful=True))
                await settle()  # the stop waits for its one more tick (3000)
                release.set()
                await wait_until(lambda: rt.exception() is not None)
                clock.advance(Seconds(1))  # that tick; then the clock stays put (a graceful timeout would never pass)
            assert rt.state is StreamingContextState.STOPPED
    assert query.started == [1000]
    assert isinstance(rt.exception(), StreamingQueryException)


async def test_an_immediate_stop_from_inside_a_job_lets_no_queued_job_start(clock: ManualClock) -> None:
    """The stop a job asked for began only after that job returned, and its worker could take the next queued batch's
    job first (a foreachRDD function's ssc.stop(False, False): the next batch ran in 4 runs of 8). An immediate stop
    asked for by a job refuses new work before it returns to the job."""
    box: list[StreamingRuntime] = []
    started: list[int] = []
    asked, stop_may_go_on = anyio.Event(), anyio.Event()

    class HeldStop(ScriptedGraph):
        async def stop(self) -> None:  # the stop's first step waits: a worker free meanwhile would start the next job
            await stop_may_go_on.wait()
            await super().stop()

    def make(t: Time) -> list[Job]:
        async def run() -> None:
            started.append(t.milliseconds)
            if t.milliseconds == 1000:
                await asked.wait()
                await box[0].stop(graceful=False)
        return [Job(t, run, name="op")]

    with anyio.fail_after(HANG_GUARD_S):
        async with StreamingRuntime(HeldStop(make), Seconds(1), clock=clock) as rt:
            box.append(rt)
            await rt.start()
            for _ in range(2):  # batch 1000's job runs (held), batch 2000's is queued behind it
                clock.advance(Seconds(1))
                await settle()
            asked.set()
            await settle()  # the job asked for the stop and returned; the stop waits in the graph's stop
            stop_may_go_on.set()
            await rt.await_termination()
    assert started == [1000]
