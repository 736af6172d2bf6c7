"""Crash test on real Spark: SIGKILL a getOrCreate file-stream program at random moments, restart it, prove exactly-once.

The child (``dstream_crash_child.py``), its checkpoint through Hadoop's FileSystem API on a
``file:`` URI, saves every batch's lines with ``saveAsTextFiles`` and
the running count of all lines (``updateStateByKey``) with another. Each round the test writes
input files while the child runs, kills it at a random moment once it has saved a few batches,
and writes more input while it is down; a last run stops gracefully. Then every input line must
be in exactly one saved batch, and the last running count must equal the number of lines: no
line lost, none counted twice, across kills in the middle of Spark jobs, saves and log writes.

Real time is inherent (a child process with its own Spark on the system clock), so the driver
waits in short, bounded steps. Each child starts a JVM, so one kill (and a restart that drains) keeps it near a minute.
"""

from __future__ import annotations

import ast
import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from tests.crash import (
    Children,
    child_env,
    complete_saves,
    err_tail,
    faults_all,
    kill,
    kill_delays,
    lines_of,
    spawn,
    wait_started,
)

pytestmark = pytest.mark.spark

CHILD = Path(__file__).with_name("dstream_crash_child.py")
ROUNDS = 4 if faults_all() else 1
"""Kills per run: each round starts a JVM, so one by default (the Pipeline crash test's 28 kills cover the log
writes in depth); a seeded schedule of four with ``AIODSTREAM_FAULTS=all``."""
SEED = 20261122


class Input:
    """Writes uniquely numbered lines in new files, moved into the watched directory whole."""

    def __init__(self, directory: Path, staging: Path) -> None:
        self.directory = directory
        self.staging = staging
        self.lines: list[str] = []
        directory.mkdir()
        staging.mkdir()

    def add_file(self, rng: random.Random) -> None:
        name = f"f{len(self.lines):06d}.txt"
        new = [f"line-{len(self.lines) + k}" for k in range(rng.randint(1, 4))]
        (self.staging / name).write_text("".join(line + "\n" for line in new))
        os.rename(self.staging / name, self.directory / name)  # the same file system: atomic
        self.lines.extend(new)


def start(tmp: Path) -> subprocess.Popen[str]:
    # Through Hadoop the checkpoint is a file: URI, as a cluster's would be an hdfs:// one.
    checkpoint = (tmp / "ck").as_uri()
    return spawn([str(CHILD), str(tmp / "in"), str(tmp / "out"), checkpoint, str(tmp / "stop")], tmp,
                 child_env({"AIODSTREAM_CRASH_FILE_MANAGER": "hadoop"}))


def wait_for_saves(out: Path, count: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while len(complete_saves(out, "count")) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} batches saved in {timeout}s")
        time.sleep(0.05)


def saved_lines(out: Path) -> list[str]:
    batches = complete_saves(out, "lines")
    return [line for t in sorted(batches) for line in lines_of(batches[t])]


@pytest.mark.timeout(400 * ROUNDS)  # JVM starts and real-time batches on a loaded machine
def test_sigkilled_getorcreate_program_saves_every_line_once_and_keeps_its_running_count(tmp_path: Path) -> None:
    """Every line in exactly one saved batch and the running count exact, the checkpoint through Hadoop's FileSystem API.

    Every log entry, the saved graph and the state snapshots' renames go through Hadoop on a
    ``file:`` URI (``spark.aiodstream.checkpoint.fileManager=hadoop``), and the restarted
    process reads them back through it. (The driver's-disk manager is killed the same way by
    ``test_graph_restore`` and, 28 times, by the Pipeline crash test.)
    """
    rng = random.Random(SEED)
    source = Input(tmp_path / "in", tmp_path / "staging")
    out = tmp_path / "out"
    with Children() as children:
        for delay in kill_delays(rng, ROUNDS, 0.0, 2.0):
            child = children.add(start(tmp_path))
            wait_started(child, tmp_path)
            saved = len(complete_saves(out, "count"))
            for _ in range(rng.randint(2, 4)):
                source.add_file(rng)
                time.sleep(rng.uniform(0.2, 0.8))
            wait_for_saves(out, saved + 2)
            time.sleep(delay)  # somewhere in a batch: a job, a save, a log write
            kill(child)
            source.add_file(rng)  # arrives while the program is down
        child = children.add(start(tmp_path))
        wait_started(child, tmp_path)
        source.add_file(rng)
        deadline = time.monotonic() + 300
        while sorted(saved_lines(out)) != sorted(source.lines):
            assert time.monotonic() < deadline, f"lines still missing: {sorted(set(source.lines) - set(saved_lines(out)))}"
            assert child.poll() is None, err_tail(tmp_path)
            time.sleep(0.1)
        (tmp_path / "stop").touch()
        assert child.wait(timeout=180) == 0, err_tail(tmp_path)

    assert sorted(saved_lines(out)) == sorted(source.lines), "every input line in exactly one saved batch"
    counts = complete_saves(out, "count")
    last = lines_of(counts[max(counts)])
    assert [ast.literal_eval(line) for line in last] == [("lines", len(source.lines))]
    assert not [p for p in out.iterdir() if not (p / "_SUCCESS").exists()], "no half-written batch left behind"
    # Hadoop's local file system leaves a checksum beside every file it writes: the logs went through it.
    assert list((tmp_path / "ck" / "offsets").glob(".*.crc"))
