"""pyspark's and py4j's private handles, in one place: the JVM, the Java SparkContext, the gateway and its client.

PySpark has no public way to these (Spark's own Python code reaches them the same way); every
other module asks here, so the project's list of reaches into pyspark's privates stays this file.
Every function but :func:`active_spark_context` and :func:`gateway_client` makes or enables
py4j calls: blocking.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = [
    "active_spark_context",
    "clear_job_group",
    "conf_value",
    "gateway",
    "gateway_client",
    "hadoop_configuration",
    "is_stopped",
    "java_spark_context",
    "jvm",
    "launched_gateway",
    "scala_spark_context",
]


def active_spark_context() -> SparkContext | None:
    """The process's running SparkContext, or ``None`` (pyspark's ``SparkContext._active_spark_context``; no py4j call)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def launched_gateway() -> tuple[Any, Any]:
    """The JVM view and the py4j gateway, launching the JVM if no SparkContext did yet (no SparkContext is created).

    Under spark-submit the JVM carries the submitted settings as system properties, which a
    ``SparkConf()`` reads only once a gateway exists.
    """
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    view, gateway = SparkContext._jvm, SparkContext._gateway
    assert view is not None and gateway is not None
    return view, gateway


def jvm(sc: SparkContext) -> Any:
    """``sc``'s JVM view (``sc._jvm``): Java classes by their full names."""
    return sc._jvm


def java_spark_context(sc: SparkContext) -> Any:
    """``sc``'s Java SparkContext (``sc._jsc``)."""
    return sc._jsc


def hadoop_configuration(sc: SparkContext) -> Any:
    """``sc``'s Hadoop configuration (one py4j call)."""
    return sc._jsc.hadoopConfiguration()


def gateway(sc: SparkContext) -> Any:
    """``sc``'s py4j gateway (``sc._gateway``): Java arrays and the like.

    Raises:
        RuntimeError: the SparkContext is stopped (it has no py4j gateway).
    """
    found = sc._gateway
    if found is None:
        raise RuntimeError("PySpark has no py4j gateway: is the SparkContext stopped?")
    return found


def gateway_client(sc: SparkContext) -> Any:
    """The py4j client every py4j call of this process goes through (``sc._gateway._gateway_client``).

    Raises:
        RuntimeError: the SparkContext is stopped (it has no py4j gateway).
    """
    return gateway(sc)._gateway_client


def conf_value(sc: SparkContext, key: str) -> str | None:
    """The Spark setting ``key`` of ``sc``, or ``None``: one py4j call (``sc.getConf()`` copies the whole conf)."""
    value = sc._conf.get(key, None)
    return None if value is None else str(value)


def clear_job_group(sc: SparkContext) -> None:
    """Clear this thread's job group, description and interrupt flag (pyspark has no public call for it)."""
    sc._jsc.clearJobGroup()


def scala_spark_context(sc: SparkContext) -> Any:
    """``sc``'s Scala SparkContext (``sc._jsc.sc()``, one py4j call): its local properties are reachable only there."""
    return sc._jsc.sc()


def is_stopped(sc: SparkContext) -> bool:
    """Whether ``sc`` has been stopped (pyspark clears ``_jsc`` at stop; no py4j call)."""
    return getattr(sc, "_jsc", True) is None
