"""SparkBinding: one context's tie to Spark: its SparkContext, settings, job threads and job-group cancellations.

What Spark Streaming's ``StreamingContext`` reaches through its ``SparkContext`` and ``JobScheduler``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from scheduler import StreamingStateError

from ._job_groups import cancel_job_group
from ._job_threads import JobThreads, SparkJobThreads
from ._local_properties import SavedProperties
from ._session import SparkSettings, embedded_spark_context

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed
    from pyspark.sql import SparkSession

__all__ = ["CANCEL_JOIN_S", "JobThreadsOwner", "SparkBinding"]

CANCEL_JOIN_S = 30.0
"""How long a stop waits for Spark to take a job-group cancellation (a py4j call; normally milliseconds)."""


class JobThreadsOwner:
    """What every Spark binding keeps beside its Spark side: its job threads and its pending cancellations.

    Subclasses create ``_threads`` on first need and append to ``_cancellations`` under ``_lock``.
    """

    def __init__(self) -> None:
        """Nothing created yet."""
        self._lock = threading.Lock()
        self._threads: JobThreads | None = None
        self._cancellations: list[threading.Thread] = []

    def join_cancellations(self) -> None:
        """Wait until the cancellations asked so far reached Spark (blocking; at most :data:`CANCEL_JOIN_S` each)."""
        with self._lock:
            threads, self._cancellations = self._cancellations, []
        for thread in threads:
            thread.join(CANCEL_JOIN_S)

    def release_job_threads(self) -> None:
        """Let the job threads end once their current jobs do (a later job makes new ones)."""
        with self._lock:
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown()


class SparkBinding(JobThreadsOwner):
    """The Spark side of one streaming context, created lazily and released at its stop.

    Every method that makes py4j calls says so: those block and must run off the event loop.
    Thread-safe: the event loop, the generation thread and job threads all reach it.

    Args:
        spark_context: the SparkContext to use; ``None`` starts (or joins) an embedded local one on first need.
        name: the prefix of the job threads' names.
        session: the classic SparkSession the context was given (on ``spark_context``), whose runtime conf
            has the SQL settings (``spark.sql.*``) first; ``None``: the SparkConf's only.
    """

    kind = "classic"

    def __init__(self, spark_context: SparkContext | None, name: str, session: SparkSession | None = None) -> None:
        """Bind to ``spark_context`` (or to an embedded one, later); nothing is started.

        Raises:
            StreamingStateError: ``spark_context`` has been stopped (pyspark fails in the JVM with a NullPointerException).
        """
        if spark_context is not None and getattr(spark_context, "_jsc", True) is None:  # no py4j call: pyspark clears it at stop
            raise StreamingStateError("cannot create a StreamingContext on a SparkContext that has been stopped: "
                                      "create a new SparkContext (or pass None for an embedded local one)")
        super().__init__()
        self._sc = spark_context
        self._session = session
        self._name = name
        self._settings: SparkSettings | None = None
        self._threads: SparkJobThreads | None = None
        self._concurrency = 1
        self._properties: SavedProperties | None = None

    @property
    def spark_context(self) -> SparkContext:
        """The SparkContext (an embedded local one is started on first need: blocking, seconds)."""
        if self._sc is None:
            self._sc = embedded_spark_context()
        return self._sc

    @property
    def started_spark_context(self) -> SparkContext | None:
        """The SparkContext if one was given or started already, else ``None`` (starts nothing)."""
        return self._sc

    def settings(self) -> SparkSettings:
        """The Spark settings the context uses, read once (py4j calls the first time: blocking)."""
        with self._lock:
            if self._settings is None:
                self._settings = SparkSettings.read(self.spark_context, self._session)
            return self._settings

    def save_local_properties(self, *, inherit: bool = True) -> None:
        """Keep the calling thread's Spark local properties (``inherit=False``: none) for every job (Spark's
        ``savedProperties``; py4j calls).

        Called before the first job, on the thread that starts the context: each job then runs with
        a fresh copy of them (a FAIR pool or a tag set before the start reaches every job, and what
        one job sets ends with it).
        """
        self._properties = SavedProperties.capture(self.spark_context, inherit=inherit)

    def set_concurrency(self, jobs: int) -> None:
        """How many job threads to create (the context's ``concurrentJobs``); before the first job."""
        self._concurrency = jobs

    def job_threads(self) -> SparkJobThreads:
        """The threads output-operation jobs run on (created on first use, one per concurrent job)."""
        with self._lock:
            if self._threads is None:
                self._threads = SparkJobThreads(self._concurrency, f"{self._name}-job", properties=self._properties)
            return self._threads

    def cancel_job_group(self, group: str) -> None:
        """Have Spark cancel the jobs of ``group`` without waiting: :meth:`join_cancellations` waits later."""
        thread = cancel_job_group(self.spark_context, group)
        with self._lock:
            self._cancellations.append(thread)

    def stop_spark(self) -> None:
        """Stop the SparkContext if one was given or started (blocking: py4j calls); nothing otherwise."""
        if self._sc is not None:
            self._sc.stop()

    def require_jvm(self, feature: str, alternative: str) -> None:
        """Nothing: a classic SparkContext has the JVM every feature needs."""

    def __repr__(self) -> str:
        return f"<SparkBinding {self._name} [{'started' if self._sc is not None else 'no SparkContext yet'}]>"
