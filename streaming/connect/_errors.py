"""The error of a SparkContext or RDD feature that Spark Connect's thin client cannot offer."""

from __future__ import annotations

from ..spark import ConnectNotSupportedError

__all__ = ["ConnectUnsupportedError", "unsupported_context_attribute", "unsupported_rdd_attribute"]


class ConnectUnsupportedError(ConnectNotSupportedError, AttributeError):
    """A ``SparkContext`` or RDD attribute that needs a JVM in the client, refused on Spark Connect.

    A ``streaming.spark.ConnectNotSupportedError`` like every refusal on Connect (one class to catch),
    and also an ``AttributeError``, so ``hasattr`` and ``getattr(obj, name, default)`` see it as absent.
    """


_CONTEXT_ALTERNATIVES = {
    "addFile": "use the session's spark.addArtifacts(path, file=True)",
    "addPyFile": "use the session's spark.addArtifacts(path, pyfile=True)",
    "setJobGroup": "tag the thread's operations with spark.addTag(tag) and cancel with spark.interruptTag(tag)",
    "cancelJobGroup": "use spark.interruptTag(tag) on the session",
    "cancelAllJobs": "use spark.interruptAll() on the session",
    "setLocalProperty": "use spark.addTag(tag) on the session for job tags",
    "getLocalProperty": "use spark.getTags() on the session",
    "setLogLevel": "set the server's log level in its log4j2 configuration",
    "statusTracker": "read the server's web UI or REST API",
    "hadoopFile": "read the files with spark.read on the session",
    "sequenceFile": "read the files with spark.read on the session",
    "wholeTextFiles": "use spark.read.text(path, wholetext=True) on the session",
    "binaryFiles": "use spark.read.format('binaryFile').load(path) on the session",
    "pickleFile": "save and load DataFrames (rdd.toDF()) with spark.read/df.write",
    "runJob": "run an action on the FrameRDD (collect, foreachPartition)",
}


def unsupported_context_attribute(name: str) -> ConnectUnsupportedError:
    """The refusal of ``FrameContext.<name>``, naming what to use instead."""
    alternative = _CONTEXT_ALTERNATIVES.get(name, "work on the session's DataFrames (rdd.dataframe, rdd.toDF())")
    return ConnectUnsupportedError(
        f"SparkContext.{name} is not available on Spark Connect (the client has no SparkContext); {alternative}"
    )


def unsupported_rdd_attribute(name: str) -> ConnectUnsupportedError:
    """The refusal of ``FrameRDD.<name>``, a pyspark RDD method with no Connect form."""
    return ConnectUnsupportedError(
        f"RDD.{name} is not available on Spark Connect (a FrameRDD has no JVM RDD); "
        "work on rdd.dataframe (one pickled value per row) or rdd.toDF() instead"
    )
