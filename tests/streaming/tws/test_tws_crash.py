"""Crash test on real Spark: SIGKILL a transformWithState program at random moments; every session is emitted once, exactly.

The child (``tws_crash_child.py``) closes click sessions with a StatefulProcessor that keeps value,
list and map state per user and an event-time timer, and saves the sessions each batch closed.
The input is files of clicks, ten minutes of event time apart: a ``tick`` user in every file keeps
the watermark moving, and each other user clicks in bursts of two files, 300 minutes apart, so
every burst is one session however the files fall into batches. The test kills the child three
times at random moments (in a job, a state commit, a log write), writes more files while it is
down, and finally pushes the watermark far ahead so every burst's session closes. Then the saved
sessions must be exactly the bursts: none lost, none twice, with exact clicks, times and pages.
The scenario and its checks are shared: ``tests/streaming/session_crash.py``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.crash import faults_all
from tests.streaming.session_crash import kill_and_finish, saved_sessions

pytestmark = pytest.mark.spark

CHILD = Path(__file__).with_name("tws_crash_child.py")
SEED = 20261126
KILLS = 3 if faults_all() else 1  # each kill is a JVM start and a catch-up: the default run keeps one


@pytest.mark.timeout(1200)  # four JVM starts and real-time batches on a loaded machine
def test_sigkilled_transform_with_state_emits_every_session_once_with_exact_contents(tmp_path: Path) -> None:
    """Three SIGKILLs at random moments, then a run to the end: every burst's session is saved once, with exact clicks,
    times and pages."""
    expected = kill_and_finish(CHILD, tmp_path, random.Random(SEED), KILLS, pages=True)
    assert saved_sessions(tmp_path / "out") == expected
