"""Crash test on real Spark: SIGKILL a sessionization program at random moments; every session is emitted once, exactly.

The child (``sessions_crash_child.py``) closes click sessions by event time with
``flatMapGroupsWithState`` and saves the sessions each batch closed. The input is files of clicks,
ten minutes of event time apart: a ``tick`` user in every file keeps the watermark moving, and
each other user clicks in bursts of two files, 300 minutes apart, so every burst is one session
however the files fall into batches. The test kills the child at random moments (in a job, a
state commit, a log write), writes more files while it is down, and finally pushes the watermark
far ahead so every burst's session closes. Then the saved sessions must be exactly the bursts:
none lost, none twice, with exact click counts and times, across kills and re-run batches.
The scenario and its checks are shared: ``tests/streaming/session_crash.py``.

Opt-in (``AIODSTREAM_FAULTS=all``): the default suite runs the same scenario through
``transformWithState`` (``tests/streaming/tws/test_tws_crash.py``), on the same keyed state node,
state store and commit path, with three kills.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.crash import faults_all
from tests.streaming.session_crash import kill_and_finish, saved_sessions

pytestmark = pytest.mark.spark

CHILD = Path(__file__).with_name("sessions_crash_child.py")
SEED = 20261124
KILLS = 2


@pytest.mark.skipif(not faults_all(), reason="the default run kills this scenario under transformWithState: set AIODSTREAM_FAULTS=all")
@pytest.mark.timeout(900)  # three JVM starts and real-time batches on a loaded machine
def test_sigkilled_sessionization_emits_every_session_once_with_exact_contents(tmp_path: Path) -> None:
    """Two SIGKILLs at random moments, then a run to the end: every burst's session is saved once, with exact clicks and times."""
    expected = kill_and_finish(CHILD, tmp_path, random.Random(SEED), KILLS, pages=False)
    assert saved_sessions(tmp_path / "out") == expected
