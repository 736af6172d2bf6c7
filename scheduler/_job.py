"""Job: one output operation's work for one batch (Spark's ``Job``)."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ._errors import StreamingStateError
from ._redaction import redacted_traceback
from ._time import Time

__all__ = ["Job", "is_async_callable"]


def is_async_callable(func: Callable[..., Any]) -> bool:
    """Whether calling ``func`` returns a coroutine (plain, partial-wrapped or ``__call__``)."""
    while hasattr(func, "func") and not inspect.isroutine(func):  # functools.partial
        func = func.func
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 - callable objects
    return call is not None and inspect.iscoroutinefunction(call)


def _finished() -> None:
    raise StreamingStateError("this job already ran")


class Job:
    """The work of one output operation for one batch.

    ``func`` takes no arguments. An ``async def`` function runs on the event loop; a plain one runs
    in a worker thread, since PySpark calls block. ``cancel`` (optional) is called when an
    immediate stop abandons the job while it runs: the Spark layer uses it to cancel the job's
    Spark job group, because a thread cannot be cancelled.
    """

    __slots__ = (
        "_output_op_id",
        "cancel",
        "description",
        "end_time",
        "failure",
        "func",
        "is_async",
        "name",
        "start_time",
        "time",
    )

    def __init__(
        self,
        time: Time,
        func: Callable[[], Any],
        *,
        name: str = "",
        description: str = "",
        cancel: Callable[[], None] | None = None,
        is_async: bool | None = None,
    ) -> None:
        """Create a job for batch ``time``; the JobSet assigns its output-operation id.

        ``is_async`` says whether ``func`` is a coroutine function; by default it is detected.
        """
        self.time = time
        self.func = func
        self.name = name
        self.description = description
        self.cancel = cancel
        self.is_async = is_async_callable(func) if is_async is None else is_async
        self._output_op_id = -1
        self.start_time: Time | None = None
        self.end_time: Time | None = None
        self.failure: BaseException | None = None

    @property
    def output_op_id(self) -> int:
        """This job's position among the jobs of its batch."""
        if self._output_op_id < 0:
            raise StreamingStateError("Cannot access number before calling setId")
        return self._output_op_id

    def set_output_op_id(self, n: int) -> None:
        """Assign the output-operation id; allowed once."""
        if self._output_op_id >= 0:
            raise StreamingStateError("Cannot call setOutputOpId more than once")
        self._output_op_id = n

    @property
    def id(self) -> str:
        """``"streaming job <ms> ms.<n>"``, Spark's job id."""
        if self._output_op_id < 0:
            raise StreamingStateError("Cannot access id before calling setId")
        return f"streaming job {self.time}.{self._output_op_id}"

    def release(self) -> None:
        """Let go of the function and the cancel hook: the job has run to its end and neither is called again.

        Called by the scheduler as each job finishes. An output's function and cancel hook are
        closures that often refer back to their job (to read its output-operation id), a cycle
        only the garbage collector could free; let go, the job and its closures are freed by
        reference counting, one batch at a time, so a flat-out stream of batches leaves no
        garbage for the collector's passes.
        """
        self.func = _finished
        self.cancel = None

    @property
    def failure_reason(self) -> str | None:
        """The failure with its traceback, as Spark's ``failureReason``; ``None`` if it succeeded."""
        if self.failure is None:
            return None
        return redacted_traceback(self.failure).rstrip()

    @property
    def finished(self) -> bool:
        """Whether the job has run to an end (success or failure)."""
        return self.end_time is not None

    def __repr__(self) -> str:
        ident = self.id if self._output_op_id >= 0 else f"streaming job {self.time}.?"
        state = "failed" if self.failure else ("done" if self.end_time else ("running" if self.start_time else "queued"))
        return f"<Job {ident!r} {state}>"

    def __str__(self) -> str:
        return self.id
