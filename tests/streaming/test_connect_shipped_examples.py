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
from tests.support import connect_params

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


DEFAULT = ("sql_network_wordcount", "recoverable_network_wordcount")
"""Run by default: a socket input, foreachRDD, the session from ``rdd.context.getConf()`` and ``createDataFrame(rdd)``;
``getOrCreate`` with a checkpoint, a broadcast and an accumulator (~15 s each)."""
OPT_IN = ("network_wordcount", "hdfs_wordcount", "queue_stream", "network_wordjoinsentiments",
          "stateful_network_wordcount")
"""With ``AIODSTREAM_CONNECT=all`` (one to three minutes each on a loaded machine)."""
NOT_YET: dict[str, str] = {}
"""Spark's examples that do not run on Connect yet, with why."""


def test_every_shipped_example_is_listed() -> None:
    """Each of pyspark's streaming examples is run here or listed with why it is not."""
    from tests.streaming.shipped_examples import EXAMPLES

    shipped = {path.stem for path in EXAMPLES.glob("*.py") if path.stem != "__init__"}
    assert shipped == {*DEFAULT, *OPT_IN, *NOT_YET}


@pytest.mark.parametrize("name", connect_params([*DEFAULT, *OPT_IN, *NOT_YET], DEFAULT, NOT_YET))
def test_a_shipped_example_prints_the_same_on_connect(name: str, spark_context: Any, connect_address: str,
                                                      tmp_path: Path) -> None:
    """The example's whole output on Connect equals the classic engine's, and it printed each batch."""
    classic = on_classic(name, spark_context, tmp_path / "classic", WORDS)
    connect = on_connect(name, connect_address, tmp_path / "connect", WORDS)
    # recoverable_network_wordcount prints its output file's absolute path: each run's own.
    assert connect.replace(str(tmp_path / "connect"), "<workdir>") == classic.replace(str(tmp_path / "classic"), "<workdir>")
    assert classic.strip(), "the example printed nothing"
    # The SQL example swallows every error of a batch: its tables must be there.
    assert name != "sql_network_wordcount" or ("|  good|    2|" in classic and "| spark|    2|" in classic)
    if name == "recoverable_network_wordcount":  # the broadcast exclude list and the accumulator at work
        assert "Dropped 4 word(s) totally" in classic and "('a', 1)" not in classic
        counts = (tmp_path / "connect" / "counts.txt").read_text()
        assert counts == (tmp_path / "classic" / "counts.txt").read_text() and counts.count("Counts at time") == 3
