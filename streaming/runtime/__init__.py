"""The async runtimes a streaming program runs on, and what they share (Spark's ``StreamingContext`` core and ``StreamExecution``).

:class:`StreamingRuntime` hosts the scheduler's JobGenerator and JobScheduler and the listener bus
for any job graph: a DStream graph, a plain-Python pipeline or a simulated one. Every query runtime
(this one and the continuous one) keeps the :class:`QueryRuntime` contract on a :class:`RuntimeCore`
and reports to the process's :data:`query_registry`.
"""

from ._core import RuntimeCore
from ._manager import QueryRegistration, QueryRegistry, RegisteredQuery, query_registry
from ._protocol import QueryRuntime
from ._runtime import StreamingRuntime
from ._state import StreamingContextState

__all__ = [
    "QueryRegistration",
    "QueryRegistry",
    "QueryRuntime",
    "RegisteredQuery",
    "RuntimeCore",
    "StreamingContextState",
    "StreamingRuntime",
    "query_registry",
]
