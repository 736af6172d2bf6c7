"""The tasks' per-batch reports on Spark Connect (no accumulators there): written by any process, merged by the driver."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler import EventTimeStats
from streaming.dstream._batch_stats import ReportedStats
from streaming.state import StateOperatorStats


def _stats(partition: int, rows: int) -> StateOperatorStats:
    return StateOperatorStats(rows, rows, 0, 0, 0, 0, 0, 1, partitions=1 << partition, custom_metrics={"numTimeoutsFired": 1})


def test_a_batch_merges_every_task_report_and_is_taken_once() -> None:
    """Two tasks' records of batch 1000 and one of 2000: peek merges 1000's and leaves them, take removes them only."""
    stats = ReportedStats()
    sink = pickle.loads(pickle.dumps(stats.sink))  # as a task gets it
    sink.add({1000: _stats(0, 3)})
    sink.add({1000: _stats(1, 4), 2000: _stats(0, 1)})
    merged = stats.peek(1000)
    assert (merged.num_rows_total, merged.partitions, dict(merged.custom_metrics)) == (7, 0b11, {"numTimeoutsFired": 2})
    assert stats.take(1000) == merged
    assert stats.take(1000) is None and stats.peek(1000) is None
    assert stats.take(2000).num_rows_total == 1
    assert stats.take(3000) is None


def test_a_report_from_another_process_reaches_the_driver() -> None:
    """A Python worker is another process: its records (event-time statistics here) are read back here."""
    stats = ReportedStats()
    sink = pickle.dumps(stats.sink)
    code = ("import pickle, sys; from scheduler import EventTimeStats; "
            "pickle.loads(sys.stdin.buffer.read()).add({5000: EventTimeStats.of([10, 30])})")
    subprocess.run([sys.executable, "-c", code], input=sink, check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    stats.sink.add({5000: EventTimeStats.of([20])})
    merged = stats.take(5000)
    assert (merged.min_ms, merged.max_ms, merged.count, merged.sum_ms) == (10, 30, 3, 60)


def test_the_directory_goes_with_the_channel() -> None:
    """Each channel writes in a directory of its own, removed when the channel is dropped."""
    first, second = ReportedStats(), ReportedStats()
    assert first.directory != second.directory
    first.sink.add({1: _stats(0, 1)})
    assert second.peek(1) is None
    directory = first.directory
    del first
    gc.collect()
    assert not directory.exists()


def test_a_killed_drivers_report_directory_is_removed_by_the_next_driver(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory whose driver has exited goes when the next ReportFolder is made; a live driver's stays."""
    import tempfile

    from streaming.connect._task_reports import ReportFolder
    from tests.support import dead_pid

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left = tmp_path / f"aiodstream-task-reports-{dead_pid()}-x1"
    left.mkdir()
    (left / "1-a.report").write_bytes(b"not read")
    other_prefix = tmp_path / f"aiodstream-accumulators-{dead_pid()}-x2"  # another prefix: its own folders sweep it
    other_prefix.mkdir()
    live = ReportFolder()
    assert not left.exists()
    assert other_prefix.exists()
    assert live.directory.name.startswith(f"aiodstream-task-reports-{os.getpid()}-")
    second = ReportFolder()
    assert live.directory.exists() and second.directory.exists()
