"""The ``aiodstream`` command line: one subcommand per tool (``aiodstream simulate ...``, ``aiodstream checkpoint DIR``,
``aiodstream state DIR``).

Subcommands register themselves in :func:`build_parser` with a ``_add_<name>`` function that sets
``handler`` (``checkpoint``'s lives in ``_cli_checkpoint``, ``state``'s in ``_cli_state``); each handler takes the parsed arguments
and returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence, TextIO

from ._cli_checkpoint import EXIT_OK, EXIT_USAGE, add_checkpoint

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found,unused-ignore]
from ._cli_state import add_state

__all__ = ["build_parser", "main"]

EXIT_UNSTABLE = 3  # simulate --fail-unstable found an unstable configuration
EXIT_INTERRUPTED = 130  # Ctrl-C, as the shell reports a command SIGINT ended (128 + 2); `ui` stops with 0


def build_parser() -> argparse.ArgumentParser:
    """The ``aiodstream`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="aiodstream",
        description="Tools for aiodstream, Spark Streaming's DStream runtime on anyio.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show the engine's info logs")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_simulate(commands)
    add_checkpoint(commands)
    add_state(commands)
    _add_ui(commands)
    _add_calibrate(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it).

    Ctrl-C ends any subcommand with one line on stderr and status 130 (``ui``, which runs until
    interrupted, with 0).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _configure_logging(args.verbose)
    try:
        status: int = args.handler(args)
    except BaseException as exc:  # Ctrl-C: the handler's `finally` blocks have run (progress erased, files closed)
        if not _interrupted(exc):
            raise
        print(f"aiodstream {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return status


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is Ctrl-C's KeyboardInterrupt, alone or in an exception group (trio's run raises it in one)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None


_CLI_HANDLER = "aiodstream-cli"


def _configure_logging(verbose: bool) -> None:
    # The command line is an application, so it (unlike the library) decides what is logged, and
    # where: the library's warnings, or with --verbose its info lines too (a simulation completes
    # thousands of batches a second, one line each), on stderr; stdout keeps the report.
    from scheduler import LOGGER_ROOT

    logger = logging.getLogger(LOGGER_ROOT)
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
    if logging.getLogger().handlers or any(h.get_name() == _CLI_HANDLER for h in logger.handlers):
        return  # the embedding program configured its own handlers, or an earlier main() added ours
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_CLI_HANDLER)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_not_a_model_error)
    logger.addHandler(handler)


def _not_a_model_error(record: logging.LogRecord) -> bool:
    # A simulated model that drew what no run can take fails its batch, which the engine logs with
    # its traceback; the command says why in one line instead (_model_failed).
    from .simulation import ModelError

    return not (record.exc_info and isinstance(record.exc_info[1], ModelError))


# -- simulate --

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


def _add_simulate(commands: Any) -> None:
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
    return [parse(item, f"{field}[{i}]") for i, item in enumerate(items)]


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


def _model_failed(args: argparse.Namespace, exc: Exception) -> int:
    """A model that drew what no run can take (a duration beyond Spark's range): one line and the usage status."""
    from .simulation import ModelError

    cause = exc.__cause__
    if not isinstance(cause, ModelError):
        raise exc
    at = getattr(exc, "batch_time_ms", None)
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


# -- ui --


def _add_ui(commands: Any) -> None:
    p = commands.add_parser(
        "ui",
        help="browse recorded or simulated runs in the web UI",
        description="Serve the web UI (the Streaming and batch pages of a live context) on trace files: a real run "
                    "recorded with TraceRecorder, or a simulated one (aiodstream simulate --events FILE). "
                    "Runs until interrupted (Ctrl-C).",
    )
    p.add_argument("traces", nargs="+", metavar="TRACE", help="a trace file (JSON lines); several are shown side by side")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=None, help="the port (default: 4050; 0: any free port)")
    p.add_argument("--retained-batches", type=int, default=None, metavar="N",
                   help="completed batches kept per trace (default: all of them)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --host beyond loopback (anyone who reaches the port reads the pages; see --token-file)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="another Host name the UI answers besides its address and localhost (repeat)")
    p.add_argument("--token-file", metavar="FILE",
                   help="require the token in FILE (Authorization: Bearer, or ?token= once in a browser)")
    p.add_argument("--show-tracebacks", action="store_true", help="show failures' full tracebacks, not only type and message")
    p.set_defaults(handler=_ui)


def _ui(args: argparse.Namespace) -> int:
    import anyio

    from streaming.simulation import ModelError, read_trace
    from streaming.ui import DEFAULT_UI_PORT, StreamingUI, UISecurity

    token = None
    if args.token_file is not None:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            print(f"aiodstream ui: error: cannot read the token file {args.token_file}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if not token:
            print(f"aiodstream ui: error: the token file {args.token_file} is empty; put a long random token in it",
                  file=sys.stderr)
            return EXIT_USAGE
    traces = []
    for path in args.traces:
        try:
            traces.append((path, read_trace(path)))
        except ModelError as exc:
            print(f"aiodstream ui: error: {path}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except OSError as exc:
            print(f"aiodstream ui: error: cannot read {path}: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
    if args.retained_batches is not None and args.retained_batches < 1:  # 0 would pass for "all", which is the default
        print(f"aiodstream ui: error: --retained-batches must be at least 1, got {args.retained_batches}; leave it out "
              "to keep every batch", file=sys.stderr)
        return EXIT_USAGE
    retained = args.retained_batches or max([len(t.completed_batches) for _, t in traces] + [1])
    try:
        security = UISecurity(token=token, allowed_hosts=tuple(args.allowed_host), allow_remote=args.allow_remote,
                              show_tracebacks=args.show_tracebacks)
        ui = StreamingUI(retained_batches=retained, metrics=False, security=security)
        for path, trace in traces:
            ui.add_trace(trace, name=Path(path).stem)
    except ValueError as exc:
        print(f"aiodstream ui: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    refused: list[BaseException] = []

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            try:
                url = await tg.start(ui.serve, args.host, DEFAULT_UI_PORT if args.port is None else args.port)
            except (OSError, ValueError) as exc:  # a taken port, a host beyond loopback: not a task group's failure
                refused.append(exc)
                return
            print(f"aiodstream ui: serving {len(traces)} trace{'s' if len(traces) > 1 else ''} at {url} (Ctrl-C to stop)",
                  flush=True)

    try:
        anyio.run(serve)
    except KeyboardInterrupt:
        return EXIT_OK
    if refused:
        print(f"aiodstream ui: error: {refused[0]}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


# -- calibrate --

_CALIBRATE_EPILOG = """\
examples:
  aiodstream calibrate --program wordcount.py --master 'local[2]' --concurrency 1,2,3 --batches 40 --out runs/
  aiodstream calibrate runs/wordcount-c1.jsonl runs/wordcount-c2.jsonl runs/wordcount-c3.jsonl

With --program, the program runs once per concurrency, unchanged, in a child process (its master
and settings are passed as spark-submit passes them; it must not hard-code a master), recording
--batches batches each; the first run is the calibration. With traces, the first trace is the
calibration. A trace is recorded by any run with spark.aiodstream.trace.path set (or
StreamingContext.record_trace). The report gives, for every run, the median and p95 processing
and scheduling delays measured and simulated in its configuration.
"""


def _add_calibrate(commands: Any) -> None:
    p = commands.add_parser(
        "calibrate",
        help="fit the simulator's cluster model to real runs and report its error",
        description="Record (or read) real runs of a streaming program, fit the simulator's cluster model to the "
                    "first, and report how far the simulated delays are from every run's.",
        epilog=_CALIBRATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("traces", nargs="*", metavar="TRACE", help="recorded traces; the first is the calibration")
    p.add_argument("--program", metavar="FILE", help="record runs of this pyspark.streaming program first")
    p.add_argument("--master", metavar="MASTER", help="the Spark master of the recorded runs, e.g. local[2]")
    p.add_argument("--concurrency", metavar="LIST", default="1", help="concurrentJobs of each recorded run (default: 1)")
    p.add_argument("--batches", type=int, default=40, metavar="N", help="batches per recorded run (default: 40)")
    p.add_argument("--out", metavar="DIR", default=".", help="where recorded traces go (default: here)")
    p.add_argument("--arg", action="append", default=[], metavar="ARG", help="an argument for the program (repeat)")
    p.add_argument("--warmup", type=int, default=None, metavar="N", help="batches left out at the start of each run (default: 2)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from streaming.simulation import DEFAULT_WARMUP, ModelError, calibrate, read_trace, record_run

    warmup = DEFAULT_WARMUP if args.warmup is None else args.warmup
    if warmup < 0:
        print("aiodstream calibrate: error: --warmup must not be negative", file=sys.stderr)
        return EXIT_USAGE
    paths = list(args.traces)
    try:
        if args.program is not None:
            if args.batches <= warmup:
                print(f"aiodstream calibrate: error: --batches must exceed the {warmup} warm-up batches", file=sys.stderr)
                return EXIT_USAGE
            try:
                levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
            except ValueError:
                levels = []
            if not levels or min(levels) < 1:
                print(f"aiodstream calibrate: error: --concurrency must list positive integers, got {args.concurrency!r}",
                      file=sys.stderr)
                return EXIT_USAGE
            out = Path(args.out)
            try:
                out.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # not a read: say what could not be made ("cannot read x: File exists" misled)
                why = "it is a file, not a folder" if out.exists() and not out.is_dir() else exc.strerror or str(exc)
                print(f"aiodstream calibrate: error: cannot create the folder {out} for --out: {why}", file=sys.stderr)
                return EXIT_USAGE
            for jobs in levels:
                path = out / f"{Path(args.program).stem}-c{jobs}.jsonl"
                print(f"recording {args.batches} batches of {args.program} with concurrentJobs={jobs} -> {path}",
                      file=sys.stderr, flush=True)
                record_run(args.program, path, batches=args.batches, master=args.master, concurrent_jobs=jobs,
                           args=args.arg)
                paths.append(str(path))
        if not paths:
            print("aiodstream calibrate: error: give traces, or --program to record some", file=sys.stderr)
            return EXIT_USAGE
        traces = [read_trace(path) for path in paths]
        calibration = calibrate(traces[0], warmup=warmup)
        comparisons = [calibration.compare(trace, label=path) for path, trace in zip(paths, traces, strict=True)]
    except ModelError as exc:
        print(f"aiodstream calibrate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"aiodstream calibrate: error: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    fitted = {
        "calibration": paths[0],
        "cluster": {"slots": calibration.model.cluster.slots if calibration.model.cluster else None,
                    "cpus": calibration.model.cluster.cpus if calibration.model.cluster else None},
        "stage_overhead_ms": calibration.stage_overhead_ms,
        "operation_overheads_ms": list(calibration.operation_overheads_ms),
        "generation_ms": calibration.generation_ms,
        "warmup": warmup,
    }
    if args.json:
        print(json.dumps({"fitted": fitted, "runs": [c.to_dict() for c in comparisons]}, indent=2))
        return EXIT_OK
    print(f"calibrated on {paths[0]}: stage overhead {calibration.stage_overhead_ms:g} ms, operation overheads "
          f"{', '.join(f'{o:g} ms' for o in calibration.operation_overheads_ms)}, generation {calibration.generation_ms:g} ms")
    for comparison in comparisons:
        print()
        print(comparison.format())
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover - python -m streaming._cli
    sys.exit(main())
