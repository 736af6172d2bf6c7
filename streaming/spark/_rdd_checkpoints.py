"""Each context's RDD checkpoints in its own directory, though Spark keeps one checkpoint directory per SparkContext.

Spark Streaming has one active context per JVM, so ``StreamingContext.checkpoint`` simply sets the SparkContext's.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ._py4j import jvm, scala_spark_context
from ._rdds import build_jvm_rdd

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["checkpoint_rdd", "context_checkpoint_dir", "users_checkpoint_dir"]

_lock = threading.Lock()  # the SparkContext's one directory is set and read under it
_made_by_contexts: set[str] = set()  # each setCheckpointDir makes a new <dir>/<uuid>: these were contexts'


def context_checkpoint_dir(sc: SparkContext, directory: str) -> str:
    """``sc.setCheckpointDir(directory)`` for one context; the directory Spark made there, for :func:`checkpoint_rdd`
    (py4j calls: blocking)."""
    with _lock:
        sc.setCheckpointDir(directory)
        made = sc.getCheckpointDir()
        assert made is not None  # just set
        _made_by_contexts.add(made)
        return made


def users_checkpoint_dir(sc: SparkContext) -> str | None:
    """``sc``'s checkpoint directory if the program set it (``sc.setCheckpointDir``), not a context (one py4j call).

    A context without ``checkpoint()`` of its own uses that one; another context's is not its.
    """
    with _lock:
        found = sc.getCheckpointDir()
    return None if found is None or found in _made_by_contexts else found


def checkpoint_rdd(rdd: RDD[Any], directory: str) -> None:
    """``rdd.checkpoint()`` into ``directory`` (see :func:`context_checkpoint_dir`), whatever ``rdd``'s SparkContext's
    directory is now; that is the same afterwards (blocking: py4j calls).

    Spark names an RDD's checkpoint files when ``checkpoint()`` is called, from the SparkContext's
    one directory; so under a process-wide lock the directory is the context's for the call.
    """
    sc = rdd.context
    build_jvm_rdd(rdd)  # first, outside the lock (pickling, py4j calls)
    with _lock:
        current = sc.getCheckpointDir()
        if current != directory:
            _set_exactly(sc, directory)  # setCheckpointDir would make a new <dir>/<uuid>
        try:
            rdd.checkpoint()
        finally:
            if current != directory:
                _set_exactly(sc, current)


def _set_exactly(sc: SparkContext, directory: str | None) -> None:
    # SparkContext.checkpointDir is a private[spark] var (public in the JVM): its setter, with a scala Option.
    getattr(scala_spark_context(sc), "checkpointDir_$eq")(jvm(sc).scala.Option.apply(directory))
