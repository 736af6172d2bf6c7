"""SIGKILL of executor processes while they write state or received blocks, on a Spark standalone cluster: exact outputs.

The child (``executor_kill_child.py``) runs its program on the test cluster with
``tests.fault_daemon`` as the executors' Python daemon: the Python worker that is the n-th on
the host to reach the chosen point of a write kills itself there, or kills its executor's JVM
and then itself. Spark retries the task (on the same executor, or on a new one the Worker
starts); the outputs must be those of a fault-free run: no state lost or applied twice, every
line received once, in order.

Slow (a cluster, a JVM per run): run with ``AIODSTREAM_FAULTS=all``.
"""

from __future__ import annotations

import collections
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import StandaloneCluster
from tests.crash import KILL_AFTER, KILL_AT, KILL_LOG, child_env, faults_all, kills_logged, run_python
from tests.streaming.executor_kill_child import LINES, WORDS

pytestmark = [pytest.mark.spark, pytest.mark.cluster,
              pytest.mark.skipif(not faults_all(), reason="slow fault injection: set AIODSTREAM_FAULTS=all")]

CHILD = Path(__file__).with_name("executor_kill_child.py")
SEED = 20261125


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    """Two one-core workers; torn down after the module."""
    with StandaloneCluster(workers=2, cores=1) as running:
        yield running


def expected_state_outputs() -> list[list[list[object]]]:
    """What a fault-free run outputs: each batch's words with their running counts, sorted."""
    totals: collections.Counter[str] = collections.Counter()
    outputs = []
    for batch in WORDS:
        totals.update(batch)
        outputs.append(sorted([w, totals[w]] for w in set(batch)))
    return outputs


def schedule(seed: int, kills: int, first: int, last: int) -> tuple[str, list[str]]:
    """A seeded schedule: ``kills`` distinct arrivals in [first, last], the workers' and the JVMs' in turn; what each logs."""
    arrivals = sorted(random.Random(seed).sample(range(first, last + 1), kills))
    victims = ["worker" if k % 2 == 0 else "jvm" for k in range(kills)]
    return ",".join(f"{n}:{v}" for n, v in zip(arrivals, victims, strict=True)), victims


def run_child(cluster: StandaloneCluster, program: str, point: str, after: int | str, tmp: Path,
              logged: list[str] | None = None) -> dict[str, list[object]]:
    env = child_env({KILL_AT: point, KILL_AFTER: str(after), KILL_LOG: str(tmp)})
    result = run_python([str(CHILD), cluster.master_url, program, str(tmp)], timeout=420, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert kills_logged(tmp) == (logged or [point]), "each kill happened, once"
    out: dict[str, list[object]] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.timeout(480)
@pytest.mark.parametrize(("point", "after"), [
    ("state-delta-linked", 5),  # batch 2's first partition: its delta in place, the working copy not committed
    ("state-delta-linked:jvm", 9),  # the same in batch 4, the executor's JVM killed with it
    ("state-snapshot-temp", 1),  # the background snapshot of version 10, written but not renamed
])
def test_an_executor_killed_while_it_commits_state_loses_nothing_and_applies_nothing_twice(
        cluster: StandaloneCluster, tmp_path: Path, point: str, after: int) -> None:
    """mapGroupsWithState's counts are exact when the task committing (or snapshotting) a partition dies mid-write."""
    out = run_child(cluster, "state", point, after, tmp_path)
    outputs = out["outputs"]
    assert outputs[:len(WORDS)] == expected_state_outputs()
    assert all(batch == [] for batch in outputs[len(WORDS):])  # the queue is empty after


@pytest.mark.timeout(480)
@pytest.mark.parametrize(("point", "after"), [
    ("block-linked", 3),  # the third block in the log, not reported to the driver
    ("block-temp", 5),  # the fifth block written, not linked
    ("block-linked:jvm", 4),  # the receiver's executor JVM killed, its fourth block logged, not reported
])
def test_an_executor_killed_while_its_receiver_writes_a_block_receives_every_line_once(
        cluster: StandaloneCluster, tmp_path: Path, point: str, after: int) -> None:
    """A socket receiver on an executor killed mid-block restarts; the batches get every line once, in order."""
    out = run_child(cluster, "receiver", point, after, tmp_path)
    assert out["lines"] == LINES


@pytest.mark.timeout(480)
def test_executors_killed_several_times_in_one_run_at_seeded_commits_give_exact_state(
        cluster: StandaloneCluster, tmp_path: Path) -> None:
    """Four kills in one run (Python workers and JVMs in turn, at seeded state commits): the counts are exact."""
    after, victims = schedule(SEED, 4, 2, 20)
    out = run_child(cluster, "state", "state-delta-linked", after, tmp_path,
                    [f"state-delta-linked:{v}" for v in victims])
    assert out["outputs"][:len(WORDS)] == expected_state_outputs()
    assert all(batch == [] for batch in out["outputs"][len(WORDS):])


@pytest.mark.timeout(480)
def test_a_receiver_killed_several_times_in_one_run_at_seeded_blocks_receives_every_line_once(
        cluster: StandaloneCluster, tmp_path: Path) -> None:
    """Three kills of the receiver's executor processes in one run (at seeded block writes): every line once, in order."""
    after, victims = schedule(SEED + 1, 3, 2, 6)
    out = run_child(cluster, "receiver", "block-linked", after, tmp_path, [f"block-linked:{v}" for v in victims])
    assert out["lines"] == LINES
