"""Checkpoint: a query's directory of identity, offsets and commits, and where a restart resumes.

Structured Streaming's layout (``metadata``, ``offsets/``, ``commits/``) read with its restart
rules (``populateStartOffsets``) widened to DStream's pending batches: every logged batch without
a commit is re-run. Every method blocks on file I/O: async callers use worker threads.
"""

from __future__ import annotations

import os
import uuid
from typing import Callable, Mapping, Sequence, TypeVar

import attrs

from .._errors import CheckpointError, CorruptCheckpointError
from .._numbers import parse_long
from .._protocols import Offset, RecoveredBatch
from .._time import Duration, Time
from .._watermark import WATERMARK_POLICY_KEY
from ._claims import CheckpointClaim, checkpoint_claims, concurrent_use_error
from ._files import TEMP_SUFFIX, CheckpointPath, as_checkpoint_path, remove_temp_files
from ._metadata_log import (
    CommitLog,
    CommitMetadata,
    OffsetSeq,
    OffsetSeqLog,
    parse_query_metadata,
    serialize_query_metadata,
)
from ._regular_files import local_entry_kind

__all__ = [
    "GRID_INTERVAL_KEY",
    "GRID_ZERO_KEY",
    "STATE_VERSION_KEY",
    "recorded_state_version",
    "BatchGrid",
    "Checkpoint",
    "CheckpointDescription",
    "CheckpointState",
]

ASYNC_TRACKED_KEY = "aiodstream.asyncProgressTracking"
"""The ``conf`` key an offsets entry written by a run with async progress tracking carries (``"true"``): a restart, async
or not, then plans its first new batch after now, since batch times after that entry may have run without a trace."""

GRID_INTERVAL_KEY = "aiodstream.batchDurationMs"
"""Key in an offsets entry's ``conf`` holding the batch interval the checkpoint was written with."""
GRID_ZERO_KEY = "aiodstream.zeroTimeMs"
"""Key in an offsets entry's ``conf`` holding the zero time of the batch grid."""
STATE_VERSION_KEY = "aiodstream.stateVersion"
"""Key in an offsets entry's ``conf`` holding the state version its batch loads, when that is not its batch id.

Batch ids follow the batch times on the grid; a Once or AvailableNow run's batch takes the id of its time, so ids skip
between runs, while a stateful operator's versions count the batches that ran it (version ``v`` loaded, ``v + 1``
committed). Entries without the key load the version of their id."""
FROM_START_KEY = "aiodstream.fromStart"
"""In the ``conf`` of a batch's offsets entry, ``"true"``: its input starts where the query's does (no batch before it
took any), though its id is not 0 (a trigger-driven query's first batch takes the next grid time after the clock): a
re-run needs no entry before it."""

T = TypeVar("T")

METADATA_FILE = "metadata"
OFFSETS_DIR = "offsets"
COMMITS_DIR = "commits"


@attrs.frozen
class BatchGrid:
    """The batch grid of a query: batch ``n`` runs at ``zero_time + (n + 1) * batch_duration``.

    The grid is persisted in every offsets entry, so batch ids and batch times map onto each
    other the same way across restarts (DStream's zero time, restored from its checkpoint).
    """

    zero_time: Time
    batch_duration: Duration

    def time_of(self, batch_id: int) -> Time:
        """The batch time of ``batch_id``."""
        return Time(self.zero_time.milliseconds + (batch_id + 1) * self.batch_duration.milliseconds)

    def batch_id_of(self, time: Time) -> int:
        """The batch id of ``time``, which must be a grid time after the zero time."""
        offset = time.milliseconds - self.zero_time.milliseconds
        period = self.batch_duration.milliseconds
        if offset <= 0 or offset % period:
            raise ValueError(f"{time} is not a batch time on the grid {self.zero_time} + k * {self.batch_duration}, k >= 1")
        return offset // period - 1

    def next_time_after(self, now: Time) -> Time:
        """The first batch time on the grid after ``now``."""
        zero, period = self.zero_time.milliseconds, self.batch_duration.milliseconds
        return Time(((now.milliseconds - zero) // period + 1) * period + zero)

    def conf(self) -> dict[str, str]:
        """The grid as ``conf`` entries of an offsets entry."""
        return {GRID_INTERVAL_KEY: str(self.batch_duration.milliseconds), GRID_ZERO_KEY: str(self.zero_time.milliseconds)}


@attrs.frozen
class CheckpointState:
    """What a (re)starting query finds in its checkpoint.

    Attributes:
        query_id: the query's id, kept across restarts.
        created: whether this start created the checkpoint's ``metadata`` (a first start).
        grid: the batch grid the logged batches are on, or ``None`` if no batch was ever logged.
        offset_ids: ids of the offsets entries on disk, ascending.
        commit_ids: ids of the commits entries on disk, ascending.
        latest_batch_id: the newest logged batch, or ``None``.
        latest_end: that batch's end offsets, where the next new batch starts.
        rerun: logged batches without a commit, ascending: run again before anything new.
        history: committed batches whose input range can still be read from the log (the
            entry before theirs is retained), ascending: what a graph needs to rebuild
            windows and state over batches that ran before the restart.
        watermark_ms: the global watermark the next new batch runs with: the newest offsets
            entry's ``batchWatermarkMs``, bumped to its commit's ``nextBatchWatermarkMs`` if
            that batch was committed (Spark's rule).
        late_watermark_ms: the newest offsets entry's ``batchWatermarkMs`` (the next new
            batch's late-event watermark).
        watermark_policy: the ``multipleWatermarkPolicy`` the newest entry recorded, or ``None``.
        async_tracked: the newest entry was written with async progress tracking (:data:`ASYNC_TRACKED_KEY`).
        next_state_version: the state version the next new batch loads: one after the newest entry's
            (:data:`STATE_VERSION_KEY`, else its batch id); 0 with no entry.
    """

    query_id: uuid.UUID
    created: bool
    grid: BatchGrid | None
    offset_ids: tuple[int, ...] = ()
    commit_ids: tuple[int, ...] = ()
    latest_batch_id: int | None = None
    latest_end: tuple[Offset, ...] | None = None
    rerun: tuple[RecoveredBatch, ...] = ()
    history: tuple[RecoveredBatch, ...] = ()
    watermark_ms: int = 0
    late_watermark_ms: int = 0
    watermark_policy: str | None = None
    async_tracked: bool = False
    next_state_version: int = 0

    @property
    def latest_committed(self) -> int | None:
        """The newest committed batch id, or ``None``."""
        return self.commit_ids[-1] if self.commit_ids else None


@attrs.frozen
class CheckpointDescription:
    """A read-only summary of a checkpoint directory (``aiodstream checkpoint <dir>``)."""

    location: str
    query_id: uuid.UUID | None
    grid: BatchGrid | None
    offset_ids: tuple[int, ...]
    commit_ids: tuple[int, ...]
    latest_offsets: tuple[int, OffsetSeq] | None
    latest_commit: tuple[int, CommitMetadata] | None
    pending: tuple[int, ...]
    temp_files: int
    damaged: tuple[CorruptCheckpointError, ...] = ()


class Checkpoint:
    """A checkpoint directory: ``metadata`` (the query id), ``offsets/`` and ``commits/``.

    Blocking; one query writes to a directory at a time: it is claimed before :meth:`open`
    changes anything (see :class:`~scheduler.CheckpointClaims`), and a second writer the file system could not keep
    out is detected when it tries to write an entry that exists, and fails with
    :class:`ConcurrentCheckpointUpdateError`. The directory may be on any file system a
    :class:`CheckpointFileManager` serves.
    """

    def __init__(self, location: str | os.PathLike[str] | CheckpointPath) -> None:
        """A checkpoint at ``location``: a local path, or a :class:`CheckpointPath` on another file system (created on :meth:`open`)."""
        self.root = as_checkpoint_path(location)
        self.metadata_path = self.root / METADATA_FILE
        self.offsets = OffsetSeqLog(self.root / OFFSETS_DIR)
        self.commits = CommitLog(self.root / COMMITS_DIR)

    # -- the query id --

    def read_query_id(self) -> uuid.UUID | None:
        """The query id in ``metadata``, or ``None`` if there is no such file.

        Raises:
            CorruptCheckpointError: the file is not ``{"id":"<uuid>"}``.
        """
        data = self.metadata_path.read_bytes()
        if data is None:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return parse_query_metadata(f"<not UTF-8: {exc}>", str(self.metadata_path))
        return parse_query_metadata(text, str(self.metadata_path))

    def create_query_id(self) -> uuid.UUID:
        """Write ``metadata`` with a new random query id; it is written once and never changed.

        Raises:
            ConcurrentCheckpointUpdateError: another query created it meanwhile.
        """
        query_id = uuid.uuid4()
        if not self.metadata_path.create_new(serialize_query_metadata(query_id).encode("utf-8")):
            raise concurrent_use_error(self.metadata_path, "its query id appeared while this query was starting; give each "
                                                           "query its own checkpoint location")
        return query_id

    # -- opening for a run --

    def open(self, batch_duration: Duration, num_sources: int, *, claim: CheckpointClaim | None = None) -> CheckpointState:
        """Claim the directory, create it and the query id if needed, clear leftovers of killed writers, and recover.

        Nothing is changed before the claim is held. Temporary files are removed only where the
        file system holds the directory for this process (a ``lock`` or a ``lease``); where it
        cannot (``detect``), another process's in-flight files may be among them, so they stay.

        Args:
            batch_duration: the runtime's batch interval.
            num_sources: how many sources the graph has.
            claim: the caller's claim on this directory, held for its run (a runtime claims
                before it opens); without one, the directory is claimed for the opening only.

        Raises:
            ConcurrentCheckpointUpdateError: another query holds the directory.
            CheckpointError: the checkpoint cannot be resumed by this query (see :meth:`recover`).
            CorruptCheckpointError: an entry needed to resume cannot be read.
        """
        if claim is not None:
            if not claim.held or claim.location.path != self.root.path:
                raise CheckpointError(f"{claim!r} does not hold {self.root}; claim the directory this checkpoint is in",
                                      path=str(self.root))
            return self._open(claim, batch_duration, num_sources)
        claim = checkpoint_claims.claim(self.root, self)
        try:
            return self._open(claim, batch_duration, num_sources)
        finally:
            claim.release()

    def _open(self, claim: CheckpointClaim, batch_duration: Duration, num_sources: int) -> CheckpointState:
        query_id = self.read_query_id()
        created = query_id is None
        if query_id is None:
            query_id = self.create_query_id()
        if claim.guarantee != "detect":
            sources = self.root / "sources"
            inputs = [sources / name for name in sources.listdir()]  # (none: an empty list)
            taken = [files for files in (i / "files" for i in inputs) if files.is_dir()]  # a DirectorySource's records
            for directory in (self.offsets.directory, self.commits.directory, self.root, *inputs, *taken):
                remove_temp_files(directory)  # (sources/<n>/: a stream.json whose first write was killed)
        return self.recover(query_id, created, batch_duration, num_sources)

    def recover(self, query_id: uuid.UUID, created: bool, batch_duration: Duration, num_sources: int) -> CheckpointState:
        """Read the logs and decide where the query resumes.

        The newest offsets entry gives the grid (checked against ``batch_duration``) and where
        new batches start. Every offsets entry without a commit is re-run over the range from
        the previous entry on disk to its own offsets: with synchronous tracking that is exactly
        the batch that was logged; with asynchronous tracking, whose log may be sparse, it also
        covers the batches in between that never reached the disk (Spark's rule).

        Raises:
            CheckpointError: written with another interval or number of sources, not written by
                aiodstream, or missing an entry that a re-run needs.
            CorruptCheckpointError: a needed entry cannot be read.
        """
        self.check_log_directories()
        offset_ids = self.offsets.batch_ids()
        commit_ids = self.commits.batch_ids()
        self._check_offsets_kept(offset_ids, commit_ids)
        if not offset_ids:
            return CheckpointState(query_id, created, None, (), tuple(commit_ids))
        latest = offset_ids[-1]
        latest_entry = self._offsets_entry(latest)
        grid = self._grid_of(latest, latest_entry, batch_duration)
        if len(latest_entry.offsets) != num_sources:
            raise CheckpointError(
                f"cannot resume from {self.root}: {self.offsets.path_of(latest)} has offsets for {len(latest_entry.offsets)} "
                f"source(s) and the pipeline now has {num_sources}; a restart needs the same sources in the same order, "
                "or a new checkpoint directory",
                path=str(self.offsets.path_of(latest)),
            )
        if commit_ids and commit_ids[-1] > latest:
            raise CheckpointError(
                f"cannot resume from {self.root}: {self.commits.path_of(commit_ids[-1])} commits a batch that has no "
                f"offsets entry (the newest is {self.offsets.path_of(latest)}); offsets entries were removed by hand: "
                "restore them, or start over with a new checkpoint directory",
                path=str(self.commits.path_of(commit_ids[-1])),
            )
        committed = set(commit_ids)
        rerun = []
        history = []
        for position, batch_id in enumerate(offset_ids):
            if batch_id in committed:
                entry = self._offsets_entry(batch_id)
                if batch_id == 0 or (position == 0 and _from_start(entry)) or (position > 0 and offset_ids[position - 1] == batch_id - 1):
                    start = (None,) * num_sources if position == 0 else self._offsets_entry(offset_ids[position - 1]).offsets
                    history.append(RecoveredBatch(batch_id, grid.time_of(batch_id), tuple(start), entry.offsets))
                continue
            entry = latest_entry if batch_id == latest else self._offsets_entry(batch_id)
            self._check_on_grid(batch_id, entry, grid)
            late = 0
            if position > 0:
                before = offset_ids[position - 1]
                between = sorted(c for c in committed if before < c < batch_id)
                if between:
                    # Its input would start at batch `before`'s end: the committed batches in between (their
                    # offsets entries gone) would be read and written again.
                    raise CheckpointError(
                        f"cannot re-run batch {batch_id} from {self.root}: batch {between[-1]} was committed but its "
                        f"offsets entry {self.offsets.path_of(between[-1])} is missing, so the re-run would read that "
                        "batch's input again; restore the missing entries, or start over with a new checkpoint directory",
                        path=str(self.offsets.path_of(between[-1])),
                    )
                previous = self._offsets_entry(before)
                start, late = previous.offsets, _batch_watermark(previous)
            elif batch_id == 0 or _from_start(entry):
                start = (None,) * num_sources
            else:
                raise CheckpointError(
                    f"cannot re-run batch {batch_id} from {self.root}: its input starts where the previous offsets entry "
                    f"ends, and there is no entry before {self.offsets.path_of(batch_id)}; restore the missing entries, or "
                    "start over with a new checkpoint directory",
                    path=str(self.offsets.path_of(batch_id)),
                )
            rerun.append(RecoveredBatch(batch_id, grid.time_of(batch_id), tuple(start), entry.offsets,
                                        _batch_watermark(entry), late, recorded_state_version(entry, str(self.offsets.path_of(batch_id)))))
        watermark = _batch_watermark(latest_entry)
        if latest in committed:
            commit = self.commits.get(latest)
            if commit is not None:
                watermark = max(watermark, commit.next_batch_watermark_ms)
        elif commit_ids:  # read as Spark reads the newest commit at a restart: a damaged one is refused, never skipped
            self.commits.get(commit_ids[-1])
        return CheckpointState(query_id, created, grid, tuple(offset_ids), tuple(commit_ids), latest, latest_entry.offsets,
                               tuple(rerun), tuple(history), watermark, _batch_watermark(latest_entry),
                               None if latest_entry.metadata is None else latest_entry.metadata.conf.get(WATERMARK_POLICY_KEY),
                               latest_entry.metadata is not None and latest_entry.metadata.conf.get(ASYNC_TRACKED_KEY) == "true",
                               _version_loaded(latest_entry, latest, str(self.offsets.path_of(latest))) + 1)

    def check_log_directories(self) -> None:
        """Refuse an ``offsets`` or ``commits`` that exists and is not a directory (a listing would read it as an empty log).

        Raises:
            CorruptCheckpointError: naming the path.
        """
        for log in (self.offsets, self.commits):
            if log.directory.exists() and not log.directory.is_dir():
                raise CorruptCheckpointError(
                    f"cannot read {self.root}: {log.directory} is not a directory, so its log entries are lost (it was "
                    "replaced after it was written); restore the directory from a copy, or start over with a new "
                    "checkpoint directory",
                    path=str(log.directory),
                )

    def _check_offsets_kept(self, offset_ids: Sequence[int], commit_ids: Sequence[int]) -> None:
        # Purges keep the newest offsets entries, so an empty offsets log beside commits means it was lost: resuming
        # would start again at batch 0 and read every committed batch's input a second time.
        if commit_ids and not offset_ids:
            raise CheckpointError(
                f"cannot resume from {self.root}: {self.commits.directory} holds commits up to batch {commit_ids[-1]} "
                f"but {self.offsets.directory} holds no offsets entry (removed or emptied by hand), so a restart would "
                "start again at batch 0 and repeat committed batches; restore the offsets entries, or start over with a "
                "new checkpoint directory",
                path=str(self.offsets.directory),
            )

    def _offsets_entry(self, batch_id: int) -> OffsetSeq:
        entry = self.offsets.get(batch_id)
        if entry is None:
            raise CheckpointError(f"{self.offsets.path_of(batch_id)} disappeared while the checkpoint was being read; "
                                  "is another process purging it?", path=str(self.offsets.path_of(batch_id)))
        return entry

    def _grid_of(self, batch_id: int, entry: OffsetSeq, batch_duration: Duration) -> BatchGrid:
        path = self.offsets.path_of(batch_id)
        conf = entry.metadata.conf if entry.metadata is not None else {}
        numbers = _grid_numbers(conf, str(path))
        if numbers is None:
            raise CheckpointError(
                f"cannot resume from {self.root}: {path} has no batch grid ({GRID_INTERVAL_KEY} and {GRID_ZERO_KEY} in its "
                "conf), so it was not written by aiodstream; use a new checkpoint directory",
                path=str(path),
            )
        interval, zero = numbers
        if interval != batch_duration.milliseconds:
            raise CheckpointError(
                f"cannot resume from {self.root}: it was written with a batch interval of {interval} ms and this runtime's "
                f"is {batch_duration.milliseconds} ms; batch ids and times are tied to the interval, so keep "
                f"batch_duration=Milliseconds({interval}), or use a new checkpoint directory",
                path=str(path),
            )
        grid = BatchGrid(Time(zero), batch_duration)
        self._check_on_grid(batch_id, entry, grid)
        return grid

    def _check_on_grid(self, batch_id: int, entry: OffsetSeq, grid: BatchGrid) -> None:
        stamp = entry.metadata.batch_timestamp_ms if entry.metadata is not None else None
        expected = grid.time_of(batch_id).milliseconds
        if stamp != expected:
            path = self.offsets.path_of(batch_id)
            raise CheckpointError(
                f"cannot resume from {self.root}: {path} says batch {batch_id} ran at {stamp} ms, but on the checkpoint's "
                f"grid (zero time {grid.zero_time.milliseconds} ms, every {grid.batch_duration.milliseconds} ms) it runs at "
                f"{expected} ms; the entry was edited or copied from another query: restore it, or use a new checkpoint directory",
                path=str(path),
            )

    # -- purging --

    def purge(self, threshold: int, offset_ids: Sequence[int] | None = None, commit_ids: Sequence[int] | None = None) -> None:
        """Delete offsets and commits entries below ``threshold``.

        Offsets go first: a crash in between leaves commits without offsets, which a restart
        ignores; the other order would leave old offsets without commits, which it would re-run.
        """
        self.offsets.purge(threshold, offset_ids)
        self.commits.purge(threshold, commit_ids)

    # -- inspection --

    def describe(self) -> CheckpointDescription:
        """Summarise the checkpoint without changing anything.

        The metadata and the newest entries that cannot be read (damaged, not a regular file, or
        refused by the system) are listed in ``damaged`` (their fields are then ``None``), so that
        every bad entry is reported at once.

        Raises:
            CheckpointError: the location does not exist or is not a checkpoint directory.
            OSError: the system refuses to read the directory or one of its logs (no permission).
        """
        if not self.root.exists():
            raise CheckpointError(f"no checkpoint at {self.root}: the directory does not exist", path=str(self.root))
        if not self.root.is_dir():
            what = local_entry_kind(os.fspath(self.root)) if self.root.is_local else "a file"
            raise CheckpointError(f"no checkpoint at {self.root}: it is {what}, not a directory", path=str(self.root))
        self.root.listdir()  # one the user may not read raises its OSError naming it, not "it has no metadata file"
        if not (self.metadata_path.exists() or self.offsets.directory.is_dir() or self.commits.directory.is_dir()):
            raise CheckpointError(
                f"{self.root} is not a checkpoint directory: it has no '{METADATA_FILE}' file and no '{OFFSETS_DIR}' or "
                f"'{COMMITS_DIR}' directory",
                path=str(self.root),
            )
        damaged: list[CorruptCheckpointError] = []

        def read(reader: Callable[[], T]) -> T | None:
            try:
                return reader()
            except CorruptCheckpointError as exc:  # reported with the rest of the summary
                damaged.append(exc)
                return None
            except OSError as exc:  # a listed entry the system will not read (no permission, an I/O error): damaged too
                path = str(exc.filename) if exc.filename is not None else str(self.root)
                damaged.append(CorruptCheckpointError(f"cannot read {path}: {exc.strerror or exc}", path=path))
                return None

        query_id = read(self.read_query_id)
        before = len(damaged)
        read(self.check_log_directories)
        offset_ids = self.offsets.batch_ids()
        commit_ids = self.commits.batch_ids()
        try:
            if len(damaged) == before:  # a log that is a file is reported as such, not again as an empty log
                self._check_offsets_kept(offset_ids, commit_ids)
        except CheckpointError as exc:  # a restart refuses it: damage to report, not "offsets none"
            damaged.append(CorruptCheckpointError(str(exc), path=exc.path))
        latest_offsets = read(self.offsets.get_latest)
        latest_commit = read(self.commits.get_latest)
        grid = None
        if latest_offsets is not None and latest_offsets[1].metadata is not None:
            conf, path = latest_offsets[1].metadata.conf, str(self.offsets.path_of(latest_offsets[0]))
            numbers = read(lambda: _grid_numbers(conf, path))
            if numbers is not None:
                grid = BatchGrid(Time(numbers[1]), Duration(numbers[0]))
        committed = set(commit_ids)
        temp = sum(
            1
            for directory in (self.root, self.offsets.directory, self.commits.directory)
            for name in directory.listdir()
            if name.startswith(".") and name.endswith(TEMP_SUFFIX)
        )
        return CheckpointDescription(
            str(self.root), query_id, grid, tuple(offset_ids), tuple(commit_ids), latest_offsets, latest_commit,
            tuple(i for i in offset_ids if i not in committed), temp, tuple(damaged),
        )

    def __repr__(self) -> str:
        return f"<Checkpoint {str(self.root)!r}>"


def _grid_numbers(conf: Mapping[str, str], path: str) -> tuple[int, int] | None:
    """The batch interval and zero time (ms) an offsets entry's conf records, or ``None`` if it records none.

    Raises:
        CorruptCheckpointError: they are there but not a positive and a signed long in ASCII digits.
    """
    interval, zero = conf.get(GRID_INTERVAL_KEY), conf.get(GRID_ZERO_KEY)
    if interval is None or zero is None:
        return None
    interval_ms, zero_ms = parse_long(interval), parse_long(zero)
    if interval_ms is None or interval_ms <= 0 or zero_ms is None:
        raise CorruptCheckpointError(
            f"cannot read {path}: its batch grid must be a positive whole number of milliseconds ({GRID_INTERVAL_KEY}) and a "
            f"whole number of milliseconds ({GRID_ZERO_KEY}), in ASCII digits, got {interval!r:.40} and {zero!r:.40}; the "
            "file was damaged after it was written: restore it from a copy, or start over with a new checkpoint directory",
            path=path,
        )
    return interval_ms, zero_ms


def recorded_state_version(entry: OffsetSeq, path: str) -> int | None:
    """The state version an offsets entry's batch loads (:data:`STATE_VERSION_KEY`), or ``None`` if it records none.

    Raises:
        CorruptCheckpointError: it is there but not a whole number >= 0 in ASCII digits.
    """
    text = None if entry.metadata is None else entry.metadata.conf.get(STATE_VERSION_KEY)
    if text is None:
        return None
    version = parse_long(text)
    if version is None or version < 0:
        raise CorruptCheckpointError(
            f"cannot read {path}: its state version ({STATE_VERSION_KEY}) must be a whole number >= 0 in ASCII digits, got "
            f"{text!r:.40}; the file was damaged after it was written: restore it from a copy, or start over with a new "
            "checkpoint directory",
            path=path,
        )
    return version


def _version_loaded(entry: OffsetSeq, batch_id: int, path: str) -> int:
    """The state version batch ``batch_id`` (logged as ``entry``) loads: the recorded one, else its id."""
    version = recorded_state_version(entry, path)
    return batch_id if version is None else version


def _from_start(entry: OffsetSeq) -> bool:
    """Whether ``entry`` says its batch's input starts where the query's does (:data:`FROM_START_KEY`)."""
    return entry.metadata is not None and entry.metadata.conf.get(FROM_START_KEY) == "true"


def _batch_watermark(entry: OffsetSeq) -> int:
    """An offsets entry's ``batchWatermarkMs`` (0 for an entry without metadata, as in Spark)."""
    return 0 if entry.metadata is None else entry.metadata.batch_watermark_ms
