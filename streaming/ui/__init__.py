"""Seeing a running engine: a web UI and Prometheus metrics, fed by the listener bus.

The counterpart of Spark's Streaming and Structured Streaming tabs and its metrics source.
Importing this package imports neither prometheus_client nor starlette; creating a
``StreamingMetrics`` or serving a ``StreamingUI`` does.
"""

from ._app import DEFAULT_UI_PORT, StreamingUI
from ._failures import error_summary
from ._history import ContextHistory
from ._listen import check_port
from ._metrics import DELAY_BUCKETS_S, StreamingMetrics
from ._relay import ConnectionLimits, ConnectionRelay, RelayStatistics
from ._retention import DEFAULT_RETAINED_CONTEXTS, RETAINED_CONTEXTS, RetainedContexts, retained_contexts_setting
from ._security import RemoteUIRefusedError, UISecurity
from ._wiring import RETAINED_BATCHES, ContextUI, retained_batches_setting, spark_links

__all__ = ["DEFAULT_RETAINED_CONTEXTS", "DEFAULT_UI_PORT", "DELAY_BUCKETS_S", "RETAINED_BATCHES", "RETAINED_CONTEXTS",
           "ConnectionLimits", "ConnectionRelay", "ContextHistory", "ContextUI", "RelayStatistics", "RemoteUIRefusedError",
           "RetainedContexts", "StreamingMetrics", "StreamingUI", "UISecurity", "check_port", "error_summary",
           "retained_batches_setting", "retained_contexts_setting", "spark_links"]
