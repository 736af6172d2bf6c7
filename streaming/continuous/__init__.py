"""Continuous processing: long-running tasks, epochs cut by the driver, millisecond latency (Spark's ``ContinuousExecution``).

The driver side (``ContinuousExecution`` with its ``EpochCoordinator``) runs on the event loop;
the tasks (``run_task``) run on Spark's executors through ``SparkTaskLauncher``, or on threads
through ``ThreadTaskLauncher``. Sources and sinks here read and write continuously.
"""

from ._commits import IllegalStateError
from ._coordinator import (
    COMMIT_QUEUE_EXCEEDED,
    EPOCH_QUEUE_EXCEEDED,
    OFFSET_QUEUE_EXCEEDED,
    AddOffsets,
    BacklogExceeded,
    CommitEpoch,
    CoordinatorAction,
    EpochCoordinator,
    EpochCoordinatorStatistics,
)
from ._execution import ContinuousExecution, ContinuousExecutionStatistics
from ._launchers import SparkTaskLauncher, TaskLauncher, ThreadTaskLauncher
from ._options import ContinuousOptions
from ._plan import Branch, Continuous, ContinuousPlan, ContinuousStream, unsupported_operation
from ._protocol import (
    CommitPartitionEpoch,
    CoordinatorClient,
    CoordinatorMessage,
    CurrentEpoch,
    GetCurrentEpoch,
    IncrementAndGetEpoch,
    ReportPartitionOffset,
    SetReaderPartitions,
    SetWriterPartitions,
    StopContinuousExecutionWrites,
)
from ._sinks import ConsoleSink, ContinuousSink, FileSink, ForeachSink, MemorySink, PartitionWriter
from ._sources import ContinuousSource, FileSource, PartitionReader, RateSource, SocketSource
from ._task import TASK_RETRY_MESSAGE, ContinuousTaskRetryError, PartitionFunction, TaskSpec, compose, run_task

__all__ = [
    "AddOffsets",
    "BacklogExceeded",
    "Branch",
    "COMMIT_QUEUE_EXCEEDED",
    "CommitEpoch",
    "CommitPartitionEpoch",
    "ConsoleSink",
    "Continuous",
    "ContinuousExecution",
    "ContinuousExecutionStatistics",
    "ContinuousOptions",
    "ContinuousPlan",
    "ContinuousSink",
    "ContinuousSource",
    "ContinuousStream",
    "ContinuousTaskRetryError",
    "CoordinatorAction",
    "CoordinatorClient",
    "CoordinatorMessage",
    "CurrentEpoch",
    "EPOCH_QUEUE_EXCEEDED",
    "EpochCoordinator",
    "EpochCoordinatorStatistics",
    "FileSink",
    "FileSource",
    "ForeachSink",
    "GetCurrentEpoch",
    "IllegalStateError",
    "IncrementAndGetEpoch",
    "MemorySink",
    "OFFSET_QUEUE_EXCEEDED",
    "PartitionFunction",
    "PartitionReader",
    "PartitionWriter",
    "RateSource",
    "ReportPartitionOffset",
    "SetReaderPartitions",
    "SetWriterPartitions",
    "SocketSource",
    "SparkTaskLauncher",
    "StopContinuousExecutionWrites",
    "TASK_RETRY_MESSAGE",
    "TaskLauncher",
    "TaskSpec",
    "ThreadTaskLauncher",
    "compose",
    "run_task",
    "unsupported_operation",
]
