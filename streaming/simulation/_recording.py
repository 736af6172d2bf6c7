"""TraceRecording: a StreamingContext's run recorded for the simulator (``record_trace``, ``spark.aiodstream.trace.*``).

The listener events go to a :class:`TraceRecorder` while the run lasts; at its stop the Spark jobs
of every recorded output operation are read from Spark's UI (its REST API) and added.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Callable

from scheduler import Duration, Time, library_logger

from ..runtime import QueryRuntime
from ..spark import streaming_job_group
from ._model_checks import ModelError
from ._spark_jobs import fetch_spark_jobs
from ._trace import TraceRecorder

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["TraceRecording"]

_WRITE_TIMEOUT_S = 120.0


class _StopAfterBatches:
    """``spark.aiodstream.trace.batches``: stops the context once that many batches completed.

    The stop runs on a thread of its own (a listener may not stop its context), as a program's
    own ``ssc.stop(stopSparkContext=False)`` would; ``awaitTermination`` then returns and the
    program carries on to its end. Not a graceful stop: that drains every batch generated so far,
    and a loaded run that fell behind would record (and wait for) its whole backlog; here the
    batches queued behind are dropped and the one running gets the usual grace period.
    """

    def __init__(self, limit: int, stop: Callable[[], None]) -> None:
        self._limit = limit
        self._stop = stop
        self._seen = 0

    def on_batch_completed(self, event: object) -> None:
        self._seen += 1
        if self._seen == self._limit:
            threading.Thread(target=self._stop, name="aiodstream-trace-stop", daemon=True).start()


class TraceRecording:
    """One context's trace: asked for (:meth:`request`, or Spark's settings), started with the run, finished at its stop.

    Args:
        name: the context's name, the prefix of its Spark job groups (``"aiodstream-0"``).
    """

    def __init__(self, name: str) -> None:
        """Nothing recorded yet."""
        self._name = name
        self._request: tuple[str, int | None] | None = None  # record_trace(path, batches)
        self._recorder: TraceRecorder | None = None
        self._written = threading.Event()  # set while no trace is being recorded or completed
        self._written.set()
        self._on_connect = False  # the recorded run is on Spark Connect (its jobs are the server's)
        self._log = library_logger("aiodstream.streaming", component="TraceRecording", context=name)

    def request(self, path: str | os.PathLike[str], batches: int | None) -> None:
        """Record the next run to ``path``, stopping after ``batches`` batches (``record_trace``).

        Raises:
            ValueError: ``batches`` is not a positive int.
        """
        if batches is not None and (isinstance(batches, bool) or not isinstance(batches, int) or batches < 1):
            raise ValueError(f"batches must be a positive int, got {batches!r}")
        self._request = (os.fspath(path), batches)

    def start(self, setting: tuple[str, int | None] | None, *, runtime: QueryRuntime, sc: SparkContext,
              batch_interval: Duration, concurrent_jobs: int, async_mode: bool, stop: Callable[[], None],
              sequential_batches: bool = False) -> None:
        """Record ``runtime``'s run when a trace was requested or set (``setting``: path and batch limit); blocking (py4j calls).

        Args:
            setting: ``spark.aiodstream.trace.path`` and ``.batches``, used without a :meth:`request`.
            runtime: the micro-batch runtime to record.
            sc: the SparkContext its jobs run on.
            batch_interval: the batch interval.
            concurrent_jobs: how many jobs run at once.
            async_mode: the context lives in ``async with`` (a batch limit cannot stop it).
            stop: stops the context (called on a thread of its own after the batch limit).
            sequential_batches: the program runs its batches one after another (recorded for a replay).

        Raises:
            ValueError: a batch limit for a context in ``async with``.
        """
        request = self._request or setting
        if request is None or self._recorder is not None:
            return
        path, limit = request
        if limit is not None and async_mode:
            raise ValueError("a trace's batch limit stops a context started with start(); a context in 'async with' "
                             "stops itself (await ssc.stop_async())")
        self._on_connect = not hasattr(sc, "_jsc")  # a Spark Connect session's FrameContext: no JVM here
        meta = {"master": sc.master, "default_parallelism": sc.defaultParallelism, "cpus": os.cpu_count(),
                "context": self._name, "app_id": sc.applicationId}
        self._recorder = TraceRecorder(path, batch_interval=batch_interval, concurrent_jobs=concurrent_jobs, meta=meta,
                                       keep_batches=True, sequential_batches=sequential_batches)
        runtime.add_listener(self._recorder, name="trace-recorder")
        self._written.clear()
        if limit is not None:
            runtime.add_listener(_StopAfterBatches(limit, stop), name="trace-batches")

    def finish(self, sc: SparkContext | None) -> None:
        """Once the run stopped: add the Spark jobs of every recorded output operation to the trace, and close it (blocking)."""
        recorder, self._recorder = self._recorder, None
        if recorder is None:
            return
        try:
            self._write(recorder, sc)
        finally:
            self._written.set()

    def wait_written(self) -> None:
        """Wait (up to two minutes) until a trace being finished on another thread is written: the program may stop Spark next."""
        self._written.wait(_WRITE_TIMEOUT_S)

    def _write(self, recorder: TraceRecorder, sc: SparkContext | None) -> None:
        try:
            if self._on_connect:
                self._log.warning("trace without Spark jobs: on Spark Connect the server's jobs and task times are not "
                                  "read (they live in the server's Spark UI)", path=recorder.path)
                return
            url = None if sc is None else sc.uiWebUrl
            if sc is None or url is None:
                self._log.warning("trace without Spark jobs: Spark's UI is off (spark.ui.enabled=false), so its task "
                                  "times cannot be read", path=recorder.path)
                return
            groups = {streaming_job_group(self._name, Time(batch), op): (batch, op)
                      for batch, ops in recorder.batches for op in ops}
            try:
                found = fetch_spark_jobs(url, sc.applicationId, groups)
            except ModelError as exc:
                self._log.warning("trace without Spark jobs", reason=str(exc), path=recorder.path)
                return
            for (batch, op), jobs in sorted(found.items()):
                recorder.write_spark_jobs(Time(batch), op, jobs)
        finally:
            recorder.close()

    def __repr__(self) -> str:
        return f"<TraceRecording {self._name} [{'recording' if self._recorder is not None else 'idle'}]>"
