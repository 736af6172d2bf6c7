"""Seeing a running engine: a web UI and Prometheus metrics, fed by the listener bus.

The counterpart of Spark's Streaming and Structured Streaming tabs and its metrics source.
Importing this package imports neither prometheus_client nor starlette; creating a
``StreamingMetrics`` or serving a ``StreamingUI`` does.
"""

from ._app import DEFAULT_UI_PORT, StreamingUI, check_port
from ._history import ContextHistory
from ._metrics import DELAY_BUCKETS_S, StreamingMetrics

__all__ = ["DEFAULT_UI_PORT", "DELAY_BUCKETS_S", "ContextHistory", "StreamingMetrics", "StreamingUI", "check_port"]
