"""The engine's own cost: batches per second on the manual clock, and events per second through the bus.

Jobs are no-op ``async def`` functions, so what is measured is the runtime itself: the timer,
the JobGenerator, the JobScheduler's workers, BatchInfo snapshots and listener dispatch.
Prints one JSON object. Targets (issue 2): >= 20,000 batches/s, >= 200,000 events/s.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from typing import Any

import anyio

from listeners import BatchCompleted, OverflowPolicy, StreamingListener, StreamingListenerBus
from scheduler import ManualClock, Seconds
from streaming import Batch, Pipeline, StreamingRuntime


class CountCompleted(StreamingListener):
    """Counts completed batches (the typical monitoring listener)."""

    def __init__(self) -> None:
        self.count = 0

    def on_batch_completed(self, event: BatchCompleted) -> None:
        self.count += 1


class CountEverything:
    """Receives every event (as a recording or exporting listener would)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, event: object) -> None:
        self.count += 1


# The same listeners declared quick enough for the event loop: their plain callbacks run inline
# on the listener's task instead of on its worker thread (engines before listener threads
# ignore the attribute and run every plain callback inline).
class CountCompletedOnLoop(CountCompleted):
    run_on_loop = True


class CountEverythingOnLoop(CountEverything):
    run_on_loop = True


LISTENERS: dict[str, Any] = {
    "completed": CountCompleted, "all": CountEverything,
    "completed_on_loop": CountCompletedOnLoop, "all_on_loop": CountEverythingOnLoop,
}


async def engine_run(batches: int, listener: str, outputs: int, concurrent_jobs: int) -> tuple[float, float]:
    """Run ``batches`` batches as fast as the engine goes; return batches per wall second and per CPU second."""
    clock = ManualClock(0)
    pipeline = Pipeline()

    async def noop(batch: Batch) -> None:
        return None

    for _ in range(outputs):
        pipeline.add_output(noop)
    async with StreamingRuntime(pipeline, Seconds(1), clock=clock, concurrent_jobs=concurrent_jobs,
                                listener_overflow=OverflowPolicy.BLOCK) as rt:
        if listener != "none":
            rt.add_listener(LISTENERS[listener]())
        await rt.start()
        started, cpu_started = time.perf_counter(), time.process_time()
        # One jump of the clock: the timer fires every missed tick back to back, so this measures
        # the engine at full speed, not the pacing of the grid.
        clock.advance(Seconds(batches))
        await rt.wait_until_idle()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        stats = rt.scheduler.statistics()
        assert stats.batches_completed == batches, stats
        await rt.stop()
    return batches / elapsed, batches / cpu


async def bus_run(events: int, listener_kind: str = "all") -> tuple[float, float]:
    """Post ``events`` events to one listener (BLOCK policy: none dropped); return events per wall and per CPU second."""
    bus = StreamingListenerBus(capacity=10_000, overflow=OverflowPolicy.BLOCK)
    listener = LISTENERS[listener_kind]()
    bus.add_listener(listener)
    event = BatchCompleted(None)  # type: ignore[arg-type]  # the payload is irrelevant to the bus
    async with anyio.create_task_group() as tg:
        await tg.start(bus.run)
        started, cpu_started = time.perf_counter(), time.process_time()
        for _ in range(events):
            await bus.post(event)
        await bus.wait_delivered()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        bus.close()
    assert listener.count == events and bus.statistics().dropped == 0
    return events / elapsed, events / cpu


def measure(fn: Any, repeats: int) -> dict[str, float]:
    """Median and best of ``repeats`` runs, by wall time and by this process's CPU time.

    The CPU figure is what the engine costs; the wall figure also shows what else the machine
    was doing.
    """
    runs = [fn() for _ in range(repeats)]
    wall = [r[0] for r in runs]
    cpu = [r[1] for r in runs]
    return {
        "wall_median": round(statistics.median(wall)),
        "wall_best": round(max(wall)),
        "cpu_median": round(statistics.median(cpu)),
        "runs": repeats,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"python": sys.version.split()[0]}
    for name, listener, outputs, cj in (
        ("engine_batches_per_s_no_listener", "none", 1, 1),
        ("engine_batches_per_s_completed_listener", "completed", 1, 1),
        ("engine_batches_per_s_completed_listener_on_loop", "completed_on_loop", 1, 1),
        ("engine_batches_per_s_all_events_listener", "all", 1, 1),
        ("engine_batches_per_s_all_events_listener_on_loop", "all_on_loop", 1, 1),
        ("engine_batches_per_s_two_outputs_completed_listener", "completed", 2, 1),
        ("engine_batches_per_s_two_outputs_concurrent2", "completed", 2, 2),
    ):
        result[name] = measure(functools.partial(anyio.run, engine_run, args.batches, listener, outputs, cj), args.repeats)
    result["bus_events_per_s"] = measure(lambda: anyio.run(bus_run, args.events), args.repeats)
    result["bus_events_per_s_on_loop"] = measure(lambda: anyio.run(bus_run, args.events, "all_on_loop"), args.repeats)
    result["targets"] = {"engine_batches_per_s": 20_000, "bus_events_per_s": 200_000}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
