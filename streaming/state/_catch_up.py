"""StateBehind: the batches whose state did not complete, run again before a later batch loads the state.

Under the DStream semantics (``stop_on_failure`` off) later batches go on after a failed one. A
state kept in a state store advances one version a batch: the batch that loads version ``v``
commits ``v + 1``, which the next batch loads. When a batch fails before its state function
committed (the function raised, its task or its input failed), version ``v + 1`` is missing, and
every later batch would fail loading it. Spark's own DStream state (``updateStateByKey``,
``mapWithState``) recomputes a failed batch's state through the RDD lineage when the next batch
needs it, so a transient failure costs that batch's outputs and nothing else, and a failure that
repeats fails every later batch too. The operators on a state store do the same explicitly: the
failed batch is noted here, and before a later batch's state loads, the noted ones run their state
again, oldest first, over the failed batch's own input, time and watermarks (their outputs are
dropped: the failed batch's outputs are lost, as Spark's are). A partition that had committed its
version keeps it.

Noted batches keep their input (records, or the RDD that reads them) until they catch up. So
their number is bounded (:data:`STATE_CATCH_UP_LIMIT`); past it the state cannot catch up in this
run, and every later batch fails saying so. The batches from the first one behind on stay
uncommitted, so a restart runs them again in order from the checkpoint, with exact state.
"""

from __future__ import annotations

import bisect
import threading
from typing import Generic, TypeVar

from scheduler import StreamingError, Time

__all__ = ["STATE_CATCH_UP_LIMIT", "StateBehind", "StateCatchUpError"]

STATE_CATCH_UP_LIMIT = 100
"""How many failed batches an operator keeps to run their state again; past it, later batches fail until a restart."""

T = TypeVar("T")


class StateCatchUpError(StreamingError):
    """A batch's state cannot load: an earlier batch's state did not complete, and running it again failed (or too many
    are behind). The cause is the earlier batch's error."""


class StateBehind(Generic[T]):
    """One operator's failed batches, oldest first, each with what runs its state again (``T``); thread-safe.

    ``operator`` names the operator in messages.
    """

    def __init__(self, operator: str) -> None:
        """None behind yet."""
        self._operator = operator
        self._batches: list[tuple[int, T]] = []  # (batch time ms, what runs it), in batch order
        self._given_up: str | None = None
        self._lock = threading.Lock()  # guards the list: a batch is noted while another's jobs catch up
        self.running = threading.Lock()
        """Held by whoever catches up, so two jobs of one batch (``concurrentJobs`` above 1) do not both run it."""

    def __bool__(self) -> bool:
        """Whether a batch is behind (or the operator gave up)."""
        return bool(self._batches) or self._given_up is not None

    def note(self, time: Time, rerun: T) -> None:
        """Batch ``time``'s state did not complete: ``rerun`` runs it again (replacing what a batch noted before had)."""
        batch_ms = time.milliseconds
        with self._lock:
            if self._given_up is not None:
                return
            self._batches = [entry for entry in self._batches if entry[0] != batch_ms]
            if len(self._batches) >= STATE_CATCH_UP_LIMIT:
                first = Time(self._batches[0][0])
                self._given_up = (
                    f"the state of {self._operator} is {len(self._batches) + 1} batches behind (from batch {first} on, "
                    f"each failed before its state version was committed; at most {STATE_CATCH_UP_LIMIT} are run again), "
                    "so no later batch can load it in this run: stop the query and start it again from its checkpoint, "
                    "which runs those batches again in order")
                self._batches.clear()  # their input is no longer needed: free it
                return
            bisect.insort(self._batches, (batch_ms, rerun), key=lambda entry: entry[0])

    def before(self, time: Time) -> list[tuple[Time, T]]:
        """The noted batches before batch ``time``, oldest first.

        Raises:
            StateCatchUpError: the operator gave up (too many behind).
        """
        with self._lock:
            if self._given_up is not None:
                raise StateCatchUpError(self._given_up)
            return [(Time(ms), rerun) for ms, rerun in self._batches if ms < time.milliseconds]

    def caught_up(self, time: Time) -> None:
        """Batch ``time``'s state ran again and committed."""
        with self._lock:
            self._batches = [entry for entry in self._batches if entry[0] != time.milliseconds]

    def failed(self, behind: Time, time: Time, error: BaseException) -> StateCatchUpError:
        """The error for batch ``time``: running batch ``behind``'s state again raised ``error`` (chain it as the cause)."""
        first_line = (str(error).splitlines() or [""])[0][:200]  # a Spark error's text is a whole trace: it is the cause
        return StateCatchUpError(
            f"batch {time} cannot load the state of {self._operator}: batch {behind} failed before its state version "
            f"was committed, and running its state again failed too: {type(error).__name__}: {first_line}")

    def clear(self) -> None:
        """Forget every noted batch (a new run: the checkpoint's uncommitted batches run again anyway)."""
        with self._lock:
            self._batches.clear()
            self._given_up = None
