"""``foreachBatch``: each batch as a DataFrame with its batch id, Structured Streaming's ``foreachBatch(func(df, batch_id))`` shape.

pyspark's ``DataStreamWriter.foreachBatch`` for a DStream: the output operation of choice on Spark
Connect, where a batch is a DataFrame at heart (``FrameRDD.toDF()``); it works on a classic
SparkContext too (``RDD.toDF()``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from scheduler import InvalidPipelineError, Time

from ._arguments import arity
from ._node import StreamNode
from ._recipe import recorded
from ._transforms import ForEachNode

__all__ = ["BatchOutputs"]


def _dataframe(rdd: Any, schema: Any) -> Any:
    """``rdd`` as a DataFrame: a FrameRDD's own, or a classic RDD's ``toDF`` (blocking: py4j calls, on the job's thread).

    A classic RDD's ``toDF`` is pyspark's placeholder raising ``CALL_BEFORE_INITIALIZE`` until a
    SparkSession exists: the SparkContext's session is got, or made, first (pyspark then gives
    RDDs the real ``toDF``).
    """
    from pyspark import RDD

    if isinstance(rdd, RDD):
        from pyspark.sql import SparkSession

        SparkSession.builder.getOrCreate()  # on the batch's SparkContext, the only active one
    return rdd.toDF() if schema is None else rdd.toDF(schema)


class BatchOutputs:
    """The ``foreachBatch`` output operation, mixed into ``DStream`` (kept apart: the DStream module is full)."""

    @recorded(StreamNode)
    def foreachBatch(self, func: Callable[[Any, int], Any], schema: Any = None) -> None:
        """Call ``func(df, batch_id)`` with each batch as a DataFrame: an output operation, Structured Streaming's shape.

        ``df`` is the batch's RDD as a DataFrame (``rdd.toDF(schema)``): on Spark Connect the
        FrameRDD's DataFrame, so ``func`` can use the DataFrame API and writers; elements must
        be rows, tuples or dicts a schema fits. ``batch_id`` counts the context's batches from 0
        (the batch time's index on the grid since the start: the same after a restart). Without
        ``schema`` a batch with no elements is skipped, as its schema cannot be inferred (an
        ``isEmpty`` check per batch); with one, every batch is passed, empty ones as empty
        DataFrames. The function runs on a job thread, its Spark work in the batch's group.

        Raises:
            InvalidPipelineError: ``func`` does not take two arguments.
        """
        if not callable(func) or arity(func) != 2:
            raise InvalidPipelineError(f"foreachBatch needs a function of (df, batch_id), got {func!r}")
        node: StreamNode = self  # type: ignore[assignment]  # mixed into DStream, a StreamNode
        env = node.env

        def run(time: datetime, rdd: Any) -> None:
            graph = env.graph
            zero = graph.zero_time.milliseconds if graph.zero_time is not None else 0
            batch_ms = Time(round(time.timestamp() * 1000)).milliseconds
            batch_id = (batch_ms - zero) // env.batch_duration.milliseconds - 1
            if schema is None and rdd.isEmpty():
                return
            func(_dataframe(rdd, schema), batch_id)

        ForEachNode(node, run, operation="foreachBatch").register()
