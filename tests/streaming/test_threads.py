"""wait_for_thread: how the event loop waits for work on the package's own threads (no Spark needed)."""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import pytest

from streaming.spark import wait_for_thread

BACKENDS = ["asyncio", "trio"]


@pytest.fixture
def executor() -> Any:
    pool = ThreadPoolExecutor(1, thread_name_prefix="wait-test")
    yield pool
    pool.shutdown(wait=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_result_and_exception_come_back(backend: str, executor: ThreadPoolExecutor) -> None:
    async def main() -> None:
        name = await wait_for_thread(executor.submit(lambda: threading.current_thread().name), abandon_on_cancel=True)
        assert name.startswith("wait-test")

        def boom() -> None:
            raise ValueError("in the thread")

        with pytest.raises(ValueError, match="in the thread"):
            await wait_for_thread(executor.submit(boom), abandon_on_cancel=False)

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_abandoning_stops_waiting_at_once(backend: str, executor: ThreadPoolExecutor) -> None:
    """Cancelled with abandon_on_cancel: the waiter leaves while the thread still runs."""
    release = threading.Event()
    running = executor.submit(release.wait, 30)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(wait_for_thread, running, abandon_on_cancel=True))
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        assert not running.done()  # left behind, still running

    try:
        anyio.run(main, backend=backend)
    finally:
        release.set()
    assert running.result() is True


@pytest.mark.parametrize("backend", BACKENDS)
def test_abandoning_drops_work_still_queued(backend: str, executor: ThreadPoolExecutor) -> None:
    """A job abandoned before a job thread took it never runs."""
    release = threading.Event()
    ran: list[str] = []
    running = executor.submit(release.wait, 30)
    queued = executor.submit(ran.append, "queued")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(wait_for_thread, queued, abandon_on_cancel=True))
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()

    try:
        anyio.run(main, backend=backend)
    finally:
        release.set()
    running.result()
    executor.shutdown(wait=True)
    assert queued.cancelled()
    assert ran == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_abandoning_a_cancelled_waiter_waits_for_the_thread(backend: str, executor: ThreadPoolExecutor) -> None:
    """Cancelled without abandon_on_cancel: the waiter returns only once the thread is done, then sees the cancellation."""
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
                await wait_for_thread(executor.submit(work), abandon_on_cancel=False)
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
