"""The query manager with pyspark's ``StreamingQueryManager`` names, and pyspark's views of our query objects.

``streams`` is the process's manager: it lists the active queries (StreamingContexts, and
``QueryRuntime`` objects of either kind that are queries), waits for any of them to terminate, and adds listeners to every
query, pyspark ``StreamingQueryListener`` subclasses included.
"""

from __future__ import annotations

import uuid
from typing import Any

from listeners import check_listener
from scheduler import StreamingQueryException, StreamingQueryProgress

from ._listener_compat import adapt_listener, progress_for_pyspark
from .runtime import QueryRegistry, query_registry
from .spark import timeout_milliseconds

__all__ = ["StreamingQueryManager", "as_pyspark_exception", "pyspark_progress", "streams"]


def pyspark_progress(progress: StreamingQueryProgress) -> Any:
    """``progress`` as pyspark's ``StreamingQueryProgress`` (a dict of Spark's JSON), built as pyspark builds it."""
    from pyspark.sql.streaming.listener import StreamingQueryProgress as PySparkProgress

    return PySparkProgress.fromJson(progress_for_pyspark(progress))


_pyspark_exception_class: type[StreamingQueryException] | None = None


def as_pyspark_exception(error: StreamingQueryException) -> StreamingQueryException:
    """``error`` as an instance of both our and pyspark's ``StreamingQueryException`` (pyspark imported on first use)."""
    global _pyspark_exception_class
    if _pyspark_exception_class is None:
        from pyspark.errors import StreamingQueryException as PySparkStreamingQueryException

        class PySparkCompatibleStreamingQueryException(StreamingQueryException, PySparkStreamingQueryException):
            """A query's death cause that pyspark code catches as ``pyspark.errors.StreamingQueryException``."""

            def getCondition(self) -> str:
                """Spark's error condition: ``STREAM_FAILED``."""
                return self.error_class

            def getErrorClass(self) -> str:
                """The error condition (pyspark's deprecated name)."""
                return self.error_class

            def getMessageParameters(self) -> dict[str, str]:
                """Spark's parameters of ``STREAM_FAILED``."""
                return {"id": str(self.query_id), "runId": str(self.run_id), "message": self.message}

            def getMessage(self) -> str:
                """The message, with its error class, as pyspark formats it."""
                return str(self)

            def getQueryContext(self) -> list[Any]:
                """No SQL query context: a streaming job failed."""
                return []

            def __str__(self) -> str:
                # pyspark shows the JVM's message, which leads with the error class.
                return f"[{self.error_class}] {self.args[0]}" if self.args else ""

        # Shown in tracebacks as what it is to the user: the query's StreamingQueryException.
        PySparkCompatibleStreamingQueryException.__name__ = "StreamingQueryException"
        PySparkCompatibleStreamingQueryException.__qualname__ = "StreamingQueryException"
        PySparkCompatibleStreamingQueryException.__module__ = "streaming"
        _pyspark_exception_class = PySparkCompatibleStreamingQueryException
    if isinstance(error, _pyspark_exception_class):
        return error
    converted = _pyspark_exception_class.__new__(_pyspark_exception_class)
    converted.__dict__.update(error.__dict__)
    converted.args = error.args
    converted.__cause__ = error.__cause__
    return converted


class StreamingQueryManager:
    """pyspark's ``StreamingQueryManager`` (``spark.streams``) over every query of the process.

    A query is a StreamingContext (every context is one), a :class:`StreamingRuntime` that
    tracks a query (with a checkpoint, a trigger or ``track_progress``) or a continuous
    ``ContinuousExecution``; ``active`` and ``get`` return those objects. Unlike Spark's, which is per SparkSession, the manager is
    process-wide: contexts may share a SparkContext or run on several event loops.
    """

    def __init__(self, registry: QueryRegistry) -> None:
        """A manager over ``registry``."""
        self._registry = registry

    @property
    def active(self) -> list[Any]:
        """The active queries, oldest first."""
        return [runtime.handle for runtime in self._registry.active()]

    def get(self, id: str | uuid.UUID) -> Any:
        """The active query with id ``id`` (a string or UUID), or ``None``."""
        try:
            key = id if isinstance(id, uuid.UUID) else uuid.UUID(str(id))
        except ValueError:
            raise ValueError(f"{id!r} is not a query id (a UUID)") from None
        runtime = self._registry.get(key)
        return None if runtime is None else runtime.handle

    def awaitAnyTermination(self, timeout: float | None = None) -> bool | None:
        """Block until a query terminated since the manager began or :meth:`resetTerminated`.

        Without ``timeout`` returns ``None`` once one did; with ``timeout`` (seconds, 0 or more;
        0 asks whether one did already) returns whether one did in time.

        Raises:
            StreamingQueryException: the last query that terminated with a failure did so
                (also when a later one terminated cleanly, as in Spark).
            PySparkValueError: ``timeout`` is negative or not a number (pyspark's ``VALUE_NOT_POSITIVE``).
        """
        seconds = _timeout(timeout)
        try:
            done = self._registry.wait_any_termination(seconds)
        except StreamingQueryException as exc:
            raise as_pyspark_exception(exc) from exc.__cause__
        return None if timeout is None else done

    async def await_any_termination(self, timeout: float | None = None) -> bool:
        """:meth:`awaitAnyTermination` for async code: the event loop is not blocked; cancellable.

        Returns True once a query terminated, False if ``timeout`` seconds passed first.
        """
        seconds = _timeout(timeout)
        try:
            return await self._registry.wait_any_termination_async(seconds)
        except StreamingQueryException as exc:
            raise as_pyspark_exception(exc) from exc.__cause__

    def resetTerminated(self) -> None:
        """Forget past terminations, so that :meth:`awaitAnyTermination` waits for a new one."""
        self._registry.reset_terminated()

    def addListener(self, listener: object) -> None:
        """Add a listener to every query, active or started later.

        A pyspark ``StreamingQueryListener`` receives pyspark's event objects; an aiodstream
        listener receives every event of every query (batches included).

        Raises:
            ValueError: the listener was already added.
            TypeError: not a listener, or one a listener bus refuses (an inline one with ``async`` callbacks).
        """
        registered, name = adapt_listener(listener)
        check_listener(registered, name)  # refused here, not by every later query's start
        for runtime in self._registry.add_listener(listener, registered, name):
            runtime.add_listener(registered, name=name)

    def removeListener(self, listener: object) -> None:
        """Remove a listener added with :meth:`addListener` (from active queries too); unknown ones are ignored, as in pyspark."""
        found = self._registry.remove_listener(listener)
        if found is None:
            return
        registered, runtimes = found
        for runtime in runtimes:
            try:
                runtime.remove_listener(registered)
            except ValueError:
                pass  # that query's bus never had it (it started before the listener was added, and ended)

    def listListeners(self) -> list[object]:
        """The listeners added, as given."""
        return self._registry.given_listeners()

    # snake_case names for async code and plain-Python users
    add_listener = addListener
    remove_listener = removeListener
    reset_terminated = resetTerminated

    def __repr__(self) -> str:
        return f"<StreamingQueryManager {len(self._registry.active())} active>"


def _timeout(timeout: float | None) -> float | None:
    """pyspark's rule for ``awaitAnyTermination``'s timeout: a number of seconds, 0 included (whether a query terminated
    already); ``True`` is 1, as in pyspark, where a bool is an int."""
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or timeout < 0:
        from pyspark.errors import PySparkValueError

        # pyspark's message names the value's type, not the value.
        raise PySparkValueError(errorClass="VALUE_NOT_POSITIVE",
                                messageParameters={"arg_name": "timeout", "arg_value": type(timeout).__name__})
    seconds = int(timeout) if isinstance(timeout, bool) else timeout  # the house's durations refuse bools
    return timeout_milliseconds(seconds) / 1000  # NaN or an infinity: pyspark's ValueError or OverflowError, with the fix


streams = StreamingQueryManager(query_registry)
"""The process's query manager."""
