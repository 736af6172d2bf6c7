"""Stateful and receiving DStream programs whose executors are SIGKILLed while they write (``tests/fault_daemon.py``).

Usage: ``python tests/streaming/executor_kill_child.py MASTER state|receiver WORKDIR``; prints one
JSON line with what the batches saw. The kill point comes from the environment
(``AIODSTREAM_KILL_AT`` and friends, :mod:`tests.crash`) and is passed to the executors, whose
Python daemon is ``tests.fault_daemon``.

``state``: ``mapGroupsWithState`` counting words over twelve queued batches (two partitions; the
state store snapshots version 10). ``receiver``: a socket receiver on an executor reading from a
source that replays from the end of the write-ahead log on every connection (as a replayable
source would from an acknowledged offset), so no line read but not logged is lost.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from pyspark import SparkContext

from streaming import StreamingContext
from streaming.recovery import decode_block
from tests.cluster import app_conf
from tests.crash import KILL_AFTER, KILL_AT, KILL_LOG, ROOT

WORDS = [["a", "b", "a"], ["c"], ["b", "d", "b"], ["a"], ["e", "c"], ["d"], ["a", "b"], ["f"], ["b"], ["c", "a"], ["d", "d"],
         ["e", "f", "a"]]
"""The state program's batches."""
LINES = [f"line {i}" for i in range(600)]
"""What the receiver's source sends."""


def spark_context(master: str) -> Any:
    """The cluster's SparkContext; the executors' Python workers come from the daemon with the kill point."""
    conf = (app_conf(master, "executor-kill-child").set("spark.python.daemon.module", "tests.fault_daemon")
            .set("spark.executorEnv.PYTHONPATH", str(ROOT)))
    for name in (KILL_AT, KILL_AFTER, KILL_LOG):
        if name in os.environ:
            conf.set(f"spark.executorEnv.{name}", os.environ[name])
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    return sc


def counts(key: str, values: Iterator[str], state: Any) -> tuple[str, int]:
    """A running count per key, kept in the state store."""
    state.update((state.getOption or 0) + sum(1 for _ in values))
    return (key, state.get)


def run_state(sc: Any, work: Path) -> dict[str, Any]:
    """Each batch's sorted ``(word, running count)`` pairs, by batch."""
    outputs: list[list[Any]] = []
    ssc = StreamingContext(sc, 0.5)
    ssc.checkpoint(str(work / "ck"))
    (ssc.queueStream(WORDS).map(lambda w: (w, w)).mapGroupsWithState(counts, "NoTimeout", numPartitions=2)
     .foreachRDD(lambda rdd: outputs.append(sorted(rdd.collect()))))
    ssc.start()
    ssc.processAllAvailable()
    ssc.stop(stopSparkContext=False)
    return {"outputs": outputs}


def logged_lines(log: Path) -> int:
    """How many source lines the write-ahead log holds: one past the last line of its newest block."""
    try:
        entries = sorted(int(n) for n in os.listdir(log) if n.isdigit())
    except FileNotFoundError:
        return 0
    for entry in reversed(entries):
        records = decode_block((log / str(entry)).read_bytes(), str(log / str(entry)))
        if records:
            return int(records[-1].split()[1]) + 1
    return 0


def run_receiver(sc: Any, work: Path) -> dict[str, Any]:
    """The lines the batches got, in order, from a receiver on an executor."""
    log = work / "ck" / "sources" / "0"
    source = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            try:
                start = logged_lines(log)  # replay from what the log holds
                for i in range(start, len(LINES), 20):
                    conn.sendall("".join(f"{line}\n" for line in LINES[i:i + 20]).encode())
                    time.sleep(0.05)  # several blocks, so a kill can land between them
                done.wait(180)
            except OSError:
                pass  # the receiver was killed

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = source.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    got: list[str] = []
    enough = threading.Event()

    def take(rdd: Any) -> None:
        got.extend(rdd.collect())
        if len(got) >= len(LINES):
            enough.set()

    ssc = StreamingContext(sc, 0.5)
    ssc.checkpoint(str(work / "ck"))
    ssc.remember(600)  # no block is purged: the source replays from the newest
    ssc.socketTextStream("127.0.0.1", source.getsockname()[1], restartDelay=0.2, placement="executor").foreachRDD(take)
    ssc.start()
    enough.wait(240)
    ssc.stop(stopSparkContext=False, stopGraceFully=True)
    done.set()
    source.close()
    return {"lines": got}


def main(master: str, program: str, work: str) -> None:
    """Run ``program`` on the cluster at ``master`` and print what it saw."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sc = spark_context(master)
    out = (run_state if program == "state" else run_receiver)(sc, Path(work))
    print(json.dumps(out), flush=True)
    sc.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
