"""Spark's shipped streaming examples (pyspark's ``examples/src/main/python/streaming``), run as a user would move them.

Each example's source is run as shipped with these changes, and no others:

- ``from pyspark.streaming import`` becomes ``from streaming import`` (the move to this engine);
- ``SparkContext(appName=...)`` becomes the Spark the test gives: the shared classic SparkContext, or
  a Spark Connect session (the move to Connect);
- ``StreamingContext(sc, n)`` gets ``clock=`` a manual clock, and ``queue_stream.py``'s
  ``time.sleep(6)`` advances that clock six batches, so batches are cut where the test says;
- the inputs are the test's: a socket server on 127.0.0.1 that sends each batch's lines, a
  directory where each batch's file appears, and a small word-sentiment file in place of
  ``data/streaming/AFINN-111.txt``; stateful_network_wordcount's ``checkpoint`` directory is
  under the test's directory rather than the working directory, and recoverable_network_wordcount
  gets ``<workdir>/checkpoint`` and ``<workdir>/counts.txt`` as its checkpoint directory and output file;
- stateful_network_wordcount's ``sc.parallelize`` (its initial state) becomes
  ``ssc.sparkContext.parallelize``: the same SparkContext on classic, the FrameContext on Connect,
  where the session itself has no ``parallelize``.

:func:`run_example` runs one in this process and returns what it printed. Run as a module
(``python -m tests.streaming.shipped_examples <name> <connect-url> <workdir> <feed-json>``) it
runs one on a Spark Connect session made from the URL as a user's program makes it
(``SparkSession.builder.remote(url).getOrCreate()``) in a process with no SparkContext, as a
Connect client is, and prints only what the example printed.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pyspark

EXAMPLES = Path(pyspark.__file__).parent / "examples" / "src" / "main" / "python" / "streaming"
INTERVALS_S = {"network_wordjoinsentiments": 5}
"""Each example's batch interval where it is not 1 s."""
SENTIMENTS = "happy 3\nsad -2\ngood 3\nbad -3\nspark 2\nstream 1\n"
"""The word-sentiment list network_wordjoinsentiments joins with (AFINN's format: word, space, score)."""
SOCKET_EXAMPLES = ("network_wordcount", "network_wordjoinsentiments", "sql_network_wordcount",
                   "stateful_network_wordcount", "recoverable_network_wordcount")
WAIT_S = 120.0
"""How long a step may take before the run is called stuck (a loaded machine: generous, never reached when it works)."""


def program(name: str, workdir: Path) -> str:
    """The example's source with the changes the module docstring lists."""
    source = (EXAMPLES / f"{name}.py").read_text()
    changed = source.replace("from pyspark.streaming import", "from streaming import")
    changed = re.sub(r"SparkContext\(appName=\"[A-Za-z]+\"\)", "__spark__", changed)
    changed = re.sub(r"StreamingContext\(sc, (\d+)\)", r"StreamingContext(sc, \1, clock=__clock__)", changed)
    changed = changed.replace("time.sleep(6)", "__advance__(6)")
    changed = changed.replace('"data/streaming/AFINN-111.txt"', repr(str(workdir / "AFINN-111.txt")))
    changed = changed.replace('ssc.checkpoint("checkpoint")', f"ssc.checkpoint({str(workdir / 'checkpoint')!r})")
    # A Connect session has no parallelize: the context's SparkContext (a FrameContext there) has.
    changed = changed.replace("initialStateRDD = sc.parallelize(", "initialStateRDD = ssc.sparkContext.parallelize(")
    if changed.count("__spark__") != 1 or "clock=__clock__" not in changed:
        raise AssertionError(f"{name}.py no longer has the shape this harness changes")
    return changed


class LineServer:
    """A TCP server on 127.0.0.1 for one client (the example's receiver): sends the lines it is given."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._conn: socket.socket | None = None

    def send(self, lines: list[str]) -> None:
        if self._conn is None:
            self._sock.settimeout(WAIT_S)
            self._conn, _ = self._sock.accept()
        self._conn.sendall("".join(line + "\n" for line in lines).encode())

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._sock.close()


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _active(done: threading.Event) -> Any:
    from streaming import StreamingContext

    _wait(lambda: StreamingContext.getActive() is not None or done.is_set(), "the example's StreamingContext to start")
    ssc = StreamingContext.getActive()
    if ssc is None:
        raise AssertionError("the example ended before its StreamingContext started")
    return ssc


def _step(ssc: Any, clock: Any, interval_ms: int) -> None:
    """One batch: move the manual clock one interval and wait until the batches due have completed."""
    async def step() -> None:
        clock.advance(interval_ms)
        await ssc.runtime.wait_until_idle()

    ssc._bridge.call(step)


def _last_tick(ssc: Any, clock: Any, interval_ms: int, done: threading.Event) -> None:
    """queue_stream stops gracefully: its timer fires one more tick first, which the manual clock gives once asked for."""
    timer = ssc.runtime.scheduler.generator.timer
    _wait(lambda: timer._stop_after_tick or done.is_set(), "the graceful stop to wait for its last tick")

    async def tick() -> None:
        clock.advance(interval_ms)

    if not done.is_set():
        ssc._bridge.call(tick)


@contextlib.contextmanager
def _kept_running(spark: Any) -> Iterator[None]:
    """queue_stream stops its Spark at the end: the test's shared one keeps running."""
    stop = spark.stop
    spark.stop = lambda: None
    try:
        yield
    finally:
        spark.stop = stop


def run_example(name: str, spark: Any, workdir: Path, feed: list[list[str]]) -> str:
    """Run the example ``name`` on ``spark`` for ``len(feed)`` batches, ``feed[k]`` the lines of batch k+1; what it printed.

    Socket examples get ``feed[k]`` over the socket before batch k+1 is cut (once the receiver
    holds them); ``hdfs_wordcount`` gets it as a file modified within batch k+1; ``queue_stream``
    runs its own six batches (``feed`` unused).
    """
    from scheduler import ManualClock
    from streaming import StreamingContext

    interval_ms = INTERVALS_S.get(name, 1) * 1000
    clock = ManualClock(0)
    (workdir / "AFINN-111.txt").write_text(SENTIMENTS)
    watched = workdir / "watched"
    watched.mkdir(exist_ok=True)
    server = LineServer() if name in SOCKET_EXAMPLES else None
    argv = [name]
    if server is not None:
        argv += ["127.0.0.1", str(server.port)]
    if name == "recoverable_network_wordcount":
        argv += [str(workdir / "checkpoint"), str(workdir / "counts.txt")]
    elif name == "hdfs_wordcount":
        argv.append(str(watched))
    done = threading.Event()
    failure: list[BaseException] = []

    def advance(batches: int) -> None:
        ssc = _active(done)
        for _ in range(batches):
            _step(ssc, clock, interval_ms)

    namespace = {"__name__": "__main__", "__spark__": spark, "__clock__": clock, "__advance__": advance}

    def main() -> None:
        try:
            exec(compile(program(name, workdir), str(EXAMPLES / f"{name}.py"), "exec"), namespace)
        except BaseException as exc:  # reported by the driver below
            failure.append(exc)
        finally:
            done.set()

    out = io.StringIO()
    saved_argv = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(out), _kept_running(spark):
            example = threading.Thread(target=main, name=f"example-{name}", daemon=True)
            example.start()
            _wait(lambda: StreamingContext.getActive() is not None or done.is_set(), "the example's StreamingContext to start")
            if failure:  # it failed before its context started: that error, not a missing context
                raise failure[0]
            if name != "queue_stream":
                _drive(name, _active(done), clock, interval_ms, feed, server, watched)
            else:
                _last_tick(_active(done), clock, interval_ms, done)
            example.join(WAIT_S)
    finally:
        sys.argv = saved_argv
        if server is not None:
            server.close()
    if example.is_alive():
        raise AssertionError(f"{name} did not end after its StreamingContext stopped")
    if failure:
        raise failure[0]
    return out.getvalue()


def _drive(name: str, ssc: Any, clock: Any, interval_ms: int, feed: list[list[str]], server: LineServer | None,
           watched: Path) -> None:
    """Feed and cut each batch, then stop the context (the example's awaitTermination returns)."""
    try:
        buffer = ssc._graph.input_streams[0]._buffer if server is not None else None
        for index, lines in enumerate(feed, start=1):
            if server is not None and lines:
                server.send(lines)
                held = functools.partial(lambda got, count: len(got) >= count, buffer, len(lines))
                _wait(held, f"the receiver to hold batch {index}'s {len(lines)} lines")
            elif server is None and lines:
                path = watched / f"part-{index:04d}.txt"
                path.write_text("".join(line + "\n" for line in lines))
                mtime_ns = (clock.now().milliseconds + interval_ms // 2) * 1_000_000
                os.utime(path, ns=(mtime_ns, mtime_ns))
            _step(ssc, clock, interval_ms)
    finally:
        ssc.stop(stopSparkContext=False)


def main(argv: list[str]) -> None:
    """The child's entry: ``<name> <connect-url> <workdir> <feed-json>``; prints the example's output only."""
    name, url, workdir, feed = argv
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    printed = run_example(name, spark, Path(workdir), json.loads(feed))
    sys.stdout.write(printed)
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
