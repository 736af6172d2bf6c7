"""SparkBackend: what a streaming context needs of Spark, on a classic SparkContext or a Spark Connect session.

Spark Streaming has only the first (its ``StreamingContext`` holds a ``SparkContext``); a context here
holds either a :class:`SparkBinding` or a :class:`ConnectBinding`, chosen once by :func:`bind_spark`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Protocol, cast

from ._binding import SparkBinding
from ._connect_binding import ConnectBinding
from ._job_threads import JobThreads
from ._session import SparkSettings

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["JobThreads", "SparkBackend", "bind_spark", "is_classic_session", "is_connect_dataframe", "is_connect_session", "is_rdd"]

class SparkBackend(Protocol):
    """One streaming context's tie to Spark: what the context, its streams and its jobs ask of Spark.

    Thread-safe: the event loop, the generation thread and job threads all reach it. Members that
    talk to Spark block (py4j calls, or gRPC calls on Connect) and must run off the event loop.

    Attributes:
        kind: ``"classic"`` (a SparkContext, py4j) or ``"connect"`` (a Spark Connect session, gRPC; no JVM here).
    """

    kind: str

    @property
    def spark_context(self) -> SparkContext:
        """What stands where the engine uses a SparkContext: the SparkContext, or on Connect a ``FrameContext``."""
        ...

    @property
    def started_spark_context(self) -> SparkContext | None:
        """The classic SparkContext if one was given or started already, else ``None`` (always ``None`` on Connect)."""
        ...

    def settings(self) -> SparkSettings:
        """The Spark settings the context uses, read once (blocking the first time)."""
        ...

    def save_local_properties(self, *, inherit: bool = True) -> None:
        """Keep the calling thread's Spark local properties (``inherit=False``: none) for every job (Spark's
        ``savedProperties``): on the thread that starts the context (blocking: py4j calls; nothing on Connect)."""
        ...

    def set_concurrency(self, jobs: int) -> None:
        """How many job threads to create (the context's ``concurrentJobs``); before the first job."""
        ...

    def job_threads(self) -> JobThreads:
        """The threads output-operation jobs run on (created on first use)."""
        ...

    def cancel_job_group(self, group: str) -> None:
        """Have Spark cancel the work labelled ``group`` without waiting: :meth:`join_cancellations` waits later."""
        ...

    def join_cancellations(self) -> None:
        """Wait until the cancellations asked so far reached Spark (blocking, bounded)."""
        ...

    def release_job_threads(self) -> None:
        """Let the job threads end once their current jobs do (a later job makes new ones)."""
        ...

    def stop_spark(self) -> None:
        """``ssc.stop(stopSparkContext=True)``'s part: stop the SparkContext, or on Connect release the session (blocking)."""
        ...

    def require_jvm(self, feature: str, alternative: str) -> None:
        """Refuse ``feature`` on Connect (:class:`ConnectNotSupportedError` naming ``alternative``); nothing on classic Spark."""
        ...


def is_connect_session(value: object) -> bool:
    """Whether ``value`` is a Spark Connect session (``pyspark.sql.connect.session.SparkSession``).

    Imports nothing: a process that never imported pyspark's Connect client has no such session.
    """
    module = sys.modules.get("pyspark.sql.connect.session")
    return module is not None and isinstance(value, module.SparkSession)


def is_connect_dataframe(value: object) -> bool:
    """Whether ``value`` is a Spark Connect DataFrame (``pyspark.sql.connect.dataframe.DataFrame``); imports nothing."""
    module = sys.modules.get("pyspark.sql.connect.dataframe")
    return module is not None and isinstance(value, module.DataFrame)


def is_rdd(value: object) -> bool:
    """Whether ``value`` is a pyspark RDD or a Connect context's ``FrameRDD``; imports nothing.

    ``streaming.connect`` (which needs pyarrow, an optional dependency) is not imported for the
    check: a process that never imported it has no FrameRDD.
    """
    rdds = sys.modules.get("pyspark.core.rdd")
    if rdds is not None and isinstance(value, rdds.RDD):
        return True
    frames = sys.modules.get("streaming.connect")
    return frames is not None and isinstance(value, frames.FrameRDD)


def is_classic_session(value: object) -> bool:
    """Whether ``value`` is a classic ``pyspark.sql.SparkSession`` (one with a SparkContext); imports nothing."""
    module = sys.modules.get("pyspark.sql.session")
    return module is not None and isinstance(value, module.SparkSession) and not is_connect_session(value)


def bind_spark(given: object, name: str, *, frame_context: Callable[[Any], Any]) -> SparkBackend:
    """The Spark side of a new context, chosen once from the kind of what the program gave.

    Args:
        given: a Spark Connect session; a classic SparkSession (its SparkContext is used, and its runtime conf
            for the SQL settings); else a
            SparkContext, or ``None`` for an embedded local one (started on first need).
        name: the context's name (the prefix of its threads' names).
        frame_context: on Connect, makes the ``FrameContext`` over the session (see :class:`ConnectBinding`).

    Raises:
        TypeError: ``given`` is none of those (a master URL string, pyspark's StreamingContext, ``sc._jsc``, ...).
    """
    if is_connect_session(given):
        return ConnectBinding(given, name, frame_context)
    if is_classic_session(given):
        return SparkBinding(cast(Any, given).sparkContext, name, cast(Any, given))
    if given is not None:
        _check_spark_context(given)
    return SparkBinding(cast("SparkContext | None", given), name)


def _check_spark_context(given: object) -> None:
    """Refuse what cannot be a SparkContext at once (it would fail at the first stream, deep inside pyspark)."""
    contexts = sys.modules.get("pyspark.core.context")
    if contexts is not None and isinstance(given, contexts.SparkContext):
        return
    kind = f"{type(given).__module__}.{type(given).__qualname__}"
    if kind.startswith("py4j."):
        hint = "a JVM object (sc._jsc?): pass the pyspark SparkContext itself"
    elif kind.startswith("pyspark.streaming."):
        hint = "pyspark's StreamingContext: pass its sparkContext"
    elif kind.startswith("streaming."):
        hint = f"aiodstream's {type(given).__name__}: pass its sparkContext"
    elif kind.startswith("pyspark.sql."):
        hint = f"a {kind}: pass its sparkSession (or the SparkContext)"
    elif isinstance(given, str):
        hint = f"a string: for master {given!r} pass SparkContext({given!r}, appName), or None for an embedded local Spark"
    elif hasattr(given, "_jsc"):
        return  # a SparkContext in all but its class (a stopped one is refused by its binding)
    else:
        hint = kind
    raise TypeError(f"sparkContext must be a pyspark SparkContext or SparkSession (classic or Spark Connect), or None for an "
                    f"embedded local Spark; got {hint}")
