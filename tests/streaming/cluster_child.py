"""DStream programs on a Spark standalone cluster (``python cluster_child.py spark://host:port``).

Prints one JSON line. First a word count: each batch's sorted counts, the executors the job ran
on, and the batches' input row counts from the query's progress. Spark's scheduler waits until
both executors have registered (``minRegisteredResourcesRatio`` 1.0) before the first job, so
the work is spread over the cluster's workers, not run on the driver.

Then two programs whose checkpoint is on an FTP server (``tests.ftp``), a file system no
executor sees as a local path: a socket receiver on an executor (its blocks written into the
write-ahead log by the task, read back by the batches' tasks) and ``mapGroupsWithState`` (its
state store written by the tasks), each reporting what the FTP server holds.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from pyspark import SparkContext

from listeners import ReceiverStarted
from streaming import StreamingContext
from tests.cluster import app_conf
from tests.ftp import FtpServer

LINES = [["a b a", "c"], ["b b"], [], ["a d d c", "e"]]


def main(master: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python workers import aiodstream
    sc = SparkContext(conf=app_conf(master, "aiodstream-cluster-test"))
    sc.setLogLevel("ERROR")
    counts: list[list[Any]] = []
    where: set[str] = set()

    def record(rdd: Any) -> None:
        counts.append(sorted(rdd.collect()))
        # A standalone executor runs in <work-dir>/<app id>/<executor id>, and so do its Python workers.
        where.update(rdd.mapPartitions(lambda _: [os.path.basename(os.getcwd())]).collect())

    ssc = StreamingContext(sc, 0.5)
    (ssc.queueStream(LINES).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b, 2)
     .foreachRDD(record))
    ssc.start()
    ssc.processAllAvailable()
    rows = [p.numInputRows for p in ssc.recentProgress][:len(LINES)]
    ssc.stop(stopSparkContext=False)
    out: dict[str, Any] = {"counts": counts[:len(LINES)], "executors": sorted(where), "rows": rows}
    with FtpServer(Path(tempfile.mkdtemp(prefix="aiodstream-ftp-"))) as ftp:
        out["receiver"] = receive_on_an_executor(sc, ftp)
        out["stateful"] = count_with_state(sc, ftp)
    print(json.dumps(out), flush=True)
    sc.stop()


RECEIVED = [f"line {i}" for i in range(1000)]


def receive_on_an_executor(sc: Any, ftp: FtpServer) -> dict[str, Any]:
    """RECEIVED through a socket receiver on an executor, its checkpoint on FTP: what the batches got, where it ran."""
    source = socket.create_server(("127.0.0.1", 0))
    release = threading.Event()

    def serve() -> None:
        conn, _ = source.accept()
        with conn:
            conn.sendall("".join(f"{line}\n" for line in RECEIVED).encode())
            release.wait(120)  # keep the connection open until the program is done

    threading.Thread(target=serve, daemon=True).start()
    got: list[str] = []
    started: list[Any] = []

    # No threading.Event in the function: the context is checkpointed, so its functions must pickle.
    def take(rdd: Any) -> None:
        got.extend(rdd.collect())

    ssc = StreamingContext(sc, 0.5)
    ssc.checkpoint(ftp.uri("receiver"))
    ssc.remember(600)  # the log keeps the blocks remembered batches cover: they are still there to count
    ssc.addStreamingListener(lambda event: started.append(event) if isinstance(event, ReceiverStarted) else None)
    ssc.socketTextStream("127.0.0.1", source.getsockname()[1], placement="executor").foreachRDD(take)
    ssc.start()
    deadline = time.monotonic() + 120
    while len(got) < len(RECEIVED) and time.monotonic() < deadline:  # filled by the job thread
        time.sleep(0.05)
    ssc.stop(stopSparkContext=False, stopGraceFully=True)
    release.set()
    source.close()
    log = ftp.root / "receiver" / "sources" / "0"
    return {"in_order": got == RECEIVED, "count": len(got),
            "executor": started[0].receiver_info.executor_id if started else None,
            "blocks": sum(1 for name in os.listdir(log) if name.isdigit())}


def counts(key: str, values: Iterator[str], state: Any) -> tuple[str, int]:
    """A running count per key, kept in the state store."""
    state.update((state.getOption or 0) + sum(1 for _ in values))
    return (key, state.get)


def count_with_state(sc: Any, ftp: FtpServer) -> dict[str, Any]:
    """mapGroupsWithState with its checkpoint on FTP: each batch's outputs and the state files on the server."""
    outputs: list[list[Any]] = []
    ssc = StreamingContext(sc, 0.5)
    ssc.checkpoint(ftp.uri("stateful"))
    (ssc.queueStream([["a", "b"], ["a"], ["b", "b"]]).map(lambda w: (w, w))
     .mapGroupsWithState(counts, "NoTimeout", numPartitions=2).foreachRDD(lambda rdd: outputs.append(sorted(rdd.collect()))))
    ssc.start()
    ssc.processAllAvailable()
    ssc.stop(stopSparkContext=False)
    store = ftp.root / "stateful" / "stateful" / "state" / "0"
    return {"outputs": outputs[:3],
            "files": sorted(f"{part.name}/{f.name}" for part in store.iterdir() if part.is_dir() for f in part.iterdir())}


if __name__ == "__main__":
    main(sys.argv[1])
