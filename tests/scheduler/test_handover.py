"""Handover: the loop's thread gives a WorkerThreads call the GIL and takes its result back (no Spark needed).

The tests decide who runs when without timing: the worker is held busy by a first call until the
loop's thread sets ``go`` right before it waits, and the interpreter's switch interval is raised
for the test, so the worker can take the GIL only when the loop's thread lets go of it (in
:meth:`Handover.wait`, or in its selector once the test task yields).
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Iterator

import anyio
import pytest

import scheduler._worker_threads as worker_threads_module
from scheduler import Handover, WorkerThreads
from tests.anyio_support import BACKENDS, HANG_GUARD_S, no_forced_gil_switch


@pytest.fixture
def pool() -> Iterator[WorkerThreads]:
    threads = WorkerThreads(1, "handover-test")
    yield threads
    threads.shutdown()
    for thread in threads.threads:
        thread.join(10)


@pytest.fixture
def no_forced_switch() -> Iterator[None]:
    """No GIL switch the interpreter forces during the test: threads switch only where one lets go of the GIL."""
    with no_forced_gil_switch():
        yield


@pytest.fixture
def wake_ups(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The results of the handover calls whose worker woke the loop itself (it did not leave the result to a waiting
    loop's thread)."""
    woke: list[Any] = []
    wake = worker_threads_module._wake_loop

    def counted(awaiting: Any, ok: bool, value: Any) -> None:
        woke.append(value)
        wake(awaiting, ok, value)

    monkeypatch.setattr(worker_threads_module, "_wake_loop", counted)
    return woke


async def call_in_task(tg: Any, pool: WorkerThreads, handover: Handover, func: Any, out: list[Any]) -> None:
    """Start a task awaiting ``pool.run(func, handover=handover)`` into ``out`` (its value, or its exception's type)."""

    async def caller() -> None:
        try:
            out.append(await pool.run(func, handover=handover))
        except Exception as exc:
            out.append(type(exc))

    tg.start_soon(caller)
    await anyio.wait_all_tasks_blocked()  # its call is queued behind the busy one


@pytest.mark.usefixtures("no_forced_switch")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_that_ends_while_the_loop_waits_is_settled_on_the_loop_and_its_worker_does_not_wake_it(
        backend: str, pool: WorkerThreads, wake_ups: list[Any]) -> None:
    """The loop's thread waits, the call runs meanwhile on the worker, and its result reaches the caller through the loop's
    thread; a failing call's exception the same way."""
    handover = Handover()

    async def main() -> None:
        for func, expected in ((lambda: threading.current_thread().name, "handover-test_0"), (lambda: 1 // 0, ZeroDivisionError)):
            go = threading.Event()
            busy = pool.submit(go.wait, HANG_GUARD_S)
            out: list[Any] = []
            async with anyio.create_task_group() as tg:
                await call_in_task(tg, pool, handover, func, out)
                assert not handover.started
                go.set()  # the worker wants the GIL: it gets it once the loop's thread waits
                assert handover.wait(HANG_GUARD_S) is True
                assert handover.started and out == []  # settled; the caller resumes at its next step
            assert out == [expected] and busy.result(1) is True
        assert wake_ups == []

    anyio.run(main, backend=backend)


@pytest.mark.usefixtures("no_forced_switch")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_still_running_when_the_wait_ends_wakes_its_caller_itself(backend: str, pool: WorkerThreads,
                                                                         wake_ups: list[Any]) -> None:
    """A wait that ends on its bound takes nothing: the worker wakes the loop once the call ends, as without a handover."""
    handover = Handover()
    release = threading.Event()

    def slow() -> str:
        release.wait(HANG_GUARD_S)
        return "done"

    async def main() -> None:
        out: list[Any] = []
        async with anyio.create_task_group() as tg:
            go = threading.Event()
            busy = pool.submit(go.wait, HANG_GUARD_S)
            await call_in_task(tg, pool, handover, slow, out)
            go.set()
            assert handover.wait(0.001) is False  # the call cannot end before release
            release.set()
        assert out == ["done"] and busy.result(1) is True
        assert wake_ups == ["done"]
        assert handover.wait(HANG_GUARD_S) is False  # nothing runs: at once

    try:
        anyio.run(main, backend=backend)
    finally:
        release.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_handover_serves_one_call_at_a_time_and_a_call_abandoned_while_queued_never_runs(
        backend: str, pool: WorkerThreads) -> None:
    """A second call with a busy handover is refused before anything is queued; the handover is free again once its call
    was dropped (abandoned while queued), and that call never ran."""
    handover = Handover()
    go = threading.Event()
    ran: list[str] = []

    async def main() -> None:
        busy = pool.submit(go.wait, HANG_GUARD_S)
        async with anyio.create_task_group() as tg:
            await call_in_task(tg, pool, handover, lambda: ran.append("abandoned"), [])
            with pytest.raises(RuntimeError, match="one call at a time"):
                await pool.run(ran.append, "second", handover=handover)
            tg.cancel_scope.cancel()
        go.set()
        assert busy.result(HANG_GUARD_S) is True
        assert await pool.run(lambda: ran.append("after") or "free again", handover=handover) == "free again"
        assert ran == ["after"]

    try:
        anyio.run(main, backend=backend)
    finally:
        go.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_handover_call_queued_at_shutdown_is_dropped_and_its_caller_cancelled(backend: str) -> None:
    """Shutdown drops a queued handover call as any queued call: never run, its caller gets a cancellation."""
    pool = WorkerThreads(1, "handover-shutdown-test")
    handover = Handover()
    go = threading.Event()
    ran: list[str] = []
    outcome: list[str] = []

    async def caller() -> None:
        try:
            await pool.run(ran.append, "queued", handover=handover)
        except BaseException as exc:  # the cancellation of the waiter (not of a scope): seen, then swallowed
            outcome.append(type(exc).__name__)

    started = threading.Event()

    async def main() -> None:
        busy = pool.submit(lambda: started.set() or go.wait(HANG_GUARD_S))
        await anyio.to_thread.run_sync(started.wait)  # running, not queued: the shutdown lets it finish
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await anyio.wait_all_tasks_blocked()
            pool.shutdown()
        go.set()
        assert busy.result(HANG_GUARD_S) is True
        with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
            await pool.run(ran.append, "late", handover=handover)
        assert handover.wait(HANG_GUARD_S) is False  # the refused call left it free

    try:
        anyio.run(main, backend=backend)
    finally:
        go.set()
    assert ran == [] and outcome == ["CancelledError"]
    for thread in pool.threads:
        thread.join(10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_handover_given_a_new_call_while_the_last_ones_wake_up_is_pending_settles_each_caller_with_its_own_call(
        backend: str, pool: WorkerThreads) -> None:
    """A caller abandons its running call; the call ends while the loop's thread is busy (its wake-up of the loop still
    pending), and the handover, free again, takes a new call in that same step: the pending wake-up settles nothing of
    the new call, whose caller gets its own result once it ran."""
    handover = Handover()
    a_runs, release_a, release_b = threading.Event(), threading.Event(), threading.Event()

    def call_a() -> str:
        a_runs.set()
        release_a.wait(HANG_GUARD_S)
        return "A"

    def call_b() -> str:
        release_b.wait(HANG_GUARD_S)
        return "B"

    async def main() -> None:
        out: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: pool.run(call_a, handover=handover))
            await anyio.to_thread.run_sync(a_runs.wait, HANG_GUARD_S)
            tg.cancel_scope.cancel()  # A's caller abandons its running call

        async def caller_b() -> None:
            release_a.set()
            # The loop's thread blocks until A ended: A's worker, finding no loop waiting, asked the loop to settle
            # A's caller. B is armed in this same step, before that wake-up runs.
            assert handover._ended.wait(HANG_GUARD_S)
            out.append(await pool.run(call_b, handover=handover))

        async with anyio.create_task_group() as tg:
            tg.start_soon(caller_b)
            await anyio.wait_all_tasks_blocked()
            assert out == []  # A's wake-up settled nothing of B's caller: B has not run
            release_b.set()
        assert out == ["B"]

    try:
        anyio.run(main, backend=backend)
    finally:
        release_a.set()
        release_b.set()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("with_handover", [False, True])
def test_a_call_raising_stop_iteration_or_a_futures_cancelled_error_reaches_its_caller_as_an_error(
        backend: str, pool: WorkerThreads, with_handover: bool) -> None:
    """``StopIteration``, which an asyncio future refuses, comes back as the cause of a RuntimeError (the caller would
    otherwise wait forever); ``concurrent.futures.CancelledError`` raised by the call is its error, not a cancellation of
    the caller; with or without a handover."""
    handover = Handover() if with_handover else None

    def stop() -> None:
        raise StopIteration("no more")

    def cancelled() -> None:
        raise concurrent.futures.CancelledError("the call's own")

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD_S):
            with pytest.raises(RuntimeError) as raised:
                await pool.run(stop, handover=handover)
            assert isinstance(raised.value.__cause__, StopIteration)
            with pytest.raises(concurrent.futures.CancelledError, match="the call's own"):
                await pool.run(cancelled, handover=handover)
            assert await pool.run(lambda: "still serving", handover=handover) == "still serving"

    anyio.run(main, backend=backend)
