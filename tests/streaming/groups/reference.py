"""The same keyed programs on pyspark's applyInPandasWithState (Structured Streaming): the oracle for flatMapGroupsWithState.

Each program is written twice over the same events: ``spark_*`` for pyspark (pandas in and
out, state as a tuple) and ``ours_*`` for aiodstream's DStream operator (records in, tuples
out). Events are ``(key, event_time_ms, value)``. Batches are fed to Spark one JSON file per
trigger (``maxFilesPerTrigger=1``, ``processAllAvailable`` after each), and every batch's
output is collected with ``foreachBatch``, including the no-data batches Spark runs when the
watermark moves.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

Event = tuple[str, int, int]
Output = tuple[Any, ...]

GAP_MS = 10_000
"""A session closes once the watermark passes its last event plus this gap."""

DELAY = "5 seconds"
"""The watermark's delay threshold."""


# -- the programs, pyspark side --


def spark_running_totals(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """No timeout: per key, the running count and sum, emitted on every batch with data."""
    import pandas as pd

    count, total = state.get if state.exists else (0, 0)
    for pdf in pdfs:
        count += len(pdf)
        total += int(pdf["value"].sum())
    state.update((count, total))
    yield pd.DataFrame({"key": [key[0]], "count": [count], "total": [total]})


def spark_sessions(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """Event-time timeout: a session per key; "open" with its count on data, "closed" once it timed out."""
    import pandas as pd

    if state.hasTimedOut:
        count, start, end = state.get
        state.remove()
        yield pd.DataFrame({"key": [key[0]], "kind": ["closed"], "count": [count], "start": [start], "end": [end]})
        return
    count, start, end = state.get if state.exists else (0, None, None)
    for pdf in pdfs:
        times = [int(t.value // 1_000_000) for t in pdf["ts"]]
        count += len(pdf)
        start = min(times) if start is None else min(start, *times)
        end = max(times) if end is None else max(end, *times)
    state.update((count, start, end))
    state.setTimeoutTimestamp(end + GAP_MS)
    yield pd.DataFrame({"key": [key[0]], "kind": ["open"], "count": [count], "start": [start], "end": [end]})


# -- the programs, aiodstream side (same logic, plain Python values) --


def ours_running_totals(key: Any, values: Iterable[Event], state: Any) -> Iterator[Output]:
    """What spark_running_totals computes."""
    count, total = state.get if state.exists else (0, 0)
    for _, _, value in values:
        count += 1
        total += value
    state.update((count, total))
    yield (key, count, total)


def ours_sessions(key: Any, values: Iterable[Event], state: Any) -> Iterator[Output]:
    """What spark_sessions computes."""
    if state.hasTimedOut:
        count, start, end = state.get
        state.remove()
        yield (key, "closed", count, start, end)
        return
    count, start, end = state.get if state.exists else (0, None, None)
    for _, ts, _ in values:
        count += 1
        start = ts if start is None else min(start, ts)
        end = ts if end is None else max(end, ts)
    state.update((count, start, end))
    state.setTimeoutTimestamp(end + GAP_MS)
    yield (key, "open", count, start, end)


PROGRAMS: dict[str, dict[str, Any]] = {
    "running_totals": {
        "spark": spark_running_totals, "ours": ours_running_totals, "timeout": "NoTimeout", "watermark": False,
        "output": "key string, count long, total long", "state": "count long, total long",
    },
    "sessions": {
        "spark": spark_sessions, "ours": ours_sessions, "timeout": "EventTimeTimeout", "watermark": True,
        "output": "key string, kind string, count long, start long, end long", "state": "count long, start long, end long",
    },
}


def run_spark(spark: Any, program: str, batches: list[list[Event]]) -> list[list[Output]]:
    """Run ``program`` on pyspark over ``batches``, one trigger each; per input batch, what Spark output for it.

    That is the output of the batch that read it plus that of the no-data batch Spark runs
    after it when the watermark moved (where event-time timeouts fire), sorted.
    """
    spec = PROGRAMS[program]
    outputs: dict[int, list[Output]] = {}

    def collect(df: Any, batch_id: int) -> None:
        outputs[batch_id] = [tuple(row) for row in df.collect()]

    with tempfile.TemporaryDirectory(prefix="aiodstream-gws-ref-") as tmp:
        source, checkpoint = Path(tmp) / "in", Path(tmp) / "ck"
        source.mkdir()
        stream = (spark.readStream.schema("key string, ts_ms long, value long").option("maxFilesPerTrigger", 1)
                  .json(str(source)))
        stream = stream.selectExpr("key", "timestamp_millis(ts_ms) AS ts", "value")
        if spec["watermark"]:
            stream = stream.withWatermark("ts", DELAY)
        query = (stream.groupBy("key")
                 .applyInPandasWithState(spec["spark"], spec["output"], spec["state"], "append", spec["timeout"])
                 .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint)).start())
        groups: list[list[Output]] = []
        try:
            for index, events in enumerate(batches):
                lines = "".join(json.dumps({"key": k, "ts_ms": t, "value": v}) + "\n" for k, t, v in events)
                part = source / f".part-{index:05d}.json"
                part.write_text(lines)
                part.rename(source / f"part-{index:05d}.json")
                query.processAllAvailable()
                ran = sorted(outputs)
                groups.append(sorted((row for b in ran for row in outputs[b]), key=repr))
                outputs.clear()
            exception = query.exception()
            if exception is not None:
                raise exception
        finally:
            query.stop()
    return groups


Runner = Callable[[str, list[list[Event]]], list[list[Output]]]
