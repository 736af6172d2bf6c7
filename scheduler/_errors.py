"""The exception hierarchy shared by every aiodstream package.

Mirrors the exceptions Spark Streaming raises (IllegalArgumentException, IllegalStateException,
SparkException); each class also inherits the builtin a caller would naturally catch.
"""

from __future__ import annotations

__all__ = [
    "InvalidDurationError",
    "InvalidPipelineError",
    "JobFailedError",
    "StreamingError",
    "StreamingStateError",
]


class StreamingError(Exception):
    """Root of every error aiodstream raises on purpose."""


class InvalidDurationError(StreamingError, ValueError):
    """A duration or time argument is of the wrong type, sign or granularity."""


class InvalidPipelineError(StreamingError, ValueError):
    """The pipeline cannot run as defined (no output operations, bad window, missing checkpoint)."""


class StreamingStateError(StreamingError, RuntimeError):
    """An operation is not allowed in the component's current lifecycle state.

    The counterpart of Spark's ``IllegalStateException`` (starting a stopped context, adding
    output operations after start, stopping from inside a listener callback).
    """


class JobFailedError(StreamingError, RuntimeError):
    """A streaming job or the generation of a batch failed.

    Raised by ``await_termination`` once a job has failed, as Spark's ``awaitTermination`` does.
    The original exception is the ``__cause__``.

    Attributes:
        job_id: ``"streaming job <ms> ms.<n>"`` for a failed job, ``None`` for a generation error.
        batch_time_ms: the batch time in milliseconds, or ``None``.
    """

    def __init__(self, message: str, *, job_id: str | None = None, batch_time_ms: int | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.batch_time_ms = batch_time_ms
