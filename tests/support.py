"""Shared test doubles: a scripted job graph, a recording batch hook, a capture of the library's log events, the
manual clock's steps (advance, then wait until idle or parked; a DStream program's or a Pipeline's batches run on
them), and the checkpoint file managers' common contract."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from scheduler import (
    LOGGER_ROOT,
    CheckpointPath,
    Duration,
    InputInfoTracker,
    Job,
    ManualClock,
    Milliseconds,
    RecurringTimer,
    StreamInputInfo,
    Time,
    event_fields,
)
from tests.crash import Children, spawn


class _EventCapture(logging.Handler):
    def __init__(self, into: list[dict[str, Any]], exceptions: bool) -> None:
        super().__init__(logging.DEBUG)
        self.into = into
        self.exceptions = exceptions

    def emit(self, record: logging.LogRecord) -> None:
        fields = event_fields(record)
        assert fields is not None, f"a record under {LOGGER_ROOT!r} without event fields: {record.getMessage()!r}"
        event = {**fields, "log_level": record.levelname.lower()}
        if record.exc_info:
            event["exc_info"] = True
            if self.exceptions:
                event["exception"] = record.exc_info[1]
        self.into.append(event)


@contextlib.contextmanager
def capture_events(level: int = logging.DEBUG, *, exceptions: bool = False) -> Iterator[list[dict[str, Any]]]:
    """Every aiodstream log event at ``level`` or above while the block runs, as dicts.

    Each holds the event's fields plus ``event`` and ``log_level`` (lower case): the
    shape of structlog's ``capture_logs``, taken from the standard logging tree the library
    writes to, so it also proves the events reach a host's handlers. ``exceptions``: an event
    logged with one also holds it, as ``exception``.
    """
    captured: list[dict[str, Any]] = []
    root = logging.getLogger(LOGGER_ROOT)
    handler = _EventCapture(captured, exceptions)
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield captured
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


class ScriptedGraph:
    """A JobGraph whose jobs are built by ``make_jobs(time)``; records every call in ``calls``."""

    def __init__(self, make_jobs: Callable[[Time], Sequence[Job]], records: Callable[[Time], int] | None = None) -> None:
        self.make_jobs = make_jobs
        self.records = records
        self.calls: list[tuple[str, int]] = []
        self.zero_time: Time | None = None
        self.stopped = False

    def start(self, zero_time: Time, input_infos: InputInfoTracker) -> None:
        self.zero_time = zero_time
        self.input_infos = input_infos
        self.calls.append(("start", zero_time.milliseconds))

    async def allocate_input(self, time: Time) -> None:
        self.calls.append(("allocate", time.milliseconds))

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        self.calls.append(("generate", time.milliseconds))
        if self.records is not None:
            self.input_infos.report_info(time, StreamInputInfo(0, self.records(time)))
        return self.make_jobs(time)

    def clear_metadata(self, time: Time) -> None:
        self.calls.append(("clear", time.milliseconds))

    async def stop(self) -> None:
        self.stopped = True


class RecordingHook:
    """A BatchHook that records what it is told."""

    def __init__(self) -> None:
        self.generated: list[int] = []
        self.completed: list[int] = []
        self.pending_seen: list[list[int]] = []

    async def batch_generated(self, time: Time, pending_times: Sequence[Time]) -> None:
        self.generated.append(time.milliseconds)
        self.pending_seen.append([t.milliseconds for t in pending_times])

    async def batch_completed(self, time: Time) -> None:
        self.completed.append(time.milliseconds)


class Gate:
    """Async jobs that block until the test opens them, counting how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.max_running = 0
        self.started: list[str] = []
        self._open: dict[str, anyio.Event] = {}
        self._changed: anyio.Event | None = None

    def job(self, time: Time, key: str) -> Job:
        async def run() -> None:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.started.append(key)
            self._notify()
            try:
                await self._event(key).wait()
            finally:
                self.running -= 1
                self._notify()

        return Job(time, run, name=key)

    def _event(self, key: str) -> anyio.Event:
        if key not in self._open:
            self._open[key] = anyio.Event()
        return self._open[key]

    def open(self, key: str) -> None:
        self._event(key).set()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_started(self, *keys: str) -> None:
        while not all(k in self.started for k in keys):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()


def held_then_recorded(gate: Gate, done: list[int]) -> Callable[[Time], list[Job]]:
    """A :class:`ScriptedGraph`'s jobs: the batch at 1000 ms holds on ``gate`` (key ``"1000"``), every later one appends
    its time to ``done`` (the batches a stop behind the held one lets run)."""

    def make(t: Time) -> list[Job]:
        if t.milliseconds == 1000:
            return [gate.job(t, "1000")]

        async def later() -> None:
            done.append(t.milliseconds)

        return [Job(t, later, name=str(t.milliseconds))]

    return make


async def hold_first_then_queue(runtime: Any, clock: ManualClock, gate: Gate, queued: int) -> None:
    """With :func:`held_then_recorded`'s jobs: the batch at 1000 ms runs, held on ``gate``, and ``queued`` more batches
    are generated behind it (the runtime's timer has ticked up to ``1000 * (queued + 1)`` ms)."""
    clock.advance(Milliseconds(1000))
    await gate.wait_started("1000")
    clock.advance(Milliseconds(1000 * queued))
    await wait_until(lambda: runtime.scheduler.generator.timer.last_tick == Time(1000 * (queued + 1)))


def sleeping_job(clock: ManualClock, time: Time, ms: int, name: str = "op") -> Job:
    """An async job that takes ``ms`` of manual time."""

    async def run() -> None:
        await clock.sleep(Milliseconds(ms))

    return Job(time, run, name=name)


def noop_job(time: Time, name: str = "op", sink: list[Any] | None = None) -> Job:
    """An async job that records its batch time."""

    async def run() -> None:
        if sink is not None:
            sink.append((name, time.milliseconds))

    return Job(time, run, name=name)


class Idles(Protocol):
    """What :func:`advance` waits on: a runtime or scheduler that says when the batches due have completed."""

    async def wait_until_idle(self) -> None: ...


async def advance(runtime: Idles, clock: ManualClock, ms: Duration | int = 1000, *, times: int = 1) -> None:
    """Move ``clock`` by ``ms``, ``times`` times, each time waiting until ``runtime`` has completed the batches due."""
    for _ in range(times):
        clock.advance(ms)
        await runtime.wait_until_idle()


def run_dstream_batches(ssc: Any, clock: ManualClock, count: int, interval_ms: int = 1000) -> list[BaseException]:
    """Start the StreamingContext ``ssc``, run ``count`` batches one at a time, stop (not its SparkContext); the error a
    failed batch reported, if any."""
    errors: list[BaseException] = []

    async def driver() -> None:
        async with ssc:
            await ssc.start_async()
            await ssc.runtime.wait_until_idle()
            await advance(ssc.runtime, clock, interval_ms, times=count)
            try:
                await ssc.await_termination_async(0)
            except Exception as exc:  # a failed batch, reported to the waiter
                errors.append(exc)
            await ssc.stop_async(stopSparkContext=False)

    anyio.run(driver)
    return errors


async def run_pipeline_for(pipeline: Any, checkpoint: Path, start_ms: int, ms: int) -> None:
    """Run ``pipeline`` in a StreamingRuntime with one-second batches and ``checkpoint`` on a manual clock from
    ``start_ms``, advance it ``ms`` and stop it (a restart test's run: stop here, resume from there)."""
    from streaming import StreamingRuntime

    clock = ManualClock(start_ms)
    async with StreamingRuntime(pipeline, Milliseconds(1000), clock=clock, checkpoint_location=checkpoint) as rt:
        await rt.start()
        await advance(rt, clock, ms)
        await rt.stop()


async def advance_until_parked(clock: ManualClock, ms: Duration | int, sleepers: int = 1) -> None:
    """Move ``clock`` by ``ms``, then wait until ``sleepers`` tasks sleep on it again (a timer fired what was due and parked).

    Advancing before the timer is parked would race it (Spark's SPARK-16002); this waits on
    the clock's own count of sleepers, never on real time.
    """
    clock.advance(ms)
    await clock.wait_for_sleepers(sleepers)


async def start_parked(tg: anyio.abc.TaskGroup, timer: RecurringTimer, clock: ManualClock, start: Time | None = None) -> Time:
    """Start ``timer`` in ``tg`` (from ``start``, as ``timer.run`` takes it) and wait until it sleeps on ``clock``; its first tick."""
    first: Time = await tg.start(timer.run, start)
    await clock.wait_for_sleepers(1)
    return first


async def wait_until(condition: Callable[[], bool]) -> None:
    """Yield to the event loop until ``condition()`` holds (never sleeps; guard with a timeout)."""
    with anyio.fail_after(5):
        while not condition():
            await anyio.lowlevel.checkpoint()


def check_file_manager_contract(root: CheckpointPath) -> str:
    """What every checkpoint file manager keeps, from an empty ``root`` it has not created; returns the lock's guarantee.

    Afterwards ``root`` holds ``0`` (``b"first"``, created once) and ``r`` (``b"22"``, replaced),
    and with a ``"lock"`` guarantee the lock file too (a lease file is removed at release).
    """
    assert not root.exists() and root.listdir() == [] and root.read_bytes() is None
    root.mkdirs()
    root.mkdirs()  # again: nothing to do
    assert root.is_dir() and not root.is_file()
    assert (root / "0").create_new(b"first")
    assert not (root / "0").create_new(b"second")
    assert (root / "0").read_bytes() == b"first" and (root / "0").is_file()
    (root / "r").write_replacing(b"1")
    (root / "r").write_replacing(b"22")
    assert (root / "r").read_bytes() == b"22"
    assert sorted(root.listdir()) == ["0", "r"]  # no temporary file stays (nor, through Hadoop, a checksum file)
    (root / "d").mkdirs()
    assert (root / "d").rename_new(root / "e") and not (root / "0").rename_new(root / "r")
    assert (root / "0").read_bytes() == b"first" and (root / "r").read_bytes() == b"22"
    assert (root / "e").delete(recursive=True) and not (root / "e").exists() and not (root / "gone").delete()
    # The hold on the directory: exclusive where the file system has one, "detect" (held by nobody) where it has not.
    held = root.files.lock(root.path, b'{"holder": 1}')
    assert held is not None and held.guarantee in ("lock", "lease", "detect")
    second = root.files.lock(root.path, b'{"holder": 2}')
    assert (second is None) is (held.guarantee != "detect")
    held.release()
    held.release()  # idempotent
    again = root.files.lock(root.path, b'{"holder": 3}')
    assert again is not None
    again.release()
    guarantee: str = held.guarantee
    return guarantee


def unreadable_directory(monkeypatch: Any, directory: Path) -> None:
    """Make ``directory`` behave for this process as mode 000 does for a user who is not its owner, also when the
    tests run as root (whom the kernel lets through): listing it, and looking at anything inside, raise
    ``PermissionError`` naming the path; looking at the directory itself still works."""
    top = os.fspath(directory)
    real_stat, real_lstat, real_listdir = os.stat, os.lstat, os.listdir

    def refused(path: Any, *, itself: bool) -> bool:
        if isinstance(path, int):
            return False
        text = os.fspath(path)
        return text.startswith(top + os.sep) or (itself and text == top)

    def deny(path: Any) -> PermissionError:
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if refused(path, itself=False):
            raise deny(path)
        return real_stat(path, *args, **kwargs)

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if refused(path, itself=False):
            raise deny(path)
        return real_lstat(path, *args, **kwargs)

    def listdir(path: Any = ".") -> list[str]:
        if refused(path, itself=True):
            raise deny(path)
        return real_listdir(path)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "listdir", listdir)


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped (for holder records whose process is gone)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(child.stdout)


HOLDER_CHILD = Path(__file__).with_name("scheduler") / "checkpoint_holder_child.py"


def file_digests(root: Path) -> dict[str, str]:
    """Every file under ``root`` by relative path, with the SHA-256 of its bytes (a checkpoint left byte-identical compares equal)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def checkpoint_held_by_another_process(checkpoint: Path) -> Iterator[tuple[str, str, Callable[[], None]]]:
    """A child process holding ``checkpoint`` mid-write (``checkpoint_holder_child.py``): ``(pid, in-flight file, finish)``.

    ``finish()`` lets the child add its entry (asserting the add succeeded) and waits for it to
    exit; a child still running at the end is killed.
    """
    with Children() as children:
        child = children.add(spawn([str(HOLDER_CHILD), str(checkpoint)], stdin=True))
        assert child.stdout is not None and child.stdin is not None
        stdin, stdout = child.stdin, child.stdout

        def finish() -> None:
            stdin.write("go\n")
            stdin.flush()
            assert stdout.readline().split() == ["added", "True"]
            assert child.wait(timeout=60) == 0

        word, pid, in_flight = stdout.readline().split()
        assert word == "ready"
        yield pid, in_flight, finish


CONNECT_ALL = os.environ.get("AIODSTREAM_CONNECT", "").strip().lower() == "all"
"""Whether this run takes every Connect test (``AIODSTREAM_CONNECT=all``) rather than the default few."""


def connect_opt_in(default_instead: str) -> Any:
    """Run a test only with ``AIODSTREAM_CONNECT=all``; ``default_instead``: what of it the default run covers."""
    import pytest

    return pytest.mark.skipif(not CONNECT_ALL, reason=f"opt-in (AIODSTREAM_CONNECT=all): {default_instead}")


def connect_params(names: Sequence[str], defaults: Sequence[str], not_yet: dict[str, str] | None = None) -> list[Any]:
    """``names`` as pytest parameters for the Connect tests: those in ``defaults`` run; the rest only with
    ``AIODSTREAM_CONNECT=all`` (skipped otherwise, saying so); those in ``not_yet`` are skipped with why."""
    import pytest

    not_yet = not_yet or {}
    params: list[Any] = []
    for name in names:
        if name in not_yet:
            params.append(pytest.param(name, marks=pytest.mark.skip(reason=f"not on Spark Connect yet: {not_yet[name]}")))
        elif name in defaults:
            params.append(name)
        else:
            params.append(pytest.param(name, marks=connect_opt_in("the default run covers Connect with " + ", ".join(defaults))))
    return params


def holds(root: object, target: object) -> bool:
    """Whether ``target`` is reachable from ``root`` by references (classes, modules and their globals not followed).

    For "this object lets go of that one": unlike a weak reference checked after ``gc.collect()``, it does not depend
    on a worker thread that may still hold the target for a moment after its last job. A function's or a frame's
    module globals are not followed: through them every object of the process is reachable, and the walk took a
    minute in a test run's large process on a loaded machine (what a module holds for good is not an object's hold).
    """
    import gc
    import types

    seen = {id(root)} | {id(vars(module)) for module in list(sys.modules.values()) if module is not None}
    todo = [root]
    while todo:
        for referent in gc.get_referents(todo.pop()):
            if referent is target:
                return True
            if id(referent) not in seen and not isinstance(referent, (type, types.ModuleType)):
                seen.add(id(referent))
                todo.append(referent)
    return False
