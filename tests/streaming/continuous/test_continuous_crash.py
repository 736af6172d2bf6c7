"""Crash test on real Spark: SIGKILL a continuous getOrCreate program (file source -> file sink), restart, prove exactly-once.

Lines are appended to two files (one partition each) while the child runs. It is killed at
random moments and at the two moments that matter for the epoch commit (the tasks' files
written but not committed; the sink committed but the commits log not), restarted each time
through ``getOrCreate`` (the graph and the Continuous trigger come from the checkpoint), and a
last run stops gracefully once everything is out. Then the committed output must be every
kept input line exactly once, each file's lines in order.

Real time is inherent (a child with its own Spark on the system clock), so the driver waits in
short, bounded steps.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streaming.continuous import FileSink
from tests.streaming.test_dstream_crash import ROOT, wait_started

pytestmark = pytest.mark.spark

CHILD = Path(__file__).with_name("crash_child.py")
SEED = 20261125
KILLS = [None, "before-sink", "after-sink"]  # None: SIGKILL from outside at a random moment


class Input:
    """Appends numbered lines to two files, in whole lines."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.paths = [directory / "p0.txt", directory / "p1.txt"]
        self.lines: list[list[str]] = [[], []]

    def append(self, rng: random.Random) -> None:
        p = rng.randrange(2)
        new = [f"p{p}-line-{len(self.lines[p]) + k}" for k in range(rng.randint(1, 6))]
        with open(self.paths[p], "a") as f:
            f.write("".join(line + "\n" for line in new))
        self.lines[p].extend(new)

    def expected(self, p: int) -> list[str]:
        return [line.upper() for line in self.lines[p] if not line.endswith("7")]


def spawn(tmp: Path, kill: str | None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AIODSTREAM_CONTINUOUS_KILL", None)
    if kill is not None:
        env["AIODSTREAM_CONTINUOUS_KILL"] = kill
    args = [sys.executable, str(CHILD), *(str(tmp / "in" / f"p{p}.txt") for p in range(2)), str(tmp / "out"), str(tmp / "ck"),
            str(tmp / "stop")]
    with open(tmp / "child.err", "a") as err:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT)


def committed_epochs(out: Path) -> int:
    try:
        return len([n for n in os.listdir(out / "_epochs") if n.isdigit()])
    except FileNotFoundError:
        return 0


def committed_by_partition(out: Path) -> list[list[str]]:
    by_partition: list[list[str]] = [[], []]
    for line in FileSink.read_committed(out):
        by_partition[int(line[1])].append(line)
    return by_partition


@pytest.mark.timeout(500)  # four JVM starts and real-time epochs on a loaded machine
def test_sigkilled_continuous_program_writes_every_line_exactly_once(tmp_path: Path) -> None:
    """Kills from outside, before the sink's commit and between the sink's commit and the commits log: nothing lost or doubled."""
    rng = random.Random(SEED)
    source = Input(tmp_path / "in")
    out = tmp_path / "out"
    children: list[subprocess.Popen[str]] = []
    try:
        for kill in KILLS:
            epochs = committed_epochs(out)
            child = spawn(tmp_path, None if kill is None else f"{kill}:{0}")
            children.append(child)
            if kill is None:
                wait_started(child, tmp_path)
                deadline = time.monotonic() + 60
                while committed_epochs(out) < epochs + 3:
                    assert time.monotonic() < deadline and child.poll() is None, (tmp_path / "child.err").read_text()[-3000:]
                    source.append(rng)
                    time.sleep(0.03)
                for _ in range(rng.randint(1, 10)):  # somewhere in an epoch: reading, writing, committing
                    source.append(rng)
                    time.sleep(rng.uniform(0.0, 0.05))
                child.send_signal(signal.SIGKILL)
            else:
                deadline = time.monotonic() + 120
                while child.poll() is None:  # it kills itself at its first epoch commit
                    assert time.monotonic() < deadline, "the child never reached its kill point"
                    source.append(rng)
                    time.sleep(0.05)
            assert child.wait(timeout=30) == -signal.SIGKILL, (tmp_path / "child.err").read_text()[-3000:]
            source.append(rng)  # arrives while the program is down
        child = spawn(tmp_path, None)
        children.append(child)
        wait_started(child, tmp_path)
        source.append(rng)
        deadline = time.monotonic() + 120
        while committed_by_partition(out) != [source.expected(0), source.expected(1)]:
            got = committed_by_partition(out)
            for p in range(2):  # never more than the input, never out of order: a prefix at all times
                assert got[p] == source.expected(p)[: len(got[p])], f"partition {p}: {got[p][-5:]}"
            assert time.monotonic() < deadline, "lines still missing"
            assert child.poll() is None, (tmp_path / "child.err").read_text()[-3000:]
            time.sleep(0.1)
        (tmp_path / "stop").touch()
        assert child.wait(timeout=60) == 0, (tmp_path / "child.err").read_text()[-3000:]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()

    assert committed_by_partition(out) == [source.expected(0), source.expected(1)]
    assert sum(map(len, source.lines)) > 50
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")], "no uncommitted task file left behind"
    commits = sorted(int(n) for n in os.listdir(tmp_path / "ck" / "commits") if n.isdigit())
    assert commits[-1] == committed_epochs(out) - 1, "the commits log caught up with the sink"
