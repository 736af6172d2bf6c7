"""The same DStream programs on aiodstream over classic Spark and over Spark Connect, on one local Spark, in one run.

Prints one JSON object. One local Spark serves both engines: its SparkContext runs the classic
engine and carries Spark's Connect plugin, whose session runs the Connect engine, so both use the
same JVM, executors and Python workers. Measures, in alternating rounds (the engine going first
alternates), each with the 1-minute load beside it:

* ``tiny_count``: a batch that counts a queued one-element list: the cost of the smallest batch
  that reaches Spark on each kind (median processing delay, ms; a no-op ``foreachRDD`` costs
  0 ms on both, as it never calls Spark).
* ``word_count``: flatMap, map, reduceByKey and collect over ``--lines`` queued lines per batch:
  each engine's median processing delay (ms) per round and the ratio Connect / classic; reported
  as the median of the rounds' ratios with its min and max.

* ``vs_structured``: the same word count on the Connect engine against Structured Streaming on the
  same Connect server, same lines per batch, same trigger interval. Structured Streaming reads each
  batch's lines from a file (``readStream.text`` with ``maxFilesPerTrigger=1``: one batch's lines a
  trigger, the files written before it starts) and counts the words of each micro-batch in two
  ways: ``per_batch`` (``foreachBatch``: ``groupBy(word).count().collect()``, what the DStream
  program does) and ``running`` (the canonical streaming word count: ``groupBy(word).count()`` in
  ``update`` mode to the ``memory`` sink, counts kept in the state store). Its time per batch is
  the progress report's ``triggerExecution`` (the whole micro-batch: offsets, planning, the job,
  the commit), ``addBatch`` beside it; ours is the batch's processing delay. Reported per round
  and as the median of the rounds' ratios ours / Structured Streaming (the issue's target: 1.2).

Not part of the test suite. Run (about 8 minutes on a quiet two-core machine):
``PYTHONPATH=$PWD python bench/bench_connect.py`` (``--rounds 3 --batches 12 --lines 5000``;
``--only vs_structured`` for the third part alone).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from operator import add
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_vs_pyspark import make_lines, run_program  # noqa: E402  (the same lines and runner as the pyspark comparison)


def start_spark() -> tuple[Any, Any]:
    """A local[2] SparkContext with Spark's Connect plugin on a free port, and a Connect session on it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    token = uuid.uuid4().hex
    conf = SparkConf().setMaster("local[2]").setAppName("bench-connect")
    for key, value in {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                       "spark.default.parallelism": "2", "spark.sql.shuffle.partitions": "2",
                       "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
                       "spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": "0",
                       "spark.connect.authenticate.token": token}.items():
        conf.set(key, value)
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    service = getattr(getattr(sc._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$"), "MODULE$")
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession.builder.remote(f"sc://localhost:{int(service.localPort())}/;token={token}").create()
    return sc, session


def run(spark: Any, interval: float, batches: int, build: Callable[[Any], None], timeout: float = 600) -> list[int]:
    """Run ``build(ssc)`` on ``spark`` (a SparkContext or a Connect session) until ``batches`` completed; their processing delays."""
    records = run_program("aiodstream", spark, interval, batches, build, timeout=timeout)
    failure = next((batch["failure"] for batch in records if batch["failure"]), None)
    if failure:
        raise RuntimeError(f"a batch failed: {failure}")
    return [batch["processing"] for batch in records[2:]]  # the first two: warm-up


def tiny_count(batches: int) -> Callable[[Any], None]:
    def build(ssc: Any) -> None:
        ssc.queueStream([[1]] * (batches + 2)).foreachRDD(lambda rdd: rdd.count() and None)
    return build


def word_count(batches: int, lines: int) -> Callable[[Any], None]:
    data = [make_lines(i, lines) for i in range(batches + 2)]

    def build(ssc: Any) -> None:
        counts = ssc.queueStream([list(d) for d in data]).flatMap(lambda line: line.split(" ")).map(lambda w: (w, 1))
        counts.reduceByKey(add).foreachRDD(lambda rdd: rdd.collect() and None)
    return build


def write_batch_files(directory: Path, batches: int, lines: int) -> None:
    """One file per batch with :func:`word_count`'s lines, modified one second apart in batch order (the file
    source takes the oldest first)."""
    directory.mkdir(parents=True)
    base = time.time() - batches - 10
    for i in range(batches + 2):
        path = directory / f"batch-{i:04d}.txt"
        path.write_text("\n".join(make_lines(i, lines)) + "\n")
        os.utime(path, (base + i, base + i))


def structured_word_count(session: Any, directory: Path, interval: float, batches: int, mode: str) -> dict[str, float]:
    """Structured Streaming's word count over ``directory``'s files, one file a trigger; the median ``triggerExecution``
    and ``addBatch`` (ms) of the batches after the first two."""
    from pyspark.sql.connect import functions as F  # noqa: N812

    lines = session.readStream.option("maxFilesPerTrigger", 1).text(str(directory))
    words = lines.select(F.explode(F.split(F.col("value"), " ")).alias("word"))
    name = f"ss_{mode}_{uuid.uuid4().hex[:8]}"
    if mode == "running":
        writer = words.groupBy("word").count().writeStream.outputMode("update").format("memory").queryName(name)
    else:
        def per_batch(df: Any, batch_id: int) -> None:
            df.groupBy("word").count().collect()

        writer = words.writeStream.foreachBatch(per_batch)
    query = writer.trigger(processingTime=f"{int(interval * 1000)} milliseconds").start()
    try:
        query.processAllAvailable()
        progress = [p for p in query.recentProgress if (p.numInputRows or 0) > 0]
    finally:
        query.stop()
    if len(progress) < batches + 2:
        raise RuntimeError(f"Structured Streaming ran {len(progress)} batches with input, not {batches + 2}")
    measured = progress[2:batches + 2]
    return {"trigger_ms": statistics.median(p.durationMs["triggerExecution"] for p in measured),
            "add_batch_ms": statistics.median(p.durationMs["addBatch"] for p in measured)}


def vs_structured(session: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Ours on Connect against Structured Streaming on the same server, alternating who goes first, per mode."""
    import tempfile

    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-connect-") as tmp:
        for index in range(args.rounds):
            measured: dict[str, Any] = {}
            order = ["ours", "structured"] if index % 2 == 0 else ["structured", "ours"]
            for side in order:
                if side == "ours":
                    measured["ours_ms"] = statistics.median(run(session, args.interval, args.batches,
                                                                word_count(args.batches, args.lines)))
                    continue
                for mode in ("per_batch", "running"):
                    directory = Path(tmp) / f"round-{index}-{mode}"
                    write_batch_files(directory, args.batches, args.lines)
                    try:
                        measured[mode] = structured_word_count(session, directory, args.interval, args.batches, mode)
                    except Exception as exc:  # reported: foreachBatch's server-side Python process
                        # must connect back within Spark's fixed 10 s, which a loaded machine can miss
                        measured[mode] = {"error": str(exc).splitlines()[0]}
            entry: dict[str, Any] = {"ours_ms": measured["ours_ms"], "load_1min": round(os.getloadavg()[0], 1),
                                     "first": order[0]}
            for mode in ("per_batch", "running"):
                entry[f"structured_{mode}"] = measured[mode]
                trigger = measured[mode].get("trigger_ms")
                entry[f"ratio_{mode}"] = None if trigger is None else round(measured["ours_ms"] / max(trigger, 1), 3)
            rounds.append(entry)
    result: dict[str, Any] = {"rounds": rounds}
    for key in ("ratio_per_batch", "ratio_running"):
        ratios = [r[key] for r in rounds if r[key] is not None]
        result[key] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)} if ratios else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--interval", type=float, default=1.0, help="batch interval, seconds")
    parser.add_argument("--only", choices=["tiny_count", "word_count", "vs_structured"], action="append",
                        help="run only these parts (repeatable; default: all)")
    args = parser.parse_args()
    parts = args.only or ["tiny_count", "word_count", "vs_structured"]
    sc, session = start_spark()
    engines = {"classic": sc, "connect": session}
    result: dict[str, Any] = {"rounds": args.rounds, "batches": args.batches, "lines": args.lines}
    for name, make in (("tiny_count", lambda: tiny_count(args.batches)), ("word_count", lambda: word_count(args.batches, args.lines))):
        if name not in parts:
            continue
        rounds = []
        for index in range(args.rounds):
            order = ["classic", "connect"] if index % 2 == 0 else ["connect", "classic"]
            medians = {}
            for engine in order:
                medians[engine] = statistics.median(run(engines[engine], args.interval, args.batches, make()))
            rounds.append({"classic_ms": medians["classic"], "connect_ms": medians["connect"],
                           "ratio": round(medians["connect"] / max(medians["classic"], 1), 3),
                           "load_1min": round(os.getloadavg()[0], 1), "first": order[0]})
        ratios = [r["ratio"] for r in rounds]
        result[name] = {"rounds": rounds, "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                        "ratio_max": max(ratios)}
    if "vs_structured" in parts:
        result["vs_structured"] = vs_structured(session, args)
    session.stop()
    sc.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"# {time.perf_counter() - began:.0f} s", file=sys.stderr)
