"""The input factories behind pyspark's ``StreamingContext`` methods (``queueStream``, ``socketTextStream``, ...).

Each checks its arguments (pyspark's messages, or aiodstream's where Spark would fail later) and
creates the input for a context's :class:`~streaming.dstream.StreamEnvironment`.
"""

from __future__ import annotations

from typing import Any, Sequence, Sized

from scheduler import Duration, InvalidDurationError, InvalidPipelineError, scaled_milliseconds

from ..continuous import ContinuousSource, SocketSource
from ..dstream import DStream, StreamEnvironment, UnionDStream, check_stream
from ..network import MAX_LINE_LENGTH_KEY, max_line_length
from ..spark import is_connect_dataframe
from ._async_iterable import AsyncIterableInputDStream, AsyncSource
from ._continuous import ContinuousInputDStream
from ._files import FileInputDStream
from ._fsspec_listing import FixedLengthRecords, TextLines
from ._queue import QueueInputDStream
from ._record_buffer import DEFAULT_MAX_BUFFERED_RECORDS
from ._socket import SocketInputDStream

__all__ = ["async_iterable_stream", "binary_records_stream", "continuous_stream", "queue_stream", "socket_text_stream",
           "text_file_stream", "union"]


def queue_stream(env: StreamEnvironment, rdds: Sequence[Any], one_at_a_time: bool = True, default: Any = None) -> DStream[Any]:
    """A stream of the given RDDs (or lists), one per batch or all at once (pyspark's ``queueStream``).

    Lists are parallelized now, as pyspark does; inside ``async with`` (where this runs on the
    event loop and ``sc.parallelize`` would block it) a copy of each list is parallelized by
    the batch that takes it, on the generation thread. On Spark Connect the queue takes
    FrameRDDs, Connect DataFrames (a batch gets the DataFrame's rows) and lists (sent to the
    server by the batch that takes them).
    """
    items = list(rdds)
    if isinstance(default, Sized) and len(default) == 0:
        default = None  # pyspark tests `if default`: an empty list is no default (empty batches get one empty partition)
    if not items and default is not None:
        items = [[]]
    if not items:
        raise IndexError("list index out of range: queueStream needs at least one RDD or list, or a default that is not "
                         "empty")
    if env.spark.kind == "connect":
        return QueueInputDStream(env, [_connect_item(env, r) for r in items], one_at_a_time,
                                 None if default is None else _connect_item(env, default))
    from pyspark import RDD

    if env.async_mode:
        queued: list[Any] = [r if isinstance(r, RDD) else list(r) for r in items]
        if default is not None and not isinstance(default, RDD):
            default = list(default)
    else:
        sc = env.spark_context
        queued = [r if isinstance(r, RDD) else sc.parallelize(r) for r in items]
        if default is not None and not isinstance(default, RDD):
            default = sc.parallelize(default)
    return QueueInputDStream(env, queued, one_at_a_time, default)


def _connect_item(env: StreamEnvironment, item: Any) -> Any:
    """A queued item on Spark Connect: a FrameRDD as it is, a Connect DataFrame as a FrameRDD of its rows, else a list
    (parallelized by the batch that takes it, on the generation thread: no gRPC call here)."""
    if is_connect_dataframe(item):
        return env.spark_context.fromDataFrame(item)  # type: ignore[attr-defined]  # the FrameContext's
    if isinstance(item, (list, tuple, range)) or not hasattr(item, "mapPartitions"):
        return list(item)
    return item


def _check_socket_address(hostname: object, port: object) -> None:
    # Spark takes both as given and its receiver fails at every reconnect (Java's "port out of
    # range", or a null host read as the loopback address): refuse them at the call instead.
    if not isinstance(hostname, str) or not hostname.strip():
        raise InvalidPipelineError(f"socketTextStream needs the server's host name or address, got {hostname!r}; "
                                   "pass e.g. 'localhost'")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise InvalidPipelineError(f"socketTextStream's port must be an int from 1 to 65535, got {port!r}; pass the port "
                                   "the server listens on, e.g. 9999")


def _check_storage_level(level: Any) -> None:
    if level is None:
        return
    from pyspark import StorageLevel

    if not isinstance(level, StorageLevel):
        raise TypeError("storageLevel must be of type pyspark.StorageLevel")


def _restart_delay(seconds: float | None) -> Duration | None:
    if seconds is None:
        return None
    fix = "pass e.g. 2"
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise InvalidDurationError(f"restartDelay must be a non-negative number of seconds, got {seconds!r}; {fix}")
    return Duration(scaled_milliseconds(seconds, 1000, "restartDelay", fix=fix, truncate=True))


def socket_text_stream(env: StreamEnvironment, hostname: str, port: int, storage_level: Any = None, *,
                       restart_delay: float | None = None, max_buffered_records: int = DEFAULT_MAX_BUFFERED_RECORDS,
                       placement: str | None = None) -> DStream[Any]:
    """A stream of the UTF-8 text lines read from a TCP server at ``hostname:port`` (pyspark's ``socketTextStream``).

    A receiver task on the context's event loop connects when the context starts; lines end
    at ``\\n``, ``\\r\\n`` or ``\\r``, as in pyspark. When the connection fails, breaks or
    ends, it reconnects after ``restart_delay`` seconds (default
    ``spark.streaming.receiverRestartDelay``, 2 s); each failure is posted as a
    ``ReceiverError`` and each restart as ``ReceiverStopped`` then ``ReceiverStarted``.
    In a continuous context, a one-partition continuous input (union several for more partitions):
    a ``SocketSource`` whose lines are bounded by ``spark.aiodstream.receiver.maxLineLength``, a
    longer one failing the query.

    Args:
        env: the context's streams' environment.
        hostname: the server's host name or address.
        port: the server's port.
        storage_level: accepted for pyspark compatibility and checked, but unused: received
            lines are kept on the driver until their batch, then shipped with the batch's RDD.
        restart_delay: seconds to wait before reconnecting.
        max_buffered_records: lines held between two batches at most; when reached, the
            receiver stops reading until the next batch (TCP flow control then slows the
            sender) instead of growing memory.
        placement: ``"driver"`` (the default, or ``spark.aiodstream.receiver.placement``)
            or ``"executor"``: the receiver runs as a long-running Spark task, as Spark runs
            receivers, writing each block into the checkpoint's write-ahead log, and each
            batch's tasks read its blocks from there, so the records never pass through
            the driver. It takes a task slot for the context's life and needs a checkpoint
            directory that the driver and the executors see at the same path.

    On stop the connection is closed; lines read by then still reach the next batch (the
    last one, on a graceful stop). Lines the server sent but the receiver had not read are lost.

    Raises:
        InvalidPipelineError: a missing or empty ``hostname``, or a ``port`` outside 1..65535
            (refused here, where Spark's receiver would fail at every reconnect).
        ValueError: ``spark.aiodstream.receiver.maxLineLength`` is not a positive number.
    """
    _check_socket_address(hostname, port)
    _check_storage_level(storage_level)
    if env.continuous is not None:
        # Read here, as the receiver reads it when it is made (a bad value is refused at the call either way).
        limit = max_line_length(env.spark.settings().get(MAX_LINE_LENGTH_KEY))
        return ContinuousInputDStream(env, SocketSource([(hostname, port)], max_line_length=limit))
    return SocketInputDStream(env, hostname, port, restart_delay=_restart_delay(restart_delay),
                              max_buffered_records=max_buffered_records, placement=placement)


def continuous_stream(env: StreamEnvironment, source: ContinuousSource) -> DStream[Any]:
    """A continuous input reading ``source`` (a ``RateSource``, ``SocketSource``, ``FileSource`` or your own).

    Raises:
        InvalidPipelineError: a micro-batch context, or ``source`` is not a continuous source.
    """
    if env.continuous is None:
        raise InvalidPipelineError(
            "continuous inputs are read by continuous processing: create the context with a trigger, "
            "StreamingContext(sc, Continuous('1 second'))")
    return ContinuousInputDStream(env, source)


def async_iterable_stream(env: StreamEnvironment, source: AsyncSource, *, restart_delay: float | None = None,
                          max_buffered_records: int = DEFAULT_MAX_BUFFERED_RECORDS) -> DStream[Any]:
    """A stream of the items of an async iterable: each batch gets those that arrived since the last.

    ``source`` is an async iterable (an async generator, a channel's receive side, ...) or a
    function returning one. It is iterated by a receiver task on the context's event loop
    (the host's loop under ``async with``), one record per item, pulled only while fewer
    than ``max_buffered_records`` wait for a batch: a fast source is slowed down to the batch
    rate instead of filling memory.

    When the iterable is exhausted the receiver stops (``ReceiverStopped``) and later batches
    are empty. When it raises, a ``ReceiverError`` is posted; a function or re-iterable
    source is then iterated afresh after ``restart_delay`` seconds, while an iterator that
    raised (e.g. an async generator object) is not restarted.

    On stop the receiver task is cancelled and an iterator with ``aclose`` is closed (an
    async generator's ``finally`` runs); items received by then still reach the next batch.
    """
    return AsyncIterableInputDStream(env, source, restart_delay=_restart_delay(restart_delay),
                                     max_buffered_records=max_buffered_records)


def text_file_stream(env: StreamEnvironment, directory: str) -> DStream[Any]:
    """A stream of the UTF-8 lines of the files that newly appear in ``directory`` (pyspark's ``textFileStream``).

    Each batch reads the files modified since the previous batches and not read before
    (Spark's FileInputDStream rules: hidden files are skipped, files older than the stream or
    than the 60 s remember window are ignored). Move finished files into the directory
    rather than writing them in place. ``directory`` may be a local path, a glob, or a
    Hadoop URI (``hdfs://``, ``file:``...). A file is read in Hadoop's splits of a block, as
    Spark's FileInputDStream reads it (``newAPIHadoopFile``): a small file is one partition
    (``textFile``'s default of two would split it in two).
    """
    return FileInputDStream(env, directory, lambda sc, path: sc.textFile(path, 1), TextLines())


def binary_records_stream(env: StreamEnvironment, directory: str, record_length: int) -> DStream[Any]:
    """A stream of the fixed-length byte records (``record_length`` bytes) of the files that newly appear in ``directory``.

    Files are selected as by :func:`text_file_stream`. On Spark Connect (no ``binaryRecords`` there) the server's
    Python workers read each file whole through fsspec, one partition per file, as on a URI.
    """
    if isinstance(record_length, bool) or not isinstance(record_length, int) or record_length < 1:
        raise ValueError(f"recordLength must be a positive int (bytes per record), got {record_length!r}")
    return FileInputDStream(env, directory, lambda sc, path: sc.binaryRecords(path, record_length),
                            FixedLengthRecords(record_length), whole_files_on_connect=True)


def union(dstreams: Sequence[DStream[Any]]) -> DStream[Any]:
    """The union of streams with the same slide duration (pyspark's ``StreamingContext.union``, its messages)."""
    if not dstreams:
        raise InvalidPipelineError("should have at least one DStream to union")
    if len(dstreams) == 1:
        return dstreams[0]
    for stream in dstreams:
        check_stream(stream, "union")
    if len({d.slide for d in dstreams}) > 1:
        raise InvalidPipelineError("All DStreams should have same slide duration")
    return UnionDStream(list(dstreams))
