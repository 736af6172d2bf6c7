"""Planning a Kafka source's micro-batches, without I/O: starting offsets, the read limit and data-loss checks.

Structured Streaming's ``KafkaMicroBatchStream`` (``rateLimit``) and ``KafkaOffsetReader``
(``getOffsetRangesFromResolvedOffsets``): the facts and messages, as plain functions of offsets.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterable, Mapping

import attrs

from ._data_loss import added_partition, earliest_unknown, offset_changed, partitions_gone, scala_set
from ._offsets import OffsetRange, PartitionOffsets, TopicAndPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "StartingOffsets",
    "rate_limit",
    "resolve_ranges",
]

LATEST = -1  # in a startingOffsets JSON: this partition's end when the query starts (Spark's value)
EARLIEST = -2  # in a startingOffsets JSON: this partition's first record still held
JSON_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'


@attrs.frozen
class StartingOffsets:
    """Where a new query starts (Spark's ``startingOffsets``): ``"earliest"``, ``"latest"`` or given offsets per partition.

    ``offsets`` holds the given ones (``-1``: latest, ``-2``: earliest), only for ``"specific"``.
    """

    kind: str
    offsets: Mapping[TopicAndPartition, int] = attrs.field(factory=dict)

    @classmethod
    def parse(cls, value: Any) -> StartingOffsets:
        """Read the option: ``"earliest"``/``"latest"`` (any case), Spark's JSON text, or a dict shaped like that JSON.

        Raises:
            ValueError: anything else, with Spark's message naming the expected shape.
        """
        if isinstance(value, str):
            word = value.strip().lower()
            if word in ("earliest", "latest"):
                return cls(word)
            try:
                raw = json.loads(value)
            except ValueError:
                raise ValueError(f"Expected e.g. {JSON_EXAMPLE}, got {value}") from None
        else:
            raw = value
        shown = value if isinstance(value, str) else json.dumps(value, default=repr)
        if not isinstance(raw, Mapping):
            raise ValueError(f"Expected e.g. {JSON_EXAMPLE}, got {shown}")
        offsets: dict[TopicAndPartition, int] = {}
        for topic, parts in raw.items():
            if not isinstance(topic, str) or not topic or not isinstance(parts, Mapping):
                raise ValueError(f"Expected e.g. {JSON_EXAMPLE}, got {shown}")
            for part, offset in parts.items():
                number = int(part) if isinstance(part, str) and part.isdigit() else part
                if type(number) is not int or number < 0 or type(offset) is not int or offset < EARLIEST:
                    raise ValueError(f"Expected e.g. {JSON_EXAMPLE}, got {shown}")
                offsets[TopicAndPartition(topic, number)] = offset
        return cls("specific", offsets)

    def check_partitions(self, assigned: Iterable[TopicAndPartition]) -> None:
        """Given offsets must name exactly the subscribed topics' partitions (Spark's rule and message).

        Raises:
            ValueError: they name others, or leave some out.
        """
        have = set(assigned)
        if self.kind == "specific" and set(self.offsets) != have:
            raise ValueError(
                "If startingOffsets contains specific offsets, you must specify all TopicPartitions.\n"
                "Use -1 for latest, -2 for earliest, if you don't care.\n"
                f"Specified: {scala_set(self.offsets)} Assigned: {scala_set(have)}")

    def __str__(self) -> str:
        if self.kind != "specific":
            return self.kind
        by_topic: dict[str, dict[str, int]] = {}
        for tp in sorted(self.offsets):
            by_topic.setdefault(tp.topic, {})[str(tp.partition)] = self.offsets[tp]
        return json.dumps(by_topic, separators=(",", ":"))


def rate_limit(limit: int, start: PartitionOffsets, until: PartitionOffsets,
               new_starts: PartitionOffsets) -> dict[TopicAndPartition, int]:
    """At most about ``limit`` offsets past ``start``, split over the partitions in proportion to their lag.

    Spark's ``maxOffsetsPerTrigger`` arithmetic: a partition with ``size`` offsets to go of
    ``total`` gets ``limit * size / total`` of them, rounded down, except that a share below
    one is rounded up (small partitions are never starved), and never past ``until``.
    ``new_starts`` gives the first offset of partitions missing from ``start`` (new ones); a
    partition whose start is unknown (or that has nothing to read) keeps its ``until``.
    """
    begins = {tp: start[tp] if tp in start else new_starts[tp] for tp in until if tp in start or tp in new_starts}
    sizes = {tp: until[tp] - begin for tp, begin in begins.items() if until[tp] - begin > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    out: dict[TopicAndPartition, int] = {}
    for tp, end in until.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begins[tp] + share)
    return out


def resolve_ranges(start: PartitionOffsets, end: PartitionOffsets, new_starts: PartitionOffsets,
                   report: Callable[[str], None]) -> list[OffsetRange]:
    """The ranges a batch reads from ``start`` to ``end``, after Spark's data-loss checks.

    ``new_starts`` holds the first offsets of the partitions of ``end`` missing from ``start``
    (new partitions, read from their earliest offset) that still exist. ``report`` is called
    with Spark's text for each loss found: a new partition that is gone again, one that starts
    past 0, partitions of ``start`` that are gone, and a partition whose end is before its
    start (the topic was deleted and made again); it raises or warns (``failOnDataLoss``). The
    partitions whose start is unknown, and those that went backwards, are left out.
    """
    new = set(end) - set(start)
    if set(new_starts) != new:
        report(earliest_unknown(new - set(new_starts)))
    for tp in sorted(new_starts):
        if new_starts[tp] != 0:
            report(added_partition(tp, new_starts[tp]))
    deleted = set(start) - set(end)
    if deleted:
        report(partitions_gone(deleted))
    ranges = []
    for tp in sorted(end):
        begin = start[tp] if tp in start else new_starts.get(tp)
        if begin is None:
            continue
        until = end[tp]
        if until < begin:
            report(offset_changed(tp, begin, until))
            continue
        ranges.append(OffsetRange(tp.topic, tp.partition, begin, until))
    return ranges
