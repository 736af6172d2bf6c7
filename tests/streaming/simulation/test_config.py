"""TOML model files: every supported field, and errors that name the offending field."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler import Duration, Milliseconds, Minutes, Seconds
from streaming.simulation import (
    Backpressure,
    BurstRate,
    Constant,
    ConstantRate,
    Exponential,
    Linear,
    LogNormal,
    ModelError,
    Normal,
    OutputModel,
    SimulationModel,
    StepRate,
    Uniform,
    load_model,
    parse_duration,
    simulate,
)

FULL = """
interval = "2s"
concurrent_jobs = 3
duration = "1h"
seed = 11
rate_factor = 1.3

[input]
kind = "steps"
steps = [{at = 0, rate = 100}, {at = "10m", rate = 250.5}]

[[outputs]]
name = "c"
kind = "constant"
value = "300ms"

[[outputs]]
kind = "uniform"
low = 10
high = "0.5s"

[[outputs]]
name = "e"
kind = "exponential"
mean = "1.5s"

[[outputs]]
name = "n"
kind = "normal"
mean = "400ms"
stddev = "50ms"

[[outputs]]
name = "l"
kind = "lognormal"
median = "250ms"
sigma = 0.5

[[outputs]]
name = "lin"
kind = "linear"
base = "20ms"
per_record = 0.25
noise = { kind = "normal", mean = 0, stddev = "5ms" }
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model.toml"
    path.write_text(text)
    return path


def test_a_full_model_file_loads_every_field(tmp_path: Path) -> None:
    """Each key of the format lands in the model, durations in milliseconds."""
    model = load_model(_write(tmp_path, FULL))
    assert model == SimulationModel(
        batch_interval=Seconds(2),
        outputs=[
            OutputModel("c", Constant(300)),
            OutputModel("output-1", Uniform(10.0, 500.0)),
            OutputModel("e", Exponential(1500.0)),
            OutputModel("n", Normal(400.0, 50.0)),
            OutputModel("l", LogNormal(250.0, 0.5)),
            OutputModel("lin", Linear(20.0, 0.25, Normal(0.0, 5.0))),
        ],
        input=StepRate([(0, 100.0), (600_000, 250.5)]),
        concurrent_jobs=3,
        duration=Minutes(60),
        seed=11,
        rate_factor=1.3,
    )


def test_bursts_and_constant_inputs_load(tmp_path: Path) -> None:
    """The bursts and constant input kinds take their parameters."""
    base = 'interval = "1s"\n[[outputs]]\nkind = "constant"\nvalue = 1\n'
    bursts_input = '[input]\nkind = "bursts"\nrate = 10\nburst_rate = 90\nevery = "1m"\nlength = "5s"\nfirst = "30s"\n'
    bursts = load_model(_write(tmp_path, base + bursts_input))
    assert bursts.input == BurstRate(10.0, 90.0, 60_000, 5_000, 30_000)
    constant = load_model(_write(tmp_path, "batches = 7\n" + base + "[input]\nrate = 12\n"))
    assert (constant.input, constant.num_batches) == (ConstantRate(12.0), 7)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('interval = "1s"\n[[outputs]]\nkind = "exponential"\nmean = "-3ms"\n',
         "outputs[0].mean: must not be negative, got '-3ms'"),
        ('interval = "1s"\n[[outputs]]\nkind = "exponential"\nmean = "0ms"\n',
         "outputs[0].mean: must be greater than 0, got 0.0"),
        ('interval = "1s"\n[[outputs]]\nkind = "constant"\nvalue = 1\n[[outputs]]\nkind = "gaussian"\n',
         "outputs[1].kind: unknown processing model 'gaussian'; expected one of: constant, uniform, exponential, "
         "normal, lognormal, linear"),
        ('interval = "1s"\n[[outputs]]\nkind = "normal"\nmean = "1s"\n',
         "outputs[0].stddev: is required"),
        ('interval = "1s"\n[[outputs]]\nkind = "uniform"\nlow = "3s"\nhigh = "1s"\n',
         "outputs[0].high: must not be below low (3000 ms), got 1000 ms"),
        ('interval = "1s"\n[[outputs]]\nkind = "linear"\nper_record = "1ms"\nnoise = {kind = "normal", mean = 0}\n',
         "outputs[0].noise.stddev: is required"),
        ('interval = "1s"\n[[outputs]]\nkind = "constant"\nvalue = 1\nmean = 3\n',
         "outputs[0].mean: unknown field; expected one of: kind, value"),
        ('interval = "1.5ms"\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "interval: must be a whole number of milliseconds, got '1.5ms' (1.5 ms)"),
        ('interval = "soon"\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "interval: must be a duration such as \"500ms\", \"2s\", \"5m\" or \"1h\", or an unquoted number of milliseconds, got 'soon'"),
        ('interval = "1000"\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "interval: must be a duration such as \"500ms\", \"2s\", \"5m\" or \"1h\", or an unquoted number of milliseconds, got '1000'"),
        ('[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "interval: is required (the batch interval, e.g. \"1s\")"),
        ('interval = "1s"\n',
         "outputs: is required: at least one [[outputs]] table with a processing model"),
        ('interval = "1s"\nconcurrent_jobs = 0\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "concurrent_jobs: must be at least 1, got 0"),
        ('interval = "1s"\nsequential_batches = 1\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "sequential_batches: must be true or false, got 1"),
        ('interval = "1s"\nbatches = 2.5\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "batches: must be a whole number, got 2.5"),
        ('interval = "1s"\nduration = "500ms"\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "duration: must cover at least one batch interval (1000 ms), got 500 ms"),
        ('interval = "1s"\nintervall = 3\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "intervall: unknown field; expected one of: interval, concurrent_jobs, sequential_batches, duration, batches, seed, "
         "rate_factor, max_rate, backpressure, input, inputs, outputs, trace, cluster, costs, failures"),
        ('interval = "1s"\n[input]\nkind = "steps"\nsteps = [{at = "0s", rate = 1}, {at = "0s", rate = 2}]\n'
         '[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "input.steps[1].at: steps must be in increasing time order, got 0 ms after 0 ms"),
        ('interval = "1s"\n[input]\nkind = "steps"\nsteps = [{at = "1s", rate = 1}]\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "input.steps[0].at: the first step must start at 0, got 1000 ms"),
        ('interval = "1s"\n[input]\nkind = "bursts"\nrate = 1\nburst_rate = 2\nevery = "1s"\nlength = "2s"\n'
         '[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "input.length: must not exceed every (1000 ms), got 2000 ms"),
        ('interval = "1s"\n[input]\nkind = "poisson"\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "input.kind: unknown input model 'poisson'; expected one of: constant, steps, bursts, trace"),
        ('interval = "1s"\n[input]\nrate = "fast"\n[[outputs]]\nkind = "constant"\nvalue = 3\n',
         "input.rate: must be a number, got 'fast'"),
        ('interval = "1s"\n[trace]\npath = "missing.jsonl"\n',
         "trace.path: no such trace file: {tmp}/missing.jsonl"),
    ],
)
def test_bad_model_files_name_the_field(tmp_path: Path, text: str, message: str) -> None:
    """Each mistake is reported with the path of the field that holds it."""
    with pytest.raises(ModelError) as info:
        load_model(_write(tmp_path, text))
    assert str(info.value) == message.format(tmp=tmp_path)


def test_invalid_toml_is_reported_as_such(tmp_path: Path) -> None:
    """A syntax error says the file is not valid TOML, with TOML's own location."""
    with pytest.raises(ModelError, match=r"^not valid TOML: .*\(at line 1, column 13\)$"):
        load_model(_write(tmp_path, "interval = 1s\n"))


@pytest.mark.parametrize(("content", "message"), [
    pytest.param(b"a = " + b"[" * 100_000, "not valid TOML: arrays or tables nested too deeply to read", id="deep"),
    pytest.param(b'interval = "1s"\n\xff\xfe', "not valid TOML: not UTF-8 text: invalid start byte (at line 2)", id="binary"),
    pytest.param(b"seed = " + b"9" * 5000, "not valid TOML: Exceeds the limit (4300 digits) for integer string conversion: "
                 "value has 5000 digits", id="bigint"),
])
def test_a_model_file_its_parser_cannot_read_is_a_model_error(tmp_path: Path, content: bytes, message: str) -> None:
    """Nesting too deep, bytes that are not UTF-8 or a number too long: ModelError, not the parser's own crash."""
    path = tmp_path / "model.toml"
    path.write_bytes(content)
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert str(info.value) == message


def test_model_errors_are_value_errors() -> None:
    """ModelError is caught by ``except ValueError`` and carries the field separately."""
    err = ModelError("outputs[2].mean", "must be positive")
    assert isinstance(err, ValueError) and err.field == "outputs[2].mean"


@pytest.mark.parametrize(
    ("text", "ms"),
    [("250ms", 250.0), ("1.5s", 1500.0), ("2m", 120_000.0), ("2min", 120_000.0), ("1h", 3_600_000.0), (40, 40.0), (0.5, 0.5)],
)
def test_durations_accept_units_and_plain_milliseconds(text: object, ms: float) -> None:
    """Durations are strings with ms, s, m/min or h, or numbers of milliseconds."""
    assert parse_duration(text, "x") == ms


def test_models_validate_in_python_too() -> None:
    """Building a model in code checks the same rules and names the parameter."""
    with pytest.raises(ModelError, match=r"^mean: must be greater than 0, got -1$"):
        Exponential(-1)
    with pytest.raises(ModelError, match=r"^outputs: must hold at least one output operation$"):
        SimulationModel(Seconds(1), [])
    with pytest.raises(ModelError, match=r"^interval: must be a positive duration, got Duration\(0\); pass e.g. Seconds\(1\)$"):
        SimulationModel(Duration(0), [OutputModel("a", Constant(1))])
    assert SimulationModel(Milliseconds(300), [OutputModel("a", Constant(1))], duration=Seconds(1)).num_batches == 3


CLUSTER_FILE = """
interval = "500ms"
batches = 10
concurrent_jobs = 2

[[inputs]]
name = "clicks"
rate = 500
max_rate = 300
[inputs.backpressure]
min_rate = 50

[[inputs]]
kind = "steps"
steps = [{ at = 0, rate = 100 }, { at = "2s", rate = 400 }]

[[outputs]]
name = "word-count"
stages = [{ tasks = 2, kind = "constant", value = "80ms" }, { tasks = 1, kind = "exponential", mean = "30ms" }]
overhead = { kind = "constant", value = "20ms" }

[cluster]
executors = 2
cores = 1
scheduling_mode = "fair"
stage_overhead = "5ms"
driver_threads = 1

[costs]
checkpoint = { kind = "constant", value = "40ms" }
checkpoint_mode = "async"
listener_capacity = 100

[failures]
job_failure_probability = 0.01
downtime = "3s"
"""


def test_a_model_file_describes_the_cluster_inputs_costs_and_failures(tmp_path: Path) -> None:
    """Every new table and key maps onto its model class."""
    from streaming.simulation import ClusterModel, Costs, Failures, InputModel, Stage

    path = tmp_path / "m.toml"
    path.write_text(CLUSTER_FILE)
    model = load_model(path)
    assert model.cluster == ClusterModel(2, 1, "FAIR", stage_overhead_ms=5, driver_threads=1)
    assert model.inputs == (
        InputModel(ConstantRate(500), name="clicks", max_rate=300, backpressure=Backpressure(min_rate=50)),
        InputModel(StepRate([(0, 100), (2000, 400)])),
    )
    out = model.outputs[0]
    assert out.stages == (Stage(2, Constant(80)), Stage(1, Exponential(30)))
    assert out.overhead == Constant(20)
    assert model.costs == Costs(checkpoint=Constant(40), checkpoint_mode="async", listener_capacity=100)
    assert model.failures == Failures(0.01, 3000)
    result = simulate(model)
    assert len(result.batches) == 10 and result.cluster is not None


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        (('scheduling_mode = "fair"', 'scheduling_mode = "lottery"'), "cluster.scheduling_mode"),
        (("cores = 1", "cores = 1\nspeed = 2"), "cluster.speed"),
        (('kind = "steps"', 'kind = "waves"'), "inputs[1].kind"),
        (("min_rate = 50", "min_rate = -1"), "inputs[0].backpressure.min_rate"),
        (('{ tasks = 1, kind = "exponential", mean = "30ms" }', '{ tasks = 1, kind = "gamma" }'),
         "outputs[0].stages[1].kind"),
        (('{ tasks = 2, kind', '{ tasks = 0, kind'), "outputs[0].stages[0].tasks"),
        (('overhead = { kind = "constant", value = "20ms" }', 'overhead = { kind = "constant" }'),
         "outputs[0].overhead.value"),
        (('checkpoint_mode = "async"', 'checkpoint_mode = "later"'), "costs.checkpoint_mode"),
        (('checkpoint = { kind = "constant", value = "40ms" }', 'checkpoint = { kind = "constant", value = "x" }'),
         "costs.checkpoint.value"),
        (("job_failure_probability = 0.01", "job_failure_probability = 1.5"), "failures.job_failure_probability"),
        (('downtime = "3s"', 'downtime = "soon"'), "failures.downtime"),
    ],
)
def test_the_new_tables_name_the_offending_field(tmp_path: Path, patch: tuple[str, str], field: str) -> None:
    """A wrong value anywhere in the new tables is reported with its path in the file."""
    old, new = patch
    assert old in CLUSTER_FILE
    path = tmp_path / "m.toml"
    path.write_text(CLUSTER_FILE.replace(old, new, 1))
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert info.value.field == field
