"""KafkaUtils: pyspark 2.4's entry points to Kafka for DStreams (``pyspark.streaming.kafka.KafkaUtils``), on confluent-kafka.

``createDirectStream`` and ``createRDD`` keep pyspark 2.4's names, signatures, argument checks
and messages; ``createStream`` (the receiver reading through ZooKeeper) is refused with the way
out. Kafka parameters may use the 0.8 names (``metadata.broker.list``) or librdkafka's.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..dstream import DStream, StreamEnvironment
from ._client import KafkaClusterView, KafkaError, check_settings, client_config
from ._direct import FAIL_ON_DATA_LOSS, DirectKafkaInputDStream, fail_on_data_loss
from ._frame_batch import frame_kafka_rdd, is_frame_context
from ._offsets import Broker, KafkaMessageAndMetadata, OffsetRange, TopicAndPartition, utf8_decoder
from ._tasks import ExecutorReading, message_converter

__all__ = ["CREATE_STREAM_REFUSED", "KafkaUtils", "direct_kafka_stream"]

CREATE_STREAM_REFUSED = (
    "KafkaUtils.createStream (the receiver-based stream reading through ZooKeeper) is not supported: use "
    "KafkaUtils.createDirectStream(ssc, topics, kafkaParams), which reads each batch's offset ranges straight from the "
    "brokers, exactly once with a checkpoint (kafkaParams name the brokers: {'metadata.broker.list': 'host:9092'})"
)
"""The message ``createStream`` raises."""

Decoder = Callable[[bytes | None], Any]
Handler = Callable[[KafkaMessageAndMetadata], Any]


def _checked_offsets(from_offsets: object) -> dict[TopicAndPartition, int]:
    if not isinstance(from_offsets, dict):
        raise TypeError(f"fromOffsets should be dict of TopicAndPartition to offset, got {type(from_offsets).__name__}")
    out: dict[TopicAndPartition, int] = {}
    for tp, offset in from_offsets.items():
        if not isinstance(tp, TopicAndPartition):
            raise TypeError(f"fromOffsets keys should be TopicAndPartition, got {tp!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"fromOffsets' offset for {tp.topic}-{tp.partition} must be a non-negative int, got {offset!r}")
        out[tp] = offset
    return out


def _checked_decoders(key_decoder: object, value_decoder: object, message_handler: object) -> None:
    for name, value in (("keyDecoder", key_decoder), ("valueDecoder", value_decoder)):
        if not callable(value):
            raise TypeError(f"{name} should be a function of the raw bytes (or None), got {value!r:.80}")
    if message_handler is not None and not callable(message_handler):
        raise TypeError(f"messageHandler should be a function of KafkaMessageAndMetadata, got {message_handler!r:.80}")


def _split_params(kafka_params: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The client's parameters, and ``failOnDataLoss`` (taken out: it is the stream's, not librdkafka's)."""
    fail = fail_on_data_loss(kafka_params)
    params = {k: v for k, v in kafka_params.items() if k != FAIL_ON_DATA_LOSS}
    check_settings(client_config(params))  # names the brokers; a bad auto.offset.reset or setting is refused here
    return params, fail


def direct_kafka_stream(env: StreamEnvironment, topics: list[str], kafka_params: dict[str, Any],
                        from_offsets: dict[TopicAndPartition, int], key_decoder: Decoder, value_decoder: Decoder,
                        message_handler: Handler | None) -> DStream[Any]:
    """The direct stream of checked arguments, in ``env``'s context (what ``StreamingContext.inputStream`` calls)."""
    params, fail = _split_params(kafka_params)
    convert = message_converter(key_decoder, value_decoder, message_handler)
    return DirectKafkaInputDStream(env, topics, params, from_offsets, convert, fail_on_data_loss=fail)


class KafkaUtils:
    """pyspark 2.4's ``KafkaUtils``: Kafka DStreams and RDDs."""

    @staticmethod
    def createStream(ssc: Any, zkQuorum: str, groupId: str, topics: dict[str, int], kafkaParams: dict[str, Any] | None = None,  # noqa: N803
                     storageLevel: Any = None, keyDecoder: Decoder = utf8_decoder, valueDecoder: Decoder = utf8_decoder) -> DStream[Any]:  # noqa: N803
        """Refused: the receiver-based stream through ZooKeeper is not supported; use :meth:`createDirectStream`.

        Raises:
            NotImplementedError: always, naming ``createDirectStream``.
        """
        raise NotImplementedError(CREATE_STREAM_REFUSED)

    @staticmethod
    def createDirectStream(ssc: Any, topics: list[str], kafkaParams: dict[str, Any],  # noqa: N803
                           fromOffsets: dict[TopicAndPartition, int] | None = None,  # noqa: N803
                           keyDecoder: Decoder = utf8_decoder, valueDecoder: Decoder = utf8_decoder,  # noqa: N803
                           messageHandler: Handler | None = None) -> DStream[Any]:  # noqa: N803
        """A stream that reads each batch's new records of ``topics`` straight from the brokers.

        Each batch the driver plans one offset range per topic partition (at most
        ``spark.streaming.kafka.maxRatePerPartition`` records per second of batch, or what
        backpressure allows) and each task reads its partition's range: one RDD partition per
        Kafka partition. Elements are ``(keyDecoder(key), valueDecoder(value))``, or what
        ``messageHandler(KafkaMessageAndMetadata)`` returns. With a checkpoint, the ranges are
        logged before a batch runs, so a restart re-reads exactly the batches it re-runs.

        Args:
            ssc: the StreamingContext.
            topics: list of topic names to consume.
            kafkaParams: Kafka parameters: ``metadata.broker.list`` or ``bootstrap.servers``
                (required), ``auto.offset.reset`` (``largest``/``latest``, the default, or
                ``smallest``/``earliest``), ``group.id``, any librdkafka consumer setting, and
                ``failOnDataLoss`` (``"true"``, the default, or ``"false"``).
            fromOffsets: where to start in some partitions (``TopicAndPartition`` -> offset);
                every topic named must be in ``topics`` and every topic of ``topics`` named.
            keyDecoder: turns a key's bytes into the element's key (default UTF-8 text).
            valueDecoder: turns a value's bytes into the element's value (default UTF-8 text).
            messageHandler: turns each ``KafkaMessageAndMetadata`` into the element.

        Raises:
            TypeError: ``topics`` is not a list or ``kafkaParams`` not a dict (pyspark's messages).
            ValueError: no brokers named, or ``fromOffsets`` name other topics than ``topics``.
        """
        if fromOffsets is None:
            fromOffsets = dict()  # noqa: N806 - pyspark's name
        if not isinstance(topics, list):
            raise TypeError("topics should be list")
        if not isinstance(kafkaParams, dict):
            raise TypeError("kafkaParams should be dict")
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise ValueError(f"topics should list one or more topic names, got {topics!r}")
        offsets = _checked_offsets(fromOffsets)
        _checked_decoders(keyDecoder, valueDecoder, messageHandler)
        if offsets:
            named = {tp.topic for tp in offsets}
            if named != set(topics):  # Spark's KafkaUtilsPythonHelper check
                raise ValueError(f"The specified topics: {' '.join(sorted(set(topics)))} "
                                 f"do not equal to the topic from offsets: {' '.join(sorted(named))}")
        _split_params(kafkaParams)
        return ssc.inputStream(direct_kafka_stream, list(topics), dict(kafkaParams), offsets, keyDecoder, valueDecoder,  # type: ignore[no-any-return]
                               messageHandler)

    @staticmethod
    def createRDD(sc: Any, kafkaParams: dict[str, Any], offsetRanges: list[OffsetRange],  # noqa: N803
                  leaders: dict[TopicAndPartition, Broker] | None = None, keyDecoder: Decoder = utf8_decoder,  # noqa: N803
                  valueDecoder: Decoder = utf8_decoder, messageHandler: Handler | None = None) -> Any:  # noqa: N803
        """An RDD of the records of ``offsetRanges``, one partition per range, each read by its task (a ``KafkaRDD``; on a
        Connect context's FrameContext a FrameRDD with ``offsetRanges()``, read by the server's Python workers).

        The offsets are checked on the driver first (blocking): every range must lie within
        what its partition holds, as Spark's ``checkOffsets`` requires. ``leaders`` is accepted
        and not needed (the client finds each partition's leader).

        Raises:
            TypeError: ``kafkaParams`` is not a dict or ``offsetRanges`` not a list (pyspark's messages).
            KafkaError: ``Offsets not available on leader: ...`` (Spark's message), or the cluster could not be asked.
        """
        if leaders is None:
            leaders = dict()
        if not isinstance(kafkaParams, dict):
            raise TypeError("kafkaParams should be dict")
        if not isinstance(offsetRanges, list):
            raise TypeError("offsetRanges should be list")
        if not all(isinstance(r, OffsetRange) for r in offsetRanges):
            raise TypeError(f"offsetRanges should be a list of OffsetRange, got {offsetRanges!r:.80}")
        _checked_decoders(keyDecoder, valueDecoder, messageHandler)
        params, fail = _split_params(kafkaParams)
        _check_offsets(params, offsetRanges)
        reading = ExecutorReading.from_params(params, sc.getConf().get, fail_on_data_loss=fail)
        read = reading.task(message_converter(keyDecoder, valueDecoder, messageHandler))
        if is_frame_context(sc):  # a Connect context's FrameContext: the server's workers read the ranges
            return frame_kafka_rdd(sc, offsetRanges, read)
        from ._rdd import KafkaRDD

        return KafkaRDD(sc, offsetRanges, read)


def _check_offsets(params: Mapping[str, Any], ranges: list[OffsetRange]) -> None:
    """Spark's ``checkOffsets``: each range within its partition's first and next offset, or ``Offsets not available on leader``."""
    tps = sorted({r.topicAndPartition() for r in ranges})
    if not tps:
        return
    with KafkaClusterView(params) as view:
        low, high = view.earliest_offsets(tps), view.latest_offsets(tps)
    bad = [r for r in ranges if not (low[r.topicAndPartition()] <= r.fromOffset and r.untilOffset <= high[r.topicAndPartition()])]
    if bad:
        raise KafkaError("Offsets not available on leader: " + ",".join(str(r) for r in bad))
