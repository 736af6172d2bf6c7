"""saveAsTextFiles on Spark Connect to a URI that is not this machine's disk: a replayed batch's save is skipped when
whole and redone when partial, as on a local path (the check made through fsspec in this process).

The URI is the test FTP server's (``tests.ftp``): the server's Python workers write the files through fsspec, this
process checks them through fsspec too. Also, without Spark: a partition's writer whose directory another task of the
same save creates at the same moment (fsspec's FTP client checks, then creates) still writes its file.
"""

from __future__ import annotations

from typing import Any

import pytest

from streaming.connect import FrameContext
from streaming.spark import save_text_files_once


def lines(root: Any) -> list[str]:
    """The lines of a saved directory's part files, in order."""
    return [line for part in sorted(root.glob("part-*")) for line in part.read_text().splitlines()]


@pytest.mark.connect
def test_a_replayed_save_to_a_uri_is_skipped_when_whole_and_redone_when_partial(connect_session: Any, ftp_server: Any) -> None:
    """A batch saved whole is not saved again (no error, nothing changed); a directory without ``_SUCCESS`` is removed
    and saved again whole."""
    sc = FrameContext(connect_session)
    uri, local = ftp_server.uri("out/words-1000"), ftp_server.root / "out" / "words-1000"
    save_text_files_once(sc.parallelize(["a", "b", "c"], 2), uri)
    assert lines(local) == ["a", "b", "c"] and (local / "_SUCCESS").exists()
    save_text_files_once(sc.parallelize(["other"], 2), uri)  # a replay of a batch already saved whole
    assert lines(local) == ["a", "b", "c"]
    (local / "_SUCCESS").unlink()  # what a crash in the middle of a save leaves: parts without the marker
    (local / "part-00001").unlink()
    (local / "part-00007").write_text("stray\n")
    save_text_files_once(sc.parallelize(["x", "y", "z"], 2), uri)
    assert lines(local) == ["x", "y", "z"] and sorted(p.name for p in local.iterdir()) == ["_SUCCESS", "part-00000", "part-00001"]


def test_a_part_writer_goes_on_when_another_task_made_its_directory_first(ftp_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory a part file goes in, found missing and then made by another task before this one's create (the
    server says "550 File exists"): the writer sees it is there and writes its part."""
    from fsspec.implementations.ftp import FTPFileSystem

    from streaming.connect._frame_rdd import _PartFileWriter

    uri = ftp_server.uri("out/words-2000")
    exists = FTPFileSystem.exists
    raced: list[str] = []

    def late(fs: Any, path: str, **kwargs: Any) -> bool:
        if not raced and path.rstrip("/").endswith("words-2000"):  # the first look: missing; then the other task makes it
            raced.append(path)
            (ftp_server.root / "out" / "words-2000").mkdir(parents=True)
            return False
        return bool(exists(fs, path, **kwargs))

    monkeypatch.setattr(FTPFileSystem, "exists", late)
    assert list(_PartFileWriter(uri, None, "")(1, iter(["p", "q"]))) == [f"{uri}/part-00001"]
    assert raced and (ftp_server.root / "out" / "words-2000" / "part-00001").read_text() == "p\nq\n"
