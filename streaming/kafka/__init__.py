"""Kafka for all three engines: pyspark 2.4's direct stream for DStreams, the Pipeline's KafkaSource, and the shared client pieces.

Needs confluent-kafka (``pip install 'aiodstream[kafka]'``), imported when a Kafka stream,
source or sink is first built. :mod:`streaming.kafka.testing` has a cluster for tests.
"""

from ._client import KafkaClusterView, KafkaDataLossError, KafkaError, client_config, client_logger, offset_reset, require_kafka
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
from ._pipeline_source import KafkaRecord, KafkaSource
from ._source_plan import StartingOffsets, rate_limit

__all__ = [
    "Broker",
    "KafkaClusterView",
    "KafkaDataLossError",
    "KafkaError",
    "KafkaMessageAndMetadata",
    "KafkaRecord",
    "KafkaSource",
    "OffsetRange",
    "StartingOffsets",
    "TopicAndPartition",
    "client_config",
    "client_logger",
    "format_partition_offsets",
    "offset_reset",
    "parse_partition_offsets",
    "partition_offsets",
    "ranges_between",
    "rate_limit",
    "require_kafka",
    "utf8_decoder",
]
