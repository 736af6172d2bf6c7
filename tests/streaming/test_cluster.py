"""A DStream program on a real Spark standalone cluster: a Master and two Workers started from the installed pyspark."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    """Two one-core workers; torn down after the module."""
    with StandaloneCluster(workers=2, cores=1) as running:
        yield running


@pytest.mark.timeout(300)
def test_a_word_count_runs_on_the_clusters_executors(cluster: StandaloneCluster) -> None:
    """Same counts as on local[2]; the tasks ran on both executors (never the driver); true row counts."""
    result = subprocess.run([sys.executable, str(HERE / "cluster_child.py"), cluster.master_url], capture_output=True,
                            text=True, timeout=240, check=False, cwd=HERE.parent.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["counts"] == [[["a", 2], ["b", 1], ["c", 1]], [["b", 2]], [], [["a", 1], ["c", 1], ["d", 2], ["e", 1]]]
    assert out["executors"] == ["0", "1"]
    assert out["rows"] == [2, 1, 0, 2]
