"""Waits that last as long as a query or a wait runs take no token of the host's default thread limiter.

anyio's default limiter (40 tokens) is the host's: its own ``to_thread`` calls and, for example, a
web framework's synchronous handlers borrow from it. A running continuous query, an
``awaitAnyTermination`` and a UI page's Spark job lookup on a slow Spark once each held one of its
tokens for as long as they lasted, so 40 of them at once stalled every other thread call of the host.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from scheduler import ManualClock, Milliseconds
from streaming import ListSource, Pipeline, StreamingRuntime
from streaming.continuous import SparkTaskLauncher
from streaming.runtime import QueryRegistry
from streaming.ui import StreamingUI
from tests.streaming.ui.test_ui import fetch_json, run_batches
from tests.support import wait_until

pytestmark = pytest.mark.anyio


async def wait_in_thread(event: threading.Event) -> None:
    """Wait for ``event`` on a thread of a limiter of its own (the test's waits borrow no default token either)."""
    assert await anyio.to_thread.run_sync(event.wait, 30, limiter=anyio.CapacityLimiter(1)), "the worker never started"


def host_tokens_borrowed() -> float:
    return anyio.to_thread.current_default_thread_limiter().borrowed_tokens


async def test_a_running_continuous_spark_job_holds_no_token_of_the_hosts_limiter() -> None:
    launcher = SparkTaskLauncher(lambda: None)
    entered, release = threading.Event(), threading.Event()

    def job(specs: list[Any], group: str) -> None:  # the job of long-running tasks, as Spark runs it: until the query ends
        entered.set()
        release.wait(30)

    launcher._run_job = job  # type: ignore[method-assign]
    before = host_tokens_borrowed()
    async with anyio.create_task_group() as tg:
        tg.start_soon(launcher.run, [], "group")
        await wait_in_thread(entered)
        assert host_tokens_borrowed() == before
        release.set()


async def test_an_async_await_any_termination_holds_no_token_of_the_hosts_limiter() -> None:
    registry = QueryRegistry()
    results: list[bool] = []

    async def wait() -> None:
        results.append(await registry.wait_any_termination_async(None))

    before = host_tokens_borrowed()
    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await wait_until(lambda: bool(registry._lock._waiters))  # type: ignore[attr-defined]  # the thread waits on it
        assert host_tokens_borrowed() == before
        registry.terminated(object(), None)  # type: ignore[arg-type]
    assert results == [True]


async def test_ui_job_lookups_on_a_stuck_spark_take_one_thread_of_their_own(tmp_path: Path, clock: ManualClock) -> None:
    """Two pages at once whose Spark job lookup blocks: one lookup thread, no host token; both pages get the ids after."""
    ui = StreamingUI()
    p = Pipeline()
    p.add_source(ListSource([[1], [2]]), name="list")
    p.add_output(lambda batch: None, name="noop")
    entered, release = threading.Event(), threading.Event()
    running: list[int] = []

    def lookup(batch_ms: int, output_op_id: int) -> list[int]:
        running.append(batch_ms)
        entered.set()
        release.wait(30)
        return [7]

    async with anyio.create_task_group() as tg:
        async with StreamingRuntime(p, Milliseconds(100), clock=clock, checkpoint_location=tmp_path / "ck", name="slow") as rt:
            ui.attach(rt)
            url = await tg.start(ui.serve, "127.0.0.1", 0)
            await run_batches(rt, clock, 2, Milliseconds(100))
            ui.histories["slow"].spark_jobs = lookup
            api = url + "api/v1/contexts/slow/streaming/batches/"
            rows = await fetch_json(api)
            pages: list[Any] = []

            async def page(batch_id: int) -> None:
                pages.append(await fetch_json(api + f"{batch_id}/operations"))

            async with anyio.create_task_group() as pages_tg:
                before = host_tokens_borrowed()  # the two fetches' own threads (the test's client)
                for row in rows:
                    pages_tg.start_soon(page, row["batchId"])
                await wait_in_thread(entered)
                for _ in range(50):  # the second page reaches its lookup, which waits for the first one's thread
                    await anyio.lowlevel.checkpoint()
                assert len(running) == 1 and host_tokens_borrowed() == before + len(rows)
                release.set()
            assert [ops[0]["jobIds"] for ops in pages] == [[7], [7]] and len(running) == 2
            await rt.stop()
        tg.cancel_scope.cancel()
