"""Costs: the virtual time the engine itself spends beside the jobs (generation, checkpoint writes, listeners).

No Spark counterpart: the JobGenerator's, checkpoint writer's and listener bus's own time, as settings.
"""

from __future__ import annotations

import attrs

from ._model_checks import ModelError, whole
from ._processing_times import ProcessingTime

__all__ = [
    "Costs",
]


CHECKPOINT_MODES = ("sync", "async")


@attrs.frozen
class Costs:
    """Virtual time the engine itself spends, beside the jobs (each ``None``: free).

    Attributes:
        generation: per batch, on the JobGenerator before the batch's jobs are submitted.
        checkpoint: per batch, the checkpoint (offsets) write after the batch is submitted.
        commit: per batch, the commit write after the batch completes.
        checkpoint_mode: ``"sync"``: the writes run on the JobGenerator's task, so a slow
            write holds up the next batch (the default progress tracking); ``"async"``: they
            queue for a writer of their own and hold up nothing (async progress tracking).
        listener: per listener event, the time a host's listener takes to handle it; the bus
            queues events meanwhile and, once ``listener_capacity`` events wait, blocks the
            scheduler (the engine's lossless ``block`` policy).
        listener_capacity: that listener's queue bound.
    """

    generation: ProcessingTime | None = None
    checkpoint: ProcessingTime | None = None
    commit: ProcessingTime | None = None
    checkpoint_mode: str = "sync"
    listener: ProcessingTime | None = None
    listener_capacity: int = 10_000

    def __attrs_post_init__(self) -> None:
        for name in ("generation", "checkpoint", "commit", "listener"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, ProcessingTime):
                raise ModelError(f"costs.{name}", f"must be a processing-time model (with sample()), got {value!r}")
        if self.checkpoint_mode not in CHECKPOINT_MODES:
            raise ModelError("costs.checkpoint_mode", f"must be sync or async, got {self.checkpoint_mode!r}")
        whole("costs.listener_capacity", self.listener_capacity, minimum=1)
