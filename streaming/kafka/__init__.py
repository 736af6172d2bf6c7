"""Kafka for all three engines: pyspark 2.4's direct stream for DStreams, and the shared client pieces.

Needs confluent-kafka (``pip install 'aiodstream[kafka]'``), imported when a Kafka stream,
source or sink is first built. :mod:`streaming.kafka.testing` has a cluster for tests.
``KafkaRDD`` is loaded on first use (it imports pyspark).
"""

from typing import Any

from ._client import KafkaClusterView, KafkaDataLossError, KafkaError, client_config, client_logger, offset_reset, require_kafka
from ._commits import CommitCallback, CommitQueue
from ._direct import FAIL_ON_DATA_LOSS, DirectKafkaInputDStream, fail_on_data_loss
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
from ._planning import BatchEnd, plan_batch_end
from ._rate import KafkaRateSettings, clamp_offsets, max_messages_per_partition
from ._reader import RangeReader, data_loss_message, executor_config
from ._tasks import ExecutorReading, message_converter
from ._utils import CREATE_STREAM_REFUSED, KafkaUtils

__all__ = [
    "BatchEnd",
    "Broker",
    "CREATE_STREAM_REFUSED",
    "CommitCallback",
    "CommitQueue",
    "DirectKafkaInputDStream",
    "ExecutorReading",
    "FAIL_ON_DATA_LOSS",
    "KafkaClusterView",
    "KafkaDataLossError",
    "KafkaError",
    "KafkaMessageAndMetadata",
    "KafkaRDD",
    "KafkaRateSettings",
    "KafkaUtils",
    "OffsetRange",
    "RangeReader",
    "TopicAndPartition",
    "clamp_offsets",
    "client_config",
    "client_logger",
    "data_loss_message",
    "executor_config",
    "fail_on_data_loss",
    "format_partition_offsets",
    "max_messages_per_partition",
    "message_converter",
    "offset_reset",
    "parse_partition_offsets",
    "partition_offsets",
    "plan_batch_end",
    "ranges_between",
    "require_kafka",
    "utf8_decoder",
]


def __getattr__(name: str) -> Any:
    """``KafkaRDD``, imported on first use: it subclasses pyspark's RDD, and the rest of the package needs no pyspark."""
    if name == "KafkaRDD":
        from ._rdd import KafkaRDD

        return KafkaRDD
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
