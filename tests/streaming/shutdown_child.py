"""A pyspark-style program for the shutdown tests: one batch whose output operation takes seconds.

Usage: shutdown_child.py <marker-directory> <stopGracefullyOnShutdown: true|false> [mode]

Modes:
    batch (default): the first batch's output operation writes ``started``, works until the
        context's signal handler has logged the signal (at most 60 s: without a handler the signal
        ends the process first) and a second more, then writes ``done``; the line printed after
        ``awaitTermination()`` says whether ``done`` was there by then.
    hung-listener: the same, with a listener that blocks on the first completed batch until the
        program has seen awaitTermination return (``spark.scheduler.listenerbus.exitTimeout=1s``).
    continuous: a continuous context (FileSource ``<markers>/in.txt`` to FileSink ``<markers>/out``)
        that writes ``started`` once its first epoch committed.
    twice: the first batch's output operation holds its batch until 10 batches were submitted
        (then writes ``started``: the parent sends a first SIGINT), until the signal's graceful stop
        began (then writes ``draining``: the parent sends a second one), and until that second
        signal made the stop immediate. Every later batch appends a line to ``ran``; the program
        prints how many did, and whether awaitTermination raised KeyboardInterrupt.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time


def main(markers: str, graceful: str, mode: str) -> None:
    """Run until stopped (by a signal), then report the context's state."""
    from pyspark import SparkConf, SparkContext

    from streaming import StreamingContext

    conf = (SparkConf().setMaster("local[2]").setAppName("shutdown-child").set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false").set("spark.streaming.stopGracefullyOnShutdown", graceful))
    if mode == "hung-listener":
        conf.set("spark.scheduler.listenerbus.exitTimeout", "1s")
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    if mode == "continuous":
        run_continuous(sc, markers)
        return
    if mode == "twice":
        run_twice(sc, markers)
        return
    ssc = StreamingContext(sc, 0.5)
    release = threading.Event()
    if mode == "hung-listener":
        from pyspark.streaming import StreamingListener

        class Hung(StreamingListener):
            def onBatchCompleted(self, batchCompleted: object) -> None:  # noqa: N803 - pyspark's names
                release.wait()  # hangs the listener until the program is past awaitTermination

        ssc.addStreamingListener(Hung())

    signalled = threading.Event()

    class SignalSeen(logging.Handler):
        """Sets ``signalled`` when the context's handler logs the shutdown signal, before it stops the context."""

        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("shutdown signal received"):
                signalled.set()

    logging.getLogger("aiodstream.streaming").addHandler(SignalSeen())

    def slow(rdd: object) -> None:
        if os.path.exists(os.path.join(markers, "started")):
            return  # only the first batch works
        open(os.path.join(markers, "started"), "w").close()
        signalled.wait(60)  # in flight while the signal is handled (the parent signals once it sees ``started``)
        time.sleep(1)  # and for a second of the stop: an immediate stop would return from awaitTermination first
        open(os.path.join(markers, "done"), "w").close()

    ssc.queueStream([[1, 2, 3]]).foreachRDD(slow)
    ssc.start()
    ssc.awaitTermination()
    drained = os.path.exists(os.path.join(markers, "done"))
    print("awaitTermination returned", ssc.getState(), "after the batch" if drained else "before the batch", flush=True)
    release.set()  # the abandoned listener thread may end now, and with it the process
    ssc.stop(stopSparkContext=True)


def run_twice(sc: object, markers: str) -> None:
    """Ten batches queued behind the first, a graceful stop (first SIGINT) draining them, a second SIGINT meanwhile."""
    from pyspark.streaming import StreamingListener

    from streaming import StreamingContext

    seen = {"shutdown signal received": threading.Event(),
            "an immediate stop was asked for while a graceful one drains": threading.Event()}

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            for start, event in seen.items():
                if record.getMessage().startswith(start):
                    event.set()

    logging.getLogger("aiodstream").addHandler(Seen())
    logging.getLogger("aiodstream").setLevel(logging.INFO)
    submitted = threading.Event()

    class Submitted(StreamingListener):
        count = 0

        def onBatchSubmitted(self, batchSubmitted: object) -> None:  # noqa: N803 - pyspark's names
            self.count += 1
            if self.count >= 11:
                submitted.set()

    ssc = StreamingContext(sc, 0.2)
    ssc.addStreamingListener(Submitted())

    def hold_or_count(rdd: object) -> None:
        if not os.path.exists(os.path.join(markers, "started")):
            submitted.wait(60)
            open(os.path.join(markers, "started"), "w").close()
            seen["shutdown signal received"].wait(60)
            open(os.path.join(markers, "draining"), "w").close()
            seen["an immediate stop was asked for while a graceful one drains"].wait(60)
            return
        with open(os.path.join(markers, "ran"), "a") as out:
            out.write("batch\n")

    ssc.queueStream([sc.parallelize([n]) for n in range(40)]).foreachRDD(hold_or_count)  # type: ignore[attr-defined]
    ssc.start()
    try:
        ssc.awaitTermination()
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    ssc.stop(stopSparkContext=False)  # waits for the stop the signals began
    ran_path = os.path.join(markers, "ran")
    ran = len(open(ran_path).read().splitlines()) if os.path.exists(ran_path) else 0
    print("interrupted" if interrupted else "not interrupted", ssc.getState(), f"later batches run: {ran}", flush=True)
    sc.stop()  # type: ignore[attr-defined]


def run_continuous(sc: object, markers: str) -> None:
    """A continuous file-to-file query; SIGTERM should close and commit the epoch in progress."""
    from streaming import StreamingContext
    from streaming.continuous import Continuous, FileSink, FileSource

    ssc = StreamingContext(sc, Continuous("200 milliseconds"))
    ssc.checkpoint(os.path.join(markers, "ckpt"))
    ssc.continuousStream(FileSource([os.path.join(markers, "in.txt")])).map(str.upper).writeTo(
        FileSink(os.path.join(markers, "out")))
    ssc.start()
    out = os.path.join(markers, "out")
    while not list(FileSink.read_committed(out)):  # the first rows are committed: the parent may signal
        if ssc.awaitTerminationOrTimeout(0.1):
            break
    open(os.path.join(markers, "started"), "w").close()
    ssc.awaitTermination()
    print("awaitTermination returned", ssc.getState(), flush=True)
    ssc.stop(stopSparkContext=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "batch")
