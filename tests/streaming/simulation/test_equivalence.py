"""A simulated run and a real run of the runtime on the ManualClock produce identical BatchInfos."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import anyio
import attrs
import pytest
import trio.testing

from listeners import BatchInfo, EventRecorder
from scheduler import ManualClock, Milliseconds, Seconds
from streaming import Batch, Pipeline, StreamingRuntime
from streaming.simulation import (
    Constant,
    ConstantRate,
    OutputModel,
    SimulationModel,
    TraceRecorder,
    model_from_trace,
    read_trace,
    simulate,
)


def _without_names(batches: Sequence[BatchInfo]) -> list[BatchInfo]:
    # A Pipeline names its output operations after their call site; the simulator after the
    # model. Everything else must match exactly.
    return [
        attrs.evolve(
            b,
            output_operation_infos={
                i: attrs.evolve(op, name="", description="") for i, op in b.output_operation_infos.items()
            },
        )
        for b in batches
    ]


def _real_run(
    durations_ms: Sequence[int], interval_ms: int, concurrent_jobs: int, batches: int, rate: int, listeners: Sequence[object] = ()
) -> list[BatchInfo]:
    """The runtime with a plain Pipeline whose async outputs sleep on a ManualClock moved by hand."""

    async def main() -> list[BatchInfo]:
        clock = ManualClock(0)
        pipeline = Pipeline()

        def source(t: object) -> range:
            end = t.milliseconds  # type: ignore[attr-defined]
            return range(math.floor(rate * end / 1000) - math.floor(rate * (end - interval_ms) / 1000))

        pipeline.add_source(source, name="input")
        for i, d in enumerate(durations_ms):

            async def output(batch: Batch, d: int = d) -> None:
                await clock.sleep(Milliseconds(d))

            pipeline.add_output(output, name=f"op{i}")
        recorder = EventRecorder()
        async with StreamingRuntime(
            pipeline, Milliseconds(interval_ms), clock=clock, concurrent_jobs=concurrent_jobs,
            graceful_stop_timeout=Seconds(10**9),
        ) as rt:
            rt.add_listener(recorder)
            for listener in listeners:
                # On the loop: the clock below moves once every task is parked, which a callback
                # on a thread would not hold back.
                rt.add_listener(listener, on_loop=True)
            await rt.start()
            stopped = anyio.Event()

            async def stop() -> None:
                await rt.stop(graceful=True)
                stopped.set()

            async with anyio.create_task_group() as tg:
                stopping = batches == 1
                if stopping:
                    tg.start_soon(stop)
                while not stopped.is_set():
                    # Move the clock by hand from deadline to deadline, each time once every
                    # task is parked (trio's own primitive, exact).
                    await trio.testing.wait_all_tasks_blocked()
                    if stopped.is_set():
                        break
                    if not stopping and clock.now().milliseconds >= (batches - 1) * interval_ms:
                        stopping = True  # the timer waits for the last tick; a graceful stop lets it fire
                        tg.start_soon(stop)
                        continue
                    deadline = clock.next_deadline
                    assert deadline is not None
                    clock.set_time(deadline)
        return recorder.completed_batches

    return anyio.run(main, backend="trio")


CASES = [
    pytest.param([300, 200], 1000, 1, 12, 7, id="stable-two-ops"),
    pytest.param([700, 600], 1000, 1, 10, 3, id="overloaded-backlog"),
    pytest.param([900, 800, 50], 1000, 2, 15, 11, id="two-concurrent-jobs"),
    pytest.param([1000], 1000, 1, 6, 0, id="service-equals-interval"),
    pytest.param([0, 250], 500, 3, 8, 5, id="zero-duration-job"),
]


@pytest.mark.parametrize(("durations", "interval", "concurrency", "batches", "rate"), CASES)
def test_simulated_run_matches_real_run(durations: list[int], interval: int, concurrency: int, batches: int, rate: int) -> None:
    """The simulator's BatchInfo sequence equals a hand-driven ManualClock run's, field for field."""
    model = SimulationModel(
        Milliseconds(interval),
        [OutputModel(f"op{i}", Constant(d)) for i, d in enumerate(durations)],
        input=ConstantRate(rate),
        concurrent_jobs=concurrency,
        batches=batches,
    )
    real = _real_run(durations, interval, concurrency, batches, rate)
    simulated = simulate(model).batches
    assert len(real) == batches
    assert _without_names(simulated) == _without_names(sorted(real, key=lambda b: b.batch_time))


def test_a_recorded_real_run_replays_to_the_same_batches(tmp_path: Path) -> None:
    """A real run recorded with TraceRecorder and replayed by the simulator gives its BatchInfos back."""
    with TraceRecorder(tmp_path / "real.jsonl", batch_interval=Milliseconds(1000), concurrent_jobs=2) as recorder:
        real = _real_run([900, 800, 50], 1000, 2, 15, 11, listeners=[recorder])
    replayed = simulate(model_from_trace(read_trace(tmp_path / "real.jsonl"))).batches
    assert _without_names(replayed) == _without_names(sorted(real, key=lambda b: b.batch_time))
