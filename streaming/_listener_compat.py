"""pyspark-style listeners on aiodstream's bus: pyspark's ``StreamingListener`` and ``StreamingQueryListener``.

A pyspark ``StreamingListener`` receives Java-side views: ``batchCompleted.batchInfo()`` with
getters such as ``schedulingDelay()`` that return -1 when a value is unknown. These classes give
a migrated listener the same surface. A ``StreamingQueryListener`` (pyspark.sql.streaming)
receives pyspark's own event objects, built from the events' JSON as pyspark builds them.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import threading
from typing import Any, Callable, Iterator

from listeners import (
    HANDLER_NAMES,
    BatchCompleted,
    BatchInfo,
    BatchStarted,
    BatchSubmitted,
    OutputOperationCompleted,
    OutputOperationInfo,
    OutputOperationStarted,
    QueryIdle,
    QueryProgress,
    QueryStarted,
    QueryTerminated,
    ReceiverError,
    ReceiverInfo,
    ReceiverStarted,
    ReceiverStopped,
    StreamingEvent,
    StreamingStarted,
)
from listeners import StreamingListener as BusListener
from scheduler import Duration, StreamingQueryProgress, StreamInputInfo, Time

__all__ = [
    "PySparkListenerAdapter",
    "PySparkQueryListenerAdapter",
    "StreamingListener",
    "adapt_listener",
    "is_pyspark_query_listener",
    "is_pyspark_style",
    "progress_for_pyspark",
]

def progress_for_pyspark(progress: StreamingQueryProgress) -> dict[str, Any]:
    """``progress``'s JSON as a dict pyspark's ``fromJson`` reads, each source's rates always there.

    Spark's JSON leaves out a rate that is not finite (a trigger started in the same millisecond as the one before,
    as recovered batches are), and pyspark's ``SourceProgress.fromJson`` then fails on the missing key; its JVM path
    passes the double itself (NaN or infinity), which is what this puts back.
    """
    data: dict[str, Any] = json.loads(progress.json())
    for entry, source in zip(data["sources"], progress.sources, strict=True):
        entry.setdefault("inputRowsPerSecond", source.input_rows_per_second)
        entry.setdefault("processedRowsPerSecond", source.processed_rows_per_second)
    return data


_QUERY_CALLBACKS = ("onQueryStarted", "onQueryProgress", "onQueryIdle", "onQueryTerminated")

_CAMEL = {
    StreamingStarted: "onStreamingStarted",
    BatchSubmitted: "onBatchSubmitted",
    BatchStarted: "onBatchStarted",
    BatchCompleted: "onBatchCompleted",
    OutputOperationStarted: "onOutputOperationStarted",
    OutputOperationCompleted: "onOutputOperationCompleted",
    ReceiverStarted: "onReceiverStarted",
    ReceiverError: "onReceiverError",
    ReceiverStopped: "onReceiverStopped",
}


class StreamingListener:
    """pyspark's ``StreamingListener``: override the ``on*`` callbacks you need."""

    def onStreamingStarted(self, streamingStarted: Any) -> None:  # noqa: N803
        """The context started."""

    def onReceiverStarted(self, receiverStarted: Any) -> None:  # noqa: N803
        """A receiver started."""

    def onReceiverError(self, receiverError: Any) -> None:  # noqa: N803
        """A receiver reported an error."""

    def onReceiverStopped(self, receiverStopped: Any) -> None:  # noqa: N803
        """A receiver stopped."""

    def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
        """A batch was submitted."""

    def onBatchStarted(self, batchStarted: Any) -> None:  # noqa: N803
        """A batch started."""

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
        """A batch completed."""

    def onOutputOperationStarted(self, outputOperationStarted: Any) -> None:  # noqa: N803
        """An output operation started."""

    def onOutputOperationCompleted(self, outputOperationCompleted: Any) -> None:  # noqa: N803
        """An output operation completed."""


def is_pyspark_style(listener: object) -> bool:
    """Whether ``listener`` speaks pyspark's camelCase callbacks (ours, or pyspark's own class)."""
    return any(callable(getattr(listener, name, None)) for name in _CAMEL.values())


def _ms(value: Time | Duration | None) -> int:
    return -1 if value is None else value.milliseconds


class JavaTime:
    """Spark's ``Time`` as py4j shows it: Java's methods, and ``==``/``hash`` through ``equals``/``hashCode``.

    pyspark hands a listener a py4j proxy of ``org.apache.spark.streaming.Time``, which Python
    compares and hashes through the Java object's ``equals`` and ``hashCode``, so listeners key
    dicts by ``batchTime()``. This does the same by milliseconds, with Java's hash values and
    ``str()`` (Java's ``toString()``, ``"<ms> ms"``). Like the proxy, it has no ``<``: use ``less()``.
    """

    __slots__ = ("_ms",)

    def __init__(self, time: Time) -> None:
        """The view of ``time``."""
        self._ms = time.milliseconds

    def milliseconds(self) -> int:
        """The time in milliseconds."""
        return self._ms

    def toString(self) -> str:
        """Java's ``Time.toString``: ``"<ms> ms"``."""
        return f"{self._ms} ms"

    def hashCode(self) -> int:
        """Java's ``Time.hashCode``, a Scala case class's: MurmurHash3 of ``"Time"`` and the milliseconds."""
        return _case_class_hash("Time", self._ms)

    def equals(self, other: object) -> bool:
        """Java's ``Time.equals``: another time with the same milliseconds."""
        return isinstance(other, JavaTime) and other._ms == self._ms

    def less(self, other: JavaTime) -> bool:
        """Whether this time is before ``other``."""
        return self._ms < _millis(other)

    def lessEq(self, other: JavaTime) -> bool:
        """Whether this time is not after ``other``."""
        return self._ms <= _millis(other)

    def greater(self, other: JavaTime) -> bool:
        """Whether this time is after ``other``."""
        return self._ms > _millis(other)

    def greaterEq(self, other: JavaTime) -> bool:
        """Whether this time is not before ``other``."""
        return self._ms >= _millis(other)

    def isMultipleOf(self, duration: object) -> bool:
        """Whether the milliseconds are a multiple of ``duration``'s (a Duration, ours or a JVM one).

        Raises:
            ZeroDivisionError: ``duration`` is zero (Java's ``ArithmeticException``).
        """
        return self._ms % _millis(duration) == 0

    def plus(self, duration: object) -> JavaTime:
        """This time ``duration`` (a Duration, ours or a JVM one) later."""
        return JavaTime(Time(self._ms + _millis(duration)))

    def minus(self, other: object) -> Any:
        """As Java's ``Time.minus``: the Duration from ``other`` to this time for a time (a JavaTime or ours), this time
        ``other`` earlier for a Duration (ours or a JVM one)."""
        if isinstance(other, (JavaTime, Time)):
            return Duration(self._ms - _millis(other))
        return JavaTime(Time(self._ms - _millis(other)))

    def min(self, other: JavaTime) -> JavaTime:
        """The earlier of this time and ``other``."""
        return self if self._ms <= _millis(other) else other

    def max(self, other: JavaTime) -> JavaTime:
        """The later of this time and ``other``."""
        return self if self._ms >= _millis(other) else other

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JavaTime):
            return other._ms == self._ms
        return NotImplemented

    def __hash__(self) -> int:
        return self.hashCode()

    def __str__(self) -> str:
        return self.toString()

    def __repr__(self) -> str:
        return f"JavaTime({self._ms} ms)"


def _millis(value: object) -> int:
    """The milliseconds of a time or duration: ours (an attribute) or a Java one (a method, as py4j shows it)."""
    if isinstance(value, (Time, Duration)):
        return value.milliseconds
    getter = getattr(value, "milliseconds", None)
    if callable(getter):
        return int(getter())
    raise TypeError(f"expected a Time or Duration (ours or a JVM one), got {type(value).__name__}: {value!r}")


_M32 = 0xFFFFFFFF


def _case_class_hash(prefix: str, millis: int) -> int:
    """Scala 2.13's generated ``hashCode`` of a one-``Long`` case class (MurmurHash3's ``productHash``)."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & _M32

    def mix(h: int, data: int) -> int:
        k = rotl((data * 0xCC9E2D51) & _M32, 15) * 0x1B873593 & _M32
        return (rotl(h ^ k, 13) * 5 + 0xE6546B64) & _M32

    prefix_hash = 0
    for char in prefix:  # Java's String.hashCode
        prefix_hash = (31 * prefix_hash + ord(char)) & _M32
    if -(2**31) <= millis < 2**31:  # Scala's ## of a Long that fits an Int is the Int
        long_hash = millis & _M32
    else:  # Long.hashCode
        bits = millis & 0xFFFFFFFFFFFFFFFF
        long_hash = (bits ^ (bits >> 32)) & _M32
    h = mix(mix(0xCAFEBABE, prefix_hash), long_hash) ^ 1  # finalizeHash(h, arity 1)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


class JavaStreamInputInfo:
    """``JavaStreamInputInfo`` getters."""

    def __init__(self, info: StreamInputInfo) -> None:
        self._info = info

    def inputStreamId(self) -> int:
        return self._info.input_stream_id

    def numRecords(self) -> int:
        return self._info.num_records

    def metadata(self) -> dict[str, Any]:
        return dict(self._info.metadata)

    def metadataDescription(self) -> str | None:
        return self._info.metadata_description


class JavaOutputOperationInfo:
    """``JavaOutputOperationInfo`` getters (-1 for unknown times, None for no failure)."""

    def __init__(self, info: OutputOperationInfo) -> None:
        self._info = info

    def batchTime(self) -> JavaTime:
        return JavaTime(self._info.batch_time)

    def id(self) -> int:
        return self._info.id

    def name(self) -> str:
        return self._info.name

    def description(self) -> str:
        return self._info.description

    def startTime(self) -> int:
        return _ms(self._info.start_time)

    def endTime(self) -> int:
        return _ms(self._info.end_time)

    def failureReason(self) -> str | None:
        return self._info.failure_reason


class JavaBatchInfo:
    """``JavaBatchInfo`` getters: every unknown time or delay is -1."""

    def __init__(self, info: BatchInfo) -> None:
        self._info = info

    def batchTime(self) -> JavaTime:
        return JavaTime(self._info.batch_time)

    def streamIdToInputInfo(self) -> dict[int, JavaStreamInputInfo]:
        return {k: JavaStreamInputInfo(v) for k, v in self._info.stream_id_to_input_info.items()}

    def submissionTime(self) -> int:
        return self._info.submission_time.milliseconds

    def processingStartTime(self) -> int:
        return _ms(self._info.processing_start_time)

    def processingEndTime(self) -> int:
        return _ms(self._info.processing_end_time)

    def schedulingDelay(self) -> int:
        return _ms(self._info.scheduling_delay)

    def processingDelay(self) -> int:
        return _ms(self._info.processing_delay)

    def totalDelay(self) -> int:
        return _ms(self._info.total_delay)

    def numRecords(self) -> int:
        return self._info.num_records

    def outputOperationInfos(self) -> dict[int, JavaOutputOperationInfo]:
        return {k: JavaOutputOperationInfo(v) for k, v in self._info.output_operation_infos.items()}


class JavaReceiverInfo:
    """``JavaReceiverInfo`` getters."""

    def __init__(self, info: ReceiverInfo) -> None:
        self._info = info

    def streamId(self) -> int:
        return self._info.stream_id

    def name(self) -> str:
        return self._info.name

    def active(self) -> bool:
        return self._info.active

    def location(self) -> str:
        return self._info.location

    def executorId(self) -> str:
        return self._info.executor_id

    def lastErrorMessage(self) -> str:
        return self._info.last_error_message

    def lastError(self) -> str:
        return self._info.last_error

    def lastErrorTime(self) -> int:
        return _ms(self._info.last_error_time)


class _Event:
    """The argument of a pyspark callback: ``batchInfo()``, ``outputOperationInfo()``, ``receiverInfo()`` or ``time()``.

    Every one is a method, as on the Java events py4j shows pyspark (``JavaStreamingListener*``:
    Scala ``val`` fields, which py4j calls as getters).
    """

    def __init__(self, event: StreamingEvent) -> None:
        self._event = event

    def time(self) -> int:
        """When the context started, in ms (``onStreamingStarted``'s event only)."""
        if not isinstance(self._event, StreamingStarted):
            raise AttributeError(f"a {type(self._event).__name__} event has no time(); only onStreamingStarted's has")
        return self._event.time.milliseconds

    def batchInfo(self) -> JavaBatchInfo:
        return JavaBatchInfo(self._event.batch_info)  # type: ignore[union-attr]

    def outputOperationInfo(self) -> JavaOutputOperationInfo:
        return JavaOutputOperationInfo(self._event.output_operation_info)  # type: ignore[union-attr]

    def receiverInfo(self) -> JavaReceiverInfo:
        return JavaReceiverInfo(self._event.receiver_info)  # type: ignore[union-attr]


class PySparkListenerAdapter(BusListener):
    """Lets a pyspark-style listener receive aiodstream events through the bus.

    It subscribes only to the events whose camelCase callback the listener overrides (a
    callback inherited unchanged from pyspark's or our ``StreamingListener`` does nothing), so
    the bus hands the listener's thread only the events it handles.
    """

    def __init__(self, listener: object) -> None:
        """Wrap ``listener``."""
        self.listener = listener
        for event_type, camel in _CAMEL.items():
            method = getattr(listener, camel, None)
            if callable(method) and not _inherited_no_op(listener, camel):
                setattr(self, HANDLER_NAMES[event_type], _forward(method))


def _forward(method: Callable[[Any], Any]) -> Callable[[StreamingEvent], Any]:
    """The bus's callback for ``method``: an ``async def`` one stays a coroutine function, which the bus awaits on the
    event loop as it does a snake_case ``async def`` callback (a plain wrapper would drop the coroutine unawaited)."""
    if inspect.iscoroutinefunction(method):
        async def forward_async(event: StreamingEvent) -> None:
            await method(_Event(event))

        return forward_async

    def forward(event: StreamingEvent) -> None:
        method(_Event(event))

    return forward


def _inherited_no_op(listener: object, name: str) -> bool:
    """Whether ``listener``'s ``name`` is the do-nothing one of pyspark's or our ``StreamingListener``.

    A callback set on the instance (``listener.onBatchCompleted = fn``) is its own, as pyspark calls it too.
    """
    if name in getattr(listener, "__dict__", {}):
        return False
    bases: list[type] = [StreamingListener]
    try:
        from pyspark.streaming.listener import StreamingListener as PySparkStreamingListener

        bases.append(PySparkStreamingListener)
    except ImportError:  # pragma: no cover - pyspark is a dependency
        pass
    own = getattr(type(listener), name, None)
    return any(own is getattr(base, name, None) for base in bases)


def is_pyspark_query_listener(listener: object) -> bool:
    """Whether ``listener`` is a pyspark ``StreamingQueryListener`` (or speaks its four callbacks)."""
    return all(callable(getattr(listener, name, None)) for name in ("onQueryStarted", "onQueryProgress", "onQueryTerminated"))


_in_query_callback: contextvars.ContextVar[bool] = contextvars.ContextVar("aiodstream_query_callback", default=False)


def in_query_listener() -> bool:
    """Whether this runs inside a pyspark ``StreamingQueryListener``'s callback (on its listener's thread)."""
    return _in_query_callback.get()


@contextlib.contextmanager
def _query_callback() -> Iterator[None]:
    token = _in_query_callback.set(True)
    try:
        yield
    finally:
        _in_query_callback.reset(token)


def stop_after_callback(stop: Callable[[], None], host: Any = None, stop_async: Callable[[], Any] | None = None) -> None:
    """pyspark's ``StreamingQuery.stop()`` from a ``StreamingQueryListener`` callback, which Spark allows: the stop waits
    for the listeners, this one's callback included, so it runs on a thread of its own and this returns at once.

    ``host``: the event loop token of a context in ``async with``, whose ``stop_async`` runs there instead.
    """
    def run() -> None:
        if host is None:
            stop()
        else:
            import anyio.from_thread

            anyio.from_thread.run(stop_async, token=host)  # type: ignore[arg-type]

    threading.Thread(target=run, name="aiodstream-stop-from-query-listener").start()


class PySparkQueryListenerAdapter(BusListener):
    """Lets a pyspark ``StreamingQueryListener`` receive query events as pyspark's own event objects.

    ``QueryStartedEvent``, ``QueryProgressEvent`` (whose ``progress`` is pyspark's
    ``StreamingQueryProgress``, a dict), ``QueryIdleEvent`` and ``QueryTerminatedEvent`` are
    built with pyspark's ``fromJson`` from the JSON Spark would send; the callbacks run on the
    listener's own worker thread, as pyspark's run on the listener bus thread.
    """

    def __init__(self, listener: object) -> None:
        """Wrap ``listener``."""
        self.listener = listener

    def on_query_started(self, event: QueryStarted) -> None:
        """pyspark's ``onQueryStarted``."""
        from pyspark.sql.streaming.listener import QueryStartedEvent

        with _query_callback():
            self.listener.onQueryStarted(QueryStartedEvent.fromJson(  # type: ignore[attr-defined]
                {"id": str(event.id), "runId": str(event.run_id), "name": event.name, "timestamp": event.timestamp}))

    def on_query_progress(self, event: QueryProgress) -> None:
        """pyspark's ``onQueryProgress``."""
        from pyspark.sql.streaming.listener import QueryProgressEvent

        with _query_callback():
            self.listener.onQueryProgress(QueryProgressEvent.fromJson(  # type: ignore[attr-defined]
                {"progress": progress_for_pyspark(event.progress)}))

    def on_query_idle(self, event: QueryIdle) -> None:
        """pyspark's ``onQueryIdle`` (a no-op unless the listener overrides it)."""
        from pyspark.sql.streaming.listener import QueryIdleEvent

        callback = getattr(self.listener, "onQueryIdle", None)
        if callable(callback):
            with _query_callback():
                callback(QueryIdleEvent.fromJson({"id": str(event.id), "runId": str(event.run_id), "timestamp": event.timestamp}))

    def on_query_terminated(self, event: QueryTerminated) -> None:
        """pyspark's ``onQueryTerminated``."""
        from pyspark.sql.streaming.listener import QueryTerminatedEvent

        with _query_callback():
            self.listener.onQueryTerminated(QueryTerminatedEvent.fromJson(  # type: ignore[attr-defined]
                {"id": str(event.id), "runId": str(event.run_id), "exception": event.exception,
                 "errorClassOnException": event.error_class_on_exception}))

    def __repr__(self) -> str:
        return f"<PySparkQueryListenerAdapter {self.listener!r}>"


def adapt_listener(listener: object) -> tuple[object, str | None]:
    """What the bus registers for ``listener``, and its name: pyspark-style listeners are wrapped.

    A listener may speak both of pyspark's listener interfaces; then one adapter per interface
    would be needed, so such a listener is refused.
    """
    query_style, dstream_style = is_pyspark_query_listener(listener), is_pyspark_style(listener)
    if query_style and dstream_style:
        raise TypeError(f"{type(listener).__name__} implements both StreamingListener and StreamingQueryListener "
                        "callbacks: register one listener per interface")
    if query_style:
        return PySparkQueryListenerAdapter(listener), type(listener).__qualname__
    if dstream_style:
        return PySparkListenerAdapter(listener), type(listener).__qualname__
    return listener, None
