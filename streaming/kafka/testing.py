"""A Kafka cluster for tests and demos: librdkafka's mock cluster, reachable over TCP like a broker.

librdkafka (inside confluent-kafka) ships a Kafka-protocol broker written for its own tests:
produce, fetch, exact high watermarks, ListOffsets, consumer groups and committed offsets,
idempotent and transactional producers, all in memory. :class:`MockKafkaCluster` starts one in
this process; any client, in any process, connects to :attr:`~MockKafkaCluster.bootstrap_servers`.

What it does not do over the protocol, and how this class covers it:

- CreateTopics, DeleteTopics and DeleteRecords requests are refused; :meth:`create_topic`,
  :meth:`delete_topic` and :meth:`delete_records` call the mock's own control functions instead.
- CreatePartitions does not exist at all; :meth:`add_partitions` rebuilds the topic with more
  partitions, re-producing every record at its old offset (refused for a topic whose offsets
  have gaps, as transactions leave). Call it between batches: while it runs the topic is gone.
- Transactions commit and abort, but reads are not isolated: a ``read_committed`` consumer also
  gets the records of open transactions and of aborted ones (whatever reached the broker before
  the abort), and the last stable offset is the high watermark. Tests of transactional output
  can show that a committed batch is not written twice, not that a dead transaction is hidden.
- A metadata request naming a missing topic creates it (4 partitions), as ``auto.create.topics``
  does on a default broker, unless the client turns ``allow.auto.create.topics`` off;
  :meth:`partition_count` lists all topics instead. This class's own producer never creates one:
  :meth:`produce` to a topic :meth:`create_topic` did not make is refused.
- A partition's oldest records are dropped once it holds several megabytes, as size-based
  retention would (after 100,000 records of 50 bytes its log start was 10,000): benchmarks
  should read what they produce promptly, or produce less per partition.
- Nothing is persisted: the cluster ends with the process that holds it.

``python -m streaming.kafka.testing`` runs one until interrupted and prints its address.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import os
import threading
import time
from typing import Any, Iterable, Sequence

from ._client import KafkaError, client_logger, require_kafka

__all__ = ["MockKafkaCluster"]

Record = tuple[int, "bytes | None", "bytes | None", int]  # offset, key, value, timestamp (ms)


def _librdkafka() -> ctypes.CDLL:
    kafka = require_kafka()
    base = os.path.dirname(os.path.dirname(os.path.abspath(str(kafka.__file__))))
    candidates = sorted(glob.glob(os.path.join(base, "confluent_kafka.libs", "librdkafka*.so*")))
    if not candidates:  # a build against a system librdkafka
        candidates = ["librdkafka.so.1"]
    lib = ctypes.CDLL(candidates[0])
    c_void_p, c_char_p, c_int = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    lib.rd_kafka_conf_new.restype = c_void_p
    lib.rd_kafka_conf_set.argtypes = [c_void_p, c_char_p, c_char_p, c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = c_void_p
    lib.rd_kafka_new.argtypes = [c_int, c_void_p, c_char_p, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [c_void_p]
    lib.rd_kafka_mock_cluster_new.restype = c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [c_void_p, c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [c_void_p]
    lib.rd_kafka_mock_topic_create.argtypes = [c_void_p, c_char_p, c_int, c_int]
    lib.rd_kafka_mock_topic_delete.argtypes = [c_void_p, c_char_p]
    lib.rd_kafka_mock_partition_delete_records.argtypes = [c_void_p, c_char_p, ctypes.c_int32, ctypes.c_int64]
    lib.rd_kafka_mock_topic_set_error.argtypes = [c_void_p, c_char_p, c_int]
    lib.rd_kafka_mock_broker_set_down.argtypes = [c_void_p, ctypes.c_int32]
    lib.rd_kafka_mock_broker_set_up.argtypes = [c_void_p, ctypes.c_int32]
    lib.rd_kafka_err2str.restype = c_char_p
    lib.rd_kafka_err2str.argtypes = [c_int]
    return lib


class MockKafkaCluster:
    """librdkafka's mock Kafka cluster, held by this process until :meth:`close` (or the ``with`` block ends).

    Args:
        brokers: how many brokers the cluster has (partitions' leaders are spread over them).
    """

    def __init__(self, brokers: int = 1) -> None:
        """Start the cluster; it listens on 127.0.0.1 at once."""
        if type(brokers) is not int or brokers < 1:
            raise ValueError(f"brokers must be a positive int, got {brokers!r}")
        self._lib = _librdkafka()
        self._lock = threading.Lock()
        err = ctypes.create_string_buffer(512)
        conf = self._lib.rd_kafka_conf_new()
        # The handle only hosts the mock; keep its log quiet.
        self._lib.rd_kafka_conf_set(conf, b"log_level", b"0", err, len(err))
        self._rk = self._lib.rd_kafka_new(0, conf, err, len(err))
        if not self._rk:
            raise KafkaError(f"could not create the mock cluster's handle: {err.value.decode()}")
        self._mc = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            self._lib.rd_kafka_destroy(self._rk)
            raise KafkaError("librdkafka could not start a mock cluster")
        self.bootstrap_servers: str = self._lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()
        self._producer: Any = None
        self._producer_topics: set[str] = set()  # topics the shared producer has seen exist

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise KafkaError(f"{what}: {self._lib.rd_kafka_err2str(code).decode()}")

    def _require_open(self) -> None:
        if self._mc is None:
            raise KafkaError("the mock cluster is closed")

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions (an error if it exists)."""
        if type(partitions) is not int or partitions < 1:
            raise ValueError(f"partitions must be a positive int, got {partitions!r}")
        with self._lock:
            self._require_open()
            self._check(self._lib.rd_kafka_mock_topic_create(self._mc, topic.encode(), partitions, 1), f"creating topic {topic!r}")
        # Ask for the new topic's metadata now: a producer meeting an unknown topic on its first
        # record waits about 0.5 s for its periodic refresh instead.
        self._refresh_producer_metadata(topic, partitions)

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` and its records.

        The shared producer is closed first: a client that knows the topic asks for it again by
        name, and the mock would create it anew with 4 partitions.
        """
        with self._lock:
            self._require_open()
            self._close_producer()
            self._check(self._lib.rd_kafka_mock_topic_delete(self._mc, topic.encode()), f"deleting topic {topic!r}")

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Drop the records before offset ``before`` of one partition (what retention does): its log start moves there."""
        with self._lock:
            self._require_open()
            code = self._lib.rd_kafka_mock_partition_delete_records(self._mc, topic.encode(), partition, before)
            self._check(code, f"deleting records of {topic}-{partition} before {before}")

    def set_topic_error(self, topic: str, code: int) -> None:
        """Make ``topic``'s metadata answer with Kafka error ``code`` (e.g. 5, LEADER_NOT_AVAILABLE) until set back to 0."""
        with self._lock:
            self._require_open()
            self._lib.rd_kafka_mock_topic_set_error(self._mc, topic.encode(), code)

    def set_broker_up(self, broker: int, up: bool) -> None:
        """Take broker ``broker`` (numbered from 1) down, its connections closed and new ones refused, or bring it back."""
        with self._lock:
            self._require_open()
            set_state = self._lib.rd_kafka_mock_broker_set_up if up else self._lib.rd_kafka_mock_broker_set_down
            self._check(set_state(self._mc, broker), f"taking broker {broker} {'up' if up else 'down'}")

    def config(self, **extra: Any) -> dict[str, Any]:
        """Client settings that reach this cluster (``bootstrap.servers``), with ``extra`` (dots spelt as underscores) added."""
        out: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        out.update({key.replace("_", "."): value for key, value in extra.items()})
        return out

    def produce(self, topic: str, values: Iterable[bytes | str | None], *, partition: int | None = None,
                keys: Iterable[bytes | str | None] | None = None, timestamps_ms: Iterable[int] | None = None) -> None:
        """Write ``values`` to ``topic`` (to ``partition``, or spread by key / round robin), and wait until all are acknowledged."""
        producer = self._shared_producer()
        self._require_topic(producer, topic)
        errors: list[str] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                errors.append(str(error))

        key_list: Sequence[Any] | None = list(keys) if keys is not None else None
        ts_list: Sequence[int] | None = list(timestamps_ms) if timestamps_ms is not None else None
        for i, value in enumerate(values):
            options: dict[str, Any] = {"on_delivery": delivered}
            if partition is not None:
                options["partition"] = partition
            if key_list is not None:
                options["key"] = key_list[i]
            if ts_list is not None:
                options["timestamp"] = ts_list[i]
            refreshed = False
            while True:
                try:
                    producer.produce(topic, value, **options)
                    break
                except BufferError:
                    producer.poll(0.05)
                except require_kafka().KafkaException as error:
                    # A partition add_partitions made is unknown to the producer's cached metadata: ask again, once.
                    if refreshed or error.args[0].name() != "_UNKNOWN_PARTITION":
                        raise
                    producer.list_topics(topic, timeout=30)
                    refreshed = True
            producer.poll(0)
        remaining = producer.flush(60)
        if remaining or errors:
            raise KafkaError(f"producing to {topic!r} failed: {errors[:3] or f'{remaining} records unacknowledged'}")

    def _close_producer(self, flush_s: float = 30) -> None:
        """Flush (at most ``flush_s``) and drop the shared producer (the caller holds the lock)."""
        if self._producer is not None:
            self._producer.flush(flush_s)
            self._producer = None

    def _shared_producer(self) -> Any:
        with self._lock:
            self._require_open()
            if self._producer is None:
                self._producer_topics = set()
                # Never asks the mock to create a topic: a metadata request it sent for a topic just before
                # delete_topic could reach the mock after the delete and bring the topic back (4 partitions).
                self._producer = require_kafka().Producer({
                    "bootstrap.servers": self.bootstrap_servers, "enable.idempotence": True, "linger.ms": 2,
                    "allow.auto.create.topics": False, "logger": client_logger()})
            return self._producer

    def records(self, topic: str, partition: int, start: int = 0, end: int | None = None) -> list[Record]:
        """The records ``[start, end)`` of one partition as ``(offset, key, value, timestamp_ms)`` (``end``: its high watermark)."""
        kafka = require_kafka()
        consumer = kafka.Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "aiodstream-mock-reader",
                                   "enable.auto.commit": False, "logger": client_logger()})
        try:
            tp = kafka.TopicPartition(topic, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=30)
            stop = high if end is None else min(end, high)
            out: list[Record] = []
            first = max(start, low)
            if first >= stop:
                return out
            consumer.assign([kafka.TopicPartition(topic, partition, first)])
            deadline = time.monotonic() + 30
            # Transaction markers take offsets but are never returned: the position, not the last record, says when to stop.
            while consumer.position([tp])[0].offset < stop:
                message = consumer.poll(0.1)
                if message is None:
                    if time.monotonic() > deadline:
                        raise KafkaError(f"reading {topic}-{partition} timed out at offset {consumer.position([tp])[0].offset}")
                    continue
                if message.error():
                    raise KafkaError(f"reading {topic}-{partition}: {message.error()}")
                if message.offset() >= stop:
                    break
                out.append((message.offset(), message.key(), message.value(), message.timestamp()[1]))
            return out
        finally:
            consumer.close()

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has now (0 if it does not exist)."""
        require_kafka()  # the clear ImportError first
        admin = importlib.import_module("confluent_kafka.admin").AdminClient(
            {"bootstrap.servers": self.bootstrap_servers, "logger": client_logger()})
        found = admin.list_topics(timeout=30).topics.get(topic)  # asking for the topic by name would create it
        return 0 if found is None or found.error is not None else len(found.partitions)

    def add_partitions(self, topic: str, total: int) -> None:
        """Give ``topic`` ``total`` partitions, keeping every record at its offset (CreatePartitions, emulated).

        Reads the topic, deletes it, creates it with ``total`` partitions and writes each old
        partition's records back in order, then restores each partition's log start. Offsets
        must be contiguous (no transaction markers) so that the rewrite lands at the same ones.
        """
        current = self.partition_count(topic)
        if current == 0:
            raise KafkaError(f"cannot add partitions to {topic!r}: no such topic")
        if total <= current:
            raise ValueError(f"{topic!r} has {current} partitions already; total must be larger, got {total}")
        kept: list[tuple[int, list[Record]]] = []
        for partition in range(current):
            rows = self.records(topic, partition)
            low = rows[0][0] if rows else self._log_start(topic, partition)
            if rows and [r[0] for r in rows] != list(range(low, low + len(rows))):
                raise KafkaError(f"cannot rebuild {topic}-{partition}: its offsets have gaps (transaction markers)")
            kept.append((low, rows))
        self.delete_topic(topic)  # closes the shared producer, whose metadata had the old partition count
        self.create_topic(topic, total)  # a new one, which sees all ``total`` (so produce reaches the new partitions)
        for partition, (low, rows) in enumerate(kept):
            if low:
                self.produce(topic, [b""] * low, partition=partition)  # placeholders, deleted below
            self.produce(topic, [r[2] for r in rows], keys=[r[1] for r in rows], timestamps_ms=[r[3] for r in rows],
                         partition=partition)
            if low:
                self.delete_records(topic, partition, low)

    def _require_topic(self, producer: Any, topic: str) -> None:
        """Refuse ``topic`` if the cluster does not have it (the producer would wait 30 s, then fail each record)."""
        if topic in self._producer_topics:
            return
        found = producer.list_topics(topic, timeout=30).topics.get(topic)
        if found is None or (found.error is not None and found.error.code() == require_kafka().KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise KafkaError(f"producing to {topic!r}: no such topic (create it with create_topic first)")
        self._producer_topics.add(topic)

    def _refresh_producer_metadata(self, topic: str, total: int) -> None:
        producer = self._shared_producer()
        deadline = time.monotonic() + 30
        while True:
            found = producer.list_topics(topic, timeout=30).topics.get(topic)
            if found is not None and found.error is None and len(found.partitions) >= total:
                self._producer_topics.add(topic)
                return
            if time.monotonic() > deadline:
                raise KafkaError(f"the producer does not see {total} partitions of {topic!r} after 30 s")
            time.sleep(0.05)

    def _log_start(self, topic: str, partition: int) -> int:
        kafka = require_kafka()
        consumer = kafka.Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "aiodstream-mock-reader",
                                   "logger": client_logger()})
        try:
            return int(consumer.get_watermark_offsets(kafka.TopicPartition(topic, partition), timeout=30)[0])
        finally:
            consumer.close()

    def close(self) -> None:
        """Stop the cluster (clients see their connections closed)."""
        with self._lock:
            if self._mc is None:
                return
            self._close_producer(10)
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._lib.rd_kafka_destroy(self._rk)
            self._mc = None

    def __enter__(self) -> MockKafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<MockKafkaCluster {self.bootstrap_servers}{' closed' if self._mc is None else ''}>"


def main() -> None:
    """Run a mock cluster until interrupted; print its address (``--topic NAME:PARTITIONS`` creates topics)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m streaming.kafka.testing", description=main.__doc__)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS")
    args = parser.parse_args()
    with MockKafkaCluster(args.brokers) as cluster:
        for spec in args.topic:
            name, _, count = spec.partition(":")
            cluster.create_topic(name, int(count or 1))
        print(cluster.bootstrap_servers, flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
