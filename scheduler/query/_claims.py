"""One writer per checkpoint: the process's claims on checkpoint directories, held across processes by the file system.

Spark keeps no lock: a second query on a checkpoint is found when it writes an entry that
exists (``CONCURRENT_STREAM_LOG_UPDATE``) or its ``metadata`` (``Multiple streaming queries are
concurrently using <path>``). Here a query claims its checkpoint before its start changes
anything there (moving a previous run aside, dropping uncommitted entries, removing temporary
files): in this process through :data:`checkpoint_claims`, across processes through the
file manager's :meth:`~scheduler.CheckpointFileManager.lock`.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid

from .._errors import CheckpointError, ConcurrentCheckpointUpdateError
from ._files import LOCK_FILE, CheckpointLock, CheckpointPath

__all__ = [
    "CheckpointClaim",
    "CheckpointClaims",
    "checkpoint_claims",
    "concurrent_log_update_error",
    "concurrent_use_error",
]


def concurrent_use_error(location: object, detail: str | None = None) -> ConcurrentCheckpointUpdateError:
    """Spark's refusal of a second query on a checkpoint: ``Multiple streaming queries are concurrently using <path>``.

    ``detail`` (who holds it, what to do) follows Spark's sentence after a colon.
    """
    message = f"Multiple streaming queries are concurrently using {location}"
    return ConcurrentCheckpointUpdateError(message if detail is None else f"{message}: {detail}", path=str(location))


def concurrent_log_update_error(batch_id: int, path: object) -> ConcurrentCheckpointUpdateError:
    """Spark's ``CONCURRENT_STREAM_LOG_UPDATE``: a log entry this query was writing already exists."""
    return ConcurrentCheckpointUpdateError(
        f"Concurrent update to the log. Multiple streaming jobs detected for {batch_id}. Please make sure only one "
        "streaming job runs on a specific checkpoint location at a time.",
        path=str(path),
    )


def claim_key(location: CheckpointPath) -> str:
    """What identifies a checkpoint directory in this process: the real path on the driver's disk, else the path as given.

    A remote path is not resolved: that would be a call into the JVM (Hadoop) on whatever
    thread asks. Two spellings of one remote directory are therefore two keys; the file
    system's lock still holds them apart across and within processes where it has one.
    """
    if location.is_local:
        return os.path.realpath(os.fspath(location))
    return f"{location.files.name}:{location.path}"


class CheckpointClaim:
    """This process's claim on one checkpoint directory, for one owner (a query), until :meth:`release`.

    Attributes:
        key: the directory's identity in the registry (see :func:`claim_key`).
        location: the directory.
        owner: the query holding it.
        claim_id: a random id, written with the holder record.
        guarantee: the cross-process hold's (see :class:`~scheduler.CheckpointLock`), or
            ``None`` before it is taken.
        kept_until: set when the owner stopped but keeps the claim until something of its run ends
            (what, for the refusal of another query meanwhile).
    """

    def __init__(self, registry: CheckpointClaims, key: str, location: CheckpointPath, owner: object) -> None:
        """A claim reserved in ``registry``; the registry takes the file system's lock."""
        self._registry = registry
        self.key = key
        self.location = location
        self.owner = owner
        self.claim_id = uuid.uuid4()
        self._lock: CheckpointLock | None = None
        self._released = False
        self.kept_until: str | None = None

    @property
    def guarantee(self) -> str | None:
        """``"lock"``, ``"lease"``, ``"detect"``, or ``None`` while not yet held."""
        return None if self._lock is None else self._lock.guarantee

    @property
    def held(self) -> bool:
        """Whether the claim is in force."""
        return self._lock is not None and not self._released

    def release(self) -> None:
        """Give the claim up, in this process and on the file system; idempotent, never raises for a vanished lock file."""
        if self._released:
            return
        self._released = True
        lock, self._lock = self._lock, None
        try:
            if lock is not None:
                lock.release()
        finally:
            self._registry._forget(self)

    def __repr__(self) -> str:
        state = "released" if self._released else (self.guarantee or "reserved")
        return f"<CheckpointClaim {self.location} {state} by {self.owner!r}>"


class CheckpointClaims:
    """The checkpoint directories claimed in this process, by location; thread-safe (queries start on any loop's thread)."""

    def __init__(self) -> None:
        """An empty registry."""
        self._lock = threading.Lock()
        self._held: dict[str, CheckpointClaim] = {}

    def claim(self, location: CheckpointPath, owner: object, *, run_id: uuid.UUID | None = None) -> CheckpointClaim:
        """Claim ``location`` for ``owner``, creating the directory if needed; blocking (file I/O, perhaps py4j).

        A claim ``owner`` already holds is returned as it is (a StreamingContext claims for the
        runtime it starts, which claims again). Nothing in the directory changes when the
        claim is refused.

        Raises:
            ConcurrentCheckpointUpdateError: another query holds it, in this process or another
                (Spark's ``Multiple streaming queries are concurrently using <path>``).
            CheckpointError: the location is a file.
        """
        key = claim_key(location)
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                if held.owner is owner and not held._released:
                    return held
                if held.kept_until is not None:
                    raise concurrent_use_error(location, f"{held.owner!r} stopped but keeps it until {held.kept_until}; "
                                                         "start again once that has ended, or use another checkpoint location")
                raise concurrent_use_error(location, f"{held.owner!r} is active on it in this process; stop that query "
                                                     "first, or use another checkpoint location")
            claim = CheckpointClaim(self, key, location, owner)
            self._held[key] = claim  # reserved: the lock below is taken outside the registry's own lock
        try:
            if location.exists() and not location.is_dir():
                raise CheckpointError(f"checkpoint location {location} is a file, not a directory; pass a directory path",
                                      path=str(location))
            location.mkdirs()
            record = {"claimId": str(claim.claim_id), "runId": None if run_id is None else str(run_id),
                      "host": socket.gethostname(), "pid": os.getpid()}
            lock = location.files.lock(location.path, json.dumps(record, sort_keys=True).encode("utf-8"))
            if lock is None:
                raise concurrent_use_error(location, f"another process holds it ({_describe_holder(location)}); stop "
                                                     "that query first, or use another checkpoint location")
        except BaseException:
            self._forget(claim)
            raise
        claim._lock = lock
        return claim

    def holder(self, location: CheckpointPath) -> CheckpointClaim | None:
        """The claim held on ``location`` in this process, or ``None``."""
        with self._lock:
            return self._held.get(claim_key(location))

    def _forget(self, claim: CheckpointClaim) -> None:
        with self._lock:
            if self._held.get(claim.key) is claim:
                del self._held[claim.key]

    def __repr__(self) -> str:
        with self._lock:
            return f"<CheckpointClaims {len(self._held)} held>"


def _describe_holder(location: CheckpointPath) -> str:
    lock_file = location / LOCK_FILE
    try:
        data = lock_file.read_bytes()
        fields = json.loads(data.decode("utf-8")) if data else None
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        fields = None
    if not isinstance(fields, dict):
        return f"its lock file is {lock_file}"
    parts = [f"{name} {fields[key]}" for key, name in (("runId", "run"), ("pid", "pid"), ("host", "on host"))
             if fields.get(key) is not None]
    gone = " (if that driver was killed, delete the lock file)" if fields.get("host") != socket.gethostname() else ""
    return f"{', '.join(parts)}; lock file {lock_file}{gone}"


checkpoint_claims = CheckpointClaims()
"""The process's registry of claimed checkpoint directories."""
