"""Failures: simulated job failures, and the restart from the checkpoint that follows each.

A failed Spark job and the driver's restart from its checkpoint, as settings.
"""

from __future__ import annotations

import attrs

from ._model_checks import ModelError, finite

__all__ = [
    "Failures",
]


@attrs.frozen
class Failures:
    """Job failures, and the restart from the checkpoint that follows each.

    A job fails with ``job_failure_probability`` (drawn per job from a random stream of its own,
    so the work of every batch is the same with and without failures). It fails at the end of
    its work; the driver is then down for ``downtime``: nothing runs, the tasks running on the
    cluster are lost, and every job in flight (the failed one included) runs again from its
    first stage once the context is back, as a restart from the checkpoint re-runs the batches
    that were not committed. The batch timer keeps its grid, so the batches due meanwhile queue
    up, as a restarted context generates them at once.

    Attributes:
        job_failure_probability: the chance that one job fails, in ``[0, 1)``.
        downtime_ms: from the failure until the context runs again (restart and recovery).
    """

    job_failure_probability: float
    downtime_ms: float = 0.0

    def __attrs_post_init__(self) -> None:
        p = finite("failures.job_failure_probability", self.job_failure_probability)
        if p >= 1:
            raise ModelError("failures.job_failure_probability", f"must be below 1 (a run must make progress), got {p!r}")
        finite("failures.downtime", self.downtime_ms)
