"""ConnectBinding: a streaming context's tie to a Spark Connect session: settings, job threads, operation tags.

What :class:`SparkBinding` is for a classic SparkContext, over Spark Connect's gRPC client: no py4j,
no JVM in this process. A batch's job labels its Spark work with the session's thread-local
operation tags (``addTag``) where Spark Streaming sets a job group, and a stop interrupts the tag
(``interruptTag``) where Spark cancels the group.
"""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, TypeVar, cast

from scheduler import StreamingError, WorkerThreads, library_logger

from ._binding import JobThreadsOwner
from ._job_groups import Label
from ._session import STREAMING_SETTINGS, SparkSettings

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["ConnectBinding", "ConnectJobThreads", "ConnectNotSupportedError"]

T = TypeVar("T")


class ConnectNotSupportedError(StreamingError, NotImplementedError):
    """What a program asked for needs a JVM in the driver (a SparkContext), which a Spark Connect session has not.

    The message names the feature, why, and what to use instead.
    """


class ConnectJobThreads:
    """Threads that only run output-operation jobs, each job's Spark work tagged with its batch's group.

    A Connect session's operation tags are thread-local in its client, and every query a thread
    runs carries the tags that thread holds. These threads run nothing but jobs; each job adds its
    group as a tag before it runs and removes it after, so one job's tag never labels another's
    queries, and an immediate stop interrupts exactly the batch's queries (``interruptTag``).
    Unlike a job group, adding a tag is a local call: no round trip per job.

    Args:
        session: the Spark Connect session.
        size: how many jobs may run at once (the context's ``concurrentJobs``).
        name: the threads' name prefix.
    """

    def __init__(self, session: Any, size: int, name: str = "aiodstream-job") -> None:
        """Create the pool; its threads start on first use."""
        self._session = session
        self._threads = WorkerThreads(size, name)

    def submit(self, sc: SparkContext, group: Label, description: Label, func: Callable[..., T], *args: Any) -> Future[T]:
        """Start ``func(*args)`` on a job thread with ``group`` as its queries' tag (``sc`` and ``description``: unused
        on Connect, which has no job descriptions).

        Raises:
            RuntimeError: the pool was shut down.
        """
        return self._threads.submit(self._run_tagged, group, func, args)

    async def run(self, sc: SparkContext, group: Label, description: Label, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` as :meth:`submit` starts it, awaited without blocking the event loop (a cancelled caller
        stops waiting at once; the query goes on until the stop interrupts its tag)."""
        return await self._threads.run(contextvars.copy_context().run, self._run_tagged, group, func, args)  # (see SparkJobThreads.run)

    def _run_tagged(self, group: Label, func: Callable[..., T], args: tuple[Any, ...]) -> T:
        tag = group if isinstance(group, str) else group()
        self._session.addTag(tag)
        try:
            return func(*args)
        finally:
            self._session.removeTag(tag)

    def shutdown(self) -> None:
        """Stop the threads once their current jobs end (a job still running is not waited for; a queued one is dropped
        and its caller gets a cancellation)."""
        self._threads.shutdown()


class ConnectBinding(JobThreadsOwner):
    """The Spark side of one streaming context on a Spark Connect session.

    Thread-safe. Members that talk to the server block (gRPC calls) and must run off the event loop.

    Args:
        session: the ``pyspark.sql.connect.session.SparkSession``.
        name: the prefix of the job threads' names.
        frame_context: makes the ``FrameContext`` (``streaming.connect``) that stands where the
            engine uses a SparkContext, from the session; called once, on first need.
    """

    kind = "connect"

    def __init__(self, session: Any, name: str, frame_context: Callable[[Any], Any]) -> None:
        """Bind to ``session``; nothing is called on the server yet."""
        super().__init__()
        self._session = session
        self._name = name
        self._make_frame_context = frame_context
        self._frames: Any = None
        self._settings: SparkSettings | None = None
        self._threads: ConnectJobThreads | None = None
        self._concurrency = 1

    @property
    def session(self) -> Any:
        """The Spark Connect session."""
        return self._session

    @property
    def spark_context(self) -> SparkContext:
        """The ``FrameContext`` over the session, standing where the engine uses a SparkContext (same methods, FrameRDDs)."""
        with self._lock:
            if self._frames is None:
                self._frames = self._make_frame_context(self._session)
            return cast("SparkContext", self._frames)

    @property
    def started_spark_context(self) -> SparkContext | None:
        """``None``: a Connect session has no SparkContext (no Spark UI, no status store to read jobs from)."""
        return None

    def settings(self) -> SparkSettings:
        """The streaming settings set on the session or the server (one ``conf.getAll`` call), read once.

        ``default_parallelism`` is the FrameContext's ``defaultParallelism`` (read from the server once);
        ``fs.defaultFS`` is the server's ``spark.hadoop.fs.defaultFS`` when set.
        """
        with self._lock:
            if self._settings is not None:
                return self._settings
        every = dict(self._session.conf.getAll)
        parallelism = int(self.spark_context.defaultParallelism)
        conf = {key: str(every[key]) for key in STREAMING_SETTINGS if every.get(key) is not None}
        settings = SparkSettings(parallelism, conf, str(every.get("spark.hadoop.fs.defaultFS") or "file:///"))
        with self._lock:
            if self._settings is None:
                self._settings = settings
            return self._settings

    def save_local_properties(self, *, inherit: bool = True) -> None:
        """Nothing: a Spark Connect session has no thread-local properties (its jobs are told apart by operation tags)."""

    def set_concurrency(self, jobs: int) -> None:
        """How many job threads to create (the context's ``concurrentJobs``); before the first job."""
        self._concurrency = jobs

    def job_threads(self) -> ConnectJobThreads:
        """The threads output-operation jobs run on (created on first use, one per concurrent job)."""
        with self._lock:
            if self._threads is None:
                self._threads = ConnectJobThreads(self._session, self._concurrency, f"{self._name}-job")
            return self._threads

    def cancel_job_group(self, group: str) -> None:
        """Interrupt the session's queries tagged ``group`` from a short-lived thread: :meth:`join_cancellations` waits."""
        session = self._session

        def interrupt() -> None:
            try:
                session.interruptTag(group)
            except Exception as exc:  # best effort: the server or the session may be going away too
                library_logger("aiodstream.streaming", component="ConnectJobThreads").warning(
                    "interrupting a Spark Connect tag failed", tag=group, error=repr(exc))

        thread = threading.Thread(target=interrupt, name="aiodstream-interrupt", daemon=True)
        thread.start()
        with self._lock:
            self._cancellations.append(thread)

    def stop_spark(self) -> None:
        """Release the session on the server and close its channel (``SparkSession.stop()`` on Connect: the server goes on)."""
        self._session.stop()

    def require_jvm(self, feature: str, alternative: str) -> None:
        """Refuse ``feature``, which needs a SparkContext in this process.

        Raises:
            ConnectNotSupportedError: always (the message names ``alternative``).
        """
        raise ConnectNotSupportedError(f"{feature} is not supported on Spark Connect: it needs a SparkContext in the "
                                       f"driver, and a Connect session has none; {alternative}")

    def __repr__(self) -> str:
        return f"<ConnectBinding {self._name} [session {getattr(self._session, 'session_id', '?')}]>"
