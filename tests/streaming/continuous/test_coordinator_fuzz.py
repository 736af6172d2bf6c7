"""Strangers fuzz the coordinator's port while a continuous query runs on real Spark (local[2]).

A stranger process (``fuzz_child``) sends a recorded corpus (the issue's hellos, nesting,
oversized and slow hellos, idle connections, a flood beyond the unauthenticated cap, a wrong
proof followed by frames) plus seeded random bytes, all at once, while epochs commit. The query goes on, every epoch's output is
exact (each partition's rate values once, in order, epochs consecutive), and the driver's Python
allocations during the fuzz stay under :data:`MEMORY_BOUND` (tracemalloc's peak). The host loop's
lateness under the same fuzz is measured by ``bench/bench_coordinator_fuzz.py``, not here.
``AIODSTREAM_COORDINATOR_FUZZ=all`` runs both backends and three rounds.
"""

from __future__ import annotations

import os
import sys
import tracemalloc
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
import pytest

from streaming.continuous import Continuous, ContinuousExecution, ContinuousStream, MemorySink, RateSource, SparkTaskLauncher

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[3]
GUARD_S = 120
MEMORY_BOUND = 16 << 20
"""The driver's peak Python allocations while the corpus is sent (it pushes 32 MiB at the port)."""
FULL = os.environ.get("AIODSTREAM_COORDINATOR_FUZZ") == "all"
BACKENDS = ["asyncio", "trio"] if FULL else ["asyncio"]
ROUNDS = 3 if FULL else 1
OPTIONS = {"spark.network.auth.rpcTimeout": "1s", "spark.aiodstream.network.maxUnauthenticatedConnections": "8"}


def assert_exact(sink: MemorySink, partitions: int = 2) -> int:
    """Epochs are 0..n-1; each partition's values are p, p + n, ... once each, in epoch order; returns the rows."""
    epochs = sink.epochs()
    assert list(epochs) == list(range(len(epochs)))
    values: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for epoch in sorted(epochs):
        for row in epochs[epoch]:
            values[row.value % partitions].append(row.value)
    for p, seen in values.items():
        assert seen, f"partition {p} wrote nothing"
        assert seen == list(range(p, seen[-1] + 1, partitions)), f"partition {p} lost or repeated rows"
    return sum(len(v) for v in values.values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_strangers_fuzzing_the_port_change_nothing_in_a_running_query(spark_context: Any, backend: str) -> None:
    """The corpus at the coordinator while epochs commit: the query goes on, output exact, driver memory bounded."""
    sink = MemorySink()
    peaks: list[int] = []

    async def body() -> None:
        query = ContinuousExecution(ContinuousStream(RateSource(rowsPerSecond=200, numPartitions=2)).to(sink),
                                    Continuous(200), launcher=SparkTaskLauncher(lambda: spark_context), options=OPTIONS,
                                    name=f"fuzzed-{backend}")
        async with query:
            await query.start()
            await query.wait_for_epoch(0)  # both tasks are connected and an epoch went through
            assert query.coordinator_address is not None
            port = query.coordinator_address[1]
            for round_ in range(ROUNDS):
                committed = query.last_committed_epoch
                tracemalloc.start()
                try:
                    result = await anyio.run_process([sys.executable, "-m", "tests.streaming.continuous.fuzz_child",
                                                      str(port), str(25 + round_)], cwd=ROOT)
                    peaks.append(tracemalloc.get_traced_memory()[1])
                finally:
                    tracemalloc.stop()
                assert int(result.stdout) == 44  # every connection of the corpus was closed by the driver
                await query.wait_for_epoch(committed + 3)  # epochs still commit after the fuzz
                assert query.is_active and query.exception() is None
            await query.stop(graceful=True)
        assert query.exception() is None
        statistics = query.statistics()
        assert statistics.connections == 2  # only the two tasks were ever admitted
        refused = statistics.refused_connections
        # The corpus reached the door's refusals: bad hellos, and silent connections closed on their timeout or (the
        # oldest, once more than the cap wait) for a newer connection.
        assert "hello" in refused and refused.keys() & {"busy", "timeout"}
        assert sum(refused.values()) <= 44 * ROUNDS

    anyio.run(_guarded(body), backend=backend)
    rows = assert_exact(sink)
    assert rows > 0
    print(f"driver allocation peaks during the fuzz: {peaks} bytes")
    assert max(peaks) < MEMORY_BOUND, f"driver allocations peaked at {max(peaks)} bytes"


def _guarded(body: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    async def guarded() -> None:
        with anyio.fail_after(GUARD_S):
            await body()

    return guarded
