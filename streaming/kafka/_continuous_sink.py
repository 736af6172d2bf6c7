"""Kafka as a continuous sink: an idempotent producer per task, flushed at every epoch's end (Spark's ``KafkaStreamingWrite``).

Rows are sent as they come (no waiting for the epoch's end, so latency is the producer's);
a task's epoch commits only once the producer says every record of it is acknowledged. So
every committed epoch's records are in Kafka: at least once, as Spark's continuous Kafka sink.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

from scheduler import InvalidPipelineError

from ..continuous import ContinuousSink, PartitionWriter
from ._client import KafkaError, as_bytes, check_settings, client_config, require_kafka

__all__ = ["KafkaContinuousSink", "NO_TOPIC", "NULL_TOPIC", "NO_VALUE"]

NO_TOPIC = "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
NULL_TOPIC = "null topic present in the data. Use the topic option for setting a topic."
NO_VALUE = "Required attribute 'value' not found"
PRODUCER_DEFAULTS: Mapping[str, Any] = {
    "enable.idempotence": True,  # retries never duplicate or reorder a partition's records
    "linger.ms": 0,  # continuous mode is for latency: send at once, batch only what piles up meanwhile
    "delivery.report.only.error": True,  # no Python callback per record; flush() says when all are acknowledged
}


def _as_bytes(value: Any, name: str) -> bytes | None:
    try:
        return as_bytes(value)
    except TypeError:
        raise InvalidPipelineError(f"{name} attribute type must be a string or binary, got {type(value).__name__}") from None


class KafkaContinuousSink(ContinuousSink):
    """Writes a continuous query's rows to Kafka: at least once, each task's epoch acknowledged before it commits.

    A row is what Spark's Kafka sink takes: a pyspark ``Row`` or a dict with ``value`` (str or
    bytes, required) and optionally ``key``, ``topic``, ``partition`` and ``headers``; a pair
    ``(key, value)``; or a bare ``value`` (str or bytes). ``topic`` (the option) overrides a
    row's ``topic``, as in Spark. Rows of :class:`KafkaContinuousSource` pass through as they are.

    Each task has one idempotent producer (``enable.idempotence``), kept across its epochs. At
    the end of an epoch the task flushes it: the epoch's commit message leaves the task only
    once every record is acknowledged, and a record that failed fails the epoch (and the
    query). A restart replays from the last committed epoch, whose records are all in Kafka;
    records of later epochs may have been written before the crash and are written again:
    duplicates, never losses. See ``docs/continuous.md`` for why epochs cannot make it exactly once.

    Args:
        kafkaParams: the producer's settings (``bootstrap.servers`` or ``metadata.broker.list``;
            any librdkafka producer setting overrides the defaults: idempotence, ``linger.ms=0``).
        topic: the topic for every row (Spark's ``topic`` option); without it each row names its own.
    """

    exactly_once = False

    def __init__(self, kafkaParams: Mapping[str, Any], topic: str | None = None) -> None:  # noqa: N803 - Spark's names
        """Describe the sink; producers are made inside the tasks.

        Raises:
            InvalidPipelineError: no broker list, or a topic that is not a non-empty string.
        """
        if topic is not None and (not isinstance(topic, str) or not topic.strip()):
            raise InvalidPipelineError(f"the Kafka sink's topic must be a non-empty string or None, got {topic!r}")
        try:
            config = client_config(kafkaParams, drop=("group.id", "auto.offset.reset", "enable.auto.commit"))
            check_settings(config)
        except (ValueError, TypeError) as exc:
            raise InvalidPipelineError(str(exc)) from exc
        self.params = dict(kafkaParams)
        self.config = {**PRODUCER_DEFAULTS, **config}
        self.topic = topic
        self._lock = threading.Lock()
        self._producers: dict[int, _TaskProducer] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (KafkaContinuousSink, (self.params, self.topic))  # a task's copy makes its own producers

    def _producer(self, partition: int) -> _TaskProducer:
        with self._lock:
            producer = self._producers.get(partition)
            if producer is None:
                producer = self._producers[partition] = _TaskProducer(self.config)
            return producer

    def open_writer(self, partition: int, epoch: int) -> PartitionWriter:
        """The task's producer (made at its first epoch), for this epoch's rows."""
        producer = self._producer(partition)
        producer.failures.clear()  # an earlier epoch's failures failed that epoch
        return _KafkaEpochWriter(producer, self.topic)

    def close(self) -> None:
        """Flush and drop the producers this copy of the sink made (tasks on threads share the driver's copy)."""
        with self._lock:
            producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            producer.producer.flush()

    def description(self) -> str:
        """Spark's name for its Kafka sink."""
        return "KafkaTable"

    def __repr__(self) -> str:
        return f"KafkaContinuousSink[{self.topic or '<topic column>'}]"


class _TaskProducer:
    """A task's producer and the deliveries that failed since its epoch began.

    One delivery callback for the producer (a callback per record costs a Python object per
    record); with ``delivery.report.only.error`` it is called for failures only.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.failures: list[str] = []
        self.kafka = require_kafka()
        self.producer = self.kafka.Producer({**config, "on_delivery": self._delivered})

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failures.append(f"{message.topic()}-{message.partition()}: {error.str()}")


class _KafkaEpochWriter(PartitionWriter):
    """One epoch's rows through the task's producer; :meth:`commit` flushes and checks every delivery."""

    def __init__(self, producer: _TaskProducer, topic: str | None) -> None:
        self._task = producer
        self._producer = producer.producer
        self._topic = topic
        self._count = 0

    def write(self, row: Any) -> None:
        topic, key, value, partition, headers = self._fields(row)
        options: dict[str, Any] = {}
        if key is not None:
            options["key"] = key
        if partition is not None:
            options["partition"] = partition
        if headers:
            options["headers"] = headers
        producer = self._producer
        while True:
            try:
                producer.produce(topic, value, **options)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
            except self._task.kafka.KafkaException as exc:  # refused at once (an unknown partition, a record too large)
                where = topic if partition is None else f"{topic}-{partition}"
                raise KafkaError(f"the Kafka sink could not send a record to {where}: {exc.args[0].str()}") from exc
        self._count += 1

    def _fields(self, row: Any) -> tuple[str, bytes | None, bytes | None, int | None, Any]:
        fields = getattr(row, "__fields__", None) if isinstance(row, tuple) else None
        if fields is not None:
            data: Mapping[str, Any] = dict(zip(fields, row, strict=True))
        elif isinstance(row, Mapping):
            data = row
        elif row is None or isinstance(row, (str, bytes, bytearray, memoryview)):
            data = {"value": row}
        elif isinstance(row, tuple) and len(row) == 2:
            data = {"key": row[0], "value": row[1]}
        else:
            raise InvalidPipelineError(f"{NO_VALUE}: a Kafka sink's row is a Row or dict with 'value', a (key, value) pair, "
                                       f"or a str or bytes value, got {type(row).__name__}")
        if "value" not in data:
            raise InvalidPipelineError(NO_VALUE)
        topic = self._topic
        if topic is None:
            if "topic" not in data:
                raise InvalidPipelineError(NO_TOPIC)
            topic = data["topic"]
            if topic is None:
                raise InvalidPipelineError(NULL_TOPIC)
        partition = data.get("partition")
        return (topic, _as_bytes(data.get("key"), "key"), _as_bytes(data["value"], "value"),
                None if partition is None else int(partition), data.get("headers"))

    def commit(self) -> Any:
        remaining = self._producer.flush()  # until every record is acknowledged or failed
        failures = self._task.failures
        if failures or remaining:
            raise KafkaError(f"the Kafka sink could not write {len(failures) or remaining} of the epoch's {self._count} "
                             f"records: {failures[:3] or 'unacknowledged'}")
        return self._count
