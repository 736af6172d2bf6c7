"""Structured Streaming's query machinery on the engine: the offsets and commits logs, the checkpoint, MicroBatchTracker, progress.

The counterpart of Spark's ``StreamExecution`` bookkeeping (``OffsetSeqLog``, ``CommitLog``,
``ProgressReporter``, async progress tracking). It builds on the engine's core (time, clock,
protocols, errors) and nothing in the core imports it; ``scheduler`` re-exports its names.
"""

from .._numbers import LONG_MAX, LONG_MIN, parse_batch_file_name, parse_long
from ._checkpoint import STATE_VERSION_KEY, BatchGrid, Checkpoint, CheckpointDescription, CheckpointState, recorded_state_version
from ._claims import (
    CheckpointClaim,
    CheckpointClaims,
    checkpoint_claims,
    concurrent_log_update_error,
    concurrent_use_error,
)
from ._files import (
    LOCAL_FILES,
    LOCK_FILE,
    CheckpointFileManager,
    CheckpointLock,
    CheckpointPath,
    LocalFileManager,
    as_checkpoint_path,
    detect_only,
    fsync_directory,
    holder_is_gone,
    lease_file_lock,
    lock_local_directory,
    process_exists,
    remove_temp_files,
    temp_name,
    uri_scheme,
    write_new_file,
    write_replacing_file,
)
from ._fsspec_files import FsspecFileManager, check_task_file_system, task_checkpoint_path
from ._metadata_log import CommitLog, CommitMetadata, MetadataLog, OffsetSeq, OffsetSeqLog, OffsetSeqMetadata
from ._micro_batch import MicroBatchTracker, MicroBatchTrackerStatistics, RunPlan, runs_batches_sequentially
from ._progress import SinkProgress, SourceProgress, StreamingQueryProgress, StreamingQueryStatus, format_timestamp
from ._progress_reporter import ProgressKeeper, QueryProgressListener
from ._progress_ring import ProgressRing
from ._query_options import ProgressTrackingOptions, Trigger, read_query_options, whole_number_option
from ._regular_files import local_entry_kind

__all__ = [
    "STATE_VERSION_KEY",
    "recorded_state_version",
    "as_checkpoint_path",
    "BatchGrid",
    "Checkpoint",
    "CheckpointClaim",
    "checkpoint_claims",
    "CheckpointClaims",
    "CheckpointDescription",
    "CheckpointFileManager",
    "CheckpointLock",
    "CheckpointPath",
    "CheckpointState",
    "check_task_file_system",
    "CommitLog",
    "CommitMetadata",
    "concurrent_log_update_error",
    "concurrent_use_error",
    "detect_only",
    "format_timestamp",
    "FsspecFileManager",
    "fsync_directory",
    "holder_is_gone",
    "process_exists",
    "lease_file_lock",
    "local_entry_kind",
    "LOCAL_FILES",
    "LocalFileManager",
    "LONG_MAX",
    "LONG_MIN",
    "lock_local_directory",
    "LOCK_FILE",
    "MetadataLog",
    "MicroBatchTracker",
    "MicroBatchTrackerStatistics",
    "ProgressKeeper",
    "ProgressRing",
    "OffsetSeq",
    "OffsetSeqLog",
    "OffsetSeqMetadata",
    "ProgressTrackingOptions",
    "parse_batch_file_name",
    "parse_long",
    "QueryProgressListener",
    "remove_temp_files",
    "RunPlan",
    "runs_batches_sequentially",
    "SinkProgress",
    "SourceProgress",
    "StreamingQueryProgress",
    "StreamingQueryStatus",
    "task_checkpoint_path",
    "temp_name",
    "Trigger",
    "uri_scheme",
    "read_query_options",
    "whole_number_option",
    "write_new_file",
    "write_replacing_file",
]
