"""StreamEnvironment: what the streams of one context share (Spark's ``DStream.ssc`` and ``DStream.graph``).

Streams and inputs reach their context only through this object, never through the
StreamingContext's privates: the graph, the batch duration, the clock, the Spark binding and the
runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from scheduler import Clock, Duration

from ..continuous import Continuous
from ..runtime import StreamingRuntime
from ..spark import SparkBackend
from ._graph import DStreamGraph
from ._recipe import GraphRecipe

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["StreamEnvironment"]


class StreamEnvironment:
    """The services one context gives its streams.

    Args:
        batch_duration: the context's batch interval.
        spark: the context's Spark side (SparkContext or Connect session, settings, job threads, cancellations).
        clock: the clock the runtime will use, or ``None`` for the wall clock.
        name: the context's name, the prefix of its Spark job groups (``"aiodstream-0"``).
        owner: the StreamingContext, handed back by ``DStream.context()``.
        check_can_add: raises when the context no longer accepts new streams (started or stopped).
        runtime: the context's runtime (created on first call).

    Attributes:
        graph: the context's stream graph.
        recipe: the API calls that built it, saved in a checkpoint to rebuild it.
        spark_checkpoint_dir: Spark's checkpoint directory as the start found it (read off the
            event loop; ``None`` before the start or when unset).
        continuous: the context's Continuous trigger (``None``: micro-batches).
        async_mode: whether the context lives in an ``async with`` block (then no py4j call is
            made on the event loop: work that needs Spark waits for the generation thread).
    """

    def __init__(self, *, batch_duration: Duration, spark: SparkBackend, clock: Clock | None, name: str, owner: Any,
                 check_can_add: Callable[[], None], runtime: Callable[[], StreamingRuntime]) -> None:
        """Create the environment and its empty graph."""
        self.batch_duration = batch_duration
        self.spark = spark
        self.clock = clock
        self.name = name
        self.owner = owner
        self.graph = DStreamGraph(batch_duration)
        self.recipe = GraphRecipe()
        self.spark_checkpoint_dir: str | None = None
        self.async_mode = False
        self.continuous: Continuous | None = None
        """The context's continuous trigger, or ``None`` for a micro-batch context."""
        self._check_can_add = check_can_add
        self._runtime = runtime

    @property
    def spark_context(self) -> SparkContext:
        """The SparkContext (starting an embedded one on first need: blocking), or on Connect the FrameContext standing for it."""
        return self.spark.spark_context

    @property
    def runtime(self) -> StreamingRuntime:
        """The context's runtime: its clock and listener bus."""
        return self._runtime()

    def check_can_add(self) -> None:
        """Raise unless new inputs, transformations and outputs may still be added."""
        self._check_can_add()

    def __repr__(self) -> str:
        return f"<StreamEnvironment {self.name} [batch {self.batch_duration} | {self.graph!r}]>"
