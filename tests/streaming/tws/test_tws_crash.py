"""Crash test on real Spark: SIGKILL a transformWithState program at random moments; every session is emitted once, exactly.

The child (``tws_crash_child.py``) closes click sessions with a StatefulProcessor that keeps value,
list and map state per user and an event-time timer, and saves the sessions each batch closed.
The input is files of clicks, ten minutes of event time apart: a ``tick`` user in every file keeps
the watermark moving, and each other user clicks in bursts of two files, 300 minutes apart, so
every burst is one session however the files fall into batches. The test kills the child three
times at random moments (in a job, a state commit, a log write), writes more files while it is
down, and finally pushes the watermark far ahead so every burst's session closes. Then the saved
sessions must be exactly the bursts: none lost, none twice, with exact clicks, times and pages.
"""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import pytest

from tests.crash import Children, child_env, complete_saves, err_tail, kill, lines_of, spawn, wait_started

pytestmark = pytest.mark.spark

CHILD = Path(__file__).with_name("tws_crash_child.py")
SEED = 20261126
KILLS = 3
T0 = 1_800_000_000_000
STEP_MS = 10 * 60_000
USERS = ["ada", "bob", "cy", "dee"]


class Clicks:
    """Files of clicks, each ten minutes of event time after the one before."""

    def __init__(self, directory: Path, staging: Path) -> None:
        self.directory, self.staging = directory, staging
        directory.mkdir()
        staging.mkdir()
        self.files = 0
        self.expected: dict[tuple[str, int], list[tuple[int, str]]] = {}  # (user, burst start file) -> (time, page)

    def add_file(self) -> None:
        i = self.files
        at = T0 + i * STEP_MS
        lines = [f"tick,{at},home"]
        for u, user in enumerate(USERS):
            phase = (i - 3 * u) % 30  # each user: a burst of two files every 30 files, staggered
            if phase in (0, 1) and i >= 3 * u:
                page = f"p{(i + u) % 3}"
                lines.append(f"{user},{at},{page}")
                self.expected.setdefault((user, i - phase), []).append((at, page))
        self.write(f"f{i:05d}.txt", lines)
        self.files += 1

    def finish(self) -> None:
        """A click far ahead: the watermark passes every session's timer (the ``end`` user's stays open)."""
        self.write("zz-end.txt", [f"end,{T0 + (self.files + 100) * STEP_MS},home"])

    def write(self, name: str, lines: list[str]) -> None:
        (self.staging / name).write_text("".join(line + "\n" for line in lines))
        (self.staging / name).rename(self.directory / name)

    def sessions(self) -> list[str]:
        """What must be emitted: one session per burst, and the ticker's, as ``user|clicks|first|last|page=n;...``."""
        out = []
        for (user, _), clicks in self.expected.items():
            times = [at for at, _ in clicks]
            pages = sorted({page for _, page in clicks})
            counts = ";".join(f"{page}={sum(1 for _, p in clicks if p == page)}" for page in pages)
            out.append(f"{user}|{len(clicks)}|{min(times)}|{max(times)}|{counts}")
        out.append(f"tick|{self.files}|{T0}|{T0 + (self.files - 1) * STEP_MS}|home={self.files}")
        return sorted(out)


def start(tmp: Path) -> subprocess.Popen[str]:
    return spawn([str(CHILD), str(tmp / "in"), str(tmp / "out"), str(tmp / "ck"), str(tmp / "stop")], tmp, child_env())


def saved_sessions(out: Path) -> list[str]:
    batches = complete_saves(out, "sessions")
    return sorted(line for t in sorted(batches) for line in lines_of(batches[t]))


@pytest.mark.timeout(1200)  # four JVM starts and real-time batches on a loaded machine
def test_sigkilled_transform_with_state_emits_every_session_once_with_exact_contents(tmp_path: Path) -> None:
    """Three SIGKILLs at random moments, then a run to the end: every burst's session is saved once, with exact clicks,
    times and pages."""
    rng = random.Random(SEED)
    clicks = Clicks(tmp_path / "in", tmp_path / "staging")
    out = tmp_path / "out"
    with Children() as children:
        for _ in range(KILLS):
            child = children.add(start(tmp_path))
            wait_started(child, tmp_path)
            for _ in range(rng.randint(6, 12)):
                clicks.add_file()
                time.sleep(rng.uniform(0.1, 0.4))
            time.sleep(rng.uniform(0.5, 2.5))  # somewhere in a batch: a job, a state commit, a log write
            kill(child)
            clicks.add_file()  # arrives while the program is down
        child = children.add(start(tmp_path))
        wait_started(child, tmp_path)
        for _ in range(40):  # enough files for every user's bursts to close on their own
            clicks.add_file()
            time.sleep(0.05)
        clicks.finish()
        expected = clicks.sessions()
        deadline = time.monotonic() + 300
        while saved_sessions(out) != expected:
            saved = saved_sessions(out)
            assert len(saved) == len(set(saved)), f"a session was emitted twice: {saved}"
            assert set(saved) <= set(expected), f"unexpected sessions: {sorted(set(saved) - set(expected))}"
            assert time.monotonic() < deadline, f"sessions still missing: {sorted(set(expected) - set(saved))}"
            assert child.poll() is None, err_tail(tmp_path)
            time.sleep(0.1)
        (tmp_path / "stop").touch()
        assert child.wait(timeout=180) == 0, err_tail(tmp_path)
        assert saved_sessions(out) == expected
