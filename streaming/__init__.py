"""The user API: the streaming runtime, plain-Python pipelines and (with Spark) DStreams.

The counterpart of ``pyspark.streaming``. Importing this package does not import PySpark.
"""

from scheduler import Duration, ManualClock, Milliseconds, Minutes, Seconds, SystemClock, Time, Trigger

from ._context import StreamingContext
from ._dstream import DStream
from ._listener_compat import StreamingListener
from ._pipeline import Batch, Pipeline
from ._runtime import StreamingContextState, StreamingRuntime
from ._sinks import FileSink
from ._sources import DirectorySource, ListSource, ReplayableSource
from ._spark import run_spark

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
    "ReplayableSource",
    "Seconds",
    "StreamingContext",
    "StreamingContextState",
    "StreamingListener",
    "StreamingRuntime",
    "SystemClock",
    "Time",
    "Trigger",
    "run_spark",
]
