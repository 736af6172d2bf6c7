"""The state store's file format: a checksummed delta or snapshot, and the hash chain of the deltas.

After the changelog and snapshot files of Spark's RocksDB state store (``<version>.changelog``, ``<version>.zip``).
"""

from __future__ import annotations

import hashlib
import io
import pickle
from typing import Any

from scheduler import CheckpointPath, StreamingError

__all__ = [
    "DELTA",
    "GENESIS",
    "REMOVED",
    "SNAPSHOT",
    "Change",
    "LineageBreakError",
    "StateStoreError",
    "decode",
    "delta_digest",
    "encode",
    "kind_name",
    "read_delta",
]

_MAGIC = b"AIODSTATE2"
_MAGIC_V1 = b"AIODSTATE1"  # deltas without the digest of their parent (earlier releases)
_HEADER = len(_MAGIC) + 1 + 8
_DIGEST = 32

DELTA = b"D"
"""The kind byte of a delta file: the keys one version changed."""
SNAPSHOT = b"S"
"""The kind byte of a snapshot file: the whole state at one version (an SQLite file)."""
GENESIS = bytes(_DIGEST)
"""The parent digest of version 1's delta: the empty state."""
REMOVED = -2
"""The timeout of a change that deletes its key."""

Change = tuple[bytes, bytes | None, int]
"""One change of a delta: ``(key, value, timeout)``; ``value`` None with timeout :data:`REMOVED` deletes the key."""


class StateStoreError(StreamingError):
    """A state store file is missing, damaged, or not one of ours, or a working directory is not private; the message names it."""


class StateNotFoundError(StateStoreError, LookupError):
    """What a state read asks for is not there (not damage): no such checkpoint, no state store in it, no such
    operator, or a batch not committed or written yet; the message names what is there instead."""


class LineageBreakError(StateStoreError):
    """A delta was written on top of another history than the state it would be applied to."""


def kind_name(kind: bytes) -> str:
    """``"delta"`` or ``"snapshot"``: the kind's word in file names and messages."""
    return "delta" if kind == DELTA else "snapshot"


def encode(kind: bytes, payload: bytes) -> bytes:
    """A file of ``kind`` holding ``payload``.

    Both kinds: the magic ``AIODSTATE2`` (``AIODSTATE1`` for files of earlier releases, still
    read) and the kind byte, the payload's length (8 bytes, big-endian), the payload, and its
    SHA-256 (which is also the file's digest in the chain). A delta's payload is the digest of
    the delta before it (32 bytes, :data:`GENESIS` before the first; absent in ``AIODSTATE1``)
    followed by its pickled list of :data:`Change`; a snapshot's is the SQLite database file. A
    torn or altered file fails its checksum and is reported with its path.

    So the deltas form a hash chain: equal digests at a version mean the same history, not just
    the same version number. The digests are plain SHA-256, not keyed: they prove lineage, not
    authorship, since whoever can write the checkpoint can already run code through it (a
    checkpoint holds pickled functions and state: protect it like the program).
    """
    return _MAGIC + kind + len(payload).to_bytes(8, "big") + payload + hashlib.sha256(payload).digest()


def decode(path: CheckpointPath, kind: bytes, data: bytes | None = None) -> tuple[bytes, bytes, bool]:
    """The payload of a file of ours, its digest (the SHA-256 of the payload, checked), and whether it is ``AIODSTATE1``.

    Raises:
        StateStoreError: the file is missing, not of ``kind``, truncated or damaged.
    """
    if data is None:
        data = path.read_bytes()
    if data is None:
        raise StateStoreError(f"state store file {path} is missing")
    magic = data[: len(_MAGIC)]
    if len(data) < _HEADER + _DIGEST or magic not in (_MAGIC, _MAGIC_V1) or data[len(_MAGIC):len(_MAGIC) + 1] != kind:
        raise StateStoreError(f"state store file {path} is not an aiodstream {kind_name(kind)} file (or is truncated)")
    size = int.from_bytes(data[len(_MAGIC) + 1:_HEADER], "big")
    payload, digest = data[_HEADER:_HEADER + size], data[_HEADER + size:]
    if len(payload) != size or hashlib.sha256(payload).digest() != digest:
        raise StateStoreError(f"state store file {path} is damaged: its checksum does not match (a torn or altered write)")
    return payload, digest, magic == _MAGIC_V1


def read_delta(path: CheckpointPath) -> tuple[bytes, bytes | None, list[Change]]:
    """A delta's digest, its parent's digest (None in an ``AIODSTATE1`` file), and its changes.

    The changes are unpickled as plain data only (:class:`_PlainData`: a pickle naming a class or function is damage).
    """
    payload, digest, v1 = decode(path, DELTA)
    if v1:
        return digest, None, _changes(path, payload)
    if len(payload) < _DIGEST:
        raise StateStoreError(f"state store file {path} is not an aiodstream delta file (or is truncated)")
    return digest, payload[:_DIGEST], _changes(path, payload[_DIGEST:])


class _PlainData(pickle.Unpickler):
    """An unpickler of plain data only: a pickle that names any class or function (the only way one runs code) is
    refused. A delta's changes are lists, tuples, bytes, None and ints, which need none; so reading a delta (a restart,
    ``aiodstream state --operator``) runs no code of its file, even before its history is checked."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a state delta holds plain data only, not {module}.{name}")


def _changes(path: CheckpointPath, data: bytes) -> list[Change]:
    """A delta's pickled changes, checked to be what a commit writes: a list of ``(bytes, bytes | None, int)``.

    A payload whose checksum matches yet is not that (written so by hand, or by another program) is damage
    like a failed checksum, not a traceback.
    """
    try:
        changes = _PlainData(io.BytesIO(data)).load()
    except Exception as exc:  # any failure to unpickle bytes, None and ints (UnpicklingError, EOFError, ...) is damage
        raise StateStoreError(f"state store file {path} is damaged: its changes cannot be unpickled ({exc!r})") from exc
    if not isinstance(changes, list) or not all(
            type(c) is tuple and len(c) == 3 and type(c[0]) is bytes and (c[1] is None or type(c[1]) is bytes)
            and type(c[2]) is int for c in changes):
        raise StateStoreError(f"state store file {path} is damaged: its payload is not a list of (key, value, timeout) "
                              f"changes, got {type(changes).__name__}")
    return changes


def delta_digest(path: CheckpointPath) -> bytes | None:
    """The digest of the checkpoint's delta at ``path`` (checked, not unpickled), or None if there is none."""
    data = path.read_bytes()
    return None if data is None else decode(path, DELTA, data)[1]
