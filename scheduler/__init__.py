"""The streaming runtime's engine: time, clocks, the batch timer, JobGenerator and JobScheduler.

The counterpart of Spark's ``org.apache.spark.streaming.scheduler`` package. Nothing here knows
about Spark or about the listener bus; both attach through the protocols in this package.
"""

from ._clock import Clock, ManualClock, SystemClock, run_with_timeout
from ._errors import (
    InvalidDurationError,
    InvalidPipelineError,
    JobFailedError,
    StreamingError,
    StreamingStateError,
)
from ._input_info import InputInfoTracker, StreamInputInfo
from ._job import Job, is_async_callable
from ._job_generator import BatchFinished, GenerateJobs, JobGenerator
from ._job_scheduler import JobAbandonedError, JobScheduler, JobSchedulerStatistics
from ._job_set import JobSet
from ._protocols import BatchHook, JobGraph, JobSchedulerListener, ReceivingGraph
from ._time import Duration, Milliseconds, Minutes, Seconds, Time
from ._timer import RecurringTimer
from ._virtual_clock import VirtualClock

__all__ = [
    "BatchFinished",
    "BatchHook",
    "Clock",
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
    "Milliseconds",
    "Minutes",
    "ReceivingGraph",
    "RecurringTimer",
    "Seconds",
    "StreamInputInfo",
    "StreamingError",
    "StreamingStateError",
    "SystemClock",
    "Time",
    "VirtualClock",
    "is_async_callable",
    "run_with_timeout",
]
