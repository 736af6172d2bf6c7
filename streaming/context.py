"""``pyspark.streaming.context``'s name: ``from streaming.context import StreamingContext`` as a migrated program has it.

A thin re-export of the package's ``StreamingContext`` (pyspark's module exports only that class).
"""

from __future__ import annotations

from ._context import StreamingContext

__all__ = ["StreamingContext"]
