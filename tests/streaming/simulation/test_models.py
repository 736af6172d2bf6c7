"""Processing-time and input-rate models: exact record counts, seeded draws, whole milliseconds."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import Duration, JobFailedError, Milliseconds, Seconds, Time
from streaming.simulation import (
    MAX_BATCHES,
    BatchContext,
    BurstRate,
    Constant,
    ConstantRate,
    FromFunction,
    Linear,
    ModelError,
    Normal,
    OutputModel,
    Replay,
    ReplayRate,
    SimulationModel,
    StepRate,
    simulate,
)
from tests.anyio_support import raises_exactly

CTX = BatchContext(0, Time(1000), Seconds(1), 10)


@given(rate=st.floats(min_value=0, max_value=1e5), interval=st.integers(min_value=1, max_value=10_000),
       batches=st.integers(min_value=1, max_value=50))
def test_batches_partition_the_input_exactly(rate: float, interval: int, batches: int) -> None:
    """Per-batch records sum to floor(cumulative(end)): no record is lost or counted twice to rounding."""
    model = SimulationModel(Duration(interval), [OutputModel("a", Constant(0))], input=ConstantRate(rate), batches=batches)
    per_batch = [model.records_between(k * interval, (k + 1) * interval) for k in range(batches)]
    assert all(n >= 0 for n in per_batch)
    assert sum(per_batch) == math.floor(ConstantRate(rate).cumulative(batches * interval))


def test_step_burst_and_replay_rates_integrate_their_shapes() -> None:
    """cumulative() is the integral of each rate shape."""
    steps = StepRate([(0, 10), (2000, 100)])
    assert [steps.cumulative(t) for t in (0, 1000, 2000, 3000)] == [0, 10, 20, 120]
    bursts = BurstRate(10, 110, every_ms=10_000, length_ms=1000, first_ms=5000)
    assert bursts.cumulative(5000) == 50 and bursts.cumulative(6000) == 160 and bursts.cumulative(16_000) == 360
    replay = ReplayRate(1000, [5, 0, 10])
    assert [replay.cumulative(t) for t in (500, 1000, 3000, 4000, 4500)] == [2.5, 5, 15, 20, 20]


def test_samples_are_whole_milliseconds_and_never_negative() -> None:
    """Draws are rounded to the millisecond and clamped at zero."""
    rng = random.Random(0)
    samples = [Normal(1, 50).sample(CTX, rng) for _ in range(200)]
    assert all(type(s) is int and s >= 0 for s in samples) and 0 in samples
    assert Linear(2.4, 0.25).sample(CTX, rng) == 5  # 2.4 + 0.25 * 10 = 4.9
    assert FromFunction(lambda batch, rng: Duration(batch.num_records * 3)).sample(CTX, rng) == 30


def test_replay_corrects_for_batch_size() -> None:
    """A replayed duration moves by per_record_ms for each record more or fewer than traced."""
    replay = Replay([100, 200], records=[10, 20], per_record_ms=2.0)
    assert replay.sample(CTX, random.Random()) == 100
    bigger = BatchContext(3, Time(4000), Seconds(1), 25)
    assert replay.sample(bigger, random.Random()) == 210  # index 3 -> durations[1]; 200 + 2 * (25 - 20)


def test_a_failing_model_stops_the_run_and_raises() -> None:
    """A processing-time model that raises ends the run with the failure (as a JobFailedError with the cause)."""

    def broken(batch: BatchContext, rng: random.Random) -> int:
        if batch.index == 3:
            raise RuntimeError("boom")
        return 10

    model = SimulationModel(Seconds(1), [OutputModel("a", FromFunction(broken))], batches=10)
    with raises_exactly(JobFailedError, "Error generating jobs for time 4000 ms: RuntimeError: boom") as info:
        simulate(model)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_model_field_errors_name_the_parameter() -> None:
    """Each model class validates its parameters with the parameter's name."""
    with pytest.raises(ModelError, match=r"^steps\[1\]\.rate: must be a finite number, got nan$"):
        StepRate([(0, 1), (5, float("nan"))])
    with pytest.raises(ModelError, match=r"^records: must be as long as durations \(2\), got 1$"):
        Replay([1, 2], records=[1])


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_model_that_fails_every_batch_stops_the_run_at_the_first(backend: str) -> None:
    """The run ends at the first failed batch, and its error is the one raised (a later batch's replaced it before)."""
    called: list[int] = []

    def broken(batch: BatchContext, rng: random.Random) -> float:
        called.append(batch.time.milliseconds)
        raise ValueError(f"model broken at batch {batch.index}")

    model = SimulationModel(Seconds(1), [OutputModel("a", FromFunction(broken))], batches=10)
    with pytest.raises(JobFailedError, match=r"^Error generating jobs for time 1000 ms: ValueError: model broken at batch 0$"):
        simulate(model, backend=backend)
    assert called == [1000]


@pytest.mark.parametrize(("fields", "field"), [({"batches": 10_000_001}, "batches"),
                                               ({"duration": Seconds(10**9)}, "duration")])
def test_a_run_beyond_max_batches_is_refused_before_it_starts(fields: dict[str, object], field: str) -> None:
    """A horizon that would take hours and gigabytes is refused naming the count, not run until memory runs out."""
    with pytest.raises(ModelError, match=rf"^{field}: asks for [0-9,]+ batches; a run simulates at most 10,000,000 "):
        SimulationModel(Milliseconds(100), [OutputModel("a", Constant(1))], **fields)  # type: ignore[arg-type]
    assert MAX_BATCHES == 10_000_000


@pytest.mark.parametrize("outputs", [None, OutputModel("a", Constant(1)), 5])
def test_outputs_that_are_not_a_list_are_a_model_error(outputs: object) -> None:
    """Not a bare TypeError from iterating them."""
    with pytest.raises(ModelError, match=r"^outputs: must be a list of OutputModel, got "):
        SimulationModel(Seconds(1), outputs, batches=3)  # type: ignore[arg-type]
