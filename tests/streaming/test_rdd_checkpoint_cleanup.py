"""Old RDD checkpoint files are deleted as a checkpointed stateful program runs, on classic Spark and on Spark Connect,
and a restart after the deletions restores exactly (Spark's ``DStreamCheckpointData`` cleanup).

Each program checkpoints its state every batch, so without the cleanup its checkpoint would hold one ``rdd-*``
directory per stream and batch. It runs on a ManualClock batch by batch; one batch fails so that it is logged but
never committed, the context stops, and ``getOrCreate`` resumes it. The two runs' outputs together must equal one
uninterrupted run's, partition by partition, batch time by batch time.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from operator import add, sub
from pathlib import Path
from typing import Any

import pytest

from scheduler import ManualClock
from streaming import StreamingContext
from tests.streaming.test_connect_recovery import Run
from tests.streaming.test_dstream_recovery import run_program
from tests.support import connect_opt_in

INTERVAL_MS = 1000
WORDS = [["a", "b", "c", "d"][: k % 4 + 1] + (["e"] if k % 3 == 0 else []) for k in range(10)]
STREAMS = 2  # checkpointed streams of the program: the running counts and the inverse-reduced window
# Per stream at a batch's end: the files of the two remembered RDDs (its remember duration is twice the checkpoint
# interval of one batch), and at most one of a batch being generated meanwhile.
FILES_PER_STREAM = 3
FAILING = 6  # the first run's last batch, which fails: batches 1-5 checkpoint 10 RDDs


def stateful_program(run: Run) -> Callable[[StreamingContext], None]:
    """Running word counts (updateStateByKey) and an incremental inverse-reduced window, both checkpointed every batch."""
    def build(ssc: StreamingContext) -> None:
        sc = ssc.sparkContext
        pairs = ssc.queueStream([sc.parallelize(words, 2) for words in WORDS]).map(lambda w: (w, 1))

        def update(values: list[int], state: int | None) -> int:
            return (state or 0) + sum(values)

        counts = pairs.updateStateByKey(update, 2)
        counts.checkpoint(1)
        counts.foreachRDD(run.output("counts"))
        window = pairs.reduceByKeyAndWindow(add, sub, 5, 1, 2)  # five slides: reduced incrementally
        window.checkpoint(1)
        window.foreachRDD(run.output("window"))
    return build


def rdd_directories(checkpoint: Path) -> list[Path]:
    """The RDD checkpoint directories under ``checkpoint`` (classic Spark's in ``<uuid>/``, Connect's at the top)."""
    return sorted(checkpoint.rglob("rdd-*"))


@pytest.fixture(scope="module")
def reference(spark_context: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """An uninterrupted run on classic Spark (once for the module's tests)."""
    run = Run(sort=True)
    run_program(spark_context, tmp_path_factory.mktemp("reference"), ManualClock(0), FAILING + 1, stateful_program(run), resume=False)
    return run


@dataclass(frozen=True)
class FirstRun:
    """The program's first run on a session: its checkpoint (batch FAILING failed), the outputs it gave and the RDD
    directories it left."""
    checkpoint: Path
    outputs: Run
    kept: list[Path]
    clock_ms: int


def first_run(session: Any, checkpoint: Path) -> FirstRun:
    """Run the program on ``session`` (a SparkContext or a Connect session) for FAILING batches, the last failing; the
    old RDD checkpoint files are deleted meanwhile."""
    first = Run(fail_at=FAILING * INTERVAL_MS, sort=True)
    clock = ManualClock(0)
    run_program(session, checkpoint, clock, FAILING, stateful_program(first), resume=False)
    assert sorted(first.outputs["counts"]) == [ms * INTERVAL_MS for ms in range(1, FAILING)]
    kept = rdd_directories(checkpoint)
    assert 2 <= len(kept) <= STREAMS * FILES_PER_STREAM, kept
    return FirstRun(checkpoint, first, kept, clock.now())


def restart(session: Any, reference: Run, first: FirstRun, checkpoint: Path) -> None:
    """Resume the first run from ``checkpoint`` (its own, or a copy of it) for one more batch: the two runs' outputs
    must equal ``reference``'s."""
    second = Run(sort=True)
    run_program(session, checkpoint, ManualClock(first.clock_ms), 1, stateful_program(second), resume=True)
    for name in ("counts", "window"):
        assert sorted(second.outputs[name]) == [FAILING * INTERVAL_MS, (FAILING + 1) * INTERVAL_MS]
        assert {**first.outputs.outputs[name], **second.outputs[name]} == reference.outputs[name]


def run_and_restart(session: Any, reference: Run, directory: Path, damage: Callable[[Path], None] | None = None) -> list[Path]:
    """Run the program on ``session`` for FAILING batches, the last failing, ``damage`` its checkpoint, then resume it
    for one more; its outputs must equal ``reference``'s. Returns the RDD directories the first run left."""
    first = first_run(session, directory / "ck")
    if damage is not None:
        damage(directory / "ck")
    restart(session, reference, first, directory / "ck")
    return first.kept


@pytest.fixture(scope="module")
def classic_first_run(spark_context: Any, tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """The first run on classic Spark, once for the module's classic tests: each resumes a copy of its checkpoint (a
    restart reads the logs and the state snapshots there, never the RDD checkpoint files)."""
    return first_run(spark_context, tmp_path_factory.mktemp("classic-first") / "ck")


def copy_of(first: FirstRun, directory: Path) -> Path:
    """A copy of the first run's checkpoint in ``directory``, for one test's restart to change."""
    return Path(shutil.copytree(first.checkpoint, directory / "ck"))


@pytest.mark.spark
def test_old_rdd_checkpoint_files_are_deleted_and_a_restart_after_that_restores_exactly(
        spark_context: Any, reference: Run, classic_first_run: FirstRun, tmp_path: Path) -> None:
    """Classic Spark: 5 batches checkpoint 10 RDDs and keep at most 3 per stream; the restart gives the uninterrupted
    run's outputs, and keeps few too."""
    checkpoint = copy_of(classic_first_run, tmp_path)
    restart(spark_context, reference, classic_first_run, checkpoint)
    # Each run writes under a directory of its own in the SparkContext's checkpoint directory.
    for run_directory in {path.parent for path in rdd_directories(checkpoint)}:
        assert len(list(run_directory.glob("rdd-*"))) <= STREAMS * FILES_PER_STREAM


@pytest.mark.spark
@pytest.mark.connect
@pytest.mark.timeout(900)  # 7 Connect batches; minutes at load 40
@connect_opt_in("the default run covers the cleanup on classic Spark, the deletion of files Spark Connect wrote in "
                "test_checkpoint_files.py and a restart on Connect in test_connect_recovery.py")
def test_on_connect_old_rdd_checkpoint_files_are_deleted_and_a_restart_after_that_restores_exactly(
        connect_session: Any, reference: Run, tmp_path: Path) -> None:
    """Spark Connect: 5 batches checkpoint 10 RDDs as Parquet and keep at most 3 per stream; the restart gives classic
    Spark's outputs, partition by partition."""
    kept = run_and_restart(connect_session, reference, tmp_path)
    assert all(path.parent == tmp_path / "ck" for path in kept)
    assert len(rdd_directories(tmp_path / "ck")) <= len(kept) + STREAMS * FILES_PER_STREAM


def damage_newest_snapshots(checkpoint: Path) -> None:
    """Overwrite the data files of each stateful stream's newest state snapshot (the last committed batch's) with bytes no reader takes."""
    for stream in range(STREAMS):
        snapshot = checkpoint / "state" / str(stream) / str(FAILING - 1)
        parts = [path for path in snapshot.iterdir() if path.name.startswith("part-")]
        assert parts, sorted(snapshot.iterdir())
        for part in parts:
            part.write_bytes(b"damaged on disk")


def assert_fell_back(checkpoint: Path) -> None:
    """Each stream's damaged snapshot was set aside, and its batch's state saved anew by the resumed run."""
    for stream in range(STREAMS):
        names = sorted(path.name for path in (checkpoint / "state" / str(stream)).iterdir())
        assert [name for name in names if name.startswith(f"{FAILING - 1}.unreadable-")], names


@pytest.mark.spark
def test_a_restart_whose_newest_snapshot_is_damaged_restores_the_one_before_it(
        spark_context: Any, reference: Run, classic_first_run: FirstRun, tmp_path: Path) -> None:
    """Classic Spark: after the cleanup, the newest state snapshots are damaged; the restart loads the ones before them,
    rebuilds the last committed batch from the logged input, and gives the uninterrupted run's outputs."""
    checkpoint = copy_of(classic_first_run, tmp_path)
    damage_newest_snapshots(checkpoint)
    restart(spark_context, reference, classic_first_run, checkpoint)
    assert_fell_back(checkpoint)


@pytest.mark.spark
@pytest.mark.connect
@pytest.mark.timeout(900)
@connect_opt_in("the default run covers Connect with the restart from the newest snapshots")
def test_on_connect_a_restart_whose_newest_snapshot_is_damaged_restores_the_one_before_it(
        connect_session: Any, reference: Run, tmp_path: Path) -> None:
    """Spark Connect: the same, with the server's Parquet snapshots damaged."""
    run_and_restart(connect_session, reference, tmp_path, damage_newest_snapshots)
    assert_fell_back(tmp_path / "ck")
