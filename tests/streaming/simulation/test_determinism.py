"""The same model and seed give identical event streams; different seeds give different work."""

from __future__ import annotations

import time

import anyio
import pytest

from scheduler import Seconds
from streaming.simulation import (
    ClusterModel,
    Constant,
    ConstantRate,
    Costs,
    Exponential,
    LogNormal,
    OutputModel,
    SimulationModel,
    SimulationResult,
    Stage,
    Uniform,
    simulate,
    simulate_async,
)


def _model(seed: int, concurrent_jobs: int = 2) -> SimulationModel:
    return SimulationModel(
        Seconds(1),
        [OutputModel("a", Exponential(600)), OutputModel("b", LogNormal(300, 0.6)), OutputModel("c", Uniform(0, 200))],
        input=ConstantRate(37.5),
        concurrent_jobs=concurrent_jobs,
        batches=150,
        seed=seed,
    )


def test_same_seed_gives_identical_event_streams() -> None:
    """Two runs of one model record the same events, in the same order, with the same times."""
    first = simulate(_model(7), record_events=True)
    second = simulate(_model(7), record_events=True)
    assert first.events is not None and len(first.events) > 150 * 8
    assert first.events == second.events
    assert first == second


def test_trio_gives_the_same_batches_as_asyncio() -> None:
    """On trio every BatchInfo is identical to asyncio's (trio only reorders events within an instant)."""
    assert simulate(_model(3), backend="trio").batches == simulate(_model(3)).batches


@pytest.mark.parametrize("mode", ["FIFO", "FAIR"])
def test_on_a_cluster_trio_gives_the_same_batches_as_asyncio_run_after_run(mode: str) -> None:
    """Jobs reaching the cluster at one instant start in their batch's and operation's order, whatever order their
    tasks ran in: trio, which shuffles tasks woken together, gives asyncio's batches every time (lane M3: each trio
    run differed, its processing p50 by a few milliseconds, as the jobs were numbered in the order their tasks ran)."""
    model = SimulationModel(
        Seconds(1),
        [OutputModel("a", stages=[Stage(4, LogNormal(80, 0.4))]), OutputModel("b", Exponential(150)),
         OutputModel("c", Exponential(100))],
        input=ConstantRate(400), concurrent_jobs=2, batches=120, seed=3, cluster=ClusterModel(1, 2, mode))
    expected = simulate(model).batches
    assert len(expected) == 120 and len({b.processing_delay for b in expected}) > 20
    for _ in range(4):
        assert simulate(model, backend="trio").batches == expected


def test_a_different_seed_draws_different_work() -> None:
    """Changing the seed changes the drawn processing times."""
    assert simulate(_model(1)).batches != simulate(_model(2)).batches


def test_concurrency_does_not_change_the_drawn_work() -> None:
    """Each batch's job durations are drawn at generation, so configurations share identical work."""

    def durations(concurrent_jobs: int) -> list[list[int]]:
        return [
            [op.duration.milliseconds for op in b.output_operation_infos.values()]  # type: ignore[union-attr]
            for b in simulate(_model(5, concurrent_jobs)).batches
        ]

    assert durations(1) == durations(3)


def test_a_simulation_in_the_callers_loop_matches_one_in_its_own() -> None:
    """simulate_async driven by its clock task gives the same events as simulate() on its self-driving loop."""

    async def main() -> SimulationResult:
        return await simulate_async(_model(4), record_events=True)

    own = simulate(_model(4), record_events=True)
    callers = anyio.run(main, backend="asyncio")
    assert callers.events == own.events
    assert callers.batches == own.batches


class _WorkingListener:
    """A plain listener whose callbacks take real time on its thread (as one that logs to a remote service would)."""

    def __init__(self) -> None:
        self.completed = 0

    def _work(self) -> None:
        time.sleep(0.002)  # work that takes real time, not a wait for anything: any length gives the same result

    def on_batch_submitted(self, event: object) -> None:
        self._work()

    def on_batch_started(self, event: object) -> None:
        self._work()

    def on_batch_completed(self, event: object) -> None:
        self._work()
        self.completed += 1


class _AwaitingListener:
    """An async listener that awaits real time (as one that writes to a socket would)."""

    def __init__(self) -> None:
        self.completed = 0

    async def on_batch_completed(self, event: object) -> None:
        await anyio.sleep(0.002)
        self.completed += 1


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", [_WorkingListener, _AwaitingListener])
def test_a_listener_that_takes_real_time_changes_nothing_in_virtual_time(backend: str, kind: type) -> None:
    """A caller's listener working on its thread or awaiting I/O holds the clock: the same batches as without it.

    Before, the clock jumped while the listener worked and the scheduler waited for room in its queue (BLOCK):
    batches were lost and delays came out in days.
    """
    model = SimulationModel(Seconds(1), [OutputModel("a", Constant(500)), OutputModel("b", Constant(300))], batches=40,
                            costs=Costs(listener_capacity=2))
    listener = kind()
    result = simulate(model, listeners=[listener], backend=backend)
    assert result.batches == simulate(model).batches
    assert len(result.batches) == 40 and listener.completed == 40
    assert result.summary.total_delay.max_ms == 800
