"""Where a direct stream's batch ends, from what the cluster says now: Spark's offset planning, without I/O.

Spark 0-10's ``DirectKafkaInputDStream.latestOffsets`` and ``clamp`` for the partitions it
follows, and Structured Streaming's Kafka source for partitions that come and go: a partition
not in the batch's start offsets starts at offset 0 (its first record ever: a new partition, or
a topic that appeared); a partition that disappeared, one whose records before 0 are gone, or
one whose end moved back, is data loss, told in Structured Streaming's words.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import attrs

from ._data_loss import added_partitions, offset_changed, partitions_gone
from ._offsets import TopicAndPartition
from ._rate import KafkaRateSettings, clamp_offsets, max_messages_per_partition

__all__ = ["BatchEnd", "initial_offsets", "plan_batch_end"]


@attrs.frozen
class BatchEnd:
    """A batch's end offsets, and the data losses found on the way (details, in Spark's words, without the instruction).

    Attributes:
        end: the next offset to read after the batch, for each partition the stream follows.
        losses: what was lost, in the order Structured Streaming reports it.
    """

    end: dict[TopicAndPartition, int]
    losses: tuple[str, ...] = ()


def initial_offsets(tps: Sequence[TopicAndPartition], from_offsets: Mapping[TopicAndPartition, int], *, reset: str,
                    earliest: Mapping[TopicAndPartition, int], latest: Mapping[TopicAndPartition, int]) -> dict[TopicAndPartition, int]:
    """Where the stream starts in each partition: ``fromOffsets`` where given, else by ``auto.offset.reset`` (earliest or latest)."""
    chosen = earliest if reset == "earliest" else latest
    return {tp: from_offsets[tp] if tp in from_offsets else chosen[tp] for tp in tps}


def plan_batch_end(start: Mapping[TopicAndPartition, int], tps: Sequence[TopicAndPartition], *,
                   latest: Mapping[TopicAndPartition, int], earliest_of_new: Mapping[TopicAndPartition, int],
                   batch_ms: int, rate: KafkaRateSettings, estimated_rate: float | None) -> BatchEnd:
    """The end of the batch that starts at ``start``, for the partitions ``tps`` the cluster has now.

    Args:
        start: the offsets the batch starts at (the previous batch's end).
        tps: the partitions of the subscribed topics now.
        latest: each partition's next offset now (its high watermark).
        earliest_of_new: the first offset still held of each partition not in ``start``.
        batch_ms: the batch interval.
        rate: the stream's rate settings.
        estimated_rate: what backpressure allows (``KafkaRateSettings.estimated_rate``), or ``None``.
    """
    losses: list[str] = []
    followed = set(tps)
    losses.extend(added_partitions({tp: earliest_of_new[tp] for tp in tps if tp not in start and tp in earliest_of_new}))
    gone = [tp for tp in start if tp not in followed]
    if gone:
        losses.append(partitions_gone(gone))
    for tp in tps:
        if tp in start and latest[tp] < start[tp]:
            losses.append(offset_changed(tp, start[tp], latest[tp]))
    now = {tp: latest[tp] for tp in tps}
    # A new partition's range is logged from 0 (what is gone below its first record is reported above), but its
    # rate limit and lag count from that first record: else a limited stream plans empty batches up to it.
    current = {**earliest_of_new, **start}
    limits = max_messages_per_partition(now, current, batch_ms=batch_ms, settings=rate, estimated_rate=estimated_rate)
    return BatchEnd(clamp_offsets(now, current, limits), tuple(losses))
