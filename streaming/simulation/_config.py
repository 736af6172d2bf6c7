"""Model files: a small TOML format for :class:`SimulationModel`, with errors that name the field.

Example::

    interval = "1s"            # the batch interval
    concurrent_jobs = 1
    sequential_batches = false # true: each batch waits for the one before (a watermark or a state-store operator)
    duration = "1h"            # or: batches = 3600
    seed = 7
    rate_factor = 1.0          # 1.3 = 30 % more input
    max_rate = 5000            # optional: spark.streaming.receiver.maxRate, records per second

    [backpressure]             # optional: spark.streaming.backpressure.enabled, with the PID's terms
    min_rate = 100             # also: proportional, integral, derivative, initial_rate

    [input]
    kind = "constant"          # constant | steps | bursts | trace
    rate = 2000                # records per second

    [[outputs]]
    name = "save-to-db"
    kind = "exponential"       # constant | uniform | exponential | normal | lognormal | linear | trace
    mean = "400ms"

    [[outputs]]                # or a Spark job as stages of tasks (for the cluster model)
    name = "word-count"
    stages = [{ tasks = 2, kind = "lognormal", median = "80ms", sigma = 0.2 },
              { tasks = 2, kind = "constant", value = "50ms" }]
    overhead = { kind = "constant", value = "20ms" }   # optional: its driver time

    [cluster]                  # optional: the task slots the jobs share
    executors = 1
    cores = 2                  # slots per executor; also: cpus, scheduling_mode = "FAIR",
    task_overhead = "6ms"      #   stage_overhead, job_overhead, driver_threads, driver_on_cpus

    [costs]                    # optional: the engine's own time, each a processing model
    checkpoint = { kind = "constant", value = "40ms" }   # also: generation, commit, listener
    checkpoint_mode = "sync"   # or "async"; listener_capacity = 10000

    [failures]                 # optional
    job_failure_probability = 0.001
    downtime = "30s"

Several inputs replace ``[input]``, ``max_rate`` and ``[backpressure]`` with ``[[inputs]]``
tables, each with the ``[input]`` keys plus ``name``, ``max_rate`` and a ``backpressure`` table.

Durations are strings with a unit (``"250ms"``, ``"1.5s"``, ``"2m"``, ``"1h"``) or plain numbers
of milliseconds. A ``[trace]`` table (``path = "run.jsonl"``) starts from a recorded run instead;
the other keys then override what the trace says.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from scheduler import Duration

from ._cluster_model import ClusterModel
from ._cost_model import Costs
from ._failure_model import Failures
from ._input_model import Backpressure, InputModel
from ._input_rates import BurstRate, ConstantRate, InputRate, StepRate
from ._model_checks import ModelError, number_too_long
from ._output_model import OutputModel, Stage
from ._processing_times import Constant, Exponential, Linear, LogNormal, Normal, ProcessingTime, Uniform
from ._simulation_model import SimulationModel
from ._trace import model_from_trace, read_trace

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

__all__ = ["load_model", "model_from_mapping", "parse_duration", "processing_from_mapping", "read_toml", "whole_duration"]

_UNITS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "min": 60_000.0, "h": 3_600_000.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|min|m|h)\s*$")


def parse_duration(value: object, field: str) -> float:
    """Milliseconds from ``"250ms"``, ``"1.5s"``, ``"2m"``, ``"1h"`` or a plain number of milliseconds.

    Raises:
        ModelError: naming ``field``, for anything else or a negative value.
    """
    if isinstance(value, bool):
        raise ModelError(field, f"must be a duration such as \"500ms\" or \"2s\", got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0 or value != value or value in (float("inf"), float("-inf")):
            raise ModelError(field, f"must be a non-negative duration, got {value!r}")
        return float(value)
    if isinstance(value, str):
        if value.strip().startswith("-"):
            raise ModelError(field, f"must not be negative, got {value!r}")
        match = _DURATION.match(value)
        if match:
            return float(match.group(1)) * _UNITS[match.group(2)]
    raise ModelError(field, f"must be a duration such as \"500ms\", \"2s\", \"5m\" or \"1h\", or an unquoted number of "
                            f"milliseconds, got {value!r}")


def whole_duration(value: object, field: str, *, positive: bool = True) -> Duration:
    """``value`` (a duration string or milliseconds) as a whole, by default positive, Duration; errors name ``field``.

    Raises:
        ModelError: not a duration, not whole milliseconds, or not positive when it must be.
    """
    ms = parse_duration(value, field)
    if ms != int(ms):
        raise ModelError(field, f"must be a whole number of milliseconds, got {value!r} ({ms:g} ms)")
    if positive and ms <= 0:
        raise ModelError(field, f"must be positive, got {value!r}")
    return Duration(int(ms))


def _prefixed(exc: ModelError, prefix: str) -> ModelError:
    # Models name their own parameters ("mean"); the file's path to them ("outputs[1].") goes in front.
    if not prefix or exc.field.startswith(prefix):
        return exc
    return ModelError(f"{prefix}{exc.field}", exc.reason)


def _check_keys(data: Mapping[str, Any], allowed: Sequence[str], prefix: str) -> None:
    for key in data:
        if key not in allowed:
            raise ModelError(f"{prefix}{key}", f"unknown field; expected one of: {', '.join(allowed)}")


def _require(data: Mapping[str, Any], key: str, prefix: str) -> Any:
    if key not in data:
        raise ModelError(f"{prefix}{key}", "is required")
    return data[key]


def _number(data: Mapping[str, Any], key: str, prefix: str, default: float | None = None) -> float:
    value = data.get(key, default) if default is not None else _require(data, key, prefix)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"{prefix}{key}", f"must be a number, got {value!r}")
    return float(value)


def _table(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ModelError(field, f"must be a table, got {value!r}")
    return value


_PROCESSING_KEYS: dict[str, tuple[str, ...]] = {
    "constant": ("value",),
    "uniform": ("low", "high"),
    "exponential": ("mean",),
    "normal": ("mean", "stddev"),
    "lognormal": ("median", "sigma"),
    "linear": ("base", "per_record", "noise"),
}


def processing_from_mapping(data: Mapping[str, Any], prefix: str = "") -> ProcessingTime:
    """A processing-time model from ``{"kind": ..., <parameters>}``; errors name ``prefix`` + the key."""
    kind = _require(data, "kind", prefix)
    if kind not in _PROCESSING_KEYS:
        raise ModelError(f"{prefix}kind", f"unknown processing model {kind!r}; expected one of: {', '.join(_PROCESSING_KEYS)}")
    _check_keys(data, ("kind", *_PROCESSING_KEYS[kind]), prefix)

    def d(key: str) -> float:
        return parse_duration(_require(data, key, prefix), f"{prefix}{key}")

    try:
        if kind == "constant":
            return Constant(int(whole_duration(_require(data, "value", prefix), f"{prefix}value", positive=False).milliseconds))
        if kind == "uniform":
            return Uniform(d("low"), d("high"))
        if kind == "exponential":
            return Exponential(d("mean"))
        if kind == "normal":
            return Normal(d("mean"), d("stddev"))
        if kind == "lognormal":
            return LogNormal(d("median"), _number(data, "sigma", prefix))
        noise = None
        if "noise" in data:
            noise = processing_from_mapping(_table(data["noise"], f"{prefix}noise"), f"{prefix}noise.")
        return Linear(d("base") if "base" in data else 0.0, d("per_record"), noise)
    except ModelError as exc:
        raise _prefixed(exc, prefix) from None


def _input_from_mapping(data: Mapping[str, Any], base_dir: Path | None, p: str = "input.") -> InputRate:
    kind = data.get("kind", "constant")
    try:
        if kind == "constant":
            _check_keys(data, ("kind", "rate"), p)
            return ConstantRate(_number(data, "rate", p))
        if kind == "steps":
            _check_keys(data, ("kind", "steps"), p)
            steps = _require(data, "steps", p)
            if not isinstance(steps, list) or not steps:
                raise ModelError(f"{p}steps", f"must be a non-empty array of {{at, rate}} tables, got {steps!r}")
            parsed = []
            for i, step in enumerate(steps):
                sp = f"{p}steps[{i}]."
                step = _table(step, sp.rstrip("."))
                _check_keys(step, ("at", "rate"), sp)
                parsed.append((int(whole_duration(_require(step, "at", sp), f"{sp}at", positive=False).milliseconds),
                               _number(step, "rate", sp)))
            return StepRate(parsed)
        if kind == "bursts":
            _check_keys(data, ("kind", "rate", "burst_rate", "every", "length", "first"), p)
            return BurstRate(
                _number(data, "rate", p),
                _number(data, "burst_rate", p),
                whole_duration(_require(data, "every", p), f"{p}every").milliseconds,
                whole_duration(_require(data, "length", p), f"{p}length", positive=False).milliseconds,
                whole_duration(data.get("first", 0), f"{p}first", positive=False).milliseconds,
            )
        if kind == "trace":
            _check_keys(data, ("kind", "path"), p)
            model = model_from_trace(read_trace(_resolve(_require(data, "path", p), f"{p}path", base_dir)))
            return model.input
    except ModelError as exc:
        raise _prefixed(exc, p) from None
    raise ModelError(f"{p}kind", f"unknown input model {kind!r}; expected one of: constant, steps, bursts, trace")


def _resolve(value: object, field: str, base_dir: Path | None) -> Path:
    if not isinstance(value, str) or not value:
        raise ModelError(field, f"must be a file path, got {value!r}")
    path = Path(value)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file():
        raise ModelError(field, f"no such trace file: {path}")
    return path


_TOP_KEYS = ("interval", "concurrent_jobs", "sequential_batches", "duration", "batches", "seed", "rate_factor", "max_rate",
             "backpressure", "input", "inputs", "outputs", "trace", "cluster", "costs", "failures")
_BACKPRESSURE_KEYS = ("proportional", "integral", "derivative", "min_rate", "initial_rate")
_CLUSTER_KEYS = ("executors", "cores", "scheduling_mode", "cpus", "task_overhead", "stage_overhead", "job_overhead",
                 "driver_threads", "driver_on_cpus")
_COST_MODELS = ("generation", "checkpoint", "commit", "listener")


def _backpressure(value: object, prefix: str) -> Backpressure:
    table = _table(value, prefix.rstrip("."))
    _check_keys(table, _BACKPRESSURE_KEYS, prefix)
    try:
        return Backpressure(**table)
    except ModelError as exc:
        raise _prefixed(ModelError(exc.field.removeprefix("backpressure."), exc.reason), prefix) from None


def _inputs(value: object, base: Path | None) -> list[InputModel]:
    if not isinstance(value, list) or not value:
        raise ModelError("inputs", "must be a non-empty array of tables ([[inputs]])")
    built = []
    for i, one in enumerate(value):
        p = f"inputs[{i}]."
        table = dict(_table(one, f"inputs[{i}]"))
        name = table.pop("name", None)
        max_rate = table.pop("max_rate", None)
        backpressure = _backpressure(table.pop("backpressure"), f"{p}backpressure.") if "backpressure" in table else None
        try:
            built.append(InputModel(_input_from_mapping(table, base, p), name=name, max_rate=max_rate, backpressure=backpressure))
        except ModelError as exc:
            raise _prefixed(exc, p) from None
    return built


def _stages(value: object, prefix: str) -> list[Stage]:
    if not isinstance(value, list) or not value:
        raise ModelError(f"{prefix}stages", "must be a non-empty array of {tasks, kind, ...} tables")
    built = []
    for i, one in enumerate(value):
        p = f"{prefix}stages[{i}]."
        table = dict(_table(one, f"{prefix}stages[{i}]"))
        tasks = table.pop("tasks", 1)
        try:
            built.append(Stage(tasks, processing_from_mapping(table, p)))
        except ModelError as exc:
            raise _prefixed(exc, p) from None
    return built


def _cluster(value: object) -> ClusterModel:
    table = _table(value, "cluster")
    _check_keys(table, _CLUSTER_KEYS, "cluster.")
    fields: dict[str, Any] = {k: table[k] for k in ("executors", "cores", "scheduling_mode", "cpus", "driver_threads",
                                                    "driver_on_cpus") if k in table}
    if isinstance(fields.get("scheduling_mode"), str):
        fields["scheduling_mode"] = fields["scheduling_mode"].upper()
    for key in ("task_overhead", "stage_overhead", "job_overhead"):
        if key in table:
            fields[f"{key}_ms"] = parse_duration(table[key], f"cluster.{key}")
    return ClusterModel(**fields)


def _costs(value: object) -> Costs:
    table = _table(value, "costs")
    _check_keys(table, (*_COST_MODELS, "checkpoint_mode", "listener_capacity"), "costs.")
    fields: dict[str, Any] = {}
    for key in _COST_MODELS:
        if key in table:
            fields[key] = processing_from_mapping(_table(table[key], f"costs.{key}"), f"costs.{key}.")
    for key in ("checkpoint_mode", "listener_capacity"):
        if key in table:
            fields[key] = table[key]
    return Costs(**fields)


def _failures(value: object) -> Failures:
    table = _table(value, "failures")
    _check_keys(table, ("job_failure_probability", "downtime"), "failures.")
    downtime = parse_duration(table["downtime"], "failures.downtime") if "downtime" in table else 0.0
    return Failures(_number(table, "job_failure_probability", "failures."), downtime)


def model_from_mapping(data: Mapping[str, Any], *, base_dir: str | os.PathLike[str] | None = None) -> SimulationModel:
    """A model from the parsed contents of a model file (see the module docstring for the format).

    Args:
        data: the parsed TOML document.
        base_dir: where relative trace paths are resolved (the model file's folder).

    Raises:
        ModelError: naming the offending field, e.g. ``outputs[1].mean``.
    """
    base = Path(base_dir) if base_dir is not None else None
    _check_keys(data, _TOP_KEYS, "")
    traced: SimulationModel | None = None
    if "trace" in data:
        trace_table = _table(data["trace"], "trace")
        _check_keys(trace_table, ("path",), "trace.")
        traced = model_from_trace(read_trace(_resolve(_require(trace_table, "path", "trace."), "trace.path", base)))
    fields: dict[str, Any] = {}
    if "interval" in data:
        fields["batch_interval"] = whole_duration(data["interval"], "interval")
    elif traced is None:
        raise ModelError("interval", "is required (the batch interval, e.g. \"1s\")")
    if "concurrent_jobs" in data:
        fields["concurrent_jobs"] = data["concurrent_jobs"]
    if "sequential_batches" in data:
        fields["sequential_batches"] = data["sequential_batches"]
    if "duration" in data:
        fields["duration"] = whole_duration(data["duration"], "duration")
    if "batches" in data:
        fields["batches"] = data["batches"]
    if "seed" in data:
        fields["seed"] = data["seed"]
    if "rate_factor" in data:
        fields["rate_factor"] = data["rate_factor"]
    if "max_rate" in data:
        fields["max_rate"] = data["max_rate"]
    if "backpressure" in data:
        fields["backpressure"] = _backpressure(data["backpressure"], "backpressure.")
    if "input" in data:
        fields["input"] = _input_from_mapping(_table(data["input"], "input"), base)
    if "inputs" in data:
        fields["inputs"] = _inputs(data["inputs"], base)
    if "cluster" in data:
        fields["cluster"] = _cluster(data["cluster"])
    if "costs" in data:
        fields["costs"] = _costs(data["costs"])
    if "failures" in data:
        fields["failures"] = _failures(data["failures"])
    if "outputs" in data:
        outputs = data["outputs"]
        if not isinstance(outputs, list) or not outputs:
            raise ModelError("outputs", "must be a non-empty array of tables ([[outputs]])")
        built = []
        for i, out in enumerate(outputs):
            prefix = f"outputs[{i}]."
            out = _table(out, f"outputs[{i}]")
            name = out.get("name", f"output-{i}")
            if not isinstance(name, str) or not name:
                raise ModelError(f"{prefix}name", f"must be a non-empty string, got {name!r}")
            params = {k: v for k, v in out.items() if k != "name"}
            overhead = None
            if "overhead" in params:
                overhead = processing_from_mapping(_table(params.pop("overhead"), f"{prefix}overhead"), f"{prefix}overhead.")
            if "stages" in params:
                _check_keys(params, ("stages",), prefix)
                built.append(OutputModel(name, stages=_stages(params["stages"], prefix), overhead=overhead))
            else:
                built.append(OutputModel(name, processing_from_mapping(params, prefix), overhead=overhead))
        fields["outputs"] = built
    elif traced is None:
        raise ModelError("outputs", "is required: at least one [[outputs]] table with a processing model")
    if traced is not None:
        return traced.evolve(**fields)
    return SimulationModel(**fields)


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed TOML document at ``path``.

    Raises:
        ModelError: the file is not valid TOML.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ModelError("", f"not valid TOML: not UTF-8 text: {exc.reason} (at line {line})") from None
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelError("", f"not valid TOML: {exc}") from None
    except RecursionError:
        raise ModelError("", "not valid TOML: arrays or tables nested too deeply to read") from None
    except ValueError as exc:  # what tomllib's int() refuses: more digits than Python converts
        raise ModelError("", f"not valid TOML: {number_too_long(exc)}") from None
    return data


def load_model(path: str | os.PathLike[str]) -> SimulationModel:
    """Read a TOML model file; relative trace paths in it are relative to its folder.

    Raises:
        ModelError: the file is not valid TOML, or a field is wrong (named in the message).
        OSError: the file cannot be read.
    """
    return model_from_mapping(read_toml(path), base_dir=Path(path).parent)
