"""Replayable sources (ListSource, DirectorySource) and the batch-time-idempotent FileSink."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from scheduler import CheckpointError, InputInfoTracker, ReplayError, Time
from streaming import Batch, DirectorySource, FileSink, ListSource, Pipeline, ReplayableSource
from streaming.inputs._fsspec_listing import TextLines
from streaming.pipeline import read_lines
from tests.anyio_support import raises_exactly
from tests.support import capture_events


def put(directory: Path, name: str, *lines: str) -> None:
    """Create a file atomically, as a producer should: hidden name first, then rename."""
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".{name}.part"
    temp.write_text("".join(line + "\n" for line in lines))
    os.rename(temp, directory / name)


@pytest.mark.anyio
async def test_both_sources_are_replayable_and_functions_are_not() -> None:
    """ListSource and DirectorySource satisfy ReplayableSource; a plain function does not."""
    assert isinstance(ListSource(), ReplayableSource)
    assert isinstance(DirectorySource("x"), ReplayableSource)
    assert not isinstance(lambda t: [], ReplayableSource)


@pytest.mark.anyio
async def test_list_source_offsets_count_records() -> None:
    """The offset is the record count as JSON; plans respect max_per_batch; reads are exact slices."""
    src = ListSource(["a", "b", "c"], max_per_batch=2)
    assert await src.latest_offset() == "3"
    assert await src.plan_offset(None, "3") == "2"
    assert await src.plan_offset("2", "3") == "3"
    assert await src.plan_offset("3", "3") == "3"
    assert await src.read(None, "2") == ["a", "b"]
    assert await src.read("2", "3") == ["c"]
    assert await ListSource().latest_offset() is None
    assert await ListSource().plan_offset(None, None) is None


@pytest.mark.anyio
async def test_list_source_cannot_replay_records_it_no_longer_holds() -> None:
    """Reading beyond the records held (rebuilt with fewer after a restart) is a ReplayError."""
    message = ("ListSource cannot replay records 2..5: it holds 3; after a restart a ListSource must hold at least the "
               "records it held before, in the same order")
    with raises_exactly(ReplayError, message):
        await ListSource([1, 2, 3]).read("2", "5")


@pytest.mark.anyio
async def test_directory_source_takes_files_in_name_order(tmp_path: Path) -> None:
    """Files are taken in name order past the last one taken; hidden and underscore files are ignored."""
    src = DirectorySource(tmp_path, max_files_per_batch=2)
    assert await src.latest_offset() is None
    put(tmp_path, "0001.txt", "a", "b")
    put(tmp_path, "0002.txt", "c")
    put(tmp_path, "0003.txt", "d")
    (tmp_path / ".0004.txt.part").write_text("half")
    (tmp_path / "_SUCCESS").write_text("")
    latest = await src.latest_offset()
    assert latest == '{"files":3,"lastFile":"0003.txt"}'
    first = await src.plan_offset(None, latest)
    assert first == '{"files":2,"lastFile":"0002.txt"}'
    assert await src.read(None, first) == ["a", "b", "c"]
    second = await src.plan_offset(first, latest)
    assert await src.read(first, second) == ["d"]
    assert await src.plan_offset(second, latest) == second


@pytest.mark.anyio
async def test_a_missing_directory_is_empty(tmp_path: Path) -> None:
    """A directory that does not exist yet has no input."""
    assert await DirectorySource(tmp_path / "later").latest_offset() is None


@pytest.mark.anyio
async def test_a_missing_directory_is_warned_about_once_while_it_is_missing(tmp_path: Path) -> None:
    """One warning while the directory is missing (a typo reads nothing), none once it exists, one more if it goes."""
    src = DirectorySource(tmp_path / "later", name="in")
    warning = {"event": "the input directory does not exist (yet): nothing to read until it is made",
               "component": "DirectorySource", "source": "in", "path": str(tmp_path / "later"), "log_level": "warning"}
    with capture_events(logging.WARNING) as events:
        assert await src.latest_offset() is None
        assert await src.latest_offset() is None
        assert events == [warning]
        put(tmp_path / "later", "0001.txt", "a")
        assert await src.latest_offset() == '{"files":1,"lastFile":"0001.txt"}'
        (tmp_path / "later" / "0001.txt").unlink()
        (tmp_path / "later").rmdir()
        assert await src.latest_offset() is None
    assert events == [warning, warning]


@pytest.mark.parametrize(("pattern", "directory", "character"), [("in/*.txt", "in", "*"), ("in/2024-0?", "in", "?"),
                                                                  ("[ab]/x", ".", "[")])
def test_a_glob_pattern_is_refused(tmp_path: Path, pattern: str, directory: str, character: str) -> None:
    """A glob names no directory (it would read nothing, silently): refused, naming the directory to pass."""
    with raises_exactly(ValueError, f"DirectorySource reads the files of one directory, and {pattern!r} is a glob pattern "
                        f"(it holds {character!r}) rather than a directory: pass the directory, e.g. "
                        f"DirectorySource({directory!r}), with a reader= that returns no records for the files to leave out"):
        DirectorySource(pattern)


@pytest.mark.anyio
async def test_an_existing_directory_named_like_a_glob_is_read(tmp_path: Path) -> None:
    """A directory that exists under a name with a glob character is that directory."""
    put(tmp_path / "data[1]", "0001.txt", "a")
    src = DirectorySource(tmp_path / "data[1]")
    assert await src.read(None, await src.latest_offset()) == ["a"]


@pytest.mark.anyio
async def test_a_file_out_of_order_is_an_error_not_a_loss(tmp_path: Path) -> None:
    """A new file sorting before files already taken raises ReplayError instead of being skipped."""
    src = DirectorySource(tmp_path, name="in")
    put(tmp_path, "b.txt", "1")
    taken = await src.plan_offset(None, await src.latest_offset())
    put(tmp_path, "a.txt", "late")
    message = ("in: 1 file(s) sorting at or before 'b.txt' appeared after that file was taken into a batch (1 file(s) were "
               "taken up to it); files are taken in name order, so every new file must sort after all the files taken: name "
               "them by a zero-padded sequence number or timestamp, and rename a late file to sort last or move it out")
    with raises_exactly(ReplayError, message):
        await src.plan_offset(taken, await src.latest_offset())


@pytest.mark.anyio
async def test_a_taken_file_that_disappears_is_an_error(tmp_path: Path) -> None:
    """Removing a file of a batch not committed yet makes its replay impossible: ReplayError."""
    src = DirectorySource(tmp_path, name="in")
    put(tmp_path, "a.txt", "1")
    taken = await src.plan_offset(None, await src.latest_offset())
    (tmp_path / "a.txt").unlink()
    with pytest.raises(ReplayError, match=r"^in: 1 file\(s\) up to 'a.txt' were removed after being taken into a batch that is not "
                                          "committed yet; a restart reads"):
        await src.read(None, taken)


@pytest.mark.anyio
async def test_a_file_name_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    """A file whose name is not valid UTF-8 cannot be logged: a ReplayError names it, the source and the fix."""
    put(tmp_path, "0001.txt", "one")
    put(tmp_path, os.fsdecode(b"0002-caf\xe9.txt"), "two")
    src = DirectorySource(tmp_path, name="in")
    message = (f"in: the file name b'0002-caf\\xe9.txt' in {str(tmp_path)!r} is not valid UTF-8, so the offsets log cannot "
               "record it; rename the file to a UTF-8 name (sorting after the files already taken) or move it out of the "
               "directory")
    with raises_exactly(ReplayError, message):
        await src.latest_offset()


@pytest.mark.anyio
async def test_a_custom_reader_turns_files_into_records(tmp_path: Path) -> None:
    """reader= maps each file to its records."""
    put(tmp_path, "1", "x")
    src = DirectorySource(tmp_path, reader=lambda p: [p.name])
    assert await src.read(None, await src.latest_offset()) == ["1"]


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        ("a\x0cb\nc\u2028d\ne\x85f\ng\x1eh\x0bi\nlast".encode(), ["a\x0cb", "c\u2028d", "e\x85f", "g\x1eh\x0bi", "last"]),
        (b"\xef\xbb\xbfheader,x\r\nrow1\rrow2\n", ["header,x", "row1", "row2"]),
        (b"caf\xe9\nok\n", ["caf\ufffd", "ok"]),
        (b"one\n\n", ["one", ""]),
        (b"", []),
    ],
)
def test_the_default_reader_reads_lines_as_sparks_text_source(tmp_path: Path, data: bytes, lines: list[str]) -> None:
    """read_lines splits at \\n, \\r\\n and \\r only, skips a BOM and reads a bad byte as U+FFFD, as textFileStream decodes."""
    (tmp_path / "f").write_bytes(data)
    assert read_lines(tmp_path / "f") == lines == TextLines()(data, "f")


@pytest.mark.anyio
async def test_a_file_the_reader_cannot_read_is_named(tmp_path: Path) -> None:
    """A reader's exception fails the read as a ReplayError naming the file and the batch, caused by the original."""
    put(tmp_path, "0001.txt", "x")
    put(tmp_path, "0002.txt", "y")

    def reader(path: Path) -> list[str]:
        raise ValueError("not a record")

    src = DirectorySource(tmp_path, reader=reader, name="in")
    message = (f"in: cannot read '{tmp_path}/0001.txt', taken into the batch up to '0002.txt': ValueError: not a record; "
               "the batch reads it again at every restart until it is committed, so make the file readable or pass a "
               "reader that accepts it")
    with raises_exactly(ReplayError, message) as caught:
        await src.read(None, await src.latest_offset())
    assert isinstance(caught.value.__cause__, ValueError)


@pytest.mark.anyio
async def test_a_pipeline_reads_replayable_sources_without_an_engine_planning() -> None:
    """Without a tracker a pipeline reads what is new from each replayable source, within read limits."""
    src = ListSource([1, 2, 3], max_per_batch=2)
    pipeline = Pipeline()
    assert pipeline.add_source(src) == "ListSource"
    pipeline.add_output(lambda b: None)
    pipeline.start(Time(0), InputInfoTracker())
    jobs = await pipeline.generate_jobs(Time(1000))
    assert jobs[0].func.args[0].inputs == {"ListSource": [1, 2]}  # type: ignore[attr-defined]
    jobs = await pipeline.generate_jobs(Time(2000))
    assert jobs[0].func.args[0].inputs == {"ListSource": [3]}  # type: ignore[attr-defined]


# -- FileSink --


def batch(ms: int, *records: object) -> Batch:
    return Batch(Time(ms), {"in": list(records)})


def test_file_sink_writes_one_file_per_batch_time(tmp_path: Path) -> None:
    """Each batch's records become the lines of <prefix><time><suffix>; no temp file is left."""
    sink = FileSink(tmp_path / "out")
    sink(batch(1000, "a", 1))
    assert (tmp_path / "out" / "batch-1000.txt").read_text() == "a\n1\n"
    assert sink.batch_times() == [Time(1000)]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["batch-1000.txt"]


def test_file_sink_skips_a_batch_time_it_already_wrote(tmp_path: Path) -> None:
    """A re-run batch (same time) is skipped, leaving the first write untouched."""
    sink = FileSink(tmp_path)
    sink(batch(1000, "a"))
    sink(batch(1000, "changed"))
    assert (tmp_path / "batch-1000.txt").read_text() == "a\n"
    assert (sink.written, sink.skipped) == (1, 1)


def test_file_sink_writes_nothing_for_an_empty_batch_unless_asked(tmp_path: Path) -> None:
    """An empty batch writes no file by default, and an empty file with skip_empty=False."""
    FileSink(tmp_path)(batch(1000))
    assert list(tmp_path.iterdir()) == []
    FileSink(tmp_path, skip_empty=False)(batch(1000))
    assert (tmp_path / "batch-1000.txt").read_text() == ""


def test_file_sink_ignores_a_killed_writers_temp_file(tmp_path: Path) -> None:
    """A temp file left by a killed run does not count as the batch's file: the re-run writes it."""
    (tmp_path / ".batch-1000.txt.dead.tmp").write_text("partial")
    sink = FileSink(tmp_path)
    sink(batch(1000, "x"))
    assert (tmp_path / "batch-1000.txt").read_text() == "x\n"
    assert sink.batch_times() == [Time(1000)]


@pytest.mark.anyio
@pytest.mark.parametrize("offset", ["[" * 100_000, "1e999", '"5"', "-1", '{"files":1}', "{"])
async def test_an_offset_another_source_wrote_or_a_hand_edit_is_a_checkpoint_error(tmp_path: Path, offset: str) -> None:
    """An offset a source cannot read (malformed, nested past the recursion limit, another shape) names the source."""
    list_rule = 'a count of records, such as "5"'
    with raises_exactly(CheckpointError, f"ListSource: the offsets log holds {offset!r:.80} for this source, which is not "
                        f"{list_rule}; the log was written by another source or edited by hand: use a new checkpoint directory"):
        await ListSource(["a"]).plan_offset(offset, "1")
    directory = DirectorySource(tmp_path, name="files")
    with raises_exactly(CheckpointError, f"files: the offsets log holds {offset!r:.80} for this source, which is not "
                        '{"files":N,"lastFile":"name"}; the log was written by another source or edited by hand: use a new '
                        "checkpoint directory"):
        await directory.read(offset, offset)
