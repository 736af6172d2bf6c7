"""Listener events: one frozen record per kind of thing that happens (Spark's ``StreamingListenerEvent``s).

The ``Query*`` events are those of a checkpointed query (Structured Streaming's
``StreamingQueryListener`` events), posted on the same bus.
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping, Union

import attrs

from scheduler import Job, JobSet, StreamingQueryProgress, StreamInputInfo, Time

from ._info import BatchInfo, BatchRecord, OutputOperationInfo, ReceiverInfo

__all__ = [
    "BatchCompleted",
    "BatchStarted",
    "BatchSubmitted",
    "OutputOperationCompleted",
    "OutputOperationStarted",
    "QueryIdle",
    "QueryProgress",
    "QueryStarted",
    "QueryTerminated",
    "ReceiverError",
    "ReceiverStarted",
    "ReceiverStopped",
    "StreamingEvent",
    "StreamingStarted",
    "SUCCEEDED_WIDTH",
    "of_succeeded_values",
    "succeeded_values",
]


@attrs.frozen
class StreamingStarted:
    """The context started; ``time`` is when, on the context's clock."""

    time: Time


@attrs.frozen
class BatchSubmitted:
    """A batch's jobs were queued; no job has started."""

    batch_info: BatchInfo


@attrs.frozen
class BatchStarted:
    """A batch's first job is starting."""

    batch_info: BatchInfo


# Not slotted: the bus makes one from a BatchRecord without building its BatchInfo (of_record),
# and the descriptor set on the class below builds that BatchInfo the first time it is read.
@attrs.frozen(slots=False)
class BatchCompleted:
    """A batch's last job ended (also when jobs failed: see ``batch_info.failed``).

    The bus posts it with the batch's values and builds ``batch_info`` from them the first time a
    listener reads it (once per event: listeners that share the event, on any thread, read the same
    object); equality, ``repr`` and ``attrs.asdict`` read it like any field. A listener that never
    reads it does not pay for the snapshot. The event of a succeeded one-job batch is built for a
    plain (threaded) listener on that listener's own thread, from the values its queue kept: each
    such listener gets an equal event of its own, not the object the others get.
    """

    batch_info: BatchInfo

    @classmethod
    def of_record(cls, record: BatchRecord) -> BatchCompleted:
        """The event of a completed batch whose ``batch_info`` is built from ``record`` when first read."""
        event = _new(cls)
        event.__dict__["record"] = record  # "record" is also the property's name: past it, into the dict
        return event

    @classmethod
    def of_completed(cls, job_set: JobSet) -> BatchCompleted:
        """The event of ``job_set``, completed with every job succeeded and its jobs' functions let go (see :data:`BatchEntry`).

        Its record and ``batch_info`` are built from it when first read: a completed batch no longer changes.
        """
        event = _new(cls)
        _set(event, "job_set", job_set)
        return event

    def __reduce__(self) -> tuple[type[BatchCompleted], tuple[BatchInfo]]:
        # Pickled (and copied) as its BatchInfo: a JobSet it may carry holds the jobs' callables.
        return (BatchCompleted, (self.batch_info,))

    @property
    def record(self) -> BatchRecord:
        """The batch's :class:`BatchRecord`: its times, input infos and totals, without building ``batch_info``."""
        values = self.__dict__
        record = values.get("record")
        if record is None:  # made from values, a JobSet or a BatchInfo: its record is taken from it, once
            batch = values.get("values")
            if batch is not None:
                record = BatchRecord.of_values(*batch)
            else:
                job_set = values.get("job_set")
                record = BatchRecord.of_info(values["batch_info"]) if job_set is None else BatchRecord(job_set)
            record = values.setdefault("record", record)
        return record  # type: ignore[no-any-return]


_new = object.__new__
_set = object.__setattr__


SUCCEEDED_WIDTH = 8
"""How many values :func:`succeeded_values` gives: a plain listener's queue keeps them flat, that many a batch."""


def succeeded_values(job_set: JobSet, job: Job) -> tuple[Any, ...]:
    """The values of ``job_set``, completed and started, whose one job is ``job`` and succeeded (``SUCCEEDED_WIDTH``).

    Its times in ms, the job's name and description, and its input infos: a single input without
    metadata as its stream id and its records, no input as ``None``, else the infos' mapping and 0.
    Nothing in it but that mapping is an object the garbage collector tracks (a plain listener's
    queue keeps them flat: see ``ListenerQueue.flat``).
    """
    # One input without metadata, the common batch, is kept as two ints, and no input as None: then the values
    # hold nothing the collector tracks (a tuple that holds a dict, even an empty one, stays tracked).
    infos = job_set.input_infos
    inputs: Mapping[int, StreamInputInfo] | int | None = infos
    records = 0
    if len(infos) == 1:
        for info in infos.values():
            if not info.metadata:
                inputs, records = info.input_stream_id, info.num_records
    elif not infos:
        inputs = None
    return (job_set.time.milliseconds, job_set.submission_time.milliseconds,
            job_set.processing_start.milliseconds, job_set.processing_end.milliseconds,  # type: ignore[union-attr]
            job.name, job.description, inputs, records)


def of_succeeded_values(values: tuple[Any, ...]) -> BatchCompleted:
    """The ``BatchCompleted`` of a batch given as its :func:`succeeded_values`.

    It holds the values, not the ``JobSet``; its ``record`` and ``batch_info`` are built from them
    when first read, as from the ``JobSet``. The attribute is set in the instance's inline values:
    no ``__dict__`` is made until a listener reads them.
    """
    event = _new(BatchCompleted)
    _set(event, "values", values)
    return event


class _BatchInfoOnRead:
    """``BatchCompleted.batch_info`` of an event made by ``of_record`` or ``of_completed``: built on first read, then cached.

    A non-data descriptor: once the instance's ``__dict__`` holds ``batch_info`` (set by
    ``__init__``, or here on first read), Python reads it from there and this is never called
    again. ``dict.setdefault`` is one atomic step, so threads reading it at once get one object.
    """

    def __get__(self, event: Any, owner: Any = None) -> Any:
        if event is None:
            return self
        values = event.__dict__
        info = values.get("batch_info")
        if info is None:
            info = values.setdefault("batch_info", event.record.batch_info())
        return info


# After the class is made: attrs would take a class attribute named like a field for its default.
setattr(BatchCompleted, "batch_info", _BatchInfoOnRead())  # noqa: B010


@attrs.frozen
class OutputOperationStarted:
    """An output operation's job started."""

    output_operation_info: OutputOperationInfo


@attrs.frozen
class OutputOperationCompleted:
    """An output operation's job ended; ``failure_reason`` is set if it failed."""

    output_operation_info: OutputOperationInfo


@attrs.frozen
class ReceiverStarted:
    """A receiver connected and started receiving."""

    receiver_info: ReceiverInfo


@attrs.frozen
class ReceiverError:
    """A receiver reported an error (it may retry)."""

    receiver_info: ReceiverInfo


@attrs.frozen
class ReceiverStopped:
    """A receiver stopped."""

    receiver_info: ReceiverInfo


@attrs.frozen
class QueryStarted:
    """A checkpointed query started a run (Spark's ``QueryStartedEvent``); ``timestamp`` as ``2016-12-14T18:45:24.873Z``."""

    id: uuid.UUID
    run_id: uuid.UUID
    name: str | None
    timestamp: str


@attrs.frozen
class QueryProgress:
    """A checkpointed query committed a batch (Spark's ``QueryProgressEvent``)."""

    progress: StreamingQueryProgress


@attrs.frozen
class QueryIdle:
    """A trigger found no new data and ran no batch (Spark's ``QueryIdleEvent``); ``timestamp`` is when it started."""

    id: uuid.UUID
    run_id: uuid.UUID
    timestamp: str


@attrs.frozen
class QueryTerminated:
    """A query's run ended (Spark's ``QueryTerminatedEvent``).

    ``exception`` is the failure with its traceback, or ``None`` for a clean stop;
    ``error_class_on_exception`` is Spark's error class: ``FOREACH_BATCH_USER_FUNCTION_ERROR``
    when an output operation's function failed (Spark 4's class for a failed foreachBatch
    function), else the original exception's condition if it has one (a pyspark error), else ``None``.
    """

    id: uuid.UUID
    run_id: uuid.UUID
    exception: str | None
    error_class_on_exception: str | None = None


StreamingEvent = Union[
    StreamingStarted,
    BatchSubmitted,
    BatchStarted,
    BatchCompleted,
    OutputOperationStarted,
    OutputOperationCompleted,
    ReceiverStarted,
    ReceiverError,
    ReceiverStopped,
    QueryStarted,
    QueryProgress,
    QueryIdle,
    QueryTerminated,
]
"""Any listener event: what :meth:`StreamingListenerBus.post` takes and a callable listener receives."""
