"""The click-sessions crash scenario shared by the ``flatMapGroupsWithState`` and ``transformWithState`` SIGKILL tests.

The input is files of clicks, ten minutes of event time apart: a ``tick`` user in every file keeps
the watermark moving, and each other user clicks in bursts of two files, 300 minutes apart, so
every burst is one session however the files fall into batches. :func:`kill_and_finish` kills a
child session program at random moments (in a job, a state commit, a log write), writes more files
while it is down, then runs it to the end, pushing the watermark far ahead so every burst's session
closes, and waits until the saved sessions are the expected ones, failing at once on a duplicate
or an unexpected one.
"""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

from tests.crash import Children, child_env, complete_saves, err_tail, kill, lines_of, spawn, wait_started

T0 = 1_800_000_000_000
STEP_MS = 10 * 60_000
USERS = ["ada", "bob", "cy", "dee"]


class Clicks:
    """Files of clicks, each ten minutes of event time after the one before.

    ``pages``: each click line also names a page (``user,at,page``), and a session's line ends with its
    page counts (``|page=n;...``); else lines are ``user,at`` and sessions ``user|clicks|first|last``.
    """

    def __init__(self, directory: Path, staging: Path, *, pages: bool) -> None:
        self.directory, self.staging, self.pages = directory, staging, pages
        directory.mkdir()
        staging.mkdir()
        self.files = 0
        self.expected: dict[tuple[str, int], list[tuple[int, str]]] = {}  # (user, burst start file) -> (time, page)

    def _line(self, user: str, at: int, page: str) -> str:
        return f"{user},{at},{page}" if self.pages else f"{user},{at}"

    def add_file(self) -> None:
        i = self.files
        at = T0 + i * STEP_MS
        lines = [self._line("tick", at, "home")]
        for u, user in enumerate(USERS):
            phase = (i - 3 * u) % 30  # each user: a burst of two files every 30 files, staggered
            if phase in (0, 1) and i >= 3 * u:
                page = f"p{(i + u) % 3}"
                lines.append(self._line(user, at, page))
                self.expected.setdefault((user, i - phase), []).append((at, page))
        self.write(f"f{i:05d}.txt", lines)
        self.files += 1

    def finish(self) -> None:
        """A click far ahead: the watermark passes every session's timeout or timer (the ``end`` user's stays open)."""
        self.write("zz-end.txt", [self._line("end", T0 + (self.files + 100) * STEP_MS, "home")])

    def write(self, name: str, lines: list[str]) -> None:
        (self.staging / name).write_text("".join(line + "\n" for line in lines))
        (self.staging / name).rename(self.directory / name)

    def sessions(self) -> list[str]:
        """What must be emitted: one session per burst, and the ticker's."""
        out = []
        for (user, _), clicks in self.expected.items():
            times = [at for at, _ in clicks]
            line = f"{user}|{len(clicks)}|{min(times)}|{max(times)}"
            if self.pages:
                pages = sorted({page for _, page in clicks})
                line += "|" + ";".join(f"{page}={sum(1 for _, p in clicks if p == page)}" for page in pages)
            out.append(line)
        tick = f"tick|{self.files}|{T0}|{T0 + (self.files - 1) * STEP_MS}"
        out.append(tick + f"|home={self.files}" if self.pages else tick)
        return sorted(out)


def saved_sessions(out: Path) -> list[str]:
    """The session lines of every completely saved batch under ``out``, sorted."""
    batches = complete_saves(out, "sessions")
    return sorted(line for t in sorted(batches) for line in lines_of(batches[t]))


def kill_and_finish(child_script: Path, tmp: Path, rng: random.Random, kills: int, *, pages: bool) -> list[str]:
    """Run ``child_script`` (args: in, out, checkpoint and stop paths under ``tmp``) through ``kills`` SIGKILLs, then
    to the end; return the expected sessions once the saved ones equal them (the caller asserts so again after the stop).
    """
    clicks = Clicks(tmp / "in", tmp / "staging", pages=pages)
    out = tmp / "out"

    def start() -> subprocess.Popen[str]:
        return spawn([str(child_script), str(tmp / "in"), str(out), str(tmp / "ck"), str(tmp / "stop")], tmp,
                     child_env())

    with Children() as children:
        for _ in range(kills):
            child = children.add(start())
            wait_started(child, tmp)
            for _ in range(rng.randint(6, 12)):
                clicks.add_file()
                time.sleep(rng.uniform(0.1, 0.4))
            time.sleep(rng.uniform(0.5, 2.5))  # somewhere in a batch: a job, a state commit, a log write
            kill(child)
            clicks.add_file()  # arrives while the program is down
        child = children.add(start())
        wait_started(child, tmp)
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
            assert child.poll() is None, err_tail(tmp)
            time.sleep(0.1)
        (tmp / "stop").touch()
        assert child.wait(timeout=180) == 0, err_tail(tmp)
    return expected
