"""The output operations of a DStream: foreachRDD, pprint, saveAsTextFiles, and the continuous outputs' checks.

What pyspark's ``foreachRDD``, ``pprint`` and ``saveAsTextFiles`` register (Spark's ``ForEachDStream``
users); ``DStream`` keeps pyspark's signatures and documentation and delegates here.
"""

from __future__ import annotations

import inspect
from datetime import datetime
from typing import Any, Callable

from scheduler import InvalidPipelineError, Time

from ..continuous import ContinuousSink
from ..spark import save_text_files_once
from ..util import rddToFileName
from ._arguments import arity
from ._environment import StreamEnvironment
from ._node import StreamNode
from ._transforms import ForEachNode

__all__ = ["check_continuous_output", "check_continuous_sink", "for_each_rdd", "print_rdds", "save_as_text_files", "saved_file_name"]


def for_each_rdd(stream: StreamNode, func: Callable[..., Any]) -> None:
    """Register ``func(rdd)`` or ``func(time, rdd)`` (plain or ``async def``) as an output operation on ``stream``."""
    if arity(func) == 1:
        inner = func
        if inspect.iscoroutinefunction(inner):
            async def one_arg_async(t: Any, rdd: Any) -> Any:
                return await inner(rdd)
            func = one_arg_async
        else:
            def one_arg(t: Any, rdd: Any) -> Any:
                return inner(rdd)
            func = one_arg
    ForEachNode(stream, func).register()


def print_rdds(stream: StreamNode, num: int) -> None:
    """Register pyspark's ``pprint``: the first ``num`` elements of each RDD under its header, ``...`` if there are more."""
    def take_and_print(time: Any, rdd: Any) -> None:
        taken = rdd.take(num + 1)
        print("-------------------------------------------")
        print(f"Time: {time}")
        print("-------------------------------------------")
        for record in taken[:num]:
            print(record)
        if len(taken) > num:
            print("...")
        print("")

    for_each_rdd(stream, take_and_print)


def saved_file_name(prefix: str, suffix: str | None, time: Time) -> str:
    """``prefix-<ms>`` or ``prefix-<ms>.suffix``, the directory a batch is saved to (pyspark's ``rddToFileName``)."""
    return rddToFileName(prefix, suffix, time.milliseconds)


def save_as_text_files(stream: StreamNode, prefix: str, suffix: str | None) -> None:
    """Register pyspark's ``saveAsTextFiles``; a batch already saved whole is skipped, a partial save redone."""
    def save(time: datetime, rdd: Any) -> None:
        # The datetime round-trips to the batch's milliseconds: batch_datetime() made it.
        save_text_files_once(rdd, saved_file_name(prefix, suffix, Time(round(time.timestamp() * 1000))))

    ForEachNode(stream, save, operation="saveAsTextFiles", supports_async_progress_tracking=False).register()


def check_continuous_output(env: StreamEnvironment, method: str) -> None:
    """Raise unless ``env``'s context may still add streams and has a Continuous trigger (outputs ``foreach``, ``writeTo``).

    Raises:
        StreamingStateError: the context was already started or stopped.
        InvalidPipelineError: the context has no Continuous trigger.
    """
    env.check_can_add()
    if env.continuous is None:
        raise InvalidPipelineError(
            f"{method}() is an output of continuous processing: create the context with a trigger, "
            f"StreamingContext(sc, Continuous('1 second')), or write each batch with foreachRDD")


def check_continuous_sink(sink: object) -> None:
    """Raise unless ``sink`` is one of ``streaming.continuous``'s sinks.

    Raises:
        InvalidPipelineError: it is not.
    """
    if not isinstance(sink, ContinuousSink):
        raise InvalidPipelineError(f"writeTo needs a streaming.continuous sink (FileSink, MemorySink, ConsoleSink, "
                                   f"ForeachSink), got {sink!r}")
