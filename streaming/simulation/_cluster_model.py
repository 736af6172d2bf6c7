"""ClusterModel: where simulated jobs run, executors with task slots shared by every running job.

Spark's executors, ``spark.executor.cores`` and ``spark.scheduler.mode``, as settings.
"""

from __future__ import annotations

import attrs

from ._model_checks import ModelError, finite, whole

__all__ = [
    "ClusterModel",
]


SCHEDULING_MODES = ("FIFO", "FAIR")


@attrs.frozen
class ClusterModel:
    """Where the jobs run: executors with task slots, shared by every running job.

    Spark's task scheduler offers each free slot to the running jobs' pending tasks: in FIFO
    mode to the earliest job first (Spark's default), in FAIR mode to the job with the fewest
    running tasks (Spark's fair scheduler with one pool per job, equal weights). Stages of one
    job run one after the other. So concurrent jobs compete for slots, and ``concurrentJobs``
    only wins the slots a single job leaves idle.

    Attributes:
        executors: the executors.
        cores: task slots per executor (``spark.executor.cores``; ``local[N]`` is one executor
            with N).
        scheduling_mode: ``"FIFO"`` or ``"FAIR"`` (``spark.scheduler.mode``).
        cpus: the processors the slots share, when there are fewer than slots (``local[4]`` on
            a two-core machine): running tasks then share them equally (processor sharing),
            so each takes longer. ``None``: a processor per slot.
        task_overhead_ms: added to every task in its slot (launch, deserialisation, result).
        stage_overhead_ms: between the end of a stage and the start of the next (the DAG
            scheduler, shuffle bookkeeping); no slot is held.
        job_overhead_ms: per job, before its first stage (submission from the driver); no slot
            is held.
        driver_on_cpus: the driver runs on the same processors as the tasks (``local[N]``):
            each job's driver time (the job overhead and its operation's overhead) is work that
            shares the ``cpus`` with the running tasks, so concurrent jobs slow each other down
            on the driver too. Needs ``cpus``.
        task_cpu: the share of its slot time a task keeps a processor busy, for processor
            sharing (1: all of it; a PySpark task waits on the JVM and its sockets for part).
        driver_threads: how many jobs' driver work (job, operation and stage overheads) may
            run at once; the rest waits its turn (``1``: a Python driver, whose work holds its
            GIL; ``None``: no bound).
    """

    executors: int = 1
    cores: int = 2
    scheduling_mode: str = "FIFO"
    cpus: int | None = None
    task_overhead_ms: float = 0.0
    stage_overhead_ms: float = 0.0
    job_overhead_ms: float = 0.0
    driver_on_cpus: bool = False
    driver_threads: int | None = None
    task_cpu: float = 1.0

    def __attrs_post_init__(self) -> None:
        whole("cluster.executors", self.executors, minimum=1)
        whole("cluster.cores", self.cores, minimum=1)
        if self.scheduling_mode not in SCHEDULING_MODES:
            raise ModelError("cluster.scheduling_mode", f"must be FIFO or FAIR, got {self.scheduling_mode!r}")
        if self.cpus is not None:
            whole("cluster.cpus", self.cpus, minimum=1)
        finite("cluster.task_overhead", self.task_overhead_ms)
        finite("cluster.stage_overhead", self.stage_overhead_ms)
        finite("cluster.job_overhead", self.job_overhead_ms)
        if self.driver_on_cpus and self.cpus is None:
            raise ModelError("cluster.driver_on_cpus", "needs cpus: the processors the driver shares with the tasks")
        if self.driver_threads is not None:
            whole("cluster.driver_threads", self.driver_threads, minimum=1)
        if not 0 < finite("cluster.task_cpu", self.task_cpu, strict=True) <= 1:
            raise ModelError("cluster.task_cpu", f"must be in (0, 1], got {self.task_cpu!r}")

    @property
    def slots(self) -> int:
        """Task slots in all: ``executors * cores``."""
        return self.executors * self.cores
