"""Crash tests: SIGKILL a continuous program (file source -> file sink) at chosen and random moments, restart, prove exactly-once.

Lines are appended to two files (one partition each) while the child runs. It is killed between
an epoch's offsets entry and its commit, at the two moments that matter for the epoch commit (the
tasks' files written but not committed; the sink committed but the commits log not) and at
random moments, restarted each time, and a last run stops gracefully once everything is out.
Then the committed output must be every kept input line exactly once, each file's lines in
order, and the sink must have committed each epoch once (``sink-commits.log``), the epochs
consecutive from 0.

Two children: the query on threads of one process (no JVM: a kill and a restart take a second
or two, so the default run has one of these), and a getOrCreate program on Spark (a JVM per
run). ``AIODSTREAM_FAULTS=all`` adds a seeded schedule of several kills per run to both.

Real time is inherent (a child on the system clock), so the driver waits in short, bounded steps.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from streaming.continuous import FileSink
from tests.crash import (
    KILL_AFTER,
    KILL_AT,
    KILL_LOG,
    Children,
    child_env,
    err_tail,
    faults_all,
    kill,
    kill_delays,
    kills_logged,
    spawn,
    wait_started,
)

CHILD = Path(__file__).with_name("crash_child.py")
SEED = 20261125


class Input:
    """Appends numbered lines to two files, in whole lines."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.paths = [directory / "p0.txt", directory / "p1.txt"]
        self.lines: list[list[str]] = [[], []]
        for path in self.paths:
            path.touch()

    def append(self, rng: random.Random) -> None:
        p = rng.randrange(2)
        new = [f"p{p}-line-{len(self.lines[p]) + k}" for k in range(rng.randint(1, 6))]
        with open(self.paths[p], "a") as f:
            f.write("".join(line + "\n" for line in new))
        self.lines[p].extend(new)

    def expected(self, p: int) -> list[str]:
        return [line.upper() for line in self.lines[p] if not line.endswith("7")]


def start(tmp: Path, mode: str, kill: dict[str, str] | None = None) -> subprocess.Popen[str]:
    args = [str(CHILD), *(str(tmp / "in" / f"p{p}.txt") for p in range(2)), str(tmp / "out"), str(tmp / "ck"),
            str(tmp / "stop"), mode]
    return spawn(args, tmp, child_env(kill))


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


def feed_until(child: subprocess.Popen[str], source: Input, rng: random.Random, tmp: Path, done: float | int,
               timeout: float, pace: float = 0.03) -> None:
    """Append lines until the child dies (it kills itself) or, with ``done`` an epoch count, until that many are committed."""
    deadline = time.monotonic() + timeout
    while child.poll() is None and committed_epochs(tmp / "out") < done:
        assert time.monotonic() < deadline, f"the child never reached its kill point\n{err_tail(tmp)}"
        source.append(rng)
        time.sleep(pace)


def drain_and_check(children: Children, tmp: Path, mode: str, source: Input, rng: random.Random) -> None:
    """A last run: every line committed once, in order per file; a graceful stop; each epoch committed once by the sink."""
    out = tmp / "out"
    child = children.add(start(tmp, mode))
    wait_started(child, tmp)
    source.append(rng)
    deadline = time.monotonic() + 120
    while committed_by_partition(out) != [source.expected(0), source.expected(1)]:
        got = committed_by_partition(out)
        for p in range(2):  # never more than the input, never out of order: a prefix at all times
            assert got[p] == source.expected(p)[: len(got[p])], f"partition {p}: {got[p][-5:]}"
        assert time.monotonic() < deadline, "lines still missing"
        assert child.poll() is None, err_tail(tmp)
        time.sleep(0.05)
    (tmp / "stop").touch()
    assert child.wait(timeout=60) == 0, err_tail(tmp)

    assert committed_by_partition(out) == [source.expected(0), source.expected(1)]
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")], "no uncommitted task file left behind"
    entries = sorted(int(n) for n in os.listdir(out / "_epochs") if n.isdigit())
    compacted = max((int(n.split(".")[0]) for n in os.listdir(out / "_epochs") if n.endswith(".compact")), default=-1)
    latest = FileSink(out).latest_committed_epoch()
    assert latest is not None and entries == list(range(compacted + 1, latest + 1)), \
        "the sink's epochs are consecutive from 0 (its compaction's, then its entries)"
    committed = [int(e) for e in (tmp / "sink-commits.log").read_text().split()]
    assert sorted(committed) == sorted(set(committed)), "no epoch was committed twice"
    assert set(committed) <= set(range(latest + 1))
    commits = sorted(int(n) for n in os.listdir(tmp / "ck" / "commits") if n.isdigit())
    assert commits[-1] == latest, "the commits log caught up with the sink"


def kill_between_offsets_and_commit(children: Children, tmp: Path, mode: str, source: Input, rng: random.Random,
                                    after: int) -> None:
    """A run that kills itself once its ``after``-th offsets entry is in place, before that epoch commits."""
    epochs = committed_epochs(tmp / "out")
    child = children.add(start(tmp, mode, {KILL_AT: "offsets-linked", KILL_AFTER: str(after)}))
    feed_until(child, source, rng, tmp, done=float("inf"), timeout=120)
    assert child.wait(timeout=30) == -signal.SIGKILL, err_tail(tmp)
    # The run's n-th offsets entry is in place, and its epoch was not committed.
    assert sorted(int(n) for n in os.listdir(tmp / "ck" / "offsets") if n.isdigit())[-1] == epochs + after - 1
    assert committed_epochs(tmp / "out") <= epochs + after - 1
    source.append(rng)  # arrives while the program is down


def kill_at_random(children: Children, tmp: Path, mode: str, source: Input, rng: random.Random, life: float) -> None:
    """A run killed from outside ``life`` seconds after it committed its first epoch."""
    epochs = committed_epochs(tmp / "out")
    child = children.add(start(tmp, mode))
    wait_started(child, tmp)
    feed_until(child, source, rng, tmp, done=epochs + 1, timeout=60)
    deadline = time.monotonic() + life
    while time.monotonic() < deadline and child.poll() is None:  # somewhere in an epoch: reading, writing, committing
        source.append(rng)
        time.sleep(rng.uniform(0.0, 0.05))
    assert kill(child) == -signal.SIGKILL, err_tail(tmp)
    source.append(rng)


@pytest.mark.timeout(120)
def test_a_continuous_driver_killed_between_its_offsets_entry_and_its_commit_resumes_exactly(tmp_path: Path) -> None:
    """Tasks on threads: SIGKILLed right after an epoch's offsets entry, restarted: each line out once, each epoch committed once."""
    rng = random.Random(SEED)
    source = Input(tmp_path / "in")
    with Children() as children:
        kill_between_offsets_and_commit(children, tmp_path, "threads", source, rng, after=3)
        drain_and_check(children, tmp_path, "threads", source, rng)
    assert sum(map(len, source.lines)) > 10


KILLS_PER_RUN = 10
"""The seeded schedule's kills with AIODSTREAM_FAULTS=all (each run is killed once; the program as a whole many times)."""
MOMENTS = ["offsets-linked", "outside", "offsets-temp", "commits-temp", "outside", "commits-linked"]
"""Where the kills land, in turn: inside the driver's log writes (:func:`tests.crash.install_kill_point`) or from outside."""


@pytest.mark.timeout(300)
@pytest.mark.skipif(not faults_all(), reason="slow fault injection: set AIODSTREAM_FAULTS=all")
def test_a_continuous_driver_killed_many_times_at_seeded_moments_outputs_each_line_once(tmp_path: Path) -> None:
    """Tasks on threads: ten SIGKILLs (between offsets and commit, inside the commits log's write, at random), then a drain: exact."""
    rng = random.Random(SEED + 1)
    source = Input(tmp_path / "in")
    moments = [MOMENTS[k % len(MOMENTS)] for k in range(KILLS_PER_RUN)]
    with Children() as children:
        for moment, life in zip(moments, kill_delays(rng, KILLS_PER_RUN, 0.0, 1.0), strict=True):
            if moment == "outside":
                kill_at_random(children, tmp_path, "threads", source, rng, life)
            else:  # the n-th time the run gets there, n seeded
                env = {KILL_AT: moment, KILL_AFTER: str(rng.randint(1, 6)), KILL_LOG: str(tmp_path)}
                child = children.add(start(tmp_path, "threads", env))
                feed_until(child, source, rng, tmp_path, done=float("inf"), timeout=120)
                assert child.wait(timeout=30) == -signal.SIGKILL, err_tail(tmp_path)
                source.append(rng)
        drain_and_check(children, tmp_path, "threads", source, rng)
    assert kills_logged(tmp_path) == [m for m in moments if m != "outside"]


@pytest.mark.spark
@pytest.mark.timeout(900)  # JVM starts and real-time epochs on a loaded machine
def test_sigkilled_continuous_program_writes_every_line_exactly_once(tmp_path: Path) -> None:
    """On Spark: kills from outside, before the sink's commit, between the sink's commit and the commits log, and (with
    AIODSTREAM_FAULTS=all) between an offsets entry and its commit and at more random moments: nothing lost or doubled."""
    rng = random.Random(SEED)
    source = Input(tmp_path / "in")
    kills: list[str | None] = [None, "before-sink", "after-sink"]  # None: from outside at a random moment
    if faults_all():
        kills += ["offsets-linked", None, None]
    with Children() as children:
        for kill in kills:
            if kill is None:
                kill_at_random(children, tmp_path, "spark", source, rng, rng.uniform(0.0, 0.5))
            elif kill == "offsets-linked":
                kill_between_offsets_and_commit(children, tmp_path, "spark", source, rng, after=2)
            else:
                child = children.add(start(tmp_path, "spark", {"AIODSTREAM_CONTINUOUS_KILL": f"{kill}:0"}))
                feed_until(child, source, rng, tmp_path, done=float("inf"), timeout=120, pace=0.05)
                assert child.wait(timeout=30) == -signal.SIGKILL, err_tail(tmp_path)
                source.append(rng)
        drain_and_check(children, tmp_path, "spark", source, rng)
    assert sum(map(len, source.lines)) > 50
