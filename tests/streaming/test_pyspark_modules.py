"""pyspark.streaming's submodules under the one-import swap: listener, context and util import from ``streaming``."""

from __future__ import annotations

import importlib
from datetime import datetime

import pytest
from pyspark.streaming import util as pyspark_util

import streaming
from tests.anyio_support import raises_exactly


def test_the_listener_and_context_submodules_re_export_pyspark_s_names() -> None:
    """streaming.listener and streaming.context hold what pyspark's modules export, the package's own classes."""
    from streaming.context import StreamingContext
    from streaming.listener import StreamingListener

    assert (StreamingContext, StreamingListener) == (streaming.StreamingContext, streaming.StreamingListener)
    for name in ("listener", "context"):
        pyspark_module = importlib.import_module(f"pyspark.streaming.{name}")
        assert importlib.import_module(f"streaming.{name}").__all__ == pyspark_module.__all__


@pytest.mark.parametrize("args", [("spark", None, 12345678910), ("spark", "tmp", 12345678910), ("out", "txt", 0),
                                  ("out", None, datetime(2026, 1, 2, 3, 4, 5, 678_901))])
def test_rdd_to_file_name_names_as_pyspark_does(args: tuple[str, str | None, int | datetime]) -> None:
    """rddToFileName gives pyspark's name for milliseconds and for a datetime (read as local time)."""
    from streaming.util import rddToFileName

    assert rddToFileName(*args) == pyspark_util.rddToFileName(*args)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("name", ["TransformFunction", "TransformFunctionSerializer"])
def test_pyspark_s_jvm_glue_in_util_is_refused_with_why(name: str) -> None:
    """Importing pyspark.streaming.util's py4j wrappers from streaming.util is an ImportError saying what to do."""
    with raises_exactly(ImportError, f"pyspark.streaming.util.{name} passes Python functions to the JVM's DStreams, which "
                        "aiodstream does not use (its DStreams run in Python): give the function to transform() or "
                        "foreachRDD() directly"):
        exec(f"from streaming.util import {name}", {})
    with raises_exactly(AttributeError, "module 'streaming.util' has no attribute 'other'"):
        importlib.import_module("streaming.util").other  # noqa: B018 (the attribute access is the test)
