"""Keyed state, a watermark and an accumulator on a Spark Connect server that does not share the driver's disk.

The server (``tests/isolated_connect.py``, the ``isolated_connect_session`` fixture) runs in a mount
namespace whose ``/tmp`` is its own, so nothing the driver keeps in its temporary directory reaches
its workers, as on a cluster. The checkpoint is a directory both see, outside ``/tmp``. There the
tasks' reports (state numbers, event-time statistics, accumulator additions) go under the
checkpoint and the program gives classic Spark's outputs, progress and accumulator value; the
private ``/tmp`` folder the reports used before fails, and says why. Accumulators also report under
a checkpoint directory on another file system (FTP), through fsspec on both sides; and a task that
the server runs again after it reported replaces its report instead of counting twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from tests.isolated_connect import shared_directory
from tests.streaming.groups.reference import DELAY, ours_sessions
from tests.streaming.groups.test_conformance import EVENTS
from tests.support import CONNECT_ALL, connect_opt_in, run_dstream_batches

pytestmark = pytest.mark.connect

INTERVAL_MS = 1000


def session_of(key: str, values: Any, state: Any) -> tuple[Any, ...]:
    """One output per key and batch (mapGroupsWithState's form of the conformance's sessions): the key's open session so
    far, or the session closed by its event-time timeout."""
    return next(iter(ours_sessions(key, values, state)))


BATCHES = EVENTS if CONNECT_ALL else EVENTS[:3]
"""The input batches: by default the first three (sessions closed by their timeout, a late event dropped), all of the
conformance's events with ``AIODSTREAM_CONNECT=all``."""


def run_sessions(spark: Any, checkpoint: Path | str | None, batches: list[list[Any]] = BATCHES,
                 written: Path | None = None, empties: bool = True) -> dict[str, Any]:
    """The sessions program over :data:`BATCHES` (each input batch, then an empty one where timeouts fire), with an
    accumulator counting the events: its outputs per batch, the accumulator's value, and each batch's progress.

    With ``written`` (Connect), the output writes each batch's frame itself into ``written/<batch ms>`` as Parquet,
    so no row comes back to this process; the outputs are read back from the files afterwards. Without ``empties``,
    no empty batch follows an input batch.
    """
    outputs: dict[int, list[Any]] = {}
    clock = ManualClock(0)
    ssc = StreamingContext(spark, INTERVAL_MS / 1000, clock=clock)
    sc = ssc.sparkContext
    events = sc.accumulator(0)

    def counted(event: Any) -> Any:
        events.add(1)
        return event

    queue = [sc.parallelize(events, 2) for batch in batches for events in ((batch, []) if empties else (batch,))]
    stream = ssc.queueStream(queue, oneAtATime=True).map(counted).withWatermark(lambda event: event[1], DELAY)
    sessions = stream.map(lambda event: (event[0], event)).mapGroupsWithState(session_of, "EventTimeTimeout", numPartitions=2)
    if written is None:
        sessions.foreachRDD(lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect(), key=repr)))
    else:
        sessions.foreachRDD(lambda time, rdd: rdd.dataframe.write.parquet(str(written / str(int(time.timestamp() * 1000)))))
    if checkpoint is not None:
        ssc.checkpoint(str(checkpoint))

    errors = run_dstream_batches(ssc, clock, len(queue), INTERVAL_MS)
    if written is not None:
        outputs = {int(batch.name): _written_values(batch) for batch in written.iterdir()}
    progress = [(p.batch_id, dict(p.event_time), [(op.num_rows_total, op.num_rows_updated, op.num_rows_removed,
                                                   op.num_rows_dropped_by_watermark, op.num_state_store_instances,
                                                   dict(op.custom_metrics)) for op in p.state_operators])
                for p in ssc.runtime.recent_progress]
    return {"outputs": [outputs.get((i + 1) * INTERVAL_MS, []) for i in range(len(queue))], "events": events.value,
            "progress": progress, "errors": errors}


def _written_values(directory: Path) -> list[Any]:
    """The values a FrameRDD's frame wrote as Parquet (one pickled value per row), sorted."""
    import pickle

    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    return sorted((pickle.loads(data) for data in pq.read_table(directory).column("v").to_pylist()), key=repr)


@connect_opt_in("the default run has the same program with its checkpoint on FTP, which shares still less")
def test_keyed_state_a_watermark_and_an_accumulator_give_classic_sparks_results(spark_context: Any,
                                                                               isolated_connect_session: Any) -> None:
    """mapGroupsWithState with event-time timeouts under withWatermark, and an accumulator, on the isolated server with
    the checkpoint in a directory both see, its output writing each batch's frame itself (no row comes back): outputs
    per batch, the progress (state numbers, watermark) and the accumulator's value equal the classic engine's."""
    with shared_directory() as shared:
        classic = run_sessions(spark_context, shared / "classic")
        isolated = run_sessions(isolated_connect_session, shared / "connect", written=shared / "written")
        assert classic["errors"] == isolated["errors"] == []
        assert any(row[1] == "closed" for batch in classic["outputs"] for row in batch)
        assert any(op[3] for _, _, operators in classic["progress"] for op in operators)  # a late event dropped
        assert isolated["outputs"] == classic["outputs"]
        assert isolated["events"] == classic["events"] == sum(len(batch) for batch in BATCHES)
        assert isolated["progress"] == classic["progress"]
        assert any(watermark.get("watermark", "").endswith("00Z") for _, watermark, _ in classic["progress"])
        places = list((shared / "connect" / "task-reports").iterdir())  # the watermark's, the state's, the accumulator's
        assert len(places) == 3 and all(list(place.iterdir()) == [] for place in places)  # every report read and removed


@connect_opt_in("the isolated server's other tests share its files with the driver only through ftp:// "
                "(its task reports, accumulators and private /tmp); this one's minute is the whole program's run")
def test_with_the_checkpoint_on_ftp_nothing_but_the_output_is_shared(spark_context: Any, isolated_connect_session: Any,
                                                                    ftp_server: Any) -> None:
    """The same program with the checkpoint on an FTP server: the state stores, the tasks' reports and the client's logs
    all go through fsspec, so the isolated server and this process share no directory but the one the output writes
    into. Outputs, progress and the accumulator's value equal the classic engine's with a local checkpoint."""
    with shared_directory() as shared:
        classic = run_sessions(spark_context, shared / "classic")
        isolated = run_sessions(isolated_connect_session, ftp_server.uri("ck"), written=shared / "written")
        assert classic["errors"] == isolated["errors"] == []
        assert any(row[1] == "closed" for batch in classic["outputs"] for row in batch)
        assert isolated["outputs"] == classic["outputs"]
        assert isolated["events"] == classic["events"] == sum(len(batch) for batch in BATCHES)
        assert isolated["progress"] == classic["progress"]
        assert (ftp_server.root / "ck" / "metadata").exists()  # the client's logs are on the FTP server
        assert any((ftp_server.root / "ck").rglob("*.report")) is False  # every report read and removed
        assert list((ftp_server.root / "ck" / "task-reports").iterdir())  # ... after being written there


def test_the_private_tmp_folder_fails_there_and_says_why(isolated_connect_session: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The channel of the last pass (a private folder in the driver's /tmp) on the isolated server: the keyed state's
    tasks do not find it and fail the batch naming it and the fix; an accumulator without a checkpoint does the same."""
    from streaming.connect import FrameContext, ReportFolder
    from streaming.dstream import _batch_stats

    folders: list[ReportFolder] = []

    def private_folder(env: Any) -> ReportFolder:
        folders.append(ReportFolder())
        return folders[-1]

    monkeypatch.setattr(_batch_stats, "report_store", private_folder)
    with shared_directory() as shared:
        errors = run_sessions(isolated_connect_session, shared / "ck", BATCHES[:1], empties=False)["errors"]
    assert folders, "the program never asked for a report place"
    assert len(errors) == 1
    named = [folder.place for folder in folders if f"the task report directory {folder.place} is not" in str(errors[0])]
    assert named and "is not on this Python worker's file system" in str(errors[0])
    monkeypatch.undo()

    sc = FrameContext(isolated_connect_session)  # no checkpoint directory: the private folder
    counter = sc.accumulator(0)
    with pytest.raises(Exception) as raised:
        sc.parallelize(range(4), 2).foreach(lambda x: counter.add(x))
    assert "is not on this Python worker's file system" in str(raised.value)
    assert "sc.setCheckpointDir(dir) for accumulators alone" in str(raised.value)


def test_accumulators_report_under_a_uri_checkpoint_directory(isolated_connect_session: Any, ftp_server: Any) -> None:
    """With the checkpoint directory on another file system (FTP), the isolated server's workers write their additions
    there through fsspec and this process reads them back through fsspec: the value is pyspark's."""
    from streaming.connect import FrameContext

    sc = FrameContext(isolated_connect_session)
    sc.setCheckpointDir(ftp_server.uri("ck"))
    counter = sc.accumulator(0)
    sc.parallelize(range(10), 3).foreach(lambda x: counter.add(x))
    assert sc.parallelize(range(4), 2).map(lambda x: counter.add(100) or x).collect() == [0, 1, 2, 3]
    assert counter.value == sum(range(10)) + 400
    places = list((ftp_server.root / "ck" / "task-reports").iterdir())
    assert len(places) == 1 and list(places[0].iterdir()) == []  # every report read and removed


def test_a_task_run_again_reports_its_partition_once(isolated_connect_session: Any) -> None:
    """A task that reported its partition's numbers and then failed is tried again by the server (``local[2,2]``): the
    second attempt's report replaces the first, so the batch's numbers count the partition once."""
    from scheduler import EventTimeStats
    from streaming.connect import CheckpointReports, FrameContext
    from streaming.dstream._batch_stats import ReportedStats

    with shared_directory() as shared:
        stats = ReportedStats(CheckpointReports(str(shared)))
        sink = stats.sink

        def report_then_fail_once(partition: int, values: Any) -> list[int]:
            from pyspark import TaskContext

            times = list(values)
            sink.add_partition(1000, partition, EventTimeStats.of(times))
            context = TaskContext.get()
            if partition == 1 and context is not None and context.attemptNumber() == 0:
                raise RuntimeError("the first attempt fails after its report")
            return times

        rdd = FrameContext(isolated_connect_session).parallelize([10, 20, 30, 40], 2)
        assert rdd.mapPartitionsWithIndex(report_then_fail_once).collect() == [10, 20, 30, 40]  # only a retry succeeds
        merged = stats.take(1000)
        assert (merged.count, merged.sum_ms, merged.min_ms, merged.max_ms) == (4, 100, 10, 40)
