"""Kafka in all three engines: pyspark 2.4's ``KafkaUtils`` for DStreams, ``KafkaSource`` for Pipelines, continuous mode, and sinks.

Needs confluent-kafka (``pip install 'aiodstream[kafka]'``), imported when a Kafka stream,
source or sink is first built. :mod:`streaming.kafka.testing` has a cluster for tests.
``KafkaRDD`` is loaded on first use (it imports pyspark).
"""

from typing import Any

from ._client import KafkaDataLossError, KafkaError, MetadataUnavailableError
from ._continuous_sink import KafkaContinuousSink
from ._continuous_source import KafkaContinuousSource
from ._direct import DirectKafkaInputDStream
from ._dstream_sink import write_to_kafka
from ._markers import DEFAULT_MARKER_TOPIC
from ._offsets import Broker, KafkaMessageAndMetadata, OffsetRange, TopicAndPartition, utf8_decoder
from ._pipeline_sink import KafkaSink
from ._pipeline_source import KafkaRecord, KafkaSource
from ._utils import KafkaUtils
from ._writer import WriteResult, close_writers, utf8_encoder

__all__ = [
    "Broker",
    "DEFAULT_MARKER_TOPIC",
    "DirectKafkaInputDStream",
    "KafkaContinuousSink",
    "KafkaContinuousSource",
    "KafkaDataLossError",
    "KafkaError",
    "KafkaMessageAndMetadata",
    "KafkaRDD",
    "KafkaRecord",
    "KafkaSink",
    "KafkaSource",
    "KafkaUtils",
    "MetadataUnavailableError",
    "OffsetRange",
    "TopicAndPartition",
    "WriteResult",
    "close_writers",
    "utf8_decoder",
    "utf8_encoder",
    "write_to_kafka",
]


def __getattr__(name: str) -> Any:
    """``KafkaRDD``, imported on first use: it subclasses pyspark's RDD, and the rest of the package needs no pyspark."""
    if name == "KafkaRDD":
        from ._rdd import KafkaRDD

        return KafkaRDD
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
