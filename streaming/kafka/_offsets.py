"""Kafka positions: pyspark 2.4's ``TopicAndPartition``, ``OffsetRange`` and ``KafkaMessageAndMetadata``, and the offsets log's text.

The log text is Structured Streaming's Kafka source offset (``{"topic":{"0":23}}``): for each
topic partition, the offset of the next record to read.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs

from scheduler import CorruptCheckpointError, Offset

__all__ = [
    "Broker",
    "KafkaMessageAndMetadata",
    "OffsetRange",
    "PartitionOffsets",
    "TopicAndPartition",
    "current_partitions",
    "format_partition_offsets",
    "parse_partition_offsets",
    "partition_offsets",
    "ranges_between",
    "utf8_decoder",
]


def utf8_decoder(s: bytes | None) -> str | None:
    """pyspark 2.4's default key and value decoder: UTF-8 text, ``None`` kept."""
    if s is None:
        return None
    return s.decode("utf-8")


class TopicAndPartition:
    """A topic and one of its partitions (pyspark 2.4's ``TopicAndPartition(topic, partition)``)."""

    __slots__ = ("_partition", "_topic")

    def __init__(self, topic: str, partition: int) -> None:
        """Name partition ``partition`` of ``topic``."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        if type(partition) is not int or partition < 0:
            raise TypeError(f"partition must be a non-negative int, got {partition!r}")
        self._topic = topic
        self._partition = partition

    @property
    def topic(self) -> str:
        """The topic's name."""
        return self._topic

    @property
    def partition(self) -> int:
        """The partition's number."""
        return self._partition

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicAndPartition):
            return NotImplemented
        return (self._topic, self._partition) == (other._topic, other._partition)

    def __lt__(self, other: TopicAndPartition) -> bool:
        return (self._topic, self._partition) < (other._topic, other._partition)

    def __hash__(self) -> int:
        return hash((self._topic, self._partition))

    def __repr__(self) -> str:
        return f"TopicAndPartition(topic: {self._topic}, partition: {self._partition})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TopicAndPartition, (self._topic, self._partition))


class OffsetRange:
    """The records ``[fromOffset, untilOffset)`` of one topic partition (pyspark 2.4's ``OffsetRange``)."""

    __slots__ = ("fromOffset", "partition", "topic", "untilOffset")

    def __init__(self, topic: str, partition: int, fromOffset: int, untilOffset: int) -> None:  # noqa: N803 - pyspark's names
        """The range ``[fromOffset, untilOffset)`` of ``topic``'s partition ``partition``."""
        TopicAndPartition(topic, partition)  # the same checks
        for name, value in (("fromOffset", fromOffset), ("untilOffset", untilOffset)):
            if type(value) is not int or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if untilOffset < fromOffset:
            raise ValueError(f"untilOffset {untilOffset} is before fromOffset {fromOffset} for {topic}-{partition}")
        self.topic = topic
        self.partition = partition
        self.fromOffset = fromOffset
        self.untilOffset = untilOffset

    @property
    def count(self) -> int:
        """How many offsets the range covers (``untilOffset - fromOffset``)."""
        return self.untilOffset - self.fromOffset

    def topicAndPartition(self) -> TopicAndPartition:
        """The range's topic partition."""
        return TopicAndPartition(self.topic, self.partition)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OffsetRange):
            return NotImplemented
        return (self.topic, self.partition, self.fromOffset, self.untilOffset) == \
            (other.topic, other.partition, other.fromOffset, other.untilOffset)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition, self.fromOffset, self.untilOffset))

    def __str__(self) -> str:
        return f"OffsetRange(topic: {self.topic}, partition: {self.partition}, range: [{self.fromOffset} -> {self.untilOffset}])"

    __repr__ = __str__

    def __reduce__(self) -> tuple[Any, ...]:
        return (OffsetRange, (self.topic, self.partition, self.fromOffset, self.untilOffset))


@attrs.frozen
class Broker:
    """A Kafka broker's address (pyspark 2.4's ``Broker(host, port)``, for ``createRDD``'s leaders)."""

    host: str
    port: int


class KafkaMessageAndMetadata:
    """One record and where it came from: what a ``messageHandler`` receives (pyspark 2.4's class).

    ``key`` and ``message`` are pyspark 2.4's properties: the raw bytes decoded, each time they
    are read, by the stream's ``keyDecoder`` and ``valueDecoder`` (``utf8_decoder`` unless given).
    ``raw_key``, ``raw_message`` and ``timestamp_ms`` (the record's timestamp) are additions.
    Pickled, it keeps the raw bytes and forgets the decoders, as pyspark 2.4's did.
    """

    __slots__ = ("_key_decoder", "_raw_key", "_raw_message", "_value_decoder", "offset", "partition", "timestamp_ms", "topic")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, message: bytes | None,
                 timestamp_ms: int | None = None, *, key_decoder: Callable[[bytes | None], Any] = utf8_decoder,
                 value_decoder: Callable[[bytes | None], Any] = utf8_decoder) -> None:
        """The record at ``offset`` of ``topic``'s partition ``partition``, with its raw key and value."""
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self._raw_key = key
        self._raw_message = message
        self._key_decoder = key_decoder
        self._value_decoder = value_decoder

    @property
    def key(self) -> Any:
        """The key, decoded by the key decoder."""
        return self._key_decoder(self._raw_key)

    @property
    def message(self) -> Any:
        """The value, decoded by the value decoder."""
        return self._value_decoder(self._raw_message)

    @property
    def raw_key(self) -> bytes | None:
        """The key's bytes, as stored in Kafka."""
        return self._raw_key

    @property
    def raw_message(self) -> bytes | None:
        """The value's bytes, as stored in Kafka."""
        return self._raw_message

    def __str__(self) -> str:
        return f"KafkaMessageAndMetadata(topic: {self.topic}, partition: {self.partition}, offset: {self.offset}, key and message...)"

    __repr__ = __str__

    def __reduce__(self) -> tuple[Any, ...]:
        return (KafkaMessageAndMetadata, (self.topic, self.partition, self.offset, self._raw_key, self._raw_message,
                                          self.timestamp_ms))


PartitionOffsets = Mapping[TopicAndPartition, int]


def format_partition_offsets(offsets: PartitionOffsets) -> str:
    """The offsets log's text for ``offsets``: ``{"topic":{"0":23}}``, topics and partitions sorted (canonical)."""
    by_topic: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        by_topic.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return json.dumps(by_topic, separators=(",", ":"))


def parse_partition_offsets(text: Offset, *, input_name: str = "Kafka") -> dict[TopicAndPartition, int]:
    """Read :func:`format_partition_offsets`'s text back; a malformed entry is a :class:`CorruptCheckpointError`."""
    if text is None:
        return {}
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise CorruptCheckpointError(f"{input_name}: the offsets log holds {text!r}, which is not Kafka offsets JSON: {error}") from None
    if not isinstance(raw, dict):
        raise CorruptCheckpointError(f"{input_name}: expected {{\"topic\":{{\"partition\":offset}}}} in the offsets log, got {text!r}")
    out: dict[TopicAndPartition, int] = {}
    for topic, parts in raw.items():
        if not isinstance(topic, str) or not topic or not isinstance(parts, dict):
            raise CorruptCheckpointError(f"{input_name}: expected {{\"topic\":{{\"partition\":offset}}}} in the offsets log, got {text!r}")
        for part, offset in parts.items():
            if not (isinstance(part, str) and part.isascii() and part.isdigit()) or type(offset) is not int or offset < 0:
                raise CorruptCheckpointError(
                    f"{input_name}: bad partition offset {part!r}: {offset!r} for topic {topic!r} in the offsets log ({text!r})")
            out[TopicAndPartition(topic, int(part))] = offset
    return out


def ranges_between(start: PartitionOffsets, end: PartitionOffsets) -> list[OffsetRange]:
    """One range per partition of ``end``, from ``start``'s offset to ``end``'s (``start`` covers every partition of ``end``)."""
    return [OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(end)]


def partition_offsets(items: Iterable[tuple[TopicAndPartition, int]]) -> dict[TopicAndPartition, int]:
    """A plain dict of offsets, checked."""
    out: dict[TopicAndPartition, int] = {}
    for tp, offset in items:
        if not isinstance(tp, TopicAndPartition):
            raise TypeError(f"expected TopicAndPartition keys, got {tp!r}")
        if type(offset) is not int or offset < 0:
            raise ValueError(f"offset for {tp.topic}-{tp.partition} must be a non-negative int, got {offset!r}")
        out[tp] = offset
    return out


def current_partitions(partitions: Mapping[str, Sequence[int] | None]) -> list[TopicAndPartition]:
    """Every partition of the topics the cluster has, sorted (a topic it does not have has none)."""
    return sorted(TopicAndPartition(topic, p) for topic, parts in partitions.items() for p in (parts or ()))
