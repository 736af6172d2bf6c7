"""A second driver process for the checkpoint-claim tests: it holds a checkpoint and is mid-write when told to wait.

Usage: ``python tests/scheduler/checkpoint_holder_child.py CHECKPOINT``. Claims the checkpoint
and opens it (as a runtime does), leaves a temporary file as an entry being written would,
prints ``ready <pid> <temporary file name>`` and waits for a line on stdin; then adds offsets
entry 0, prints ``added <True|False>``, releases the claim and exits.
"""

from __future__ import annotations

import os
import sys

from scheduler import (
    BatchGrid,
    Checkpoint,
    CheckpointPath,
    Milliseconds,
    OffsetSeq,
    OffsetSeqMetadata,
    Time,
    checkpoint_claims,
    temp_name,
)


def main(location: str) -> None:
    """Hold ``location`` until stdin says go, then write one entry."""
    root = CheckpointPath.local(location)
    claim = checkpoint_claims.claim(root, "child")
    checkpoint = Checkpoint(root)
    checkpoint.open(Milliseconds(1000), 1, claim=claim)
    checkpoint.offsets.directory.mkdirs()
    in_flight = temp_name("0")
    with open(os.path.join(location, "offsets", in_flight), "wb") as f:  # an entry being written right now
        f.write(b"v1\n")
    print("ready", os.getpid(), in_flight, flush=True)
    sys.stdin.readline()
    added = checkpoint.offsets.add(0, OffsetSeq(("1",), OffsetSeqMetadata(0, 1000, BatchGrid(Time(0), Milliseconds(1000)).conf())))
    print("added", added, flush=True)
    claim.release()


if __name__ == "__main__":
    main(sys.argv[1])
