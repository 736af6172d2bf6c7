"""DStreams on Spark Connect: ``FrameRDD`` (pyspark's RDD API over a Connect DataFrame of pickled values,
partitioned exactly as pyspark's) and ``FrameContext`` (what stands for the SparkContext)."""

from ._codec import FRAME_SCHEMA, VALUE_COLUMN
from ._environment import FrameEnvironment, Partitioner
from ._errors import ConnectUnsupportedError
from ._frame_context import FrameConf, FrameContext, is_connect_session
from ._frame_rdd import FrameRDD
from ._observed_rows import ObservedRows
from ._saved_partitions import PART_NAME, save_frame_partitions, saved_partitions_frame
from ._shared_values import FrameAccumulator, FrameBroadcast
from ._task_reports import CheckpointReports, ReportFolder, ReportPlaceMissingError, ReportStore, check_report_place, write_report

__all__ = [
    "FRAME_SCHEMA",
    "PART_NAME",
    "VALUE_COLUMN",
    "CheckpointReports",
    "ConnectUnsupportedError",
    "FrameAccumulator",
    "FrameBroadcast",
    "FrameConf",
    "FrameContext",
    "FrameEnvironment",
    "FrameRDD",
    "ObservedRows",
    "Partitioner",
    "ReportFolder",
    "ReportPlaceMissingError",
    "ReportStore",
    "check_report_place",
    "is_connect_session",
    "save_frame_partitions",
    "saved_partitions_frame",
    "write_report",
]
