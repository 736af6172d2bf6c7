"""OutputModel: one output operation's work, as one duration or as a Spark job of stages of tasks.

The simulator's stand-in for the Spark job an output operation runs (its stages and tasks).
"""

from __future__ import annotations

import random
from typing import Protocol, Sequence, runtime_checkable

import attrs

from ._model_checks import ModelError, whole
from ._processing_times import BatchContext, ProcessingTime

__all__ = [
    "OutputModel",
    "Stage",
    "StageWork",
]


def _task_context(batch: BatchContext, tasks: int) -> BatchContext:
    # A task sees its share of the batch's records (the input is split evenly over the tasks).
    return BatchContext(batch.index, batch.time, batch.batch_interval, batch.num_records // tasks)


@attrs.frozen
class Stage:
    """One stage of an output operation's Spark job: ``tasks`` tasks, each taking a ``task`` sample.

    A task's model sees the batch with its share of the records (``num_records // tasks``), so
    a :class:`Linear` task cost scales with the batch.

    Attributes:
        tasks: the number of tasks (the stage's partitions).
        task: the duration of one task, drawn once per task.
    """

    tasks: int
    task: ProcessingTime

    def __attrs_post_init__(self) -> None:
        whole("tasks", self.tasks, minimum=1)
        if not isinstance(self.task, ProcessingTime):
            raise ModelError("task", f"must be a processing-time model (with sample()), got {self.task!r}")

    def sample(self, batch: BatchContext, rng: random.Random) -> tuple[int, ...]:
        """Every task's duration for ``batch``, in whole milliseconds."""
        share = _task_context(batch, self.tasks) if self.tasks > 1 else batch
        draw = self.task.sample
        return tuple(draw(share, rng) for _ in range(self.tasks))


@runtime_checkable
class StageWork(Protocol):
    """Per-task durations of a job for one batch: a tuple of stages, each a tuple of task milliseconds."""

    def sample_stages(self, batch: BatchContext, rng: random.Random) -> tuple[tuple[int, ...], ...]:
        """The stages of the job for ``batch``, drawn with ``rng`` only."""
        ...


@attrs.frozen
class OutputModel:
    """One output operation: a name, and its work as one duration or as a job of stages of tasks.

    Attributes:
        name: the operation's name.
        processing: the whole job's duration (what a run without a :class:`ClusterModel` sleeps;
            with a cluster model, a job of one task of this duration).
        stages: the job as stages of tasks for the cluster model, run one stage after the
            other, each stage's tasks on the cluster's task slots. Or any object with
            ``sample_stages(batch, rng)`` (a trace's recorded tasks). Without a cluster model
            the job takes the sum over stages of the longest task.
        overhead: the operation's time on the driver outside its tasks (submitting its Spark
            jobs, collecting results, the Python around them), drawn per batch and spent before
            its first stage, holding no slot (``None``: none).
    """

    name: str
    processing: ProcessingTime | None = None
    stages: Sequence[Stage] | StageWork | None = None
    overhead: ProcessingTime | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ModelError("name", f"must be a non-empty string, got {self.name!r}")
        if self.processing is None and self.stages is None:
            raise ModelError("processing", "give the job's work: a processing-time model, or stages of tasks")
        if self.processing is not None and self.stages is not None:
            raise ModelError("stages", "give either processing or stages, not both")
        if self.processing is not None and not isinstance(self.processing, ProcessingTime):
            raise ModelError("processing", f"must be a processing-time model (with sample()), got {self.processing!r}")
        if self.stages is not None and not isinstance(self.stages, StageWork):
            stages = tuple(self.stages) if isinstance(self.stages, (list, tuple)) else None
            if not stages:
                raise ModelError("stages", f"must be a non-empty sequence of Stage, got {self.stages!r}")
            for i, stage in enumerate(stages):
                if not isinstance(stage, Stage):
                    raise ModelError(f"stages[{i}]", f"must be a Stage, got {stage!r}")
            object.__setattr__(self, "stages", stages)
        if self.overhead is not None and not isinstance(self.overhead, ProcessingTime):
            raise ModelError("overhead", f"must be a processing-time model (with sample()), got {self.overhead!r}")

    def sample_stages(self, batch: BatchContext, rng: random.Random) -> tuple[tuple[int, ...], ...]:
        """The job's tasks for ``batch``: stages of task durations (one task for a ``processing`` model)."""
        stages = self.stages
        if stages is None:
            assert self.processing is not None
            return ((self.processing.sample(batch, rng),),)
        if isinstance(stages, StageWork):
            return stages.sample_stages(batch, rng)
        return tuple(stage.sample(batch, rng) for stage in stages)
