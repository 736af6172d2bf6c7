"""State snapshots on Spark Connect: a state FrameRDD saved by the server's Python workers, one file per partition,
and read back into the same partitions in the same order (classic Spark's snapshots are ``saveAsPickleFile`` files).

The files are :func:`streaming.connect.save_frame_partitions`'s (``part-NNNNN``, written through a local path or, for a
URI, fsspec in the workers). The number of partitions goes in a ``_partitions`` file beside them, written by this
process through the checkpoint's file manager, so that a snapshot is known for Connect's and read back with as many
partitions.
"""

from __future__ import annotations

import json
import os
from typing import Any

from scheduler import CheckpointError, CheckpointPath

__all__ = ["FRAMES_MARKER", "is_frame_snapshot", "load_frame_snapshot", "save_frame_snapshot"]

FRAMES_MARKER = "_partitions"
"""The file in a Connect snapshot's directory that names its format and its number of partitions."""

_FORMAT = "arrow-partition-files"


def _task_name(path: CheckpointPath) -> str:
    """``path`` as the server's Python workers name it: a local path, or its URI (with the URI's credentials)."""
    return os.fspath(path) if path.is_local else path.path


def save_frame_snapshot(rdd: Any, target: CheckpointPath) -> None:
    """Have the server's workers write ``rdd``'s partitions in ``target`` (a new directory), then name their number
    beside them (blocking: one Spark job, then a small write on this process's file manager)."""
    from ..connect import save_frame_partitions

    save_frame_partitions(rdd.frame, rdd.getNumPartitions(), _task_name(target))
    marker = json.dumps({"format": _FORMAT, "partitions": rdd.getNumPartitions()}).encode()
    if not (target / FRAMES_MARKER).create_new(marker):
        raise CheckpointError(f"cannot name the partitions of the state snapshot {target}: {FRAMES_MARKER} exists", path=str(target))


def is_frame_snapshot(directory: CheckpointPath) -> bool:
    """Whether ``directory`` holds a snapshot written on Spark Connect (blocking I/O)."""
    return (directory / FRAMES_MARKER).exists()


def load_frame_snapshot(context: Any, directory: CheckpointPath) -> Any:
    """The FrameRDD a snapshot holds, on ``context`` (a FrameContext), in its saved partitions and order (blocking:
    one small read here; the values are read by the server's workers when the RDD is first used).

    The RDD is marked for an RDD checkpoint (under the context's checkpoint directory), which its first use takes:
    a later save deletes the snapshot, and every plan derived from the restored state would read it again
    (on classic Spark a checkpoint cuts the lineage and a cached RDD is never read from its files again).

    Raises:
        CheckpointError: the snapshot's partitions file is missing or malformed, or of another format.
    """
    from ..connect import FrameRDD, saved_partitions_frame

    data = (directory / FRAMES_MARKER).read_bytes()
    try:
        described = json.loads(data or b"")
        partitions = int(described["partitions"])
        if partitions < 1:
            raise ValueError(described)
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"the state snapshot {directory} cannot be read: its {FRAMES_MARKER} file is "
                              f"{'missing' if data is None else 'malformed'}", path=str(directory)) from exc
    if described.get("format") != _FORMAT:
        raise CheckpointError(f"the state snapshot {directory} is in the format {described.get('format')!r}, which this "
                              f"version of aiodstream does not read (it reads {_FORMAT!r}); start over with a new checkpoint "
                              "directory", path=str(directory))
    restored = FrameRDD(context, saved_partitions_frame(context.session, partitions, _task_name(directory)), partitions)
    restored.checkpoint()
    return restored
