"""StreamingQueryFace: pyspark's ``StreamingQuery`` surface, over whichever ``QueryRuntime`` a context runs on.

The names pyspark's ``StreamingQuery`` has (``id``, ``runId``, ``status``, ``lastProgress``,
``processAllAvailable``, ``exception``, ``explain``...), with pyspark's value shapes, each delegating
to the runtime through the :class:`~streaming.runtime.QueryRuntime` protocol.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import anyio
import anyio.from_thread
import anyio.lowlevel

from scheduler import Duration, StreamingQueryException, StreamingStateError

from ._manager import as_pyspark_exception, pyspark_progress
from ._sync_bridge import BridgeClosedError, SyncBridge
from .dstream import StreamEnvironment
from .runtime import QueryRuntime, StreamingContextState
from .spark import timeout_milliseconds

__all__ = ["StreamingQueryFace", "pyspark_errors"]

_WAIT_ON_LOOP = ("Cannot wait for the StreamingContext to terminate on its event loop's thread (an inline or async listener "
                 "callback): the wait would block the loop it waits for; wait from another thread (a plain 'def' listener "
                 "callback runs on a thread of its own)")

# Spark's refusal of a wait from the query's own thread (its loop, a listener on it, or one of its jobs), which the wait needs.
_SAME_THREAD = "Cannot wait for a query state from the same thread that is running the query"


@contextlib.contextmanager
def pyspark_errors() -> Iterator[None]:
    """A query's death cause leaves a context as pyspark's ``StreamingQueryException`` too (pyspark code catches that)."""
    try:
        yield
    except StreamingQueryException as exc:
        raise as_pyspark_exception(exc).with_traceback(None) from exc.__cause__


def _wait_bound(timeout: float | None) -> Duration | None:
    """A wait's bound from a timeout in seconds: ``None`` (no bound) for ``None`` or a negative timeout, as pyspark's.

    pyspark hands ``int(timeout * 1000)`` to Spark's ``awaitTerminationOrTimeout``, whose waiter
    waits without a bound for a negative one; so ``-0.0001`` (0 ms) returns at once, ``-1`` never.
    """
    if timeout is None:
        return None
    milliseconds = timeout_milliseconds(timeout)
    return None if milliseconds < 0 else Duration(milliseconds)


class StreamingQueryFace:
    """pyspark's ``StreamingQuery`` names over a context's runtime (``None`` until it is created).

    The base of ``StreamingContext``: every context is also a query, listed by :data:`streaming.streams`.

    Args:
        env: the context's streams' environment (its graph; whether it lives in ``async with``).
        bridge: the blocking bridge that ``start()`` opens.
        name: the query's name (``queryName``).
        after_termination: called once a blocking wait saw the query stop.
    """

    def __init__(self, env: StreamEnvironment, bridge: SyncBridge, name: str | None, *,
                 after_termination: Callable[[], None] = lambda: None) -> None:
        """A query not started yet."""
        self._env = env
        self._bridge = bridge
        self._query_name = name
        self._after_termination = after_termination
        self._runtime: QueryRuntime | None = None
        self._closed_before_start = False  # stopped before it was ever started
        self._stopped_unstarted = threading.Event()
        # In 'async with': the host loop's token and thread, for a blocking wait from another thread.
        self._host: tuple[anyio.lowlevel.EventLoopToken, int] | None = None

    def _entered_async(self) -> None:
        """Record the running host loop (on it, at ``async with``): blocking waits refuse it and reach it from others."""
        self._host = (anyio.lowlevel.current_token(), threading.get_ident())

    def _refuse_if_started_sync(self, what: str) -> None:
        """Raises StreamingStateError if :meth:`start` runs this context on its own loop (where ``what`` cannot be done)."""
        if not self._env.async_mode and self._bridge.is_open:
            raise StreamingStateError(f"this context was started with start(): cannot {what}; use ssc.stop() and "
                                      "ssc.awaitTermination(), or create it in 'async with' and start it with start_async()")

    def _refuse_off_host(self, method: str, instead: str | None = None) -> None:
        """Raises StreamingStateError if the context runs in 'async with' on another thread's event loop than the caller's.

        Its runtime's tasks, events and cancel scopes belong to that loop: awaited from another one, ``ssc.<method>()``
        would hang or fail inside anyio. ``instead``: what to do (default: await it on that loop).
        """
        host = self._host
        if host is None or threading.get_ident() == host[1] or self._over:
            return
        instead = instead or (f"await it on that loop (from this thread: anyio.from_thread.run(ssc.{method}, "
                              "token=<that loop's anyio.lowlevel.current_token()>))")
        raise StreamingStateError("this context runs in 'async with' on the event loop of another thread: cannot await "
                                  f"ssc.{method}() from this thread's loop; {instead}")

    def _in_own_job(self) -> bool:
        """Whether the caller is one of this context's jobs (a foreachRDD function), which a stop or a wait waits for."""
        scheduler = getattr(self._runtime, "scheduler", None)  # a micro-batch runtime's JobScheduler (a continuous one has none)
        return scheduler is not None and bool(scheduler.in_own_job())

    @property
    def runtime(self) -> QueryRuntime:
        """The runtime underneath (created on first use by the subclass)."""
        raise NotImplementedError

    def _close_unstarted(self) -> None:
        """Stopped before it was ever started: STOPPED, and a waiting ``awaitTermination`` returns."""
        self._closed_before_start = True
        self._stopped_unstarted.set()

    @property
    def _over(self) -> bool:
        """Whether the context has stopped (or was stopped before it started)."""
        runtime = self._runtime
        return self._closed_before_start or (runtime is not None and runtime.state is StreamingContextState.STOPPED)

    @property
    def _state(self) -> StreamingContextState:
        if self._runtime is None:
            return StreamingContextState.STOPPED if self._closed_before_start else StreamingContextState.INITIALIZED
        return self._runtime.state

    @property
    def id(self) -> str | None:
        """The query id (pyspark's ``StreamingQuery.id``): kept across restarts on the same checkpoint; ``None`` before start."""
        query_id = None if self._runtime is None else self._runtime.id
        return None if query_id is None else str(query_id)

    @property
    def runId(self) -> str | None:
        """This run's id, new at every start; ``None`` before start."""
        runtime = self._runtime
        return None if runtime is None or runtime.id is None else str(runtime.run_id)

    @property
    def name(self) -> str | None:
        """The query name (``queryName``), or ``None``."""
        return self._query_name

    @property
    def isActive(self) -> bool:
        """Whether the context was started and has not stopped."""
        return self._state is StreamingContextState.ACTIVE

    @property
    def status(self) -> dict[str, Any]:
        """What the query is doing now, as pyspark's ``status`` dict (``message``, ``isDataAvailable``, ``isTriggerActive``)."""
        if self._runtime is None:
            message = "Stopped" if self._state is StreamingContextState.STOPPED else "Initializing StreamExecution"
            return {"message": message, "isDataAvailable": False, "isTriggerActive": False}
        return self._runtime.status.json_value()

    @property
    def lastProgress(self) -> Any:
        """The newest progress report as pyspark's ``StreamingQueryProgress`` (a dict), or ``None``."""
        last = None if self._runtime is None else self._runtime.last_progress
        return None if last is None else pyspark_progress(last)

    @property
    def recentProgress(self) -> list[Any]:
        """The recent progress reports, oldest first, as pyspark's ``StreamingQueryProgress`` objects."""
        return [] if self._runtime is None else [pyspark_progress(p) for p in self._runtime.recent_progress]

    def awaitTermination(self, timeout: float | None = None) -> None:
        """Wait until the context stops or a batch fails (then raise its error); ``timeout`` in seconds.

        ``None`` or a negative timeout waits without a bound (pyspark's: Spark's ``ContextWaiter``).

        Raises:
            StreamingStateError: called on the context's event loop (an inline or ``async def`` listener
                callback), which the wait would block; or on the host's loop of a context in ``async with``.
        """
        self._await(_wait_bound(timeout))

    def awaitTerminationOrTimeout(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True if the context stopped, False on timeout (a negative one: no bound)."""
        return self._await(_wait_bound(timeout))

    def _await(self, timeout: Duration | None) -> bool:
        with pyspark_errors():
            stopped = self._await_termination(timeout)
        if stopped:
            self._after_termination()
        return stopped

    def _await_termination(self, timeout: Duration | None) -> bool:
        runtime = self._runtime
        host = self._host
        if self._env.async_mode and host is not None and not self._over:
            if threading.get_ident() == host[1]:  # blocking the loop the context runs on: it could never stop
                raise StreamingStateError("this context was entered with 'async with': use 'await ssc.await_termination_async()'")
            if runtime is not None:
                return anyio.from_thread.run(runtime.await_termination, timeout, token=host[0])
        if runtime is not None:
            if not self._bridge.in_loop_thread():
                with contextlib.suppress(BridgeClosedError):  # then the runtime stopped (or never ran on the bridge)
                    return self._bridge.call(runtime.await_termination, timeout)
            elif runtime.state is not StreamingContextState.STOPPED:
                raise StreamingStateError(_WAIT_ON_LOOP)  # (a stopped one is answered below, off the loop it cannot call)
            if runtime.state is StreamingContextState.STOPPED:
                error = runtime.exception()
                if error is not None:
                    raise error.with_traceback(None)
                return True
        return self._stopped_unstarted.wait(None if timeout is None else timeout.seconds)

    async def await_termination_async(self, timeout: float | None = None) -> bool:
        """Wait until the context stops (True) or ``timeout`` seconds pass (False, never with ``None`` or a negative
        timeout); raises a batch's error.

        Raises:
            StreamingStateError: the context was started with ``start()``, or runs on another thread's event loop.
        """
        self._refuse_if_started_sync("wait for it with await_termination_async()")
        self._refuse_off_host("await_termination_async",
                              "wait in a worker thread instead: await anyio.to_thread.run_sync(ssc.awaitTermination)")
        with pyspark_errors():
            return await self.runtime.await_termination(_wait_bound(timeout))

    def processAllAvailable(self) -> None:
        """Block until everything available when called has been processed (pyspark's ``processAllAvailable``).

        Returns once a batch planned after the call found no new input and every earlier batch
        finished; with input arriving continuously it may never return. For tests.

        Raises:
            StreamingQueryException: the query terminated with a failure (stop on failure).
            JobFailedError: a batch failed (the DStream semantics).
            StreamingStateError: called from a listener callback or one of the context's own jobs (a
                foreachRDD function: the wait would wait for it), or inside ``async with`` (use
                :meth:`process_all_available_async`).
        """
        if self._env.async_mode:
            raise StreamingStateError("this context was entered with 'async with': use 'await ssc.process_all_available_async()'")
        if self._bridge.in_loop_thread() or self._in_own_job():
            raise StreamingStateError(_SAME_THREAD)
        runtime = self._runtime
        if runtime is None or runtime.state is not StreamingContextState.ACTIVE or not self._bridge.is_open:
            self._raise_death_cause()
            return
        try:
            with pyspark_errors():
                self._bridge.call(runtime.process_all_available)
        except BridgeClosedError:
            self._raise_death_cause()

    async def process_all_available_async(self) -> None:
        """:meth:`processAllAvailable` without blocking the event loop, inside ``async with``.

        Raises:
            StreamingStateError: awaited from another thread's event loop than the context's, or in one of the
                context's own jobs (an async foreachRDD function: the wait would wait for it).
        """
        self._refuse_off_host("process_all_available_async")
        if self._in_own_job():
            raise StreamingStateError(_SAME_THREAD)
        runtime = self._runtime
        if runtime is None or runtime.state is not StreamingContextState.ACTIVE:
            self._raise_death_cause()
            return
        with pyspark_errors():
            await runtime.process_all_available()

    def _raise_death_cause(self) -> None:
        error = self.exception()
        if error is not None:
            raise error.with_traceback(None)

    def exception(self) -> StreamingQueryException | None:
        """The failure that terminated the query (a ``StreamingQueryException``), or ``None``.

        The exception is also an instance of pyspark's ``pyspark.errors.StreamingQueryException``
        (with ``getCondition() == "STREAM_FAILED"``). Under the DStream semantics (the default)
        a failed batch does not terminate the query, so this stays ``None``; the failure is
        raised by :meth:`awaitTermination`.
        """
        error = None if self._runtime is None else self._runtime.exception()
        return as_pyspark_exception(error) if isinstance(error, StreamingQueryException) else None

    def explain(self, extended: bool = False) -> None:
        """Print each output operation's DStream lineage down to its input streams (pyspark's ``explain``)."""
        print(self._env.graph.explain(extended=extended))
