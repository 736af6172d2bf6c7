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
from ._logging import LOGGER_ROOT, LibraryLogger, event_fields, library_logger
from ._loop_probe import PROBE_ATTRIBUTE, ReadyProbe, ready_probe
from ._metadata_log import (
    CommitLog,
    CommitMetadata,
    MetadataLog,
    OffsetSeq,
    OffsetSeqLog,
    OffsetSeqMetadata,
    fsync_directory,
    remove_temp_files,
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
from ._rate import PIDRateEstimator, RateController, RateLimiter
from ._streams import YIELD_EVERY, Mailbox, yield_now, yield_to_ready
from ._time import Duration, Milliseconds, Minutes, Seconds, Time, TimeOrderedDict
from ._timer import RecurringTimer
from ._virtual_clock import VirtualClock
from ._work import WorkTracker

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
    "event_fields",
    "format_timestamp",
    "fsync_directory",
    "GenerateJobs",
    "InputInfoTracker",
    "InvalidDurationError",
    "InvalidPipelineError",
    "is_async_callable",
    "Job",
    "JobAbandonedError",
    "JobFailedError",
    "JobGenerator",
    "JobGraph",
    "JobScheduler",
    "JobSchedulerListener",
    "JobSchedulerStatistics",
    "JobSet",
    "library_logger",
    "LibraryLogger",
    "LOGGER_ROOT",
    "Mailbox",
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
    "PIDRateEstimator",
    "PROBE_ATTRIBUTE",
    "ProgressTrackingOptions",
    "QueryProgressListener",
    "RateController",
    "RateLimiter",
    "ready_probe",
    "ReadyProbe",
    "ReceivingGraph",
    "RecoveredBatch",
    "RecurringTimer",
    "remove_temp_files",
    "ReplayableGraph",
    "ReplayableInput",
    "ReplayError",
    "run_with_timeout",
    "RunPlan",
    "Seconds",
    "SinkProgress",
    "SourceProgress",
    "StreamingError",
    "StreamingQueryProgress",
    "StreamingQueryStatus",
    "StreamingStateError",
    "StreamInputInfo",
    "SystemClock",
    "Time",
    "TimeOrderedDict",
    "Trigger",
    "UnsupportedLogVersionError",
    "VirtualClock",
    "WorkTracker",
    "write_new_file",
    "YIELD_EVERY",
    "yield_now",
    "yield_to_ready",
]
