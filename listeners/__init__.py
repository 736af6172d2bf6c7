"""Listener events, the records they carry, the listener base class, the bus and built-in listeners.

The counterpart of Spark's ``StreamingListener`` API and ``StreamingListenerBus``.
"""

from ._batch_log import BatchEntry, BatchLog, LogReader, ProgressEntry, ProgressItem, ProgressLog, completed_batch
from ._builtin import EventRecorder, StatsReportListener
from ._bus import DEFAULT_LISTENER_EXIT_TIMEOUT, ListenerBusStatistics, OverflowPolicy, StreamingListenerBus
from ._events import (
    BatchCompleted,
    BatchStarted,
    BatchSubmitted,
    OutputOperationCompleted,
    OutputOperationStarted,
    QueryIdle,
    QueryProgress,
    QueryStarted,
    QueryTerminated,
    ReceiverError,
    ReceiverStarted,
    ReceiverStopped,
    StreamingEvent,
    StreamingStarted,
)
from ._info import BatchInfo, BatchRecord, OutputOperationInfo, ReceiverInfo
from ._listener import HANDLER_NAMES, StreamingListener, check_listener
from ._listener_queue import LINGER, LINGER_EVENTS, ListenerStatistics, current_listener

__all__ = [
    "BatchCompleted",
    "BatchEntry",
    "BatchInfo",
    "BatchLog",
    "BatchRecord",
    "BatchStarted",
    "BatchSubmitted",
    "check_listener",
    "completed_batch",
    "current_listener",
    "DEFAULT_LISTENER_EXIT_TIMEOUT",
    "EventRecorder",
    "HANDLER_NAMES",
    "LINGER",
    "LINGER_EVENTS",
    "ListenerBusStatistics",
    "ListenerStatistics",
    "LogReader",
    "OutputOperationCompleted",
    "OutputOperationInfo",
    "OutputOperationStarted",
    "OverflowPolicy",
    "ProgressEntry",
    "ProgressItem",
    "ProgressLog",
    "QueryIdle",
    "QueryProgress",
    "QueryStarted",
    "QueryTerminated",
    "ReceiverError",
    "ReceiverInfo",
    "ReceiverStarted",
    "ReceiverStopped",
    "StatsReportListener",
    "StreamingEvent",
    "StreamingListener",
    "StreamingListenerBus",
    "StreamingStarted",
]
