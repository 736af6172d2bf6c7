"""Crash test on Spark Connect: SIGKILL a checkpointed stateful program at random moments, restart it, prove exactly-once.

``test_dstream_crash.py``'s scenario with the program on a Connect session (``connect_crash_child.py``): the
child connects to the test run's Connect server by URL (it starts no JVM), its checkpoint on this machine's disk,
its ``updateStateByKey`` state snapshotted by the server's workers (one file per partition), and ``getOrCreate`` rebuilds its saved graph
on the child's Connect session. Each round the test writes input files while the child runs, kills it at a random
moment once it has saved a few batches, and writes more input while it is down; a last run stops gracefully. Then
every input line must be in exactly one saved batch, and the last running count must equal the number of lines.

Real time is inherent (a child process on the system clock), so the test waits in short steps, and for as long as
the child makes progress: on a loaded machine a Connect batch may take longer than its interval, and the batches of a
child's down time run after its restart before the newest input's.
"""

from __future__ import annotations

import ast
import functools
import random
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CONNECT_TOKEN
from tests.crash import Children, child_env, complete_saves, err_tail, faults_all, kill, kill_delays, lines_of, spawn, wait_started
from tests.streaming.connect_crash_child import URL_VARIABLE
from tests.streaming.test_dstream_crash import Input, saved_lines
from tests.support import CONNECT_ALL

pytestmark = pytest.mark.connect

CHILD = Path(__file__).with_name("connect_crash_child.py")
ROUNDS = 4 if faults_all() else 1
"""Kills per run: one by default, as the classic crash test (a round takes minutes on a loaded machine); a seeded
schedule of four with ``AIODSTREAM_FAULTS=all`` (later restarts restore states that earlier restarts snapshotted)."""
SEED = 20261126
STALL_S = 180.0
"""How long the child may go without completing a batch before the test fails."""


def wait_while_progressing(done: Callable[[], bool], out: Path, child: subprocess.Popen[str], tmp: Path) -> None:
    """Wait until ``done()``, failing if the child exits or completes no batch (a ``count`` save) for STALL_S seconds."""
    progress, last = len(complete_saves(out, "count")), time.monotonic()
    while not done():
        assert child.poll() is None, err_tail(tmp)
        now_saved = len(complete_saves(out, "count"))
        if now_saved != progress:
            progress, last = now_saved, time.monotonic()
        assert time.monotonic() - last < STALL_S, f"no batch completed in {STALL_S:.0f}s\n{err_tail(tmp)}"
        time.sleep(0.1)


def saved_at_least(out: Path, count: int) -> bool:
    """Whether ``count`` batches saved their running count."""
    return len(complete_saves(out, "count")) >= count


def all_counted(out: Path, lines: list[str]) -> bool:
    """Whether every line is saved and the newest running count counts them all."""
    if sorted(saved_lines(out)) != sorted(lines):
        return False
    counts = complete_saves(out, "count")
    return [ast.literal_eval(line) for line in lines_of(counts[max(counts)])] == [("lines", len(lines))]


def start(tmp: Path, url: str, ftp: Any = None) -> subprocess.Popen[str]:
    """The child, its input directory and checkpoint in ``tmp``, or on ``ftp`` (``in`` and ``ck`` in its root)."""
    where: Callable[[str], str] = (lambda name: str(tmp / name)) if ftp is None else ftp.uri
    return spawn([str(CHILD), where("in"), str(tmp / "out"), where("ck"), str(tmp / "stop")], tmp,
                 child_env({URL_VARIABLE: url}))


@pytest.mark.timeout(600 * ROUNDS + 600)  # real-time batches on a loaded machine (the waits fail first on a stall)
@pytest.mark.parametrize("where", [pytest.param(where, marks=pytest.mark.skipif(
    not (CONNECT_ALL or faults_all()), reason="opt-in (AIODSTREAM_CONNECT=all or AIODSTREAM_FAULTS=all): a minute or "
    "more; the default run kills the same program on classic Spark (test_dstream_crash.py), and resumes Connect's state "
    "from its checkpoint (test_connect_recovery.py, test_connect_checkpoint_uri.py)")) for where in ("local", "ftp")])
def test_sigkilled_connect_program_saves_every_line_once_and_keeps_its_running_count(
        connect_address: str, connect_session: Any, tmp_path: Path, where: str, request: pytest.FixtureRequest) -> None:
    """Every line in exactly one saved batch and the running count exact, across kills of a stateful program on Connect;
    with its checkpoint and input directory on this machine's disk, and on an FTP server (a Connect client without a
    JVM: its logs, its graph for getOrCreate and its listing through fsspec, the data through the server's workers)."""
    url = f"sc://{connect_address}/;token={CONNECT_TOKEN};session_id={uuid.uuid4()}"
    ftp = request.getfixturevalue("ftp_server") if where == "ftp" else None
    base = tmp_path if ftp is None else ftp.root  # where the input directory and the checkpoint are
    rng = random.Random(SEED)
    source = Input(base / "in", tmp_path / "staging")
    out = tmp_path / "out"
    with Children() as children:
        for delay in kill_delays(rng, ROUNDS, 0.0, 2.0):
            child = children.add(start(tmp_path, url, ftp))
            wait_started(child, tmp_path)
            saved = len(complete_saves(out, "count"))
            for _ in range(rng.randint(2, 4)):
                source.add_file(rng)
                time.sleep(rng.uniform(0.2, 0.8))
            wait_while_progressing(functools.partial(saved_at_least, out, saved + 2), out, child, tmp_path)
            time.sleep(delay)  # somewhere in a batch: a query on the server, a snapshot, a log write
            kill(child)
            source.add_file(rng)  # arrives while the program is down
        child = children.add(start(tmp_path, url, ftp))
        wait_started(child, tmp_path)
        source.add_file(rng)
        wait_while_progressing(functools.partial(all_counted, out, source.lines), out, child, tmp_path)
        (tmp_path / "stop").touch()  # a graceful stop runs the batches already due (minutes of them when behind)
        assert child.wait(timeout=STALL_S * 4) == 0, err_tail(tmp_path)

    assert sorted(saved_lines(out)) == sorted(source.lines), "every input line in exactly one saved batch"
    counts = complete_saves(out, "count")
    last = lines_of(counts[max(counts)])
    assert [ast.literal_eval(line) for line in last] == [("lines", len(source.lines))]
    assert not [p for p in out.iterdir() if not (p / "_SUCCESS").exists()], "no half-written batch left behind"
    # The state was restored from a snapshot the server wrote (its partitions file beside them), not only rebuilt.
    assert list((base / "ck" / "state" / "0").glob("*/_partitions"))
