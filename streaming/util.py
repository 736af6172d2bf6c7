"""``pyspark.streaming.util``'s user-facing helper, ``rddToFileName``; its py4j glue has no counterpart here.

pyspark's module also holds ``TransformFunction`` and ``TransformFunctionSerializer``, which wrap Python
functions for the JVM's DStreams; aiodstream runs DStreams in Python, so importing them is refused with why.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import NoReturn

__all__ = ["rddToFileName"]

_JVM_GLUE = frozenset({"TransformFunction", "TransformFunctionSerializer"})


def rddToFileName(prefix: str, suffix: str | None, timestamp: int | datetime) -> str:
    """``prefix-<ms>`` or ``prefix-<ms>.suffix``, as pyspark names a batch's output (``saveAsTextFiles``).

    ``timestamp`` is the batch time in milliseconds, or a ``datetime`` read as local time, as pyspark reads it.
    """
    if isinstance(timestamp, datetime):
        seconds = time.mktime(timestamp.timetuple())
        timestamp = int(seconds * 1000) + timestamp.microsecond // 1000
    return f"{prefix}-{timestamp}" if suffix is None else f"{prefix}-{timestamp}.{suffix}"


def __getattr__(name: str) -> NoReturn:
    if name in _JVM_GLUE:
        raise ImportError(f"pyspark.streaming.util.{name} passes Python functions to the JVM's DStreams, which aiodstream "
                          "does not use (its DStreams run in Python): give the function to transform() or foreachRDD() "
                          "directly", name=name, path=__file__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
