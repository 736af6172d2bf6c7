"""FileInputDStream's file selection rules, as pure functions (no Spark)."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from streaming.inputs import FileEntry, files_pending, is_new_file, list_local_files, select_new_files


def entry(name: str, mod: int, size: int = 1) -> FileEntry:
    return FileEntry(f"file:/d/{name}", mod, size)


def test_new_means_modified_in_the_window_not_hidden_and_not_taken() -> None:
    """Batch t takes files with threshold < mod <= t, skipping hidden names and files already taken."""
    entries = [entry("old", 100), entry("edge", 101), entry("now", 200), entry("future", 201),
               entry(".hidden", 150), entry("taken", 150)]
    chosen = select_new_files(entries, threshold_ms=100, time_ms=200, already_selected={"file:/d/taken"})
    assert [e.name for e in chosen] == ["edge", "now"]


def test_selected_files_come_out_in_path_order() -> None:
    """The batch's files are ordered by path, whatever the listing order."""
    chosen = select_new_files([entry("b", 5), entry("a", 6), entry("c", 4)], threshold_ms=0, time_ms=10, already_selected=())
    assert [e.name for e in chosen] == ["a", "b", "c"]


@given(st.lists(st.tuples(st.sampled_from(["a", "b", ".c", "d"]), st.integers(0, 30)), max_size=12),
       st.integers(0, 10), st.integers(0, 30))
def test_the_selection_is_exactly_the_rule(files: list[tuple[str, int]], threshold: int, time: int) -> None:
    """select_new_files keeps precisely the entries is_new_file accepts."""
    entries = [entry(f"{name}{i}", mod) for i, (name, mod) in enumerate(files)]
    chosen = select_new_files(entries, threshold_ms=threshold, time_ms=time, already_selected={"file:/d/a0"})
    expected = {e.path for e in entries if is_new_file(e, threshold_ms=threshold, time_ms=time, already_selected={"file:/d/a0"})}
    assert {e.path for e in chosen} == expected
    assert all(not e.name.startswith(".") and threshold < e.mod_time_ms <= time and e.path != "file:/d/a0" for e in chosen)


def test_a_file_is_pending_when_a_later_batch_will_take_it() -> None:
    """After batch 200 (threshold 100) at clock 300: a file modified in (200, 300] waits for a later batch; one it took, a
    taken one modified again, a hidden one, one past the window or dated ahead of the clock does not."""
    def pending(*entries: FileEntry, after: int | None = 200, taken: set[str] | None = None) -> bool:
        return files_pending(entries, threshold_ms=100, after_ms=after, now_ms=300, already_selected=taken or set())

    assert pending(entry("late", 250)) and pending(entry("edge", 300))
    assert not pending(entry("taken-now", 200))  # the batch took it
    assert not pending(entry("appended", 250), taken={"file:/d/appended"})  # taken once, modified in place since
    assert not pending(entry(".hidden", 250))
    assert not pending(entry("old", 100))  # beyond the remember window: no batch takes it
    assert not pending(entry("ahead", 301))  # dated ahead of the clock (a manual one, a skewed store): not there yet
    # A batch that does not read the stream (a window shorter than its slide) leaves every file to the next that does.
    assert pending(entry("unread", 150), after=None) and not pending(entry("ahead", 301), after=None)
    assert not pending(after=None)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", ".c", "d"]), st.integers(0, 30)), max_size=12),
       st.integers(0, 10), st.integers(0, 30), st.integers(0, 30))
def test_a_pending_file_is_one_a_later_batch_selects(files: list[tuple[str, int]], threshold: int, time: int, now: int) -> None:
    """Pending after batch ``time`` at clock ``now``: exactly when a batch at ``now`` would select a file batch ``time``
    did not."""
    entries = [entry(f"{name}{i}", mod) for i, (name, mod) in enumerate(files)]
    taken = {"file:/d/a0"}
    at_time = {e.path for e in select_new_files(entries, threshold_ms=threshold, time_ms=time, already_selected=taken)}
    later = {e.path for e in select_new_files(entries, threshold_ms=threshold, time_ms=now, already_selected=taken | at_time)}
    assert files_pending(entries, threshold_ms=threshold, after_ms=time, now_ms=now, already_selected=taken) == bool(later)


def test_local_listing_sees_files_with_millisecond_mod_times_and_skips_subdirectories(tmp_path: Path) -> None:
    """A local directory lists its plain files as file: paths, with mod time in ms and size."""
    (tmp_path / "sub").mkdir()
    f = tmp_path / "x.txt"
    f.write_text("hello\n")
    os.utime(f, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    assert list_local_files(str(tmp_path)) == [FileEntry(f"file:{f}", 1_700_000_000_123, 6)]


def test_local_listing_of_a_missing_directory_is_none(tmp_path: Path) -> None:
    """A directory that does not exist lists as None (the stream warns and takes no files)."""
    assert list_local_files(str(tmp_path / "nope")) is None


def test_a_glob_lists_every_matching_directory(tmp_path: Path) -> None:
    """A glob directory pattern lists the files of every directory it matches."""
    for d in ("in1", "in2", "other"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "f").write_text("x")
    listed = list_local_files(str(tmp_path / "in*"))
    assert listed is not None
    assert sorted(e.path for e in listed) == [f"file:{tmp_path}/in1/f", f"file:{tmp_path}/in2/f"]
