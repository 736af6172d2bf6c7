"""``pyspark.streaming.listener``'s name: ``from streaming.listener import StreamingListener`` as a migrated program has it.

A thin re-export of the package's ``StreamingListener`` (pyspark's module holds only that class).
"""

from __future__ import annotations

from ._listener_compat import StreamingListener

__all__ = ["StreamingListener"]
