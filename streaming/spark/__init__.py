"""The Spark side of the streaming layer: session and settings, job threads and groups, the loop-thread bridge;
the same on a Spark Connect session (ConnectBinding: operation tags instead of job groups, no py4j).

The counterpart of what Spark Streaming's ``StreamingContext`` and ``JobScheduler`` reach through the
SparkContext. Importing this package does not import PySpark.
"""

from ._backend import SparkBackend, bind_spark, is_classic_session, is_connect_dataframe, is_connect_session, is_rdd
from ._binding import CANCEL_JOIN_S, SparkBinding
from ._bridge import BatchJob, current_batch_job, run_spark, wait_for_thread
from ._call_site import user_frame
from ._connect_binding import ConnectBinding, ConnectJobThreads, ConnectNotSupportedError
from ._durations import (
    LISTENER_EXIT_TIMEOUT_KEY,
    batch_datetime,
    job_description,
    listener_exit_timeout,
    seconds_to_duration,
    streaming_job_group,
    time_string_as,
    timeout_milliseconds,
)
from ._hadoop_files import CHECKPOINT_FILE_MANAGER_KEY, HadoopFileManager, resolve_checkpoint_path
from ._hadoop_fs import list_hadoop_files, save_text_files_once
from ._job_groups import JobGroupHook, cancel_job_group, job_group_hook, run_in_job_group
from ._job_threads import JobThreads, SparkJobThreads
from ._py4j import active_spark_context
from ._rdd_checkpoints import checkpoint_rdd, context_checkpoint_dir, let_go_of_checkpoint_dir, users_checkpoint_dir
from ._rdds import JvmRddPrebuild, build_jvm_rdd, has_jvm_rdd
from ._session import (
    EMBEDDED_SPARK_CONF,
    STREAMING_SETTINGS,
    SparkSettings,
    driver_bind_address,
    driver_host,
    embedded_spark_context,
    executor_of_task,
)

__all__ = [
    "active_spark_context",
    "build_jvm_rdd",
    "has_jvm_rdd",
    "JvmRddPrebuild",
    "list_hadoop_files",
    "save_text_files_once",
    "BatchJob",
    "ConnectBinding",
    "ConnectJobThreads",
    "ConnectNotSupportedError",
    "JobThreads",
    "SparkBackend",
    "bind_spark",
    "is_classic_session",
    "is_connect_dataframe",
    "is_connect_session",
    "is_rdd",
    "CANCEL_JOIN_S",
    "CHECKPOINT_FILE_MANAGER_KEY",
    "EMBEDDED_SPARK_CONF",
    "HadoopFileManager",
    "JobGroupHook",
    "LISTENER_EXIT_TIMEOUT_KEY",
    "STREAMING_SETTINGS",
    "SparkBinding",
    "SparkJobThreads",
    "SparkSettings",
    "batch_datetime",
    "cancel_job_group",
    "checkpoint_rdd",
    "context_checkpoint_dir",
    "current_batch_job",
    "driver_bind_address",
    "driver_host",
    "embedded_spark_context",
    "executor_of_task",
    "job_description",
    "streaming_job_group",
    "job_group_hook",
    "let_go_of_checkpoint_dir",
    "listener_exit_timeout",
    "resolve_checkpoint_path",
    "run_in_job_group",
    "run_spark",
    "seconds_to_duration",
    "timeout_milliseconds",
    "time_string_as",
    "user_frame",
    "users_checkpoint_dir",
    "wait_for_thread",
]
