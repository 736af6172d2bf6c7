"""Crash test: SIGKILL a continuous Kafka -> Kafka program at random moments, restart it from its checkpoint, prove at least once.

Values are produced to a topic of two partitions while the child runs; it is killed from outside
at seeded random moments after it committed an epoch, restarted each time, and a last run stops
gracefully once every value is out. Then, per partition, the output topic must hold every input
value, and its only duplicates must be what the docs allow: each restart replays from the last
committed epoch, so the output is a sequence of in-order runs of the input, each run starting at
or before where the previous one stopped, at most one run per start of the program.

The default run kills twice; ``AIODSTREAM_FAULTS=all`` kills ten times. Real time is inherent
(a child on the system clock), so the test waits in short, bounded steps.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.crash import Children, child_env, err_tail, faults_all, kill, kill_delays, spawn, wait_started

CHILD = Path(__file__).with_name("continuous_crash_child.py")
SEED = 20261126
PARTITIONS = 2


class Input:
    """Numbered values produced to the input topic's partitions."""

    def __init__(self, cluster: Any, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.values: list[list[bytes]] = [[] for _ in range(PARTITIONS)]

    def produce(self, rng: random.Random) -> None:
        p = rng.randrange(PARTITIONS)
        new = [f"p{p}-v{len(self.values[p]) + k}".encode() for k in range(rng.randint(1, 8))]
        self.cluster.produce(self.topic, new, partition=p)
        self.values[p].extend(new)


def start(tmp: Path, cluster: Any, in_topic: str, out_topic: str) -> subprocess.Popen[str]:
    args = [str(CHILD), cluster.bootstrap_servers, in_topic, out_topic, str(tmp / "ck"), str(tmp / "stop")]
    return spawn(args, tmp, child_env())


def committed(tmp: Path) -> int:
    try:
        return len([n for n in os.listdir(tmp / "ck" / "commits") if n.isdigit()])
    except FileNotFoundError:
        return 0


def runs(indices: list[int]) -> list[tuple[int, int]]:
    """The output's maximal in-order runs of consecutive input indices, as (first, last)."""
    out: list[tuple[int, int]] = []
    for i in indices:
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def check_at_least_once(cluster: Any, out_topic: str, source: Input, starts: int) -> int:
    """Every input value is out; duplicates are replays from a restart point only; the number of duplicates."""
    duplicates = 0
    for p in range(PARTITIONS):
        expected = [v.upper() for v in source.values[p]]
        got = [value for _, _, value, _ in cluster.records(out_topic, p)]
        index = {value: i for i, value in enumerate(expected)}
        assert set(got) == set(expected), f"partition {p}: lost {sorted(set(expected) - set(got))[:5]}"
        segments = runs([index[value] for value in got])
        assert segments[0][0] == 0 and segments[-1][1] == len(expected) - 1, f"partition {p}: {segments}"
        for before, after in itertools.pairwise(segments):
            assert after[0] <= before[1], f"partition {p}: a run skips ahead of where the previous one stopped: {segments}"
        assert len(segments) <= starts, f"partition {p}: more replays than restarts: {segments}"
        duplicates += len(got) - len(expected)
    return duplicates


@pytest.mark.timeout(600)
def test_a_continuous_kafka_to_kafka_program_killed_at_random_moments_loses_nothing(kafka_cluster: Any, kafka_topic: str,
                                                                                   tmp_path: Path) -> None:
    """Threads: SIGKILLs at random moments (two; ten with AIODSTREAM_FAULTS=all), then a drain: every value out, replays only."""
    rng = random.Random(SEED)
    in_topic, out_topic = kafka_topic, kafka_topic + "-out"
    kafka_cluster.create_topic(in_topic, PARTITIONS)
    kafka_cluster.create_topic(out_topic, PARTITIONS)
    source = Input(kafka_cluster, in_topic)
    kills = 10 if faults_all() else 2
    with Children() as children:
        for life in kill_delays(rng, kills, 0.0, 1.0):
            epochs = committed(tmp_path)
            child = children.add(start(tmp_path, kafka_cluster, in_topic, out_topic))
            wait_started(child, tmp_path)
            deadline = time.monotonic() + 120
            while committed(tmp_path) <= epochs:  # the run committed an epoch of its own
                assert child.poll() is None, err_tail(tmp_path)
                assert time.monotonic() < deadline, f"no epoch committed\n{err_tail(tmp_path)}"
                source.produce(rng)
                time.sleep(0.02)
            end = time.monotonic() + life
            while time.monotonic() < end and child.poll() is None:  # somewhere in an epoch: reading, producing, committing
                source.produce(rng)
                time.sleep(rng.uniform(0.0, 0.03))
            assert kill(child) == -signal.SIGKILL, err_tail(tmp_path)
            source.produce(rng)  # arrives while the program is down
        child = children.add(start(tmp_path, kafka_cluster, in_topic, out_topic))
        wait_started(child, tmp_path)
        source.produce(rng)
        target = [len(v) for v in source.values]
        deadline = time.monotonic() + 120
        while [len({r[2] for r in kafka_cluster.records(out_topic, p)}) for p in range(PARTITIONS)] != target:
            assert child.poll() is None, err_tail(tmp_path)
            assert time.monotonic() < deadline, "values still missing"
            time.sleep(0.1)
        (tmp_path / "stop").touch()
        assert child.wait(timeout=60) == 0, err_tail(tmp_path)
    duplicates = check_at_least_once(kafka_cluster, out_topic, source, kills + 1)
    assert sum(map(len, source.values)) > 20
    print(f"{kills} kills, {sum(map(len, source.values))} values, {duplicates} duplicates")
