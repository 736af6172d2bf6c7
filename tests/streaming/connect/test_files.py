"""File inputs on a Spark Connect session against classic Spark: textFile, textFileStream and binaryRecordsStream
give the classic engine's records, partitions and order, malformed UTF-8 and odd line ends included.

Each stream runs a few batches on a manual clock (no sleeps), on the test run's Connect session and on the shared
classic SparkContext, over the same directory.
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

ODD_TEXT = {
    "a.txt": b"one\r\ntwo\n\nthree",  # \r\n, an empty line, a last line without its end
    "b.txt": b"bad \xff\xfe utf8\ntruncated \xe2\x82\rlast\n",  # malformed UTF-8, a lone \r
    "c.txt": "\u00e9\u2028x\x0by\r\n".encode(),  # U+2028 and \x0b stay in the line
}


def _put(directory: Path, files: dict[str, bytes]) -> None:
    """Move ``files`` into ``directory``, modified at 500 ms on the manual clock (new in the batch of 1000 ms)."""
    directory.mkdir(exist_ok=True)
    for name, data in files.items():
        staged = directory.parent / f"staged-{name}"
        staged.write_bytes(data)
        os.utime(staged, (0.5, 0.5))
        os.replace(staged, directory / name)


def _batches(spark: Any, make: Any, batches: int = 2) -> tuple[list[Any], list[BaseException]]:
    """The glom() of each batch of the stream ``make(ssc)`` makes, and the errors the run reported."""
    got: list[Any] = []
    clock = ManualClock(0)
    ssc = StreamingContext(spark, 1, clock=clock)
    make(ssc).foreachRDD(lambda rdd: got.append(rdd.glom().collect()))
    return got, run_dstream_batches(ssc, clock, batches)


def test_text_file_decodes_malformed_utf8_as_classic_spark(frame_context: Any, spark_context: Any, tmp_path: Path) -> None:
    """FrameContext.textFile gives sc.textFile's lines: malformed bytes as U+FFFD, lines split at \\n, \\r\\n, \\r only."""
    _put(tmp_path / "in", ODD_TEXT)
    for name in ODD_TEXT:
        path = str(tmp_path / "in" / name)
        assert frame_context.textFile(path, 1).collect() == spark_context.textFile(path, 1).collect()
    assert "bad \ufffd\ufffd utf8" in frame_context.textFile(str(tmp_path / "in" / "b.txt"), 1).collect()


def test_text_file_stream_reads_malformed_utf8_as_classic_spark(connect_session: Any, spark_context: Any,
                                                                tmp_path: Path) -> None:
    """A textFileStream batch with a non-UTF-8 byte runs on Connect and gives the classic engine's partitions."""
    incoming = tmp_path / "in"
    # One file: two files' partitions in one batch are a union, which Spark 4.1's union of single-partition
    # children (spark.sql.unionOutputPartitioning) runs as one task on Connect, a difference of its own.
    _put(incoming, {"odd.txt": b"\n".join(ODD_TEXT.values())})
    classic, classic_errors = _batches(spark_context, lambda ssc: ssc.textFileStream(str(incoming)))
    connect, connect_errors = _batches(connect_session, lambda ssc: ssc.textFileStream(str(incoming)))
    assert classic_errors == connect_errors == []
    assert connect == classic
    assert "bad \ufffd\ufffd utf8" in classic[0][0]


def test_a_new_file_named_with_an_underscore_fails_its_batch_as_on_classic(connect_session: Any, spark_context: Any,
                                                                          tmp_path: Path) -> None:
    """A watched directory's ``_part`` fails the batch on both engines (lane L3: Spark SQL's reader skipped it on Connect,
    the batch ran empty and the file's lines were lost without a word), naming the file."""
    incoming = tmp_path / "in"
    _put(incoming, {"_part": b"lost?\n"})
    classic, classic_errors = _batches(spark_context, lambda ssc: ssc.textFileStream(str(incoming)))
    connect, connect_errors = _batches(connect_session, lambda ssc: ssc.textFileStream(str(incoming)))
    assert classic == connect == [[]]  # the batch after it runs, empty: the file is not selected again
    assert len(classic_errors) == len(connect_errors) == 1
    assert f"Input path does not exist: file:{incoming / '_part'}" in str(classic_errors[0])
    assert f"Input path does not exist: file:{incoming / '_part'}" in str(connect_errors[0])


@pytest.mark.parametrize("uri", [False, True], ids=["path", "file-uri"])
def test_binary_records_stream_reads_a_local_directory(connect_session: Any, spark_context: Any, tmp_path: Path,
                                                       uri: bool) -> None:
    """binaryRecordsStream on a local path or file: URI gives the classic engine's fixed-length records."""
    incoming = tmp_path / "bin"
    _put(incoming, {"r.bin": b"abcdefgh", "s.bin": bytes(range(12))})
    directory = incoming.as_uri() if uri else str(incoming)
    classic, classic_errors = _batches(spark_context, lambda ssc: ssc.binaryRecordsStream(directory, 4))
    connect, connect_errors = _batches(connect_session, lambda ssc: ssc.binaryRecordsStream(directory, 4))
    assert classic_errors == connect_errors == []
    assert sorted(connect[0]) == sorted(classic[0])  # one partition per file
    assert sorted(classic[0]) == [[b"\x00\x01\x02\x03", b"\x04\x05\x06\x07", b"\x08\t\n\x0b"], [b"abcd", b"efgh"]]
    assert connect[1:] == classic[1:] == [[]]
