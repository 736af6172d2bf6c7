"""WorkerThreads: blocking calls on a few threads, awaited from asyncio and trio tasks or through futures (no Spark needed)."""

from __future__ import annotations

import concurrent.futures
import functools
import gc
import threading
from typing import Any

import anyio
import pytest

from scheduler import WorkerThreads
from tests.anyio_support import HANG_GUARD_S, settle
from tests.crash import run_python

BACKENDS = ["asyncio", "trio"]


@pytest.fixture
def pool() -> Any:
    threads = WorkerThreads(1, "worker-test")
    yield threads
    threads.shutdown()
    for thread in threads.threads:
        thread.join(10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_result_and_exception_come_back(backend: str, pool: WorkerThreads) -> None:
    """A call's result is returned and its exception raised in the awaiting task, on the pool's named thread."""

    async def main() -> None:
        assert await pool.run(lambda: threading.current_thread().name) == "worker-test_0"
        assert await pool.run(lambda a, b: a + b, 2, 3, abandon_on_cancel=False) == 5

        def boom() -> None:
            raise ValueError("in the thread")

        with pytest.raises(ValueError, match="in the thread"):
            await pool.run(boom)
        with pytest.raises(ValueError, match="in the thread"):
            await pool.run(boom, abandon_on_cancel=False)

    anyio.run(main, backend=backend)


def test_calls_run_in_submission_order_on_size_threads() -> None:
    """Calls start in order; a thread starts only when a call finds none free, with its name; submit gives a concurrent
    future."""
    pool = WorkerThreads(2, "order-test")
    try:
        started: list[int] = []
        lock = threading.Lock()

        def work(n: int) -> str:
            with lock:
                started.append(n)
            return threading.current_thread().name

        names = {pool.submit(work, n).result(10) for n in range(20)}
        assert started == list(range(20))
        assert names == {"order-test_0"}  # one call at a time: the first thread is free for each next one
        assert [t.name for t in pool.threads] == ["order-test_0"]
        held = threading.Event()
        busy = pool.submit(held.wait, 10)
        assert pool.submit(work, 20).result(10) in {"order-test_0", "order-test_1"}  # one is busy: a second started
        held.set()
        assert busy.result(10) is True
        assert [t.name for t in pool.threads] == ["order-test_0", "order-test_1"]
        with pytest.raises(ZeroDivisionError):
            pool.submit(lambda: 1 // 0).result(10)
    finally:
        pool.shutdown()


@pytest.mark.parametrize("backend", BACKENDS)
def test_abandoning_stops_waiting_at_once(backend: str, pool: WorkerThreads) -> None:
    """Cancelled with abandon_on_cancel: the waiter leaves while the call still runs in its thread."""
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def work() -> None:
        started.set()
        release.wait(30)
        finished.append(True)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.run, work)
            await anyio.to_thread.run_sync(started.wait)
            tg.cancel_scope.cancel()
        assert finished == []  # left behind, still running

    try:
        anyio.run(main, backend=backend)
    finally:
        release.set()
    assert pool.submit(lambda: None).result(10) is None  # after the abandoned call
    assert finished == [True]


@pytest.mark.parametrize("backend", BACKENDS)
def test_abandoning_drops_a_call_still_queued(backend: str, pool: WorkerThreads) -> None:
    """A call abandoned before a thread took it never runs."""
    release = threading.Event()
    ran: list[str] = []
    running = pool.submit(release.wait, 30)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(pool.run, ran.append, "queued"))
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()

    try:
        anyio.run(main, backend=backend)
    finally:
        release.set()
    assert running.result(10) is True
    assert pool.submit(ran.append, "after").result(10) is None
    assert ran == ["after"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_abandoning_a_cancelled_waiter_waits_for_the_call(backend: str, pool: WorkerThreads) -> None:
    """Cancelled without abandon_on_cancel: the waiter returns only once the call ended, then sees the cancellation."""
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def work() -> str:
        started.set()
        release.wait(30)
        order.append("thread done")
        return "result"

    async def waiter(scope: anyio.CancelScope) -> None:
        with scope:
            try:
                assert await pool.run(work, abandon_on_cancel=False) == "result"
                order.append("returned")
                await anyio.sleep_forever()  # the pending cancellation lands here
            finally:
                order.append("waiter left")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()
            tg.start_soon(waiter, scope)
            await anyio.to_thread.run_sync(started.wait)
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            assert order == []  # still waiting for the thread
            release.set()

    anyio.run(main, backend=backend)
    assert order == ["thread done", "returned", "waiter left"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_shutdown_drops_queued_calls_lets_the_running_one_finish_and_refuses_more(backend: str) -> None:
    """After shutdown a queued call's waiter is cancelled (as ThreadPoolExecutor's cancel_futures), the running call
    finishes, the threads end, and new calls are refused."""
    pool = WorkerThreads(1, "shutdown-test")
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []
    running = pool.submit(lambda: (started.set(), release.wait(30), ran.append("running")))
    queued_future = pool.submit(ran.append, "queued future")
    outcome: list[str] = []

    async def queued() -> None:
        try:
            await pool.run(ran.append, "queued task")
        except BaseException as exc:  # the cancellation of the waiter (not of a scope): seen, then swallowed
            outcome.append(type(exc).__name__)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(queued)
            await anyio.to_thread.run_sync(started.wait)
            await anyio.wait_all_tasks_blocked()
            pool.shutdown()
        with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
            await pool.run(ran.append, "late")

    try:
        anyio.run(main, backend=backend)
    finally:
        release.set()
    assert outcome == ["CancelledError"]
    assert queued_future.cancelled()
    running.result(10)
    for thread in pool.threads:
        thread.join(10)
        assert not thread.is_alive()
    assert ran == ["running"]
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        pool.submit(ran.append, "late")


def test_a_pool_dropped_without_shutdown_ends_its_threads() -> None:
    """Once nothing holds a pool, its idle threads end (a finalizer asks them to)."""
    pool = WorkerThreads(2, "dropped-test")
    assert pool.submit(lambda: 1).result(10) == 1
    threads = pool.threads
    del pool
    gc.collect()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_huge_pool_starts_as_many_threads_as_calls_ever_ran_at_once(backend: str) -> None:
    """A size of a million (a huge ``concurrentJobs``) costs nothing up front: one call after another keeps to one
    thread (it is free again before its caller hears back), three calls at once start three, and no more after."""
    pool = WorkerThreads(1_000_000, "huge")

    async def main() -> None:
        for n in range(50):
            assert await pool.run(lambda n=n: n) == n
        assert pool.submit(lambda: 7).result(10) == 7
        assert len(pool.threads) == 1
        release = threading.Event()
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(functools.partial(pool.run, release.wait, 10))
            await settle()
            assert len(pool.threads) == 3
            release.set()
        for _ in range(50):
            await pool.run(lambda: None)
        assert [t.name for t in pool.threads] == ["huge_0", "huge_1", "huge_2"]

    try:
        anyio.run(main, backend=backend)
    finally:
        pool.shutdown()
        for thread in pool.threads:
            thread.join(10)
    assert not any(thread.is_alive() for thread in pool.threads)


def test_bad_sizes_are_refused() -> None:
    """The number of threads is a positive int."""
    for size in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="a worker pool needs a positive int of threads"):
            WorkerThreads(size, "bad")  # type: ignore[arg-type]


def test_a_submitted_call_cancelled_before_it_runs_is_skipped(pool: WorkerThreads) -> None:
    """A concurrent future cancelled while queued never runs."""
    release = threading.Event()
    ran: list[str] = []
    running = pool.submit(release.wait, 30)
    queued = pool.submit(ran.append, "queued")
    assert queued.cancel()
    release.set()
    running.result(10)
    assert pool.submit(ran.append, "after").result(10) is None
    assert ran == ["after"]
    with pytest.raises(concurrent.futures.CancelledError):
        queued.result(0)


def test_shutdown_keeping_queued_calls_runs_them_first() -> None:
    """With drop_queued=False the calls queued before the shutdown still run (in order), then the threads end."""
    pool = WorkerThreads(1, "drain-test")
    release = threading.Event()
    ran: list[str] = []
    running = pool.submit(release.wait, 30)
    queued = pool.submit(ran.append, "queued")
    pool.shutdown(drop_queued=False)
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        pool.submit(ran.append, "late")
    release.set()
    assert running.result(10) is True
    assert queued.result(10) is None
    for thread in pool.threads:
        thread.join(10)
        assert not thread.is_alive()
    assert ran == ["queued"]


AT_EXIT_CHILD = """
import atexit, threading
from scheduler import WorkerThreads

pool = WorkerThreads(1, "exit-test")
pool.submit(print, "before exit").result()  # its thread runs when the main script ends
def stop_at_exit():  # an atexit handler's graceful stop: it still needs the pool
    print(pool.submit(lambda: "ran in an atexit handler").result())
    pool.shutdown()
atexit.register(stop_at_exit)

busy = WorkerThreads(1, "exit-busy")  # a pool nobody stops, fed for good by a daemon thread (a context left running)
def feed():
    while True:
        busy.submit(lambda: None).result()
threading.Thread(target=feed, daemon=True).start()
busy.submit(lambda: None).result()
"""


def test_at_interpreter_exit_a_pool_still_runs_calls_and_the_process_still_exits() -> None:
    """The interpreter's exit refused every later call ("cannot schedule new futures after shutdown"): an atexit handler's
    graceful stop lost its last batch. Later calls run on daemon threads, and a pool nobody stops does not hold the exit."""
    done = run_python(["-c", AT_EXIT_CHILD], timeout=HANG_GUARD_S)
    assert (done.returncode, done.stdout.splitlines(), done.stderr) == (0, ["before exit", "ran in an atexit handler"], "")


LATE_POOL_CHILD = """
import threading
exit_began = threading.Event()
threading._register_atexit(exit_began.set)  # registered before the pools' module is imported: called after its own

from scheduler import WorkerThreads

late_started = threading.Event()
def context_left_running():  # a context nobody stops makes a pool once the exit began (its first generation) and feeds it
    exit_began.wait()
    late = WorkerThreads(1, "made-late")
    late.submit(late_started.set).result()
    while True:
        late.submit(lambda: None).result()
threading.Thread(target=context_left_running, daemon=True).start()
# A thread the interpreter joins first (a job finishing its call), until the late pool's thread runs: the interpreter
# then looks for threads to join again, and finds that one.
threading.Thread(target=late_started.wait, args=(60,)).start()
"""


def test_a_pool_first_made_after_the_exit_began_does_not_hold_the_process() -> None:
    """Ctrl-C in a DStream program's ``awaitTermination`` left it running for good (lane L4): the context's generation
    pool, made at its first batch after the interpreter's exit began, started threads that were not daemons, and the
    interpreter waited for them while the context kept them busy. Such a pool now starts daemon threads."""
    done = run_python(["-c", LATE_POOL_CHILD], timeout=HANG_GUARD_S)
    assert (done.returncode, done.stderr) == (0, "")
