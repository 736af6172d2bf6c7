"""Writing one task's records to a Kafka topic, idempotently or in a transaction with its commit marker (Spark's
``KafkaWriteTask`` and ``KafkaDataWriter``, plus the exactly-once mode Spark's Kafka sink never had).

Every engine's Kafka sink (DStreams, continuous mode, the Pipeline) calls :func:`write_records` once per task and
batch (or epoch); it keeps one producer per process and transactional.id (one ``init_transactions`` each). Blocking.
"""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any, Callable, Iterable, Mapping

import attrs

from scheduler import library_logger

from ._client import KafkaError, as_bytes, check_settings, client_config, require_kafka
from ._markers import DEFAULT_MARKER_TOPIC, MarkerStore, MarkerValue, marker_key

__all__ = ["KafkaWriter", "SinkSettings", "WriteResult", "close_writers", "sink_settings", "utf8_encoder", "write_records"]

Encoder = Callable[[Any], Any]

# Settings the writer decides itself: the caller's values would break its promise.
OWNED = ("transactional.id", "enable.idempotence", "acks", "isolation.level", "group.id", "enable.auto.commit",
         "auto.offset.reset")


def utf8_encoder(value: Any) -> bytes | None:
    """The default serialiser: ``None`` stays ``None`` (no key; a null value), bytes stay bytes, else ``str(value)`` in UTF-8."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return str(value).encode("utf-8")


@attrs.frozen
class WriteResult:
    """What one task's write did: how many records it produced, or that its batch was committed before and skipped."""

    task: int
    batch_id: int | None
    records: int
    skipped: bool = False


@attrs.frozen
class SinkSettings:
    """What every task of a Kafka sink needs (picklable with cloudpickle: it travels to the executors).

    Build it with :func:`sink_settings`, which checks the arguments.
    """

    topic: str
    params: tuple[tuple[str, Any], ...]
    key: Encoder | None
    value: Encoder
    transactional: bool
    sink_id: str | None
    marker_topic: str
    timeout_s: float

    @property
    def config(self) -> dict[str, Any]:
        """The caller's Kafka parameters as a dict."""
        return dict(self.params)

    def transactional_id(self, task: int) -> str:
        """Task ``task``'s transactional.id: ``aiodstream-<sink id>-<task>``, stable across runs and restarts."""
        return f"aiodstream-{self.sink_id}-{task}"

    def encode(self, record: Any) -> tuple[bytes | None, bytes | None]:
        """``record``'s key and value as bytes (a serialiser may return str, taken as UTF-8, bytes or None).

        Raises:
            TypeError: a serialiser returned something else.
        """
        return (None if self.key is None else _bytes(self.key(record), "key")), _bytes(self.value(record), "value")


def _bytes(out: Any, what: str) -> bytes | None:
    try:
        return as_bytes(out)
    except TypeError:
        raise TypeError(f"the Kafka sink's {what} serialiser must return bytes, str or None, got {type(out).__name__} {out!r}; "
                        f"return e.g. str(x).encode()") from None


def sink_settings(topic: str, kafkaParams: Mapping[str, Any], *, key: Encoder | None = None,  # noqa: N803
                  value: Encoder | None = None, transactional: bool = False, sink_id: str | None = None,
                  marker_topic: str = DEFAULT_MARKER_TOPIC, timeout_s: float = 60.0) -> SinkSettings:
    """Check a Kafka sink's arguments and make its :class:`SinkSettings`.

    Raises:
        TypeError: ``topic``, ``sink_id`` or ``marker_topic`` not a str, ``key``/``value`` not callable,
            ``kafkaParams`` not a dict.
        ValueError: an empty topic, no brokers, a transactional sink without ``sink_id``, or a setting the
            writer owns (``transactional.id``, ``enable.idempotence``, ``acks``).
    """
    if not isinstance(topic, str) or not topic:
        raise TypeError(f"topic must be a non-empty str, got {topic!r}")
    if key is not None and not callable(key):
        raise TypeError(f"key must be a function of a record returning its key (bytes, str or None), got {key!r}")
    if value is not None and not callable(value):
        raise TypeError(f"value must be a function of a record returning its value (bytes, str or None), got {value!r}")
    config = client_config(kafkaParams)  # checks the brokers and the spelling
    check_settings(config)
    owned = sorted(name for name in OWNED[:3] if name in config)
    if owned:
        raise ValueError(f"the Kafka sink sets {', '.join(owned)} itself (idempotent, or transactional with "
                         f"transactional=True and sink_id=), got {owned[0]}={config[owned[0]]!r}; remove it from kafkaParams")
    if not isinstance(transactional, bool):
        raise TypeError(f"transactional must be a bool, got {transactional!r}")
    if sink_id is not None and not isinstance(sink_id, str):
        raise TypeError(f"sink_id must be a str, got {sink_id!r}")
    if sink_id is not None and (not sink_id or "/" in sink_id):
        raise ValueError(f"sink_id must be a non-empty str without '/', got {sink_id!r}")
    if transactional and sink_id is None:
        raise ValueError("transactional=True needs sink_id=: a name of this sink that stays the same across restarts of "
                         "its query and that no other live sink uses (it keys the transactional.ids and commit markers)")
    if not isinstance(marker_topic, str) or not marker_topic:
        raise TypeError(f"marker_topic must be a non-empty str, got {marker_topic!r}")
    kept = {name: v for name, v in kafkaParams.items() if name not in OWNED}
    return SinkSettings(topic, tuple(sorted(kept.items())), key, value if value is not None else utf8_encoder,
                        transactional, sink_id, marker_topic, float(timeout_s))


def producer_config(params: Mapping[str, Any], transactional_id: str | None) -> dict[str, Any]:
    """Producer settings: idempotent, ``acks=all``, Java's key partitioner (murmur2) unless given, and the transactional.id if any."""
    config = client_config(params, drop=OWNED)
    config.update({"enable.idempotence": True, "acks": "all"})
    config.setdefault("partitioner", "murmur2_random")  # keyed records land where the Java client puts them
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    return config


class KafkaWriter:
    """One producer: idempotent, or transactional with a stable transactional.id (``init_transactions`` once, here).

    Thread-safe: writes through one writer run one at a time.

    Args:
        params: client settings (either spelling).
        transactional_id: makes a transactional writer; ``None``: idempotent.
        timeout_s: how long a flush, commit or abort may take.
    """

    def __init__(self, params: Mapping[str, Any], *, transactional_id: str | None = None, timeout_s: float = 60.0) -> None:
        """Create the producer (a transactional one registers its id with the broker, aborting that id's open transaction)."""
        self._kafka = require_kafka()
        self.transactional_id = transactional_id
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self.broken = False
        try:
            self._producer = self._kafka.Producer(producer_config(params, transactional_id))
        except self._kafka.KafkaException as error:
            raise KafkaError(f"the Kafka sink's producer could not be created: {error.args[0].str()}") from None
        if transactional_id is not None:
            try:
                self._producer.init_transactions(timeout_s)
            except self._kafka.KafkaException as error:
                raise KafkaError(f"init_transactions for transactional.id {transactional_id!r} failed: {error.args[0]}") from None

    def _produce_all(self, topic: str, records: Iterable[tuple[bytes | None, bytes | None]], errors: list[str]) -> int:
        producer = self._producer

        def delivered(error: Any, _message: Any) -> None:
            if error is not None and len(errors) < 3:
                errors.append(error.str())

        count = 0
        for key, value in records:
            while True:
                try:
                    producer.produce(topic, value, key, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
            count += 1
            if count % 1000 == 0:
                producer.poll(0)
        return count

    def write(self, topic: str, records: Iterable[tuple[bytes | None, bytes | None]]) -> int:
        """Produce ``records`` (key, value) to ``topic`` and wait until every one is acknowledged; returns how many.

        Raises:
            KafkaError: a record could not be delivered (the others may have been).
        """
        with self._lock:
            errors: list[str] = []
            try:
                count = self._produce_all(topic, records, errors)
                remaining = self._producer.flush(self._timeout_s)
            except self._kafka.KafkaException as error:
                raise KafkaError(f"writing to {topic!r} failed: {error.args[0]}") from None
            if errors or remaining:
                raise KafkaError(f"writing to {topic!r} failed: {errors or [f'{remaining} records unacknowledged']}")
            return int(count)

    def write_transaction(self, topic: str, records: Iterable[tuple[bytes | None, bytes | None]], *, marker_topic: str,
                          marker_partition: int, key: str, marker: MarkerValue,
                          before_commit: Callable[[], None] | None = None) -> int:
        """Produce ``records`` and the marker record (``key``: ``marker``) in one transaction, and commit it.

        ``before_commit`` runs just before the commit (tests inject a crash there). On any error
        the transaction is aborted (nothing of it becomes visible to ``read_committed`` readers)
        and the error raised; a fatal one (fenced by a newer writer of the same id) marks this
        writer :attr:`broken`.
        """
        if self.transactional_id is None:
            raise KafkaError("write_transaction needs a transactional writer (transactional_id=)")
        kafka = self._kafka
        with self._lock:
            producer = self._producer
            errors: list[str] = []
            try:
                producer.begin_transaction()
                count = self._produce_all(topic, records, errors)
                producer.produce(marker_topic, marker.encode(), key.encode(), partition=marker_partition)
                if before_commit is not None:
                    before_commit()
                producer.commit_transaction(self._timeout_s)
            except BaseException as error:
                self._abort(error)
                if isinstance(error, kafka.KafkaException):
                    raise KafkaError(f"the transaction of {self.transactional_id!r} writing to {topic!r} failed and was "
                                     f"aborted: {error.args[0]}{'; ' + '; '.join(errors) if errors else ''}") from None
                raise
            return int(count)

    def _abort(self, cause: BaseException) -> None:
        kafka = self._kafka
        if isinstance(cause, kafka.KafkaException) and cause.args[0].fatal():
            self.broken = True
            return
        try:
            self._producer.abort_transaction(self._timeout_s)
        except kafka.KafkaException:
            # The producer's transaction state is unknown (a commit still in flight, a begin that
            # failed): a new producer's init_transactions settles it, so this one is not reused.
            self.broken = True

    def close(self) -> None:
        """Wait for what is still queued (idempotent writers) and drop the producer."""
        with self._lock:
            self._producer.flush(self._timeout_s)

    def __repr__(self) -> str:
        kind = f"transactional {self.transactional_id!r}" if self.transactional_id else "idempotent"
        return f"<KafkaWriter {kind}{' broken' if self.broken else ''}>"


class _Writers:
    """The process's writers and marker stores, one per (settings, transactional.id) and per (settings, marker topic)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers: dict[tuple[str, str | None], KafkaWriter] = {}
        self._markers: dict[tuple[str, str], MarkerStore] = {}
        self._id_locks: dict[str, threading.Lock] = {}

    def lock_for(self, transactional_id: str) -> threading.Lock:
        """The lock that serialises this process's check-and-write for ``transactional_id``."""
        with self._lock:
            return self._id_locks.setdefault(transactional_id, threading.Lock())

    @staticmethod
    def _identity(settings: SinkSettings) -> str:
        return json.dumps([[k, repr(v)] for k, v in settings.params])

    def writer(self, settings: SinkSettings, transactional_id: str | None) -> KafkaWriter:
        key = (self._identity(settings), transactional_id)
        with self._lock:
            found = self._writers.get(key)
            if found is not None and not found.broken:
                return found
        # init_transactions may take a while: outside the lock (callers of one transactional.id
        # hold its lock_for, so no second writer of the same id is built concurrently).
        writer = KafkaWriter(settings.config, transactional_id=transactional_id, timeout_s=settings.timeout_s)
        with self._lock:
            self._writers[key] = writer
        return writer

    def markers(self, settings: SinkSettings) -> MarkerStore:
        key = (self._identity(settings), settings.marker_topic)
        with self._lock:
            store = self._markers.get(key)
            if store is None:
                store = self._markers[key] = MarkerStore(settings.config, settings.marker_topic, timeout_s=settings.timeout_s)
            return store

    def close(self) -> None:
        with self._lock:
            writers, stores = list(self._writers.values()), list(self._markers.values())
            self._writers.clear()
            self._markers.clear()
        for writer in writers:
            writer.close()
        for store in stores:
            store.close()


_WRITERS = _Writers()
_NOTHING = object()


def close_writers() -> None:
    """Flush and forget this process's cached writers and marker stores (the next write makes new ones)."""
    _WRITERS.close()


def write_records(settings: SinkSettings, task: int, batch_id: int | None, records: Iterable[Any], *,
                  before_commit: Callable[[], None] | None = None) -> WriteResult:
    """Write one task's ``records`` of batch (or epoch) ``batch_id`` with this process's writer: what every sink task runs.

    Idempotent settings: the records are produced and acknowledged (a re-run writes them again).
    Transactional settings: unless task ``task``'s marker says ``batch_id`` is committed (then
    nothing is written and the result says ``skipped``), the records and the new marker go in one
    transaction. ``batch_id`` must be stable across re-runs of the batch (its batch time).

    Raises:
        KafkaError: the write or the transaction failed (a transaction is aborted first).
        TypeError: a serialiser returned something other than bytes, str or None.
    """
    iterator = iter(records)
    first = next(iterator, _NOTHING)
    if first is _NOTHING:  # nothing to write, so nothing to write twice: no transaction, no marker
        return WriteResult(task, batch_id, 0)
    encoded = (settings.encode(record) for record in itertools.chain((first,), iterator))
    if not settings.transactional:
        count = _WRITERS.writer(settings, None).write(settings.topic, encoded)
        return WriteResult(task, batch_id, count)
    if batch_id is None:
        raise ValueError("a transactional Kafka sink writes a batch at a time: batch_id must be an int, got None")
    assert settings.sink_id is not None
    key = marker_key(settings.sink_id, task)
    store = _WRITERS.markers(settings)
    transactional_id = settings.transactional_id(task)
    # One check-and-write at a time per transactional.id in this process (a Pipeline's concurrent
    # jobs run in threads): the marker written must extend the one read, or a batch drops out of it.
    with _WRITERS.lock_for(transactional_id):
        # The writer first: a real broker aborts an open transaction of the same id (one a crashed
        # earlier attempt left) when the id registers, so the markers read next are final.
        writer = _WRITERS.writer(settings, transactional_id)
        marker = store.marker(key)
        if marker.committed(batch_id):
            library_logger("aiodstream.kafka", component="KafkaSink", topic=settings.topic, sink=settings.sink_id).info(
                "batch already committed; skipped", batch=batch_id, task=task)
            return WriteResult(task, batch_id, 0, skipped=True)
        after = marker.adding(batch_id)
        count = writer.write_transaction(settings.topic, encoded, marker_topic=store.topic,
                                         marker_partition=store.partition_of(key), key=key, marker=after,
                                         before_commit=before_commit)
        store.remember(key, after)
    return WriteResult(task, batch_id, count)
