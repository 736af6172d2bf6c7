"""FrameRDD's storage and I/O beside pyspark's: persist, checkpoints, text files in and out, DataFrames
in and out; and FrameContext's refusals, with their messages."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.connect


def exactly(message: str) -> str:
    """A ``match`` pattern for exactly this message."""
    return f"^{re.escape(message)}$"


def test_persist_keeps_partitions_and_unpersist_releases(frame_context: Any, spark_context: Any) -> None:
    """A persisted FrameRDD reads the stored partitions (the function ran once), and ``unpersist`` clears the level."""
    from pyspark import StorageLevel

    counter = Path(os.environ.get("TMPDIR", "/tmp")) / f"frame-persist-{os.getpid()}"
    counter.write_text("")

    def tally(x: int) -> int:
        with open(counter, "a") as out:
            out.write("x")
        return x * 3

    rdd = frame_context.parallelize(range(10), 3).map(tally)
    assert rdd.persist(StorageLevel.MEMORY_ONLY) is rdd
    assert rdd.is_cached and rdd.getStorageLevel() == StorageLevel.MEMORY_ONLY
    first = rdd.glom().collect()
    second = rdd.map(lambda x: x + 1).glom().collect()
    assert first == spark_context.parallelize(range(10), 3).map(lambda x: x * 3).glom().collect()
    assert second == [[v + 1 for v in part] for part in first]
    assert len(counter.read_text()) == 10  # computed once, read twice
    rdd.unpersist()
    assert not rdd.is_cached
    counter.unlink()


def test_cache_is_persist(frame_context: Any) -> None:
    """``cache()`` persists and returns the same FrameRDD."""
    rdd = frame_context.parallelize([1, 2], 2)
    assert rdd.cache() is rdd and rdd.is_cached
    assert rdd.collect() == [1, 2]
    rdd.unpersist()


def test_checkpoint_needs_a_directory_then_saves_the_partitions(frame_context: Any, tmp_path: Path) -> None:
    """``checkpoint()`` without a directory fails as pyspark's; with one, the first action checkpoints and partitions stay."""
    from streaming.connect import FrameContext

    fresh = FrameContext(frame_context.session)
    with pytest.raises(RuntimeError, match=exactly(
            "Checkpoint directory has not been set in the SparkContext; call setCheckpointDir(dir) on the FrameContext")):
        fresh.parallelize([1], 1).checkpoint()
    frame_context.setCheckpointDir(str(tmp_path / "checkpoints"))
    assert frame_context.getCheckpointDir() == str(tmp_path / "checkpoints")
    rdd = frame_context.parallelize(range(7), 3).map(lambda x: (x % 2, x))
    rdd.checkpoint()
    assert not rdd.isCheckpointed()
    assert rdd.glom().collect() == [[(0, 0), (1, 1)], [(0, 2), (1, 3)], [(0, 4), (1, 5), (0, 6)]]
    assert rdd.isCheckpointed()
    assert rdd.reduceByKey(lambda a, b: a + b, 2).collect() == [(0, 12), (1, 9)]


def test_local_checkpoint(frame_context: Any) -> None:
    """``localCheckpoint()`` keeps the partitions too."""
    rdd = frame_context.parallelize(range(5), 2)
    rdd.localCheckpoint()
    assert rdd.glom().collect() == [[0, 1], [2, 3, 4]]
    assert rdd.isLocallyCheckpointed()


def test_save_as_text_file_writes_the_files_of_pyspark(frame_context: Any, spark_context: Any, tmp_path: Path) -> None:
    """``saveAsTextFile`` writes pyspark's files: ``str(x)`` per line, ``part-NNNNN`` per partition, then ``_SUCCESS``."""
    data = [1, "two", (3, "x"), None, b"bytes"]
    frame_context.parallelize(data, 2).saveAsTextFile(str(tmp_path / "frame"))
    spark_context.parallelize(data, 2).saveAsTextFile(str(tmp_path / "classic"))

    def lines(directory: Path) -> list[str]:
        parts = sorted(p for p in directory.iterdir() if p.name.startswith("part-"))
        return [line for part in parts for line in part.read_text().splitlines()]

    assert lines(tmp_path / "frame") == lines(tmp_path / "classic")
    assert names(tmp_path / "frame") == names(tmp_path / "classic") == ["_SUCCESS", "part-00000", "part-00001"]
    for partitions in (1, 3):  # empty partitions write empty part files, as pyspark's
        frame_context.parallelize([], partitions).saveAsTextFile(str(tmp_path / f"frame{partitions}"))
        spark_context.parallelize([], partitions).saveAsTextFile(str(tmp_path / f"classic{partitions}"))
        assert names(tmp_path / f"frame{partitions}") == names(tmp_path / f"classic{partitions}")
    with pytest.raises(Exception, match=r"Output directory .* already exists"):
        frame_context.parallelize([1], 1).saveAsTextFile(str(tmp_path / "frame"))


def names(directory: Path) -> list[str]:
    """The visible file names of an output directory."""
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def test_save_as_text_file_compresses_as_pyspark(frame_context: Any, spark_context: Any, tmp_path: Path) -> None:
    """With the gzip codec class, ``part-NNNNN.gz`` files holding pyspark's lines."""
    import gzip

    codec = "org.apache.hadoop.io.compress.GzipCodec"
    frame_context.parallelize(range(5), 2).saveAsTextFile(str(tmp_path / "frame"), codec)
    spark_context.parallelize(range(5), 2).saveAsTextFile(str(tmp_path / "classic"), codec)
    assert names(tmp_path / "frame") == names(tmp_path / "classic")
    assert [gzip.decompress((tmp_path / "frame" / n).read_bytes()) for n in names(tmp_path / "frame") if n.endswith(".gz")] == [
        gzip.decompress((tmp_path / "classic" / n).read_bytes()) for n in names(tmp_path / "classic") if n.endswith(".gz")]


def test_save_as_text_file_refuses_an_unknown_codec(frame_context: Any, tmp_path: Path) -> None:
    """An unknown compression codec class is refused with the known ones."""
    with pytest.raises(ValueError, match=exactly(
            "unknown compression codec class 'my.Codec'; use one of ['org.apache.hadoop.io.compress.BZip2Codec', "
            "'org.apache.hadoop.io.compress.GzipCodec']")):
        frame_context.parallelize([1], 1).saveAsTextFile(str(tmp_path / "out"), "my.Codec")


def test_text_file_reads_the_same_lines(frame_context: Any, spark_context: Any, tmp_path: Path) -> None:
    """``textFile`` gives the lines pyspark's gives, in order, and FrameRDD operations work on them."""
    for i in range(3):
        (tmp_path / f"f{i}.txt").write_text("".join(f"line {i}.{j}\n" for j in range(4)))
    paths = ",".join(str(tmp_path / f"f{i}.txt") for i in range(3))
    frame = frame_context.textFile(paths)
    classic = spark_context.textFile(paths)
    assert sorted(frame.collect()) == sorted(classic.collect())
    assert frame.map(len).sum() == classic.map(len).sum()
    assert all(part == sorted(part) for part in frame.glom().collect())


def test_dataframe_and_to_df(frame_context: Any) -> None:
    """``dataframe`` holds one pickled value per row; ``toDF`` gives typed columns from tuples or a schema."""
    import pickle

    rdd = frame_context.parallelize([("a", 1), ("b", 2), ("c", 3)], 2)
    assert [pickle.loads(row.v) for row in rdd.dataframe.collect()] == [("a", 1), ("b", 2), ("c", 3)]
    assert [tuple(row) for row in rdd.toDF(["k", "n"]).orderBy("k").collect()] == [("a", 1), ("b", 2), ("c", 3)]
    typed = rdd.toDF("k string, n int")
    assert typed.columns == ["k", "n"] and typed.agg({"n": "sum"}).collect()[0][0] == 6


def test_from_dataframe_gives_rows(frame_context: Any) -> None:
    """``fromDataFrame`` wraps a Connect DataFrame's rows as Rows (classic ``df.rdd``), usable as any FrameRDD."""
    df = frame_context.session.createDataFrame([("a", 1), ("b", 2), ("a", 3)], "k string, n int")
    rdd = frame_context.fromDataFrame(df)
    assert sorted(rdd.map(lambda row: (row.k, row.n)).reduceByKey(lambda x, y: x + y).collect()) == [("a", 4), ("b", 2)]
    assert sorted(tuple(row) for row in rdd.collect()) == [("a", 1), ("a", 3), ("b", 2)]


def test_foreach_partition_runs_once_per_partition_even_empty(frame_context: Any, tmp_path: Path) -> None:
    """``foreachPartition`` runs the function on every partition, an empty one too, on the executors."""
    marks = tmp_path / "marks"
    marks.mkdir()

    def mark(values: Any) -> None:
        import uuid

        (marks / f"{uuid.uuid4().hex}-{len(list(values))}").write_text("")

    frame_context.parallelize([1, 2, 3], 5).foreachPartition(mark)
    assert sorted(int(p.name.split("-")[1]) for p in marks.iterdir()) == [0, 0, 1, 1, 1]


def test_errors_on_executors_reach_the_caller(frame_context: Any) -> None:
    """A user function's exception fails the action with the function's message."""
    with pytest.raises(Exception, match="ZeroDivisionError"):
        frame_context.parallelize([1, 0], 2).map(lambda x: 1 // x).collect()


def test_bad_arguments(frame_context: Any) -> None:
    """Bad input is refused as pyspark refuses it, or with a message naming the fix."""
    with pytest.raises(ValueError, match=exactly("the number of slices must be at least 1, got 0")):
        frame_context.parallelize([1], 0)
    with pytest.raises(ValueError, match=exactly("RDD is empty")):
        frame_context.parallelize([], 2).first()
    with pytest.raises(ValueError, match=exactly("Can not reduce() empty RDD")):
        frame_context.parallelize([], 2).reduce(lambda a, b: a)
    with pytest.raises(ValueError, match=exactly("Fraction must be nonnegative.")):
        frame_context.parallelize([1], 1).sample(False, -1.0)
    with pytest.raises(TypeError, match=exactly(
            "FrameContext needs a Spark Connect session (pyspark.sql.connect.session.SparkSession), got object; "
            "use SparkSession.builder.remote(url).getOrCreate()")):
        type(frame_context)(object())


def test_refusals_name_the_alternative(frame_context: Any) -> None:
    """SparkContext and RDD features that need a JVM are refused by name, with what to use instead; hasattr sees them absent."""
    from streaming.connect import ConnectUnsupportedError

    with pytest.raises(ConnectUnsupportedError, match=exactly(
            "SparkContext.addFile is not available on Spark Connect (the client has no SparkContext); "
            "use the session's spark.addArtifacts(path, file=True)")):
        frame_context.addFile("x")
    with pytest.raises(ConnectUnsupportedError, match=exactly(
            "RDD.zip is not available on Spark Connect (a FrameRDD has no JVM RDD); "
            "work on rdd.dataframe (one pickled value per row) or rdd.toDF() instead")):
        frame_context.parallelize([1], 1).zip(frame_context.parallelize([2], 1))
    assert not hasattr(frame_context, "statusTracker")
    with pytest.raises(AttributeError, match=exactly("'FrameRDD' object has no attribute 'nonsense'")):
        frame_context.parallelize([1], 1).nonsense  # noqa: B018


def test_create_data_frame_takes_a_frame_rdd(frame_context: Any, spark_context: Any) -> None:
    """A Connect session's createDataFrame takes a FrameRDD of Rows as a classic session takes an RDD: same rows, same schema."""
    from pyspark.sql import Row, SparkSession

    words = ["a", "b", "a", "c"]
    connect = frame_context.session.createDataFrame(frame_context.parallelize(words, 3).map(lambda w: Row(word=w)))
    classic = SparkSession(spark_context).createDataFrame(spark_context.parallelize(words, 3).map(lambda w: Row(word=w)))
    assert connect.schema == classic.schema
    assert connect.collect() == classic.collect() == [Row(word=w) for w in words]
    assert list(frame_context.parallelize([3, 1, 2], 2)) == [3, 1, 2]


def test_get_conf_names_the_server_so_the_builder_returns_the_session(frame_context: Any) -> None:
    """getConf().getAll() has the session's settings and its sc:// URL as spark.remote (no spark.master), which is what
    SparkSession.builder.config(conf=...).getOrCreate() in a Connect client needs to return this session."""
    frame_context.session.conf.set("spark.aiodstream.test.marker", "on")
    try:
        settings = dict(frame_context.getConf().getAll())
    finally:
        frame_context.session.conf.unset("spark.aiodstream.test.marker")
    assert settings["spark.aiodstream.test.marker"] == "on"
    assert "spark.master" not in settings
    remote = settings["spark.remote"]
    client = frame_context.session.client
    assert remote.startswith("sc://") and f":{client._builder.url.port}/" in remote and "token=" in remote


def test_a_word_count_over_a_parallelized_list_makes_one_plan_analysis(frame_context: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch's parallelize reuses the context's marker frame, whose columns the server was asked for once: a word
    count then makes one plan analysis (the shuffle's output), not two."""
    client = frame_context.session.client
    analyze = client._analyze
    calls: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(str(kwargs.get("method")))
        return analyze(*args, **kwargs)

    def word_count(lines: list[str]) -> list[Any]:
        return sorted(frame_context.parallelize(lines, 2).flatMap(str.split).map(lambda w: (w, 1))
                      .reduceByKey(lambda a, b: a + b).collect())

    assert word_count(["a b", "b"]) == [("a", 1), ("b", 2)]  # the marker frame's columns asked for, at most once
    monkeypatch.setattr(client, "_analyze", counted)
    assert word_count(["c d", "d d"]) == [("c", 1), ("d", 3)]
    assert calls == ["schema"]


def test_a_checkpoint_of_a_persisted_rdd_keeps_the_saved_partitions_cached_instead(frame_context: Any, tmp_path: Path) -> None:
    """persist() then checkpoint(): the first action saves the partitions, the frame persist() stored is released, the
    frame read back from the checkpoint is kept instead, and unpersist() releases that one."""
    frame_context.setCheckpointDir(str(tmp_path / "checkpoints"))
    rdd = frame_context.parallelize(range(6), 2).map(lambda x: x * 2)
    rdd.persist()
    stored = rdd.frame
    rdd.checkpoint()
    assert rdd.collect() == [0, 2, 4, 6, 8, 10] and rdd.isCheckpointed()
    level = stored.storageLevel
    assert not (level.useMemory or level.useDisk)
    saved = rdd.frame
    assert saved is not stored and rdd.is_cached
    assert saved.storageLevel.useMemory or saved.storageLevel.useDisk
    assert rdd.map(lambda x: x + 1).glom().collect() == [[1, 3, 5], [7, 9, 11]]
    rdd.unpersist()
    level = saved.storageLevel
    assert not (level.useMemory or level.useDisk) and not rdd.is_cached
