"""Commit markers of the exactly-once Kafka sink: which batches each writing task has committed (Flink's and Kafka
Streams' transactional sinks keep the same fact in the consumer group's offsets, which the test broker does not store).

A marker is a record keyed ``<sink id>/<task>`` in the marker topic (compacted in production), written in the same
Kafka transaction as the batch's records, so it is visible to ``read_committed`` readers exactly when they are.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from typing import Any, Mapping

import attrs

from scheduler import library_logger

from ._client import KafkaError, client_config, require_kafka

__all__ = ["DEFAULT_MARKER_TOPIC", "MarkerStore", "MarkerValue", "marker_key"]

DEFAULT_MARKER_TOPIC = "aiodstream-sink-commits"
# How many committed batch ids a marker remembers: batches of one task may commit out of order
# (spark.streaming.concurrentJobs > 1), so "the last one" alone cannot say whether an older one ran.
RECENT = 64
# Records asked of librdkafka per call when reading markers.
BATCH = 5_000
# How long one wait for the next marker record lasts before the position is looked at again.
POLL_S = 0.002


def marker_key(sink_id: str, task: int) -> str:
    """The marker record's key for task ``task`` of sink ``sink_id`` (also its transactional.id's stem)."""
    return f"{sink_id}/{task}"


@attrs.frozen
class MarkerValue:
    """What a marker says: the batch ids its task committed most recently (ascending, at most 64).

    ``full`` is whether older ids were dropped: then a batch older than all of them was
    committed long ago (the runtime never runs a batch 64 batches behind the last one).
    """

    batches: tuple[int, ...] = ()
    full: bool = False

    def committed(self, batch_id: int) -> bool:
        """Whether ``batch_id`` was committed by this task."""
        if batch_id in self.batches:
            return True
        return self.full and bool(self.batches) and batch_id < self.batches[0]

    def adding(self, batch_id: int) -> MarkerValue:
        """The marker after ``batch_id`` commits too."""
        batches = sorted({*self.batches, batch_id})
        full = self.full or len(batches) > RECENT
        return MarkerValue(tuple(batches[-RECENT:]), full)

    def encode(self) -> bytes:
        """The record's value: ``{"batch": last, "batches": [...], "full": bool}`` (JSON, UTF-8)."""
        last = self.batches[-1] if self.batches else None
        return json.dumps({"batch": last, "batches": list(self.batches), "full": self.full},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> MarkerValue:
        """Read a marker record's value (a tombstone, ``None``, is an empty marker)."""
        if raw is None:
            return cls()
        try:
            data = json.loads(raw)
            batches = tuple(sorted(int(b) for b in data["batches"]))
            return cls(batches, bool(data.get("full", False)))
        except (ValueError, KeyError, TypeError) as error:
            raise KafkaError(f"a commit marker is not one this sink wrote ({raw[:80]!r}): {error}; the marker topic "
                             "must hold only this sink's markers") from None


class _Partition:
    """What one process has read of one marker partition: how far, and each key's latest marker."""

    def __init__(self) -> None:
        self.position = 0
        self.markers: dict[str, MarkerValue] = {}


class MarkerStore:
    """Reads commit markers ``read_committed`` for one process, remembering what it read (blocking, thread-safe).

    A key's marker lives in partition ``crc32(key) % partitions`` of the marker topic. The first
    question about a partition reads it from its start (with compaction, about one record per
    task of every sink that shares the topic); later questions read only what was added since.
    A question reads up to the partition's high watermark as it was when asked, so every
    transaction that ended before it is seen (a ``read_committed`` reader passes a transaction
    only once it has ended; one left open makes the question wait, at most ``timeout_s``).

    Args:
        params: client settings (either spelling).
        topic: the marker topic.
        timeout_s: how long a question may wait for the partition's end.
    """

    def __init__(self, params: Mapping[str, Any], topic: str = DEFAULT_MARKER_TOPIC, *, timeout_s: float = 60.0) -> None:
        """Create the store's consumer (it connects on first use)."""
        self._kafka = require_kafka()
        config = client_config(params, drop=("group.id", "enable.auto.commit", "auto.offset.reset", "isolation.level",
                                             "transactional.id", "enable.idempotence", "acks"))
        config.update({"group.id": "aiodstream-sink-markers", "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                       "enable.partition.eof": False})
        # A question waits for the partition's end, not for new records: do not let fetches idle at the end.
        config.setdefault("fetch.wait.max.ms", 2)
        self._config = config
        self.topic = topic
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._consumer: Any = None
        self._partitions: dict[int, _Partition] = {}
        self._count: int | None = None
        self.records_read = 0
        self._log = library_logger("aiodstream.kafka", component="MarkerStore", topic=topic)

    def partition_count(self) -> int:
        """How many partitions the marker topic has (asked once per store).

        Raises:
            KafkaError: the topic does not exist.
        """
        if self._count is None:
            consumer = self._client()
            found = consumer.list_topics(self.topic, timeout=self._timeout_s).topics.get(self.topic)
            if found is None or found.error is not None or not found.partitions:
                detail = "" if found is None or found.error is None else f" ({found.error.str()})"
                raise KafkaError(
                    f"the commit-marker topic {self.topic!r} does not exist{detail}; the exactly-once Kafka sink needs "
                    f"it: create it compacted, e.g. kafka-topics.sh --create --topic {self.topic} --partitions 1 "
                    "--config cleanup.policy=compact")
            self._count = len(found.partitions)
        return self._count

    def partition_of(self, key: str) -> int:
        """The marker partition ``key`` is written to and read from (never add partitions to the marker topic)."""
        return zlib.crc32(key.encode()) % self.partition_count()

    def marker(self, key: str) -> MarkerValue:
        """``key``'s latest committed marker, read up to the partition's end as of now."""
        with self._lock:
            partition = self.partition_of(key)
            state = self._partitions.setdefault(partition, _Partition())
            self._catch_up(partition, state)
            return state.markers.get(key, MarkerValue())

    def remember(self, key: str, value: MarkerValue) -> None:
        """Note a marker this process has just committed (the next :meth:`marker` reads it back anyway)."""
        with self._lock:
            partition = self.partition_of(key)
            self._partitions.setdefault(partition, _Partition()).markers[key] = value

    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = self._kafka.Consumer(self._config)
        return self._consumer

    def _catch_up(self, partition: int, state: _Partition) -> None:
        kafka = self._kafka
        consumer = self._client()
        tp = kafka.TopicPartition(self.topic, partition)
        low, high = consumer.get_watermark_offsets(tp, timeout=self._timeout_s)
        start = max(state.position, int(low))
        if start >= high:
            state.position = max(state.position, int(high))
            return
        consumer.assign([kafka.TopicPartition(self.topic, partition, start)])
        deadline = time.monotonic() + self._timeout_s
        read = 0
        try:
            position = start
            while position < high:
                # What has arrived, without waiting; else wait for the next record, returning as soon as it
                # arrives (a count with a timeout would wait the whole timeout: transaction markers take offsets
                # that no record fills, so the count is never reached).
                messages = consumer.consume(BATCH, 0)
                if not messages:
                    message = consumer.poll(POLL_S)
                    messages = [] if message is None else [message]
                for message in messages:
                    if message.error() is not None:
                        raise KafkaError(f"reading commit markers of {self.topic}-{partition}: {message.error().str()}")
                    key = message.key()
                    if key is not None:
                        state.markers[key.decode()] = MarkerValue.decode(message.value())
                    read += 1
                # Aborted records and transaction markers take offsets but are never returned: the position says.
                position = consumer.position([tp])[0].offset
                if position < 0:
                    position = start
                if position < high and time.monotonic() > deadline:
                    raise KafkaError(
                        f"the commit markers in {self.topic}-{partition} could not be read to offset {high} within "
                        f"{self._timeout_s:g} s (stuck at {position}): a transaction there stays open (a writer that "
                        "died mid-transaction holds it until the broker's transaction.timeout.ms); retry the batch later")
        finally:
            consumer.unassign()
        state.position = int(high)
        self.records_read += read
        self._log.debug("markers read", partition=partition, start=start, end=int(high), records=read)

    def close(self) -> None:
        """Close the consumer."""
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def __repr__(self) -> str:
        return f"<MarkerStore {self.topic!r} [{len(self._partitions)} partitions read | {self.records_read} records]>"

