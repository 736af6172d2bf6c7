"""StreamingRuntime on the trio backend."""

from __future__ import annotations

import anyio

from scheduler import ManualClock, Seconds
from streaming import StreamingRuntime
from tests.streaming.test_runtime import one_output_pipeline


def test_runs_under_trio() -> None:
    """The runtime runs unchanged on trio."""
    sink: list[int] = []

    async def main() -> None:
        clock = ManualClock()
        async with StreamingRuntime(one_output_pipeline(sink), Seconds(1), clock=clock) as rt:
            await rt.start()
            clock.advance(Seconds(3))
            await rt.wait_until_idle()
            await rt.stop()

    anyio.run(main, backend="trio")
    assert sink == [1000, 2000, 3000]
