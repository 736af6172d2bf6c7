"""DStreams: pyspark's ``DStream`` API, the stream nodes behind it and the graph that turns them into jobs.

The counterpart of Spark's ``org.apache.spark.streaming.dstream`` and ``DStreamGraph``. Inputs
live in ``streaming.inputs``; the StreamingContext that ties them together in ``streaming``.
"""

from ._dstream import (
    DStream,
    MultiTransformedDStream,
    ReducedWindowedDStream,
    StateDStream,
    TransformedDStream,
    TransformedWithDStream,
    UnionDStream,
    WindowedDStream,
    api_call,
)
from ._environment import StreamEnvironment
from ._graph import DStreamGraph, GraphStream, InputStream
from ._node import StreamNode, memory_only, union_rdds
from ._read_times import times_read
from ._recipe import (
    RECIPE_FILE,
    GraphNotSerializableError,
    GraphRecipe,
    RecipeCall,
    SavedRDD,
    SavedRecipe,
    StreamRef,
    check_recipe,
    load_recipe,
    recorded,
    write_recipe,
)
from ._snapshots import StatefulStream, StateSnapshots
from ._transforms import ForEachNode, check_stream
from ._windowed import INCREMENTAL_MIN_SLIDES, validate_window

__all__ = [
    "DStream",
    "GraphNotSerializableError",
    "GraphRecipe",
    "RECIPE_FILE",
    "RecipeCall",
    "SavedRDD",
    "SavedRecipe",
    "StreamRef",
    "api_call",
    "check_recipe",
    "load_recipe",
    "recorded",
    "write_recipe",
    "DStreamGraph",
    "ForEachNode",
    "GraphStream",
    "INCREMENTAL_MIN_SLIDES",
    "InputStream",
    "MultiTransformedDStream",
    "ReducedWindowedDStream",
    "StateDStream",
    "StateSnapshots",
    "StatefulStream",
    "StreamEnvironment",
    "StreamNode",
    "TransformedDStream",
    "TransformedWithDStream",
    "UnionDStream",
    "check_stream",
    "WindowedDStream",
    "memory_only",
    "times_read",
    "union_rdds",
    "validate_window",
]
