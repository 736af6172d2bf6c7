"""KafkaSink: a Pipeline output writing each batch to a Kafka topic, idempotently or exactly once (Spark's Kafka sink
for Structured Streaming, with the transactions it never had).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from ..pipeline import Batch
from ._markers import DEFAULT_MARKER_TOPIC
from ._writer import WriteResult, sink_settings, write_records

__all__ = ["KafkaSink"]


def _all_records(batch: Batch) -> Iterable[Any]:
    for records in batch.inputs.values():
        yield from records


class KafkaSink:
    """Writes each batch's records to ``topic``: ``pipeline.add_output(KafkaSink("out", {"bootstrap.servers": ...}))``.

    A plain callable: the pipeline runs it in a worker thread, so the blocking client never
    runs on the event loop (a running write cannot be cancelled; stop waits for it).

    - Default, **idempotent** (``enable.idempotence=true``, ``acks=all``): a batch that runs
      again after a restart writes its records again (at least once).
    - ``transactional=True`` with ``sink_id=``, **exactly once** with a checkpointed runtime
      and replayable sources: each batch is one Kafka transaction (transactional.id
      ``aiodstream-<sink_id>-0``) holding its records and a commit marker (key ``<sink_id>/0``,
      the batch time) in ``marker_topic``; a batch re-run after a restart finds its marker and
      writes nothing. With async progress tracking a re-run batch may carry other input under
      a new batch time, so the sink then writes at least once.

    Consumers must read ``topic`` with ``isolation.level=read_committed``.

    Args:
        topic: the topic written to.
        kafkaParams: client settings (either spelling; not ``transactional.id``, ``acks``,
            ``enable.idempotence``, which the sink sets).
        key: a record's key (bytes, str as UTF-8, or None); default none.
        value: a record's value; default ``str(record)`` in UTF-8.
        select: which records to write (default: every source's, in source order).
        transactional: exactly once through Kafka transactions (needs ``sink_id``).
        sink_id: this sink's name, the same across restarts, used by no other sink.
        marker_topic: the compacted topic holding the commit markers.
    """

    supports_async_progress_tracking = True
    """A re-run batch is written again (idempotent) or skipped by its marker: allowed with async progress tracking."""

    def __init__(self, topic: str, kafkaParams: Mapping[str, Any], *,  # noqa: N803
                 key: Callable[[Any], Any] | None = None, value: Callable[[Any], Any] | None = None,
                 select: Callable[[Batch], Iterable[Any]] = _all_records, transactional: bool = False,
                 sink_id: str | None = None, marker_topic: str = DEFAULT_MARKER_TOPIC) -> None:
        """Check the arguments (the client connects on the first batch)."""
        if not callable(select):
            raise TypeError(f"select must be a function of a Batch returning its records, got {select!r}")
        self.settings = sink_settings(topic, kafkaParams, key=key, value=value, transactional=transactional,
                                      sink_id=sink_id, marker_topic=marker_topic)
        self._select = select
        self.written = 0
        self.skipped = 0
        self.last: WriteResult | None = None

    def write(self, batch: Batch, *, before_commit: Callable[[], None] | None = None) -> WriteResult:
        """Write ``batch`` (blocking); ``before_commit`` runs just before a transaction commits (tests inject crashes)."""
        result = write_records(self.settings, 0, batch.time.milliseconds, self._select(batch), before_commit=before_commit)
        if result.skipped:
            self.skipped += 1
        else:
            self.written += 1
        self.last = result
        return result

    def __call__(self, batch: Batch) -> None:
        """Write ``batch``: what the pipeline calls, in a worker thread."""
        self.write(batch)

    def __repr__(self) -> str:
        mode = f"transactional {self.settings.sink_id!r}" if self.settings.transactional else "idempotent"
        return f"<KafkaSink {self.settings.topic!r} {mode} [{self.written} written, {self.skipped} skipped]>"
