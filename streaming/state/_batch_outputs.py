"""A partition's outputs of one batch, kept beside its working copy, so the batch's tasks run its state at most once.

What Spark's cache of the operator's RDD did, without the cache: a cached RDD stops pyspark from
pipelining the user's functions into the task, so every task needed a second Python worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["BatchOutputs", "once_per_batch"]


class BatchOutputs:
    """What a task finds for its batch's run: the outputs an earlier task of the same run kept, or None; see :func:`once_per_batch`."""

    def __init__(self, path: Path, token: str, outputs: list[Any] | None) -> None:
        """The record at ``path`` for the run ``token``, with what it holds for that run (None: nothing)."""
        self._path = path
        self._token = token
        self.outputs = outputs

    def keep(self, outputs: list[Any]) -> None:
        """Keep ``outputs`` as this run's (written whole, then renamed into place); the run kept before becomes the
        previous one, and the one before that is dropped.

        Only the holder of the partition's lock writes, so the temporary file has one name: what
        a writer killed before its rename left is overwritten by the next keep, never piled up.
        """
        temporary = self._path.with_name(f"{self._path.name}-new")
        with open(temporary, "wb") as file:
            pickle.dump(self._token, file, protocol=5)  # read first: another run's outputs are never unpickled
            pickle.dump(outputs, file, protocol=5)
        with contextlib.suppress(FileNotFoundError):
            os.replace(self._path, _previous(self._path))
        os.replace(temporary, self._path)
        self.outputs = outputs


def _previous(path: Path) -> Path:
    return path.with_name(f"{path.name}-previous")


def _kept(path: Path, token: str) -> list[Any] | None:
    """The outputs ``path`` keeps for the run ``token``, or None (another run's, or no file)."""
    try:
        with open(path, "rb") as file:
            if pickle.load(file) == token:
                outputs: list[Any] = pickle.load(file)
                return outputs
    except FileNotFoundError:
        pass
    return None


@contextlib.contextmanager
def once_per_batch(working_copy: Path, token: str) -> Iterator[BatchOutputs]:
    """Hold the partition's outputs record for the run ``token`` (one batch's RDD, as the driver made it).

    Another task computing the same partition of the same run, in any process of this executor,
    waits until this one leaves, then finds the outputs this one kept: the user's function runs
    once per key and batch however many Spark jobs read the partition (several outputs, a
    ``take`` and a ``count``, the operator's own output, a retried task). A run made anew (a batch
    re-run after a restart has another token), or a task on another executor, finds nothing and
    runs the batch from its version, as a task whose cached block was lost did. The two newest
    runs' outputs are kept, in two files per partition in the working copy's private directory:
    the one before serves a later operator that runs a failed batch's state again while this one
    already ran the next batch (``streaming.state.StateBehind``).
    """
    path = working_copy.with_suffix(".outputs")
    fd = os.open(working_copy.with_suffix(".outputs-lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by close, or by the kernel if the process dies
        outputs = _kept(path, token)
        if outputs is None:
            outputs = _kept(_previous(path), token)
        yield BatchOutputs(path, token, outputs)
    finally:
        os.close(fd)
