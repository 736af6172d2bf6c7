"""A receiver's rate limit on a manual clock: what a socket receiver stores per block interval at its rate
(``spark.streaming.receiver.maxRate``, ``spark.streaming.backpressure.initialRate``), and how a new rate applies at once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from tests.anyio_support import BACKENDS, settle


@pytest.mark.spark
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_large_read_is_stored_a_block_intervals_worth_at_a_time_and_a_new_rate_applies_at_once(
        spark_context: Any, backend: str, clock: ManualClock) -> None:
    """At 20/s (backpressure's initialRate) and 200 ms blocks: of 500 lines read at once, 4 are stored every 200 ms (20 a
    second, not all 500); a rate of 1000/s from backpressure reprices the 200 ms owed (4 records: 4 ms) and stores 200 at a time; nothing is
    lost or reordered."""
    from tests.streaming.test_spark_integration import spark_conf

    lines = [f"line-{i}" for i in range(500)]

    async def program() -> None:
        with spark_conf(spark_context, spark__streaming__backpressure__initialRate="20"):
            ssc = StreamingContext(spark_context, 1.0, clock=clock)
            stream = ssc.socketTextStream("127.0.0.1", 9)
        held: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(stream._store_many, lines)  # what the socket receiver does with one read's lines
            for _ in range(5):
                await clock.wait_for_sleepers(1)
                held.append(stream.held_records)
                clock.advance(200)
            await clock.wait_for_sleepers(1)
            assert held == [4, 8, 12, 16, 20] and stream.held_records == 24  # 1 s later: 20 more
            stream.update_rate(1000)
            await settle()
            assert clock.next_deadline is not None and clock.next_deadline.milliseconds == 1004
            clock.advance(4)
            await clock.wait_for_sleepers(1)
            assert stream.held_records == 224
            clock.advance(200)
            await clock.wait_for_sleepers(1)
            assert stream.held_records == 424
            clock.advance(200)
        assert stream._buffer.take_all() == lines

    anyio.run(program, backend=backend)
