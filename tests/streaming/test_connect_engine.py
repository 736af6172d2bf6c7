"""The engine on a Spark Connect session: batches are FrameRDDs, output jobs tag their queries, the outputs match classic Spark.

Each test runs a few batches on a manual clock (no sleeps) on the test run's Connect session and,
where the result is compared, on the shared classic SparkContext.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from tests.support import run_dstream_batches

pytestmark = pytest.mark.connect


def _run(spark: Any, build: Any, batches: int) -> list[BaseException]:
    clock = ManualClock(0)
    ssc = StreamingContext(spark, 1, clock=clock)
    build(ssc)
    return run_dstream_batches(ssc, clock, batches)


def test_batches_are_frame_rdds_with_the_classic_partitions(connect_session: Any, spark_context: Any) -> None:
    """A queued list's batch on Connect is a FrameRDD whose partitions (glom) equal the classic engine's, after a shuffle too."""
    from streaming.connect import FrameRDD

    results: dict[str, list[Any]] = {"classic": [], "connect": []}
    kinds: list[type] = []

    def build(name: str) -> Any:
        def program(ssc: StreamingContext) -> None:
            words = ssc.queueStream([["a b a", "c a"], ["b b", "d"]]).flatMap(str.split)
            counts = words.map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b, 2)

            def record(rdd: Any) -> None:
                kinds.append(type(rdd))
                results[name].append(rdd.glom().collect())

            counts.foreachRDD(record)
        return program

    assert _run(spark_context, build("classic"), 2) == []
    assert _run(connect_session, build("connect"), 2) == []
    assert results["connect"] == results["classic"]
    assert len(results["connect"]) == 2
    assert FrameRDD in kinds


def test_a_job_tags_its_queries_with_the_batch_group(connect_session: Any) -> None:
    """While an output operation runs on Connect its thread carries the batch's group as the session's tag, and only then."""
    seen: list[set[str]] = []

    def program(ssc: StreamingContext) -> None:
        ssc.queueStream([[1], [2]]).foreachRDD(lambda rdd: seen.append(set(connect_session.getTags())))

    assert _run(connect_session, program, 2) == []
    assert len(seen) == 2
    for index, tags in enumerate(seen):
        assert len(tags) == 1
        (tag,) = tags
        assert tag.startswith("aiodstream-") and tag.endswith(f"-{(index + 1) * 1000}-0"), tag
    assert connect_session.getTags() == set()


def test_foreach_batch_gives_dataframes_and_batch_ids(connect_session: Any) -> None:
    """foreachBatch hands each non-empty batch over as a DataFrame of the session with its batch id; empty batches are skipped."""
    got: list[tuple[int, list[tuple[str, int]]]] = []

    def program(ssc: StreamingContext) -> None:
        pairs = ssc.queueStream([[("a", 1), ("b", 2)], [], [("c", 3)]])

        def write(df: Any, batch_id: int) -> None:
            got.append((batch_id, sorted((row[0], row[1]) for row in df.collect())))

        pairs.foreachBatch(write)

    assert _run(connect_session, program, 3) == []
    assert got == [(0, [("a", 1), ("b", 2)]), (2, [("c", 3)])]


def test_queued_dataframes_become_batches_of_rows(connect_session: Any) -> None:
    """queueStream takes Connect DataFrames on Connect: each batch holds the DataFrame's rows."""
    got: list[list[tuple[int, str]]] = []
    frames = [connect_session.createDataFrame([(1, "x"), (2, "y")], "n int, s string"),
              connect_session.createDataFrame([(3, "z")], "n int, s string")]

    def program(ssc: StreamingContext) -> None:
        ssc.queueStream(frames).map(lambda row: (row.n, row.s)).foreachRDD(lambda rdd: got.append(sorted(rdd.collect())))

    assert _run(connect_session, program, 2) == []
    assert got == [[(1, "x"), (2, "y")], [(3, "z")]]


def test_text_file_stream_reads_new_files_on_the_server(connect_session: Any, tmp_path: Path) -> None:
    """textFileStream on Connect lists the directory here and has the server read each new file's lines."""
    incoming = tmp_path / "in"
    incoming.mkdir()
    got: list[list[str]] = []
    clock = ManualClock(0)
    ssc = StreamingContext(connect_session, 1, clock=clock)
    ssc.textFileStream(str(incoming)).foreachRDD(lambda rdd: got.append(sorted(rdd.collect())))
    staged = tmp_path / "staged.txt"
    staged.write_text("one\ntwo\n")
    os.utime(staged, (0.5, 0.5))  # modified at 500 ms on the manual clock: new in the batch of 1000 ms
    os.replace(staged, incoming / "a.txt")
    assert run_dstream_batches(ssc, clock, 2) == []
    assert got[0] == ["one", "two"]
    assert all(batch == [] for batch in got[1:])


def test_pprint_prints_as_on_classic_spark(connect_session: Any, spark_context: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """pprint's text on Connect is the classic engine's, batch for batch."""
    def program(ssc: StreamingContext) -> None:
        ssc.queueStream([list(range(15)), [], ["x"]]).pprint(10)

    assert _run(spark_context, program, 3) == []
    classic = capsys.readouterr().out
    assert _run(connect_session, program, 3) == []
    assert capsys.readouterr().out == classic
    assert "..." in classic


def test_save_as_text_files_writes_what_classic_spark_writes(connect_session: Any, spark_context: Any, tmp_path: Path) -> None:
    """saveAsTextFiles on Connect leaves, per batch, the lines the classic engine saves."""
    def program(prefix: Path) -> Any:
        def build(ssc: StreamingContext) -> None:
            ssc.queueStream([["a", "b", "c"], ["d"]]).saveAsTextFiles(str(prefix))
        return build

    assert _run(spark_context, program(tmp_path / "classic" / "out"), 2) == []
    assert _run(connect_session, program(tmp_path / "connect" / "out"), 2) == []

    def lines(root: Path) -> dict[str, list[str]]:
        return {d.name: sorted(line for f in d.glob("part-*") for line in f.read_text().splitlines())
                for d in sorted(root.iterdir()) if d.is_dir()}

    assert lines(tmp_path / "connect") == lines(tmp_path / "classic")
    assert lines(tmp_path / "classic") == {"out-1000": ["a", "b", "c"], "out-2000": ["d"]}


@pytest.mark.anyio
async def test_received_records_are_sent_with_their_batch(connect_session: Any) -> None:
    """An async source's records, received in this process, reach the Connect server with the batch that takes them."""
    import anyio

    from tests.support import advance, wait_until

    got: list[list[int]] = []
    received_all = False

    async def source() -> Any:
        nonlocal received_all
        for item in range(5):
            yield item
        received_all = True  # the receiver asked for a sixth item: the fifth is stored
        await anyio.sleep_forever()

    clock = ManualClock(0)
    async with StreamingContext(connect_session, 1, clock=clock) as ssc:
        ssc.asyncIterableStream(source).foreachRDD(lambda rdd: got.append(sorted(rdd.collect())))
        await ssc.start_async()
        await wait_until(lambda: received_all)
        await advance(ssc.runtime, clock, 1000, times=2)
        await ssc.stop_async()
    assert got == [[0, 1, 2, 3, 4], []]


_NEEDS_JVM = "is not supported on Spark Connect: it needs a SparkContext in the driver, and a Connect session has none; "


def test_a_receiver_on_an_executor_is_refused(connect_session: Any) -> None:
    """socketTextStream(placement="executor") is refused on Connect, naming the driver placement."""
    from streaming.spark import ConnectNotSupportedError

    ssc = StreamingContext(connect_session, 1)
    with pytest.raises(ConnectNotSupportedError) as raised:
        ssc.socketTextStream("localhost", 9999, placement="executor")
    assert str(raised.value) == ("a receiver on an executor (placement='executor') " + _NEEDS_JVM
                                 + "use placement='driver': the lines are received here and sent with each batch")
