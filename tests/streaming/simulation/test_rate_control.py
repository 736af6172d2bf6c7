"""Rate control in simulations: a receiver's maxRate and Spark's backpressure, with the real PID rate controller."""

from __future__ import annotations

import json

import pytest

from scheduler import Minutes, PIDRateEstimator, Seconds
from streaming._cli import main
from streaming.simulation import (
    Backpressure,
    ConstantRate,
    Linear,
    ModelError,
    OutputModel,
    SimulationModel,
    model_from_mapping,
    simulate,
)

# 2000 records/s offered; a batch costs 100 ms + 0.6 ms per record, so one second of batch time
# handles 1500 records: without rate control the pipeline cannot keep up.
OVERLOADED = SimulationModel(Seconds(1), [OutputModel("write", Linear(100, 0.6))], input=ConstantRate(2000),
                             duration=Minutes(5), seed=3)


def test_without_rate_control_an_overloaded_pipeline_queues_batches() -> None:
    """The baseline: every batch takes all 2000 records and the scheduling delay grows by 300 ms a batch."""
    result = simulate(OVERLOADED)
    assert {b.num_records for b in result.batches} == {2000}
    assert not result.summary.stable
    assert result.source_backlog == 0 and result.final_rate is None


def test_max_rate_caps_each_batch_and_the_rest_waits_at_the_source() -> None:
    """maxRate 1200/s: 1200 records a batch, no queueing, and 800 a second pile up at the source."""
    result = simulate(OVERLOADED.evolve(max_rate=1200.0))
    assert {b.num_records for b in result.batches} == {1200}
    assert result.summary.stable
    assert result.source_backlog == 800 * 300
    assert result.final_rate == 1200.0
    assert "rate control: final rate 1,200 records/s; 240,000 records waiting at the source" in result.format()


def test_backpressure_settles_on_what_the_pipeline_can_process() -> None:
    """The PID controller brings the ingestion rate to the processing rate (1500/s): queueing stops, the source holds the rest."""
    result = simulate(OVERLOADED.evolve(backpressure=Backpressure()))
    records = [b.num_records for b in result.batches]
    assert records[:3] == [2000, 2000, 2000]  # before the first estimate (the first one only calibrates)
    assert result.final_rate == pytest.approx(1500, rel=0.01)
    assert all(abs(n - 1500) <= 15 for n in records[-60:])
    assert max(b.scheduling_delay.milliseconds for b in result.batches[-60:]) == 0  # type: ignore[union-attr]
    assert result.source_backlog == 2000 * 300 - sum(records)


def test_backpressure_rates_are_the_estimators_own() -> None:
    """The first rate published equals what Spark's PIDRateEstimator computes from the same batches."""
    result = simulate(OVERLOADED.evolve(backpressure=Backpressure(), batches=4))
    pid = PIDRateEstimator(1000, 1.0, 0.2, 0.0, 100.0)
    rates = []
    for info in result.batches:
        assert info.processing_end_time is not None and info.processing_delay is not None and info.scheduling_delay is not None
        rate = pid.compute(info.processing_end_time.milliseconds, info.num_records, info.processing_delay.milliseconds,
                           info.scheduling_delay.milliseconds)
        if rate is not None:
            rates.append(rate)
    assert rates and result.batches[3].num_records == min(2000 * 4 - sum(b.num_records for b in result.batches[:3]),
                                                          int(rates[0]))


def test_the_same_seed_gives_the_same_rates() -> None:
    """Rate control keeps the simulation deterministic."""
    model = OVERLOADED.evolve(backpressure=Backpressure(), duration=Minutes(1))
    assert [b.num_records for b in simulate(model).batches] == [b.num_records for b in simulate(model).batches]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"max_rate": 0}, "max_rate: must be greater than 0, got 0"),
        ({"backpressure": {"min_rate": 0}}, "backpressure.min_rate: must be greater than 0, got 0"),
        ({"backpressure": {"integral": -1}}, "backpressure.integral: must be at least 0, got -1"),
        ({"backpressure": {"kp": 1}}, "backpressure.kp"),
        ({"backpressure": 3}, "backpressure"),
    ],
)
def test_bad_rate_control_settings_name_the_field(data: dict[str, object], message: str) -> None:
    """Model files: max_rate and the [backpressure] table are checked, naming the field."""
    base = {"interval": "1s", "outputs": [{"kind": "constant", "value": "100ms"}]}
    with pytest.raises(ModelError, match=f"^{message}"):
        model_from_mapping({**base, **data})


def test_model_files_and_flags_turn_rate_control_on(capsys: pytest.CaptureFixture[str]) -> None:
    """[backpressure] and max_rate in a model file, --backpressure and --max-rate on the command line; JSON reports both."""
    model = model_from_mapping({"interval": "1s", "max_rate": 900, "backpressure": {"min_rate": 50, "initial_rate": 400},
                                "outputs": [{"kind": "constant", "value": "100ms"}]})
    assert model.max_rate == 900 and model.backpressure == Backpressure(min_rate=50, initial_rate=400)
    code = main(["simulate", "--interval", "1s", "--rate", "2000", "--op", "name=w,kind=linear,base=100ms,per_record=0.6",
                 "--duration", "2m", "--max-rate", "1200", "--backpressure", "--json", "--no-progress"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rate_control"]["final_rate"] <= 1200 and report["rate_control"]["source_backlog"] > 0
