"""QueryRuntime: the contract every query runtime keeps (Spark's ``StreamExecution`` surface).

The micro-batch :class:`StreamingRuntime` and the continuous ``ContinuousExecution`` both keep it,
so the ``StreamingContext``, the query manager and the web UI drive either one without asking which.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from scheduler import Duration, JobFailedError, StreamingQueryProgress, StreamingQueryStatus
from scheduler.query import CheckpointPath

from ._state import StreamingContextState

__all__ = ["QueryRuntime"]


@runtime_checkable
class QueryRuntime(Protocol):
    """What a query runtime offers: lifecycle, termination, progress, listeners and services.

    A runtime lives in an ``async with`` block, which gives it a task group inside the host's
    application. Inside it, ``start()`` runs the query and ``stop()`` ends it; leaving the block stops
    a still-active runtime (gracefully on a normal exit, at once on an exception or cancellation).
    The state moves one way: ``INITIALIZED`` → ``ACTIVE`` → ``STOPPED``.

    Both runtimes keep it on a :class:`~streaming.runtime.RuntimeCore` (task group, stop-once,
    waiter, listeners on the loop, services) and claim their name, checkpoint and id in the
    process's query registry. A micro-batch runtime without query tracking (no checkpoint,
    trigger or progress tracking) is not a query: its ``id`` and ``run_id`` are ``None`` and
    ``status``, the progress and ``process_all_available`` raise ``StreamingStateError``.
    """

    name: str | None
    """The query's name (unique among the process's active queries), or ``None``."""

    kind: str
    """Which engine runs the query: ``"micro-batch"`` or ``"continuous"`` (what the web UI shows)."""

    interval: Duration
    """The batch interval (micro-batch) or the interval between epochs (continuous)."""

    handle: object
    """The object listeners and the query manager see for this runtime (the ``StreamingContext`` facing the user, or the runtime itself)."""

    @property
    def state(self) -> StreamingContextState:
        """Where the runtime is in its one-way lifecycle."""

    @property
    def is_active(self) -> bool:
        """Whether the runtime was started and has not stopped (Spark's ``isActive``)."""

    @property
    def id(self) -> uuid.UUID | None:
        """The query id, kept across restarts on the same checkpoint (``None`` before start, or when the runtime is not a query)."""

    @property
    def run_id(self) -> uuid.UUID | None:
        """This run's id, new at every start (``None`` when the runtime is not a query)."""

    @property
    def status(self) -> StreamingQueryStatus:
        """What the query is doing now (Spark's ``status``)."""

    @property
    def last_progress(self) -> StreamingQueryProgress | None:
        """The newest progress report, or ``None`` (Spark's ``lastProgress``)."""

    @property
    def recent_progress(self) -> list[StreamingQueryProgress]:
        """Recent progress reports, oldest first, bounded (Spark's ``recentProgress``)."""

    def set_checkpoint_location(self, checkpoint_location: str | os.PathLike[str] | CheckpointPath | None, *,
                                options: Mapping[str, object] | None = None) -> None:
        """Where the query keeps its checkpoint, with the query options read beside it (before start only)."""

    def add_listener(self, listener: object, *, name: str | None = None, on_loop: bool | None = None) -> None:
        """Register a listener on the runtime's bus (before or after start)."""

    def remove_listener(self, listener: object) -> None:
        """Unregister a listener added with :meth:`add_listener`."""

    async def __aenter__(self) -> QueryRuntime:
        """Open the runtime's task group inside the caller's task."""

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        """Stop a still-active runtime and close its task group."""

    async def start(self) -> None:
        """Start the query (once; inside the ``async with`` block)."""

    async def stop(self, *, graceful: bool = False) -> None:
        """Stop the query: gracefully (finish what was generated) or at once; returns once it has stopped."""

    async def await_termination(self, timeout: Duration | None = None) -> bool:
        """Wait until the query stops (True) or ``timeout`` passes on the runtime's clock (False); raises its failure."""

    def exception(self) -> JobFailedError | None:
        """The failure that a later :meth:`await_termination` raises (a terminated query's ``StreamingQueryException``), or ``None``."""

    async def process_all_available(self) -> None:
        """Wait until the query has processed all input available when the call was made (Spark's ``processAllAvailable``)."""

    async def start_service(self, service: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """Run ``service(*args, task_status=...)`` in the runtime's task group until the runtime stops.

        Returns what the service reported to ``task_status.started``.
        """
