"""Building a batch RDD's JVM side ahead of its job, as Spark Streaming's job generation does.

pyspark.streaming hands an output operation an RDD whose JVM RDD was made while the batch's jobs
were generated (its transform functions run then, called back from the JVM); this does the same
for a pyspark ``RDD`` built in Python, for the outputs whose functions use it (:class:`JvmRddPrebuild`).
"""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from pyspark import RDD  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["JvmRddPrebuild", "build_jvm_rdd", "has_jvm_rdd"]


def build_jvm_rdd(rdd: RDD[Any]) -> None:
    """Make ``rdd``'s JVM RDD now if it has none yet (py4j calls: blocking).

    A pyspark ``PipelinedRDD`` (what ``map``, ``flatMap``, ``reduceByKey`` ... return) pickles its
    fused functions and creates its ``PythonRDD`` over py4j (about twenty round trips) the first
    time Spark needs it: in an output operation's job, within the batch's processing time, unless
    done here at generation. A job that derives a new RDD from it (``count``, ``take``) pipelines
    its own function onto the same parents and does not use the one made here.

    A failure is left for the job: it builds the RDD again and fails the same way, where the
    output operation's error is reported.
    """
    try:
        rdd.id()  # a PipelinedRDD's id is its JVM RDD's: reading it makes the JVM RDD
    except Exception:  # reported by the job, which meets the same error
        pass


def has_jvm_rdd(rdd: Any) -> bool:
    """Whether ``rdd`` is a pyspark RDD whose JVM RDD and id exist already: :func:`build_jvm_rdd` then makes no py4j call.

    A plain ``RDD`` reads its id from the JVM when it is made; a ``PipelinedRDD`` the first time
    its id is read (:func:`build_jvm_rdd`). Anything else is not known to be ready: no.
    """
    module = sys.modules.get("pyspark")  # not imported: no pyspark RDD exists
    return module is not None and isinstance(rdd, module.RDD) and getattr(rdd, "_id", None) is not None


def _jvm_rdd_made(rdd: Any) -> bool:
    """Whether ``rdd``'s JVM RDD exists (no py4j call): a ``PipelinedRDD``'s once made; any other kind has one or none to make."""
    return getattr(rdd, "_jrdd_val", True) is not None


class JvmRddPrebuild:
    """One output operation's choice to make its RDD's JVM RDD at generation, learnt from what its jobs do.

    An output whose function hands the RDD itself to Spark (``collect``, ``foreachPartition``,
    ``toDF``) reads its JVM RDD: made at generation, it is out of the batch's processing time, as
    in pyspark.streaming. One whose function derives a new RDD (``count``, ``take``, ``pprint``,
    ``saveAsTextFile``) pipelines onto the RDD's parents and never reads it: made anyway, it
    costs about twenty py4j calls and 1-2 ms of driver CPU per batch for nothing. So an output
    starts without: when a job finds the JVM RDD made during it (its function read it), the
    output makes it at generation from its next batch on, and keeps doing so.
    """

    def __init__(self) -> None:
        """An output not yet seen reading its RDD's JVM RDD."""
        self.reads_jvm_rdd = False

    def observing(self, func: Callable[..., Any], rdd: Any) -> Callable[..., Any]:
        """At generation: make ``rdd``'s JVM RDD if this output reads it (py4j calls: blocking), and return ``func``
        (plain or ``async def``) wrapped to learn, when it returns or raises, whether it read a JVM RDD not made before."""
        if self.reads_jvm_rdd:
            build_jvm_rdd(rdd)
            return func
        if _jvm_rdd_made(rdd):
            return func  # nothing to learn from this batch (e.g. another output made it)

        def learn() -> None:
            if _jvm_rdd_made(rdd):
                self.reads_jvm_rdd = True  # one flag, set only one way: no lock needed across job threads

        if inspect.iscoroutinefunction(func):
            async def observed_async(*args: Any) -> Any:
                try:
                    return await func(*args)
                finally:
                    learn()
            return observed_async

        def observed(*args: Any) -> Any:
            try:
                return func(*args)
            finally:
                learn()
        return observed
