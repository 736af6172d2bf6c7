"""DStream inputs: queues, files and receivers (sockets, async iterables), each replayable from its log.

Spark's ``InputDStream`` family (``QueueInputDStream``, ``FileInputDStream``,
``ReceiverInputDStream``); each implements ``streaming.dstream.InputStream``, the protocol the
graph drives (replay, receive, purge).
"""

from ..network import (  # the line decoder lives in network now (the continuous SocketSource reads through it too)
    DEFAULT_MAX_LINE_LENGTH,
    MAX_LINE_LENGTH_KEY,
    LineDecoder,
    LineTooLongError,
)
from ._async_iterable import AsyncIterableInputDStream, AsyncSource
from ._base import InputDStream, RateControlledInput
from ._continuous import FOREACH_BATCH_REFUSED, ContinuousInputDStream, continuous_plan
from ._control import ReceiverProtocolError
from ._executor_receiver import ReceiverTaskSpec, read_block_file
from ._factories import (
    async_iterable_stream,
    binary_records_stream,
    continuous_stream,
    queue_stream,
    socket_text_stream,
    text_file_stream,
    union,
)
from ._files import FileEntry, FileInputDStream, files_pending, is_new_file, list_local_files, select_new_files
from ._queue import QueueInputDStream
from ._receiver import ReceiverInputDStream, WriteAheadLogError
from ._record_buffer import DEFAULT_MAX_BUFFERED_RECORDS, RecordBuffer
from ._socket import EXECUTOR_STOP_TIMEOUT_S, RECEIVER_PLACEMENT_KEY, SocketInputDStream

__all__ = [
    "DEFAULT_MAX_LINE_LENGTH",
    "MAX_LINE_LENGTH_KEY",
    "LineTooLongError",
    "EXECUTOR_STOP_TIMEOUT_S",
    "RECEIVER_PLACEMENT_KEY",
    "ReceiverTaskSpec",
    "read_block_file",
    "ContinuousInputDStream",
    "FOREACH_BATCH_REFUSED",
    "continuous_plan",
    "DEFAULT_MAX_BUFFERED_RECORDS",
    "AsyncIterableInputDStream",
    "AsyncSource",
    "FileEntry",
    "FileInputDStream",
    "InputDStream",
    "RateControlledInput",
    "LineDecoder",
    "QueueInputDStream",
    "ReceiverInputDStream",
    "ReceiverProtocolError",
    "RecordBuffer",
    "SocketInputDStream",
    "WriteAheadLogError",
    "async_iterable_stream",
    "binary_records_stream",
    "continuous_stream",
    "queue_stream",
    "socket_text_stream",
    "text_file_stream",
    "union",
    "is_new_file",
    "list_local_files",
    "select_new_files",
    "files_pending",
]
