"""Apache Spark's own continuous-processing latency, driven from pyspark: rate source, Python UDF, memory sink.

Run: ``python bench/_spark_continuous.py`` (local[2]; 1000, 2000, 10000 and 100000 rows/s for 10 s each).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
import uuid
from typing import Any

WARMUP_S = 3.0
"""Rows whose rate timestamp lies in the first WARMUP_S seconds of the source are discarded."""
GRACE_S = 3.0
"""The query keeps running this long past the measured window so the window's last epochs can commit."""


def _describe(exc: BaseException) -> str:
    """Name an exception by its class and the first line of its message.

    Args:
        exc: The exception Spark (or py4j) raised.

    Returns:
        ``"<class>: <first line>"``, followed by ``" | <last line>"`` when the message has several lines
        (a Python worker traceback puts the actual error on its last line).
    """
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    if len(lines) > 1:
        text += f" | {lines[-1]}"
    return text


def _percentile(ordered: list[float], q: float) -> float:
    """Return the q-quantile of sorted values by the nearest-rank method.

    Args:
        ordered: Values in ascending order; not empty.
        q: The quantile, between 0 and 1.

    Returns:
        The value at rank ceil(q * n) (1-based), clamped to the list.
    """
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
    return ordered[rank - 1]


def measure_spark_continuous(
    spark: Any, rows_per_second: int, seconds: float, num_partitions: int = 2
) -> dict[str, float | int | str] | None:
    """Measure end-to-end latency of a continuous-mode query (``trigger(continuous="1 second")``).

    The query reads the ``rate`` source (``rowsPerSecond`` = rows_per_second, ``numPartitions`` =
    num_partitions), passes every row through a plain (pickled, not Arrow) Python UDF that returns
    ``time.time()`` on the executor minus the row's timestamp, both in milliseconds, and writes to the
    memory sink. The timestamp reaches the UDF as ``unix_micros(timestamp)``, a long, so no timezone
    conversion or truncation happens on the way to Python (a ``TimestampType`` value would arrive as a
    naive local ``datetime``). The rate source stamps each row with its scheduled time, so a source or
    UDF that falls behind shows up as growing latency, not as dropped rows.

    Only rows whose timestamp lies in ``[t0 + WARMUP_S, t0 + WARMUP_S + seconds)`` count, t0 being the
    first row's timestamp; the query runs GRACE_S longer so those rows can commit, then is stopped and
    the window's latencies are collected to the driver.

    Args:
        spark: An active ``pyspark.sql.SparkSession``. Its Python workers must be able to import
            pyspark (set ``PYSPARK_PYTHON`` before the session is built).
        rows_per_second: Rate of the source.
        seconds: Length of the measured window, after the warm-up.
        num_partitions: Partitions of the rate source (each one a continuous task holding a core).

    Returns:
        On success: ``p50_ms`` and ``p99_ms`` (latency percentiles over the window), ``max_ms``, ``rows``
        (rows received in the window), ``expected_rows`` (rows_per_second * seconds),
        ``source_paced_rows_per_second`` (the rate the source actually paces: it sleeps a whole number of
        milliseconds per row and partition, so it differs from rows_per_second unless
        1000 * num_partitions / rows_per_second is an integer),
        ``received_fraction`` (rows / expected_rows), ``p50_first_s_ms`` and ``p50_last_s_ms`` (median
        latency in the first and last second of the window), ``keeps_up`` (True when at least 99% of the
        rows arrived and the median latency grew by less than 500 ms across the window) and ``wall_s``
        (wall time of the whole measurement, collection included).
        When Spark refuses or fails the query, it delivers no row in the window, or the rate is above 1000
        rows/s per partition (which the rate source cannot pace, so the query is not started):
        ``{"error": "<exception class>: <first line>[ | <last line>]", "wall_s": ...}``; the reason is
        returned in place of None, so this implementation does not return None.
    """
    from pyspark.sql.functions import col, udf, unix_micros
    from pyspark.sql.types import DoubleType

    wall_start = time.monotonic()
    # Spark's continuous rate reader sleeps readTimeIncrement = (long) (1000.0 / per-partition rate) ms
    # between rows. Above 1000 rows/s per partition that is 0: the source runs unthrottled, stamps every
    # row with the same start time and fills the memory sink until the driver runs out of heap.
    increment_ms = int(1000.0 / (rows_per_second / num_partitions)) if rows_per_second > 0 and num_partitions > 0 else 0
    if increment_ms == 0:
        return {
            "error": (
                f"not run: {rows_per_second} rows/s over {num_partitions} partitions is more than 1000 rows/s per partition, "
                "which Spark's continuous rate source cannot pace (its per-row sleep rounds down to 0 ms)"
            ),
            "wall_s": 0.0,
        }
    paced_rate = num_partitions * 1000.0 / increment_ms

    def receipt_latency_ms(timestamp_us: int) -> float:
        return time.time() * 1000.0 - timestamp_us / 1000.0

    latency_udf = udf(receipt_latency_ms, DoubleType(), useArrow=False).asNondeterministic()
    name = f"continuous_latency_{uuid.uuid4().hex[:12]}"
    query = None
    try:
        reader = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second)
        source = reader.option("numPartitions", num_partitions).load()
        timestamp_us = unix_micros(col("timestamp"))
        stream = source.select((timestamp_us / 1000.0).alias("ts_ms"), latency_udf(timestamp_us).alias("latency_ms"))
        query = stream.writeStream.format("memory").queryName(name).outputMode("append").trigger(continuous="1 second").start()
        deadline = time.monotonic() + WARMUP_S + seconds + GRACE_S
        while (remaining := deadline - time.monotonic()) > 0:
            if query.awaitTermination(max(0.01, min(remaining, 1.0))):
                failure = query.exception()
                reason = _describe(failure) if failure is not None else "query stopped before the window ended"
                return {"error": reason, "wall_s": round(time.monotonic() - wall_start, 2)}
        failure = query.exception()
        if failure is not None:
            return {"error": _describe(failure), "wall_s": round(time.monotonic() - wall_start, 2)}
        query.stop()
        query = None

        t0 = spark.sql(f"SELECT min(ts_ms) FROM {name}").first()[0]
        if t0 is None:
            return {"error": "no rows reached the memory sink", "wall_s": round(time.monotonic() - wall_start, 2)}
        start, end = t0 + WARMUP_S * 1000.0, t0 + (WARMUP_S + seconds) * 1000.0
        rows = spark.sql(f"SELECT ts_ms, latency_ms FROM {name} WHERE ts_ms >= {start!r} AND ts_ms < {end!r}").collect()
    except Exception as exc:  # Spark refusing the plan, or the query failing: report it, do not raise.
        return {"error": _describe(exc), "wall_s": round(time.monotonic() - wall_start, 2)}
    finally:
        if query is not None:
            try:
                query.stop()
            except Exception:
                pass
        try:
            spark.catalog.dropTempView(name)
        except Exception:
            pass

    if not rows:
        return {"error": "no rows in the measured window", "wall_s": round(time.monotonic() - wall_start, 2)}
    latencies = sorted(row[1] for row in rows)
    first_s = [row[1] for row in rows if row[0] < start + 1000.0]
    last_s = [row[1] for row in rows if row[0] >= end - 1000.0]
    expected = round(rows_per_second * seconds)
    p50_first = statistics.median(first_s) if first_s else float("nan")
    p50_last = statistics.median(last_s) if last_s else float("nan")
    fraction = len(rows) / expected if expected else 0.0
    return {
        "p50_ms": round(_percentile(latencies, 0.50), 2),
        "p99_ms": round(_percentile(latencies, 0.99), 2),
        "max_ms": round(latencies[-1], 2),
        "rows": len(rows),
        "expected_rows": expected,
        "source_paced_rows_per_second": paced_rate,
        "received_fraction": round(fraction, 4),
        "p50_first_s_ms": round(p50_first, 2),
        "p50_last_s_ms": round(p50_last, 2),
        "keeps_up": fraction >= 0.99 and bool(last_s) and p50_last - p50_first < 500.0,
        "wall_s": round(time.monotonic() - wall_start, 2),
    }


if __name__ == "__main__":
    # Python workers must be this interpreter (the default, python3 on PATH, may lack pyspark's deps).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-continuous-latency")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        # 2000 rows/s: the most the rate source paces on 2 partitions (1 row per ms per partition).
        for rate in (1000, 2000, 10000, 100000):
            result = measure_spark_continuous(session, rate, 10.0)
            line = {"rows_per_second": rate, "seconds": 10.0, "result": result, "loadavg": os.getloadavg()}
            print(json.dumps(line), flush=True)
    finally:
        session.stop()
