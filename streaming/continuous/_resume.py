"""Where a continuous run starts: the last committed epoch and each partition's offset (Spark's ``ContinuousExecution`` start-up).

Blocking code, run on a worker thread before the coordinator opens: the launcher's checks, the
checkpoint's resume point (reconciled with what an exactly-once sink committed), the sink's
preparation, and the task specs that carry the resume point to the tasks.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

import attrs

from scheduler import (
    Checkpoint,
    CheckpointClaim,
    CheckpointError,
    CheckpointPath,
    CommitMetadata,
    InvalidPipelineError,
    concurrent_log_update_error,
    remove_temp_files,
)

from ._launchers import TaskLauncher
from ._options import BACKLOG, DEFAULT_BACKLOG
from ._plan import ContinuousPlan
from ._task import TaskSpec, compose

__all__ = ["OpenedRun", "Resume", "open_run", "task_specs"]


@attrs.frozen
class Resume:
    """Where a run starts: its first epoch, each partition's offset, the last committed epoch and its merged offsets (if any)."""

    query_id: uuid.UUID
    start_epoch: int
    offsets: list[Any]
    latest: int | None
    latest_offsets: list[str] | None = None


@attrs.frozen
class OpenedRun:
    """What :func:`open_run` found: the resume point, the launcher's addresses, and the checkpoint (if any)."""

    resume: Resume
    driver_host: str
    bind_address: str
    checkpoint: Checkpoint | None


def open_run(plan: ContinuousPlan, launcher: TaskLauncher, location: CheckpointPath | None,
             claim: Callable[[CheckpointPath], CheckpointClaim], log: Any, backlog: int = 10_000) -> OpenedRun:
    """Blocking: the launcher's checks and addresses, the checkpoint's resume point, the sink's preparation.

    ``claim`` takes the checkpoint directory for the query before anything in it changes (the
    resume drops uncommitted entries and temporary files, which must not happen under a query
    writing there); the caller keeps the claim and releases it, also when this raises. ``backlog`` is the run's
    ``epochBacklogQueueSize``: how many epochs a run that never committed can have logged.

    Raises:
        InvalidPipelineError: too few task slots, a source that cannot run, a sink holding an
            earlier run's epochs without a checkpoint, or a checkpoint of another plan.
        CheckpointError: the checkpoint cannot be resumed.
    """
    launcher.check(plan.num_partitions)
    host = launcher.driver_host()
    bind = launcher.bind_address()
    for source in plan.sources:
        source.check()
    checkpoint = None
    if location is None:
        earlier = plan.sink.latest_committed_epoch()
        if earlier is not None:
            raise InvalidPipelineError(
                f"{plan.sink.description()} holds the epochs of an earlier run (up to {earlier}), and this query has no "
                "checkpoint to continue from: pass the checkpoint location of that run, or give this query an empty sink")
        resume = Resume(uuid.uuid4(), 0, initial_offsets(plan), None)
    else:
        held = claim(location)
        checkpoint = Checkpoint(location)
        resume = _resume(plan, checkpoint, held, log, backlog)
    plan.sink.prepare(resume.start_epoch - 1)
    return OpenedRun(resume, host, bind, checkpoint)


def initial_offsets(plan: ContinuousPlan) -> list[Any]:
    """Each partition's offset for a first run."""
    return [s.initial_offset(p) for s in plan.sources for p in range(s.num_partitions)]


def _resume(plan: ContinuousPlan, checkpoint: Checkpoint, claim: CheckpointClaim, log: Any, backlog: int = 10_000) -> Resume:
    assert claim.held
    root = checkpoint.root
    checkpoint.check_log_directories()  # a log that is a file would list as empty: every offsets entry dropped
    query_id = checkpoint.read_query_id() or checkpoint.create_query_id()
    if claim.guarantee != "detect":  # without a hold across processes they may be another writer's
        for directory in (checkpoint.offsets.directory, checkpoint.commits.directory, root):
            remove_temp_files(directory)
    latest_commit = checkpoint.commits.get_latest()
    latest = None if latest_commit is None else latest_commit[0]
    # An exactly-once sink may have committed epochs the commits log has not recorded (a crash
    # between the two writes): those epochs are done, so record them (their offsets are logged
    # before any commit).
    sink_latest = plan.sink.latest_committed_epoch()
    if sink_latest is not None and (latest is None or sink_latest > latest):
        # From the oldest offsets entry still logged: the purge removed older ones with their commits (a commits log
        # lost whole leaves the sink's record as the resume point).
        logged_ids = checkpoint.offsets.batch_ids()
        first = max(0 if latest is None else latest + 1, logged_ids[0] if logged_ids else 0)
        for epoch in range(first, sink_latest + 1):
            if checkpoint.offsets.get(epoch) is None:
                raise CheckpointError(f"the sink committed epoch {epoch} but the checkpoint has no offsets for it; "
                                      "the sink's output and this checkpoint belong to different queries",
                                      path=str(checkpoint.offsets.path_of(epoch)))
            if not checkpoint.commits.add(epoch, CommitMetadata(0)):
                raise concurrent_log_update_error(epoch, checkpoint.commits.path_of(epoch))
        latest = sink_latest
    logged = checkpoint.offsets.batch_ids()
    entry = None
    if latest is None:
        _check_never_committed(checkpoint, logged, backlog)
    else:  # the resume point is checked before anything is dropped
        entry = checkpoint.offsets.get(latest)
        if entry is None:
            raise CheckpointError(f"cannot resume from {root}: epoch {latest} is committed but its offsets entry "
                                  f"{checkpoint.offsets.path_of(latest)} is missing; restore it, or start over with a new "
                                  "checkpoint directory", path=str(checkpoint.offsets.path_of(latest)))
    # Offsets logged for epochs after the last commit belong to a run that died before committing
    # them; this run cuts its epochs anew from the last commit, so they are dropped (Spark keeps
    # them and ignores them, which would let a later restart resume from a stale entry).
    stale = [e for e in logged if latest is None or e > latest]
    for epoch in reversed(stale):
        checkpoint.offsets.path_of(epoch).delete()
    if stale:
        log.info("uncommitted epochs of the previous run dropped", epochs=stale)
    if latest is None or entry is None:
        return Resume(query_id, 0, initial_offsets(plan), None)
    if len(entry.offsets) != len(plan.sources):
        raise InvalidPipelineError(
            f"There are [{len(entry.offsets)}] sources in the checkpoint offsets and now there are "
            f"[{len(plan.sources)}] sources requested by the query. Cannot continue.")
    offsets: list[Any] = []
    for source, line in zip(plan.sources, entry.offsets, strict=True):
        if line is None:
            offsets.extend(source.initial_offset(p) for p in range(source.num_partitions))
        else:
            offsets.extend(source.split_offsets(line))
    return Resume(query_id, latest + 1, offsets, latest, [o if o is not None else "-" for o in entry.offsets])


def _check_never_committed(checkpoint: Checkpoint, logged: list[int], backlog: int) -> None:
    """Refuse offsets entries no run without a commit can leave: the commits log was lost, and dropping them would restart at 0.

    A run logs its epochs from 0 in order, and the coordinator stops it once more than its backlog
    epochs wait for a commit, so a run that never committed leaves epochs ``0..backlog`` at most.
    That run's backlog may have been larger than this one's: the bound is the larger of ``backlog``
    and the setting's default.
    """
    bound = max(backlog, DEFAULT_BACKLOG)
    if not logged or (logged == list(range(len(logged))) and logged[-1] <= bound):
        return
    raise CheckpointError(
        f"cannot resume from {checkpoint.root}: {checkpoint.commits.directory} holds no commit but "
        f"{checkpoint.offsets.directory} holds epochs {logged[0]}..{logged[-1]}, which no run without a commit leaves (it "
        f"logs from epoch 0 in order, at most {bound + 1} epochs unless its {BACKLOG} was larger than that); the commits "
        "log was lost: restore it (or, if the run had a larger backlog, set it again), or start over with a new checkpoint "
        "directory",
        path=str(checkpoint.commits.directory),
    )


def task_specs(plan: ContinuousPlan, resume: Resume, host: str, port: int, token: str, poll_interval_ms: int) -> list[TaskSpec]:
    """One task per partition, starting at its resume offset and epoch, reaching the coordinator at ``host:port`` with ``token``."""
    specs = []
    partition = 0
    for branch in plan.branches:
        operations = compose(branch.operations)
        for local in range(branch.source.num_partitions):
            specs.append(TaskSpec(host, port, token, partition, branch.source, local, resume.offsets[partition],
                                  resume.start_epoch, operations, plan.sink, poll_interval_ms))
            partition += 1
    return specs
