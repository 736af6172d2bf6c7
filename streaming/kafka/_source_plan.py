"""Planning a Kafka source's micro-batches, without I/O: the read limit and data-loss checks.

Structured Streaming's ``KafkaMicroBatchStream`` (``rateLimit``) and ``KafkaOffsetReader``
(``getOffsetRangesFromResolvedOffsets``): the facts and messages, as plain functions of offsets.
"""

from __future__ import annotations

import math
from typing import Callable

from ._data_loss import added_partitions, earliest_unknown, offset_changed, partitions_gone
from ._offsets import OffsetRange, PartitionOffsets, TopicAndPartition

__all__ = ["rate_limit", "resolve_ranges"]

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
    for detail in added_partitions(new_starts):
        report(detail)
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
