"""SavedProperties: the Spark local properties a context's jobs run with, captured at its start.

Spark Streaming's ``StreamingContext.savedProperties`` and what ``JobScheduler.JobHandler`` does with them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ._py4j import scala_spark_context

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["SavedProperties"]

# What Spark's start clears or sets on the saved copy (SparkContext.clearJobGroup and SPARK_JOB_INTERRUPT_ON_CANCEL):
# the starting thread's own job group is not the jobs' (each job gets its batch's group).
_CLEARED = ("spark.job.description", "spark.jobGroup.id")
_INTERRUPT_ON_CANCEL = "spark.job.interruptOnCancel"


class SavedProperties:
    """The local properties of the thread that started a context, given to each of its jobs as a fresh copy.

    Spark keeps local properties per thread (a FAIR scheduler pool, a job group, anything set with
    ``sc.setLocalProperty``) and reads them when a job is submitted. As Spark's ``StreamingContext.start``,
    :meth:`capture` copies the starting thread's properties; as Spark's ``JobHandler``, :meth:`apply`
    makes a fresh copy of them the job thread's properties for one job and :meth:`restore` puts the
    thread's own back after it. So what one output operation's function sets (``sc.setLocalProperty``)
    ends with its job, and a pool or tag set before ``start()`` reaches every job.

    Thread-safe: one instance serves all of a context's job threads.
    """

    def __init__(self, scala_context: Any, saved: Any) -> None:
        """Hold the Scala SparkContext and the saved ``java.util.Properties`` (see :meth:`capture`)."""
        self._context = scala_context
        self._saved = saved
        self._own = threading.local()  # a job thread's own properties, read at its first job

    @classmethod
    def capture(cls, sc: SparkContext, *, inherit: bool = True) -> SavedProperties:
        """A copy of the calling thread's local properties without its job group, or with ``inherit=False`` none
        (a few py4j calls: blocking).

        To inherit, it must run on the thread that starts the context: in pyspark's pinned-thread mode
        each Python thread has a JVM thread of its own, and local properties belong to the JVM thread.
        """
        context = scala_spark_context(sc)
        saved = context.getLocalProperties().clone()
        if inherit:
            for key in _CLEARED:
                saved.remove(key)
        else:
            saved.clear()
        saved.setProperty(_INTERRUPT_ON_CANCEL, "false")
        return cls(context, saved)

    def apply(self) -> Any:
        """Make a fresh copy of the saved properties this thread's (two py4j calls; one more on a thread's first job).

        Returns the thread's own properties, for :meth:`restore`.
        """
        own = getattr(self._own, "properties", None)
        if own is None:
            # A job thread runs nothing but jobs, each restored after it: its own properties stay these.
            own = self._own.properties = self._context.getLocalProperties()
        self._context.setLocalProperties(self._saved.clone())
        return own

    def restore(self, own: Any) -> None:
        """Give this thread back the properties :meth:`apply` returned (one py4j call)."""
        self._context.setLocalProperties(own)

    def __repr__(self) -> str:
        return "<SavedProperties>"
