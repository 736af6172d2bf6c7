"""Reading one offset range of one partition: what each task of a Kafka batch runs (Spark's ``KafkaRDD`` iterator).

The consumer is assigned the partition (no group membership, no auto-commit) and reads until
its position reaches the range's end; transaction markers take offsets but are never
returned, so the position, not the last record's offset, ends the range. Records that are gone
(aged out, a deleted topic) are Spark's ``failOnDataLoss`` case: an error with Spark's message,
or with ``fail_on_data_loss=False`` a warning and whatever is still there. Blocking.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Mapping

from scheduler import library_logger

from ._client import KafkaError, MetadataUnavailableError, client_config, partitions_now, require_kafka
from ._data_loss import GONE_ERRORS, OUT_OF_RANGE_ERRORS, fetch_failed, report_data_loss
from ._offsets import OffsetRange

__all__ = ["RangeReader", "executor_config"]

# How long a range may wait for records before the reader asks whether its partition still exists.
METADATA_CHECK_S = 2.0
# Records asked of librdkafka per call: large enough that a call's cost is spread over many records.
BATCH = 10_000
# How long a fetch may wait at the end of the log for new records (librdkafka's default is 500 ms).
# A range lies below the high watermark it was planned from, so waiting never brings a record of
# it; but a fetch left waiting at the end of a partition holds up the consumer's next assignment,
# and the mock broker always waits the whole time: reading successive ranges of 100,000 records
# near the head went from about 1,000,000 records/s to 185,000 with the default.
FETCH_WAIT_MAX_MS = 10
# How long librdkafka postpones the next fetch once its local queue holds queued.min.messages
# (100,000) records (its default is 1,000 ms). A task drains the queue at once, so a range of
# more than 100,000 records waited a whole second: 300,000 records took 1.7 s instead of 0.6 s,
# and a 4-partition Spark job of 600,000 records 3.7 s instead of 1.8 s (median, load 13-16).
FETCH_QUEUE_BACKOFF_MS = 10


def executor_config(params: Mapping[str, Any], *, group_id: str) -> dict[str, Any]:
    """Consumer settings for reading assigned ranges, as Spark fixes them on executors.

    No auto-commit, no offset reset (a position out of range is an error, never a silent jump),
    and the group id ``group_id`` (Spark's ``spark-executor-<group.id>``), used by no group.
    """
    config = client_config(params, drop=("group.id", "enable.auto.commit", "auto.offset.reset", "enable.partition.eof"))
    config.update({"group.id": group_id, "enable.auto.commit": False, "auto.offset.reset": "error",
                   "enable.partition.eof": False})
    config.setdefault("isolation.level", "read_uncommitted")  # the Java client's default (librdkafka's is read_committed)
    config.setdefault("fetch.wait.max.ms", FETCH_WAIT_MAX_MS)
    config.setdefault("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
    return config


class _Gone:
    """The error a deleted partition would have given, had the consumer reported one."""

    def name(self) -> str:
        return "UNKNOWN_TOPIC_OR_PART"

    def str(self) -> str:
        return "Broker: Unknown topic or partition"


class RangeReader:
    """Reads offset ranges with one consumer (kept for the next range: a task's worker may read many).

    Args:
        config: consumer settings, from :func:`executor_config`.
        poll_timeout_s: how long a range may go without a record before it is an error
            (Spark's ``spark.streaming.kafka.consumer.poll.ms``).
    """

    def __init__(self, config: Mapping[str, Any], *, poll_timeout_s: float = 120.0) -> None:
        """Create the consumer (it connects on first use)."""
        self._kafka = require_kafka()
        self._config = dict(config)
        self._consumer = self._kafka.Consumer(self._config)
        self._poll_timeout_s = poll_timeout_s
        self._reads = 0  # numbers each read: an abandoned read's late clean-up must not unassign a newer one

    def read(self, rng: OffsetRange, *, fail_on_data_loss: bool = True) -> Iterator[Any]:
        """The records of ``rng`` in offset order, as confluent-kafka ``Message`` objects.

        Raises :class:`KafkaDataLossError` (with ``fail_on_data_loss``) when records of the
        range are gone; otherwise logs Spark's warning and yields what is left.
        """
        if rng.untilOffset <= rng.fromOffset:
            return
        kafka = self._kafka
        tp = kafka.TopicPartition(rng.topic, rng.partition, rng.fromOffset)
        consumer = self._consumer
        self._reads += 1
        mine = self._reads
        consumer.assign([tp])
        try:
            yield from self._records(rng, tp, fail_on_data_loss)
        finally:
            if self._reads == mine:  # a generator dropped mid-range is closed late (by the collector), maybe mid next read
                consumer.unassign()

    def _records(self, rng: OffsetRange, tp: Any, fail_on_data_loss: bool) -> Iterator[Any]:
        consumer = self._consumer
        until = rng.untilOffset
        expected = rng.fromOffset
        idle_since = time.monotonic()
        next_check = idle_since + METADATA_CHECK_S
        while expected < until:
            # At most what the range still needs: librdkafka waits for a full batch or the timeout.
            messages = consumer.consume(min(BATCH, until - expected), 0.2)
            if not messages:
                # A range may end in transaction markers: the position moves past them without a record.
                position = consumer.position([tp])[0].offset
                if position >= until:
                    return
                now = time.monotonic()
                if now >= next_check:  # a deleted topic gives no error to an assigned consumer: ask the metadata
                    next_check = now + METADATA_CHECK_S
                    if not self._partition_exists(rng):
                        expected = self._on_error(rng, tp, _Gone(), expected, fail_on_data_loss)
                        if expected >= until:
                            return
                        continue
                if time.monotonic() - idle_since > self._poll_timeout_s:
                    raise KafkaError(
                        f"Failed to get records for {self._config['group.id']} {rng.topic}-{rng.partition} {expected} "
                        f"after polling for {int(self._poll_timeout_s * 1000)}")
                continue
            idle_since = time.monotonic()
            for message in messages:
                error = message.error()
                if error is not None:
                    expected = self._on_error(rng, tp, error, expected, fail_on_data_loss)
                    if expected >= until:
                        return
                    break
                offset = message.offset()
                if offset >= until:
                    return
                expected = offset + 1
                yield message

    def _partition_exists(self, rng: OffsetRange) -> bool:
        """Whether the range's partition exists: ``False`` only when the metadata says it does not (no answer, the
        brokers unreachable included, is not that: the range reads on until its poll timeout, and the next check asks
        again)."""
        try:
            partitions = partitions_now(self._consumer, rng.topic)
        except MetadataUnavailableError:
            return True
        return partitions is not None and rng.partition in partitions

    def _on_error(self, rng: OffsetRange, tp: Any, error: Any, expected: int, fail_on_data_loss: bool) -> int:
        """Handle a consumer error at ``expected``: data loss is reported and (if allowed) skipped; others raise."""
        name = error.name()
        if name in OUT_OF_RANGE_ERRORS or name in GONE_ERRORS:
            report_data_loss(fetch_failed(expected, self._config["group.id"], rng.topicAndPartition()), fail=fail_on_data_loss,
                             log=library_logger("aiodstream.kafka"))
            if name in GONE_ERRORS:
                return rng.untilOffset  # the partition is gone: nothing of the range is left to read
            low, high = self._consumer.get_watermark_offsets(tp, timeout=30)
            resume: int = max(expected, int(low))
            if resume >= rng.untilOffset or resume >= high:
                return rng.untilOffset
            self._consumer.assign([self._kafka.TopicPartition(rng.topic, rng.partition, resume)])
            return resume
        raise KafkaError(f"reading {rng}: {error.str()}")

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
