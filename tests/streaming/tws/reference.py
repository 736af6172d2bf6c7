"""The same stateful processors on pyspark's transformWithStateInPandas (Structured Streaming): the oracle for transformWithState.

Each program is written twice over the same events: a ``Spark*`` processor for pyspark (pandas
frames in and out, state values as tuples) and an ``Ours*`` one for aiodstream's
``DStream.transformWithState`` (plain values in, tuples out). Events are ``(key, event_time_ms,
value)``. Batches are fed to Spark one JSON file per trigger (``maxFilesPerTrigger=1``,
``processAllAvailable`` after each) with the RocksDB state store, and every batch's output is
collected with ``foreachBatch``, including the no-data batches Spark runs when the watermark
moves (where most event-time timers fire).

The programs, under a watermark of :data:`DELAY`:

- ``seeded`` (time mode "EventTime"): per key a count (value state), the values seen (list
  state) and a count per value modulo 3 (map state), some keys starting from an initial state
  applied in the first batch (with a timer at :data:`GAP_MS`, which closes a key that has no input
  by then; an input moves it, as any timer not yet due); each batch with input replaces the key's session timer (last event
  time plus :data:`GAP_MS`), and a value of :data:`FLUSH` also registers a timer at the current
  watermark, already due, which fires in the same batch as the key's input. A timer closes the
  session: it reports what the key holds and clears it.
- ``tally`` (time mode "None"): the same counting without timers (a flush is a plain value); the
  watermark upstream drops nothing.

Every output carries the watermark its call saw (``TimerValues``), and in "None" mode the
processing time too (-1 there; the two sides' clocks differ otherwise).
"""

from __future__ import annotations

import json
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

Event = tuple[str, int, int]
Output = tuple[Any, ...]

GAP_MS = 10_000
"""A session's timer is its last event time plus this gap."""

DELAY = "5 seconds"
"""The watermark's delay threshold."""

FLUSH = -1
"""A value asking for a timer at the current watermark (due at once)."""

SPARK_OUTPUT = "key string, kind string, at long, count long, seen array<long>, mods array<string>, wm long, proc long"
"""The output rows' schema on the pyspark side: what ``Ours*`` processors yield as tuples."""

INITIAL: list[tuple[str, int]] = [("a", 100), ("a", 101), ("z", 7), ("b", 5)]
"""The ``seeded`` program's initial state: (key, value) rows, each counted and kept as if seen."""


def _mods(items: Iterable[tuple[int, int]]) -> list[str]:
    """A map state's entries as sorted ``"mod=count"`` strings (a stable, comparable form)."""
    return [f"{mod}={count}" for mod, count in sorted(items)]


def _processing(times: Any, timers: bool) -> int:
    """The processing time a call saw where both sides agree on it: in time mode "None" (-1), else 0."""
    return 0 if timers else times.getCurrentProcessingTimeInMs()


# -- the pyspark side --


def spark_processors() -> dict[str, Any]:
    """The pyspark processors by program name (defined here so that importing this module needs no pyspark)."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class SparkSessions(StatefulProcessor):
        """``seeded`` on pyspark (``tally`` without ``timers``)."""

        def __init__(self, timers: bool = True) -> None:
            """A processor using timers (time mode "EventTime"), or none (time mode "None")."""
            self.timers = timers

        def init(self, handle: Any) -> None:
            """The three variables."""
            self.handle = handle
            self.count = handle.getValueState("count", "count long")
            self.seen = handle.getListState("seen", "value long")
            self.mods = handle.getMapState("mods", "mod long", "n long")

        def emit(self, key: str, kind: str, at: int, times: Any) -> Any:
            """One output row with what the key holds and the times its call saw."""
            count = self.count.get()[0] if self.count.exists() else 0
            seen = [int(row[0]) for row in self.seen.get()]
            mods = _mods((int(k[0]), int(v[0])) for k, v in self.mods.iterator())
            return pd.DataFrame({"key": [key], "kind": [kind], "at": [at], "count": [count], "seen": [seen],
                                 "mods": [mods], "wm": [times.getCurrentWatermarkInMs()],
                                 "proc": [_processing(times, self.timers)]})

        def add(self, value: int) -> None:
            """Count ``value`` into the three variables."""
            self.count.update(((self.count.get()[0] if self.count.exists() else 0) + 1,))
            self.seen.appendValue((value,))
            mod = value % 3
            held = self.mods.getValue((mod,))
            self.mods.updateValue((mod,), ((held[0] if held is not None else 0) + 1,))

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N803
            """Count the rows, move the session timer, maybe ask for a flush; report "open"."""
            last = None
            for pdf in rows:
                for ts, value in zip(pdf["ts"], pdf["value"], strict=True):
                    millis = int(ts.value // 1_000_000)
                    last = millis if last is None else max(last, millis)
                    if int(value) == FLUSH and self.timers:
                        self.handle.registerTimer(timerValues.getCurrentWatermarkInMs())
                    else:
                        self.add(int(value))
            if self.timers:
                for expiry in list(self.handle.listTimers()):
                    if expiry > timerValues.getCurrentWatermarkInMs():
                        self.handle.deleteTimer(expiry)
                if last is not None:
                    self.handle.registerTimer(last + GAP_MS)
            yield self.emit(key[0], "open", -1 if last is None else last, timerValues)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:  # noqa: N803
            """Report the session at its timer and clear it."""
            yield self.emit(key[0], "closed", expiredTimerInfo.getExpiryTimeInMs(), timerValues)
            self.count.clear()
            self.seen.clear()
            self.mods.clear()

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N803
            """pandas mode: all the key's initial rows in one frame; each counted as if seen; a timer at :data:`GAP_MS`."""
            for value in initialState["value"]:
                self.add(int(value))
            self.handle.registerTimer(GAP_MS)

        def close(self) -> None:
            """Nothing to release."""

    return {"seeded": SparkSessions, "tally": lambda: SparkSessions(timers=False)}


# -- the aiodstream side (same logic, plain values) --


def ours_processors() -> dict[str, Any]:
    """aiodstream's processors by program name (what :func:`spark_processors` computes)."""
    from streaming.state import StatefulProcessor

    class OursSessions(StatefulProcessor):
        """``seeded`` on aiodstream (``tally`` without ``timers``)."""

        def __init__(self, timers: bool = True) -> None:
            """A processor using timers (time mode "EventTime"), or none (time mode "None")."""
            self.timers = timers

        def init(self, handle: Any) -> None:
            """The three variables."""
            self.handle = handle
            self.count = handle.getValueState("count", "count long")
            self.seen = handle.getListState("seen", "value long")
            self.mods = handle.getMapState("mods", "mod long", "n long")

        def emit(self, key: str, kind: str, at: int, times: Any) -> Output:
            """One output with what the key holds and the times its call saw."""
            count = self.count.get() if self.count.exists() else 0
            return (key, kind, at, count, list(self.seen.get()), _mods(self.mods.iterator()),
                    times.getCurrentWatermarkInMs(), _processing(times, self.timers))

        def add(self, value: int) -> None:
            """Count ``value`` into the three variables."""
            self.count.update((self.count.get() if self.count.exists() else 0) + 1)
            self.seen.appendValue(value)
            mod = value % 3
            held = self.mods.getValue(mod)
            self.mods.updateValue(mod, (held if held is not None else 0) + 1)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Output]:  # noqa: N803
            """Count the rows, move the session timer, maybe ask for a flush; report "open"."""
            last = None
            for _, ts, value in rows:
                last = ts if last is None else max(last, ts)
                if value == FLUSH and self.timers:
                    self.handle.registerTimer(timerValues.getCurrentWatermarkInMs())
                else:
                    self.add(value)
            if self.timers:
                for expiry in list(self.handle.listTimers()):
                    if expiry > timerValues.getCurrentWatermarkInMs():
                        self.handle.deleteTimer(expiry)
                if last is not None:
                    self.handle.registerTimer(last + GAP_MS)
            yield self.emit(key, "open", -1 if last is None else last, timerValues)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Output]:  # noqa: N803
            """Report the session at its timer and clear it."""
            yield self.emit(key, "closed", expiredTimerInfo.getExpiryTimeInMs(), timerValues)
            self.count.clear()
            self.seen.clear()
            self.mods.clear()

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N803
            """One initial row (pyspark's row mode): counted as if seen; a timer at :data:`GAP_MS`, registered once per key."""
            self.add(initialState)
            if GAP_MS not in self.handle.listTimers():  # pyspark's pandas mode calls once per key: as many registrations
                self.handle.registerTimer(GAP_MS)

    return {"seeded": OursSessions, "tally": lambda: OursSessions(timers=False)}


PROGRAMS: dict[str, dict[str, Any]] = {
    "seeded": {"initial": INITIAL, "time_mode": "EventTime"},
    "tally": {"initial": None, "time_mode": "None"},
}
"""Each program's initial state ((key, value) rows), if any, and time mode."""


def by_key(rows: Iterable[Output]) -> list[Output]:
    """``rows`` sorted by key only: each key's rows stay in the order its calls emitted them.

    A key lives in one partition, whose outputs keep their order, while partitions interleave
    arbitrarily: so a key's data-pass output comes before its timers', in expiry order.
    """
    return sorted(rows, key=lambda row: row[0])


COUNTERS = ("numRegisteredTimers", "numDeletedTimers", "numRowsDroppedByWatermark")
"""The progress counters both sides count alike (state store internals and timings differ by design)."""


def counters(operators: Iterable[Any]) -> dict[str, int]:
    """:data:`COUNTERS` summed over progresses' state operators (pyspark's JSON dicts)."""
    summed = dict.fromkeys(COUNTERS, 0)
    for operator in operators:
        summed["numRowsDroppedByWatermark"] += operator["numRowsDroppedByWatermark"]
        for name in COUNTERS[:2]:
            summed[name] += operator["customMetrics"].get(name, 0)
    return summed


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
"""pyspark's transformWithStateInPandas runs only on this state store provider."""


@contextmanager
def rocksdb_session(spark_context: Any) -> Iterator[Any]:
    """A session on ``spark_context`` with the RocksDB state store provider, the provider set back after."""
    from pyspark.sql import SparkSession

    spark = SparkSession(spark_context)
    key = "spark.sql.streaming.stateStore.providerClass"
    before = spark.conf.get(key, None)
    spark.conf.set(key, ROCKSDB)
    try:
        yield spark
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def run_spark(spark: Any, program: str, batches: list[list[Event]],
              metrics: list[dict[str, int]] | None = None) -> list[list[Output]]:
    """Run ``program`` on pyspark over ``batches``, one trigger each; per input batch, what Spark output for it.

    That is the output of the batch that read it plus that of the no-data batch Spark runs
    after it when the watermark moved (where event-time timers fire), in :func:`by_key` order. ``spark`` must
    run the RocksDB state store provider (transformWithStateInPandas needs it). With
    ``metrics``, the :data:`COUNTERS` of those batches are appended to it per input batch.
    """
    processor = spark_processors()[program]()
    initial, time_mode = PROGRAMS[program]["initial"], PROGRAMS[program]["time_mode"]
    outputs: dict[int, list[Output]] = {}

    def collect(df: Any, batch_id: int) -> None:
        outputs[batch_id] = [(row.key, row.kind, row.at, row["count"], list(row.seen), list(row.mods), row.wm, row.proc)
                             for row in df.collect()]

    with tempfile.TemporaryDirectory(prefix="aiodstream-tws-ref-") as tmp:
        source, checkpoint = Path(tmp) / "in", Path(tmp) / "ck"
        source.mkdir()
        stream = (spark.readStream.schema("key string, ts_ms long, value long").option("maxFilesPerTrigger", 1)
                  .json(str(source)))
        stream = stream.selectExpr("key", "timestamp_millis(ts_ms) AS ts", "value").withWatermark("ts", DELAY)
        options: dict[str, Any] = {}
        if initial is not None:
            options["initialState"] = spark.createDataFrame(initial, "key string, value long").groupBy("key")
        query = (stream.groupBy("key")
                 .transformWithStateInPandas(processor, SPARK_OUTPUT, "append", time_mode, **options)
                 .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint)).start())
        groups: list[list[Output]] = []
        reported = -1
        try:
            for index, events in enumerate(batches):
                lines = "".join(json.dumps({"key": k, "ts_ms": t, "value": v}) + "\n" for k, t, v in events)
                part = source / f".part-{index:05d}.json"
                part.write_text(lines)
                part.rename(source / f"part-{index:05d}.json")
                query.processAllAvailable()
                groups.append(by_key(row for batch in sorted(outputs) for row in outputs[batch]))
                outputs.clear()
                progress = [json.loads(p.json) for p in query.recentProgress]
                if metrics is not None:
                    metrics.append(counters(op for p in progress if p["batchId"] > reported for op in p["stateOperators"]))
                reported = max((p["batchId"] for p in progress), default=reported)
            exception = query.exception()
            if exception is not None:
                raise exception
        finally:
            query.stop()
    return groups


# -- restarts with a changed processor --

Variable = tuple[str, str, str]
"""A state variable: name, kind ("value", "list" or "map"; a map's keys are ``k string``), value schema (DDL)."""
Setup = tuple[tuple[Variable, ...], str, str]
"""What a run declares: its variables, time mode and output mode."""

RESTART_ERROR = re.compile(r"\[((?:STATE_STORE|STATEFUL_PROCESSOR)_[A-Z_]+)\]")
"""The error classes of a refused restart, in an exception's text."""


def declare(handle: Any, variables: tuple[Variable, ...]) -> None:
    """Declare a setup's variables on a processor's handle (pyspark's or ours: the same calls)."""
    for name, kind, schema in variables:
        if kind == "map":
            handle.getMapState(name, "k string", schema)
        elif kind == "list":
            handle.getListState(name, schema)
        else:
            handle.getValueState(name, schema)


def spark_restart(spark: Any, first: Setup, second: Setup) -> str:
    """Run ``first`` on pyspark for one batch, then ``second`` on the same checkpoint: "allowed" or the refusal's error class."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class Declares(StatefulProcessor):
        """Declares the variables of a setup; one output per key."""

        def __init__(self, variables: tuple[Variable, ...]) -> None:
            """The variables ``init`` declares."""
            self.variables = variables

        def init(self, handle: Any) -> None:
            """Declare them."""
            declare(handle, self.variables)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N803
            """One row per key."""
            for _ in rows:
                pass
            yield pd.DataFrame({"key": [key[0]]})

    with tempfile.TemporaryDirectory(prefix="aiodstream-tws-restart-") as tmp:
        source, checkpoint = Path(tmp) / "in", str(Path(tmp) / "ck")
        source.mkdir()
        for index, (variables, time_mode, output_mode) in enumerate((first, second)):
            (source / f"part-{index}.json").write_text(json.dumps({"key": "a", "ts_ms": index}) + "\n")
            stream = spark.readStream.schema("key string, ts_ms long").option("maxFilesPerTrigger", 1).json(str(source))
            stream = stream.selectExpr("key", "timestamp_millis(ts_ms) AS ts").withWatermark("ts", DELAY)
            query = (stream.groupBy("key").transformWithStateInPandas(Declares(variables), "key string", output_mode,
                                                                      time_mode)
                     .writeStream.foreachBatch(lambda df, _: df.collect())
                     .option("checkpointLocation", checkpoint).start())
            try:
                query.processAllAvailable()
            except Exception as exc:  # the refusal: Spark's StreamingQueryException around the error class
                if index == 0 or not (found := RESTART_ERROR.search(str(exc))):
                    raise
                return found.group(1)
            finally:
                query.stop()
    return "allowed"
