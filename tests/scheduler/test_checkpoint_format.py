"""Checkpoint file formats: Spark's offsets/commits/metadata text, atomic write-once files, listing, purge, damage."""

from __future__ import annotations

import errno
import json
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import (
    CommitLog,
    CommitMetadata,
    CorruptCheckpointError,
    OffsetSeq,
    OffsetSeqLog,
    OffsetSeqMetadata,
    StreamingError,
    UnsupportedLogVersionError,
    parse_batch_file_name,
    parse_long,
    write_new_file,
)
from scheduler.query._metadata_log import (
    parse_commit,
    parse_offset_seq,
    parse_query_metadata,
    serialize_commit,
    serialize_offset_seq,
    serialize_query_metadata,
)
from tests.anyio_support import raises_exactly

SPARK_EXAMPLE = (
    "v1\n"
    '{"batchWatermarkMs":0,"batchTimestampMs":1700000000123,"conf":{"spark.sql.streaming.stateStore.providerClass":'
    '"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider","spark.sql.shuffle.partitions":"200"}}\n'
    '{"logOffset":0}'
)

DAMAGED = ("the file was damaged after it was written (aiodstream never leaves a partly written entry): restore it from a copy, "
           "or start over with a new checkpoint directory")


def test_offsets_entry_text_is_sparks_format() -> None:
    """An offsets entry is 'v1', the metadata JSON with Spark's keys in order, one line per source ('-' for none), no final newline."""
    entry = OffsetSeq(('{"files":2,"lastFile":"b"}', None, "5"), OffsetSeqMetadata(0, 1500, {"k": "v"}))
    assert serialize_offset_seq(entry) == (
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1500,"conf":{"k":"v"}}\n{"files":2,"lastFile":"b"}\n-\n5'
    )


def test_commit_and_metadata_text_are_sparks_format() -> None:
    """A commit is 'v1' and nextBatchWatermarkMs; metadata is the compact id object; neither ends with a newline."""
    assert serialize_commit(CommitMetadata(0)) == 'v1\n{"nextBatchWatermarkMs":0}'
    qid = uuid.UUID("6a5f0f4e-1b7c-4c1e-9a53-0d7f8d1f2e3a")
    assert serialize_query_metadata(qid) == '{"id":"6a5f0f4e-1b7c-4c1e-9a53-0d7f8d1f2e3a"}'
    assert parse_query_metadata(serialize_query_metadata(qid), "m") == qid


def test_a_spark_written_offsets_entry_parses() -> None:
    """The offsets entry of a Spark 3.5 file-source query parses, conf and all."""
    entry = parse_offset_seq(SPARK_EXAMPLE, "offsets/0")
    assert entry.offsets == ('{"logOffset":0}',)
    assert entry.metadata is not None
    assert entry.metadata.batch_timestamp_ms == 1700000000123
    assert entry.metadata.conf["spark.sql.shuffle.partitions"] == "200"


def test_missing_commit_metadata_means_watermark_zero() -> None:
    """A commit entry with only the version line reads as watermark 0, as in Spark."""
    assert parse_commit("v1", "commits/0") == CommitMetadata(0)
    assert parse_commit('v1\n{"nextBatchWatermarkMs":7}', "commits/0") == CommitMetadata(7)


def test_an_empty_metadata_line_means_no_metadata() -> None:
    """Line 2 may be empty (Spark's continuous mode writes it so): the entry has no metadata."""
    assert parse_offset_seq("v1\n\n3", "offsets/1") == OffsetSeq(("3",), None)


json_scalars = st.one_of(st.integers(), st.text(max_size=10), st.booleans(), st.none())
offsets = st.one_of(
    st.none(),
    st.builds(lambda v: json.dumps(v, separators=(",", ":")), st.dictionaries(st.text(max_size=8), json_scalars, max_size=3)),
    st.integers(min_value=0).map(str),
)


@given(
    st.lists(offsets, max_size=4),
    st.integers(min_value=0, max_value=2**53),
    st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3),
)
def test_offsets_entries_round_trip(entry_offsets: list[str | None], stamp: int, conf: dict[str, str]) -> None:
    """Any offsets entry reads back equal to what was written."""
    entry = OffsetSeq(tuple(entry_offsets), OffsetSeqMetadata(0, stamp, conf))
    assert parse_offset_seq(serialize_offset_seq(entry), "x") == entry


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("", "the first line must be a log version such as 'v1', got ''"),
        ("1\n{}", "the first line must be a log version such as 'v1', got '1'"),
        ("v0\n{}", "the first line must be a log version such as 'v1', got 'v0'"),
        ("vx\n{}", "the first line must be a log version such as 'v1', got 'vx'"),
        ("v1", "it ends after the version line, before the batch metadata line"),
        ('v1\n{"batchWatermarkMs":0,"batchTi', "line 2 (the batch metadata) must be a JSON object, got "
         "'{\"batchWatermarkMs\":0,\"batchTi' (Unterminated string starting at: line 1 column 23 (char 22))"),
        ("v1\n[1]", "line 2 (the batch metadata) must be a JSON object, got '[1]'"),
        ('v1\n{"batchTimestampMs":"x"}', "the batch metadata field 'batchTimestampMs' must be an integer, got 'x'"),
        ('v1\n{"conf":{"a":1}}', "the batch metadata field 'conf' must map strings to strings, got {'a': 1}"),
        ('v1\n{}\n{"logOffset":', "line 3 must be a source offset (JSON, or '-' for none), got '{\"logOffset\":' (Expecting "
         "value: line 1 column 14 (char 13))"),
        ("v" + "1" * 4301 + "\n{}", f"the first line must be a log version such as 'v1', got {'v' + '1' * 59 + '...'!r}"),
        ("v12345678901\n{}", "the first line must be a log version such as 'v1', got 'v12345678901'"),
        ("v\u00b9\n{}", "the first line must be a log version such as 'v1', got 'v\u00b9'"),
        ("v1\n" + "[" * 100_000, f"line 2 (the batch metadata) must be a JSON object, got {'[' * 60 + '...'!r} (it is nested too deeply)"),
        ("v1\n\n" + '{"a":' * 100_000, "line 3 must be a source offset (JSON, or '-' for none), got "
         + repr(('{"a":' * 12)[:60] + "...") + " (it is nested too deeply)"),
        ('v1\n{"batchWatermarkMs":' + "9" * 30 + "}", "the batch metadata field 'batchWatermarkMs' must fit a Java long (Spark's "
         f"type for it), got {'9' * 30!r}"),
        ("v1\n{}\n5\n", None),
    ],
)
def test_damaged_offsets_entries_are_reported_with_their_path(text: str, what: str | None) -> None:
    """A damaged or truncated offsets entry raises CorruptCheckpointError naming the file and the fault (a final newline is tolerated)."""
    if what is None:
        assert parse_offset_seq(text, "/ck/offsets/4").offsets == ("5",)
        return
    with raises_exactly(CorruptCheckpointError, f"cannot read /ck/offsets/4: {what}; {DAMAGED}") as info:
        parse_offset_seq(text, "/ck/offsets/4")
    assert info.value.path == "/ck/offsets/4"
    assert isinstance(info.value, (StreamingError, ValueError))


def test_a_newer_log_version_is_refused_with_the_fix() -> None:
    """An entry in format v2 raises UnsupportedLogVersionError (a CorruptCheckpointError) saying to upgrade."""
    message = ("cannot read /ck/commits/9: it is in log format v2, and this version of aiodstream reads formats up to v1; "
               "it was written by a newer version: upgrade aiodstream to read this checkpoint")
    with raises_exactly(UnsupportedLogVersionError, message):
        parse_commit('v2\n{"nextBatchWatermarkMs":0}', "/ck/commits/9")
    with pytest.raises(CorruptCheckpointError):
        parse_offset_seq("v2\n{}\n1", "/ck/offsets/9")


def test_damaged_commits_and_metadata_are_reported() -> None:
    """Commit entries with extra lines and metadata without a UUID id are corrupt, with exact messages."""
    with raises_exactly(CorruptCheckpointError, f"cannot read c: a commit entry has at most 2 lines, this one has 3; {DAMAGED}"):
        parse_commit("v1\n{}\n{}", "c")
    with raises_exactly(CorruptCheckpointError, "cannot read m: the query metadata must be a JSON object holding the query id, "
                        f"such as {{\"id\":\"<uuid>\"}}, got '{{\"id\":\"nope\"}}'; {DAMAGED}"):
        parse_query_metadata('{"id":"nope"}', "m")
    with raises_exactly(CorruptCheckpointError, "cannot read m: the query metadata must be a JSON object holding the query id, "
                        f"such as {{\"id\":\"<uuid>\"}}, got {'[' * 60 + '...'!r} (it is nested too deeply); {DAMAGED}"):
        parse_query_metadata("[" * 100_000, "m")
    with raises_exactly(CorruptCheckpointError, f"cannot read c: line 2 (the commit metadata) must be a JSON object, got "
                        f"{'[' * 60 + '...'!r} (it is nested too deeply); {DAMAGED}"):
        parse_commit("v1\n" + "[" * 100_000, "c")


# -- files on disk --


def test_written_entries_have_exact_bytes(tmp_path: Path) -> None:
    """The log writes exactly the format's bytes, one file per batch id."""
    log = OffsetSeqLog(tmp_path / "offsets")
    assert log.add(0, OffsetSeq(("1",), OffsetSeqMetadata(0, 1000, {})))
    assert (tmp_path / "offsets" / "0").read_bytes() == b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1000,"conf":{}}\n1'
    commits = CommitLog(tmp_path / "commits")
    assert commits.add(0, CommitMetadata())
    assert (tmp_path / "commits" / "0").read_bytes() == b'v1\n{"nextBatchWatermarkMs":0}'


def test_an_entry_is_never_overwritten(tmp_path: Path) -> None:
    """Adding an existing batch id returns False and leaves the first entry as it was."""
    log = CommitLog(tmp_path)
    assert log.add(3, CommitMetadata(1))
    assert not log.add(3, CommitMetadata(2))
    assert log.get(3) == CommitMetadata(1)
    assert [p.name for p in tmp_path.iterdir()] == ["3"]  # no temporary file left behind


def test_a_half_written_temp_file_is_never_read(tmp_path: Path) -> None:
    """A killed writer's hidden temp file is invisible: not listed, not read, not the latest; the next add succeeds."""
    log = CommitLog(tmp_path)
    log.add(1, CommitMetadata())
    (tmp_path / ".2.0123abcd.tmp").write_bytes(b"v1\n{\"nextBatchWat")
    assert log.batch_ids() == [1]
    assert log.get(2) is None
    assert log.get_latest() == (1, CommitMetadata())
    assert log.add(2, CommitMetadata(5))
    assert log.get(2) == CommitMetadata(5)
    assert log.remove_temp_files() == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2"]


def test_only_canonical_batch_ids_are_listed(tmp_path: Path) -> None:
    """Names like '007', '.0.crc', 'abc' or an Arabic-Indic digit are not batch files; '0' and '12' are."""
    for name in ["0", "12", "007", ".0.crc", "abc", "\u0661", "3.bak"]:
        (tmp_path / name).write_text("v1")
    assert CommitLog(tmp_path).batch_ids() == [0, 12]


def test_reading_a_non_utf8_entry_is_reported(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 are reported as damage with the path."""
    (tmp_path / "0").write_bytes(b"v1\n\xff\xfe")
    with pytest.raises(CorruptCheckpointError, match=r"^cannot read .*/0: it is not UTF-8 text"):
        CommitLog(tmp_path).get(0)


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If linking the temp file fails, the error propagates and neither the entry nor the temp file remains."""

    def broken_link(src: str, dst: str) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "link", broken_link)
    with pytest.raises(OSError, match="I/O error"):
        write_new_file(tmp_path / "5", b"data")
    assert list(tmp_path.iterdir()) == []


def test_filesystems_without_hard_links_fall_back_to_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where links are not permitted, the file is renamed into place, still never replacing an existing one."""

    def no_links(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    assert write_new_file(tmp_path / "a", b"1")
    assert not write_new_file(tmp_path / "a", b"2")
    assert (tmp_path / "a").read_bytes() == b"1"
    assert [p.name for p in tmp_path.iterdir()] == ["a"]


def test_purge_deletes_below_the_threshold_only(tmp_path: Path) -> None:
    """purge(t) deletes entries with ids below t and reports them; missing ids are skipped."""
    log = CommitLog(tmp_path)
    for i in range(6):
        log.add(i, CommitMetadata())
    assert log.purge(3) == [0, 1, 2]
    assert log.batch_ids() == [3, 4, 5]
    assert log.purge(5, known=[1, 3, 4]) == [3, 4]
    assert log.batch_ids() == [5]


@pytest.mark.parametrize(
    ("text", "long", "batch_id"),
    [
        ("0", 0, 0), ("17", 17, 17), ("-5", -5, None), ("007", 7, None), ("-0", 0, None),
        ("9223372036854775807", 2**63 - 1, 2**63 - 1), ("9223372036854775808", None, None), ("-9223372036854775808", -(2**63), None),
        ("\u00b2", None, None), ("5\u00b2", None, None), ("\u0663", None, None), ("\uff11", None, None),
        ("1" * 4400, None, None), (" 1", None, None), ("+1", None, None), ("", None, None), ("1.0", None, None),
    ],
)
def test_numbers_read_from_checkpoints_are_ascii_longs(text: str, long: int | None, batch_id: int | None) -> None:
    """parse_long takes an optional '-' and ASCII digits within a Java long; batch file names are canonical and non-negative."""
    assert parse_long(text) == long
    assert parse_batch_file_name(text) == batch_id
