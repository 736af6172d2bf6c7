"""PartitionFiles: one operator partition's deltas and snapshots under the checkpoint, and the recorded partition count.

Spark's ``StateStoreProvider`` files of one partition (``state/<operator>/<partition>/``).
"""

from __future__ import annotations

import os

from scheduler import (
    CheckpointPath,
    library_logger,
    parse_batch_file_name,
    parse_long,
    task_checkpoint_path,
    write_replacing_file,
)

from ._store_format import DELTA, SNAPSHOT, StateStoreError, decode, delta_digest, encode, kind_name

__all__ = [
    "MAX_PARTITIONS",
    "PartitionFiles",
    "keep_partition_count",
    "parse_partition_count",
]

MAX_PARTITIONS = 100_000
"""The most partitions a recorded count may name: a stateful operator keeps a store per partition, and a count beyond
this is damage (a reader would otherwise list a directory per partition for hours); Spark's own advice for
``spark.sql.shuffle.partitions`` of stateful queries is hundreds to a few thousands."""

_log = library_logger("aiodstream.streaming", component="StateStore")


def _stale_temp(name: str) -> tuple[int, str] | None:
    """The version and kind (``delta``/``snapshot``) of a checkpoint file manager's temporary file of ours, or None."""
    parts = name.split(".")  # ".<version>.<kind>.<uuid>.tmp" (scheduler's temp_name; more parts before .tmp are fine)
    if len(parts) < 5 or parts[0] or parts[2] not in ("delta", "snapshot") or parts[-1] != "tmp":
        return None
    version = parse_batch_file_name(parts[1])
    return None if version is None else (version, parts[2])


class PartitionFiles:
    """One operator partition's durable files, ``<version>.delta`` and ``<version>.snapshot``, in a checkpoint directory.

    Through a :class:`~scheduler.CheckpointFileManager`: the local one for a path or a ``file:``
    URI (a disk or a shared POSIX mount), fsspec for any other URI (``hdfs://``, ``s3a://``, ...;
    :func:`~scheduler.task_checkpoint_path`), since the tasks that write them are Python
    processes without a JVM.

    On a local path a file is written whole (a temporary file renamed over its name). With
    ``fsync`` (the default) it goes through the local file manager's flushed write (the file,
    then its directory: two ``fsync`` calls per commit), so it survives a power cut; without, it
    is not flushed: Spark's durability for its state stores on a local disk, which survives the
    writer's death but not a crash of the machine. Other file systems write as their file
    manager does, whatever ``fsync`` says.

    Attributes:
        directory: ``<checkpoint root>/state/<operator>/<partition>``.
        fsync: flush each file and its directory to disk before a write returns (local paths).
    """

    def __init__(self, directory: CheckpointPath, *, fsync: bool = True) -> None:
        """Name the files under ``directory``; nothing is read or made."""
        self.directory = directory
        self.fsync = fsync

    def path(self, version: int, kind: bytes) -> CheckpointPath:
        """The file of ``version`` of ``kind`` (:data:`DELTA` or :data:`SNAPSHOT`)."""
        return self.directory / f"{version}.{kind_name(kind)}"

    def versions(self, kind: bytes) -> list[int]:
        """The versions that have a file of ``kind``, ascending."""
        suffix = f".{kind_name(kind)}"
        return sorted(v for name in self.directory.listdir() if name.endswith(suffix)
                      and (v := parse_batch_file_name(name.split(".")[0])) is not None)

    def has_deltas(self, after: int, upto: int) -> bool:
        """Whether the deltas of every version in ``(after, upto]`` are there."""
        return all(self.path(v, DELTA).exists() for v in range(after + 1, upto + 1))

    def delta_digest(self, version: int) -> bytes | None:
        """The digest of the delta of ``version`` (checked, not unpickled), or None if there is none."""
        return delta_digest(self.path(version, DELTA))

    def snapshot(self, version: int) -> bytes:
        """The SQLite file the snapshot of ``version`` holds (checked).

        Raises:
            StateStoreError: the snapshot is missing or damaged.
        """
        return decode(self.path(version, SNAPSHOT), SNAPSHOT)[0]

    def write_delta(self, version: int, payload: bytes) -> int:
        """Write the delta of ``version`` (replacing any; flushed as the class says); return its size. Its directory is
        made first, every time."""
        self.directory.mkdirs()  # every time: a checkpoint may have been moved aside since the last commit
        data = encode(DELTA, payload)
        path = self.path(version, DELTA)
        if path.exists():
            # A re-run of this version (its batch ran before and did not commit): the snapshots of the history this
            # delta replaces go first, or one would later pass for this version's and become the base purge keeps.
            stale = [v for v in self.versions(SNAPSHOT) if v >= version]
            for v in stale:
                self.path(v, SNAPSHOT).delete()
            if stale:
                _log.info("state version re-run: the snapshots of the history it replaces are deleted",
                          directory=str(self.directory), version=version, snapshots=stale)
        self._write(path, data)
        return len(data)

    def write_snapshot(self, version: int, database: bytes) -> None:
        """Write the snapshot of ``version`` holding the SQLite file ``database``."""
        self._write(self.path(version, SNAPSHOT), encode(SNAPSHOT, database))

    def _write(self, path: CheckpointPath, data: bytes) -> None:
        if path.is_local and not self.fsync:
            # Spark's state stores on a local disk: Hadoop's local stream closed, then renamed; no flush.
            write_replacing_file(os.fspath(path), data, durable=False)
        else:
            path.write_replacing(data)

    def purge(self, latest: int, retain: int) -> None:
        """Delete what loading none of the newest ``retain`` versions up to ``latest`` needs."""
        oldest_kept = latest - retain + 1
        base = max((v for v in self.versions(SNAPSHOT) if v <= oldest_kept), default=0)
        if not base:
            return  # every retained version still replays from the empty state
        for v in self.versions(DELTA):
            if v <= base:
                self.path(v, DELTA).delete()
        for v in self.versions(SNAPSHOT):
            if v < base:
                self.path(v, SNAPSHOT).delete()

    def remove_temporary_files(self, version: int, snapshot_every: int, killed: set[int]) -> int:
        """Remove the file managers' temporary files no live writer can need; return how many were removed.

        Those of deltas up to ``version`` (committed), those of snapshots of the versions in
        ``killed`` or at most ``version - snapshot_every``; see
        :meth:`~streaming.state.StateStoreProvider.remove_leftovers`.
        """
        removed = 0
        for name in self.directory.listdir():
            temp = _stale_temp(name)
            if temp is None:
                continue
            v, kind = temp
            stale = v <= version if kind == "delta" else v <= version - snapshot_every or v in killed
            if stale and (self.directory / name).delete():
                removed += 1
        return removed


def keep_partition_count(checkpoint_root: str | os.PathLike[str] | CheckpointPath, operator_id: int, wanted: int) -> int:
    """The operator's partition count: the one its checkpoint recorded, else ``wanted`` (recorded now).

    A key's partition is its hash modulo the count, so a restart with another count would look
    for each key's state in the wrong store; as Spark restores ``spark.sql.shuffle.partitions``
    from the checkpoint of a stateful query, the recorded count wins (and is logged if it differs).
    """
    path = task_checkpoint_path(checkpoint_root) / "state" / str(operator_id) / "partitions"
    data = path.read_bytes()
    if data is None:
        path.parent.mkdirs()
        path.write_replacing(str(wanted).encode())
        return wanted
    recorded = parse_partition_count(data, path)
    if recorded != wanted:
        _log.warning("the checkpoint's state was written with another number of partitions; keeping it",
                     operator=operator_id, recorded=recorded, asked=wanted, path=str(path))
    return recorded


def parse_partition_count(data: bytes, path: CheckpointPath) -> int:
    """The partition count a ``partitions`` file holds: ASCII digits, 1 to :data:`MAX_PARTITIONS`.

    Raises:
        StateStoreError: anything else (``-1``, ``0``, ``'٣'``, ``'1_0'``, a count of billions), naming the file.
    """
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        text = repr(data[:40])
    count = parse_long(text)
    if count is None or not 1 <= count <= MAX_PARTITIONS:
        raise StateStoreError(f"state store file {path} does not hold a partition count: it must be a number from 1 to "
                              f"{MAX_PARTITIONS} in ASCII digits, got {text[:40]!r}; restore it from a copy (it is the "
                              "number of partitions the state was written with)")
    return count
