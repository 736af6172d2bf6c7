"""The async runtime a streaming program runs on: lifecycle, waiter, listeners (Spark's ``StreamingContext`` core).

It hosts the scheduler's JobGenerator and JobScheduler and the listener bus for any job graph:
a DStream graph, a plain-Python pipeline or a simulated one.
"""

from ._runtime import StreamingContextState, StreamingRuntime

__all__ = ["StreamingContextState", "StreamingRuntime"]
