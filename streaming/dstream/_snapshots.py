"""StateSnapshots: the saved state RDDs of stateful streams, and which one a restart starts from.

Spark checkpoints the whole DStream graph with its state RDDs (``DStreamCheckpointData``); here
each stateful stream saves its state RDD at its checkpoint interval under
``<checkpoint>/state/<n>/<batchId + 1>``, and a restart rebuilds the rest from the logged input.
On classic Spark a snapshot is a pickle file of the RDD; on Spark Connect, Parquet of pickled rows
(``_snapshot_frames``).
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Mapping, Protocol, Sequence

import attrs

from scheduler import (
    CheckpointError,
    CheckpointPath,
    Duration,
    RecoveredBatch,
    Time,
    library_logger,
    parse_batch_file_name,
    remove_temp_files,
    temp_name,
)

from ..recovery import InputDescriptor
from ._snapshot_frames import is_frame_snapshot, load_frame_snapshot, save_frame_snapshot

__all__ = ["StatefulStream", "StateSnapshots"]

# State snapshots kept per stateful stream: the newest, and the one before it in case the
# newest belongs to a batch that a restart runs again.
_SNAPSHOTS_KEPT = 2


class StatefulStream(Protocol):
    """What snapshots need of a stream that carries state (``updateStateByKey``, inverse-reduced windows).

    Besides the node's public ``slide``, the members are the node's public hooks for the graph
    (``StreamNode`` documents them as not for users).
    """

    @property
    def slide(self) -> Duration:
        """The interval between the stream's RDDs."""
        ...

    @property
    def storage_level(self) -> Any:
        """The level each of the stream's RDDs is persisted at, or None."""
        ...

    @property
    def generated(self) -> Mapping[Time, Any]:
        """The remembered RDDs by batch time."""
        ...

    def restore_rdd(self, time: Time, rdd: Any) -> None:
        """Remember a restored state ``rdd`` as ``time``'s, persisted at the stream's storage level."""
        ...

    def is_checkpoint_time(self, time: Time) -> bool:
        """Whether ``time`` ends one of the stream's checkpoint intervals."""
        ...

    def state_reach(self) -> Duration:
        """How far back from its snapshot the stream's state reaches: its window, or nothing."""
        ...


@attrs.frozen
class _Restore:
    """What a restart may load into one stateful stream, newest first: each a snapshot's version (its batch id + 1), its
    time, and its directory (``None``: start from nothing); each one's later input is still in the log."""

    index: int
    candidates: tuple[tuple[int, Time, CheckpointPath | None], ...]


class StateSnapshots:
    """The state snapshots of one graph's stateful streams, under ``<checkpoint>/state/``.

    Args:
        directory: the checkpoint directory.
        batch_duration: the graph's batch interval.
        streams: the stateful streams, in a stable order (their index names their directory).
        spark_context: gives the SparkContext (or, on Spark Connect, the FrameContext) that reads a snapshot
            back (called in the generation thread).
    """

    def __init__(self, directory: CheckpointPath, batch_duration: Duration, streams: Sequence[StatefulStream],
                 spark_context: Callable[[], Any]) -> None:
        """Keep the snapshots of ``streams`` under ``directory / "state"``; nothing is read yet."""
        self._directory = directory
        self._batch = batch_duration
        self.streams = list(streams)
        self._spark_context = spark_context
        self._restores: list[_Restore] = []
        self._versions: dict[int, int] = {}  # per stateful stream: its newest snapshot (batch id + 1)
        self._previous: dict[int, int] = {}  # per stateful stream: the snapshot before it, which a restart may need
        self._log = library_logger("aiodstream.streaming", component="StateSnapshots")

    def state_dir(self, index: int) -> CheckpointPath:
        """The directory of stream ``index``'s snapshots."""
        return self._directory / "state" / str(index)

    def open(self, zero_time: Time, first_batch_id: int, history: Sequence[RecoveredBatch]) -> None:
        """At a start: clear unfinished saves and plan which snapshot each stream restores (blocking I/O).

        Raises:
            CheckpointError: see :meth:`_plan_restores`.
        """
        for index in range(len(self.streams)):
            self._remove_unfinished(index)
        self._restores = self._plan_restores(zero_time, first_batch_id, history)

    def _remove_unfinished(self, index: int) -> None:
        """Delete the hidden temporary snapshots a save killed midway left (they are never read)."""
        remove_temp_files(self.state_dir(index))

    def oldest_needed_batch(self) -> int | None:
        """The first batch after each stateful stream's newest snapshot (less its window): the log must keep it."""
        if not self.streams:
            return None
        batch = self._batch.milliseconds
        # The snapshot before the newest too: a restart falls back to it when the newest cannot be read.
        needed = [self._previous.get(index, self._versions.get(index, 0)) - stream.state_reach().milliseconds // batch
                  for index, stream in enumerate(self.streams)]
        return max(0, min(needed))

    def due(self, time: Time) -> list[int]:
        """The streams whose checkpoint interval ends at ``time`` and that have its state RDD."""
        return [index for index, stream in enumerate(self.streams)
                if stream.is_checkpoint_time(time) and time in stream.generated]

    def _describe(self, index: int, *, restart: bool = False) -> None:
        """Record (first save) or check (``restart``) which stream the snapshots of ``index`` belong to.

        Raises:
            CheckpointError: at a restart, another kind of stream or slide is recorded, or the record is
                missing beside snapshots (recording this run's would restore them into any stream).
        """
        stream = self.streams[index]
        descriptor = InputDescriptor(self.state_dir(index))
        if restart and self._snapshots(index) and not descriptor.path.exists():
            raise CheckpointError(
                f"cannot restore the state of {type(stream).__name__} from {self.state_dir(index)}: {descriptor.path} is "
                "missing, but the directory holds snapshots; the file records which stream wrote them (its kind and slide), "
                "and recording this run's instead could restore them into another stream: restore it from a copy, or "
                "start over with a new checkpoint directory",
                path=str(descriptor.path),
            )
        descriptor.ensure({"kind": type(stream).__name__, "slide": stream.slide.milliseconds}, compare=("kind", "slide"))

    def save(self, due: Sequence[int], time: Time, batch_id: int) -> None:
        """Save the state RDD of ``time`` of each stream in ``due`` (blocking: a Spark job each).

        Each snapshot is written by the tasks (Spark's Hadoop output, on the executors) under a
        hidden name, then renamed on the checkpoint's file system, so a reader sees all of it or
        none and the driver never needs the executors' disk, nor they its.
        """
        for index in due:
            stream = self.streams[index]
            directory = self.state_dir(index)
            self._describe(index)
            target = directory / str(batch_id + 1)
            if target.exists():
                self._set_version(index, batch_id + 1)
                continue  # a re-run batch: the same input gave the same state
            temp = directory / temp_name(str(batch_id + 1))
            rdd = stream.generated[time]
            if _is_classic(rdd):
                rdd.saveAsPickleFile(temp.uri())
            else:  # a FrameRDD: the Connect server writes it
                save_frame_snapshot(rdd, temp)
            if not temp.rename_new(target):  # a racing writer of the same batch: its snapshot is the same state
                temp.delete(recursive=True)
            self._set_version(index, batch_id + 1)
            self._log.debug("state saved", stream=type(stream).__name__, index=index, batch=time.milliseconds, path=str(target))
            for old in self._snapshots(index)[:-_SNAPSHOTS_KEPT]:
                (directory / str(old)).delete(recursive=True)

    def _set_version(self, index: int, version: int) -> None:
        newest = self._versions.get(index)
        if newest is not None and newest < version:
            self._previous[index] = newest
        self._versions[index] = version

    def _snapshots(self, index: int) -> list[int]:
        return sorted(i for i in map(parse_batch_file_name, self.state_dir(index).listdir()) if i is not None)

    def _plan_restores(self, zero_time: Time, first_batch_id: int, history: Sequence[RecoveredBatch]) -> list[_Restore]:
        """At a restart: which snapshot each stateful stream starts from; the logged input must cover the rest.

        Raises:
            CheckpointError: a stateful stream changed, or batches between its newest snapshot
                and the first batch to run are no longer in the offsets log (their input
                cannot be read, so the state cannot be rebuilt).
        """
        if first_batch_id == 0 or not self.streams:
            return []
        batch = self._batch.milliseconds
        zero = zero_time.milliseconds
        last_done = zero + first_batch_id * batch  # the batch before the first one to run
        logged = {b.time for b in history}
        restores = []
        for index, stream in enumerate(self.streams):
            self._describe(index, restart=True)
            usable = [v for v in self._snapshots(index) if v <= first_batch_id]
            candidates: list[tuple[int, Time, CheckpointPath | None]] = []
            # Newest first, then older ones (a fallback) while the log still holds their later input; 0: from nothing.
            for version in [*reversed(usable), 0]:
                snapshot_ms = zero + version * batch
                first_needed = max(snapshot_ms - stream.state_reach().milliseconds + batch, zero + batch)
                missing = [ms for ms in range(first_needed, last_done + 1, batch) if Time(ms) not in logged]
                if missing and not candidates:
                    raise CheckpointError(
                        f"cannot restore the state of {type(stream).__name__} from {self.state_dir(index)}: "
                        + (f"its newest usable snapshot is at {snapshot_ms} ms" if usable else "it has no snapshot yet")
                        + f" and the input of {len(missing)} later batch(es) (from {missing[0]} ms) is no longer in the "
                        "offsets log; the state cannot be rebuilt without it. Start over with a new checkpoint directory",
                        path=str(self.state_dir(index)),
                    )
                if missing:
                    break  # an older snapshot needs still more of the log
                candidates.append((version, Time(snapshot_ms), self.state_dir(index) / str(version) if version else None))
            self._versions[index] = candidates[0][0]
            if len(usable) > 1:
                self._previous[index] = usable[-2]
            restores.append(_Restore(index, tuple(candidates)))
        return restores

    @property
    def restore_pending(self) -> bool:
        """Whether :meth:`load_restores` still has snapshots to load."""
        return bool(self._restores)

    def load_restores(self) -> None:
        """Before the first batch of a restarted run, in the generation thread: load each planned snapshot (a Spark job
        each, which reads it into the stream's cache: the first batch starts from there).

        A snapshot that cannot be read (damaged on disk) is set aside as ``<version>.unreadable-<id>`` and the one
        before it is loaded instead, when the logged input reaches back to it, as Spark falls back to an older
        checkpoint.

        Raises:
            CheckpointError: no planned snapshot of a stream can be read.
        """
        restores, self._restores = self._restores, []
        sc = None
        for restore in restores:
            stream = self.streams[restore.index]
            failures: list[str] = []
            for version, time, path in restore.candidates:
                if path is None:
                    self._versions[restore.index] = 0  # no snapshot: the state is rebuilt from the first batch's input
                    break
                if sc is None:
                    sc = self._spark_context()
                self._check_kind(sc, path)  # refused, not passed over
                rdd: Any = None
                try:
                    rdd = self._read(sc, path)
                    if stream.storage_level is not None:
                        rdd.persist(stream.storage_level)
                    rdd.count()  # reads it all now (into the cache): a damaged snapshot fails here, not in a batch
                except Exception as exc:  # its partitions file, or Spark's reader: a truncated or foreign file, a missing part
                    text = str(exc).strip()
                    failures.append(f"{path}: {type(exc).__name__}: {text.splitlines()[0] if text else ''}")
                    if rdd is not None and stream.storage_level is not None:
                        rdd.unpersist()
                else:
                    stream.restore_rdd(time, rdd)
                    self._versions[restore.index] = version
                    self._log.info("state restored", stream=type(stream).__name__, index=restore.index,
                                   snapshot=time.milliseconds, path=str(path))
                    break
                self._set_aside(path, version, failures[-1])
            else:
                raise CheckpointError(f"cannot restore the state of {type(stream).__name__}: no snapshot can be read ("
                                      + "; ".join(failures) + "). Start over with a new checkpoint directory",
                                      path=str(self.state_dir(restore.index)))

    def _set_aside(self, path: CheckpointPath, version: int, failure: str) -> None:
        """Rename an unreadable snapshot out of the way (kept for a look), so that its batch saves a new one."""
        aside = path.parent / f"{version}.unreadable-{uuid.uuid4().hex[:8]}"
        moved = path.rename_new(aside)
        self._log.warning("a state snapshot cannot be read: the one before it is tried", path=str(path),
                          moved_to=str(aside) if moved else None, error=failure)

    @classmethod
    def _read(cls, sc: Any, path: CheckpointPath) -> Any:
        """The state RDD saved in ``path``, on ``sc`` (a SparkContext, or a FrameContext on Spark Connect), read lazily.

        Raises:
            CheckpointError: the snapshot was written by the other kind of Spark (see :meth:`_check_kind`).
        """
        return load_frame_snapshot(sc, path) if cls._check_kind(sc, path) else sc.pickleFile(path.uri())

    @staticmethod
    def _check_kind(sc: Any, path: CheckpointPath) -> bool:
        """Whether the snapshot in ``path`` was written on Spark Connect, checked against ``sc`` (a SparkContext, or a
        FrameContext on Spark Connect).

        Raises:
            CheckpointError: the snapshot was written by the other kind of Spark.
        """
        frames = is_frame_snapshot(path)
        if _is_classic(sc) == frames:
            written, reading = ("Spark Connect", "classic Spark") if frames else ("classic Spark", "Spark Connect")
            raise CheckpointError(f"the state snapshot {path} was written on {written} and cannot be read on {reading}; "
                                  "restart the program on the same kind of Spark, or start over with a new checkpoint "
                                  "directory", path=str(path))
        return frames


def _is_classic(spark_object: Any) -> bool:
    """Whether ``spark_object`` (a state RDD or the context reading one) is classic Spark's, not a Connect FrameRDD's."""
    from pyspark import RDD, SparkContext

    return isinstance(spark_object, (RDD, SparkContext))
