"""DirectKafkaInputDStream: each batch one offset range per topic partition, read by the executors (Spark's ``DirectKafkaInputDStream``).

The driver only plans: in a worker thread, off the event loop, it asks the cluster for the
topics' partitions and their latest offsets, limits each range by the rate settings, and logs
the batch's end offsets (``{"topic":{"0":23}}``) before the batch runs; each task then reads its
partition's range itself. A restart re-reads exactly the ranges of the batches it re-runs.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import anyio.to_thread

from scheduler import CorruptCheckpointError, InvalidPipelineError, MetadataLog, Offset, ReplayError, StreamInputInfo, Time, library_logger

from ..dstream import StreamEnvironment
from ..inputs import InputDStream
from ._client import KafkaClusterView, KafkaError, check_settings, client_config, offset_reset, reads_committed
from ._commits import CommitCallback, CommitQueue
from ._data_loss import report_data_loss
from ._frame_batch import frame_kafka_rdd
from ._offsets import OffsetRange, TopicAndPartition, current_partitions, format_partition_offsets, parse_partition_offsets
from ._planning import initial_offsets, plan_batch_end
from ._rate import KafkaRateSettings
from ._source_options import option_flag
from ._tasks import ExecutorReading

if TYPE_CHECKING:
    from pyspark import RDD  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["FAIL_ON_DATA_LOSS", "DirectKafkaInputDStream", "fail_on_data_loss", "initial_offsets_log"]

FAIL_ON_DATA_LOSS = "failOnDataLoss"
"""The kafkaParams key saying whether lost records fail the batch (Structured Streaming's source option; default true)."""
_LOG_VERSION = "v1"


def fail_on_data_loss(params: Mapping[str, Any]) -> bool:
    """``failOnDataLoss`` of ``params``: ``True`` unless ``"false"`` (or ``False``).

    Raises:
        ValueError: neither true nor false.
    """
    raw = params.get(FAIL_ON_DATA_LOSS, "true")
    flag = option_flag(raw)
    if flag is None:
        raise ValueError(f"kafkaParams' {FAIL_ON_DATA_LOSS} must be 'true' or 'false', got {raw!r}")
    return flag


def _serialize_offsets(offsets: dict[TopicAndPartition, int]) -> str:
    return f"{_LOG_VERSION}\n{format_partition_offsets(offsets)}\n"


def _parse_offsets(text: str, path: str) -> dict[TopicAndPartition, int]:
    version, _, body = text.partition("\n")
    if version != _LOG_VERSION or not text.endswith("\n"):
        raise CorruptCheckpointError(f"{path} is damaged: a Kafka offsets entry is a {_LOG_VERSION!r} line and the offsets' JSON",
                                     path=path)
    return parse_partition_offsets(body.strip(), input_name=path)


def initial_offsets_log(directory: Any) -> MetadataLog[dict[TopicAndPartition, int]]:
    """Where a direct stream keeps its starting offsets (entry ``0``: Structured Streaming's Kafka source's initial offsets file)."""
    return MetadataLog(directory, _serialize_offsets, _parse_offsets)


class DirectKafkaInputDStream(InputDStream):
    """A direct Kafka stream: per batch one RDD partition per topic partition, each reading its offset range.

    Made by :meth:`KafkaUtils.createDirectStream`; its RDDs are :class:`KafkaRDD`, on Spark Connect
    FrameRDDs read by the server's Python workers (either way ``foreachRDD`` and ``transform``
    functions can call ``rdd.offsetRanges()``).

    Args:
        env: the context's stream environment.
        topics: the topics to read.
        kafka_params: Kafka parameters in either spelling, ``failOnDataLoss`` already taken out.
        from_offsets: where to start in some partitions (the rest by ``auto.offset.reset``).
        convert: what each record becomes (a decoded pair, or the message handler's result).
        fail_on_data_loss: whether lost records fail the batch (else a warning, and the rest is read).
    """

    _input_kind = "kafka"

    def __init__(self, env: StreamEnvironment, topics: Sequence[str], kafka_params: Mapping[str, Any],
                 from_offsets: Mapping[TopicAndPartition, int], convert: Callable[[Any], Any], *, fail_on_data_loss: bool) -> None:
        """Create the stream (no I/O: the cluster is first asked when the first batch is planned)."""
        if env.continuous is not None:  # the words Spark uses for a micro-batch-only source under a continuous trigger
            raise InvalidPipelineError("Data source KafkaUtils.createDirectStream does not support continuous processing.")
        params = dict(kafka_params)
        check_settings(client_config(params))  # the brokers are named, the settings make sense
        reset = offset_reset(params, default="latest")
        settings = env.spark.settings()
        rate = KafkaRateSettings.from_settings(settings.get)
        reading = ExecutorReading.from_params(params, settings.get, fail_on_data_loss=fail_on_data_loss)
        super().__init__(env)  # registers the stream: only once every argument and setting was accepted
        self.topics: tuple[str, ...] = tuple(sorted(set(topics)))
        self.fail_on_data_loss = fail_on_data_loss
        self.rate = rate
        self._reset = reset
        self._params = params
        # Batches end at the last stable offset when the executors read only committed records (as Spark's consumer).
        self._committed_only = reads_committed(params)
        self._from_offsets = dict(from_offsets)
        self._convert = convert
        self._reading = reading
        self._latest_rate = -1
        self._initial: dict[TopicAndPartition, int] | None = None
        self._initial_log: MetadataLog[dict[TopicAndPartition, int]] | None = None
        self._latest_seen: dict[TopicAndPartition, int] | None = None
        self._view: KafkaClusterView | None = None
        self._io_lock = threading.Lock()  # the cluster view and the committer are used by one planning thread at a time
        self._stopped = False  # set by stop(): a planning thread that holds the clients then closes them, a later one asks nothing
        self._commits = CommitQueue(params)
        self._missing_topics: set[str] = set()
        self._log = library_logger("aiodstream.kafka", component="DirectKafkaInputDStream", stream=self.id)

    @property
    def name(self) -> str:
        """Spark's display name: ``"Kafka direct stream [0]"``."""
        return f"Kafka direct stream [{self.id}]"

    # -- pyspark 2.4 / Spark 0-10 API --

    def commitAsync(self, offsetRanges: Sequence[OffsetRange], callback: CommitCallback | None = None) -> None:  # noqa: N803
        """Commit the ends of ``offsetRanges`` to the consumer group (``group.id``) when the next batch is planned.

        Spark 0-10's ``CanCommitOffsets.commitAsync``: the driver commits, each partition at the
        highest end queued for it; ``callback(offsets, exception)`` runs after that commit (the
        newest call's: one without a callback leaves none, as Spark's ``commitAsync(offsetRanges)``).
        For monitoring tools only: a restart resumes from the offsets log, never from these commits.
        What is queued when the context stops is not committed.

        Raises:
            TypeError: ``offsetRanges`` is not a list of ``OffsetRange``.
            ValueError: kafkaParams have no ``group.id``.
        """
        self._commits.add(offsetRanges, callback)

    def update_rate(self, rate: float) -> None:
        """Backpressure's new rate (the ``DirectKafkaRateController`` publishes here): whole records per second, as Spark keeps it."""
        self._latest_rate = int(rate)

    @property
    def latest_rate(self) -> int:
        """The rate backpressure estimated last (records per second for the whole stream), or -1 before any."""
        return self._latest_rate

    # -- replay --

    def _descriptor(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        return {"kind": self._input_kind, "name": self.name, "topics": list(self.topics)}, ("kind", "topics")

    def _load_log(self, recorded: dict[str, Any]) -> None:
        assert self._log_dir is not None
        self._initial_log = initial_offsets_log(self._log_dir)
        self._initial = self._initial_log.get(0)

    def latest_offset(self) -> Offset:
        """The partitions' latest offsets when the last batch was planned (the cluster is asked only off the loop)."""
        return None if self._latest_seen is None else format_partition_offsets(self._latest_seen)

    async def plan_offset(self, start: Offset, time: Time) -> Offset:
        """Ask the cluster (in a worker thread) where batch ``time``'s ranges end; commit what ``commitAsync`` queued first.

        A stop does not wait for the question (a broker that does not answer holds it for up to the
        view's timeout): the thread is left to finish, and closes the clients itself.

        Raises:
            KafkaDataLossError: with ``failOnDataLoss``, partitions gone or moved back (Spark's messages).
            KafkaError: the cluster could not be asked.
        """
        return await anyio.to_thread.run_sync(self._plan_sync, start, abandon_on_cancel=True)

    def _plan_sync(self, start_text: Offset) -> Offset:
        with self._io_lock:
            if self._stopped:  # a planning call a stop left before it began: no commit, client or log write after it
                raise KafkaError(f"{self.name} was stopped while this batch was being planned")
            try:
                start, tps, latest, earliest = self._ask_cluster(start_text)
            finally:
                # The stop came meanwhile and left the clients to this thread (set by another thread: mypy keeps the
                # narrowing of the check above).
                if self._stopped:
                    self._close_clients()  # type: ignore[unreachable]
        plan = plan_batch_end(start, tps, latest=latest, earliest_of_new=earliest, batch_ms=self._env.batch_duration.milliseconds,
                              rate=self.rate, estimated_rate=self.rate.estimated_rate(self._latest_rate))
        self._report_losses(plan.losses)
        self._latest_seen = latest
        if start_text is None and plan.end == start:
            return None  # nothing yet: the next batch starts from the initial offsets again
        return format_partition_offsets(plan.end)

    def _ask_cluster(self, start_text: Offset) -> tuple[dict[TopicAndPartition, int], list[TopicAndPartition],
                                                        dict[TopicAndPartition, int], dict[TopicAndPartition, int]]:
        # Under the clients' lock: the batch's start, the current partitions, their latest offsets, new ones' earliest.
        self._commits.commit_queued()
        view = self._cluster()
        partitions = view.partitions(self.topics)
        self._note_missing_topics(partitions)
        tps = current_partitions(partitions)
        start = self._initial_offsets(view, tps) if start_text is None else parse_partition_offsets(start_text, input_name=self.name)
        new = [tp for tp in tps if tp not in start]
        latest = view.latest_offsets(tps, committed_only=self._committed_only)
        return start, tps, latest, view.earliest_offsets(new) if new else {}

    def _cluster(self) -> KafkaClusterView:
        if self._view is None:
            self._view = KafkaClusterView(self._params)
        return self._view

    def _note_missing_topics(self, partitions: Mapping[str, Sequence[int] | None]) -> None:
        for topic, parts in partitions.items():
            if parts is None and topic not in self._missing_topics:
                self._missing_topics.add(topic)
                self._log.warning("topic does not exist (yet): its partitions are read from offset 0 when it appears", topic=topic)
            elif parts is not None:
                self._missing_topics.discard(topic)

    def _initial_offsets(self, view: KafkaClusterView, tps: Sequence[TopicAndPartition]) -> dict[TopicAndPartition, int]:
        """The offsets the first batch starts at: from the log, or fetched once and logged before any batch uses them."""
        if self._initial is not None:
            return self._initial
        need_reset = [tp for tp in tps if tp not in self._from_offsets]
        earliest = view.earliest_offsets(need_reset) if need_reset and self._reset == "earliest" else {}
        latest = view.latest_offsets(need_reset, committed_only=self._committed_only) if need_reset and self._reset == "latest" else {}
        unknown = [tp for tp in self._from_offsets if tp not in set(tps)]
        if unknown:  # Spark 0-8's KafkaCluster error for partitions without a leader
            raise KafkaError(f"Couldn't find leader offsets for Set({', '.join(f'[{tp.topic},{tp.partition}]' for tp in sorted(unknown))})")
        chosen = initial_offsets(tps, self._from_offsets, reset=self._reset, earliest=earliest, latest=latest)
        log = self._initial_log
        if log is not None and not log.add(0, chosen):
            recorded = log.get(0)  # another writer got there first: its offsets are the ones batches use
            assert recorded is not None
            chosen = recorded
        self._initial = chosen
        self._log.info("starting offsets", offsets=format_partition_offsets(chosen), reset=self._reset)
        return chosen

    def _report_losses(self, losses: Sequence[str]) -> None:
        for detail in losses:  # with failOnDataLoss the first one raises
            report_data_loss(detail, fail=self.fail_on_data_loss, log=self._log)

    # -- batches --

    def offset_ranges(self, start: Offset, end: Offset) -> list[OffsetRange]:
        """The ranges of a batch logged as ``(start, end]``, one per partition, sorted; none for a partition that moved back.

        Raises:
            ReplayError: the batch started at the initial offsets, and they are not known (their log entry is missing).
        """
        if start is None:
            if self._initial is None:
                if end is None:
                    return []
                raise ReplayError(f"{self.name} cannot replay a first batch: its starting offsets are not in "
                                  f"{self._log_dir}/0; restore the file or start with a new checkpoint directory")
            begin = self._initial
        else:
            begin = parse_partition_offsets(start, input_name=self.name)
        until = dict(begin) if end is None else parse_partition_offsets(end, input_name=self.name)
        return [OffsetRange(tp.topic, tp.partition, begin.get(tp, 0), off) for tp, off in sorted(until.items())
                if off >= begin.get(tp, 0)]

    def _compute(self, time: Time) -> RDD[Any] | None:
        found = self._range_of(time)
        ranges = [] if found is None else self.offset_ranges(*found)
        tracker = self._env.graph.input_infos
        if tracker is not None:
            tracker.report_info(time, StreamInputInfo(self.id, sum(r.count for r in ranges), _input_metadata(ranges)))
        read = self._reading.task(self._convert)
        if self._env.spark.kind == "connect":  # a FrameRDD read by the server's Python workers
            return frame_kafka_rdd(self._env.spark_context, ranges, read)  # type: ignore[no-any-return]
        from ._rdd import KafkaRDD  # pyspark, once Spark work is needed

        return KafkaRDD(self._env.spark_context, ranges, read)

    # -- lifecycle --

    def stop(self) -> None:
        """Close the driver's clients (what ``commitAsync`` queued since the last batch is not committed, as in Spark);
        a planning thread still asking the cluster (abandoned by the stop) closes them when it is done."""
        self._stopped = True
        if self._io_lock.acquire(blocking=False):
            try:
                self._close_clients()
            finally:
                self._io_lock.release()

    def _close_clients(self) -> None:
        self._commits.close()
        if self._view is not None:
            self._view.close()
            self._view = None

    def __repr__(self) -> str:
        return f"<DirectKafkaInputDStream {self.name} [{', '.join(self.topics)} | reset {self._reset}]>"


def _input_metadata(ranges: Sequence[OffsetRange]) -> dict[str, Any]:
    """What the batch's ``StreamInputInfo`` carries: the ranges (as plain dicts) and Spark's description of the non-empty ones."""
    lines = [f"topic: {r.topic}\tpartition: {r.partition}\toffsets: {r.fromOffset} to {r.untilOffset}"
             for r in ranges if r.count]
    offsets = [{"topic": r.topic, "partition": r.partition, "fromOffset": r.fromOffset, "untilOffset": r.untilOffset}
               for r in ranges]
    return {"offsets": offsets, "Description": "\n".join(lines)}
