"""Crash test: SIGKILL a checkpointed file pipeline at random moments, restart it each time, prove exactly-once output.

The child (``crash_child.py``) reads a directory with a DirectorySource and writes each batch with
the batch-time-idempotent FileSink, on the system clock with a short interval. Each round it is
killed either at a chosen point inside a file write (a temp file written but not linked, an
offsets entry in place before the batch's jobs, output in place before the commit, ...) or from
outside at a random moment; new input arrives between and during rounds. A final AvailableNow
run drains what is left. Then every input record must be in the sink exactly once.

The rounds alternate between asyncio and trio (7 kill points, 2 backends: every point is hit on
both), so each backend resumes what the other left, at the cost of one run rather than two.

Real time is inherent here (a child process on the system clock), so this driver sleeps in
short, bounded steps; everything else in the suite runs on manual clocks.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from scheduler import Checkpoint, Milliseconds
from tests.anyio_support import BACKENDS
from tests.crash import KILL_AFTER, KILL_AT, KILL_LOG, child_env, err_tail, kill, kills_logged, spawn, started

CHILD = Path(__file__).with_name("crash_child.py")
POINTS = ["offsets-temp", "offsets-linked", "sink-temp", "sink-linked", "commits-temp", "commits-linked", None]
ROUNDS = 28
INTERVAL_MS = 25
SEED = 20240611


class Input:
    """Writes input files the way a producer must: increasing names, hidden temp name, then rename."""

    def __init__(self, directory: Path, rng: random.Random) -> None:
        self.directory = directory
        self.rng = rng
        self.records: list[str] = []
        self.files = 0
        directory.mkdir()

    def add_file(self) -> None:
        name = f"{self.files:06d}.txt"
        lines = [f"{self.files}:{k}" for k in range(self.rng.randint(1, 5))]
        temp = self.directory / f".{name}.part"
        temp.write_text("".join(line + "\n" for line in lines))
        os.rename(temp, self.directory / name)
        self.records.extend(lines)
        self.files += 1


def start(mode: str, tmp: Path, env: dict[str, str], backend: str) -> subprocess.Popen[str]:
    return spawn([str(CHILD), str(tmp / "in"), str(tmp / "out"), str(tmp / "ck"), mode, str(INTERVAL_MS), backend], tmp, env)


@pytest.mark.timeout(150)
def test_sigkill_at_random_moments_never_loses_or_duplicates_output(tmp_path: Path) -> None:
    """After 28 SIGKILLs (inside writes, at random) and restarts, on asyncio and trio in turn, each record is output exactly once."""
    rng = random.Random(SEED)
    source = Input(tmp_path / "in", rng)
    base_env = child_env({KILL_LOG: str(tmp_path)})
    outcomes: collections.Counter[str] = collections.Counter()
    for round_ in range(ROUNDS):
        for _ in range(rng.randint(1, 3)):
            source.add_file()
        point = POINTS[round_ % len(POINTS)]  # every kind of moment, several times
        env = dict(base_env)
        if point is not None:
            env |= {KILL_AT: point, KILL_AFTER: str(rng.randint(1, 3))}
        logged_before = len(kills_logged(tmp_path))
        proc = start("run", tmp_path, env, BACKENDS[round_ % len(BACKENDS)])
        try:
            if not started(proc, 30):  # it may reach its kill point before saying so
                assert proc.wait(10) == -signal.SIGKILL, err_tail(tmp_path)
            deadline = time.monotonic() + rng.uniform(0.05, 0.5)
            while proc.poll() is None and time.monotonic() < deadline:
                if rng.random() < 0.3:
                    source.add_file()  # input arriving while the query runs
                time.sleep(0.02)
            killed_from_outside = proc.poll() is None
        finally:
            kill(proc)
        assert proc.returncode == -signal.SIGKILL, err_tail(tmp_path)
        # A child found dead killed itself at its point, and logged it; one still running when the test killed it may
        # have reached its point in between (then both kills went out, and its own came first).
        logged = len(kills_logged(tmp_path)) - logged_before
        assert logged in (0, 1) and (killed_from_outside or logged == 1), (killed_from_outside, logged)
        outcomes["inside" if logged else "outside"] += 1

    source.add_file()  # so the drain writes output, which also clears killed writers' temp files
    drain = start("drain", tmp_path, dict(base_env), BACKENDS[ROUNDS % len(BACKENDS)])
    try:
        assert drain.wait(60) == 0, err_tail(tmp_path)
    finally:
        kill(drain)

    kills = collections.Counter(kills_logged(tmp_path))
    # Every kind of moment was hit at least once, and the outside kills landed too.
    assert set(kills) == {p for p in POINTS if p is not None}, kills
    assert outcomes["outside"] > 0 and sum(kills.values()) == outcomes["inside"]

    # Every input record is in the sink exactly once.
    written: collections.Counter[str] = collections.Counter()
    times = []
    for f in sorted((tmp_path / "out").iterdir()):
        assert f.name.startswith("batch-") and f.name.endswith(".txt"), f.name  # leftover temp files were cleared
        times.append(int(f.name[len("batch-"):-len(".txt")]))
        written.update(f.read_text().splitlines())
    assert sorted(written) == sorted(source.records)
    assert max(written.values()) == 1
    # One file per batch time, each on the query's grid, and no batch left pending.
    assert len(times) == len(set(times))
    state = Checkpoint(tmp_path / "ck").describe()
    assert state.grid is not None and state.pending == ()
    grid = state.grid
    assert all((t - grid.zero_time.milliseconds) % INTERVAL_MS == 0 for t in times)
    assert grid.batch_duration == Milliseconds(INTERVAL_MS)
    assert not list((tmp_path / "ck").rglob("*.tmp"))
