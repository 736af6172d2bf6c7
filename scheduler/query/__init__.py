"""Structured Streaming's query machinery on the engine: the offsets and commits logs, the checkpoint, MicroBatchTracker, progress.

The counterpart of Spark's ``StreamExecution`` bookkeeping (``OffsetSeqLog``, ``CommitLog``,
``ProgressReporter``, async progress tracking). It builds on the engine's core (time, clock,
protocols, errors) and nothing in the core imports it; ``scheduler`` re-exports its names.
"""

from ._checkpoint import BatchGrid, Checkpoint, CheckpointDescription, CheckpointState
from ._files import (
    LOCAL_FILES,
    CheckpointFileManager,
    CheckpointPath,
    LocalFileManager,
    as_checkpoint_path,
    fsync_directory,
    remove_temp_files,
    temp_name,
    uri_scheme,
    write_new_file,
)
from ._fsspec_files import FsspecFileManager, check_task_file_system, task_checkpoint_path
from ._metadata_log import CommitLog, CommitMetadata, MetadataLog, OffsetSeq, OffsetSeqLog, OffsetSeqMetadata
from ._micro_batch import MicroBatchTracker, MicroBatchTrackerStatistics, QueryProgressListener, RunPlan
from ._numbers import LONG_MAX, LONG_MIN, parse_batch_file_name, parse_long
from ._progress import SinkProgress, SourceProgress, StreamingQueryProgress, StreamingQueryStatus, format_timestamp
from ._query_options import ProgressTrackingOptions, Trigger

__all__ = [
    "as_checkpoint_path",
    "BatchGrid",
    "Checkpoint",
    "CheckpointDescription",
    "CheckpointFileManager",
    "CheckpointPath",
    "CheckpointState",
    "check_task_file_system",
    "CommitLog",
    "CommitMetadata",
    "format_timestamp",
    "FsspecFileManager",
    "fsync_directory",
    "LOCAL_FILES",
    "LocalFileManager",
    "LONG_MAX",
    "LONG_MIN",
    "MetadataLog",
    "MicroBatchTracker",
    "MicroBatchTrackerStatistics",
    "OffsetSeq",
    "OffsetSeqLog",
    "OffsetSeqMetadata",
    "ProgressTrackingOptions",
    "parse_batch_file_name",
    "parse_long",
    "QueryProgressListener",
    "remove_temp_files",
    "RunPlan",
    "SinkProgress",
    "SourceProgress",
    "StreamingQueryProgress",
    "StreamingQueryStatus",
    "task_checkpoint_path",
    "temp_name",
    "Trigger",
    "uri_scheme",
    "write_new_file",
]
