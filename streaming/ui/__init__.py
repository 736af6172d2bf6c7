"""Seeing a running engine: Prometheus metrics (and, to come, the web UI), fed by the listener bus.

The counterpart of Spark's Streaming tab and its metrics source. Importing this package does not
import prometheus_client; creating a ``StreamingMetrics`` does.
"""

from ._metrics import DELAY_BUCKETS_S, StreamingMetrics

__all__ = ["DELAY_BUCKETS_S", "StreamingMetrics"]
