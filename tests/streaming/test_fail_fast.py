"""Fail fast where Spark does: a checkpointed context whose graph cannot be saved refuses to start, as on pyspark."""

from __future__ import annotations

import traceback
import uuid
from pathlib import Path
from typing import Any

import pytest

from streaming import StreamingContext
from streaming.dstream import GraphNotSerializableError

PYTHON_FAILURE = "An exception was raised by Python:\n"


def is_uuid(name: str) -> bool:
    try:
        uuid.UUID(name)
    except ValueError:
        return False
    return True


def python_traceback(text: str) -> str:
    """The Python traceback inside a Spark error's text (what follows Spark's prefix, up to the Java stack)."""
    return text.split(PYTHON_FAILURE, 1)[1].split("\n\tat ", 1)[0].rstrip("\n")


@pytest.mark.spark
def test_a_function_holding_the_spark_context_refuses_start_as_on_pyspark(spark_context: Any, tmp_path: Path) -> None:
    """pyspark's serializer-failure program: a foreachRDD function that holds the SparkContext, with a checkpoint.
    Both engines refuse start() with "An exception was raised by Python:" and the same pickling error; ours
    writes nothing to the checkpoint."""
    from pyspark.streaming import StreamingContext as PySparkStreamingContext

    sc = spark_context
    (tmp_path / "in").mkdir()

    def program(cls: Any, checkpoint: Path) -> Any:
        ssc = cls(sc, 0.5)

        def process(time: Any, rdd: Any) -> None:
            sc.parallelize(range(1, 10))  # the SparkContext in a function's closure: cannot be pickled

        ssc.textFileStream(str(tmp_path / "in")).foreachRDD(process)
        ssc.checkpoint(str(checkpoint))
        return ssc

    theirs = program(PySparkStreamingContext, tmp_path / "theirs")
    try:
        with pytest.raises(Exception) as pyspark_raised:
            theirs.start()
    finally:
        theirs.stop(stopSparkContext=False)
    expected = python_traceback(str(pyspark_raised.value))

    ours = program(StreamingContext, tmp_path / "ours")
    try:
        with pytest.raises(GraphNotSerializableError) as raised:
            ours.start()
    finally:
        ours.stop(stopSparkContext=False)
    message = str(raised.value)
    assert message.startswith(PYTHON_FAILURE + "Traceback (most recent call last):\n")
    assert message.rstrip("\n").splitlines()[-1] == expected.splitlines()[-1]
    assert expected.splitlines()[-1].startswith("_pickle.PicklingError: Could not serialize object: PySparkRuntimeError: ")
    # What pyspark's own test looks for in the formatted failure.
    assert "It appears that you are attempting to reference SparkContext" in "".join(traceback.format_exception(raised.value))
    assert raised.value.method == "foreachRDD"
    # Only Spark's RDD checkpoint directory (setCheckpointDir makes it, on pyspark too): no graph, no logs.
    assert [p.name for p in (tmp_path / "ours").iterdir() if not is_uuid(p.name)] == []
    assert [p.name for p in (tmp_path / "theirs").iterdir() if not is_uuid(p.name)] == []


@pytest.mark.spark
def test_a_queue_of_rdds_with_a_checkpoint_starts_with_a_warning_as_on_pyspark(spark_context: Any, tmp_path: Path,
                                                                              capfd: pytest.CaptureFixture[str]) -> None:
    """Spark only warns for a queue stream it cannot save (queueStream doesn't support checkpointing): both engines
    start; ours says why in a warning (and prints no traceback, as pyspark prints none) and saves no graph."""
    from pyspark.streaming import StreamingContext as PySparkStreamingContext

    from tests.support import capture_events

    sc = spark_context
    theirs = PySparkStreamingContext(sc, 0.5)
    theirs.queueStream([sc.parallelize([1])]).foreachRDD(lambda rdd: None)
    theirs.checkpoint(str(tmp_path / "theirs"))
    try:
        theirs.start()  # no error
    finally:
        theirs.stop(stopSparkContext=False)

    ours = StreamingContext(sc, 0.5)
    ours.queueStream([sc.parallelize([1])]).foreachRDD(lambda rdd: None)
    ours.checkpoint(str(tmp_path / "ours"))
    capfd.readouterr()
    with capture_events() as logs:
        try:
            ours.start()
        finally:
            ours.stop(stopSparkContext=False)
    [warning] = [e for e in logs if e["event"].startswith("the DStream graph cannot be saved")]
    assert warning["reason"].startswith("queueStream doesn't support checkpointing: Could not serialize object: ")
    assert "Traceback" not in capfd.readouterr().err
    assert not (tmp_path / "ours" / "graph").exists()
