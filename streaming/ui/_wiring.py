"""ContextUI: a StreamingContext's web UI (``uiPort``, ``spark.aiodstream.ui.*``), served by its runtime while it runs.

Spark's ``StreamingTab`` attached to a context's ``SparkUI``, with links to the Spark UI's jobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from scheduler import Time

from ..runtime import QueryRuntime, StreamingContextState
from ..spark import streaming_job_group
from ._app import StreamingUI
from ._retention import positive_count_setting
from ._security import UISecurity

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["RETAINED_BATCHES", "ContextUI", "retained_batches_setting", "spark_links"]

RETAINED_BATCHES = "spark.streaming.ui.retainedBatches"
"""Spark's setting of the completed batches its Streaming tab keeps: a context's UI reads it too."""


def retained_batches_setting(get: Callable[[str], str | None]) -> int:
    """``spark.streaming.ui.retainedBatches`` read through ``get`` (default 1000, as Spark's).

    Raises:
        ValueError: it is not a positive whole number (the message names the setting).
    """
    return positive_count_setting(get, RETAINED_BATCHES, 1000, "batches")


def spark_links(sc: SparkContext | None, name: str, *, micro_batch: bool) -> dict[str, Any]:
    """For the web UI: the Spark UI's address and a lookup of an output operation's Spark jobs (py4j calls).

    Args:
        sc: the context's SparkContext, ``None`` before it started one.
        name: the context's name, the prefix of its Spark job groups.
        micro_batch: whether batches run as job groups (not in continuous processing).
    """
    if sc is None:
        return {}
    links: dict[str, Any] = {"spark_ui": sc.uiWebUrl}
    if micro_batch:

        def spark_jobs(batch_time_ms: int, output_op_id: int) -> list[int]:
            group = streaming_job_group(name, Time(batch_time_ms), output_op_id)
            return sorted(int(j) for j in sc.statusTracker().getJobIdsForGroup(group))

        links["spark_jobs"] = spark_jobs
    return links


class ContextUI:
    """The web UI of one context: attached before its first start, served by its runtime, its address while it serves."""

    def __init__(self) -> None:
        """No UI yet."""
        self._ui: StreamingUI | None = None
        self._bind: tuple[str, int, int] | None = None
        self._url: str | None = None

    def prepare(self, setting: tuple[tuple[str, int, int], UISecurity, int] | None, target: Any, name: str) -> None:
        """With ``setting`` (where to listen: host, port, further ports to try; the security; the completed batches to
        keep, ``spark.streaming.ui.retainedBatches``), show ``target`` from its start."""
        if setting is None:
            return
        bind, security, retained_batches = setting
        if self._ui is None:
            self._ui = StreamingUI(security=security, retained_batches=retained_batches)
            self._ui.attach(target, name=name)
        self._bind = bind

    async def serve(self, runtime: QueryRuntime) -> None:
        """Serve the prepared UI in ``runtime``'s task group until it stops (nothing without :meth:`prepare`)."""
        if self._ui is not None and self._bind is not None:
            self._url = await runtime.start_service(self._ui.serve, *self._bind)

    def url(self, runtime: QueryRuntime | None) -> str | None:
        """The UI's address while ``runtime`` runs and the UI serves, else ``None``."""
        if self._url is None or runtime is None or runtime.state is not StreamingContextState.ACTIVE:
            return None
        return self._url

    def __repr__(self) -> str:
        return f"<ContextUI {self._url or 'not serving'}>"
