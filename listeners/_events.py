"""Listener events: one frozen record per kind of thing that happens (Spark's ``StreamingListenerEvent``s)."""

from __future__ import annotations

from typing import Union

import attrs

from scheduler import Time

from ._info import BatchInfo, OutputOperationInfo, ReceiverInfo

__all__ = [
    "BatchCompleted",
    "BatchStarted",
    "BatchSubmitted",
    "OutputOperationCompleted",
    "OutputOperationStarted",
    "ReceiverError",
    "ReceiverStarted",
    "ReceiverStopped",
    "StreamingEvent",
    "StreamingStarted",
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


@attrs.frozen
class BatchCompleted:
    """A batch's last job ended (also when jobs failed: see ``batch_info.failed``)."""

    batch_info: BatchInfo


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
]
"""Any listener event: what :meth:`StreamingListenerBus.post` takes and a callable listener receives."""
