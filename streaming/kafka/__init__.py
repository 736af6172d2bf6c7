"""Kafka for all three engines: pyspark 2.4's direct stream for DStreams, the Pipeline's KafkaSource, and the shared client pieces.

Needs confluent-kafka (``pip install 'aiodstream[kafka]'``), imported when a Kafka stream,
source or sink is first built. :mod:`streaming.kafka.testing` has a cluster for tests.
"""

from ._client import KafkaClusterView, KafkaDataLossError, KafkaError, client_config, client_logger, offset_reset, require_kafka
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
from ._source_plan import StartingOffsets, rate_limit
from ._writer import KafkaWriter, SinkSettings, WriteResult, close_writers, sink_settings, utf8_encoder, write_records

__all__ = [
    "Broker",
    "DEFAULT_MARKER_TOPIC",
    "KafkaClusterView",
    "KafkaDataLossError",
    "KafkaError",
    "KafkaMessageAndMetadata",
    "KafkaOutput",
    "KafkaRecord",
    "KafkaSink",
    "KafkaSource",
    "KafkaWriter",
    "MarkerStore",
    "MarkerValue",
    "OffsetRange",
    "SinkSettings",
    "StartingOffsets",
    "TopicAndPartition",
    "WriteResult",
    "batch_id_of",
    "client_config",
    "client_logger",
    "close_writers",
    "format_partition_offsets",
    "marker_key",
    "offset_reset",
    "parse_partition_offsets",
    "partition_offsets",
    "ranges_between",
    "rate_limit",
    "require_kafka",
    "sink_settings",
    "utf8_decoder",
    "utf8_encoder",
    "write_records",
    "write_to_kafka",
]
