"""The user API: the streaming runtime, plain-Python pipelines and (with Spark) DStreams.

The counterpart of ``pyspark.streaming``. Importing this package does not import PySpark. The
subpackages hold the parts (see docs/architecture.md): ``runtime`` (the engine host), ``spark``
(PySpark glue), ``dstream`` and ``inputs`` (pyspark's DStream API), ``recovery`` (input logs),
``pipeline`` (plain-Python pipelines) and ``simulation``; this package's own modules are the
pyspark-facing ``StreamingContext``, its listener adapter and the ``aiodstream`` command; pyspark's
``StatefulProcessor`` API (for ``transformWithState``) is re-exported from ``state``.
"""

from scheduler import Duration, ManualClock, Milliseconds, Minutes, Seconds, SystemClock, Time, Trigger

from ._context import StreamingContext
from ._listener_compat import StreamingListener
from ._manager import StreamingQueryManager, streams
from .dstream import DStream
from .pipeline import Batch, DirectorySource, FileSink, ListSource, Pipeline, ReplayableSource
from .runtime import QueryRuntime, StreamingContextState, StreamingRuntime
from .spark import run_spark
from .state import (
    ExpiredTimerInfo,
    ListState,
    MapState,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    ValueState,
)

__all__ = [
    "Batch",
    "DStream",
    "DirectorySource",
    "Duration",
    "ExpiredTimerInfo",
    "FileSink",
    "ListSource",
    "ListState",
    "ManualClock",
    "MapState",
    "Milliseconds",
    "Minutes",
    "Pipeline",
    "QueryRuntime",
    "ReplayableSource",
    "Seconds",
    "StatefulProcessor",
    "StatefulProcessorHandle",
    "StreamingContext",
    "StreamingContextState",
    "StreamingListener",
    "StreamingQueryManager",
    "StreamingRuntime",
    "SystemClock",
    "Time",
    "TimerValues",
    "Trigger",
    "ValueState",
    "run_spark",
    "streams",
]
