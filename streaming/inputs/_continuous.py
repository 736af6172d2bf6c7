"""Continuous inputs of a DStream program, and the plan a continuous context runs (its recorded calls, translated).

A ``ContinuousInputDStream`` only carries its source: a continuous context never computes RDDs.
At start, the context's recorded API calls are replayed onto :class:`~streaming.continuous.ContinuousStream`,
which accepts the narrow operations only; anything else is refused with Spark's messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scheduler import InvalidPipelineError, StreamingStateError, Time

from ..continuous import (
    ConsoleSink,
    ContinuousPlan,
    ContinuousSink,
    ContinuousSource,
    ContinuousStream,
    ForeachSink,
    unsupported_operation,
)
from ..dstream import GraphRecipe, StreamEnvironment, StreamRef
from ._base import InputDStream

if TYPE_CHECKING:
    from pyspark import RDD

__all__ = ["ContinuousInputDStream", "FOREACH_BATCH_REFUSED", "continuous_plan"]

FOREACH_BATCH_REFUSED = "'foreachBatch' is not supported with continuous trigger"

_NARROW = frozenset({"map", "flatMap", "filter", "mapPartitions", "mapPartitionsWithIndex", "mapValues", "flatMapValues",
                     "glom", "union"})
_SAME_STREAM = frozenset({"cache", "persist", "checkpoint"})  # no RDDs to keep in continuous mode
_OUTPUTS = frozenset({"foreach", "writeTo", "pprint"})
_PER_BATCH_OUTPUTS = frozenset({"foreachRDD", "saveAsTextFiles"})


class ContinuousInputDStream(InputDStream):
    """An input of a continuous context: a :class:`~streaming.continuous.ContinuousSource` read by long-running tasks."""

    _input_kind = "continuous input"

    def __init__(self, env: StreamEnvironment, source: ContinuousSource) -> None:
        """Register an input reading ``source``."""
        if not isinstance(source, ContinuousSource):
            raise InvalidPipelineError(f"Data source {source!r} does not support continuous processing.")
        super().__init__(env)
        self.source = source

    def _compute(self, time: Time) -> RDD[Any] | None:
        raise StreamingStateError("a continuous input has no batches: it runs only in a context with a Continuous trigger")

    @property
    def name(self) -> str:
        """The source's description and the input's id."""
        return f"{self.source!r} [{self.id}]"


def _resolve(value: Any, streams: dict[int, Any]) -> Any:
    if isinstance(value, StreamRef):
        return streams[value.index]
    if isinstance(value, (list, tuple)) and any(isinstance(v, StreamRef) for v in value):
        return type(value)(_resolve(v, streams) for v in value)
    return value


def continuous_plan(recipe: GraphRecipe) -> ContinuousPlan:
    """The continuous plan of a context's recorded calls.

    Raises:
        InvalidPipelineError: an operation continuous processing does not support (Spark's
            message, naming the operation), an input that cannot be read continuously, a
            per-batch output, or not exactly one output operation.
    """
    streams: dict[int, Any] = {}
    sinks: list[tuple[ContinuousStream, ContinuousSink]] = []
    for call in recipe.calls:
        method = call.method
        if method.startswith("<unrecordable"):
            raise InvalidPipelineError(f"{method[14:-1]} was called with a stream of another context")
        args = [_resolve(v, streams) for v in call.args]
        kwargs = {k: _resolve(v, streams) for k, v in call.kwargs.items()}
        result: Any = None
        if call.target is None:  # a context method
            if call.result is None:
                continue
            made = recipe.stream(call.result)
            if isinstance(made, ContinuousInputDStream):
                result = ContinuousStream(made.source)
            elif method == "union":
                parts = [a for a in args if isinstance(a, ContinuousStream)]
                result = parts[0]
                for other in parts[1:]:
                    result = result.union(other)
            elif isinstance(made, InputDStream):
                raise InvalidPipelineError(f"Data source {method} does not support continuous processing.")
            else:
                raise unsupported_operation(method)
        else:
            target = streams[call.target.index]
            if method in _NARROW:
                result = getattr(target, method)(*args, **kwargs)
            elif method in _SAME_STREAM:
                result = target
            elif method in _OUTPUTS:
                if method == "pprint":
                    sink: ContinuousSink = ConsoleSink(*args, **kwargs)
                elif method == "foreach":
                    sink = ForeachSink(*args, **kwargs)
                else:
                    sink = args[0] if args else kwargs["sink"]
                sinks.append((target, sink))
            elif method in _PER_BATCH_OUTPUTS:
                raise InvalidPipelineError(FOREACH_BATCH_REFUSED)
            else:
                raise unsupported_operation(method)
        if call.result is not None:
            streams[call.result] = result
    if not sinks:
        raise InvalidPipelineError("requirement failed: No output operations registered, so nothing to execute")
    if len(sinks) > 1:
        raise InvalidPipelineError(
            f"a continuous context runs one output operation, got {len(sinks)}; write each output with its own context "
            "(several contexts may run on one SparkContext)")
    stream, sink = sinks[0]
    return stream.to(sink)

