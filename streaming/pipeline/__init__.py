"""Plain-Python pipelines on the runtime: replayable sources, jobs over each batch, idempotent sinks.

The query-style product beside the DStream API (Structured Streaming's sources, ``foreachBatch``
and file sink, without Spark).
"""

from ._directory_source import DirectorySource, read_lines
from ._pipeline import Batch, Pipeline
from ._sinks import FileSink
from ._sources import ListSource, ReplayableSource

__all__ = ["Batch", "DirectorySource", "FileSink", "ListSource", "Pipeline", "ReplayableSource", "read_lines"]
