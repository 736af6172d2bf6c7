"""KafkaSource: Kafka topics as a replayable source of a :class:`~streaming.pipeline.Pipeline` (no Spark).

Structured Streaming's Kafka micro-batch source (``KafkaMicroBatchStream``) on an event loop:
offsets in the checkpoint as Spark writes them, ranges read by worker threads.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import uuid
from typing import Any, Callable, Mapping, Sequence

import anyio
import anyio.to_thread
import attrs

from scheduler import CheckpointPath, CorruptCheckpointError, Offset, library_logger

from ._client import KafkaClusterView, KafkaError, check_settings, client_config, reads_committed, require_kafka
from ._data_loss import report_data_loss
from ._offsets import OffsetRange, TopicAndPartition, current_partitions, format_partition_offsets, parse_partition_offsets
from ._reader import RangeReader, executor_config
from ._source_options import StartingOffsets, subscribe_topics
from ._source_plan import rate_limit, resolve_ranges

__all__ = ["KafkaRecord", "KafkaSource"]

# confluent-kafka's timestamp kinds -> the Java client's TimestampType ids (Spark's ``timestampType`` column).
TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}
INITIAL_OFFSETS_VERSION = "v1"


@attrs.frozen
class KafkaRecord:
    """One Kafka record as a :class:`KafkaSource` gives it (the columns of Structured Streaming's Kafka source).

    ``key`` and ``value`` are the raw bytes (``None`` for a null), or what the source's
    ``key_decoder`` / ``value_decoder`` made of them (a null stays ``None``). ``timestamp_ms`` is the record's timestamp
    in epoch milliseconds; ``timestamp_type`` Kafka's kind of it (``0`` CreateTime, ``1``
    LogAppendTime, ``-1`` none). ``headers`` is a tuple of ``(key, value bytes)`` pairs with
    ``includeHeaders=True``, else ``None``.
    """

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp_ms: int
    timestamp_type: int
    headers: tuple[tuple[str, bytes | None], ...] | None = None


def _check_params(params: Mapping[str, Any], commit_to_group: bool) -> None:
    if "auto.offset.reset" in params:
        raise ValueError(
            "Kafka option 'auto.offset.reset' is not supported by KafkaSource, got "
            f"{params['auto.offset.reset']!r}; set startingOffsets to 'earliest' or 'latest' instead (it applies when "
            "a query starts without a checkpoint; a restart resumes where the checkpoint left off)")
    if "enable.auto.commit" in params:
        raise ValueError("Kafka option 'enable.auto.commit' is not supported")
    if commit_to_group and not params.get("group.id"):
        raise ValueError("commit_to_group=True needs 'group.id' in kafkaParams: the consumer group the processed "
                         "offsets are committed to")


def _decoder(value: Any, name: str) -> Callable[[Any], Any] | None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be a function of the raw bytes (or None for the bytes), got {value!r}")
    return value  # type: ignore[no-any-return]


class KafkaSource:
    """Kafka topics as a :class:`~streaming.pipeline.ReplayableSource`: each batch is one offset range per partition.

    Offsets are Structured Streaming's Kafka offsets JSON (``{"topic":{"0":23}}``: for each
    partition, the next offset to read), so the checkpoint's offsets log reads as Spark's does,
    and a restart re-reads exactly the logged range of an uncommitted batch. A batch's records
    are :class:`KafkaRecord` objects, partition after partition (topics and partitions in
    sorted order), each partition's in offset order.

    Every client call (offsets, metadata, reading, group commits) runs in a worker thread
    under a :class:`anyio.CapacityLimiter` of ``reader_threads``; the partitions of a batch are
    read concurrently, one consumer each (kept for the next batch). A read that is cancelled
    finishes its range first (a client call cannot be interrupted; ``poll_timeout_s`` bounds
    it when the broker is gone). Works on both anyio backends. :meth:`aclose` (the pipeline
    calls it when its runtime stops) closes the clients; a later call makes new ones.

    Args:
        kafkaParams: client settings, in the modern or the 0.8 spelling (``bootstrap.servers``
            or ``metadata.broker.list`` required). ``isolation.level=read_committed`` makes
            batches end at the last stable offset. Not allowed: ``auto.offset.reset`` (use
            ``startingOffsets``) and ``enable.auto.commit``.
        subscribe: the topics (a list, or Spark's comma-separated text).
        startingOffsets: where a query without a checkpoint starts: ``"latest"`` (the
            default), ``"earliest"``, or offsets per partition as Spark's JSON text (or a dict of
            that shape), ``-1`` meaning latest and ``-2`` earliest; it must name every partition.
            Resolved once, when the query first starts, and kept in the checkpoint.
        maxOffsetsPerTrigger: at most about this many offsets per batch, split over the
            partitions in proportion to their lag (``None``: everything available).
        failOnDataLoss: whether records that are gone (aged out, a deleted topic or partition,
            offsets that went backwards) fail the batch with Spark's message, or are logged as a
            warning and skipped.
        includeHeaders: fill :attr:`KafkaRecord.headers`.
        key_decoder, value_decoder: turn the raw bytes into the record's key / value (in the
            reading thread); ``None`` keeps the bytes. A null key or value (a tombstone) stays
            ``None`` without a call, as Spark's null column casts to null.
        commit_to_group: after each batch commits, commit its end offsets to the consumer group
            ``kafkaParams["group.id"]``, so that the usual tools show the query's lag. Only for
            monitoring: recovery reads the checkpoint, never the group.
        reader_threads: how many client calls may run at once, so how many partitions are read
            concurrently. Turning records into :class:`KafkaRecord` objects holds the GIL, so
            more threads buy little throughput and take turns from the event loop; they pay
            when each range waits on the network (many partitions on a distant broker).
        poll_timeout_s: how long a range may wait for a record before the batch fails
            (Spark's ``kafkaConsumer.pollTimeoutMs``).
        name: the description in progress reports (default ``KafkaV2[Subscribe[<topics>]]``).

    Attributes:
        reader_group_id: the ``group.id`` of the reading consumers (Spark's ``...-executor``
            one): they are assigned their partitions and never join it nor commit.
    """

    def __init__(
        self,
        kafkaParams: Mapping[str, Any],  # noqa: N803 - Spark's option names
        subscribe: str | Sequence[str],
        *,
        startingOffsets: Any = "latest",  # noqa: N803
        maxOffsetsPerTrigger: int | None = None,  # noqa: N803
        failOnDataLoss: bool = True,  # noqa: N803
        includeHeaders: bool = False,  # noqa: N803
        key_decoder: Callable[[bytes], Any] | None = None,
        value_decoder: Callable[[bytes], Any] | None = None,
        commit_to_group: bool = False,
        reader_threads: int = 2,
        poll_timeout_s: float = 120.0,
        name: str | None = None,
    ) -> None:
        """Check the options; nothing connects until the first call."""
        self.topics = subscribe_topics(subscribe)
        if maxOffsetsPerTrigger is not None and (type(maxOffsetsPerTrigger) is not int or maxOffsetsPerTrigger < 1):
            raise ValueError(f"maxOffsetsPerTrigger must be a positive int or None, got {maxOffsetsPerTrigger!r}")
        # Python keywords, so bools only (not option_flag's "true"/"false" text, which the DStream's kafkaParams and the
        # continuous source's Spark-style options take): a "false" string here is refused rather than read as truthy.
        for option, flag in (("failOnDataLoss", failOnDataLoss), ("includeHeaders", includeHeaders),
                             ("commit_to_group", commit_to_group)):
            if type(flag) is not bool:
                raise TypeError(f"{option} must be True or False, got {flag!r}")
        if type(reader_threads) is not int or reader_threads < 1:
            raise ValueError(f"reader_threads must be a positive int, got {reader_threads!r}")
        if isinstance(poll_timeout_s, bool) or not isinstance(poll_timeout_s, (int, float)) or poll_timeout_s <= 0:
            raise ValueError(f"poll_timeout_s must be a positive number of seconds, got {poll_timeout_s!r}")
        self.starting_offsets = StartingOffsets.parse(startingOffsets)
        unknown = sorted({tp.topic for tp in self.starting_offsets.offsets} - set(self.topics))
        if unknown:
            raise ValueError(f"startingOffsets names topics that are not subscribed: {unknown}; subscribed: {list(self.topics)}")
        _check_params(kafkaParams, commit_to_group)
        self._params = dict(kafkaParams)
        check_settings(client_config(self._params))  # the same checks the clients will make, now
        self.max_offsets_per_trigger = maxOffsetsPerTrigger
        self.fail_on_data_loss = failOnDataLoss
        self.include_headers = includeHeaders
        self.commit_to_group = commit_to_group
        self._key_decoder = _decoder(key_decoder, "key_decoder")
        self._value_decoder = _decoder(value_decoder, "value_decoder")
        self._reader_threads = reader_threads
        self._poll_timeout_s = float(poll_timeout_s)
        self._name = name or f"KafkaV2[Subscribe[{', '.join(self.topics)}]]"
        self._committed_only = reads_committed(self._params)
        self.reader_group_id = f"aiodstream-kafka-source-{uuid.uuid4()}-executor"
        self._reader_config = executor_config(self._params, group_id=self.reader_group_id)
        self._log = library_logger("aiodstream.kafka", component="KafkaSource", source=self._name)
        self._clients_lock = threading.Lock()  # the clients are made in worker threads, maybe two at once
        # Moved on by each aclose(): a question a stop abandoned (its thread's _asking holds the number it was asked
        # under) makes no client and writes nothing once its run was closed.
        self._run_number = 0
        self._view: KafkaClusterView | None = None
        self._group: Any = None
        self._readers: list[RangeReader] = []
        self._limiter: anyio.CapacityLimiter | None = None
        self._initial: dict[TopicAndPartition, int] | None = None
        self._metadata: CheckpointPath | None = None

    # -- identity --

    @property
    def description(self) -> str:
        """``KafkaV2[Subscribe[<topics>]]`` (Spark's name for the source) unless named."""
        return self._name

    @property
    def checkpoint_identity(self) -> dict[str, Any]:
        """The subscribed topics: a checkpoint written for other topics is refused at restart."""
        return {"subscribe": sorted(self.topics)}

    # -- threads --

    async def _run(self, fn: Callable[..., Any], *args: Any, abandon: bool = False) -> Any:
        # abandon: a question to the cluster view, which a stop need not wait for (a broker that does not answer holds
        # it for the view's timeout; closing the view only drops it). Reads and commits use clients a close would end.
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._reader_threads)
        call = functools.partial(_asked, self._run_number, fn, *args) if abandon else functools.partial(fn, *args)
        return await anyio.to_thread.run_sync(call, limiter=self._limiter, abandon_on_cancel=abandon)

    def _check_open(self) -> None:
        run = _asking.get()
        if run is not None and run != self._run_number:
            raise KafkaError(f"{self._name} was closed while this question to the cluster was asked (a stop left it)")

    def _cluster(self) -> KafkaClusterView:
        with self._clients_lock:
            self._check_open()
            if self._view is None:
                self._view = KafkaClusterView(self._params)
            return self._view

    def _assigned(self) -> list[TopicAndPartition]:
        return current_partitions(self._cluster().partitions(self.topics))

    def _earliest_of(self, tps: set[TopicAndPartition]) -> dict[TopicAndPartition, int]:
        """The first offsets of those of ``tps`` that exist now (new partitions start there, as in Spark)."""
        if not tps:
            return {}
        existing = [tp for tp in self._assigned() if tp in tps]
        return self._cluster().earliest_offsets(existing)

    # -- starting offsets --

    async def attach_checkpoint(self, metadata_path: CheckpointPath) -> None:
        """Keep the starting offsets in ``metadata_path`` (the pipeline's ``sources/<n>``), as Spark's initial-offsets log.

        The first start resolves ``startingOffsets`` and writes them there (file ``0``); every
        later start reads them back, so a batch planned from the start re-reads the same range.
        """
        self._metadata = metadata_path
        self._initial = await self._run(self._load_or_resolve_initial, abandon=True)

    def _initial_file(self) -> CheckpointPath:
        assert self._metadata is not None
        return self._metadata / "0"

    def _load_or_resolve_initial(self) -> dict[TopicAndPartition, int]:
        if self._metadata is not None:
            data = self._initial_file().read_bytes()
            if data is not None:
                return self._parse_initial(data)
        initial = self._resolve_initial()
        if self._metadata is not None:
            self._check_open()  # nothing written for a run already closed
            self._metadata.mkdirs()
            text = f"{INITIAL_OFFSETS_VERSION}\n{format_partition_offsets(initial)}"
            if not self._initial_file().create_new(text.encode("utf-8")):  # another writer won: theirs counts
                return self._parse_initial(self._initial_file().read_bytes() or b"")
            self._log.info("initial offsets", offsets=format_partition_offsets(initial))
        return initial

    def _parse_initial(self, data: bytes) -> dict[TopicAndPartition, int]:
        text = data.decode("utf-8", errors="replace").lstrip("\x00")  # Spark's own files start with a NUL byte
        version, _, body = text.partition("\n")
        if version.strip() != INITIAL_OFFSETS_VERSION:
            raise CorruptCheckpointError(f"{self._initial_file()} is damaged: expected the version line "
                                         f"{INITIAL_OFFSETS_VERSION!r}, got {version[:20]!r}; it holds the source's "
                                         "starting offsets", path=str(self._initial_file()))
        return parse_partition_offsets(body.strip(), input_name=self._name)

    def _resolve_initial(self) -> dict[TopicAndPartition, int]:
        return self.starting_offsets.resolve(self._cluster(), self._assigned(), committed_only=self._committed_only)

    async def _start_offsets(self, start: Offset) -> dict[TopicAndPartition, int]:
        if start is not None:
            return parse_partition_offsets(start, input_name=self._name)
        if self._initial is None:  # no checkpoint: resolved once per source object
            initial = await self._run(self._load_or_resolve_initial, abandon=True)
            if self._initial is None:
                self._initial = initial
        return self._initial

    # -- ReplayableSource --

    async def latest_offset(self) -> Offset:
        """Each subscribed partition's end (its high watermark; the last stable offset with read_committed); ``{}`` if none exists.

        The first call of a source without a checkpoint fixes the starting offsets first (Spark's
        ``initialOffset`` before its first ``latestOffset``): ``latest`` resolved after the end would
        put records written in between before the start, a false data loss.
        """
        if self._initial is None:
            await self._start_offsets(None)
        latest: Offset = await self._run(self._latest, abandon=True)
        return latest

    def _latest(self) -> Offset:
        # No partition (no subscribed topic exists) is an empty end, as Spark's: a start that held partitions then
        # differs from it, so a batch runs and reports them gone (failOnDataLoss); from an empty start none runs.
        assigned = self._assigned()
        latest = self._cluster().latest_offsets(assigned, committed_only=self._committed_only) if assigned else {}
        return format_partition_offsets(latest)

    async def plan_offset(self, start: Offset, limit: Offset) -> Offset:
        """Where the batch from ``start`` ends: ``limit``, cut by ``maxOffsetsPerTrigger`` (``start`` itself when nothing is new)."""
        if limit is None:
            return start
        begin = await self._start_offsets(start)
        until = parse_partition_offsets(limit, input_name=self._name)
        end = until
        if self.max_offsets_per_trigger is not None:
            new_starts = await self._run(self._earliest_of, set(until) - set(begin), abandon=True)
            end = rate_limit(self.max_offsets_per_trigger, begin, until, new_starts)
        if end == begin:
            return start
        return format_partition_offsets(end)

    async def read(self, start: Offset, end: Offset) -> Sequence[KafkaRecord]:
        """The records of ``(start, end]``: each partition's range, read concurrently, in partition order.

        Raises:
            KafkaDataLossError: records of the range are gone (with ``failOnDataLoss``), Spark's message.
            KafkaError: the client failed, or a partition gave no record for ``poll_timeout_s``.
        """
        if end is None or end == start:
            return []
        begin = await self._start_offsets(start)
        until = parse_partition_offsets(end, input_name=self._name)
        new_starts = await self._run(self._earliest_of, set(until) - set(begin), abandon=True)
        ranges = [r for r in resolve_ranges(begin, until, new_starts, self._report_data_loss) if r.count > 0]
        results: list[list[KafkaRecord]] = [[] for _ in ranges]
        errors: list[tuple[int, Exception]] = []

        async def read_one(index: int, rng: OffsetRange) -> None:
            reader = self._readers.pop() if self._readers else None
            try:
                reader, results[index] = await self._run(self._read_range, reader, rng)
            except Exception as error:  # the other partitions finish; the first failure (by partition) is raised below
                errors.append((index, error))
                return
            self._readers.append(reader)

        async with anyio.create_task_group() as tg:
            for index, rng in enumerate(ranges):
                tg.start_soon(read_one, index, rng)
        if errors:
            raise min(errors, key=lambda e: e[0])[1]
        return [record for part in results for record in part]

    def _report_data_loss(self, detail: str) -> None:
        report_data_loss(detail, fail=self.fail_on_data_loss, log=self._log)

    def _read_range(self, reader: RangeReader | None, rng: OffsetRange) -> tuple[RangeReader, list[KafkaRecord]]:
        if reader is None:
            reader = RangeReader(self._reader_config, poll_timeout_s=self._poll_timeout_s)
        try:
            return reader, [self._record(m) for m in reader.read(rng, fail_on_data_loss=self.fail_on_data_loss)]
        except BaseException:
            reader.close()  # its consumer may be mid-range: never hand it to the next batch
            raise

    def _record(self, message: Any) -> KafkaRecord:
        key, value = message.key(), message.value()
        kind, timestamp = message.timestamp()
        headers = None
        if self.include_headers:
            headers = tuple((k, v) for k, v in (message.headers() or ()))
        return KafkaRecord(
            message.topic(), message.partition(), message.offset(),
            key if self._key_decoder is None or key is None else self._key_decoder(key),
            value if self._value_decoder is None or value is None else self._value_decoder(value),
            timestamp, TIMESTAMP_TYPES.get(kind, -1), headers)

    async def commit(self, end: Offset) -> None:
        """Everything up to ``end`` is committed; with ``commit_to_group``, tell the consumer group too.

        A failed group commit is logged as a warning and does not fail the query: the group's
        offsets are for monitoring only.
        """
        if end is None or not self.commit_to_group:
            return
        await self._run(self._commit_group, parse_partition_offsets(end, input_name=self._name))

    def _commit_group(self, offsets: Mapping[TopicAndPartition, int]) -> None:
        kafka = require_kafka()
        with self._clients_lock:
            if self._group is None:
                config = client_config(self._params, drop=("enable.auto.commit",))
                config["enable.auto.commit"] = False
                self._group = kafka.Consumer(config)
        wanted = [kafka.TopicPartition(tp.topic, tp.partition, offset) for tp, offset in sorted(offsets.items())]
        try:
            self._group.commit(offsets=wanted, asynchronous=False)
        except kafka.KafkaException as error:
            self._log.warning("committing offsets to the consumer group failed", group=self._params.get("group.id"),
                              error=str(error.args[0]))

    # -- lifetime --

    async def aclose(self) -> None:
        """Close the clients (the pipeline calls it when its runtime stops); a later call makes new ones."""
        with self._clients_lock:
            self._run_number += 1
            view, self._view = self._view, None
        readers, self._readers = self._readers, []
        group, self._group = self._group, None

        def close_all() -> None:
            for reader in readers:
                reader.close()
            if group is not None:
                group.close()
            if view is not None:
                view.close()

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(close_all)

    async def __aenter__(self) -> KafkaSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (f"<KafkaSource {self._name!r} [startingOffsets: {self.starting_offsets} | "
                f"idle readers: {len(self._readers)}]>")


_asking: contextvars.ContextVar[int | None] = contextvars.ContextVar("aiodstream_kafka_source_run", default=None)


def _asked(run: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread, as a question asked under the source's run ``run`` (see ``_check_open``)."""
    _asking.set(run)  # the thread's own context: anyio runs each call in a copy
    return fn(*args)
