"""The exception hierarchy shared by every aiodstream package.

Mirrors the exceptions Spark Streaming raises (IllegalArgumentException, IllegalStateException,
SparkException); each class also inherits the builtin a caller would naturally catch.
"""

from __future__ import annotations

from ._redaction import redact_uri

__all__ = [
    "CheckpointError",
    "ConcurrentCheckpointUpdateError",
    "CorruptCheckpointError",
    "DurationOverflowError",
    "InvalidDurationError",
    "InvalidPipelineError",
    "JobFailedError",
    "ReplayError",
    "StreamingError",
    "StreamingQueryException",
    "StreamingStateError",
    "UnsupportedLogVersionError",
    "death_message",
]


class StreamingError(Exception):
    """Root of every error aiodstream raises on purpose.

    Its message never shows a credential: a URI's password or secret parameter in a string
    argument is redacted (:func:`~scheduler.redact_uri`), wherever the message was composed.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact_uri(arg) if isinstance(arg, str) else arg for arg in args))


class InvalidDurationError(StreamingError, ValueError):
    """A duration or time argument is of the wrong type, sign or granularity."""


class DurationOverflowError(InvalidDurationError, OverflowError):
    """A duration is infinite or beyond Spark's range (a Java long of milliseconds).

    Also an ``OverflowError``, as pyspark's ``int(seconds * 1000)`` raises for an infinity.
    """


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


class StreamingQueryException(JobFailedError):  # noqa: N818 - Spark's name
    """The failure that terminated a query (Spark's ``StreamingQueryException``, error class ``STREAM_FAILED``).

    Raised by ``await_termination`` and ``process_all_available`` of a query that stops on
    failure. The message is Spark's: ``Query [id = <id>, runId = <runId>] terminated with
    exception: <message of the cause>``; the cause (the user's own exception for a failed
    output function) is ``__cause__`` and :attr:`cause`.

    Attributes:
        query_id: the query's id.
        run_id: the id of the run that failed.
        message: the cause's message (Spark's ``message`` field, without the prefix).
        start_offset: the failed batch's start offsets, rendered as Spark renders an offset seq
            (``[o1, o2, -]``), or ``None`` when no batch was under way.
        end_offset: its end offsets, likewise.
        error_class: ``"STREAM_FAILED"``.
    """

    error_class = "STREAM_FAILED"

    def __init__(self, query_id: object, run_id: object, cause: BaseException, *, start_offset: str | None = None,
                 end_offset: str | None = None, job_id: str | None = None, batch_time_ms: int | None = None) -> None:
        root = cause.__cause__ if isinstance(cause, JobFailedError) and cause.__cause__ is not None else cause
        self.message = redact_uri(str(root))
        super().__init__(f"Query [id = {query_id}, runId = {run_id}] terminated with exception: {self.message}",
                         job_id=job_id, batch_time_ms=batch_time_ms)
        self.query_id = query_id
        self.run_id = run_id
        self.cause = root
        self.__cause__ = root
        self.start_offset = start_offset
        self.end_offset = end_offset


class CheckpointError(StreamingError, RuntimeError):
    """A checkpoint directory cannot be used as it is (Spark's ``IllegalStateException`` there).

    Attributes:
        path: the file or directory at fault, or ``None`` when the fault is not in one place.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else redact_uri(path)


class CorruptCheckpointError(CheckpointError, ValueError):
    """A checkpoint file cannot be parsed: damaged, truncated, or not written by aiodstream.

    Never raised for a half-written entry of our own: entries are written to a temporary name
    and renamed, and temporary names are never read.
    """


class UnsupportedLogVersionError(CorruptCheckpointError):
    """A log entry was written in a newer format than this version reads (Spark's ``UnsupportedLogVersion``)."""


class ConcurrentCheckpointUpdateError(CheckpointError):
    """An entry this query was about to write already exists: another query uses the same checkpoint.

    Spark's ``CONCURRENT_STREAM_LOG_UPDATE``: a log entry is written once and never overwritten.
    """


class ReplayError(StreamingError, RuntimeError):
    """A replayable source cannot give back the input of an offset range.

    Raised when the source's data changed in a way that breaks replay (a file appearing out of
    order, records missing after a restart); never silently worked around, since a batch that
    re-runs with other input is no longer exactly once.
    """


def death_message(death: BaseException) -> str:
    """What a query's status says it died of (``Terminated with exception: <this>``): the cause's message, as Spark's
    status shows it, not the ``Query [id = ...] terminated with exception:`` text wrapped around it."""
    return death.message if isinstance(death, StreamingQueryException) else redact_uri(str(death))
