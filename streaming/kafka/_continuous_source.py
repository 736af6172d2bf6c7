"""Kafka as a continuous source: one long-running task per topic partition (Spark's ``KafkaContinuousStream``).

Each task keeps one assigned consumer on its partition and hands the task what a short poll
brings; an epoch's offsets are each partition's next offset, written to the offsets log in
Structured Streaming's Kafka JSON (``{"topic":{"0":23}}``). Starting offsets, ``failOnDataLoss``
and the partitions a restart finds added or gone follow Spark's rules and messages.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any, Mapping, Sequence

from scheduler import InvalidPipelineError, library_logger

from ..continuous import ContinuousSource, PartitionReader
from ._client import KafkaClusterView, KafkaError, MetadataUnavailableError, check_settings, partitions_now, reads_committed, require_kafka
from ._data_loss import GONE_ERRORS, OUT_OF_RANGE_ERRORS, added_partitions, fetch_failed, partitions_gone, report_data_loss, scala_set
from ._offsets import TopicAndPartition, current_partitions, format_partition_offsets, parse_partition_offsets
from ._reader import executor_config
from ._source_options import StartingOffsets, option_flag, subscribe_topics

__all__ = ["KAFKA_FIELDS", "KafkaContinuousSource", "PARTITIONS_CHANGED"]

PARTITIONS_CHANGED = (
    "the partitions of {source} changed from {known} to {now}: a continuous query runs one task per partition, so "
    "it stops; restart it from its checkpoint and it reads the new partitions from their earliest offsets (Spark's "
    "continuous reader restarts its tasks itself)"
)
KAFKA_FIELDS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
"""Spark's Kafka source schema, the fields of every row the source gives."""


def _row_class() -> type:
    from pyspark.sql import Row  # executors have pyspark; imported where rows are made

    class KafkaRecordRow(Row):
        key = property(lambda self: tuple.__getitem__(self, 0))
        value = property(lambda self: tuple.__getitem__(self, 1))
        topic = property(lambda self: tuple.__getitem__(self, 2))
        partition = property(lambda self: tuple.__getitem__(self, 3))
        offset = property(lambda self: tuple.__getitem__(self, 4))
        timestamp = property(lambda self: tuple.__getitem__(self, 5))
        timestampType = property(lambda self: tuple.__getitem__(self, 6))  # noqa: N815 - Spark's column name

    return KafkaRecordRow


_ROW: list[type] = []


def _kafka_row(key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int, timestamp: datetime,
               timestamp_type: int) -> Any:
    """A row of Spark's Kafka schema (``key, value, topic, partition, offset, timestamp, timestampType``), a pyspark ``Row``."""
    if not _ROW:
        _ROW.append(_row_class())
    row: Any = tuple.__new__(_ROW[0], (key, value, topic, partition, offset, timestamp, timestamp_type))
    object.__setattr__(row, "__fields__", KAFKA_FIELDS)
    return row


def _fail_on_data_loss(value: bool | str) -> bool:
    flag = option_flag(value)
    if flag is None:
        raise InvalidPipelineError(f'For input string: "{value}" (failOnDataLoss must be true or false)')
    return flag


class KafkaContinuousSource(ContinuousSource):
    """The topics' partitions as a continuous source: one task per partition, rows of Spark's Kafka schema.

    Each row is a pyspark ``Row(key, value, topic, partition, offset, timestamp, timestampType)``
    (``key`` and ``value`` bytes, ``timestamp`` a ``datetime``), as Spark's Kafka source gives
    them. A partition's offset is its next offset; the offsets log holds them as
    ``{"topic":{"0":23}}``, so a restart reads again exactly from the last committed epoch: the
    source is replayable, and with an exactly-once sink the query is exactly once.

    The partitions are fixed per run: they are listed when the run starts. One that appears
    while the query runs stops it (the message says to restart; a restart reads the new
    partition from its earliest offset, and reports data loss if that is not 0); one that goes
    away is data loss. See ``docs/continuous.md``.

    Args:
        subscribe: the topics, a list or Spark's comma-separated ``subscribe`` text.
        kafkaParams: the client's settings (``bootstrap.servers`` or ``metadata.broker.list``;
            any librdkafka consumer setting; ``group.id`` is replaced as Spark does on executors).
        startingOffsets: where a query without a committed epoch starts: ``"latest"``
            (Spark's default), ``"earliest"``, or Spark's JSON naming every partition
            (``{"t":{"0":23,"1":-2}}``, -2 earliest, -1 latest).
        failOnDataLoss: whether records gone from Kafka (aged out, a deleted topic) fail the
            query (default) or are skipped with a warning.
        pollTimeoutMs: the longest one poll of a task waits for a record (it also waits no
            longer than the task's next epoch check).
        partitionCheckIntervalMs: how often each task compares the topics' partitions with the
            run's (Spark's driver compares them at every epoch).
    """

    replayable = True

    def __init__(self, subscribe: str | Sequence[str], kafkaParams: Mapping[str, Any], *,  # noqa: N803 - Spark's names
                 startingOffsets: str | Mapping[str, Mapping[str, int]] = "latest",  # noqa: N803
                 failOnDataLoss: bool | str = True, pollTimeoutMs: int = 512,  # noqa: N803
                 partitionCheckIntervalMs: int = 1000) -> None:  # noqa: N803
        """Describe the source; nothing connects until the query starts.

        Raises:
            InvalidPipelineError: no topic, a ``startingOffsets`` or ``failOnDataLoss`` Spark would
                refuse, or ``kafkaParams`` without a broker list.
        """
        self.topics = list(subscribe_topics(subscribe))
        self.starting = StartingOffsets.parse(startingOffsets)
        self.fail_on_data_loss = _fail_on_data_loss(failOnDataLoss)
        for name, ms in (("pollTimeoutMs", pollTimeoutMs), ("partitionCheckIntervalMs", partitionCheckIntervalMs)):
            if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
                raise InvalidPipelineError(f"{name} must be a positive int of milliseconds, got {ms!r}")
        self.poll_timeout_s = pollTimeoutMs / 1000.0
        self.partition_check_s = partitionCheckIntervalMs / 1000.0
        self.group_id = f"spark-kafka-source-{uuid.uuid4()}-executor"
        try:
            self.config = executor_config(kafkaParams, group_id=self.group_id)
            check_settings(self.config)
        except (ValueError, TypeError) as exc:
            raise InvalidPipelineError(str(exc)) from exc
        self.params = dict(kafkaParams)
        self._partitions: list[TopicAndPartition] | None = None
        self._initial: dict[TopicAndPartition, int] = {}

    # -- the driver --

    def _list_partitions(self, view: KafkaClusterView) -> list[TopicAndPartition]:
        return current_partitions(view.partitions(self.topics))

    @property
    def partitions(self) -> list[TopicAndPartition]:
        """The topic partitions this run reads, in task order (listed from the cluster on first use)."""
        if self._partitions is None:
            with KafkaClusterView(self.params) as view:
                self._partitions = self._list_partitions(view)
        return self._partitions

    @property
    def num_partitions(self) -> int:
        """One task per topic partition."""
        return len(self.partitions)

    def check(self) -> None:
        """List the partitions again (a restart sees added ones) and resolve the starting offsets (on the driver).

        Raises:
            InvalidPipelineError: none of the topics exists, or a ``startingOffsets`` JSON that
                does not name exactly the topics' partitions (Spark's rule).
        """
        with KafkaClusterView(self.params) as view:
            partitions = self._partitions = self._list_partitions(view)
            if not partitions:
                raise InvalidPipelineError(f"none of the topics {self.topics} exists; create them before the query starts")
            # Under read_committed a partition ends at its last stable offset, as Spark (and the Pipeline source) take it.
            self._initial = self.starting.resolve(view, partitions, committed_only=reads_committed(self.params))

    def initial_offset(self, partition: int) -> Any:
        """The partition's starting offset (resolved by :meth:`check`)."""
        tp = self.partitions[partition]
        if tp not in self._initial:
            self.check()
        return self._initial[tp]

    def merge_offsets(self, offsets: Sequence[Any]) -> str:
        """The offsets-log line: Structured Streaming's Kafka JSON, ``{"topic":{"0":23,"1":7}}``."""
        return format_partition_offsets(dict(zip(self.partitions, (int(o) for o in offsets), strict=True)))

    def split_offsets(self, line: str) -> list[Any]:
        """Each partition's offset from the last committed epoch's line (on the driver, at a restart).

        A partition the line does not know (added since) starts at its earliest offset, with
        Spark's data-loss report if that is not 0; partitions in the line that are gone are
        Spark's ``are gone`` data loss.

        Raises:
            KafkaDataLossError: with ``failOnDataLoss``, a partition gone or an added one that
                does not start at 0.
            CorruptCheckpointError: the line is not Kafka offsets JSON.
        """
        logged = parse_partition_offsets(line, input_name=repr(self))
        partitions = self.partitions
        gone = sorted(set(logged) - set(partitions))
        if gone:
            self._report_data_loss(partitions_gone(gone))
        added = [tp for tp in partitions if tp not in logged]
        if added:
            with KafkaClusterView(self.params) as view:
                earliest = view.earliest_offsets(added)
            library_logger("aiodstream.kafka").info("Partitions added", partitions=scala_set(added))
            for detail in added_partitions(earliest):
                self._report_data_loss(detail)
            logged = {**logged, **earliest}
        return [logged[tp] for tp in partitions]

    def _report_data_loss(self, detail: str) -> None:
        report_data_loss(detail, fail=self.fail_on_data_loss, log=library_logger("aiodstream.kafka"))

    # -- the tasks --

    def open_reader(self, partition: int, offset: Any) -> PartitionReader:
        """Assign a consumer to the task's partition at ``offset`` (on an executor)."""
        return _KafkaPartitionReader(self, self.partitions[partition], int(offset))

    def __repr__(self) -> str:
        return f"KafkaV2[Subscribe[{', '.join(self.topics)}]]"  # Spark's description of a Kafka source in progress reports


MAX_RECORDS = 4096
"""Records one read hands the task at most, so the epoch check is never starved when far behind."""


class _KafkaPartitionReader(PartitionReader):
    """One partition's consumer: a short poll for the first record, then what is already fetched, without waiting."""

    def __init__(self, source: KafkaContinuousSource, tp: TopicAndPartition, offset: int) -> None:
        kafka = require_kafka()
        self._kafka = kafka
        self._source = source
        self._tp = tp
        self._next = offset
        config = dict(source.config)
        config.setdefault("fetch.wait.max.ms", 10)  # the broker holds an empty fetch this long at most
        config.setdefault("fetch.error.backoff.ms", 10)
        self._consumer = kafka.Consumer(config)
        self._consumer.assign([kafka.TopicPartition(tp.topic, tp.partition, offset)])
        self._check_at = time.monotonic() + source.partition_check_s
        self._gone_reported = False
        self._make_row = _kafka_row
        _kafka_row(None, None, "", 0, 0, datetime.fromtimestamp(0), 0)  # build the row class now, not in the first read

    def read(self, deadline: float) -> list[Any]:
        now = time.monotonic()
        if now >= self._check_at:
            self._check_at = now + self._source.partition_check_s
            self._check_partitions()
        consumer = self._consumer
        first = consumer.poll(max(0.0, min(deadline - now, self._source.poll_timeout_s)))
        if first is None:
            return []
        messages = [first, *consumer.consume(MAX_RECORDS - 1, 0)]
        rows: list[Any] = []
        append, make, fromtimestamp = rows.append, self._make_row, datetime.fromtimestamp
        topic, partition = self._tp.topic, self._tp.partition
        for message in messages:
            if message.error() is not None:
                if self._on_error(message.error()):
                    continue  # an event of the client's (a broker away, the partition's end): the records after it count
                break  # the consumer was moved (records gone) or the partition is: what follows is stale
            offset = message.offset()
            kind, ms = message.timestamp()
            # confluent-kafka's timestamp kinds are Spark's ids plus one (Spark: 0 create time, 1 log append time).
            append(make(message.key(), message.value(), topic, partition, offset, fromtimestamp(ms / 1000.0), kind - 1))
            self._next = offset + 1
        return rows

    def _on_error(self, error: Any) -> bool:
        """Data loss at the reader's offset (Spark's messages), or another consumer error (raised); whether the records
        fetched after it are still to be read (the consumer was not moved)."""
        name = error.name()
        if name in ("_PARTITION_EOF",):
            return True
        if name in GONE_ERRORS:
            self._report_gone([self._tp])
            return False
        if name not in OUT_OF_RANGE_ERRORS:
            if error.fatal() or not (error.retriable() or name.startswith("_")):
                raise KafkaError(f"reading {self._tp.topic}-{self._tp.partition} at offset {self._next}: {error.str()}")
            # A client-side or retriable error (a broker going away, a timeout): the client retries by itself.
            library_logger("aiodstream.kafka").warning("Kafka consumer error, retrying", topic=self._tp.topic,
                                                       partition=self._tp.partition, error=error.str())
            return True
        self._source._report_data_loss(fetch_failed(self._next, self._source.group_id, self._tp))
        kafka, tp = self._kafka, self._tp
        low, high = self._consumer.get_watermark_offsets(kafka.TopicPartition(tp.topic, tp.partition), timeout=30)
        # Before the log start: what is left starts there. Past the end (the partition was made anew): all of it is new.
        self._next = int(low) if self._next >= high else max(self._next, int(low))
        self._consumer.assign([kafka.TopicPartition(tp.topic, tp.partition, self._next)])
        return False

    def _check_partitions(self) -> None:
        """Stop the query when the topics' partitions differ from the run's (added: restart; gone: data loss)."""
        source = self._source
        now: list[TopicAndPartition] = []
        for topic in source.topics:  # one topic's metadata at a time: a cluster may hold many others
            try:
                partitions = partitions_now(self._consumer, topic)
            except MetadataUnavailableError:
                return  # no answer (no leader yet, the brokers unreachable): not a partition gone; the next check asks again
            now.extend(TopicAndPartition(topic, p) for p in partitions or ())
        known = source.partitions
        gone = sorted(set(known) - set(now))
        if gone:
            self._report_gone(gone)
        if set(now) - set(known):
            raise KafkaError(PARTITIONS_CHANGED.format(source=repr(source), known=scala_set(known), now=scala_set(sorted(now))))

    def _report_gone(self, gone: list[TopicAndPartition]) -> None:
        if not self._gone_reported:  # without failOnDataLoss: warned once, and the task reads on (nothing comes)
            self._gone_reported = True
            self._source._report_data_loss(partitions_gone(gone))

    def offset(self) -> Any:
        return self._next

    def close(self) -> None:
        self._consumer.close()
