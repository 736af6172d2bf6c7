"""Run conformance programs on the real ``pyspark.streaming`` (the behavioural oracle), through the one driver both engines use.

Usage::

    from tests.streaming.conformance.programs import PROGRAMS, prog_word_count
    from tests.streaming.conformance.reference import run_reference

    out = run_reference(prog_word_count, None, num_batches=4, batch_seconds=0.5, sc=sc)
    # {"word_count": [(0, [("a", 3), ("b", 1), ("c", 1)]), (1, [("b", 2)]), (2, []), (3, [...])]}

Results are keyed by output name; each value lists ``(batch_index, value)`` in batch
order, where ``batch_index = (batch_time - first_batch_time) / batch_interval``, so runs
started at different wall-clock times compare equal.  Besides the outputs recorded by
``collect``, a program's captured stdout appears under ``"stdout"`` (one pprint block per
batch, the batch time replaced by ``{time}``) and files written by ``saveAsTextFiles``
under ``"saved:<prefix>"`` (one list of lines per part file).

:func:`run_program` is that driver, for any :class:`Engine`; ``ours.py`` gives it aiodstream's.
"""

from __future__ import annotations

import inspect
import io
import os
import re
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .programs import Batches, MakeInput, Program, Sink, recording

__all__ = [
    "DEFAULT_BATCH_SECONDS",
    "PYSPARK",
    "Engine",
    "ReferenceRunError",
    "Results",
    "normalise_stdout",
    "read_saved_files",
    "run_program",
    "run_reference",
]

Results = dict[str, list[tuple[int, Any]]]

DEFAULT_BATCH_SECONDS = 0.5
"""pyspark keeps up with most catalogue programs at this interval on local[2] (results do
not depend on it: a slower engine only queues batches up; the queue input is still taken
one list per batch time)."""



class ReferenceRunError(RuntimeError):
    """The oracle run failed: a batch's output operation failed, the context died, or it timed out.

    The message starts with a one-line summary (the innermost Python exception when there
    is one); ``details`` holds pyspark's full error text.
    """

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


_EXCEPTION_LINE = re.compile(r"^(?P<cls>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Warning|Exit|Interrupt|Iteration)): (?P<msg>.*)$")


def _summarise_error(text: str) -> str:
    """One line out of a py4j/Spark error text: the innermost Python exception, else the first JVM one."""
    python_lines: list[str] = []
    jvm_lines: list[str] = []
    for raw in text.splitlines():
        line = raw.strip().removeprefix(": ")
        match = _EXCEPTION_LINE.match(line)
        if match is None:
            continue
        is_jvm = match.group("cls").startswith(("py4j.", "org.", "java.", "scala."))
        (jvm_lines if is_jvm else python_lines).append(line)
    if python_lines:
        return python_lines[-1]
    if jvm_lines:
        return jvm_lines[0]
    return (text.strip().splitlines() or [""])[0]


def _failure(context: str, text: str) -> ReferenceRunError:
    return ReferenceRunError(f"{context}: {_summarise_error(text)}", details=text)


# ---------------------------------------------------------------------------
# Batch tracking
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _CompletedBatch:
    time_ms: int
    failures: tuple[str, ...]


def _make_tracker() -> Any:
    """Build a StreamingListener that records completed batches (import is deferred)."""
    from pyspark.streaming.listener import StreamingListener

    class BatchTracker(StreamingListener):
        """Counts completed batches and keeps their times and output failures."""

        def __init__(self) -> None:
            super().__init__()
            self._cond = threading.Condition()
            self.completed: list[_CompletedBatch] = []

        def onBatchCompleted(self, batch_completed: Any) -> None:
            info = batch_completed.batchInfo()
            failures = tuple(str(op.failureReason()) for op in dict(info.outputOperationInfos()).values() if op.failureReason() is not None)
            with self._cond:
                self.completed.append(_CompletedBatch(info.batchTime().milliseconds(), failures))
                self._cond.notify_all()

        def wait_for(self, count: int, timeout: float) -> bool:
            """Wait up to ``timeout`` seconds for ``count`` completed batches."""
            with self._cond:
                return self._cond.wait_for(lambda: len(self.completed) >= count, timeout)

        def snapshot(self) -> list[_CompletedBatch]:
            with self._cond:
                return list(self.completed)

    return BatchTracker()


# ---------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------


def _batch_ms(batch_seconds: float) -> int:
    ms = round(batch_seconds * 1000)
    if ms <= 0 or int(batch_seconds * 1000) != ms:
        raise ValueError(f"batch_seconds={batch_seconds!r} must be a positive whole number of milliseconds")
    return ms


def _input_factory(ssc: Any, inputs: Sequence[Batches] | None) -> MakeInput:
    """Build ``make_input``; with ``inputs``, the i-th call uses ``inputs[i]`` instead of its argument.

    Note that pyspark's ``queueStream([])`` raises IndexError: give at least one batch.
    """
    calls = 0

    def make_input(batches: Batches) -> Any:
        nonlocal calls
        index, calls = calls, calls + 1
        if inputs is not None:
            if index >= len(inputs):
                raise ValueError(f"program made input #{index} but only {len(inputs)} inputs were given")
            batches = inputs[index]
        return ssc.queueStream([list(batch) for batch in batches], oneAtATime=True)

    return make_input


def _program_kwargs(program: Program, tmp_dir: str, batch_seconds: float) -> dict[str, Any]:
    """Supply the optional keyword parameters a program asks for by name."""
    available = {"tmp_dir": tmp_dir, "batch_seconds": batch_seconds}
    params = inspect.signature(program).parameters
    unknown = [name for name in list(params)[2:] if name not in available]
    if unknown:
        raise TypeError(f"{program.__name__} asks for unknown parameters {unknown}")
    return {name: available[name] for name in list(params)[2:]}


def _wait_for_batches(ssc: Any, tracker: Any, num_batches: int, timeout: float) -> None:
    """Block until ``num_batches`` batches completed; surface context errors and time-outs."""
    deadline = time.monotonic() + timeout
    while not tracker.wait_for(num_batches, 0.05):
        # awaitTerminationOrTimeout re-raises an error reported by the streaming scheduler.
        if ssc.awaitTerminationOrTimeout(0.001):
            raise ReferenceRunError("the StreamingContext stopped before all batches completed")
        if time.monotonic() > deadline:
            done = len(tracker.snapshot())
            raise ReferenceRunError(f"timed out after {timeout:.1f}s with {done}/{num_batches} batches completed")


def _wait_for_idle(sc: Any, timeout: float = 10.0, quiet: float = 0.1) -> None:
    """Wait until the SparkContext has run no job for ``quiet`` seconds (bounded by ``timeout``)."""
    tracker = sc.statusTracker()
    deadline = time.monotonic() + timeout
    idle_since: float | None = None
    while time.monotonic() < deadline:
        now = time.monotonic()
        if tracker.getActiveJobsIds():
            idle_since = None
        elif idle_since is None:
            idle_since = now
        elif now - idle_since >= quiet:
            return
        time.sleep(0.02)


@dataclass(frozen=True)
class Engine:
    """An engine the driver runs conformance programs on: how it makes a context, stops it and words its errors."""

    name: str
    """In error messages: ``"<program> failed on <name>"``."""
    make_context: Callable[[Any, float], Any]
    """``(sc, batch_seconds)`` to the engine's StreamingContext."""
    stop: Callable[[Any, Any], None]
    """``(ssc, sc)``: stop the context (never the SparkContext) once the batches are in."""
    describe: Callable[[Exception], str]
    """The error text of a failed run (summarised by :func:`_summarise_error`)."""
    start_allowance: float
    """Seconds the default timeout allows beyond the batches' own time (a slow start)."""


def run_program(
    engine: Engine,
    program: Program,
    inputs: Sequence[Batches] | None,
    num_batches: int,
    batch_seconds: float,
    *,
    sc: Any,
    timeout: float | None,
) -> Results:
    """Run ``program`` on ``engine`` for exactly ``num_batches`` batches and return its outputs (see :func:`run_reference`).

    The one driver for both engines: ``make_input`` from ``inputs``, the optional keyword
    parameters, a listener's count of completed batches (never a fixed sleep), stdout
    captured, and the results keyed by batch index so runs on the two compare with ``==``.
    """
    if num_batches < 1:
        raise ValueError("num_batches must be at least 1")
    batch_ms = _batch_ms(batch_seconds)
    if timeout is None:
        timeout = engine.start_allowance + 3.0 * num_batches * batch_seconds

    with tempfile.TemporaryDirectory(prefix=f"aiodstream-conformance-{engine.name}-", ignore_cleanup_errors=True) as tmp_dir:
        ssc = engine.make_context(sc, batch_seconds)
        tracker = _make_tracker()
        ssc.addStreamingListener(tracker)
        sink = Sink()
        make_input = _input_factory(ssc, inputs)
        stdout = io.StringIO()
        try:
            with recording(sink):
                program(ssc, make_input, **_program_kwargs(program, tmp_dir, batch_seconds))
            with redirect_stdout(stdout):
                try:
                    ssc.start()
                    _wait_for_batches(ssc, tracker, num_batches, timeout)
                finally:
                    sink.close()
                    engine.stop(ssc, sc)
        except ReferenceRunError:
            raise
        except Exception as exc:
            raise _failure(f"{program.__name__} failed on {engine.name}", engine.describe(exc)) from exc

        return _collect_results(program, engine.name, tracker, sink, stdout.getvalue(), tmp_dir, batch_ms, num_batches)


def _pyspark_context(sc: Any, batch_seconds: float) -> Any:
    from pyspark.streaming import StreamingContext

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DStream is deprecated", category=FutureWarning)
        return StreamingContext(sc, batch_seconds)  # type: ignore[arg-type]  # pyspark says int; floats work


def _pyspark_stop(ssc: Any, sc: Any) -> None:
    # Not graceful: that would run the whole backlog of late batches.  A plain
    # stop drops queued batches but lets the running output operation finish
    # (a Python callback cannot be interrupted), so wait for it too.
    ssc.stop(stopSparkContext=False, stopGraceFully=False)
    _wait_for_idle(sc)


PYSPARK = Engine("pyspark", _pyspark_context, _pyspark_stop, str, start_allowance=30.0)
"""The real ``pyspark.streaming``: the oracle."""


def run_reference(
    program: Program,
    inputs: Sequence[Batches] | None = None,
    num_batches: int = 5,
    batch_seconds: float = DEFAULT_BATCH_SECONDS,
    *,
    sc: Any,
    timeout: float | None = None,
) -> Results:
    """Run ``program`` on pyspark.streaming for exactly ``num_batches`` batches and return its outputs.

    ``inputs`` optionally replaces the data of the program's ``make_input`` calls, in call
    order (``None`` keeps the program's own data).  ``sc`` is the test run's one
    SparkContext (the ``spark_context`` fixture); it is never stopped.  ``timeout`` (seconds) bounds the
    wait for the batches; the default allows for a slow start.  Raises
    :class:`ReferenceRunError` if a batch fails, the context dies or time runs out.
    """
    return run_program(PYSPARK, program, inputs, num_batches, batch_seconds, sc=sc, timeout=timeout)


def _collect_results(program: Program, engine: str, tracker: Any, sink: Sink, stdout: str, tmp_dir: str, batch_ms: int,
                     num_batches: int) -> Results:
    """The outputs of the first ``num_batches`` completed batches, keyed by batch index; a failed batch raises."""
    completed = tracker.snapshot()[:num_batches]
    first_ms = completed[0].time_ms
    for batch in completed:
        if batch.failures:
            index = _batch_index(batch.time_ms, first_ms, batch_ms)
            raise _failure(f"{program.__name__}: batch {index} failed on {engine}", batch.failures[0])
    results = _index_outputs(sink.snapshot(), first_ms, batch_ms, num_batches)
    if stdout:
        results["stdout"] = normalise_stdout(stdout, first_ms, batch_ms, num_batches)
    results.update(read_saved_files(tmp_dir, first_ms, batch_ms, num_batches))
    return results


def _batch_index(time_ms: int, first_ms: int, batch_ms: int) -> int:
    offset = time_ms - first_ms
    if offset < 0 or offset % batch_ms:
        raise ReferenceRunError(f"time {time_ms} is not a batch time after the first batch {first_ms} (interval {batch_ms} ms)")
    return offset // batch_ms


def _index_outputs(raw: dict[str, list[tuple[int, Any]]], first_ms: int, batch_ms: int, num_batches: int) -> Results:
    """Key recorded values by batch index and drop batches past ``num_batches``."""
    results: Results = {}
    for name, rows in raw.items():
        indexed = [(_batch_index(t, first_ms, batch_ms), value) for t, value in rows]
        results[name] = sorted((row for row in indexed if row[0] < num_batches), key=lambda row: row[0])
    return results


_PPRINT_RULE = "-------------------------------------------"
_PPRINT_HEADER = re.compile(rf"^{_PPRINT_RULE}\nTime: (?P<time>[^\n]*)\n{_PPRINT_RULE}\n", re.MULTILINE)


def normalise_stdout(text: str, first_ms: int, batch_ms: int, num_batches: int) -> list[tuple[int, str]]:
    """Split captured stdout into pprint blocks keyed by batch index.

    Each block keeps its exact text with the header's time replaced by ``{time}`` when it
    is exactly ``str(datetime.fromtimestamp(batch_ms / 1000))``; any other spelling is left
    as is (and will not match).  Text before the first header is keyed by index -1.  Blocks
    timed before the first batch come from an earlier context's last output operation
    (still finishing when that context stopped) and are dropped.
    """
    blocks: list[tuple[int, str]] = []
    matches = list(_PPRINT_HEADER.finditer(text))
    if not matches:
        return [(-1, text)]
    if matches[0].start() > 0:
        blocks.append((-1, text[: matches[0].start()]))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        block = text[match.start() : end]
        stamp = match.group("time")
        try:
            time_ms = round(datetime.fromisoformat(stamp).timestamp() * 1000)
        except ValueError:
            blocks.append((-1, block))
            continue
        if time_ms < first_ms:
            continue
        index = _batch_index(time_ms, first_ms, batch_ms)
        if index >= num_batches:
            continue
        if stamp == str(datetime.fromtimestamp(time_ms / 1000)):
            block = block.replace(f"Time: {stamp}\n", "Time: {time}\n", 1)
        blocks.append((index, block))
    return _merge_by_index(blocks)


def _merge_by_index(blocks: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Concatenate consecutive blocks of the same batch (several pprints per batch)."""
    merged: list[tuple[int, str]] = []
    for index, block in blocks:
        if merged and merged[-1][0] == index:
            merged[-1] = (index, merged[-1][1] + block)
        else:
            merged.append((index, block))
    return merged


_SAVED_DIR = re.compile(r"^(?P<prefix>.+)-(?P<ms>\d{10,})(?:\.(?P<suffix>.+))?$")


def read_saved_files(directory: str, first_ms: int, batch_ms: int, num_batches: int) -> Results:
    """Read back ``saveAsTextFiles`` output under ``directory``: one list of lines per part file."""
    results: Results = {}
    for entry in sorted(os.listdir(directory)):
        match = _SAVED_DIR.match(entry)
        path = os.path.join(directory, entry)
        if match is None or not os.path.isdir(path):
            continue
        index = _batch_index(int(match.group("ms")), first_ms, batch_ms)
        if index >= num_batches:
            continue
        suffix = match.group("suffix")
        name = f"saved:{match.group('prefix')}" + (f".{suffix}" if suffix else "")
        parts = []
        for part in sorted(os.listdir(path)):
            if part.startswith("part-"):
                with open(os.path.join(path, part), encoding="utf-8") as fh:
                    parts.append(fh.read().splitlines())
        results.setdefault(name, []).append((index, parts))
    for rows in results.values():
        rows.sort(key=lambda row: row[0])
    return results
