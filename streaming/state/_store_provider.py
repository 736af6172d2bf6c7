"""StateStoreProvider: the versions of one operator partition's state, loaded for a batch from a proven working copy or the checkpoint.

Spark's ``RocksDBStateStoreProvider`` with changelog checkpointing.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path

import attrs

from scheduler import CheckpointPath, library_logger, task_checkpoint_path

from ._partition_files import PartitionFiles
from ._private_dir import default_root, make_private
from ._rebuild import open_base, rebuild, replay_deltas
from ._snapshot_copies import SnapshotCopy, remove_stale_copies
from ._store import StateStore, StateStoreMetrics
from ._store_format import DELTA, GENESIS, SNAPSHOT, LineageBreakError, StateStoreError
from ._working_copy import open_working_copy

__all__ = [
    "StateStoreProvider",
    "StateStoreStatistics",
]

_log = library_logger("aiodstream.streaming", component="StateStore")


@attrs.frozen
class StateStoreStatistics:
    """How a provider's loads found their working copy (trio-style ``statistics()``).

    Attributes:
        loads: versions loaded.
        reused: loads that used the working copy on disk, proven current (its last delta's digest
            equals the checkpoint's delta at its version), replaying any newer deltas on top.
        rebuilt: loads that started the working copy over from the checkpoint's snapshot and
            deltas (missing, stale, newer than asked, of another checkpoint or history); a load of
            version 0 starts empty and counts as neither.
    """

    loads: int
    reused: int
    rebuilt: int


_shared: dict[tuple[str, int, int], StateStoreProvider] = {}
_shared_lock = threading.Lock()

UNLOAD_IDLE_S = 600.0
"""A shared provider no task asked for in this long is unloaded when another one is asked for: its working copy closed
and deleted (:meth:`StateStoreProvider.discard`), as Spark's maintenance unloads the stores of queries that no longer
run on an executor. So a worker process that served many stateful queries, one after another, keeps no file of the
finished ones (their checkpoints keep the state)."""


class StateStoreProvider:
    """The versions of one operator partition's state: loads a version for a batch, keeps the files tidy.

    The model is Spark's RocksDB state store with changelog checkpointing. Each partition of an
    operator keeps a working copy (an SQLite database in a private local directory of the
    executor, with the timeouts indexed) and, under the checkpoint directory, what makes any
    version loadable anywhere::

        <checkpoint root>/state/<operator>/<partition>/<version>.delta      the keys version v changed
        <checkpoint root>/state/<operator>/<partition>/<version>.snapshot   the whole state at v (an SQLite file)

    Batch ``b`` loads version ``b`` and commits version ``b + 1`` (a query's batch ids may skip
    between Once or AvailableNow runs; its offsets entries then record the version). Loading the version the working
    copy holds costs nothing; a newer one replays the deltas between; an older one (a batch run
    again after a crash) or an empty local directory (another executor) starts from the newest
    snapshot at or before it and replays the deltas after. So a batch costs what its keys cost:
    reads and writes are point operations on the working copy, the timeout pass reads the due
    rows through the index, and a commit writes one file holding the keys the batch touched.

    The working copy records the partition's checkpoint directory and the SHA-256 of the last
    delta it applied; every load compares that digest with the checkpoint's delta file of that
    version and rebuilds from the snapshot and deltas on any difference. Each delta records the
    digest of the delta before it (the hash chain, see ``_store_format``), so a replay that
    meets a delta written on top of another history (a batch re-run elsewhere) starts over
    from an older base.

    When a snapshot is due (:meth:`maintain_after`): a snapshot copies the whole state, so taking
    one every few versions would make each batch pay for the state held, not for what it writes.
    A version is due one once at least ``snapshot_every`` versions passed since the newest
    snapshot and the delta files committed since then add up to ``snapshot_delta_fraction`` of
    the working copy's size (its pages): a load that starts from the snapshot replays at most
    about that much, and the copying, spread over the batches, costs in proportion to what they
    write. A state of at most ``small_state_bytes`` is snapshotted every ``snapshot_every``
    versions as before. The provider counts the bytes of the deltas it commits; those committed
    before it was made (another process, a restart) count as the mean of those it saw, and the
    newest snapshot is found by listing the checkpoint once, then again whenever a snapshot
    looks due. Files are purged when a snapshot is taken: the deltas and snapshots older than
    the newest snapshot at or before the oldest retained version go, so the checkpoint holds
    every delta back to that base (Spark's RocksDB provider instead uploads only the new files
    of each snapshot, which SQLite's single file does not allow).

    What a writer killed mid-write leaves is swept (:meth:`remove_leftovers`, at each load and
    maintenance), never what a live writer still needs.

    Measured (``bench/bench_state.py``, local[2]): a batch touching 1,000 keys took 589 ms with
    1,000,000 keys held and 694 ms with 10,000, while ``updateStateByKey``, which rebuilds its
    state each batch, went from about 0.6 s to 5 s; a commit took 2.75 ms per partition. (LMDB
    and RocksDB bindings were not measured.) Proving the working copy before each batch (reading
    the newest delta and its SHA-256) measured 0.20-0.26 ms per load against 0.02-0.04 ms
    without, with 1,000,000 keys held and 1,000 touched (``bench/bench_state.py --only
    store_direct``, a shared 2-core machine at load 14-18, where a whole batch of the store
    alone took 45-120 ms).

    Args:
        checkpoint_root: the directory whose ``state/`` holds the durable files: a path, or a URI
            reached through fsspec (see :func:`~scheduler.task_checkpoint_path`).
        operator_id: the stateful operator's number in its graph.
        partition_id: the partition.
        local_dir: the private directory the working copy goes in, made with mode 0700 if
            missing (default: ``aiodstream-state`` under Spark's local directory in a Spark task,
            else a private directory of this process; see ``_private_dir.default_root``).
        snapshot_every: the fewest versions between two snapshots (:meth:`maintenance`).
        min_versions_to_retain: keep what loading any of the newest this many versions needs.
        snapshot_delta_fraction: a snapshot is due once the deltas committed since the last one
            add up to this fraction of the working copy's size.
        small_state_bytes: a working copy at most this large is snapshotted every
            ``snapshot_every`` versions whatever its deltas (its copy costs next to nothing).
        fsync: flush each delta and snapshot, and its directory, to disk before its write returns
            (two ``fsync`` calls per commit), so a committed version survives a crash of the
            machine (the default). False gives Spark's own state stores' durability on a local
            disk: a committed version is then in the OS's page cache, which survives the death of
            any process (exactly-once recovery after a SIGKILL is the same either way), not a
            power cut. Only local paths; other file systems keep what their file manager gives.
            The streaming layer sets it from ``spark.aiodstream.stateStore.fsync``.

    Attributes:
        partition_id: the partition.
        directory: the partition's durable files under the checkpoint.
        identity: what the working copy records as its owner (the checkpoint, operator, partition).
        working_copy: the SQLite file, in the private directory.

    Raises:
        StateStoreError: ``local_dir`` is not private (another user's, open to others, a link).
    """

    def __init__(self, checkpoint_root: str | os.PathLike[str] | CheckpointPath, operator_id: int, partition_id: int, *,
                 local_dir: str | os.PathLike[str] | None = None, snapshot_every: int = 10,
                 min_versions_to_retain: int = 100, snapshot_delta_fraction: float = 0.5,
                 small_state_bytes: int = 1 << 20, fsync: bool = True) -> None:
        """Name the partition's files and take its private directory; nothing is read until :meth:`load`."""
        if snapshot_every < 1 or min_versions_to_retain < 1:
            raise ValueError("snapshot_every and min_versions_to_retain must be at least 1")
        root = task_checkpoint_path(checkpoint_root)
        self.partition_id = partition_id
        self._files = PartitionFiles(root / "state" / str(operator_id) / str(partition_id), fsync=fsync)
        self.directory = self._files.directory
        where = str(Path(root).resolve()) if root.is_local else root.path
        # what the working copy records and must match: this partition of this checkpoint
        self.identity = f"{where}/state/{operator_id}/{partition_id}"
        if local_dir is None:
            private = default_root(self.identity)
        else:
            private = Path(local_dir)
            problem = make_private(private)
            if problem is not None:
                raise StateStoreError(f"the state store's working copies go in a directory only this user can enter "
                                      f"(mode 700): {private} is {problem}; pass another local_dir")
        self.working_copy = private / f"{hashlib.sha256(self.identity.encode()).hexdigest()[:32]}.sqlite"
        self.snapshot_every = snapshot_every
        self.min_versions_to_retain = min_versions_to_retain
        self.snapshot_delta_fraction = snapshot_delta_fraction
        self.small_state_bytes = small_state_bytes
        self._snapshot_base: int | None = None  # the newest snapshot's version, once listed
        self._delta_bytes: dict[int, int] = {}  # the sizes of the deltas this provider committed after that snapshot
        self.last_metrics: StateStoreMetrics | None = None
        self._lock = threading.Lock()  # one load-to-commit at a time; maintenance waits for it, not a snapshot's copy
        # held while a snapshot copies through its own connection (one at a time). A rebuild meanwhile replaces the
        # working copy's files: the copy goes on reading the old ones, and SQLite neither checkpoints nor removes a
        # WAL when its last connection closes on a database file that was unlinked, so the new WAL is safe.
        self._copying = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._loads = self._reused = self._rebuilt = 0
        self.asked_at = 0.0  # when :meth:`shared` last gave it out (monotonic seconds)

    @classmethod
    def shared(cls, checkpoint_root: str | os.PathLike[str] | CheckpointPath, operator_id: int,
               partition_id: int, *, fsync: bool | None = None) -> StateStoreProvider:
        """This process's provider of that partition (made on first use): tasks of later batches that land in the
        same worker process reuse its open working copy instead of opening it again.

        ``fsync`` is the batch's setting (see the class's arguments), applied to the provider
        whether it is new or not; None leaves it as it is (on for a new provider).
        """
        key = (str(checkpoint_root), operator_id, partition_id)
        now = time.monotonic()
        with _shared_lock:
            provider = _shared.get(key)
            if provider is None:
                provider = _shared[key] = cls(checkpoint_root, operator_id, partition_id)
            if fsync is not None:
                provider.fsync = fsync
            provider.asked_at = now
            for idle in [k for k, p in _shared.items() if now - p.asked_at > UNLOAD_IDLE_S]:
                if _unload(_shared[idle]):  # (one in use now is not idle: it is tried again later)
                    del _shared[idle]
            return provider

    @property
    def fsync(self) -> bool:
        """Whether each delta and snapshot is flushed to disk before its write returns (see the class's arguments)."""
        return self._files.fsync

    @fsync.setter
    def fsync(self, value: bool) -> None:
        self._files.fsync = value

    def statistics(self) -> StateStoreStatistics:
        """How this provider's loads found their working copy so far."""
        return StateStoreStatistics(self._loads, self._reused, self._rebuilt)

    # -- loading --

    def load(self, version: int) -> StateStore:
        """The state as version ``version`` left it, open for the changes of version ``version + 1``.

        The working copy on disk is used only if it is proven to be this partition's at a
        version of the checkpoint's history (see the class's docstring); anything else is
        rebuilt from the checkpoint's files.

        Raises:
            StateStoreError: a file that version needs is missing or damaged, or the checkpoint's
                files do not form one history down to that version.
        """
        if version < 0:
            raise ValueError(f"a state version is >= 0, got {version}")
        self._lock.acquire()
        try:
            while True:
                conn, loaded_from, parent = self._prove_or_rebuild(version)
                conn.execute("BEGIN IMMEDIATE")
                # Another process's provider on the same working copy (Python workers of one executor share it)
                # may have committed between the proof and this write lock: then it holds another version now.
                if conn.execute("SELECT version, digest FROM meta").fetchone() == (version, parent):
                    break
                conn.execute("ROLLBACK")
        except BaseException:
            self._lock.release()
            raise
        return StateStore(self._files, conn, version, bytes(parent) or GENESIS, loaded_from,
                          functools.partial(self._finish, version + 1))

    def has_version(self, version: int) -> bool:
        """Whether the checkpoint holds ``version`` (its delta or snapshot: a batch committed it); 0, the empty state, always."""
        return version == 0 or self._files.path(version, DELTA).exists() or self._files.path(version, SNAPSHOT).exists()

    def _prove_or_rebuild(self, version: int) -> tuple[sqlite3.Connection, str, bytes]:
        """The working copy at ``version``, proven or rebuilt (see :meth:`load`): it, where it came from, its digest."""
        try:
            conn = self._connection()
            current, store, digest = conn.execute("SELECT version, store, digest FROM meta").fetchone()
            reason = self._unproven(current, store, digest, version)
        except sqlite3.DatabaseError as exc:
            reason = f"it is not a working copy ({exc})"
        loaded_from = "working copy"
        if reason is None:
            try:
                replay_deltas(conn, self._files, current, version, prove=True,
                              missing=lambda path: self._missing(version, path))
                self._reused += 1
            except LineageBreakError as exc:
                reason = str(exc)
        if reason is not None:
            conn = self._rebuild(version, reason)
            loaded_from = "checkpoint" if version else "empty"
        # Every load sweeps the private directory (local: cheap); the checkpoint's directory at
        # a new provider's first load (a new process, maybe after a kill), at a rebuild, or when
        # a dead copy of this partition shows a snapshot's write was cut short here.
        self._remove_leftovers_quietly(version, checkpoint=not self._loads or reason is not None)
        self._loads += 1
        return conn, loaded_from, conn.execute("SELECT digest FROM meta").fetchone()[0]

    def _unproven(self, current: int, store: str, digest: bytes, version: int) -> str | None:
        """Why the working copy (at ``current``, of ``store``, last delta ``digest``) cannot serve ``version``; None if it can."""
        if current == 0:
            return "empty"  # nothing to prove against: starting over costs nothing
        if store != self.identity:
            return f"it belongs to {store or 'an unknown store'}"
        if current > version:
            return f"it is at version {current}, newer than {version}"
        if not self._files.has_deltas(current, version):
            return f"deltas {current + 1} to {version} are not all in the checkpoint"
        # Behind: the replay proves it (each delta names its parent's digest). At the version: the
        # checkpoint's delta of that version must be the one it applied.
        if current == version and self._files.delta_digest(current) != digest:
            return f"its version {current} is not the checkpoint's (the delta's digest differs or the delta is gone)"
        return None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = open_working_copy(self.working_copy)
        return self._conn

    def _rebuild(self, version: int, reason: str) -> sqlite3.Connection:
        """Start the working copy over from the newest snapshot at or before ``version``, then replay deltas.

        A replay that meets a delta of another history (a snapshot taken from a working copy
        whose batch was then re-run elsewhere) starts over from the next older snapshot, down to
        the empty state.
        """
        if version:
            self._rebuilt += 1
            _log.info("state store working copy rebuilt from the checkpoint", directory=str(self.directory),
                      version=version, reason=reason)
        try:
            return rebuild(self._files, version, self._start_from, missing=lambda path: self._missing(version, path),
                           on_older_base=self._on_older_base)
        except BaseException:
            self._conn = None  # closed by the failed replay: the next load starts over
            raise

    def _on_older_base(self, base: int, first_break: LineageBreakError) -> None:
        _log.warning("state store snapshot does not lead to the checkpoint's deltas; trying an older base",
                     directory=str(self.directory), snapshot=base, error=str(first_break))

    def _missing(self, version: int, path: CheckpointPath) -> str:
        deltas, snapshots = self._files.versions(DELTA), self._files.versions(SNAPSHOT)
        present = f"(deltas present: {deltas or 'none'}, snapshots: {snapshots or 'none'})"
        stem, _, kind = path.name.partition(".")
        if kind == "delta" and stem.isdigit() and int(stem) > max(deltas + snapshots, default=0):
            # Past every file here: the batch that writes it (batch id = version - 1) did not commit it, or it was removed.
            return (f"cannot load state version {version} from {self.directory}: state version {stem} is not there: the "
                    f"batch that writes it (id {int(stem) - 1} unless the query's offsets entries record state versions) "
                    f"failed or did not run this state (see that batch's error), or {path} was removed after its batch "
                    f"committed (restore it from a copy) {present}")
        return f"cannot load state version {version} from {self.directory}: {path.name} is missing {present}"

    def _start_from(self, base: int) -> sqlite3.Connection:
        """A new working copy holding snapshot ``base`` (the empty state for 0), recorded as this partition's."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        # The snapshot's own record of its digest stays: the next delta's parent must match it.
        conn = self._conn = open_base(self._files, base, self.working_copy)
        conn.execute("UPDATE meta SET store = ?", (self.identity,))
        return conn

    def _finish(self, version: int, metrics: StateStoreMetrics | None) -> None:
        # The end of a load-to-commit (the metrics of version's commit, or None for an abort): the next may load.
        if metrics is not None:
            self.last_metrics = metrics
            self._delta_bytes[version] = metrics.delta_bytes
        self._lock.release()

    # -- maintenance --

    def maintenance(self) -> None:
        """Write a snapshot of the working copy if its version is due one, and delete what no retained version needs.

        Safe beside loads and commits of this partition, and no batch waits for the copy: the
        partition's lock is held only to read the version and to start a read transaction on a
        second connection to the working copy (between batches: at a committed version), which
        then copies that version while the next batches load and commit through the first
        (SQLite's WAL keeps a reader's view). The copy, its checksum and the write to the
        checkpoint run outside the lock. The snapshot is named by the version inside the copy
        (also against another process or provider on the same working copy), and skipped if the
        checkpoint's delta of that version is not the one the copy holds (the batch was re-run
        elsewhere), or while another snapshot of this provider is still being copied. A load that
        rebuilds the working copy meanwhile does not wait either (see ``_copying``). It first
        removes what killed writers left (:meth:`remove_leftovers`).
        """
        with self._lock:
            conn = self._connection()
            version = conn.execute("SELECT version FROM meta").fetchone()[0]
            size = conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
        self._remove_leftovers_quietly(version)
        if version and self._snapshot_due(version, size):
            if self._files.path(version, SNAPSHOT).exists():
                self._snapshot_written(version)
            else:
                self._snapshot()
        self._files.purge(version, self.min_versions_to_retain)

    def _snapshot(self) -> None:
        """Copy the working copy's committed version through a second connection and write it as that version's snapshot."""
        with self._lock:  # between batches: the read transaction holds the version last committed
            if not self._copying.acquire(blocking=False):
                return  # another snapshot is being copied: the next due version writes one
            try:
                reader = sqlite3.connect(self.working_copy, isolation_level=None, check_same_thread=False)
            except BaseException:
                self._copying.release()
                raise
            try:
                reader.execute("BEGIN")
                copied, digest = reader.execute("SELECT version, digest FROM meta").fetchone()
            except BaseException:
                reader.close()
                self._copying.release()
                raise
        try:
            try:
                with SnapshotCopy(self.working_copy) as copying:
                    target = sqlite3.connect(copying.path)
                    try:
                        reader.backup(target)  # the pages of the reader's version, whatever commits meanwhile
                    finally:
                        target.close()
                    reader.execute("ROLLBACK")
                    copying.label(copied)
                    if self._files.path(copied, SNAPSHOT).exists():
                        self._snapshot_written(copied)
                        return
                    if self._files.delta_digest(copied) == digest:
                        self._files.write_snapshot(copied, copying.path.read_bytes())
                        self._snapshot_written(copied)
                    else:  # the batch was re-run elsewhere since: a snapshot of this copy would be of another history
                        _log.warning("state store snapshot skipped: the working copy is not the checkpoint's version",
                                     directory=str(self.directory), version=copied)
            finally:
                reader.close()
        finally:
            self._copying.release()

    def remove_leftovers(self, version: int, *, checkpoint: bool = True) -> int:
        """Remove what writers killed mid-write left of this partition; return how many files were removed.

        ``version`` is one this partition has committed (the one being loaded or maintained).
        Called by every load and by :meth:`maintenance`; a load other than a provider's first or
        a rebuild passes ``checkpoint=False``: the checkpoint's directory is then listed only if
        a dead copy of this partition was found (a listing may be a round trip to a remote store).

        * In the working copies' private directory (every partition's, of this executor): the
          snapshot copies whose writer is gone (its ``flock`` released with its process; copies
          being written by a live process or thread are left alone), with SQLite's sidecars.
        * In the partition's checkpoint directory: the file managers' hidden temporary files
          (``.<version>.delta.<uuid>.tmp``, ``.<version>.snapshot.<uuid>.tmp``) that no live
          writer of this partition can still need. A delta of a version at most ``version`` is
          already committed (a load of ``version`` needs every delta up to it), so only a losing
          speculative or zombie attempt can still be writing one: removing its temporary file
          makes that late write fail instead of replacing the committed delta. A snapshot is
          written in the background after its commit, maybe by another executor still copying
          while later batches run, so its temporary file is removed at once only when a sweep
          found the dead copy of that version's snapshot in the private directory (the writer
          was killed on this executor; a sweep of another partition leaves a mark, see
          :func:`remove_stale_copies`), else a whole snapshot period later (its version
          at most ``version - snapshot_every``); a snapshot still being written then fails and is
          skipped (logged), as the next due version writes one again. The checkpoint's
          temporary names carry no writer, so nothing is removed by age, and nothing of newer
          versions (the next batch, maybe running now) is touched.
        """
        removed, killed = remove_stale_copies(self.working_copy.parent, self.working_copy.stem)
        if checkpoint or killed:
            removed += self._files.remove_temporary_files(version, self.snapshot_every, killed)
        return removed

    def _remove_leftovers_quietly(self, version: int, *, checkpoint: bool = True) -> None:
        try:
            removed = self.remove_leftovers(version, checkpoint=checkpoint)
        except Exception as exc:  # housekeeping: the batch goes on, the next sweep retries
            _log.warning("state store could not remove files left by killed writers", directory=str(self.directory),
                         error=repr(exc))
        else:
            if removed:
                _log.info("state store removed files left by killed writers", directory=str(self.directory),
                          removed=removed)

    def maintain_after(self, version: int) -> threading.Thread | None:
        """After committing ``version``: if it is due a snapshot (the class's docstring), run :meth:`maintenance` in a thread.

        The batch does not wait for the copy (Spark's maintenance task); the thread is returned
        so a caller may join it. ``None`` when nothing is due.
        """
        metrics = self.last_metrics
        if metrics is None or self._copying.locked():  # a snapshot still being copied: a later commit checks again
            return None
        if not self._snapshot_due(version, metrics.memory_used_bytes):
            return None
        thread = threading.Thread(target=self._maintain_quietly, name=f"aiodstream-state-maintenance-{self.directory.name}",
                                  daemon=True)
        thread.start()
        return thread

    def _snapshot_due(self, version: int, state_bytes: int) -> bool:
        """Whether ``version``, with a working copy of ``state_bytes``, is due a snapshot (see the class's docstring)."""
        for fresh in (False, True):
            base = self._snapshot_base
            if fresh or base is None or base > version:  # first, or the batch went back
                base = max((v for v in self._files.versions(SNAPSHOT) if v <= version), default=0)
                self._snapshot_written(base)
            if version - base < self.snapshot_every:
                return False
            if state_bytes <= self.small_state_bytes:
                return True
            known = [size for v in range(base + 1, version + 1) if (size := self._delta_bytes.get(v)) is not None]
            if not known:
                return True  # nothing to go by: by the count of versions
            written = sum(known) + (version - base - len(known)) * sum(known) / len(known)
            if written < self.snapshot_delta_fraction * state_bytes:
                return False
            # looks due: list again first, another process may have written a newer snapshot
        return True

    def _snapshot_written(self, version: int) -> None:
        """Count the deltas from the snapshot of ``version`` on (the newest known)."""
        self._snapshot_base = version
        for v in [v for v in list(self._delta_bytes) if v <= version]:
            self._delta_bytes.pop(v, None)

    def _maintain_quietly(self) -> None:
        try:
            self.maintenance()
        except Exception as exc:  # a snapshot is an optimisation: the deltas stay the truth
            _log.warning("state store maintenance failed; the next snapshot version retries", directory=str(self.directory),
                         error=repr(exc))

    def close(self) -> None:
        """Close the working copy (it stays on disk for the next load)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def discard(self, *, wait: bool = True) -> bool:
        """Close the working copy and delete it, as Spark's RocksDB store deletes its local folder when unloaded: the
        checkpoint keeps every version, and a later load rebuilds the copy from it.

        Returns False, having done nothing, when ``wait`` is false and a load or a snapshot's copy holds the store.
        """
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            if not self._copying.acquire(blocking=wait):
                return False
            try:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{self.working_copy}{suffix}").unlink(missing_ok=True)
                return True
            finally:
                self._copying.release()
        finally:
            self._lock.release()

    def __repr__(self) -> str:
        return f"<StateStoreProvider {self.directory}>"


def _unload(provider: StateStoreProvider) -> bool:
    """Discard an idle shared provider's working copy, unless a task uses it: one of this process (a load holds it), or
    of another worker process of the executor, which shares the copy's path and holds the partition's outputs lock
    while it runs (``once_per_batch``). A process whose open copy is unlinked goes on with it; the next opens anew."""
    try:
        fd = os.open(provider.working_copy.with_suffix(".outputs-lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by the close below
        return provider.discard(wait=False)
    except OSError:  # another process's task holds it (BlockingIOError), or the lock cannot be taken
        return False
    finally:
        os.close(fd)
