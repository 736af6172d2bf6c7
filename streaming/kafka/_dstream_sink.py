"""``write_to_kafka``: a DStream output operation writing every batch to a Kafka topic from the executors (Spark's
Kafka sink, ``df.write.format("kafka")``, for DStreams, over ``foreachRDD``; pyspark 2.4 had none).
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, Callable, Iterator, Mapping

from scheduler import library_logger

from ..dstream import DStream
from ._markers import DEFAULT_MARKER_TOPIC
from ._writer import SinkSettings, WriteResult, sink_settings, write_records

__all__ = ["KafkaOutput", "batch_id_of", "write_to_kafka"]


def batch_id_of(time: datetime) -> int:
    """The batch id a DStream sink keys its transactions by: the batch time in ms (the same after a checkpointed restart)."""
    return round(time.timestamp() * 1000)


def _write_partition(settings: SinkSettings, batch_id: int, index: int, records: Iterator[Any]) -> list[WriteResult]:
    """What each task runs, on its executor: its partition's records to Kafka, through the process's cached writer."""
    return [write_records(settings, index, batch_id, records)]


def write_to_kafka(dstream: DStream[Any], topic: str, kafkaParams: Mapping[str, Any], *,  # noqa: N803
                   key: Callable[[Any], Any] | None = None, value: Callable[[Any], Any] | None = None,
                   transactional: bool = False, sink_id: str | None = None,
                   marker_topic: str = DEFAULT_MARKER_TOPIC) -> None:
    """Write every record of ``dstream`` to ``topic``: an output operation (a ``foreachRDD`` over the stream).

    Each task writes its own partition from its executor (records never pass through the
    driver), with a producer kept per executor Python worker. ``value(record)`` gives a
    record's value and ``key(record)`` its key (bytes, str taken as UTF-8, or None); the
    default value is ``str(record)`` in UTF-8 and the default key none. Keyed records go to
    the partition the Java client would choose (murmur2).

    Modes:

    - default, **idempotent**: the producer has ``enable.idempotence=true`` and ``acks=all``, so
      a write is neither lost nor doubled by the client's retries; a batch that runs again (a
      task retry, a restart re-running the last batch) writes its records again: at least once.
    - ``transactional=True`` with ``sink_id=``, **exactly once**: task ``p`` of every batch
      writes in one Kafka transaction with transactional.id ``aiodstream-<sink_id>-<p>`` and
      puts a commit marker (key ``<sink_id>/<p>``, the batch time) into ``marker_topic`` in the
      same transaction; a re-run of a committed batch finds its marker and writes nothing. The
      batch's RDD must have the same partitions holding the same records when it re-runs
      (a replayable input such as Kafka, deterministic transformations).

    Consumers of ``topic`` must read with ``isolation.level=read_committed`` to see only
    committed batches (librdkafka's default; the Java client's default is read_uncommitted).
    ``sink_id`` must stay the same across restarts of the query and be used by no other sink.

    Raises:
        TypeError, ValueError: bad arguments (see :func:`sink_settings`).
    """
    if not isinstance(dstream, DStream):
        raise TypeError(f"write_to_kafka writes a DStream, got {type(dstream).__name__}")
    settings = sink_settings(topic, kafkaParams, key=key, value=value, transactional=transactional,
                             sink_id=sink_id, marker_topic=marker_topic)
    dstream.foreachRDD(KafkaOutput(settings))


class KafkaOutput:
    """The function ``write_to_kafka`` registers with ``foreachRDD``: ``(time, rdd)`` to a Kafka job over the executors.

    A plain picklable object holding only its :class:`SinkSettings`, so a checkpointed
    context's graph (which pickles every ``foreachRDD`` function) can keep it.
    """

    def __init__(self, settings: SinkSettings) -> None:
        """Write with ``settings``."""
        self.settings = settings

    def __call__(self, time: datetime, rdd: Any) -> None:
        """Run one Spark job writing every partition of ``rdd`` from its task; log one line for the batch."""
        settings = self.settings
        batch_id = batch_id_of(time)
        results: list[WriteResult] = rdd.mapPartitionsWithIndex(
            functools.partial(_write_partition, settings, batch_id)).collect()
        log = library_logger("aiodstream.kafka", component="write_to_kafka", topic=settings.topic, sink=settings.sink_id)
        log.info("batch written", batch=batch_id, records=sum(r.records for r in results),
                 tasks=len(results), skipped=sum(r.skipped for r in results))

    def __repr__(self) -> str:
        return f"<KafkaOutput {self.settings.topic!r}{' transactional' if self.settings.transactional else ''}>"
