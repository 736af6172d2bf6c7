"""Offsets a program asks to commit to its consumer group, committed by the driver at the next batch (Spark 0-10's ``CanCommitOffsets``).

``commitAsync`` only queues; the stream commits what is queued when it plans its next batch,
each partition at the highest ``untilOffset`` queued for it, then calls the newest callback.
Recovery never reads these commits: the offsets log is what a restart resumes from.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence

from scheduler import library_logger

from ._client import KafkaError, client_config, require_kafka
from ._offsets import OffsetRange, TopicAndPartition

__all__ = ["CommitCallback", "CommitQueue"]

CommitCallback = Callable[[dict[TopicAndPartition, int], "Exception | None"], Any]
"""Called after a commit with the offsets committed and ``None``, or the error (Spark's ``OffsetCommitCallback``)."""


class CommitQueue:
    """The ranges queued by ``commitAsync`` until the driver commits them (thread-safe).

    Args:
        params: the stream's Kafka parameters (their ``group.id`` is the group committed to).
    """

    def __init__(self, params: Mapping[str, Any]) -> None:
        """An empty queue for the group of ``params``."""
        self._params = dict(params)
        self.group_id: str | None = None if params.get("group.id") in (None, "") else str(params["group.id"])
        self._lock = threading.Lock()
        self._queued: list[OffsetRange] = []
        self._callback: CommitCallback | None = None
        self._consumer: Any = None
        self._log = library_logger("aiodstream.kafka", component="CommitQueue", group=self.group_id)

    def add(self, ranges: Sequence[OffsetRange], callback: CommitCallback | None) -> None:
        """Queue ``ranges``' ends; ``callback`` replaces the one called after the next commit, as Spark's does (``None``,
        Spark's ``commitAsync(offsetRanges)``, leaves none).

        Raises:
            TypeError: ``ranges`` is not a list of ``OffsetRange``.
            ValueError: the stream's Kafka parameters have no ``group.id``.
        """
        if not isinstance(ranges, (list, tuple)) or not all(isinstance(r, OffsetRange) for r in ranges):
            raise TypeError(f"offsetRanges should be a list of OffsetRange, got {ranges!r:.80}")
        if callback is not None and not callable(callback):
            raise TypeError(f"callback should be a function(offsets, exception), got {callback!r:.80}")
        if self.group_id is None:
            raise ValueError("commitAsync commits to the consumer group named by kafkaParams' group.id, and they have none; "
                             "pass e.g. {'group.id': 'my-app', ...} to createDirectStream")
        with self._lock:
            self._queued.extend(ranges)
            self._callback = callback

    def take(self) -> tuple[dict[TopicAndPartition, int], CommitCallback | None]:
        """What is queued, each partition at its highest ``untilOffset``, and the callback; the queue is emptied."""
        with self._lock:
            queued, self._queued = self._queued, []
            callback = self._callback
        offsets: dict[TopicAndPartition, int] = {}
        for rng in queued:
            tp = rng.topicAndPartition()
            offsets[tp] = max(offsets.get(tp, rng.untilOffset), rng.untilOffset)
        return offsets, callback

    def commit_queued(self) -> None:
        """Commit what is queued to the group (blocking: the planning thread calls it), then call the callback.

        A failed commit goes to the callback, or without one to the log: the stream goes on, as
        Spark's does (the offsets log, not the group, is what a restart resumes from).
        """
        offsets, callback = self.take()
        if not offsets:
            return
        error: Exception | None = None
        try:
            kafka = require_kafka()
            if self._consumer is None:
                config = client_config(self._params, drop=("auto.offset.reset", "enable.auto.commit"))
                config["enable.auto.commit"] = False
                self._consumer = kafka.Consumer(config)
            self._consumer.commit(offsets=[kafka.TopicPartition(tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())],
                                  asynchronous=False)
        except Exception as exc:  # the client's KafkaException, or a connection failure
            error = KafkaError(f"committing offsets {_describe(offsets)} to group {self.group_id!r} failed: {exc}")
        if callback is not None:
            callback(offsets, error)
        elif error is not None:
            self._log.warning("offset commit failed", error=str(error))

    def close(self) -> None:
        """Close the committing consumer (what is still queued is not committed, as in Spark)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


def _describe(offsets: Mapping[TopicAndPartition, int]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}: {off}" for tp, off in sorted(offsets.items()))
