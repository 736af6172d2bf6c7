"""The streaming runtime's engine: time, clocks, the batch timer, JobGenerator, JobScheduler and checkpoints.

The counterpart of Spark's ``org.apache.spark.streaming.scheduler`` package. Nothing here knows
about Spark or about the listener bus; both attach through the protocols in this package.
"""

from ._checkpoint import (
    BatchGrid,
    Checkpoint,
    CheckpointDescription,
    CheckpointState,
)
from ._clock import Clock, ManualClock, SystemClock, run_with_timeout
from ._errors import (
    CheckpointError,
    ConcurrentCheckpointUpdateError,
    CorruptCheckpointError,
    InvalidDurationError,
    InvalidPipelineError,
    JobFailedError,
    ReplayError,
    StreamingError,
    StreamingStateError,
    UnsupportedLogVersionError,
)
from ._input_info import InputInfoTracker, StreamInputInfo
from ._job import Job, is_async_callable
from ._job_generator import BatchFinished, GenerateJobs, JobGenerator
from ._job_scheduler import JobAbandonedError, JobScheduler, JobSchedulerStatistics
from ._job_set import JobSet
from ._metadata_log import (
    CommitLog,
    CommitMetadata,
    MetadataLog,
    OffsetSeq,
    OffsetSeqLog,
    OffsetSeqMetadata,
    write_new_file,
)
from ._micro_batch import MicroBatchTracker, MicroBatchTrackerStatistics, QueryProgressListener, RunPlan
from ._progress import SinkProgress, SourceProgress, StreamingQueryProgress, StreamingQueryStatus, format_timestamp
from ._protocols import (
    BatchHook,
    BatchPlanner,
    JobGraph,
    JobSchedulerListener,
    Offset,
    ReceivingGraph,
    RecoveredBatch,
    ReplayableGraph,
    ReplayableInput,
)
from ._query_options import ProgressTrackingOptions, Trigger
from ._time import Duration, Milliseconds, Minutes, Seconds, Time, TimeOrderedDict
from ._timer import RecurringTimer
from ._virtual_clock import VirtualClock

__all__ = [
    "BatchFinished",
    "BatchGrid",
    "BatchHook",
    "BatchPlanner",
    "Checkpoint",
    "CheckpointDescription",
    "CheckpointError",
    "CheckpointState",
    "Clock",
    "CommitLog",
    "CommitMetadata",
    "ConcurrentCheckpointUpdateError",
    "CorruptCheckpointError",
    "Duration",
    "GenerateJobs",
    "InputInfoTracker",
    "InvalidDurationError",
    "InvalidPipelineError",
    "Job",
    "JobAbandonedError",
    "JobFailedError",
    "JobGenerator",
    "JobGraph",
    "JobScheduler",
    "JobSchedulerListener",
    "JobSchedulerStatistics",
    "JobSet",
    "ManualClock",
    "MetadataLog",
    "MicroBatchTracker",
    "MicroBatchTrackerStatistics",
    "Milliseconds",
    "Minutes",
    "Offset",
    "OffsetSeq",
    "OffsetSeqLog",
    "OffsetSeqMetadata",
    "ProgressTrackingOptions",
    "QueryProgressListener",
    "ReceivingGraph",
    "RecoveredBatch",
    "RecurringTimer",
    "ReplayError",
    "ReplayableGraph",
    "ReplayableInput",
    "RunPlan",
    "Seconds",
    "SinkProgress",
    "SourceProgress",
    "StreamInputInfo",
    "StreamingError",
    "StreamingQueryProgress",
    "StreamingQueryStatus",
    "StreamingStateError",
    "SystemClock",
    "Time",
    "TimeOrderedDict",
    "Trigger",
    "UnsupportedLogVersionError",
    "VirtualClock",
    "format_timestamp",
    "is_async_callable",
    "run_with_timeout",
    "write_new_file",
]
# TEMPORARY-MERGE: exported properly on the sched branch
from ._metadata_log import fsync_directory, remove_temp_files
from ._rate import PIDRateEstimator, RateController, RateLimiter

__all__ += ["PIDRateEstimator", "RateController", "RateLimiter", "fsync_directory", "remove_temp_files"]
