"""One pyspark StreamingQueryListener, once on a Structured Streaming query and once on our context: same callbacks, same keys.

Both programs read the text files of one directory and count each batch's lines. Spark's
micro-batch engine runs a batch only when there is new data, and a DStream context runs one
every interval, so our run has more (empty) progress reports: the sequences are compared with
repeats collapsed. Every progress JSON of either run has the same keys at every level Spark
fixes (the report, each source, the sink); ``durationMs`` is a map of measured phases, and ours
names only phases Spark also reports.
"""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming import StreamingQueryListener

from streaming import StreamingContext

pytestmark = pytest.mark.spark


class Recording(StreamingQueryListener):  # type: ignore[misc]
    """Records the callbacks, the progress JSON, and signals termination."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.progress: list[dict[str, Any]] = []
        self.terminated = threading.Event()
        self.terminated_event: Any = None

    def onQueryStarted(self, event: Any) -> None:
        self.calls.append("onQueryStarted")

    def onQueryProgress(self, event: Any) -> None:
        self.calls.append("onQueryProgress")
        self.progress.append(json.loads(event.progress.json))

    def onQueryIdle(self, event: Any) -> None:
        self.calls.append("onQueryIdle")

    def onQueryTerminated(self, event: Any) -> None:
        self.calls.append("onQueryTerminated")
        self.terminated_event = event
        self.terminated.set()


def write_lines(directory: Path, name: str, lines: list[str]) -> None:
    staged = directory.parent / f".{directory.name}-{name}"
    staged.write_text("".join(f"{line}\n" for line in lines))
    staged.rename(directory / name)


def run_spark_query(spark_context: Any, directory: Path) -> Recording:
    from pyspark.sql import SparkSession

    spark = SparkSession(spark_context)
    listener = Recording()
    spark.streams.addListener(listener)
    try:
        query = (spark.readStream.text(str(directory)).writeStream.queryName("lines")
                 .foreachBatch(lambda df, batch_id: df.count()).start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert listener.terminated.wait(60), "Spark never delivered onQueryTerminated"
    finally:
        spark.streams.removeListener(listener)
    return listener


def run_our_context(spark_context: Any, directory: Path) -> Recording:
    listener = Recording()
    ssc = StreamingContext(spark_context, 0.2, queryName="lines")
    ssc.addStreamingListener(listener)
    ssc.textFileStream(str(directory)).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    try:
        write_lines(directory, "a.txt", ["x", "y", "z"])
        ssc.processAllAvailable()
        assert any(p.numInputRows for p in ssc.recentProgress), "processAllAvailable returned before a batch read the file"
    finally:
        ssc.stop(stopSparkContext=False)
    assert listener.terminated.is_set()  # our stop returns after every listener heard it
    return listener


def keys(progress: dict[str, Any]) -> tuple[frozenset[str], tuple[frozenset[str], ...], frozenset[str]]:
    return frozenset(progress), tuple(frozenset(s) for s in progress["sources"]), frozenset(progress["sink"])


def test_one_listener_hears_the_same_callbacks_and_keys_from_spark_and_from_us(spark_context: Any, tmp_path: Path) -> None:
    spark_dir, our_dir = tmp_path / "spark", tmp_path / "ours"
    spark_dir.mkdir()
    our_dir.mkdir()
    write_lines(spark_dir, "a.txt", ["x", "y", "z"])
    theirs = run_spark_query(spark_context, spark_dir)
    ours = run_our_context(spark_context, our_dir)

    collapse = [name for name, _ in itertools.groupby(theirs.calls)]
    assert collapse == ["onQueryStarted", "onQueryProgress", "onQueryTerminated"]
    assert [name for name, _ in itertools.groupby(ours.calls)] == collapse

    spark_keys = {keys(p) for p in theirs.progress}
    assert len(spark_keys) == 1
    assert {keys(p) for p in ours.progress} == spark_keys
    spark_phases = set().union(*(p["durationMs"] for p in theirs.progress))
    for progress in ours.progress:
        assert set(progress["durationMs"]) <= spark_phases

    # The data batch: the same rows, the same query name; a clean termination on both sides.
    assert [p["numInputRows"] for p in theirs.progress if p["numInputRows"]] == [3]
    assert [p["numInputRows"] for p in ours.progress if p["numInputRows"]] == [3]
    assert {p["name"] for p in ours.progress} == {p["name"] for p in theirs.progress} == {"lines"}
    assert (ours.terminated_event.exception, theirs.terminated_event.exception) == (None, None)
    assert ours.terminated_event.errorClassOnException == theirs.terminated_event.errorClassOnException is None
