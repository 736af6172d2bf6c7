"""A DStream program on a real Spark standalone cluster: a Master and two Workers started from the installed pyspark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import MASTER_VARIABLE, StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    """Two one-core workers; torn down after the module."""
    with StandaloneCluster(workers=2, cores=1) as running:
        yield running


@pytest.mark.timeout(900)
def test_a_word_count_runs_on_the_clusters_executors(cluster: StandaloneCluster) -> None:
    """Same counts as on local[2]; the tasks ran on both executors (never the driver); true row counts. Then a
    receiver on an executor and mapGroupsWithState, their checkpoint on FTP: exact outputs, the files on the server."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parent.parent)}  # the child imports tests.cluster
    result = subprocess.run([sys.executable, str(HERE / "cluster_child.py"), cluster.master_url], capture_output=True,
                            text=True, timeout=840, check=False, cwd=HERE.parent.parent, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["counts"] == [[["a", 2], ["b", 1], ["c", 1]], [["b", 2]], [], [["a", 1], ["c", 1], ["d", 2], ["e", 1]]]
    assert out["executors"] == ["0", "1"]
    assert out["rows"] == [2, 1, 0, 2]
    # A socket receiver on an executor, its write-ahead log on FTP (no executor shares the driver's disk).
    assert out["receiver"]["in_order"] and out["receiver"]["count"] == 1000 and out["receiver"]["blocks"] >= 1
    assert out["receiver"]["executor"] in ("0", "1")  # the executor's id, from Spark's status store
    # mapGroupsWithState: its state store written by the executors' tasks to FTP, two partitions, three versions.
    assert out["stateful"]["outputs"] == [[["a", 1], ["b", 1]], [["a", 2]], [["b", 3]]]
    assert {name.split("/")[1] for name in out["stateful"]["files"]} >= {"1.delta", "2.delta", "3.delta"}
    assert {name.split("/")[0] for name in out["stateful"]["files"]} == {"0", "1"}
    assert "aiodstream-cluster-test" in cluster.registered_apps()


CONFORMANCE_ON_THE_CLUSTER = ["aggregations", "state", "windows"]
"""The conformance groups run on the cluster with ``AIODSTREAM_CLUSTER_CONFORMANCE=all``:
aggregations, windows and checkpointed state (updateStateByKey programs, their snapshots written
by the executors), against pyspark.streaming on the same cluster. Opt-in: a child pytest with its
own Spark, 46 s for ``state`` alone on a quiet 2-core machine, and CI has 20 minutes for
everything; the default run keeps the word count above (shuffles, a receiver on an executor,
mapGroupsWithState's store written by the executors, each output exact)."""


@pytest.mark.timeout(900)
@pytest.mark.skipif(os.environ.get("AIODSTREAM_CLUSTER_CONFORMANCE") != "all",
                    reason="opt-in (AIODSTREAM_CLUSTER_CONFORMANCE=all): a minute or more on the cluster")
def test_the_conformance_suite_gives_pysparks_outputs_on_the_cluster(cluster: StandaloneCluster) -> None:
    """A child pytest runs conformance groups with the test run's SparkContext on the cluster."""
    selection = " or ".join(f"[{group}]" for group in CONFORMANCE_ON_THE_CLUSTER)
    env = {**os.environ, MASTER_VARIABLE: cluster.master_url}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "tests/streaming/conformance/test_conformance.py",
         "-k", selection], capture_output=True, text=True, timeout=840, check=False, cwd=HERE.parent.parent, env=env)
    assert result.returncode == 0, result.stdout[-4000:]
    assert f"{len(CONFORMANCE_ON_THE_CLUSTER)} passed" in result.stdout
    assert "aiodstream-tests" in cluster.registered_apps()  # the child's SparkContext was the cluster's


CRASH_TESTS_ON_THE_CLUSTER = {
    "tests/streaming/test_dstream_crash.py": "dstream-crash-child",
    "tests/streaming/tws/test_tws_crash.py": "tws-crash-child",
    "tests/streaming/continuous/test_continuous_crash.py": "continuous-crash-child",
    "tests/streaming/kafka/test_dstream_kafka_crash.py": "dstream-kafka-crash-child",
}
"""The crash tests run on the cluster, with their child's application name: the DStream one
(getOrCreate, updateStateByKey, saveAsTextFiles; its checkpoint through Hadoop's FileSystem
API, the state snapshots written by the executors' tasks), the stateful one (transformWithState's value,
list and map state and event-time timers under a watermark, its state store written by the executors'
tasks) and the continuous one (a long-running
task per file partition on each executor, epochs committed by the driver, the file sink written
by the tasks), and the Kafka one (the direct stream's tasks read their offset ranges from the test's
broker on the executors)."""
CRASH_ALL = os.environ.get("AIODSTREAM_CLUSTER_CRASH") == "all"
"""Each crash run on the cluster takes about a minute or more (39-108 s on the 2-core machine), and CI
has 20 minutes for everything: they run with ``AIODSTREAM_CLUSTER_CRASH=all``. The default run
kills the DStream program on local[2] (its own file), and the word count above has the executors
write ``mapGroupsWithState``'s state store."""
CRASH_CASES = [
    pytest.param(path, id=Path(path).stem, marks=[] if CRASH_ALL else
                 [pytest.mark.skip(reason="a minute or two on the cluster: set AIODSTREAM_CLUSTER_CRASH=all")])
    for path in CRASH_TESTS_ON_THE_CLUSTER
]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", CRASH_CASES)
def test_a_sigkilled_stateful_driver_recovers_with_exact_output_on_the_cluster(cluster: StandaloneCluster, path: str) -> None:
    """A crash test (the driver killed with SIGKILL at random moments and restarted) on the cluster: exact output."""
    app = CRASH_TESTS_ON_THE_CLUSTER[path]
    env = {**os.environ, MASTER_VARIABLE: cluster.master_url}
    before = cluster.registered_apps().count(app)
    # Its Spark test only (the continuous file also holds a test of the query on threads, which needs no cluster).
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-m", "spark", path],
                            capture_output=True, text=True, timeout=840, check=False, cwd=HERE.parent.parent, env=env)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "1 passed" in result.stdout
    assert cluster.registered_apps().count(app) - before >= 2  # every driver ran on the cluster
