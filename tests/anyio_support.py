"""Helpers for tests that drive anyio code on both backends without real time passing."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from typing import Any, Awaitable, Callable, Iterator

import anyio
import anyio.lowlevel
import pytest

BACKENDS = ["asyncio", "trio"]
HANG_GUARD_S = 60  # real seconds; only trips if a test is broken (generous: a 300-batch test took over 5 s at load 16)


@contextlib.contextmanager
def no_forced_gil_switch() -> Iterator[None]:
    """No GIL switch the interpreter forces meanwhile: threads switch only where one lets go of the GIL (a blocking call)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(HANG_GUARD_S)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run(backend: str, body: Callable[[], Awaitable[None]]) -> None:
    """Run ``body`` on ``backend`` under a real-time hang guard."""

    async def guarded() -> None:
        with anyio.fail_after(HANG_GUARD_S):
            await body()

    anyio.run(guarded, backend=backend)


async def settle() -> None:
    """Return once every other task is blocked, i.e. everything runnable has run. No real time passes.

    ``anyio.wait_all_tasks_blocked()`` polls with real 0.1 s sleeps on asyncio; this yields to
    the loop instead, using the same test anyio does (a blocked task waits on an unfinished future),
    and also waits until the loop has no callback queued.
    On trio it is trio's own exact ``wait_all_tasks_blocked``.
    """
    try:
        this = asyncio.current_task()
    except RuntimeError:  # no asyncio loop running: trio
        this = None
    if this is None:
        import trio.testing

        await trio.testing.wait_all_tasks_blocked()
        return
    loop = asyncio.get_running_loop()
    while True:
        await anyio.lowlevel.checkpoint()
        # Callbacks still queued (anyio delivers a cancellation through them) may wake a task that seems blocked.
        if not loop._ready and all(task is this or _is_blocked(task) for task in asyncio.all_tasks()):  # type: ignore[attr-defined]
            return


def _is_blocked(task: asyncio.Task[Any]) -> bool:
    waiter = task._fut_waiter  # type: ignore[attr-defined]  # private, as in anyio's own helper
    return waiter is not None and not waiter.done()


def raises_exactly(exc_type: type[BaseException], message: str) -> Any:
    """pytest.raises whose message must equal ``message`` exactly (not merely contain it)."""
    return pytest.raises(exc_type, match=f"^{re.escape(message)}$")
