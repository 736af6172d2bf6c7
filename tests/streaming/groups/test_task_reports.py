"""The tasks' per-batch reports on Spark Connect (no accumulators there): written by any process, merged by the driver,
in a private folder of this machine or under the checkpoint (a path or a URI the server's executors reach)."""

from __future__ import annotations

import gc
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scheduler import EventTimeStats
from streaming.connect import CheckpointReports, ReportFolder, ReportPlaceMissingError, write_report
from streaming.dstream._batch_stats import ReportedStats
from streaming.state import StateOperatorStats


def _stats(partition: int, rows: int) -> StateOperatorStats:
    return StateOperatorStats(rows, rows, 0, 0, 0, 0, 0, 1, partitions=1 << partition, custom_metrics={"numTimeoutsFired": 1})


def _write_from_another_process(sink: Any, code: str) -> None:
    """Runs ``code`` (which reads the pickled ``sink`` from stdin as ``sink``) in a new interpreter, as a Python worker would."""
    program = f"import pickle, sys; from scheduler import EventTimeStats; sink = pickle.loads(sys.stdin.buffer.read()); {code}"
    subprocess.run([sys.executable, "-c", program], input=pickle.dumps(sink), check=True,
                   env={**os.environ, "PYTHONPATH": os.getcwd()})


def test_a_batch_merges_every_partitions_report_and_is_taken_once() -> None:
    """Two partitions' records of batch 1000 and one of 2000: peek merges 1000's and leaves them, take removes them only."""
    stats = ReportedStats(ReportFolder())
    sink = pickle.loads(pickle.dumps(stats.sink))  # as a task gets it
    sink.add_partition(1000, 0, _stats(0, 3))
    sink.add_partition(1000, 1, _stats(1, 4))
    sink.add_partition(2000, 0, _stats(0, 1))
    merged = stats.peek(1000)
    assert (merged.num_rows_total, merged.partitions, dict(merged.custom_metrics)) == (7, 0b11, {"numTimeoutsFired": 2})
    assert stats.take(1000) == merged
    assert stats.take(1000) is None and stats.peek(1000) is None
    assert stats.take(2000).num_rows_total == 1
    assert stats.take(3000) is None


def test_a_partition_run_again_replaces_its_report() -> None:
    """A later attempt of the same partition (a retried or recomputed task) replaces the earlier record: counted once."""
    stats = ReportedStats(ReportFolder())
    stats.sink.add_partition(1000, 0, _stats(0, 3))
    stats.sink.add_partition(1000, 1, _stats(1, 4))
    stats.sink.add_partition(1000, 0, _stats(0, 5))  # partition 0 again
    merged = stats.take(1000)
    assert (merged.num_rows_total, merged.partitions, dict(merged.custom_metrics)) == (9, 0b11, {"numTimeoutsFired": 2})


def test_a_report_from_another_process_reaches_the_driver() -> None:
    """A Python worker is another process: its records (event-time statistics here) are read back here."""
    stats = ReportedStats(ReportFolder())
    _write_from_another_process(stats.sink, "sink.add_partition(5000, 0, EventTimeStats.of([10, 30]))")
    stats.sink.add_partition(5000, 1, EventTimeStats.of([20]))
    merged = stats.take(5000)
    assert (merged.min_ms, merged.max_ms, merged.count, merged.sum_ms) == (10, 30, 3, 60)


def test_the_directory_goes_with_the_channel() -> None:
    """Each channel writes in a directory of its own, removed when the channel is dropped."""
    first, second = ReportFolder(), ReportFolder()
    assert first.directory != second.directory
    ReportedStats(first).sink.add_partition(1, 0, _stats(0, 1))
    assert ReportedStats(second).peek(1) is None
    directory = first.directory
    del first
    gc.collect()
    assert not directory.exists()


def test_a_killed_drivers_report_directory_is_removed_by_the_next_driver(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory whose driver has exited goes when the next ReportFolder is made; a live driver's stays."""
    import tempfile

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


def test_a_task_that_does_not_find_the_place_fails_saying_why(tmp_path: Path) -> None:
    """The driver makes the place; a task that does not find it (a server that does not see the driver's files) fails
    naming the place and the fix, instead of writing reports nobody reads."""
    place = str(tmp_path / "made-by-a-driver-elsewhere")
    with pytest.raises(ReportPlaceMissingError) as raised:
        write_report(place, "1000", {"a": 1}, name="0")
    assert str(raised.value) == (
        f"the task report directory {place} is not on this Python worker's file system: the driver made it, so the Spark "
        "server's workers do not see the driver's files at that path (a Spark Connect server on another machine or in "
        "another file-system namespace). Give the StreamingContext a checkpoint directory that both the driver and the "
        "server's executors reach (ssc.checkpoint(dir), or sc.setCheckpointDir(dir) for accumulators alone: a shared "
        "directory, or a URI such as hdfs://...); the reports then go there")
    assert not (tmp_path / "made-by-a-driver-elsewhere").exists()
    with pytest.raises(ReportPlaceMissingError):
        write_report(place, "", {"a": 1})  # an accumulator's report, straight into the place


def test_reports_under_the_checkpoint_are_read_back_and_removed(tmp_path: Path) -> None:
    """A CheckpointReports place lives under <ckpt>/task-reports, takes another process's records and goes with its owner."""
    checkpoint = tmp_path / "ck"
    store = CheckpointReports(str(checkpoint))
    place = Path(store.place)
    assert place.parent == checkpoint / "task-reports"
    assert place.name.startswith(f"{socket.gethostname()}-{os.getpid()}-")
    stats = ReportedStats(store)
    _write_from_another_process(stats.sink, "sink.add_partition(5000, 1, EventTimeStats.of([10, 30]))")
    stats.sink.add_partition(5000, 0, EventTimeStats.of([20]))
    assert stats.peek(5000).count == 3
    assert stats.take(5000).sum_ms == 60
    assert not (place / "5000").exists()
    del stats, store
    gc.collect()
    assert not place.exists()


def test_a_killed_drivers_places_under_the_checkpoint_go_with_the_next_driver_of_its_host(tmp_path: Path) -> None:
    """This host's places whose driver has exited are removed; a live driver's, and any other host's, stay."""
    from tests.support import dead_pid

    reports = tmp_path / "ck" / "task-reports"
    host = socket.gethostname()
    dead = reports / f"{host}-{dead_pid()}-0123456789ab"
    alive = reports / f"{host}-{os.getppid()}-0123456789ab"
    elsewhere = reports / f"another-host-{dead_pid()}-0123456789ab"
    for place in (dead, alive, elsewhere):
        (place / "1000").mkdir(parents=True)
    CheckpointReports(str(tmp_path / "ck"))
    assert not dead.exists()
    assert alive.exists() and elsewhere.exists()


def test_reports_under_a_uri_checkpoint_go_through_fsspec(ftp_server: Any) -> None:
    """A checkpoint on another file system (FTP here): the task writes through fsspec, the driver reads through fsspec."""
    store = CheckpointReports(ftp_server.uri("ck"))
    assert store.place.startswith(ftp_server.uri("ck/task-reports/"))
    stats = ReportedStats(store)
    _write_from_another_process(stats.sink, "sink.add_partition(5000, 1, EventTimeStats.of([10, 30])); "
                                            "sink.add_partition(5000, 1, EventTimeStats.of([10, 40]))")
    stats.sink.add_partition(5000, 0, EventTimeStats.of([20]))
    merged = stats.take(5000)
    assert (merged.min_ms, merged.max_ms, merged.count, merged.sum_ms) == (10, 40, 3, 70)  # partition 1's later record
    on_disk = ftp_server.root / "ck" / store.place.split("/ck/", 1)[1]
    assert on_disk.is_dir() and not (on_disk / "5000").exists()
    with pytest.raises(ReportPlaceMissingError) as raised:
        write_report(ftp_server.uri("ck/task-reports/gone"), "1", {})
    assert "ftp://***@127.0.0.1" in str(raised.value) and ftp_server.password not in str(raised.value)
