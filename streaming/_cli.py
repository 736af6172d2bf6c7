"""The ``aiodstream`` command line: one subcommand per tool (``aiodstream simulate ...``, ``aiodstream checkpoint DIR``,
``aiodstream state DIR``).

Subcommands register themselves in :func:`build_parser` with an ``add_<name>`` (here ``_add_<name>``) function that sets
``handler`` (``simulate``'s lives in ``_cli_simulate``, ``checkpoint``'s in ``_cli_checkpoint``, ``state``'s in
``_cli_state``); each handler takes the parsed arguments and returns the exit status.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from ._cli_checkpoint import EXIT_OK, EXIT_USAGE, add_checkpoint
from ._cli_simulate import add_simulate
from ._cli_state import add_state

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found,unused-ignore]

__all__ = ["build_parser", "main"]

EXIT_INTERRUPTED = 130  # Ctrl-C, as the shell reports a command SIGINT ended (128 + 2); `ui` stops with 0
EXIT_BROKEN_PIPE = 141  # stdout closed early (`| head`), as the shell reports a command SIGPIPE ended (128 + 13)


def build_parser() -> argparse.ArgumentParser:
    """The ``aiodstream`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="aiodstream",
        description="Tools for aiodstream, Spark Streaming's DStream runtime on anyio.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show the engine's info logs")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_simulate(commands)
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
    if sys.stderr is None:  # started with stderr closed (`2>&-`): errors go nowhere, not to stdout (print's default)
        sys.stderr = open(os.devnull, "w")  # the process's stderr from now on
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _configure_logging(args.verbose)
    try:
        status: int = args.handler(args)
        sys.stdout.flush()  # here, not at the interpreter's exit: a reader gone by then is handled below
    except BrokenPipeError:
        # The reader of stdout went away (`aiodstream checkpoint --json DIR | head`): nothing more can be shown, and the
        # interpreter's last flush of stdout must not fail again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
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
    if not record.exc_info:
        return True
    from .simulation import ModelError

    return not isinstance(record.exc_info[1], ModelError)


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
        for (path, trace), name in zip(traces, trace_names([path for path, _ in traces]), strict=True):
            ui.add_trace(trace, name=name)
            if not trace.completed_batches:
                print(f"aiodstream ui: note: {path} holds no completed batch", file=sys.stderr)
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

With --program, the program runs once per concurrency, unchanged but for its import (from streaming
import StreamingContext), in a child process (its master and settings are passed as spark-submit
passes them; it must not hard-code a master), recording --batches batches each; the first run is
the calibration. With traces, the first trace is the calibration. A trace is recorded by any run
with spark.aiodstream.trace.path set (or StreamingContext.record_trace). The report gives, for every run, the median and p95 processing
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


def trace_names(paths: list[str]) -> list[str]:
    """The names ``aiodstream ui`` shows traces under: each file's name without its suffix, and its path where two files
    share a name (``run1/events.jsonl`` and ``run2/events.jsonl``)."""
    stems = [Path(path).stem for path in paths]
    return [stem if stems.count(stem) == 1 else str(Path(path).with_suffix("")) for path, stem in zip(paths, stems, strict=True)]


if __name__ == "__main__":  # pragma: no cover - python -m streaming._cli
    sys.exit(main())
