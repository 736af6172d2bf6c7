"""The user API: the streaming runtime, plain-Python pipelines and (with Spark) DStreams.

The counterpart of ``pyspark.streaming``. Importing this package does not import PySpark. The
subpackages hold the parts (see docs/architecture.md): ``runtime`` (the engine host), ``spark``
(PySpark glue), ``dstream`` and ``inputs`` (pyspark's DStream API), ``recovery`` (input logs),
``pipeline`` (plain-Python pipelines) and ``simulation``; this package's own modules are the
pyspark-facing ``StreamingContext``, its listener adapter and the ``aiodstream`` command.
"""

from scheduler import Duration, ManualClock, Milliseconds, Minutes, Seconds, SystemClock, Time, Trigger

from ._context import StreamingContext
from ._listener_compat import StreamingListener
from ._manager import StreamingQueryManager, streams
from .dstream import DStream
from .pipeline import Batch, DirectorySource, FileSink, ListSource, Pipeline, ReplayableSource
from .runtime import QueryRuntime, StreamingContextState, StreamingRuntime
from .spark import run_spark

__all__ = [
    "Batch",
    "DStream",
    "DirectorySource",
    "Duration",
    "FileSink",
    "ListSource",
    "ManualClock",
    "Milliseconds",
    "Minutes",
    "Pipeline",
    "QueryRuntime",
    "ReplayableSource",
    "Seconds",
    "StreamingContext",
    "StreamingContextState",
    "StreamingListener",
    "StreamingQueryManager",
    "StreamingRuntime",
    "SystemClock",
    "Time",
    "Trigger",
    "run_spark",
    "streams",
]
