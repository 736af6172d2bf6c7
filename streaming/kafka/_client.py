"""The Kafka client under every Kafka input and sink: confluent-kafka (librdkafka), its settings, and the driver's view of a cluster.

pyspark 2.4's Kafka parameters were the 0.8 Scala client's (``metadata.broker.list``,
``auto.offset.reset=smallest``); librdkafka takes the modern names. :func:`client_config`
accepts both and says which it could not use. Everything here blocks: callers on an event loop
run it in a worker thread.
"""

from __future__ import annotations

import importlib
import logging
import time
from types import ModuleType
from typing import Any, Iterable, Mapping

from scheduler import StreamingError

from ._offsets import TopicAndPartition

__all__ = [
    "as_bytes",
    "check_settings",
    "KafkaClusterView",
    "KafkaDataLossError",
    "KafkaError",
    "GONE_TOPIC_ERRORS",
    "MetadataUnavailableError",
    "client_config",
    "client_logger",
    "offset_reset",
    "partitions_now",
    "reads_committed",
    "require_kafka",
    "topic_partitions",
]

INSTALL_HINT = "install the Kafka client: pip install 'aiodstream[kafka]' (confluent-kafka)"

# The 0.8 Scala client's names that librdkafka spells differently.
RENAMED = {"metadata.broker.list": "bootstrap.servers"}
# Settings of the JVM clients (0.8 consumer, ZooKeeper, serializers) that mean nothing to librdkafka.
JVM_ONLY = frozenset({
    "zookeeper.connect", "zookeeper.connection.timeout.ms", "zookeeper.session.timeout.ms", "zookeeper.sync.time.ms",
    "serializer.class", "key.serializer.class", "key.deserializer", "value.deserializer", "key.serializer",
    "value.serializer", "consumer.timeout.ms", "rebalance.backoff.ms", "rebalance.max.retries",
    "refresh.leader.backoff.ms", "offsets.storage", "dual.commit.enabled", "partition.assignment.strategy",
    "spark.kafka.poll.time",
})
# librdkafka's own log lines go to the standard logging tree under this name: silent unless the host configures logging.
CLIENT_LOGGER = "aiodstream.kafka.client"
RESETS = {"smallest": "earliest", "largest": "latest", "earliest": "earliest", "latest": "latest"}


class KafkaError(StreamingError, RuntimeError):
    """A Kafka operation failed (the broker's or the client's error, as it gave it)."""


class KafkaDataLossError(KafkaError):
    """Records a batch needs are gone (offsets out of range, a deleted topic): Spark's ``failOnDataLoss`` error."""


def require_kafka() -> ModuleType:
    """The ``confluent_kafka`` module, or an ``ImportError`` that says how to install it."""
    try:
        return importlib.import_module("confluent_kafka")
    except ImportError as error:
        raise ImportError(f"Kafka support needs confluent-kafka, which is not installed: {INSTALL_HINT}") from error


def offset_reset(params: Mapping[str, Any], *, default: str = "latest") -> str:
    """``auto.offset.reset`` as ``"earliest"`` or ``"latest"``, from either spelling (``smallest``/``largest`` too)."""
    raw = params.get("auto.offset.reset", default)
    value = RESETS.get(str(raw).lower())
    if value is None:
        raise ValueError(f"auto.offset.reset must be one of smallest, largest, earliest or latest, got {raw!r}")
    return value


def client_config(params: Mapping[str, Any], *, drop: Iterable[str] = ()) -> dict[str, Any]:
    """librdkafka settings for Kafka parameters in either the 0.8 or the modern spelling.

    ``metadata.broker.list`` becomes ``bootstrap.servers`` (giving both with different values
    is an error); ``auto.offset.reset`` is normalised (:func:`offset_reset`); settings of the
    JVM clients that librdkafka has no use for (ZooKeeper, serializer classes) are left out, as
    are the names in ``drop``. Numbers and booleans are passed as given, anything else as text.
    """
    if not isinstance(params, Mapping):
        raise TypeError(f"kafkaParams must be a dict of str to str, got {type(params).__name__}")
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    dropped = set(drop)
    for key, value in params.items():
        if not isinstance(key, str):
            raise TypeError(f"kafkaParams keys must be str, got {key!r}")
        if key in JVM_ONLY or key in dropped:
            continue
        name = RENAMED.get(key, key)
        if name == "auto.offset.reset":
            value = offset_reset(params)
        if name in out and str(out[name]) != str(value):
            raise ValueError(f"kafkaParams give {name} twice: {given_as[name]}={out[name]!r} and {key}={value!r}; give one")
        if value is None or isinstance(value, (list, tuple, set, frozenset, dict, bytes, bytearray)):
            raise TypeError(f"kafkaParams values must be str, int, float or bool: {key} is {type(value).__name__} "
                            f"{value!r}" + (" (several brokers go in one comma-separated str)" if name == "bootstrap.servers"
                                            else ""))
        out[name] = value if isinstance(value, (bool, int, float)) else str(value)
        given_as[name] = key
    if not out.get("bootstrap.servers"):
        raise ValueError("Must specify metadata.broker.list or bootstrap.servers")
    out.setdefault("logger", client_logger())
    return out


def check_settings(config: Mapping[str, Any]) -> None:
    """Refuse, now, librdkafka settings of :func:`client_config` that a client would refuse at the first batch: a name
    it does not know (a typo) or a value it cannot take. A throwaway client is made and closed (no record is read).

    Raises:
        ValueError: librdkafka's own words for the setting.
    """
    kafka = require_kafka()
    probe = {**config, "group.id": "aiodstream-settings-check"}  # a consumer takes either client's settings (warns only)
    try:
        client = kafka.Consumer(probe)
    except kafka.KafkaException as exc:
        raise ValueError(f"kafkaParams: {exc.args[0].str()}") from exc
    client.close()


def as_bytes(value: Any) -> bytes | None:
    """A record's key or value as the client sends it: bytes and ``None`` as they are, str as UTF-8, other buffers copied.

    Raises:
        TypeError: anything else (each sink words the error for its own callers).
    """
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"expected bytes, str or None, got {type(value).__name__}")


def reads_committed(params: Mapping[str, Any]) -> bool:
    """Whether ``params`` read with ``isolation.level=read_committed``: then a partition ends at its last stable offset."""
    return str(params.get("isolation.level", "")).lower() == "read_committed"


def client_logger() -> logging.Logger:
    """The logger every client made here hands librdkafka's log lines to (quiet unless the host configures logging)."""
    return logging.getLogger(CLIENT_LOGGER)


GONE_TOPIC_ERRORS = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION"})
"""Error names (``KafkaError.name()``) of a topic's metadata saying the cluster does not have it."""

PERMANENT_METADATA_ERRORS = frozenset({"TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "TOPIC_EXCEPTION",
                                       "INVALID_TOPIC_EXCEPTION", "UNSUPPORTED_VERSION"})
"""Error names of a topic's metadata that asking again does not mend: raised at once."""

METADATA_RETRY_S = (0.05, 1.0)
"""A topic's metadata that fails for a while (no leader yet, a broker moving): retried after the first, doubling up to
the second, until the view's timeout."""


class MetadataUnavailableError(KafkaError):
    """A topic's metadata failed for another reason than the topic being absent (no leader yet, authorization, ...)."""

    def __init__(self, topic: str, error: Any) -> None:
        """``error``: librdkafka's error of ``topic``'s metadata."""
        super().__init__(f"the metadata of topic {topic!r} failed: {error.str()}")
        self.topic = topic
        # librdkafka marks few metadata errors retriable (not "leader not available"): all are, but those no retry mends.
        self.retriable = bool(error.retriable()) or error.name() not in PERMANENT_METADATA_ERRORS


def topic_partitions(topic: str, found: Any) -> list[int] | None:
    """``topic``'s partition numbers (sorted) from its metadata ``found``, or ``None`` when the cluster does not have it.

    A topic whose metadata failed for any other reason is not taken for gone: a leader election or a
    broker restart would otherwise make its partitions look deleted, and then new, and re-read.

    Raises:
        MetadataUnavailableError: the metadata failed otherwise (``retriable`` says whether asking again may help).
    """
    if found is None:
        return None
    error = found.error
    if error is not None:
        if error.name() in GONE_TOPIC_ERRORS:
            return None
        raise MetadataUnavailableError(topic, error)
    return sorted(found.partitions) or None


METADATA_REQUEST_TIMEOUT_S = 30.0
"""How long :func:`partitions_now` waits for an answer."""


def partitions_now(client: Any, topic: str) -> list[int] | None:
    """``topic``'s partition numbers as ``client``'s metadata request says now, or ``None`` when the cluster does not
    have it (see :func:`topic_partitions`).

    Raises:
        MetadataUnavailableError: no answer: the topic's metadata failed otherwise, or the request itself did (the
            brokers unreachable, a timeout: ``retriable``).
    """
    try:
        found = client.list_topics(topic, timeout=METADATA_REQUEST_TIMEOUT_S).topics.get(topic)
    except require_kafka().KafkaException as exc:
        raise MetadataUnavailableError(topic, exc.args[0]) from exc
    return topic_partitions(topic, found)


class KafkaClusterView:
    """The driver's questions to a cluster: a topic's partitions and each partition's first and next offset.

    Blocking; one client per view, closed by :meth:`close`. Offsets are asked for all
    partitions at once (one ListOffsets round per broker), not one partition at a time.
    """

    _sleep = staticmethod(time.sleep)  # between metadata retries (tests replace it)

    def __init__(self, params: Mapping[str, Any], *, timeout_s: float = 30.0) -> None:
        """Connect with ``params`` (either spelling, :func:`client_config`)."""
        kafka = require_kafka()
        admin_module = importlib.import_module("confluent_kafka.admin")
        config = client_config(params, drop=("auto.offset.reset", "group.id", "enable.auto.commit"))
        self._timeout_s = timeout_s
        self._kafka = kafka
        self._admin_module = admin_module
        self._admin = admin_module.AdminClient(config)

    def partitions(self, topics: Iterable[str]) -> dict[str, list[int] | None]:
        """Each topic's partition numbers (sorted), or ``None`` for a topic the cluster does not have.

        A topic whose metadata fails with a retriable error (no leader yet) is asked again until
        the view's timeout, as Spark's consumer waits for metadata.

        Raises:
            MetadataUnavailableError: a topic's metadata kept failing, or failed for good (authorization).
        """
        topics = list(topics)
        deadline = time.monotonic() + self._timeout_s
        pause = METADATA_RETRY_S[0]
        while True:
            metadata = self._admin.list_topics(timeout=max(0.1, deadline - time.monotonic()))
            try:
                return {topic: topic_partitions(topic, metadata.topics.get(topic)) for topic in topics}
            except MetadataUnavailableError as unavailable:
                if not unavailable.retriable or time.monotonic() + pause > deadline:
                    raise
            self._sleep(pause)
            pause = min(pause * 2, METADATA_RETRY_S[1])

    def _list_offsets(self, tps: Iterable[TopicAndPartition], spec: Any, isolation: Any) -> dict[TopicAndPartition, int]:
        kafka = self._kafka
        wanted = {kafka.TopicPartition(tp.topic, tp.partition): spec for tp in tps}
        if not wanted:
            return {}
        futures = self._admin.list_offsets(wanted, isolation_level=isolation, request_timeout=self._timeout_s)
        out: dict[TopicAndPartition, int] = {}
        for tp, future in futures.items():
            try:
                result = future.result(timeout=self._timeout_s)
            except kafka.KafkaException as error:
                raise KafkaError(f"listing offsets of {tp.topic}-{tp.partition} failed: {error.args[0]}") from None
            out[TopicAndPartition(tp.topic, tp.partition)] = result.offset
        return out

    def latest_offsets(self, tps: Iterable[TopicAndPartition], *, committed_only: bool = False) -> dict[TopicAndPartition, int]:
        """Each partition's next offset (its high watermark; with ``committed_only``, the last stable offset)."""
        m = self._admin_module
        isolation = self._kafka.IsolationLevel.READ_COMMITTED if committed_only else self._kafka.IsolationLevel.READ_UNCOMMITTED
        return self._list_offsets(tps, m.OffsetSpec.latest(), isolation)

    def earliest_offsets(self, tps: Iterable[TopicAndPartition]) -> dict[TopicAndPartition, int]:
        """Each partition's first offset still held (its log start)."""
        return self._list_offsets(tps, self._admin_module.OffsetSpec.earliest(), self._kafka.IsolationLevel.READ_UNCOMMITTED)

    def close(self) -> None:
        """Release the client (the admin client has no close; dropping it ends its threads)."""
        self._admin = None

    def __enter__(self) -> KafkaClusterView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
