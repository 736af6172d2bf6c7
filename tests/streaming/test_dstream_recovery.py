"""StreamingContext.getOrCreate on real Spark: re-run uncommitted batches, down-time batches, state, input logs.

Each test runs a program on a ManualClock batch by batch (``advance`` then ``wait_until_idle``),
makes one batch fail so that it is logged but never committed (what a crash between the offsets
entry and the commit leaves), stops, and resumes through ``getOrCreate`` with a fresh context
on the same checkpoint directory. The outputs of the two runs together must equal one
uninterrupted run's, batch time by batch time.
"""

from __future__ import annotations

import json
import os
import time as _time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler import CheckpointError, ManualClock
from streaming import DStream, StreamingContext
from tests.anyio_support import BACKENDS
from tests.support import advance

# The runtime drives Spark from either backend; each program run here runs on the test's one.
pytestmark = [pytest.mark.spark, pytest.mark.parametrize("backend", BACKENDS)]

INTERVAL_MS = 1000


class Run:
    """One program run: its outputs by batch time, and a switch that fails one batch time's output."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.outputs: dict[int, Any] = {}
        self.fail_at = fail_at

    def output(self, time: Any, rdd: Any) -> None:
        ms = int(time.timestamp() * 1000)
        if ms == self.fail_at:
            raise RuntimeError(f"simulated crash in batch {ms}")
        self.outputs[ms] = sorted(rdd.collect())


def running_counts(ssc: StreamingContext, stream: DStream, run: Run) -> None:
    """updateStateByKey word counts, state checkpointed every 2 batches, collected per batch."""
    def update(values: list[int], state: int | None) -> int:
        return (state or 0) + sum(values)

    state = stream.map(lambda w: (w, 1)).updateStateByKey(update)
    state.checkpoint(2)
    state.foreachRDD(run.output)


async def drive(ssc: StreamingContext, clock: ManualClock, batches: int,
                until_ready: Callable[[], Awaitable[Any]] | None = None) -> None:
    """Start, wait until ready (the runtime idle, unless ``until_ready`` says otherwise), run ``batches`` batches
    one at a time, stop at once (what is logged and not committed stays so)."""
    async with ssc:
        await ssc.start_async()
        await (ssc.runtime.wait_until_idle() if until_ready is None else until_ready())
        await advance(ssc.runtime, clock, INTERVAL_MS, times=batches)
        await ssc.stop_async(stopSparkContext=False)


def run_program(sc: Any, directory: Path, clock: ManualClock, batches: int, build: Callable[[StreamingContext], None],
                *, resume: bool, backend: str = "asyncio", until_ready: Callable[[], Awaitable[Any]] | None = None,
                options: dict[str, object] | None = None) -> None:
    """Run ``build``'s program under ``directory`` (resuming it with ``resume``) on ``sc``, a SparkContext or a
    Connect session, for ``batches`` batches (see :func:`drive`); ``options``: the checkpoint's."""
    def setup() -> StreamingContext:
        ssc = StreamingContext(sc, INTERVAL_MS / 1000, clock=clock)
        build(ssc)
        ssc.checkpoint(str(directory), options=options)
        return ssc

    # restoreGraph=False: each run's program is built anew (with this run's clock and output collector), and
    # resumes the checkpoint's logs and state; restoring the saved graph itself is tested in test_graph_restore.py.
    ssc = StreamingContext.getOrCreate(str(directory), setup, restoreGraph=False) if resume else setup()
    anyio.run(drive, ssc, clock, batches, until_ready, backend=backend)


WORDS = [["a", "b"], ["a"], ["b", "c"], ["a", "a"], ["c"], ["b"], ["a", "c"], ["b", "b"]]


def expected_counts(batches: range) -> dict[int, list[tuple[str, int]]]:
    """What an uninterrupted run of the queue program outputs at each batch time: the running counts of WORDS."""
    return {k * INTERVAL_MS: sorted(Counter(w for words in WORDS[:k] for w in words).items()) for k in batches}


def queue_program(sc: Any, run: Run) -> Callable[[StreamingContext], None]:
    def build(ssc: StreamingContext) -> None:
        running_counts(ssc, ssc.queueStream([sc.parallelize(words, 1) for words in WORDS]), run)
    return build


def test_a_failed_batch_reruns_with_its_input_and_state_continues_from_the_snapshot(
        spark_context: Any, tmp_path: Path, backend: str, clock: ManualClock) -> None:
    """Batches 1-5 run, 5 fails; the resumed run re-runs 5 with the same queue item and state, then 6-8."""
    first = Run(fail_at=5 * INTERVAL_MS)
    run_program(spark_context, tmp_path / "ck", clock, 5, queue_program(spark_context, first), resume=False, backend=backend)
    assert sorted(first.outputs) == [1000, 2000, 3000, 4000]
    assert (tmp_path / "ck" / "offsets" / "4").exists() and not (tmp_path / "ck" / "commits" / "4").exists()
    assert sorted(os.listdir(tmp_path / "ck" / "state" / "0")) == ["2", "4", "stream.json"]  # after batches 2 and 4

    second = Run()
    run_program(spark_context, tmp_path / "ck", ManualClock(clock.now()), 3, queue_program(spark_context, second),
                resume=True, backend=backend)
    assert sorted(second.outputs) == [5000, 6000, 7000, 8000]
    assert {**first.outputs, **second.outputs} == expected_counts(range(1, 9))


def test_a_failed_batch_that_later_batches_passed_over_leaves_a_checkpoint_that_restarts(
        spark_context: Any, tmp_path: Path, backend: str, clock: ManualClock) -> None:
    """stopOnFailure off (the default): batch 3 fails and 4-7 go on, as in Spark. Batch 4's commit passes 3 over, so
    the purge and the state snapshots go on as usual, and the restart resumes from the newest snapshot. (It once left 3
    uncommitted for good: the snapshots before it and the input they need were deleted as later batches committed,
    and every restart was refused.)"""
    first = Run(fail_at=3 * INTERVAL_MS)
    options = {"spark.sql.streaming.minBatchesToRetain": 2}
    run_program(spark_context, tmp_path / "ck", clock, 7, queue_program(spark_context, first), resume=False,
                backend=backend, options=options)
    assert sorted(first.outputs) == [1000, 2000, 4000, 5000, 6000, 7000]
    logged = [sorted(int(n) for n in os.listdir(tmp_path / "ck" / log) if n.isdigit()) for log in ("offsets", "commits")]
    assert logged[0] == logged[1] and 2 in logged[1]  # no hole: batch 3 (id 2) committed as passed over

    second = Run()
    run_program(spark_context, tmp_path / "ck", ManualClock(clock.now()), 1, queue_program(spark_context, second),
                resume=True, backend=backend, options=options)
    assert second.outputs == expected_counts(range(8, 9))  # batch 3 is not run again; the state holds its words
    assert {k: v for k, v in first.outputs.items()} == {k: v for k, v in expected_counts(range(1, 8)).items() if k != 3000}


def test_batches_whose_time_passed_while_down_run_at_restart(spark_context: Any, tmp_path: Path, backend: str) -> None:
    """Resumed 3 intervals late, the context generates the 3 missed batch times before new ones, on the same grid."""
    first = Run()
    run_program(spark_context, tmp_path / "ck", ManualClock(0), 3, queue_program(spark_context, first), resume=False, backend=backend)
    second = Run()
    # Down from 3 s to 6 s: batches 4, 5 and 6 are due at once when the context starts; then one more.
    run_program(spark_context, tmp_path / "ck", ManualClock(6 * INTERVAL_MS), 1, queue_program(spark_context, second),
                resume=True, backend=backend)
    assert sorted(second.outputs) == [4000, 5000, 6000, 7000]
    assert {**first.outputs, **second.outputs} == expected_counts(range(1, 8))


def test_without_get_or_create_a_context_starts_afresh_and_moves_the_old_logs_aside(
        spark_context: Any, tmp_path: Path, backend: str) -> None:
    """Spark's rule: only getOrCreate recovers. A plain start keeps the old logs under superseded-*/ and starts at batch 0."""
    run_program(spark_context, tmp_path, ManualClock(0), 2, queue_program(spark_context, Run()), resume=False, backend=backend)
    again = Run()
    run_program(spark_context, tmp_path, ManualClock(50 * INTERVAL_MS), 2, queue_program(spark_context, again),
                resume=False, backend=backend)
    superseded = [p for p in tmp_path.iterdir() if p.name.startswith("superseded-")]
    assert len(superseded) == 1 and sorted(os.listdir(superseded[0] / "offsets")) == ["0", "1"]
    assert sorted(again.outputs) == [51_000, 52_000]
    assert again.outputs[51_000] == [("a", 1), ("b", 1)]  # the state started over


def test_resuming_with_another_kind_of_input_names_the_input_and_the_file(spark_context: Any, tmp_path: Path, backend: str) -> None:
    """The checkpoint recorded a queue stream; a program that now reads files is refused at start."""
    run_program(spark_context, tmp_path, ManualClock(0), 1, queue_program(spark_context, Run()), resume=False, backend=backend)

    def files(ssc: StreamingContext) -> None:
        running_counts(ssc, ssc.textFileStream(str(tmp_path / "in")), Run())

    with pytest.raises(CheckpointError, match=r"input 0 was 'queue' \(kind\) .* and is 'file' now") as info:
        run_program(spark_context, tmp_path, ManualClock(2000), 1, files, resume=True, backend=backend)
    assert info.value.path == str(tmp_path / "sources" / "0" / "stream.json")


def test_resuming_without_an_inputs_descriptor_is_refused_naming_it(spark_context: Any, tmp_path: Path, backend: str) -> None:
    """stream.json removed after batches were logged: getOrCreate refuses it rather than record this run's input anew."""
    run_program(spark_context, tmp_path, ManualClock(0), 1, queue_program(spark_context, Run()), resume=False, backend=backend)
    descriptor = tmp_path / "sources" / "0" / "stream.json"
    descriptor.unlink()
    with pytest.raises(CheckpointError, match=rf"^cannot resume from {tmp_path}: {descriptor} is missing, but the offsets log "
                                              "already has batches of input 0;") as info:
        run_program(spark_context, tmp_path, ManualClock(2000), 1, queue_program(spark_context, Run()), resume=True,
                    backend=backend)
    assert info.value.path == str(descriptor) and not descriptor.exists()


def test_resuming_without_a_state_descriptor_beside_snapshots_is_refused_naming_it(
        spark_context: Any, tmp_path: Path, backend: str) -> None:
    """state/0/stream.json removed beside the snapshots: the restart refuses it rather than record this run's stream anew."""
    run_program(spark_context, tmp_path, ManualClock(0), 3, queue_program(spark_context, Run()), resume=False, backend=backend)
    descriptor = tmp_path / "state" / "0" / "stream.json"
    assert sorted(os.listdir(descriptor.parent)) == ["2", "stream.json"]
    descriptor.unlink()
    with pytest.raises(CheckpointError, match=rf"^cannot restore the state of \w+ from {tmp_path}/state/0: {descriptor} is "
                                              "missing, but the directory holds snapshots;") as info:
        run_program(spark_context, tmp_path, ManualClock(4000), 1, queue_program(spark_context, Run()), resume=True,
                    backend=backend)
    assert info.value.path == str(descriptor) and not descriptor.exists()


# -- file streams: the files of each batch are logged --


def write_file(directory: Path, name: str, lines: list[str], mtime_ms: int) -> None:
    path = directory / name
    path.write_text("".join(f"{line}\n" for line in lines))
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


def test_a_file_stream_replays_a_batchs_logged_files_and_takes_files_that_arrived_while_down(
        spark_context: Any, tmp_path: Path, backend: str) -> None:
    """The re-run batch reads exactly its logged files, though a new file now fits its time too; later files follow."""
    base = (int(_time.time() * 1000) // INTERVAL_MS - 1000) * INTERVAL_MS  # a grid time in the recent past
    watched = tmp_path / "in"
    watched.mkdir()
    ck = tmp_path / "ck"

    def program(run: Run) -> Callable[[StreamingContext], None]:
        def build(ssc: StreamingContext) -> None:
            running_counts(ssc, ssc.textFileStream(str(watched)), run)
        return build

    clock = ManualClock(base)
    first = Run(fail_at=base + 2 * INTERVAL_MS)
    write_file(watched, "f1.txt", ["a", "b"], base + 500)
    write_file(watched, "f2.txt", ["a"], base + 1500)
    run_program(spark_context, ck, clock, 2, program(first), resume=False, backend=backend)
    assert first.outputs == {base + 1000: [("a", 1), ("b", 1)]}
    log = (ck / "sources" / "0" / "1").read_text().splitlines()
    assert log[0] == "v1" and json.loads(log[1])["path"].endswith("/f2.txt")

    # While down: a file modified within batch 2's time (it was not there when batch 2 was
    # planned) and one for batch 3.
    write_file(watched, "f3.txt", ["c"], base + 1700)
    write_file(watched, "f4.txt", ["b"], base + 2500)
    second = Run()
    run_program(spark_context, ck, ManualClock(base + 3 * INTERVAL_MS), 0, program(second), resume=True, backend=backend)
    assert second.outputs[base + 2000] == [("a", 2), ("b", 1)]  # exactly f2, as logged
    assert second.outputs[base + 3000] == [("a", 2), ("b", 2), ("c", 1)]  # f3 and f4, late f3 included


def test_a_file_made_again_under_a_name_read_before_a_restart_is_read_once_the_remember_window_passed(
        spark_context: Any, tmp_path: Path, backend: str) -> None:
    """After a restart the files of the log's earlier batches were remembered as taken for good: a file made again
    under one of their names was never read. They are forgotten once their modification time leaves the remember
    window (60 s), as without a restart, so the new file is read."""
    base = (int(_time.time() * 1000) // INTERVAL_MS - 1000) * INTERVAL_MS
    watched = tmp_path / "in"
    watched.mkdir()
    ck = tmp_path / "ck"
    outputs: dict[int, list[str]] = {}

    def build(ssc: StreamingContext) -> None:
        ssc.textFileStream(str(watched)).foreachRDD(
            lambda t, rdd: outputs.__setitem__(int(t.timestamp() * 1000) - base, sorted(rdd.collect())))

    write_file(watched, "data.txt", ["old"], base + 500)
    run_program(spark_context, ck, ManualClock(base), 2, build, resume=False, backend=backend)
    assert {t: rows for t, rows in outputs.items() if rows} == {1000: ["old"]}
    (watched / "data.txt").unlink()
    write_file(watched, "data.txt", ["new"], base + 70_500)  # made again 70 s later
    # Resumed at 70 s: the batches of the time it was down run first, then one more.
    run_program(spark_context, ck, ManualClock(base + 70_000), 1, build, resume=True, backend=backend)
    assert {t: rows for t, rows in outputs.items() if rows} == {1000: ["old"], 71_000: ["new"]}


# -- receivers: the write-ahead log --


def receiver_program(items: list[str], output: Callable[[StreamingContext, DStream], None]) -> Callable[[StreamingContext], None]:
    """A program whose input is an async source yielding ``items`` (a receiver, with its write-ahead log), given to ``output``."""
    async def source() -> Any:
        for item in items:
            yield item

    def build(ssc: StreamingContext) -> None:
        output(ssc, ssc.asyncIterableStream(source))
    return build


def test_an_async_source_s_records_are_logged_and_a_failed_batch_replays_them(spark_context: Any, tmp_path: Path, backend: str) -> None:
    """Records of the failed batch come back from the receiver's blocks, though the new source yields other records."""
    ck = tmp_path / "ck"

    def program(run: Run, items: list[str]) -> Callable[[StreamingContext], None]:
        return receiver_program(items, lambda ssc, stream: running_counts(ssc, stream, run))

    first = Run(fail_at=1 * INTERVAL_MS)
    run_program(spark_context, ck, ManualClock(0), 1, program(first, ["a", "b", "a"]), resume=False, backend=backend)
    assert first.outputs == {}
    blocks = sorted(int(n) for n in os.listdir(ck / "sources" / "0") if n.isdigit())
    assert blocks, "the records were written to the write-ahead log"

    second = Run()
    run_program(spark_context, ck, ManualClock(INTERVAL_MS), 1, program(second, ["c"]), resume=True, backend=backend)
    assert second.outputs == {1000: [("a", 2), ("b", 1)], 2000: [("a", 2), ("b", 1), ("c", 1)]}


def test_records_received_after_a_restart_that_followed_quiet_batches_reach_the_first_batch(
        spark_context: Any, tmp_path: Path, backend: str) -> None:
    """Quiet batches let the receiver's remembered ranges all end at its newest block: that block stays in its log, so
    the restart numbers its new blocks after it (it numbered them from 0 again, and the first batch's range ran
    backwards: its records were lost)."""
    ck = tmp_path / "ck"

    def program(run: Run, items: list[str]) -> Callable[[StreamingContext], None]:
        # No state: the receiver remembers one batch.
        return receiver_program(items, lambda ssc, stream: stream.foreachRDD(run.output))

    first = Run()
    run_program(spark_context, ck, ManualClock(0), 4, program(first, ["a", "b"]), resume=False, backend=backend)
    assert first.outputs == {1000: ["a", "b"], 2000: [], 3000: [], 4000: []}
    second = Run()
    run_program(spark_context, ck, ManualClock(4 * INTERVAL_MS), 1, program(second, ["c"]), resume=True, backend=backend)
    assert second.outputs == {5000: ["c"]}


def test_a_window_longer_than_the_retained_batches_is_whole_after_a_restart(spark_context: Any, tmp_path: Path,
                                                                             backend: str) -> None:
    """A plain window of 5 batches with minBatchesToRetain 2: the log keeps the entries the window still reaches back
    to, so the window after a restart holds all its batches (the oldest were purged, their input counted empty)."""
    ck, sc = tmp_path / "ck", spark_context
    retain = {"spark.sql.streaming.minBatchesToRetain": "2"}

    def program(run: Run) -> Callable[[StreamingContext], None]:
        def build(ssc: StreamingContext) -> None:
            ssc.queueStream([sc.parallelize([w], 1) for w in "abcdefgh"], default=sc.parallelize([], 1)) \
                .window(5, 1).foreachRDD(run.output)
        return build

    first, second = Run(), Run()
    run_program(sc, ck, ManualClock(0), 5, program(first), resume=False, backend=backend, options=retain)
    assert first.outputs[5000] == list("abcde")
    run_program(sc, ck, ManualClock(5000), 1, program(second), resume=True, backend=backend, options=retain)
    assert second.outputs == {6000: list("bcdef")}


def windows_program(sc: Any, run: Run, windows: Run) -> Callable[[StreamingContext], None]:
    """An inverse-reduced window (five slides, checkpointed every 2 batches) and a plain window's counts over WORDS."""
    from operator import add, sub

    def build(ssc: StreamingContext) -> None:
        pairs = ssc.queueStream([sc.parallelize(words, 1) for words in WORDS]).map(lambda w: (w, 1))
        reduced = pairs.reduceByKeyAndWindow(add, sub, 5, 1)  # five slides: incremental
        reduced.checkpoint(2)
        reduced.foreachRDD(run.output)
        pairs.window(3, 1).countByValue().foreachRDD(windows.output)
    return build


@pytest.fixture(scope="module")
def windows_reference(spark_context: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run]:
    """The windows program's uninterrupted run of 8 batches (on asyncio, once for both backends' restarts)."""
    reference, reference_windows = Run(), Run()
    run_program(spark_context, tmp_path_factory.mktemp("windows-reference"), ManualClock(0), 8,
                windows_program(spark_context, reference, reference_windows), resume=False)
    return reference, reference_windows


def test_windows_over_batches_before_the_restart_are_rebuilt_from_the_logged_input(
        spark_context: Any, tmp_path: Path, backend: str, clock: ManualClock, windows_reference: tuple[Run, Run]) -> None:
    """An inverse-reduced window (state snapshot plus the batches leaving it) and a plain window both match an uninterrupted run."""
    reference, reference_windows = windows_reference
    first, first_windows = Run(fail_at=6 * INTERVAL_MS), Run()
    run_program(spark_context, tmp_path / "ck", clock, 6, windows_program(spark_context, first, first_windows), resume=False,
                backend=backend)
    second, second_windows = Run(), Run()
    run_program(spark_context, tmp_path / "ck", ManualClock(clock.now()), 2, windows_program(spark_context, second, second_windows),
                resume=True, backend=backend)
    assert sorted(second.outputs) == [6000, 7000, 8000]
    assert {**first.outputs, **second.outputs} == reference.outputs
    assert {**first_windows.outputs, **second_windows.outputs} == reference_windows.outputs


def test_save_as_text_files_keeps_a_complete_batch_and_redoes_one_a_crash_left_half_written(
        spark_context: Any, tmp_path: Path, backend: str, clock: ManualClock) -> None:
    """A replayed batch finds its directory: with _SUCCESS it is kept (pyspark's skip); without, it is saved again whole."""
    prefix = tmp_path / "out"
    complete = tmp_path / "out-1000"
    complete.mkdir()
    (complete / "part-00000").write_text("from an earlier run\n")
    (complete / "_SUCCESS").write_text("")
    partial = tmp_path / "out-2000"
    (partial / "_temporary" / "0").mkdir(parents=True)
    (partial / "part-00000").write_text("half\n")

    def build(ssc: StreamingContext) -> None:
        ssc.queueStream([spark_context.parallelize(["x", "y"], 1), spark_context.parallelize(["z"], 1)]) \
            .saveAsTextFiles(str(prefix))

    ssc = StreamingContext(spark_context, 1, clock=clock)
    build(ssc)
    anyio.run(drive, ssc, clock, 2, backend=backend)

    def contents(directory: Path) -> list[str]:
        return sorted(line for part in directory.glob("part-*") for line in part.read_text().splitlines())

    assert contents(complete) == ["from an earlier run"]
    assert contents(partial) == ["z"] and (partial / "_SUCCESS").exists() and not (partial / "_temporary").exists()


def test_a_restart_clears_what_writers_killed_midway_left(spark_context: Any, tmp_path: Path, backend: str) -> None:
    """Hidden temporary entries of an input log and an unfinished state snapshot are removed when the checkpoint is opened."""
    run_program(spark_context, tmp_path, ManualClock(0), 2, queue_program(spark_context, Run()), resume=False, backend=backend)
    partial_snapshot = tmp_path / "state" / "0" / ".9.deadbeef.tmp"
    (partial_snapshot / "part-00000").parent.mkdir(parents=True)
    (partial_snapshot / "part-00000").write_bytes(b"half")
    partial_entry = tmp_path / "sources" / "0" / ".stream.json.cafe.tmp"
    partial_entry.write_text("{")
    run_program(spark_context, tmp_path, ManualClock(2 * INTERVAL_MS), 1, queue_program(spark_context, Run()), resume=True, backend=backend)
    assert not partial_snapshot.exists() and not partial_entry.exists()
