"""The per-input logs of a checkpointed StreamingContext: offsets, file-selection entries, receiver blocks, descriptors.

No Spark: these are files on disk, and every damaged one must be reported with its path.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import pytest

from scheduler import (
    BatchGrid,
    Checkpoint,
    CheckpointError,
    CommitMetadata,
    CorruptCheckpointError,
    Milliseconds,
    OffsetSeq,
    OffsetSeqMetadata,
    Time,
)
from streaming.recovery import (
    BLOCK_HEADER,
    BLOCK_HEADER_V1,
    BlockLog,
    FileSelection,
    FileSelectionLog,
    InputDescriptor,
    format_log_offset,
    parse_log_offset,
)
from tests.anyio_support import raises_exactly


def test_log_offsets_are_structured_streamings_file_source_offsets() -> None:
    """{"logOffset":N} both ways; None is before the first entry."""
    assert format_log_offset(7) == '{"logOffset":7}'
    assert parse_log_offset(format_log_offset(7), input_name="x") == 7
    assert parse_log_offset(None, input_name="x") == -1


@pytest.mark.parametrize("offset", ['"5"', "5", '{"files":1}', '{"logOffset":-1}', '{"logOffset":true}', "not json"])
def test_an_offset_of_another_kind_of_input_is_a_checkpoint_error_naming_the_input(offset: str) -> None:
    """A queue's "5" (or anything else) where a log offset belongs means the program's inputs changed."""
    with pytest.raises(CheckpointError, match=r"^Socket stream \[0\]: the offsets log holds .* use a new checkpoint directory"):
        parse_log_offset(offset, input_name="Socket stream [0]")


def test_file_selection_entries_round_trip_in_spark_s_format(tmp_path: Path) -> None:
    """A 'v1' line then one JSON object per file, as FileStreamSourceLog writes them; write-once."""
    log = FileSelectionLog(tmp_path)
    files = FileSelection([("file:/d/a.txt", 1000), ("file:/d/b.txt", 1500)])
    assert log.add(0, files)
    assert not log.add(0, FileSelection())  # never overwritten
    lines = (tmp_path / "0").read_text().splitlines()
    assert lines[0] == "v1" and json.loads(lines[2]) == {"path": "file:/d/b.txt", "timestamp": 1500, "action": "add"}
    assert log.get(0) == files


@pytest.mark.parametrize("text", ["v2\n", "v1\n{\"path\": 1}\n", "v1\n{\"timestamp\": 5}\n", "v1\nnot json\n", "v1",
                                  "v1\n" + "[" * 100_000 + "\n", 'v1\n{"path":"a","timestamp":Infinity}\n'])
def test_a_damaged_file_selection_entry_is_reported_with_its_path(tmp_path: Path, text: str) -> None:
    """Wrong version, a record without path or timestamp, bad or too deeply nested JSON, a truncated entry: CorruptCheckpointError."""
    (tmp_path / "3").write_text(text)
    with pytest.raises(CorruptCheckpointError) as info:
        FileSelectionLog(tmp_path).get(3)
    assert info.value.path == str(tmp_path / "3") and str(tmp_path / "3") in str(info.value)


@pytest.mark.parametrize("offset", ["[" * 100_000, '{"logOffset":' + "9" * 30 + "}"])
def test_a_nested_or_huge_log_offset_is_refused_as_another_input_s(offset: str) -> None:
    """An offset nested past the recursion limit, or past a Java long, is a CheckpointError naming the input, no traceback."""
    with pytest.raises(CheckpointError, match=r"^input 0: the offsets log holds .* which is not a \{\"logOffset\":N\} offset"):
        parse_log_offset(offset, input_name="input 0")


def test_a_nested_input_descriptor_is_a_damaged_file(tmp_path: Path) -> None:
    """A stream.json nested past the recursion limit is reported as damaged, with its path."""
    (tmp_path / "stream.json").write_text("[" * 100_000)
    with raises_exactly(CorruptCheckpointError, f"{tmp_path}/stream.json is damaged (it is nested too deeply); it describes "
                        "an input of the checkpoint"):
        InputDescriptor(tmp_path).ensure({"kind": "x"}, compare=("kind",))


def test_receiver_blocks_round_trip_and_are_written_once(tmp_path: Path) -> None:
    """A block is a header line and pickled records; writing an existing block means two writers."""
    log = BlockLog(tmp_path / "sources" / "0")
    log.write(0, ["a", "b"])
    log.write(1, [{"k": 1}])
    assert log.entries() == [0, 1]
    assert log.read(0) == ["a", "b"] and log.read(1) == [{"k": 1}]
    assert log.path_of(0).read_bytes().startswith(BLOCK_HEADER)
    with pytest.raises(CheckpointError, match="another context is receiving into the same checkpoint directory"):
        log.write(1, ["c"])
    assert log.read(1) == [{"k": 1}]
    assert log.purge(1) == [0] and log.entries() == [1]


def test_a_block_rewritten_after_a_failed_write_keeps_what_that_write_left(tmp_path: Path) -> None:
    """write_again: a missing block is written; one holding the first records (a write that failed after making it) is
    kept and their count returned; anything else is another writer's (CheckpointError)."""
    log = BlockLog(tmp_path)
    assert log.write_again(0, ["a", "b"]) == 2 and log.read(0) == ["a", "b"]
    log.write(1, ["c", "d"])
    assert log.write_again(1, ["c", "d", "e"]) == 2 and log.read(1) == ["c", "d"]
    with pytest.raises(CheckpointError, match=r"^cannot write .*1: it already exists, so another context is receiving"):
        log.write_again(1, ["x", "d", "e"])
    with pytest.raises(CheckpointError, match="another context is receiving into the same checkpoint directory"):
        log.write_again(1, ["c"])  # the block holds more than this write has


def checksummed(payload: bytes) -> bytes:
    """A current block's bytes around ``payload``: the header, the payload's SHA-256, the payload."""
    return BLOCK_HEADER + hashlib.sha256(payload).digest() + payload


@pytest.mark.parametrize("data", [b"garbage", checksummed(b"\x80\x05truncated"), checksummed(b"\x80\x04K\x05."),
                                  BLOCK_HEADER_V1 + b"\x80\x05truncated", BLOCK_HEADER_V1 + b"\x80\x04K\x05.",
                                  BLOCK_HEADER + b"short"])
def test_a_damaged_or_missing_block_is_reported_never_skipped(tmp_path: Path, data: bytes) -> None:
    """No header, unreadable pickle, or not a list of records: CorruptCheckpointError with the path."""
    log = BlockLog(tmp_path)
    Path(log.path_of(2)).write_bytes(data)
    with pytest.raises(CorruptCheckpointError) as info:
        log.read(2)
    assert info.value.path == str(tmp_path / "2")
    with pytest.raises(CorruptCheckpointError, match="is missing: a batch being replayed needs this block"):
        log.read(9)


def test_a_flipped_byte_in_a_block_fails_its_checksum_before_anything_is_unpickled(tmp_path: Path) -> None:
    """A block carries the SHA-256 of its records: one changed byte is a CorruptCheckpointError naming it, not other data."""
    log = BlockLog(tmp_path)
    log.write(0, ["amount=100", "amount=200"])
    path = Path(log.path_of(0))
    data = bytearray(path.read_bytes())
    data[data.index(b"amount=100") + len("amount=")] = ord("9")
    path.write_bytes(bytes(data))
    with raises_exactly(CorruptCheckpointError, f"{path} is damaged: its checksum does not match (a torn or altered write); "
                        "its records belong to a batch that must see them: restore the block from a copy, or start over "
                        "with a new checkpoint directory"):
        log.read(0)


def test_a_block_of_an_earlier_release_without_a_checksum_is_still_read(tmp_path: Path) -> None:
    """A v1 block (header line, pickled records) reads as before; new blocks are written as v2 with a checksum."""
    log = BlockLog(tmp_path)
    Path(log.path_of(0)).write_bytes(BLOCK_HEADER_V1 + pickle.dumps(["a", "b"]))
    assert log.read(0) == ["a", "b"]
    log.write(1, ["c"])
    assert Path(log.path_of(1)).read_bytes() == checksummed(pickle.dumps(["c"], protocol=pickle.HIGHEST_PROTOCOL))


def test_an_input_descriptor_is_written_once_and_checked_at_every_restart(tmp_path: Path) -> None:
    """The first start records the input; a later one with another kind or directory is refused, other keys may change."""
    descriptor = InputDescriptor(tmp_path / "ck" / "sources" / "0")
    first = {"kind": "file", "directory": "/in", "initialModTimeIgnoreThreshold": 5}
    assert descriptor.ensure(first, compare=("kind", "directory")) == first
    later = descriptor.ensure({"kind": "file", "directory": "/in", "initialModTimeIgnoreThreshold": 99}, compare=("kind", "directory"))
    assert later["initialModTimeIgnoreThreshold"] == 5  # the first run's threshold is kept
    with pytest.raises(CheckpointError, match=r"input 0 was '/in' \(directory\) when the checkpoint was written and is '/other' now"):
        descriptor.ensure({"kind": "file", "directory": "/other"}, compare=("kind", "directory"))
    Path(descriptor.path).write_text("{not json")
    with pytest.raises(CorruptCheckpointError, match=r"stream\.json is damaged"):
        descriptor.ensure(first, compare=("kind",))


def test_a_descriptor_lost_after_batches_were_logged_is_refused_not_written_anew(tmp_path: Path) -> None:
    """Missing stream.json with offsets entries in the checkpoint: a CheckpointError naming it and the JSON this run would
    record (a file stream's threshold to be set back), nothing written; with an empty (or no) offsets log it is a first
    start and the descriptor is written."""
    ck = Checkpoint(tmp_path / "ck")
    descriptor = InputDescriptor(tmp_path / "ck" / "sources" / "0")
    first = {"kind": "file", "directory": "/in"}
    assert descriptor.ensure(first, compare=("kind",), checkpoint=ck.root) == first  # no offsets log yet
    Path(descriptor.path).unlink()
    ck.offsets.add(0, OffsetSeq(('{"logOffset":0}',)))
    with raises_exactly(CheckpointError, f"cannot resume from {ck.root}: {descriptor.path} is missing, but the offsets log "
                        "already has batches of input 0; the file records what that input was when the checkpoint was "
                        "written (its kind, directory, a file stream's first modification-time threshold), and recording "
                        "this run's instead could take another input's offsets or skip files that arrived while the query "
                        "was down: restore it from a copy, or if this input is the one that wrote the checkpoint write what "
                        'this run would record, {"directory": "/other", "kind": "file"}, to '
                        f"{descriptor.path}, or start over with a new checkpoint directory") as info:
        descriptor.ensure({"kind": "file", "directory": "/other"}, compare=("kind",), checkpoint=ck.root)
    assert info.value.path == str(descriptor.path) and not Path(descriptor.path).exists()
    with pytest.raises(CheckpointError, match=r', "initialModTimeIgnoreThreshold": 5000, "kind": "file"\} with '
                                              r"initialModTimeIgnoreThreshold set back to its first start's, to "):
        descriptor.ensure({"kind": "file", "directory": "/in", "initialModTimeIgnoreThreshold": 5000}, compare=("kind",),
                          checkpoint=ck.root)


def test_checkpoint_recovery_lists_the_committed_batches_whose_input_is_still_logged(tmp_path: Path) -> None:
    """history: committed batches with the entry before them retained (batch 0 starts at nothing), ascending."""
    ck = Checkpoint(tmp_path)
    ck.open(Milliseconds(1000), 1)
    conf = BatchGrid(Time(0), Milliseconds(1000)).conf()
    for batch_id, end in enumerate(["1", "3", "4", "6"]):
        ck.offsets.add(batch_id, OffsetSeq((end,), OffsetSeqMetadata(0, (batch_id + 1) * 1000, conf)))
    for batch_id in (0, 1, 2):
        ck.commits.add(batch_id, CommitMetadata(0))
    state = ck.open(Milliseconds(1000), 1)
    assert [(b.batch_id, b.time, b.start, b.end) for b in state.history] == [
        (0, Time(1000), (None,), ("1",)), (1, Time(2000), ("1",), ("3",)), (2, Time(3000), ("3",), ("4",))]
    assert [b.batch_id for b in state.rerun] == [3]
    ck.purge(2)  # entries 0 and 1 go: batch 2 keeps no predecessor, so its range is unknown
    assert [b.batch_id for b in ck.open(Milliseconds(1000), 1).history] == []
