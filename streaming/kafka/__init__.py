"""Kafka for all three engines: pyspark 2.4's direct stream for DStreams, the Pipeline's KafkaSource, and the shared client pieces.

Needs confluent-kafka (``pip install 'aiodstream[kafka]'``), imported when a Kafka stream,
source or sink is first built. :mod:`streaming.kafka.testing` has a cluster for tests.
``KafkaRDD`` is loaded on first use (it imports pyspark).
"""

from typing import Any

from ._client import KafkaClusterView, KafkaDataLossError, KafkaError, client_config, client_logger, offset_reset, require_kafka
from ._commits import CommitCallback, CommitQueue
from ._direct import FAIL_ON_DATA_LOSS, DirectKafkaInputDStream, fail_on_data_loss
from ._dstream_sink import KafkaOutput, batch_id_of, write_to_kafka
from ._markers import DEFAULT_MARKER_TOPIC, MarkerStore, MarkerValue, marker_key
from ._offsets import (
    Broker,
    KafkaMessageAndMetadata,
    OffsetRange,
    TopicAndPartition,
    format_partition_offsets,
    parse_partition_offsets,
    partition_offsets,
    ranges_between,
    utf8_decoder,
)
from ._pipeline_sink import KafkaSink
from ._pipeline_source import KafkaRecord, KafkaSource
from ._planning import BatchEnd, plan_batch_end
from ._rate import KafkaRateSettings, clamp_offsets, max_messages_per_partition
from ._reader import RangeReader, data_loss_message, executor_config
from ._source_plan import StartingOffsets, rate_limit
from ._tasks import ExecutorReading, message_converter
from ._utils import CREATE_STREAM_REFUSED, KafkaUtils
from ._writer import KafkaWriter, SinkSettings, WriteResult, close_writers, sink_settings, utf8_encoder, write_records

__all__ = [
    "BatchEnd",
    "Broker",
    "CREATE_STREAM_REFUSED",
    "CommitCallback",
    "CommitQueue",
    "DEFAULT_MARKER_TOPIC",
    "DirectKafkaInputDStream",
    "ExecutorReading",
    "FAIL_ON_DATA_LOSS",
    "KafkaClusterView",
    "KafkaDataLossError",
    "KafkaError",
    "KafkaMessageAndMetadata",
    "KafkaOutput",
    "KafkaRDD",
    "KafkaRateSettings",
    "KafkaRecord",
    "KafkaSink",
    "KafkaSource",
    "KafkaUtils",
    "KafkaWriter",
    "MarkerStore",
    "MarkerValue",
    "OffsetRange",
    "RangeReader",
    "SinkSettings",
    "StartingOffsets",
    "TopicAndPartition",
    "WriteResult",
    "batch_id_of",
    "clamp_offsets",
    "client_config",
    "client_logger",
    "close_writers",
    "data_loss_message",
    "executor_config",
    "fail_on_data_loss",
    "format_partition_offsets",
    "marker_key",
    "max_messages_per_partition",
    "message_converter",
    "offset_reset",
    "parse_partition_offsets",
    "partition_offsets",
    "plan_batch_end",
    "ranges_between",
    "rate_limit",
    "require_kafka",
    "sink_settings",
    "utf8_decoder",
    "utf8_encoder",
    "write_records",
    "write_to_kafka",
]


def __getattr__(name: str) -> Any:
    """``KafkaRDD``, imported on first use: it subclasses pyspark's RDD, and the rest of the package needs no pyspark."""
    if name == "KafkaRDD":
        from ._rdd import KafkaRDD

        return KafkaRDD
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
