"""The process the Kafka crash test kills: a checkpointed getOrCreate program reading a topic with the direct stream.

Usage: ``python tests/streaming/kafka/dstream_kafka_crash_child.py BOOTSTRAP TOPIC OUT CHECKPOINT STOPFILE``.

The topic lives on the test's broker (``BOOTSTRAP``), which outlives every kill. Each 3 s batch
saves, with ``saveAsTextFiles`` (a batch's directory is skipped once complete, so a re-run batch
writes nothing twice):

- ``OUT/batch-<ms>``: the batch's ``offsetRanges()`` as ``range partition:from:until`` lines,
  then each record read as ``record partition:offset:value`` (one save: a job fewer per batch);
- ``OUT/counts-<ms>``: the running count of records per word (``updateStateByKey``; a value's
  word is what precedes its ``-``).

With the Connect server's URL (``sc://host:port/;token=...;session_id=...``) in
``AIODSTREAM_CRASH_KAFKA_CONNECT_URL`` the same program runs on that Connect session instead of a
local Spark: ``getOrCreate`` restores its graph from the checkpoint on the session made first (the
server's address is not saved), and the server writes the state's snapshots. Every run joins the
same server-side session and first interrupts what a killed run left running there (a dead
client's queries run on, and one still writing a batch's files would race this run's replay of
that batch).

It prints ``started`` once the context runs and stops gracefully once ``STOPFILE`` exists (or
after ``tests.crash.MAX_RUN_S``), unless it is killed first. ``AIODSTREAM_KILL_AT`` may name a
moment in the checkpoint's log writes (:func:`tests.crash.install_kill_point`): ``offsets-linked``
(a batch's ranges logged, none of its jobs run), ``commits-temp`` (every output of a batch saved,
its commit not yet in place), and likewise ``offsets-temp`` and ``commits-linked``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from tests.crash import child_spark_context, install_kill_point, run_until_stopped

INTERVAL_S = 3
CONNECT_URL = "AIODSTREAM_CRASH_KAFKA_CONNECT_URL"


def main(bootstrap: str, topic: str, out: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the program until ``stop_file`` appears."""
    from streaming import StreamingContext
    from streaming.kafka import KafkaUtils

    url = os.environ.get(CONNECT_URL)
    if url:
        from pyspark.sql.connect.session import SparkSession

        spark = SparkSession.builder.remote(url).create()
        spark.interruptAll()
    else:
        spark = child_spark_context("dstream-kafka-crash-child")

    def setup() -> StreamingContext:
        ssc = StreamingContext(spark, INTERVAL_S)
        stream = KafkaUtils.createDirectStream(ssc, [topic], {"metadata.broker.list": bootstrap, "auto.offset.reset": "smallest"},
                                               messageHandler=lambda m: f"{m.partition}:{m.offset}:{m.message}")
        batch = stream.transform(lambda rdd: rdd.context.parallelize(
            [f"range {r.partition}:{r.fromOffset}:{r.untilOffset}" for r in rdd.offsetRanges()], 1)
            .union(rdd.map(lambda record: f"record {record}")))
        batch.saveAsTextFiles(f"{out}/batch")
        words = stream.map(lambda record: (record.split(":", 2)[2].split("-")[0], 1))
        counts = words.updateStateByKey(lambda new, old: sum(new) + (old or 0))
        counts.checkpoint(3 * INTERVAL_S)
        counts.saveAsTextFiles(f"{out}/counts")
        ssc.checkpoint(checkpoint)
        return ssc

    run_until_stopped(checkpoint, setup, stop_file)


def log_kind(checkpoint: str) -> Callable[[str], str | None]:
    """The kill points' names for a file put in place: ``offsets`` or ``commits`` for the checkpoint's two logs."""
    root = os.path.abspath(checkpoint)

    def kind(target: str) -> str | None:
        parent = os.path.dirname(os.path.abspath(target))
        name = os.path.basename(parent)
        return name if os.path.dirname(parent) == root and name in ("offsets", "commits") else None

    return kind


if __name__ == "__main__":
    install_kill_point(log_kind(sys.argv[4]))
    main(*sys.argv[1:6])
