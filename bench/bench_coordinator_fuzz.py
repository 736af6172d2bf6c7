"""How late a host's own task wakes while strangers fuzz a continuous query's coordinator port.

An asyncio host runs a ticker (5 ms sleeps, as ``bench_host_loop``) beside a continuous query on
an embedded local[2] Spark (rate 500 rows/s over 2 partitions, 200 ms epochs, memory sink). A
stranger process sends the corpus of ``tests/streaming/continuous/fuzz_child.py`` over and over
(malformed, oversized, slow and idle hellos, a flood beyond the unauthenticated cap, wrong
proofs, random bytes; 44 connections and 32 MiB per round). Phases: the query alone; the floor,
where the stranger fuzzes a decoy front door in another process (what the stranger's own CPU
costs this 2-core machine); the query's coordinator fuzzed (the difference to the floor is the
driver's cost); and once more under tracemalloc for the driver's peak Python allocations (its
lateness is not reported: tracing slows every allocation). Prints one JSON object: lateness p50,
p99 and max per phase, fuzz rounds, epochs committed, the peak, and the load average. Targets
(``bench_host_loop``'s): p99 <= 5 ms, max <= 20 ms.

Not part of the test suite. Run: ``python bench/bench_coordinator_fuzz.py [--seconds 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: the bench package beside the project's packages

from bench.bench_host_loop import percentile, ticker  # noqa: E402  (the same ticker and quantile as bench_host_loop's budget)

OPTIONS = {"spark.network.auth.rpcTimeout": "1s", "spark.aiodstream.network.maxUnauthenticatedConnections": "8"}


def summary(lateness_ms: list[float]) -> dict[str, Any]:
    return {"ticks": len(lateness_ms), "p50_ms": round(statistics.median(lateness_ms), 2),
            "p99_ms": round(percentile(lateness_ms, 0.99), 2), "max_ms": round(max(lateness_ms), 2)}


async def fuzz(port: int, stop: asyncio.Event) -> int:
    """Run the stranger's corpus against ``port`` until ``stop``; return the rounds."""
    rounds = 0
    while not stop.is_set():
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.streaming.continuous.fuzz_child", str(port), str(rounds),
            cwd=ROOT, stdout=asyncio.subprocess.DEVNULL)
        await child.wait()
        rounds += 1
    return rounds


async def decoy() -> None:
    """A front door like the coordinator's, in this (separate) process, until stdin closes; prints its port."""
    import anyio

    from streaming.network import FrontDoor, FrontDoorSettings, new_token

    door = FrontDoor(new_token(), {"task": {"partition": range(2), "attempt": range(1)}},
                     FrontDoorSettings(hello_timeout_s=1, max_unauthenticated=8), name="decoy")

    async def serve(admitted: Any) -> None:
        return None

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    print(listener.extra(anyio.abc.SocketAttribute.local_port), flush=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, door.handler(serve), tg)
        await anyio.to_thread.run_sync(sys.stdin.read)
        tg.cancel_scope.cancel()


async def fuzzed(port: int, seconds: float) -> tuple[list[float], int]:
    """Tick for ``seconds`` while the stranger fuzzes ``port``; the lateness and the rounds."""
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        fuzzing = tg.create_task(fuzz(port, stop))
        lateness = await ticker(seconds)
        stop.set()
    return lateness, fuzzing.result()


async def run(sc: Any, seconds: float) -> dict[str, Any]:
    from streaming.continuous import Continuous, ContinuousExecution, ContinuousStream, MemorySink, RateSource, SparkTaskLauncher

    query = ContinuousExecution(ContinuousStream(RateSource(rowsPerSecond=500, numPartitions=2)).to(MemorySink()),
                                Continuous(200), launcher=SparkTaskLauncher(lambda: sc), options=OPTIONS, name="fuzzed")
    out: dict[str, Any] = {}
    async with query:
        await query.start()
        await query.wait_for_epoch(2)  # warm: tasks connected, epochs committing
        before = query.last_committed_epoch
        out["query_alone"] = {**summary(await ticker(seconds)), "epochs": query.last_committed_epoch - before}
        assert query.coordinator_address is not None
        port = query.coordinator_address[1]
        decoy_process = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--decoy", cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        try:
            assert decoy_process.stdout is not None
            decoy_port = int(await decoy_process.stdout.readline())
            before = query.last_committed_epoch
            lateness, rounds = await fuzzed(decoy_port, seconds)
            out["floor_decoy_fuzzed"] = {**summary(lateness), "epochs": query.last_committed_epoch - before, "fuzz_rounds": rounds}
        finally:
            assert decoy_process.stdin is not None
            decoy_process.stdin.close()
            await decoy_process.wait()
        before = query.last_committed_epoch
        lateness, rounds = await fuzzed(port, seconds)
        out["query_while_fuzzed"] = {**summary(lateness), "epochs": query.last_committed_epoch - before,
                                     "fuzz_rounds": rounds, "targets": {"p99_ms": 5, "max_ms": 20}}
        tracemalloc.start()
        try:
            _, rounds = await fuzzed(port, seconds / 2)
            out["driver_peak_alloc_bytes_while_fuzzed"] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        out["query_active_after"] = query.is_active and query.exception() is None
        await query.stop(graceful=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each phase ticks")
    parser.add_argument("--decoy", action="store_true", help=argparse.SUPPRESS)  # internal: serve a decoy front door
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.decoy:
        import anyio

        anyio.run(decoy)
        return
    from streaming.spark import embedded_spark_context

    sc = embedded_spark_context({"spark.ui.enabled": "false"})
    sc.setLogLevel("ERROR")
    out: dict[str, Any] = {"load_average_before": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    out.update(asyncio.run(run(sc, args.seconds)))
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    sc.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
