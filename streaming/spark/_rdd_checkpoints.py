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

__all__ = ["checkpoint_rdd", "context_checkpoint_dir", "let_go_of_checkpoint_dir", "users_checkpoint_dir"]

_lock = threading.Lock()  # the SparkContext's one directory is set and read under it
_held: dict[str, int] = {}  # each setCheckpointDir makes a new <dir>/<uuid>: those of contexts not stopped, how many hold each


def context_checkpoint_dir(sc: SparkContext, directory: str) -> str:
    """``sc.setCheckpointDir(directory)`` for one context; the directory Spark made there, for :func:`checkpoint_rdd`
    (py4j calls: blocking)."""
    with _lock:
        sc.setCheckpointDir(directory)
        made = sc.getCheckpointDir()
        assert made is not None  # just set
        _held[made] = _held.get(made, 0) + 1
        return made


def let_go_of_checkpoint_dir(made: str) -> None:
    """A context that :func:`context_checkpoint_dir` made ``made`` for stopped (or set another): once none holds it, a
    context without a directory of its own may use it, as Spark's next context uses the SparkContext's."""
    with _lock:
        count = _held.pop(made, 0) - 1
        if count > 0:
            _held[made] = count


def users_checkpoint_dir(sc: SparkContext) -> str | None:
    """``sc``'s checkpoint directory unless a context not stopped set it (one py4j call).

    A context without ``checkpoint()`` of its own uses that one: the program's ``sc.setCheckpointDir``, or the
    directory of a context that stopped, as Spark's next context does; a running context's is not its.
    """
    with _lock:
        found = sc.getCheckpointDir()
    return None if found is None or found in _held else found


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
