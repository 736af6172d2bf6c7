"""The one child-process harness: children to run or kill, their handshake, kill points inside file writes, seeded kill schedules.

Every test that runs a Python child (crash tests, examples, second drivers, logging and shutdown
programs) starts it here, from the repository root with the repository on ``PYTHONPATH``.

Test side: :func:`spawn` a child (stderr appended to ``<tmp>/child.err``, stdout piped),
:func:`wait_started` for its ``started`` line, :func:`kill` it, read its saved output
(:func:`complete_saves`, :func:`lines_of`). :class:`Children` kills whatever is left.
:func:`run_python` runs a child to its end (examples, programs that print one result line).

Child side: :func:`child_spark_context` and :func:`run_until_stopped` are the getOrCreate crash
programs' Spark and lifecycle (``started`` on stdout, a graceful stop once a file appears).

:func:`install_kill_point` makes a process SIGKILL itself at a chosen moment of a
file write (a temporary file written but not linked into place, or linked and nothing after),
the n-th time it gets there. In Spark's Python workers the same hook is installed by the daemon
module ``tests.fault_daemon`` (``spark.python.daemon.module``), with arrivals counted across
every process on the host, so that exactly the chosen arrivals die (a task's retry is a new
arrival), optionally taking their executor's JVM along.

Real time is inherent (children on the system clock), so these helpers wait in short, bounded steps.
"""

from __future__ import annotations

import logging
import os
import random
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "KILL_AFTER",
    "KILL_AT",
    "KILL_LOG",
    "ROOT",
    "Children",
    "child_env",
    "child_spark_context",
    "complete_saves",
    "err_tail",
    "executor_jvm_of",
    "faults_all",
    "install_kill_point",
    "kill",
    "kill_delays",
    "kills_logged",
    "lines_of",
    "run_python",
    "run_until_stopped",
    "spawn",
    "started",
    "wait_started",
]

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120.0

KILL_AT = "AIODSTREAM_KILL_AT"
"""``<point>`` or ``<point>:jvm``: where the child (or an executor's Python worker) SIGKILLs itself;
``:jvm`` kills its executor's JVM first (executors only)."""
KILL_AFTER = "AIODSTREAM_KILL_AFTER"
"""The n-th arrival at the point dies (default 1); a list (``3,8:jvm``) kills several times."""
KILL_LOG = "AIODSTREAM_KILL_LOG"
"""A directory: each kill notes its point in ``kills.log`` there; arrivals are counted there across processes."""
FAULTS_VARIABLE = "AIODSTREAM_FAULTS"


def faults_all() -> bool:
    """Whether the slow fault-injection runs are asked for (``AIODSTREAM_FAULTS=all``)."""
    return os.environ.get(FAULTS_VARIABLE) == "all"


# -- test side --


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the repository first on ``PYTHONPATH``, no kill point inherited, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIODSTREAM_CRASH_AT", "AIODSTREAM_CRASH_AFTER", "AIODSTREAM_KILL", "AIODSTREAM_CONTINUOUS_KILL"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra or {})
    return env


def spawn(args: Sequence[str], tmp: Path | None = None, env: Mapping[str, str] | None = None, *,
          stdin: bool = False) -> subprocess.Popen[str]:
    """``python <args>`` from the repository root, stdout piped, stderr appended to ``<tmp>/child.err``.

    Without ``tmp`` stderr is this process's; with ``stdin`` the child's stdin is a pipe too
    (for children that wait for a line, as the one-writer tests' second drivers do).
    """
    env = dict(env if env is not None else child_env())
    stdin_pipe = subprocess.PIPE if stdin else None
    if tmp is None:
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdin=stdin_pipe, stdout=subprocess.PIPE,
                                text=True)
    with open(tmp / "child.err", "a") as err:
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdin=stdin_pipe, stdout=subprocess.PIPE,
                                stderr=err, text=True)


def run_python(args: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python <args>`` from the repository root to its end (``child_env()`` unless ``env``), its output captured as text."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=dict(env if env is not None else child_env()),
                          capture_output=True, text=True, timeout=timeout, check=False)


def kill(child: subprocess.Popen[str]) -> int | None:
    """SIGKILL ``child`` (if it still runs) and reap it; its return code."""
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    return child.wait()


def err_tail(tmp: Path, chars: int = 3000) -> str:
    """The end of the children's stderr (for assertion messages)."""
    try:
        return (tmp / "child.err").read_text()[-chars:]
    except FileNotFoundError:
        return ""


def _first_line(child: subprocess.Popen[str], timeout: float) -> str:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    return child.stdout.readline() if ready else ""


def started(child: subprocess.Popen[str], timeout: float = START_TIMEOUT_S) -> bool:
    """Whether the child's first line, within ``timeout`` seconds, is ``started`` (a child that dies first says nothing)."""
    return _first_line(child, timeout).strip() == "started"


def wait_started(child: subprocess.Popen[str], tmp: Path, timeout: float = START_TIMEOUT_S) -> None:
    """Wait for the child's ``started`` line; kill it and fail with its stderr if another line (or none) comes."""
    line = _first_line(child, timeout)
    if line.strip() != "started":
        child.kill()
        raise AssertionError(f"child did not start: {line!r}\n{err_tail(tmp)}")


class Children:
    """The children a test spawned; on exit, any still running is killed and reaped."""

    def __init__(self) -> None:
        self.all: list[subprocess.Popen[str]] = []

    def add(self, child: subprocess.Popen[str]) -> subprocess.Popen[str]:
        self.all.append(child)
        return child

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.all:
            if child.poll() is None:
                child.kill()
                child.wait()


def kill_delays(rng: random.Random, kills: int, low: float, high: float) -> list[float]:
    """A seeded schedule: how long each of ``kills`` runs lives after it started (uniform in [low, high) seconds)."""
    return [rng.uniform(low, high) for _ in range(kills)]


def complete_saves(out: Path, kind: str) -> dict[int, Path]:
    """The batch directories of ``kind`` whose save finished (Hadoop's _SUCCESS marker), by batch time."""
    found = {}
    for path in out.glob(f"{kind}-*"):
        if (path / "_SUCCESS").exists():
            found[int(path.name.split("-", 1)[1])] = path
    return found


def lines_of(directory: Path) -> list[str]:
    """The lines of a saved batch's part files, in part order."""
    return [line for part in sorted(directory.glob("part-*")) for line in part.read_text().splitlines()]


def kills_logged(directory: Path) -> list[str]:
    """The points the children killed themselves at (from ``<directory>/kills.log``), in order."""
    try:
        return (directory / "kills.log").read_text().split()
    except FileNotFoundError:
        return []


# -- child side --


MAX_RUN_S = 180
"""How long :func:`run_until_stopped` runs at the most when its stop file never appears."""


def child_spark_context(app_name: str) -> Any:
    """A crash child's local[2] Spark, or the test cluster's (the engine's log on stderr if AIODSTREAM_CRASH_LOG_LEVEL says so)."""
    level = os.environ.get("AIODSTREAM_CRASH_LOG_LEVEL")
    if level is not None:  # the engine's log on stderr, for debugging a failing run
        logging.basicConfig(level=int(level), stream=sys.stderr)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import aiodstream's task code
    from pyspark import SparkConf, SparkContext

    conf = (SparkConf().setMaster("local[2]").setAppName(app_name).set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false"))
    manager = os.environ.get("AIODSTREAM_CRASH_FILE_MANAGER")
    if manager:  # the checkpoint through Hadoop's FileSystem API (the crash test's hadoop variant)
        conf.set("spark.aiodstream.checkpoint.fileManager", manager)
    from tests.cluster import APP_CONF, MASTER_VARIABLE

    master = os.environ.get(MASTER_VARIABLE)
    if master:  # the crash test run on the test cluster (tests/streaming/test_cluster.py)
        conf.setMaster(master).setAll(list(APP_CONF.items()))
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    return sc


def run_until_stopped(checkpoint: str, setup: Callable[[], Any], stop_file: str, *, restore_graph: bool = True,
                      max_run_s: int = MAX_RUN_S) -> None:
    """getOrCreate (``restoreGraph=restore_graph``), start, say ``started``, run until ``stop_file`` appears (or
    ``max_run_s``), stop gracefully."""
    from streaming import StreamingContext

    ssc = StreamingContext.getOrCreate(checkpoint, setup, restoreGraph=restore_graph)
    ssc.start()
    print("started", flush=True)
    for _ in range(max_run_s * 5):
        if os.path.exists(stop_file) or ssc.awaitTerminationOrTimeout(0.2):
            break
    ssc.stop(stopSparkContext=True, stopGraceFully=True)
    print("stopped", flush=True)


def executor_jvm_of(worker_pid: int) -> int:
    """The pid of the executor JVM that started a Python worker (the worker's daemon's parent).

    Raises:
        RuntimeError: that process is not a Spark executor (e.g. a local-mode driver): never killed.
    """
    daemon = _parent_of(worker_pid)
    jvm = _parent_of(daemon)
    command = Path(f"/proc/{jvm}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    if "CoarseGrainedExecutorBackend" not in command:
        raise RuntimeError(f"process {jvm} is not a Spark executor: {command[:200]!r}")
    return jvm


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])  # the field after the state, past the command's parentheses


def _arrive(log_dir: Path, point: str) -> int:
    """Count one arrival at ``point`` across every process on the host (a file created exclusively); its number."""
    n = 1
    while True:
        try:
            os.close(os.open(log_dir / f".arrival-{point}-{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return n
        except FileExistsError:
            n += 1


def install_kill_point(classify: Callable[[str], str | None], *, shared_count: bool = False) -> None:
    """SIGKILL this process at a moment of a file write, if ``AIODSTREAM_KILL_AT`` names one; a no-op otherwise.

    Every ``os.link`` and ``os.replace`` (how the checkpoint file managers put a written file
    in place) whose target ``classify`` names ``kind`` passes two points: ``<kind>-temp`` (the
    data is in a temporary file, not yet linked) and ``<kind>-linked`` (it is in place, nothing
    after has run). The ``AIODSTREAM_KILL_AFTER``-th arrival at the chosen point (in this
    process; with ``shared_count``, in every process on the host, counted in
    ``AIODSTREAM_KILL_LOG``) notes the point in ``kills.log`` there and dies; with
    ``<point>:jvm`` it first kills its Spark executor's JVM. ``AIODSTREAM_KILL_AFTER`` may list
    several arrivals (``3,8:jvm,14``: several kills in one run, each ``:jvm`` or ``:worker``
    overriding the point's victim).
    """
    env = os.environ
    spec = env.get(KILL_AT)
    if not spec:
        return
    point, _, default_victim = spec.partition(":")
    victims = {int(n): v or default_victim
               for n, _, v in (item.partition(":") for item in env.get(KILL_AFTER, "1").split(","))}
    log_dir = Path(env[KILL_LOG]) if env.get(KILL_LOG) else None
    if shared_count and log_dir is None:
        raise RuntimeError(f"{KILL_AT} in several processes needs {KILL_LOG}: the directory where their arrivals are counted")
    real_link, real_replace = os.link, os.replace
    seen = 0

    def reach(name: str) -> None:
        nonlocal seen
        if name != point:
            return
        seen += 1
        victim = victims.get(_arrive(log_dir, point) if log_dir is not None and shared_count else seen)
        if victim is None:
            return
        if log_dir is not None:
            with open(log_dir / "kills.log", "a") as f:
                f.write(f"{point}:{victim}\n" if victim else f"{point}\n")
        if victim == "jvm":
            os.kill(executor_jvm_of(os.getpid()), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    def around(real: Callable[..., None]) -> Callable[..., None]:
        def write(src: str | os.PathLike[str], dst: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
            kind = classify(os.fspath(dst))
            if kind is not None:
                reach(f"{kind}-temp")
            real(src, dst, *args, **kwargs)
            if kind is not None:
                reach(f"{kind}-linked")

        return write

    os.link = around(real_link)  # type: ignore[assignment]
    os.replace = around(real_replace)  # type: ignore[assignment]
