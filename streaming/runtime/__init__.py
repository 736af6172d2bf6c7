"""The async runtime a streaming program runs on: lifecycle, waiter, listeners (Spark's ``StreamingContext`` core).

It hosts the scheduler's JobGenerator and JobScheduler and the listener bus for any job graph:
a DStream graph, a plain-Python pipeline or a simulated one. Runtimes that track a query
report to the process's :data:`query_registry`.
"""

from ._manager import QueryRegistry, RegisteredQuery, query_registry
from ._protocol import QueryRuntime
from ._runtime import StreamingRuntime, exit_task_group, run_until_stopped
from ._state import StreamingContextState

__all__ = ["QueryRegistry", "QueryRuntime", "RegisteredQuery", "StreamingContextState", "StreamingRuntime", "exit_task_group",
           "query_registry", "run_until_stopped"]
