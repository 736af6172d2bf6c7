"""`aiodstream checkpoint DIR`: a readable (or JSON) summary of a checkpoint, and clear errors for bad directories."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler import LOGGER_ROOT, BatchGrid, Checkpoint, CommitMetadata, Milliseconds, OffsetSeq, OffsetSeqMetadata, Time
from streaming._cli import main

QID = uuid.UUID("6a5f0f4e-1b7c-4c1e-9a53-0d7f8d1f2e3a")
GRID = BatchGrid(Time(1_700_000_000_000), Milliseconds(500))


@pytest.fixture(autouse=True)
def keep_logging_config() -> Iterator[None]:
    """The command line configures the library's logger for itself; put the test run's configuration back."""
    logger = logging.getLogger(LOGGER_ROOT)
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


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
