"""Building a batch RDD's JVM side ahead of its job, as Spark Streaming's job generation does.

pyspark.streaming hands an output operation an RDD whose JVM RDD was made while the batch's jobs
were generated (its transform functions run then, called back from the JVM); this does the same
for a pyspark ``RDD`` built in Python.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import RDD  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["build_jvm_rdd", "has_jvm_rdd"]


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
