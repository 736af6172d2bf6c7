"""A file stream's directory on a URI as a Spark Connect client lists it (fsspec) and its files as the server's workers
decode them (Hadoop's line and fixed-length record rules); no Spark."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest

from streaming.inputs._fsspec_listing import (
    FixedLengthRecords,
    TextLines,
    list_fsspec_files,
    modified_ms,
    read_fsspec_file,
)


@pytest.mark.parametrize(("data", "lines"), [
    (b"", []),
    (b"a", ["a"]),
    (b"a\n", ["a"]),
    (b"a\n\n", ["a", ""]),
    (b"a\r\nb\rc\nd", ["a", "b", "c", "d"]),
    (b"\n", [""]),
    (b"\xef\xbb\xbfa\x0bb\x0cc\n", ["a\x0bb\x0cc"]),  # a BOM skipped; vertical tab and form feed end no line
    (b"caf\xc3\xa9 \xff", ["caf\u00e9 \ufffd"]),
])
def test_text_lines_end_where_hadoop_ends_them(data: bytes, lines: list[str]) -> None:
    """Lines end at \\n, \\r\\n or \\r only; nothing after the last line end is a line; bad UTF-8 is replaced."""
    assert TextLines()(data, "ftp://host/in/a.txt") == lines


def test_fixed_length_records_are_whole_or_refused() -> None:
    """Records of the given length; a partial last record fails, naming the file without its password."""
    assert FixedLengthRecords(2)(b"abcd", "x") == [b"ab", b"cd"]
    assert FixedLengthRecords(2)(b"", "x") == []
    with pytest.raises(OSError, match=r"^partial record found at the end of ftp://u:\*\*\*@host/a: its 3 bytes are not "
                                      r"whole records of 2 bytes$"):
        FixedLengthRecords(2)(b"abc", "ftp://u:pw@host/a")


@pytest.mark.parametrize(("info", "ms"), [
    ({"mtime": 1.5}, 1500),
    ({"modify": "19700101000002"}, 2000),
    ({"modify": "19700101000002.250"}, 2250),
    ({"LastModified": dt.datetime(1970, 1, 1, 0, 0, 3, tzinfo=dt.timezone.utc)}, 3000),
    ({"mtime": dt.datetime(1970, 1, 1, 0, 0, 4)}, 4000),  # a naive time is UTC
    ({"updated": "1970-01-01T00:00:05Z"}, 5000),
    ({"size": 3}, None),
])
def test_modification_times_come_from_each_implementations_field(info: dict[str, Any], ms: int | None) -> None:
    """Local (mtime seconds), FTP (MLSD modify), object stores (datetimes, ISO text): all to ms; none: None."""
    assert modified_ms(info) == ms


def test_an_ftp_directory_lists_its_files_by_full_uri(ftp_server: Any) -> None:
    """Files directly in the directory (not in subdirectories), with the URI's credentials, times and sizes; a glob
    matches directories; a missing directory is None; a file reads back whole."""
    incoming = ftp_server.root / "in"
    (incoming / "sub").mkdir(parents=True)
    (incoming / "a.txt").write_bytes(b"one\n")
    (incoming / "sub" / "b.txt").write_bytes(b"two\n")
    os.utime(incoming / "a.txt", (7, 7))
    listed = list_fsspec_files(ftp_server.uri("in"))
    assert listed == [(ftp_server.uri("in/a.txt"), 7000, 4)]
    assert sorted(list_fsspec_files(ftp_server.uri("in*/s*")) or []) == [(ftp_server.uri("in/sub/b.txt"),
                                                                         _mtime_ms(incoming / "sub" / "b.txt"), 4)]
    assert list_fsspec_files(ftp_server.uri("missing")) is None
    assert read_fsspec_file(ftp_server.uri("in/a.txt")) == b"one\n"


def _mtime_ms(path: Path) -> int:
    return int(path.stat().st_mtime) * 1000  # FTP's listing gives whole seconds
