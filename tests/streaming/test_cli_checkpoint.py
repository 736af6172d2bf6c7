"""`aiodstream checkpoint DIR`: a readable (or JSON) summary of a checkpoint, and clear errors for bad directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from scheduler import BatchGrid, Checkpoint, CommitMetadata, Milliseconds, OffsetSeq, OffsetSeqMetadata, Time
from streaming._cli import main
from tests.support import unreadable_directory

ROOT = Path(__file__).resolve().parents[2]
QID = uuid.UUID("6a5f0f4e-1b7c-4c1e-9a53-0d7f8d1f2e3a")
GRID = BatchGrid(Time(1_700_000_000_000), Milliseconds(500))


pytestmark = pytest.mark.usefixtures("keep_logging_config")  # the command line configures the library's logger


def make_checkpoint(root: Path) -> None:
    ck = Checkpoint(root)
    root.mkdir()
    (root / "metadata").write_text(f'{{"id":"{QID}"}}')
    for batch_id, offset in enumerate(['{"files":1,"lastFile":"a"}', '{"files":3,"lastFile":"c"}']):
        ck.offsets.add(batch_id, OffsetSeq((offset, None), OffsetSeqMetadata(0, GRID.time_of(batch_id).milliseconds, GRID.conf())))
    ck.commits.add(0, CommitMetadata())


def test_the_summary_names_id_grid_entries_and_pending_batches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The text summary shows the query id, the grid, the logs, the newest offsets per source and what a restart re-runs."""
    make_checkpoint(tmp_path / "ck")
    assert main(["checkpoint", str(tmp_path / "ck")]) == 0
    assert capsys.readouterr().out == (
        f"checkpoint    {tmp_path}/ck\n"
        f"query id      {QID}\n"
        "batch grid    every 500 ms from zero time 1700000000000 ms (2023-11-14T22:13:20.000Z)\n"
        "offsets       2 entries, batches 0..1\n"
        "commits       1 entry, batch 0\n"
        "last offsets  batch 1 at 1700000001000 ms (2023-11-14T22:13:21.000Z)\n"
        '  source 0    {"files":3,"lastFile":"c"}\n'
        "  source 1    - (no offset yet)\n"
        "last commit   batch 0 (nextBatchWatermarkMs 0)\n"
        "pending       batch 1: logged, not committed; a restart re-runs them with the same batch time and input\n"
    )


def test_the_json_summary_is_machine_readable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints the same facts as JSON, offsets parsed."""
    make_checkpoint(tmp_path / "ck")
    assert main(["checkpoint", str(tmp_path / "ck"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["queryId"] == str(QID)
    assert (summary["batchDurationMs"], summary["zeroTimeMs"]) == (500, 1_700_000_000_000)
    assert (summary["offsets"], summary["commits"], summary["pending"]) == ([0, 1], [0], [1])
    assert summary["lastOffsets"] == {"batchId": 1, "batchTimestampMs": 1_700_000_001_000,
                                      "offsets": [{"files": 3, "lastFile": "c"}, None]}


def test_bad_directories_get_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing directory and a directory that is not a checkpoint exit with status 2 and say why."""
    assert main(["checkpoint", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"aiodstream checkpoint: error: no checkpoint at {tmp_path}/nope: the directory does not exist\n"
    assert main(["checkpoint", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"aiodstream checkpoint: error: {tmp_path} is not a checkpoint directory: it has no "
                                       "'metadata' file and no 'offsets' or 'commits' directory\n")


def test_a_directory_the_user_may_not_read_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint directory the system refuses to read (mode 000) is one line naming it, exit 2, not "no metadata file"."""
    make_checkpoint(tmp_path / "ck")
    unreadable_directory(monkeypatch, tmp_path / "ck")
    assert main(["checkpoint", str(tmp_path / "ck")]) == 2
    assert capsys.readouterr().err == f"aiodstream checkpoint: error: cannot read {tmp_path}/ck: Permission denied\n"


def test_a_damaged_entry_is_reported_with_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A corrupt newest entry exits with status 4 and the entry's path and fault."""
    make_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / "offsets" / "2").write_text("v7\n{}")
    assert main(["checkpoint", str(tmp_path / "ck")]) == 4
    assert capsys.readouterr().err.startswith(f"aiodstream checkpoint: error: cannot read {tmp_path}/ck/offsets/2: it is in log "
                                              "format v7")


@pytest.mark.spark
def test_hadoop_reads_the_same_summary(spark_context: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--hadoop reads the checkpoint through Hadoop's FileSystem API (as an hdfs:// one is read): the same summary."""
    make_checkpoint(tmp_path / "ck")
    assert main(["checkpoint", str(tmp_path / "ck"), "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["checkpoint", (tmp_path / "ck").as_uri(), "--json", "--hadoop"]) == 0
    through_hadoop = json.loads(capsys.readouterr().out)
    assert through_hadoop.pop("location") == (tmp_path / "ck").as_uri() and local.pop("location") == str(tmp_path / "ck")
    assert through_hadoop == local and local["offsets"] == [0, 1]


@pytest.mark.spark
def test_a_scheme_hadoop_cannot_open_is_one_line(spark_context: object, capsys: pytest.CaptureFixture[str]) -> None:
    """A URI whose file system Hadoop cannot open exits with status 2 and one line naming the scheme, not a Java traceback."""
    assert main(["checkpoint", "foo://bar/ck"]) == 2
    assert capsys.readouterr().err == (
        "aiodstream checkpoint: error: cannot open checkpoint directory foo://bar/ck: Hadoop cannot open its foo:// file "
        'system (org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme "foo"); put the file '
        "system's connector on Spark's classpath (spark.jars.packages, e.g. org.apache.hadoop:hadoop-aws for s3a://) "
        "with its spark.hadoop.fs.* settings, or use a scheme Spark reaches\n")


# -- hand-made entries: one line each, never a traceback --

DEEP = "[" * 100_000 + "]" * 100_000  # deeper than the interpreter's recursion limit
DAMAGED_TAIL = ("; the file was damaged after it was written (aiodstream never leaves a partly written entry): restore it "
                "from a copy, or start over with a new checkpoint directory")


def run_checkpoint(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, list[str]]:
    """Run the command on ``root``; its status, stdout and stderr lines (no exception may escape)."""
    status = main(["checkpoint", str(root), *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return status, captured.out, captured.err.splitlines()


def test_a_superscript_digit_in_the_batch_interval_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An interval of '5²' (str.isdigit says yes, int() says no) is reported as a damaged entry, status 4."""
    make_checkpoint(tmp_path / "ck")
    conf = {"aiodstream.batchDurationMs": "5\u00b2", "aiodstream.zeroTimeMs": "0"}
    (tmp_path / "ck" / "offsets" / "2").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":' + json.dumps(conf) + '}\n{"files":4,"lastFile":"d"}\n-')
    status, out, err = run_checkpoint(tmp_path / "ck", capsys)
    assert status == 4 and "last offsets  batch 2 at 0 ms" in out and "batch grid" not in out
    assert err == [f"aiodstream checkpoint: error: cannot read {tmp_path}/ck/offsets/2: its batch grid must be a positive whole "
                   "number of milliseconds (aiodstream.batchDurationMs) and a whole number of milliseconds "
                   "(aiodstream.zeroTimeMs), in ASCII digits, got '5²' and '0'; the file was damaged after it was written: "
                   "restore it from a copy, or start over with a new checkpoint directory"]


def test_deeply_nested_json_is_one_clear_line_per_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """JSON nested past the recursion limit in the metadata, an offsets entry and a commit: one line each, status 4."""
    make_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / "metadata").write_text(DEEP)
    (tmp_path / "ck" / "offsets" / "2").write_text("v1\n\n" + DEEP)
    (tmp_path / "ck" / "commits" / "1").write_text("v1\n" + DEEP)
    status, out, err = run_checkpoint(tmp_path / "ck", capsys)
    assert status == 4 and "query id    unreadable (see the error below)\n" in out
    shown = repr(DEEP[:60] + "...")
    assert err == [
        f"aiodstream checkpoint: error: cannot read {tmp_path}/ck/metadata: the query metadata must be a JSON object holding "
        f'the query id, such as {{"id":"<uuid>"}}, got {shown} (it is nested too deeply){DAMAGED_TAIL}',
        f"aiodstream checkpoint: error: cannot read {tmp_path}/ck/offsets/2: line 3 must be a source offset (JSON, or '-' for "
        f"none), got {shown} (it is nested too deeply){DAMAGED_TAIL}",
        f"aiodstream checkpoint: error: cannot read {tmp_path}/ck/commits/1: line 2 (the commit metadata) must be a JSON "
        f"object, got {shown} (it is nested too deeply){DAMAGED_TAIL}",
    ]


@pytest.mark.parametrize("digits", [4300, 4301, 10])
def test_a_version_of_thousands_of_digits_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], digits: int) -> None:
    """A log version past Python's int-string limit (or past Spark's int) is a damaged entry, shown shortened."""
    make_checkpoint(tmp_path / "ck")
    version = "v" + "1" * digits
    (tmp_path / "ck" / "commits" / "1").write_text(version + "\n{}")
    status, _, err = run_checkpoint(tmp_path / "ck", capsys, "--json")
    shown = version if len(version) <= 60 else version[:60] + "..."
    assert status == 4
    assert err == [f"aiodstream checkpoint: error: cannot read {tmp_path}/ck/commits/1: the first line must be a log version "
                   f"such as 'v1', got {shown!r}{DAMAGED_TAIL}"]


def test_the_json_summary_lists_damaged_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json keeps what could be read and lists each damaged entry with its path."""
    make_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / "commits" / "1").write_text("v1\n" + DEEP)
    status, out, err = run_checkpoint(tmp_path / "ck", capsys, "--json")
    summary = json.loads(out)
    assert status == 4 and len(err) == 1 and summary["queryId"] == str(QID) and summary["lastCommit"] is None
    assert [d["path"] for d in summary["damaged"]] == [f"{tmp_path}/ck/commits/1"]


def test_names_that_are_not_batch_ids_are_ignored_as_spark_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file named by hundreds of digits or a superscript digit is not a batch file: ignored, no traceback."""
    make_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / "offsets" / ("9" * 255)).write_text("v1\n\n-")  # the longest name a local file system takes
    (tmp_path / "ck" / "offsets" / "3\u00b2").write_text("v1\n\n-")
    (tmp_path / "ck" / "offsets" / "9223372036854775808").write_text("v1\n\n-")  # one past a Java long
    status, out, _ = run_checkpoint(tmp_path / "ck", capsys)
    assert status == 0 and "offsets       2 entries, batches 0..1\n" in out


def test_a_timestamp_beyond_year_9999_is_printed_with_its_year(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A batch timestamp that fits a long but not a datetime is printed with the digits its year needs, not a traceback."""
    make_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / "offsets" / "2").write_text('v1\n{"batchTimestampMs":9223372036854775807}\n-\n-')
    status, out, _ = run_checkpoint(tmp_path / "ck", capsys)
    assert status == 0 and "last offsets  batch 2 at 9223372036854775807 ms (292278994-08-17T07:12:55.807Z)\n" in out


@pytest.mark.parametrize("damage", ["offsets-removed", "offsets-is-a-file"])
def test_a_lost_offsets_log_is_reported_as_damage(tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str) -> None:
    """Commits beside no offsets log (removed, or replaced by a file) exit with status 4 naming offsets/, not 'offsets none'."""
    make_checkpoint(tmp_path / "ck")
    offsets = tmp_path / "ck" / "offsets"
    for entry in offsets.iterdir():
        entry.unlink()
    offsets.rmdir()
    if damage == "offsets-is-a-file":
        offsets.write_text("x")
    assert main(["checkpoint", str(tmp_path / "ck")]) == 4
    err = capsys.readouterr().err
    assert err.startswith("aiodstream checkpoint: error: cannot re")
    assert f"{tmp_path}/ck/offsets " in err and "Traceback" not in err


@pytest.mark.parametrize("args", [["--json"], []])
def test_a_reader_that_went_away_ends_it_quietly_with_sigpipes_status(tmp_path: Path, args: list[str]) -> None:
    """stdout is a pipe whose reader closed before anything was written (`| head -c 0`): status 141, no traceback."""
    make_checkpoint(tmp_path / "ck")
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write of the child then fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-c", "import sys; from streaming._cli import main; sys.exit(main(sys.argv[1:]))",
                               "checkpoint", str(tmp_path / "ck"), *args], stdout=write_end, stderr=subprocess.PIPE,
                              cwd=ROOT, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr.decode()) == (141, "")


def test_a_reader_that_went_away_ends_a_buffered_run_quietly_too(tmp_path: Path) -> None:
    """Without PYTHONUNBUFFERED, stdout to a pipe is written at the flush: status 141 and no 'Exception ignored' line."""
    make_checkpoint(tmp_path / "ck")
    read_end, write_end = os.pipe()
    os.close(read_end)
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    try:
        done = subprocess.run([sys.executable, "-c", "import sys; from streaming._cli import main; sys.exit(main(sys.argv[1:]))",
                               "checkpoint", str(tmp_path / "ck"), "--json"], stdout=write_end, stderr=subprocess.PIPE,
                              cwd=ROOT, env=environment, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr.decode()) == (141, "")


def test_a_usage_error_with_stderr_closed_keeps_its_status() -> None:
    """Started with stderr closed (`2>&-`) and stdout a pipe nobody reads: the error goes nowhere, status 2, not 141."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, "-c",
                               "import sys; from streaming._cli import main; sys.exit(main(sys.argv[1:]))",
                               "simulate", "--batches", "0"], stdout=write_end, cwd=ROOT, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert done.returncode == 2


def test_a_dstream_graph_cut_short_is_reported_without_unpickling_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint whose saved DStream graph is cut short: status 4 and the damage named (a restart would refuse it), found
    by walking the pickle's opcodes, which runs none of them; a whole graph file passes."""
    import pickle

    from streaming.dstream import RECIPE_FILE
    from streaming.dstream._recipe import _MAGIC

    make_checkpoint(tmp_path / "ck")
    whole = _MAGIC + pickle.dumps({"calls": list(range(200))})
    (tmp_path / "ck" / RECIPE_FILE).write_bytes(whole)
    assert run_checkpoint(tmp_path / "ck", capsys)[0] == 0
    (tmp_path / "ck" / RECIPE_FILE).write_bytes(whole[:-7])
    status, _, err = run_checkpoint(tmp_path / "ck", capsys)
    assert status == 4
    assert [line for line in err if "graph" in line] == [
        f"aiodstream checkpoint: error: cannot read the DStream graph in {tmp_path}/ck/graph: pickle exhausted before "
        "seeing STOP; the file is cut short or altered, damaged after it was written: restore it from a copy, or start "
        "over without this checkpoint"]
    status, out, _ = run_checkpoint(tmp_path / "ck", capsys, "--json")
    assert status == 4 and json.loads(out)["damaged"][-1]["path"] == f"{tmp_path}/ck/graph"
