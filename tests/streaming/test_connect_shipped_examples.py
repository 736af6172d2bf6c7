"""Spark's shipped streaming examples print the same on a Spark Connect session as on the classic engine.

Each example runs twice with the changes ``tests/streaming/shipped_examples.py`` lists (the
import, ``sc`` replaced, a manual clock, the test's inputs): on the shared classic SparkContext
in this process, and on a Connect session in a child process that, like a Connect client, has
no SparkContext (made from the test run's server URL as a user's program makes it). What each
printed, batch headers and all, must be the same text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CONNECT_TOKEN
from tests.crash import run_python
from tests.streaming.shipped_examples import run_example

pytestmark = pytest.mark.connect

WORDS = [["a spark stream", "happy spark users"], [], ["good good stream", "sad bad spark", "a b c"]]
"""Three batches of lines: words that repeat within and across batches, an empty batch, words of the sentiment list."""


def on_connect(name: str, connect_address: str, workdir: Path, feed: list[list[str]]) -> str:
    """What the example printed, run on a Connect session in a child process."""
    workdir.mkdir()
    url = f"sc://{connect_address}/;token={CONNECT_TOKEN}"
    result = run_python(["-m", "tests.streaming.shipped_examples", name, url, str(workdir), json.dumps(feed)], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return result.stdout


def on_classic(name: str, spark_context: Any, workdir: Path, feed: list[list[str]]) -> str:
    workdir.mkdir()
    return run_example(name, spark_context, workdir, feed)


@pytest.mark.parametrize("name", ["network_wordcount", "hdfs_wordcount", "queue_stream", "network_wordjoinsentiments",
                                  "sql_network_wordcount"])
def test_a_shipped_example_prints_the_same_on_connect(name: str, spark_context: Any, connect_address: str,
                                                      tmp_path: Path) -> None:
    """The example's whole output on Connect equals the classic engine's, and it printed each batch."""
    classic = on_classic(name, spark_context, tmp_path / "classic", WORDS)
    connect = on_connect(name, connect_address, tmp_path / "connect", WORDS)
    assert connect == classic
    print(classic)
