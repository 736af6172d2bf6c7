"""``aiodstream simulate MODEL``: run a scheduling-delay simulation, or a sweep of them, and report it."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ._cli_checkpoint import EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from scheduler import JobFailedError

__all__ = ["EXIT_UNSTABLE", "add_simulate"]

EXIT_UNSTABLE = 3  # simulate --fail-unstable found an unstable configuration


_SIMULATE_EPILOG = """\
examples:
  aiodstream simulate model.toml
  aiodstream simulate model.toml --interval 2s --concurrency 2 --rate-factor 1.3 --plot delays.png
  aiodstream simulate --interval 1s --rate 500 --op kind=exponential,mean=700ms --batches 3600
  aiodstream simulate --trace recorded.jsonl --interval 5s
  aiodstream simulate model.toml --sweep-intervals 500ms,1s,2s,5s --sweep-concurrency 1,2,4 --plot sweep.png

--op takes the keys of an [[outputs]] table: name, kind (constant, uniform, exponential, normal,
lognormal, linear) and the kind's parameters, e.g. kind=linear,base=50ms,per_record=0.2ms.
Durations are written 250ms, 1.5s, 2m, 1h, or as plain milliseconds.
"""


def add_simulate(commands: Any) -> None:
    """Register ``aiodstream simulate`` on the command line's subparsers."""
    p = commands.add_parser(
        "simulate",
        help="simulate scheduling delay on virtual time",
        description="Run the real scheduler on virtual time with modelled work and report delays and stability.",
        epilog=_SIMULATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", nargs="?", help="a TOML model file (optional when flags or --trace describe the model)")
    p.add_argument("--trace", metavar="FILE", help="replay a trace recorded with TraceRecorder (JSON lines)")
    p.add_argument("--interval", metavar="DURATION", help="batch interval, e.g. 1s")
    p.add_argument("--concurrency", "--concurrent-jobs", dest="concurrency", type=int, metavar="N",
                   help="concurrent jobs (spark.streaming.concurrentJobs)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--duration", metavar="DURATION", help="simulated horizon, e.g. 24h")
    length.add_argument("--batches", type=int, metavar="N", help="number of batches to simulate")
    p.add_argument("--seed", type=int, metavar="N", help="random seed")
    p.add_argument("--rate", type=float, metavar="RECORDS_PER_S", help="constant input rate (replaces the model's input)")
    p.add_argument("--rate-factor", type=float, metavar="F", help="multiply the input rate (1.3 = 30%% more input)")
    p.add_argument("--max-rate", type=float, metavar="RECORDS_PER_S", help="cap the ingestion rate (spark.streaming.receiver.maxRate)")
    p.add_argument("--backpressure", action="store_true", help="Spark's backpressure: a PID estimator sets the ingestion rate")
    p.add_argument("--op", action="append", metavar="SPEC", help="an output operation (repeat; replaces the model's outputs)")
    p.add_argument("--sweep-intervals", metavar="LIST", help="sweep these intervals, e.g. 500ms,1s,2s")
    p.add_argument("--sweep-concurrency", metavar="LIST", help="sweep these concurrencies, e.g. 1,2,4")
    p.add_argument("--plot", metavar="PNG", help="write a plot of delays over time (or of the sweep)")
    p.add_argument("--events", metavar="JSONL", help="write the simulated run's listener events (a replayable trace)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    p.add_argument("--fail-unstable", action="store_true", help=f"exit with status {EXIT_UNSTABLE} if a configuration is unstable")
    p.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio", help="event loop to run on")
    progress = p.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")
    p.set_defaults(handler=_simulate)


def _parse_op(spec: str, index: int) -> dict[str, Any]:
    from .simulation import ModelError

    table: dict[str, Any] = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ModelError(f"outputs[{index}]", f"--op takes key=value pairs separated by commas, got {spec!r}")
        table[key] = _scalar(value.strip())
    return table


def _scalar(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def _model_data(args: argparse.Namespace) -> tuple[dict[str, Any], Path | None]:
    from .simulation import read_toml

    data: dict[str, Any] = {}
    base: Path | None = None
    if args.model:
        base = Path(args.model).parent
        data = read_toml(args.model)
    if args.trace:
        data["trace"] = {"path": str(Path(args.trace).resolve())}
    _with_unit(args.interval, "--interval")
    _with_unit(args.duration, "--duration")
    overrides = {
        "interval": args.interval,
        "concurrent_jobs": args.concurrency,
        "duration": args.duration,
        "batches": args.batches,
        "seed": args.seed,
        "rate_factor": args.rate_factor,
        "max_rate": args.max_rate,
    }
    for key, value in overrides.items():
        if value is not None:
            data[key] = value
    if args.duration is not None:
        data.pop("batches", None)
    if args.batches is not None:
        data.pop("duration", None)
    if args.backpressure and "backpressure" not in data:
        data["backpressure"] = {}
    if args.rate is not None:
        data["input"] = {"kind": "constant", "rate": args.rate}
    if args.op:
        data["outputs"] = [_parse_op(spec, i) for i, spec in enumerate(args.op)]
    return data, base


def _list(text: str, field: str, parse: Any) -> list[Any]:
    from .simulation import ModelError

    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ModelError(field, f"must be a comma-separated list, got {text!r}")
    values = [parse(item, f"{field}[{i}]") for i, item in enumerate(items)]
    for i, value in enumerate(values):
        if value in values[:i]:
            raise ModelError(f"{field}[{i}]", f"repeats {items[values.index(value)]!r} (each value is one row of the sweep)")
    return values


def _with_unit(text: str | None, field: str) -> None:
    # A bare number would be milliseconds (a model file's unit) where pyspark's batchDuration 1 is a second: ask for the unit.
    from .simulation import ModelError

    if text is not None and text.strip().replace(".", "", 1).isdecimal():
        raise ModelError(field, f"needs a unit on the command line, such as \"{text.strip()}ms\" or \"{text.strip()}s\", "
                                f"got {text!r}")


def _interval(text: str, field: str) -> Any:
    from .simulation import whole_duration

    _with_unit(text, field)
    return whole_duration(text, field)


def _positive_int(text: str, field: str) -> int:
    from .simulation import ModelError

    try:
        value = int(text)
    except ValueError:
        raise ModelError(field, f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise ModelError(field, f"must be at least 1, got {value}")
    return value


class _Progress:
    """Progress bars on stderr (tqdm), at most five updates a second, erased when done."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self._bar: Any = None

    def _open(self, total: int, unit: str, description: str) -> Any:
        from tqdm import tqdm

        return tqdm(total=total, unit=unit, desc=description, file=self.stream, leave=False, mininterval=0.2,
                    dynamic_ncols=True)

    def batches(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            self._bar = self._open(total, "batch", "  simulated")
        self._bar.update(done - self._bar.n)

    def point(self, done: int, total: int, model: Any) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            self._bar = self._open(total, "point", "  sweep")
        self._bar.set_postfix_str(f"interval {model.batch_interval}, concurrent jobs {model.concurrent_jobs}", refresh=False)
        self._bar.update(done - self._bar.n)

    def done(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _simulate(args: argparse.Namespace) -> int:
    from .simulation import ModelError, model_from_mapping

    def fail(message: str) -> int:
        print(f"aiodstream simulate: error: {message}", file=sys.stderr)
        return EXIT_USAGE

    where = f"{args.model}: " if args.model else ""
    try:
        data, base = _model_data(args)
        if not data:
            return fail("no model: give a TOML model file, --trace FILE, or --interval with --op (see --help)")
        model = model_from_mapping(data, base_dir=base)
        intervals = _list(args.sweep_intervals, "--sweep-intervals", _interval) if args.sweep_intervals else None
        concurrency = _list(args.sweep_concurrency, "--sweep-concurrency", _positive_int) if args.sweep_concurrency else None
    except ModelError as exc:
        return fail(f"{where}{exc}")
    except OSError as exc:
        return fail(f"cannot read {exc.filename}: {exc.strerror}")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        return fail("--plot needs matplotlib, an optional dependency: pip install 'aiodstream[plot]'")
    if args.backend == "trio" and importlib.util.find_spec("trio") is None:
        return fail("--backend trio needs trio, which is not installed: pip install trio")
    unwritable = _unwritable(args.plot) if args.plot else None
    if unwritable:  # found before simulating, not after a long run whose plot then cannot be saved
        return fail(f"--plot: {unwritable}")
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = _Progress(sys.stderr, bool(show))
    if intervals is not None or concurrency is not None:
        if args.events:
            return fail("--events records one run; it cannot be combined with a sweep")
        return _run_sweep(args, model, intervals or [model.batch_interval], concurrency or [model.concurrent_jobs], progress)
    return _run_one(args, model, progress)


def _unwritable(path: str) -> str | None:
    """Why a file cannot be written at ``path`` (a missing or read-only folder, a directory in its place), or None."""
    target = Path(path)
    if target.is_dir():
        return f"{path} is a directory; give a file name"
    if target.exists():
        return None if os.access(target, os.W_OK) else f"cannot write {path}: permission denied"
    folder = target.parent
    if not folder.is_dir():
        why = f"{folder} is a file, not a folder" if folder.exists() else f"the folder {folder} does not exist"
        return f"cannot write {path}: {why}"
    return None if os.access(folder, os.W_OK | os.X_OK) else f"cannot write {path}: the folder {folder} is not writable"


def _cannot_write(exc: OSError, option: str) -> int:
    print(f"aiodstream simulate: error: {option}: cannot write {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
    return EXIT_USAGE


def _run_one(args: argparse.Namespace, model: Any, progress: _Progress) -> int:
    from scheduler import JobFailedError

    from .simulation import TraceRecorder, plot_run, simulate

    listeners = []
    recorder = None
    if args.events:
        try:
            recorder = TraceRecorder(args.events, batch_interval=model.batch_interval,
                                     concurrent_jobs=model.concurrent_jobs,
                                     meta={"source": "aiodstream simulate", "seed": model.seed})
        except OSError as exc:
            return _cannot_write(exc, "--events")
        listeners.append(recorder)
    try:
        result = simulate(model, listeners=listeners, progress=progress.batches, backend=args.backend)
    except JobFailedError as exc:
        return _model_failed(args, exc)
    finally:
        progress.done()
        if recorder is not None:
            recorder.close()
    if args.json:
        report: dict[str, Any] = {"summary": result.summary.to_dict(), "wall_seconds": result.wall_seconds}
        if model.rate_controlled:
            report["rate_control"] = {"final_rate": result.final_rate, "source_backlog": result.source_backlog}
        print(json.dumps(report, indent=2))
    else:
        print(result.format())
        print(f"\n(simulated in {result.wall_seconds:.2f} s, {result.batches_per_second:,.0f} batches/s)")
    if args.plot:
        try:
            plot_run(result, args.plot)
        except OSError as exc:  # the folder was checked before the run; it changed meanwhile
            return _cannot_write(exc, "--plot")
        print(f"plot written to {args.plot}", file=sys.stderr)
    if recorder is not None:
        print(f"events written to {args.events} ({recorder.events_written} events)", file=sys.stderr)
    if args.fail_unstable and not result.summary.stable:
        return EXIT_UNSTABLE
    return EXIT_OK


def _model_failed(args: argparse.Namespace, exc: JobFailedError) -> int:
    """A model that drew what no run can take (a duration beyond Spark's range): one line and the usage status."""
    from .simulation import ModelError

    cause = exc.__cause__
    if not isinstance(cause, ModelError):
        raise exc
    at = exc.batch_time_ms
    where = f"{args.model}: " if args.model else ""
    print(f"aiodstream simulate: error: {where}{cause}" + (f" (at the batch of {at} ms)" if at is not None else ""),
          file=sys.stderr)
    return EXIT_USAGE


def _run_sweep(args: argparse.Namespace, model: Any, intervals: list[Any], concurrency: list[int], progress: _Progress) -> int:
    from scheduler import JobFailedError

    from .simulation import plot_sweep, sweep

    try:
        result = sweep(model, intervals, concurrency, progress=progress.point, backend=args.backend)
    except JobFailedError as exc:
        return _model_failed(args, exc)
    finally:
        progress.done()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.format_table())
    if args.plot:
        try:
            plot_sweep(result, args.plot)
        except OSError as exc:  # the folder was checked before the sweep; it changed meanwhile
            return _cannot_write(exc, "--plot")
        print(f"plot written to {args.plot}", file=sys.stderr)
    if args.fail_unstable and not all(p.summary.stable for p in result.points):
        return EXIT_UNSTABLE
    return EXIT_OK
