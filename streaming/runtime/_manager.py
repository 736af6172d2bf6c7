"""The process's queries: which are active (unique by name, checkpoint and id), which terminated, the listeners every query gets.

Spark's ``StreamingQueryManager`` keeps these per SparkSession; a Python process here runs its
queries (micro-batch runtimes with a query tracker, continuous queries, and the StreamingContexts
built on them) on one or more event loops, so the registry is process-wide and thread-safe. The
pyspark-facing ``StreamingQueryManager`` (``streaming.streams``) wraps it.
"""

from __future__ import annotations

import threading
import uuid
from typing import Callable, Protocol

import anyio
import anyio.to_thread

from listeners import StreamingListenerBus
from scheduler import CheckpointClaim, CheckpointPath, InvalidPipelineError, StreamingStateError, checkpoint_claims

__all__ = ["QueryRegistration", "QueryRegistry", "RegisteredQuery", "query_registry"]


class RegisteredQuery(Protocol):
    """What the registry keeps of an active query (a ``StreamingRuntime``)."""

    handle: object
    """What the manager hands out for it (the runtime, or the StreamingContext built on it)."""

    def add_listener(self, listener: object, *, name: str | None = None, on_loop: bool | None = None) -> None:
        """Register a listener on the query's bus (from any thread)."""

    def remove_listener(self, listener: object) -> None:
        """Unregister a listener (from any thread)."""


class _Unset:
    """No query terminated since the registry was created or reset."""


_UNSET = _Unset()


class QueryRegistry:
    """Active queries by name, checkpoint and id, the last termination, and listeners added to every query.

    The uniqueness rules hold for every kind of query (micro-batch and continuous): a query
    claims its name first, then its checkpoint directory (before anything there changes), then
    its id (read from the checkpoint); :meth:`forget` or :meth:`terminated` gives all three up.
    Thread-safe: runtimes start and stop on any thread's event loop.
    """

    def __init__(self) -> None:
        """An empty registry."""
        self._lock = threading.Condition()
        self._active: dict[uuid.UUID, RegisteredQuery] = {}
        self._names: dict[str, RegisteredQuery] = {}
        self._listeners: list[tuple[object, object, str | None]] = []  # (as given, as registered, name)
        # Spark's lastTerminatedQueryException: unset, None (a clean termination) or the failure.
        self._last: _Unset | BaseException | None = _UNSET
        self._terminations = 0

    # -- the runtimes' side --

    def claim_name(self, runtime: RegisteredQuery, name: str | None) -> None:
        """Reserve ``name`` (if any) for ``runtime`` while it is active.

        Raises:
            InvalidPipelineError: another active query has that name.
        """
        if name is None:
            return
        with self._lock:
            other = self._names.get(name)
            if other is not None and other is not runtime:
                raise InvalidPipelineError(
                    f"cannot start query {name!r}: a query with that name is already active in this process; give each "
                    "active query its own name")
            self._names[name] = runtime

    def claim_checkpoint(self, runtime: RegisteredQuery, location: CheckpointPath, run_id: uuid.UUID) -> CheckpointClaim:
        """Claim the checkpoint directory ``location`` for ``runtime`` (in this process and on the file system); blocking.

        Raises:
            ConcurrentCheckpointUpdateError: another query holds it (Spark's message).
        """
        return checkpoint_claims.claim(location, runtime, run_id=run_id)

    def claim_id(self, runtime: RegisteredQuery, query_id: uuid.UUID) -> None:
        """Make ``runtime`` the active query ``query_id``: the manager lists it from now on.

        Raises:
            StreamingStateError: another active query has that id (it was started from a copy of this checkpoint).
        """
        with self._lock:
            other = self._active.get(query_id)
            if other is None or other is runtime:
                self._active[query_id] = runtime
                return
        raise StreamingStateError(
            f"cannot start query {query_id}: it is already active in this process ({other!r}, from a copy of this "
            "checkpoint); stop that query first, or start this one from a new checkpoint directory")

    def _drop(self, runtime: RegisteredQuery) -> None:
        for key in [k for k, v in self._active.items() if v is runtime]:
            del self._active[key]
        for name in [k for k, v in self._names.items() if v is runtime]:
            del self._names[name]

    def terminated(self, runtime: RegisteredQuery, error: BaseException | None) -> None:
        """``runtime`` terminated, with its death cause or ``None``."""
        with self._lock:
            self._drop(runtime)
            # A later clean termination does not hide an earlier failure (Spark's rule).
            if error is not None or not isinstance(self._last, BaseException):
                self._last = error
            self._terminations += 1
            self._lock.notify_all()

    def forget(self, runtime: RegisteredQuery) -> None:
        """``runtime`` is no longer active (its name and id are free again), without a termination to report; idempotent."""
        with self._lock:
            self._drop(runtime)

    def given_listeners(self) -> list[object]:
        """The listeners added, as given to :meth:`add_listener`."""
        with self._lock:
            return [given for given, _, _ in self._listeners]

    def listeners(self) -> list[tuple[object, str | None]]:
        """The listeners every query starting now gets, as registered on its bus, with their names."""
        with self._lock:
            return [(registered, name) for _, registered, name in self._listeners]

    # -- the manager's side --

    def active(self) -> list[RegisteredQuery]:
        """The active queries' runtimes, in start order."""
        with self._lock:
            return list(self._active.values())

    def get(self, query_id: uuid.UUID) -> RegisteredQuery | None:
        """The active runtime of query ``query_id``, or ``None``."""
        with self._lock:
            return self._active.get(query_id)

    def add_listener(self, given: object, registered: object, name: str | None) -> list[RegisteredQuery]:
        """Add a listener for queries started from now on; returns the active runtimes to add it to as well."""
        with self._lock:
            if any(g is given for g, _, _ in self._listeners):
                raise ValueError(f"listener {given!r} is already added")
            self._listeners.append((given, registered, name))
            return list(self._active.values())

    def remove_listener(self, given: object) -> tuple[object, list[RegisteredQuery]] | None:
        """Remove a listener: what was registered for it, and the active runtimes it is on; ``None`` if unknown."""
        with self._lock:
            for i, (g, registered, _) in enumerate(self._listeners):
                if g is given:
                    del self._listeners[i]
                    return registered, list(self._active.values())
            return None

    def reset_terminated(self) -> None:
        """Forget past terminations: :meth:`wait_any_termination` waits for a new one."""
        with self._lock:
            self._last = _UNSET

    def wait_any_termination(self, timeout: float | None = None, cancelled: threading.Event | None = None) -> bool:
        """Block until a query terminated since creation or the last reset; True if one did, False on timeout.

        Raises:
            BaseException: the death cause of the last query that terminated with one.
        """
        with self._lock:
            done = self._lock.wait_for(lambda: not isinstance(self._last, _Unset) or (cancelled is not None and cancelled.is_set()),
                                       timeout)
            last = self._last
        if isinstance(last, BaseException):
            raise last.with_traceback(None)
        return bool(done) and not isinstance(last, _Unset)

    async def wait_any_termination_async(self, timeout: float | None = None) -> bool:
        """:meth:`wait_any_termination` without blocking the event loop (a worker thread waits); cancellable."""
        cancelled = threading.Event()
        try:
            # A thread of its own, not a token of the host's default limiter, for as long as the wait lasts.
            return await anyio.to_thread.run_sync(self.wait_any_termination, timeout, cancelled, abandon_on_cancel=True,
                                                  limiter=anyio.CapacityLimiter(1))
        finally:
            if not cancelled.is_set():
                with self._lock:
                    cancelled.set()  # wakes the worker thread if the wait was cancelled
                    self._lock.notify_all()


query_registry = QueryRegistry()
"""The process's registry."""


class QueryRegistration:
    """One query's place in a registry: its name, checkpoint claim and id, claimed in that order and given up together.

    Each query runtime holds one; it is the runtime's only way into the registry.
    """

    def __init__(self, runtime: RegisteredQuery, registry: QueryRegistry | None = None) -> None:
        """The place of ``runtime`` in ``registry`` (default: the process's)."""
        self._runtime = runtime
        self._registry = registry if registry is not None else query_registry
        self._claim: CheckpointClaim | None = None

    def add_manager_listeners(self, bus: StreamingListenerBus) -> None:
        """Put the listeners added to every query (``streams.addListener``) on ``bus``: they hear the query from its start."""
        for listener, name in self._registry.listeners():
            if listener not in bus.listeners:
                bus.add_listener(listener, name=name)

    def claim_name(self, name: str | None) -> None:
        """See :meth:`QueryRegistry.claim_name`."""
        self._registry.claim_name(self._runtime, name)

    def claim_checkpoint(self, location: CheckpointPath, run_id: uuid.UUID) -> CheckpointClaim:
        """See :meth:`QueryRegistry.claim_checkpoint` (blocking); the claim is kept until :meth:`release`."""
        self._claim = self._registry.claim_checkpoint(self._runtime, location, run_id)
        return self._claim

    def claim_id(self, query_id: uuid.UUID) -> None:
        """See :meth:`QueryRegistry.claim_id`."""
        self._registry.claim_id(self._runtime, query_id)

    def defer_claim(self, take: Callable[[Callable[[], None]], bool], until: str) -> None:
        """Offer the checkpoint's release to ``take``, which returns whether it will call it later (an abandoned thread
        that may still write there, as it ends); if it does, :meth:`release` leaves the checkpoint to it, and another
        query refused meanwhile is told it is kept ``until`` (what has to end)."""
        claim = self._claim
        if claim is not None and take(claim.release):
            claim.kept_until = until
            self._claim = None

    async def release(self, *, terminated: bool = False, death: BaseException | None = None) -> None:
        """Give up the checkpoint, then the name and id; with ``terminated``, report the termination and its death cause.

        The checkpoint goes first, so a query started by whoever waits for the termination can
        claim it. Giving up a Hadoop lease is file I/O through py4j: off the loop, and finished
        even when cancelled. Idempotent.
        """
        claim, self._claim = self._claim, None
        if claim is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(claim.release)
        if terminated:
            self._registry.terminated(self._runtime, death)
        else:
            self._registry.forget(self._runtime)
