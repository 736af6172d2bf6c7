"""The user API: the streaming runtime, plain-Python pipelines and (with Spark) DStreams.

The counterpart of ``pyspark.streaming``. Importing this package does not import PySpark.
"""

from scheduler import Duration, ManualClock, Milliseconds, Minutes, Seconds, SystemClock, Time

from ._context import StreamingContext
from ._dstream import DStream
from ._listener_compat import StreamingListener
from ._pipeline import Batch, Pipeline
from ._runtime import StreamingContextState, StreamingRuntime

__all__ = [
    "Batch",
    "DStream",
    "Duration",
    "ManualClock",
    "Milliseconds",
    "Minutes",
    "Pipeline",
    "Seconds",
    "StreamingContext",
    "StreamingContextState",
    "StreamingListener",
    "StreamingRuntime",
    "SystemClock",
    "Time",
]
