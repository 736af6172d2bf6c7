"""The project's stateful examples on a Spark Connect session print what they print on classic Spark.

Each example runs as its own program with ``--remote`` naming the test run's Connect server
(its ``StreamingContext`` takes the Connect session; nothing else changes), and its output is
compared with the lines its classic run must print (:mod:`tests.test_examples`). The default run
takes ``heartbeat_monitor.py`` (mapGroupsWithState with processing-time timeouts, the shortest:
the keyed conformance tests on Connect cover transformWithState and event time by default);
``AIODSTREAM_CONNECT=all`` runs every one, ``stateful_wordcount.py`` (updateStateByKey with a
checkpoint) included.
"""

from __future__ import annotations

import pytest

from tests.conftest import CONNECT_TOKEN
from tests.support import connect_params
from tests.test_examples import (
    CONNECT_EXTRA,
    DEVICE_MONITOR_OUTPUT,
    FRAUD_DETECTION_OUTPUT,
    HEARTBEAT_MONITOR_OUTPUT,
    SESSIONIZATION_OUTPUT,
    run_example,
)

pytestmark = pytest.mark.connect

EXAMPLES: dict[str, tuple[list[str], list[str]]] = {
    "sessionization.py": (["--batches", "8", "--interval", "0.5"], SESSIONIZATION_OUTPUT),
    "fraud_detection.py": (["--batches", "8", "--interval", "0.5"], FRAUD_DETECTION_OUTPUT),
    "device_monitor.py": (["--batches", "8", "--interval", "0.5"], DEVICE_MONITOR_OUTPUT),
    "heartbeat_monitor.py": (["--timeout", "2", "--interval", "0.5", "--limit", "600"], HEARTBEAT_MONITOR_OUTPUT),
    "stateful_wordcount.py": (["--batches", "4", "--interval", "0.5"], ["final: a=5 is=3 red=3 rose=6 the=1"]),
}
"""Example -> (its arguments, the lines it prints on classic Spark; for stateful_wordcount.py, its last line)."""

DEFAULT_EXAMPLES = ["heartbeat_monitor.py"]
"""Run by default: a mapGroupsWithState program whose devices go offline by processing-time timeouts."""


def test_the_default_examples_are_examples() -> None:
    """Every example run by default is one of the stateful examples."""
    assert set(DEFAULT_EXAMPLES) <= set(EXAMPLES)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", connect_params(sorted(EXAMPLES), DEFAULT_EXAMPLES))
def test_an_example_prints_the_same_on_connect(connect_address: str, name: str) -> None:
    """The example, given the Connect server, prints its classic output."""
    args, expected = EXAMPLES[name]
    out = run_example(name, *args, "--remote", f"sc://{connect_address}/;token={CONNECT_TOKEN}", timeout=600,
                      allow=CONNECT_EXTRA)
    lines = out.splitlines()
    assert (lines[-len(expected):] if name == "stateful_wordcount.py" else lines) == expected
