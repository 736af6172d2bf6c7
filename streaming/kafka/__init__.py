"""Kafka for all three engines: pyspark 2.4's direct stream for DStreams, and the shared client pieces.

Needs confluent-kafka (``pip install 'aiodstream[kafka]'``), imported when a Kafka stream,
source or sink is first built. :mod:`streaming.kafka.testing` has a cluster for tests.
"""

from ._client import KafkaClusterView, KafkaDataLossError, KafkaError, client_config, client_logger, offset_reset, require_kafka
from ._continuous_sink import NO_TOPIC, NO_VALUE, NULL_TOPIC, KafkaContinuousSink
from ._continuous_source import KAFKA_FIELDS, PARTITIONS_CHANGED, KafkaContinuousSource
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

__all__ = [
    "Broker",
    "KAFKA_FIELDS",
    "KafkaClusterView",
    "KafkaContinuousSink",
    "KafkaContinuousSource",
    "KafkaDataLossError",
    "KafkaError",
    "KafkaMessageAndMetadata",
    "NO_TOPIC",
    "NO_VALUE",
    "NULL_TOPIC",
    "OffsetRange",
    "PARTITIONS_CHANGED",
    "TopicAndPartition",
    "client_config",
    "client_logger",
    "format_partition_offsets",
    "offset_reset",
    "parse_partition_offsets",
    "partition_offsets",
    "ranges_between",
    "require_kafka",
    "utf8_decoder",
]
