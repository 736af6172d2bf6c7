"""Spark job groups for output-operation jobs: set just before a job thread's first py4j call, cancelled at stop.

Spark Streaming's ``JobScheduler.JobHandler`` sets the group on the thread that runs the job; here
a py4j hook does it lazily, installed while some context uses it and removed after.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, TypeVar, Union

from scheduler import StreamingStateError, library_logger

from ._local_properties import SavedProperties
from ._py4j import clear_job_group, gateway_client, is_stopped

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["STOPPED_SPARK_CONTEXT", "JobGroupHook", "Label", "cancel_job_group", "job_group_hook", "run_in_job_group"]

_job_thread = threading.local()
"""On a job thread, ``pending``: the (context, group, description, saved properties) to set before its next py4j
call; ``restore``: the saved properties and the thread's own local properties, to put back after its job."""

STOPPED_SPARK_CONTEXT = ("the SparkContext this context's jobs run on has been stopped (by sc.stop(), or by another "
                         "context's stop(stopSparkContext=True)): no job can use Spark any more; stop this context, and "
                         "stop a shared SparkContext only once every context on it has stopped")
"""Why a job that failed after its SparkContext stopped failed (pyspark's own error names a missing attribute)."""

Label = Union[str, Callable[[], str]]
"""A job group or description: the text, or a function making it when the job first calls Spark (most jobs of a
no-op or local output never do, and pay nothing for the text)."""


class JobGroupHook:
    """Makes a job thread's pending job group take effect just before that thread's next py4j call.

    A Spark job group is a local property of the JVM thread paired with the Python thread (pinned
    thread mode), read when a Spark job is submitted. Every Spark job a Python thread submits goes
    through a py4j call from that thread, so setting the group right before the first such call is
    as good as setting it when the job starts, and a job that never calls Spark (a no-op or a
    purely local output operation) costs no round trip at all.

    The hook wraps ``send_command`` of the process's py4j client (one per process, shared by every
    SparkContext). It is reference-counted: each user (a context's job threads) calls
    :meth:`acquire` before its first job and :meth:`release` when it is done; the first acquire
    installs the wrapper and the last release puts the client's own ``send_command`` back. While
    installed, threads with nothing pending pay one thread-local lookup per py4j call.
    """

    def __init__(self) -> None:
        """Create an uninstalled hook."""
        self._lock = threading.Lock()
        self._users = 0
        self._client: Any = None
        self._original: Any = None
        self._wrapper: Any = None
        self._had_own = False  # whether the client had its own send_command attribute before us

    @property
    def installed(self) -> bool:
        """Whether the wrapper is on the py4j client now."""
        return self._client is not None

    def acquire(self, sc: SparkContext) -> None:
        """Install the wrapper on ``sc``'s py4j client if no user has yet; count this user.

        Raises:
            RuntimeError: the SparkContext is stopped (it has no py4j gateway).
        """
        client = gateway_client(sc)
        with self._lock:
            if self._client is not None and self._client is not client:
                # A new SparkContext after the old one stopped brings a new client: move over.
                self._uninstall()
            if self._client is None:
                self._install(client)
            self._users += 1

    def release(self) -> None:
        """Uncount one user; the last one removes the wrapper (a no-op when nobody holds it)."""
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users == 0:
                self._uninstall()

    def _install(self, client: Any) -> None:
        send = client.send_command

        def send_command(*args: Any, **kwargs: Any) -> Any:
            pending = getattr(_job_thread, "pending", None)
            if pending is not None:
                _job_thread.pending = None  # first: the calls below come back through here
                context, group, description, properties = pending
                if properties is not None:  # before the group: the fresh copy replaces every property of the thread
                    _job_thread.restore = (properties, properties.apply())
                context.setJobGroup(group if isinstance(group, str) else group(),
                                    description if isinstance(description, str) else description(), True)
            return send(*args, **kwargs)

        self._client, self._original, self._wrapper = client, send, send_command
        self._had_own = "send_command" in vars(client)
        client.send_command = send_command

    def _uninstall(self) -> None:
        client, original, wrapper = self._client, self._original, self._wrapper
        self._client = self._original = self._wrapper = None
        if client is None or vars(client).get("send_command") is not wrapper:
            return  # someone wrapped it again after us: leave their wrapper in place
        if self._had_own:
            client.send_command = original
        else:
            del client.send_command  # the class's own method shows through again

    def run_in_group(self, sc: SparkContext, group: Label, description: Label, func: Any, args: tuple[Any, ...],
                     properties: SavedProperties | None = None) -> Any:
        """Call ``func(*args)`` on this thread with ``group`` pending for its first py4j call (a function label is
        called then, and only if that call comes).

        With ``properties``, that first call also gives the thread a fresh copy of them (Spark's
        ``JobHandler``), and the thread's own local properties are back once ``func`` returns or
        raises: what one job sets with ``sc.setLocalProperty`` never reaches the next.
        """
        _job_thread.pending = (sc, group, description, properties)
        try:
            result = func(*args)
        except BaseException as failure:
            _job_thread.pending = None
            try:
                _restore_properties()
            except Exception as exc:  # the job's own error is the one to report
                library_logger("aiodstream.streaming", component="SparkJobThreads").warning(
                    "restoring a job thread's local properties failed", error=repr(exc))
            if isinstance(failure, Exception) and is_stopped(sc):  # pyspark's own error says nothing of it
                raise StreamingStateError(STOPPED_SPARK_CONTEXT) from failure
            raise
        _job_thread.pending = None
        _restore_properties()
        return result


def _restore_properties() -> None:
    """Give this job thread its own local properties back, if its job's first py4j call replaced them."""
    restore = getattr(_job_thread, "restore", None)
    if restore is not None:
        _job_thread.restore = None
        properties, own = restore
        properties.restore(own)


job_group_hook = JobGroupHook()
"""The process's one hook (there is one py4j client per process)."""


_T = TypeVar("_T")


def run_in_job_group(sc: SparkContext, group: str, description: str, job: Callable[[], _T]) -> _T:
    """Run ``job`` (which submits Spark jobs from this thread) in job group ``group``, cancellable by it
    (``interruptOnCancel``: Spark interrupts the tasks); afterwards the thread's group, description and
    interrupt flag are cleared. Blocking.

    For the long-running tasks that live outside the batches' output operations: a receiver on an
    executor, a continuous query's tasks.
    """
    sc.setJobGroup(group, description, interruptOnCancel=True)
    try:
        return job()
    finally:
        clear_job_group(sc)


def cancel_job_group(sc: SparkContext, group: str) -> threading.Thread:
    """Have Spark cancel the jobs of ``group`` from a short-lived thread, which is returned.

    The caller, the event loop at an immediate stop, does not wait for the py4j call; the stop
    joins the thread later, from a worker thread.
    """

    def cancel() -> None:
        try:
            sc.cancelJobGroup(group)
        except Exception as exc:  # best effort: Spark may be stopping too
            library_logger("aiodstream.streaming", component="SparkJobThreads").warning(
                "cancelling a Spark job group failed", group=group, error=repr(exc))

    thread = threading.Thread(target=cancel, name="aiodstream-cancel", daemon=True)
    thread.start()
    return thread
