"""Spark's Kafka data-loss reports: the details, ``failOnDataLoss``'s instruction, and raising or warning.

The words of Structured Streaming's ``KafkaSource.reportDataLoss`` and ``KafkaOffsetReader``,
shared by the DStream, Pipeline and continuous Kafka sources.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ._client import KafkaDataLossError
from ._offsets import TopicAndPartition

__all__ = [
    "GONE_ERRORS",
    "OUT_OF_RANGE_ERRORS",
    "added_partition",
    "added_partitions",
    "data_loss_message",
    "earliest_unknown",
    "fetch_failed",
    "offset_changed",
    "partitions_gone",
    "report_data_loss",
    "scala_set",
    "tp_name",
]

GONE_ERRORS = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC"})
"""Consumer error names (``KafkaError.name()``) saying the partition is gone: a deleted topic or partition."""
OUT_OF_RANGE_ERRORS = frozenset({"_AUTO_OFFSET_RESET", "OFFSET_OUT_OF_RANGE"})
"""Consumer error names saying the position is outside the partition's log (records aged out, or a topic made anew)."""

FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in Kafka any more; either the data was aged out by "
    "Kafka or the topic may have been deleted before all the data in the topic was processed. If you don't want your "
    'streaming query to fail on such cases, set the source option "failOnDataLoss" to "false".'
)
FAIL_ON_DATA_LOSS_FALSE = (
    "Some data may have been lost because they are not available in Kafka any more; either the data was aged out by "
    "Kafka or the topic may have been deleted before all the data in the topic was processed. If you want your "
    'streaming query to fail on such cases, set the source option "failOnDataLoss" to "true".'
)


def tp_name(tp: TopicAndPartition) -> str:
    """A partition as Kafka's Java client prints a ``TopicPartition``: ``topic-0``."""
    return f"{tp.topic}-{tp.partition}"


def scala_set(tps: Iterable[TopicAndPartition]) -> str:
    """Partitions as Scala prints a set of them: ``Set(t-0, t-1)`` (sorted here, for a stable message)."""
    return "Set(" + ", ".join(tp_name(tp) for tp in sorted(tps)) + ")"


def added_partition(tp: TopicAndPartition, first: int) -> str:
    """A partition new since the last batch whose first record still held is not offset 0."""
    return f"Added partition {tp_name(tp)} starts from {first} instead of 0. Some data may have been missed"


def added_partitions(firsts: Mapping[TopicAndPartition, int]) -> list[str]:
    """:func:`added_partition` for each of the new partitions ``firsts`` (sorted) whose first offset still held is not 0."""
    return [added_partition(tp, first) for tp, first in sorted(firsts.items()) if first != 0]


def partitions_gone(tps: Iterable[TopicAndPartition]) -> str:
    """Partitions the last batch read that the cluster no longer has."""
    return f"{scala_set(tps)} are gone. Some data may have been missed"


def offset_changed(tp: TopicAndPartition, before: int, after: int) -> str:
    """A partition whose end moved back below where the last batch stopped (the topic was made anew)."""
    return f"Partition {tp_name(tp)}'s offset was changed from {before} to {after}, some data may have been missed"


def earliest_unknown(tps: Iterable[TopicAndPartition]) -> str:
    """New partitions whose first offsets could not be found (they went away again)."""
    return f"Cannot find earliest offsets of {scala_set(tps)}. Some data may have been missed"


def fetch_failed(offset: int, group_id: str, tp: TopicAndPartition) -> str:
    """A reader's position that the partition no longer holds (aged out, or the partition is gone)."""
    return f"Cannot fetch offset {offset} (GroupId: {group_id}, TopicPartition: {tp_name(tp)})"


def data_loss_message(detail: str, *, fail: bool) -> str:
    """Spark's ``reportDataLoss`` text: ``detail``, then the instruction for the current ``failOnDataLoss``."""
    return f"{detail}. {FAIL_ON_DATA_LOSS_TRUE if fail else FAIL_ON_DATA_LOSS_FALSE}"


def report_data_loss(detail: str, *, fail: bool, log: Any) -> None:
    """Spark's ``reportDataLoss``: raise with ``failOnDataLoss``, else warn on ``log`` (a structlog logger) and go on.

    Raises:
        KafkaDataLossError: ``fail`` is true.
    """
    if fail:
        raise KafkaDataLossError(data_loss_message(detail, fail=True))
    log.warning(data_loss_message(detail, fail=False))
