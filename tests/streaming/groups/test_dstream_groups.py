"""mapGroupsWithState on Spark with a manual clock: processing-time timeouts per §7.2, progress, restart, errors."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import anyio
import pytest

import streaming.dstream._keyed_state as keyed_state_module
from scheduler import InvalidPipelineError, ManualClock, Milliseconds
from streaming import StreamingContext
from streaming.state import EVENT_TIME_WITHOUT_WATERMARK, GroupState, StateStoreProvider
from tests.cluster import MASTER_VARIABLE
from tests.streaming.groups.test_store_private import plant
from tests.support import run_dstream_batches

pytestmark = pytest.mark.spark

INTERVAL_MS = 1000


def heartbeat(device: str, beats: Iterator[str], state: GroupState) -> tuple[str, str, int]:
    """Online with a count while heard; offline once 2.5 s of batch time pass without a beat."""
    if state.hasTimedOut:
        state.remove()
        return (device, "offline", state.getCurrentProcessingTimeMs())
    state.update((state.getOption or 0) + sum(1 for _ in beats))
    state.setTimeoutDuration(2_500)
    return (device, "online", state.get)


def run(sc: Any, directory: Path | str, batches: list[list[str]], *, resume: bool = False, clock_start: int = 0,
        drive: int | None = None, partitions: int = 2) -> tuple[dict[int, list[Any]], list[Any]]:
    """Run the heartbeat program over the queue ``batches`` for ``drive`` batches (default: all of them)."""
    outputs: dict[int, list[Any]] = {}
    clock = ManualClock(clock_start)

    def setup() -> StreamingContext:
        ssc = StreamingContext(sc, INTERVAL_MS / 1000, clock=clock)  # a SparkContext or a Connect session
        spark = ssc.sparkContext
        stream = ssc.queueStream([spark.parallelize(b, 2) for b in batches], oneAtATime=True, default=spark.emptyRDD())
        status = stream.map(lambda d: (d, d)).mapGroupsWithState(heartbeat, "ProcessingTimeTimeout",
                                                                 numPartitions=partitions)
        status.foreachRDD(lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
        ssc.checkpoint(str(directory))
        return ssc

    ssc = StreamingContext.getOrCreate(str(directory), setup, restoreGraph=False) if resume else setup()
    assert run_dstream_batches(ssc, clock, len(batches) if drive is None else drive) == []
    return outputs, ssc.runtime.recent_progress


def test_processing_time_timeouts_fire_in_the_first_batch_strictly_after_them(spark_context: Any, tmp_path: Path) -> None:
    """x beats at 1 s and 2 s (timeout 4.5 s): offline at 5 s; y at 1 s (timeout 3.5 s): offline at 4 s; empty batches run."""
    outputs, progress = run(spark_context, tmp_path / "ck", [["x", "y"], ["x"], [], [], [], []])
    assert outputs == {
        1000: [("x", "online", 1), ("y", "online", 1)],
        2000: [("x", "online", 2)],
        3000: [],
        4000: [("y", "offline", 4000)],
        5000: [("x", "offline", 5000)],
        6000: [],
    }
    operators = [p.state_operators for p in progress]
    assert all(len(ops) == 1 and ops[0].operator_name == "mapGroupsWithState" for ops in operators)
    assert [ops[0].num_rows_total for ops in operators] == [2, 2, 2, 1, 0, 0]
    assert [ops[0].custom_metrics["numTimeoutsFired"] for ops in operators] == [0, 0, 0, 1, 1, 0]
    assert [ops[0].num_state_store_instances for ops in operators] == [2] * 6
    assert progress[0].json_value()["stateOperators"][0]["numRowsUpdated"] == 2


def test_the_state_survives_a_restart_from_the_checkpoint(spark_context: Any, tmp_path: Path) -> None:
    """Stopped after two batches, resumed with getOrCreate (asking for 3 partitions; the checkpoint's 2 are kept, or
    the keys would be looked for in the wrong stores): the count goes on and the timeout still fires."""
    directory = tmp_path / "ck"
    beats = [["x"], ["x"], ["x"], [], [], []]
    first, _ = run(spark_context, directory, beats, drive=2)
    assert first == {1000: [("x", "online", 1)], 2000: [("x", "online", 2)]}
    second, progress = run(spark_context, directory, beats, resume=True, clock_start=2000, drive=4, partitions=3)
    assert {p.state_operators[0].num_shuffle_partitions for p in progress} == {2}
    assert second == {3000: [("x", "online", 3)], 4000: [], 5000: [], 6000: [("x", "offline", 6000)]}


def test_the_tasks_never_read_a_working_copy_planted_at_the_old_shared_path(
        spark_context: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies planted for both partitions where earlier releases' tasks looked (<tmp>/aiodstream-state/<hash of the
    checkpoint>/...), at the first batch's version: exact counts, the payload never runs, and from batch 1 on every
    partition reuses its own working copy (a hit in the progress, no rebuild) on a single executor."""
    directory, marker = tmp_path / "ck", tmp_path / "ran"
    tag = hashlib.sha256(str((directory / "stateful").resolve()).encode()).hexdigest()[:16]
    planted = Path(tempfile.gettempdir()) / "aiodstream-state" / tag
    try:
        for partition in (0, 1):
            plant(planted / "0" / f"{partition}.sqlite", 0, marker)
        outputs, progress = run(spark_context, directory, [["x", "y"], ["x"], ["x"]])
    finally:
        shutil.rmtree(planted)
    assert outputs == {1000: [("x", "online", 1), ("y", "online", 1)], 2000: [("x", "online", 2)],
                       3000: [("x", "online", 3)]}
    assert not marker.exists()
    metrics = [p.state_operators[0].custom_metrics for p in progress]
    hits = [m["loadedMapCacheHitCount"] for m in metrics]
    misses = [m["loadedMapCacheMissCount"] for m in metrics]
    assert hits[0] == misses[0] == 0  # version 0 starts empty
    assert [h + m for h, m in zip(hits[1:], misses[1:], strict=True)] == [2, 2]
    if not os.environ.get(MASTER_VARIABLE):  # one executor: every later load finds its partition's copy
        assert misses == [0, 0, 0]


def test_the_state_store_lives_on_a_remote_file_system(spark_context: Any, ftp_server: Any, tmp_path: Path) -> None:
    """A checkpoint on ftp:// (Hadoop on the driver, fsspec in the tasks): the tasks write the state store there, a
    fresh store reads it back from there alone, and a restart from it goes on as from a local checkpoint."""
    uri = ftp_server.uri("ck")
    beats = [["x"], ["x"], ["x"], [], [], []]
    first, _ = run(spark_context, uri, beats, drive=2)
    assert first == {1000: [("x", "online", 1)], 2000: [("x", "online", 2)]}
    state = ftp_server.root / "ck" / "stateful" / "state" / "0"
    assert sorted(p.name for p in state.iterdir()) == ["0", "1", "operator", "partitions"]
    assert {p.name for p in (state / "0").iterdir()} == {p.name for p in (state / "1").iterdir()} == {"1.delta", "2.delta"}
    held = {}
    for partition in (0, 1):  # a store with no local copy loads version 2 from the server
        store = StateStoreProvider(f"{uri}/stateful", 0, partition, local_dir=tmp_path / "fresh").load(2)
        held.update({pickle.loads(key): (pickle.loads(value), timeout) for key, (value, timeout) in store})
        store.abort()
    assert held == {"x": (2, 2000 + 2_500)}
    second, _ = run(spark_context, uri, beats, resume=True, clock_start=2000, drive=4)
    assert second == {3000: [("x", "online", 3)], 4000: [], 5000: [], 6000: [("x", "offline", 6000)]}


def test_without_a_checkpoint_or_a_watermark_the_start_is_refused(spark_context: Any) -> None:
    """No checkpoint directory: Spark's DStream message; an event-time timeout without withWatermark: Spark's message."""
    ssc = StreamingContext(spark_context, 1, clock=ManualClock(0))
    ssc.queueStream([[("a", 1)]]).mapGroupsWithState(heartbeat, "ProcessingTimeTimeout").pprint()
    with pytest.raises(InvalidPipelineError, match="The checkpoint directory has not been set"):
        ssc.start()
    ssc.stop(stopSparkContext=False)


def sessions(key: str, values: Iterator[Any], state: GroupState) -> list[Any]:
    """One output per key and batch; the state times out far ahead (removed when it does)."""
    if state.hasTimedOut:
        state.remove()
        return []
    state.update(1)
    state.setTimeoutTimestamp(10**9)
    return [("total", key)]


def test_an_event_time_timeout_after_another_stateful_operator_is_refused(spark_context: Any, tmp_path: Path) -> None:
    """flatMapGroupsWithState emits no watermark (Spark's rule): a second one with EventTimeTimeout has none."""
    ssc = StreamingContext(spark_context, 1, clock=ManualClock(0))
    first = ssc.queueStream([[("a", 60_000)]]).withWatermark(lambda e: e[1], "5 seconds") \
        .map(lambda e: (e[0], e)).flatMapGroupsWithState(sessions, "append", "EventTimeTimeout")
    first.flatMapGroupsWithState(sessions, "append", "EventTimeTimeout").pprint()
    ssc.checkpoint(str(tmp_path / "ck"))
    with pytest.raises(InvalidPipelineError) as info:
        ssc.start()
    assert str(info.value) == EVENT_TIME_WITHOUT_WATERMARK
    ssc.stop(stopSparkContext=False)


def test_watermarked_inputs_with_different_event_time_functions_need_event_time(spark_context: Any, tmp_path: Path) -> None:
    """A union of two watermarked streams of different shapes: refused at start without eventTime=, accepted with it;
    two copies of one function are one function."""
    def program(event_time: Any, views_time: Any = lambda v: v["at"]) -> StreamingContext:
        ssc = StreamingContext(spark_context, 1, clock=ManualClock(0))
        clicks = ssc.queueStream([[("u1", 60_000)]]).withWatermark(lambda c: c[1], "5 seconds").map(lambda c: (c[0], c))
        views = ssc.queueStream([[{"user": "u2", "at": 60_000}]]).withWatermark(views_time, "5 seconds") \
            .map(lambda v: (v["user"], v))
        clicks.union(views).flatMapGroupsWithState(sessions, "append", "EventTimeTimeout", eventTime=event_time).pprint()
        ssc.checkpoint(str(tmp_path / "ck"))
        return ssc

    ssc = program(None)
    with pytest.raises(InvalidPipelineError) as info:
        ssc.start()
    assert str(info.value) == (
        "flatMapGroupsWithState drops late values by their event time, and its input comes from 2 watermarked streams "
        "(withWatermark) with different eventTime functions, so which one gives a value's event time is unknown: pass "
        "eventTime= to flatMapGroupsWithState, a function of a value giving its event time (a datetime or epoch "
        "milliseconds) whichever input it came from")
    ssc.stop(stopSparkContext=False)
    for ssc in (program(lambda v: v["at"] if isinstance(v, dict) else v[1]), program(None, views_time=lambda c: c[1])):
        ssc.start()
        ssc.stop(stopSparkContext=False)


def _failing_while(marker: Path) -> Any:
    """A counting state function that raises on x's total of 2 while ``marker`` exists (tasks run in other processes:
    the file is what they share)."""
    path = str(marker)

    def flaky(device: str, values: Iterator[str], state: GroupState) -> tuple[str, int]:
        import os

        total = (state.getOption or 0) + sum(1 for _ in values)
        if total == 2 and device == "x" and os.path.exists(path):
            raise RuntimeError("flaky function")
        state.update(total)
        return (device, total)

    return flaky


def test_a_raising_function_fails_its_batch_and_a_restart_reruns_it_with_the_state_intact(
        spark_context: Any, tmp_path: Path) -> None:
    """The function raises in batch 2 (while a marker file exists): that batch fails, nothing of it is committed;
    after a restart it runs again from the state batch 1 left, and the counts come out as if nothing had failed."""
    directory, marker = tmp_path / "ck", tmp_path / "fail-at-2"
    marker.touch()
    beats = [["x"], ["x", "y"], ["x"], []]
    flaky = _failing_while(marker)

    def program(drive: int, resume: bool, clock_start: int) -> tuple[dict[int, list[Any]], list[BaseException]]:
        outputs: dict[int, list[Any]] = {}
        clock = ManualClock(clock_start)

        def setup() -> StreamingContext:
            ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
            stream = ssc.queueStream([spark_context.parallelize(b, 2) for b in beats], oneAtATime=True,
                                     default=spark_context.emptyRDD())
            stream.map(lambda d: (d, d)).mapGroupsWithState(flaky, numPartitions=2).foreachRDD(
                lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
            ssc.checkpoint(str(directory))
            return ssc

        ssc = StreamingContext.getOrCreate(str(directory), setup, restoreGraph=False) if resume else setup()
        return outputs, run_dstream_batches(ssc, clock, drive)

    first, errors = program(2, resume=False, clock_start=0)
    assert first == {1000: [("x", 1)]}  # batch 2000 failed: its output never ran
    assert errors and "flaky function" in str(errors[0])
    marker.unlink()
    second, errors = program(2, resume=True, clock_start=2000)
    assert errors == []
    assert second == {2000: [("x", 2), ("y", 1)], 3000: [("x", 3)], 4000: []}


def test_output_modes_are_checked_as_spark_checks_them(spark_context: Any) -> None:
    """append and update (any case) are accepted; complete gets Spark's requirement; anything else Spark's unknown-mode error."""
    ssc = StreamingContext(spark_context, 1, clock=ManualClock(0))
    pairs = ssc.queueStream([[("a", 1)]])
    pairs.flatMapGroupsWithState(heartbeat, "Update")
    with pytest.raises(InvalidPipelineError, match=r"^requirement failed: The output mode of function should be append or "
                                                   r"update$"):
        pairs.flatMapGroupsWithState(heartbeat, "Complete")
    with pytest.raises(InvalidPipelineError, match=r"^\[STREAMING_OUTPUT_MODE\.INVALID\] Invalid streaming output mode: "
                                                   r"sometimes\. Accepted output modes are 'Append', 'Complete', 'Update'\. "
                                                   r"SQLSTATE: 42KDE$"):
        pairs.flatMapGroupsWithState(heartbeat, "sometimes")
    ssc.stop(stopSparkContext=False)


def count_values(key: str, values: Iterator[int], state: GroupState) -> Iterator[tuple[str, int]]:
    """The running count of a key."""
    state.update((state.getOption or 0) + sum(values))
    yield (key, state.get)


@pytest.mark.parametrize("input_partitions", [2, 1])
@pytest.mark.parametrize("reads_state", [True, False])
def test_the_operators_own_output_runs_last_and_a_spark_job_only_for_partitions_no_output_computed(
        spark_context: Any, tmp_path: Path, reads_state: bool, input_partitions: int) -> None:
    """The user's output is operation 0, the operator's own 1: no Spark job if the user's collect ran all partitions, else
    one (after a shuffle, or in the single input partition's task)."""
    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = ssc.queueStream([spark_context.parallelize(b, input_partitions) for b in (["a", "b", "c"], ["a"])],
                             oneAtATime=True)
    counts = stream.map(lambda k: (k, 1)).flatMapGroupsWithState(count_values, "update", "NoTimeout", numPartitions=2)
    groups: list[str] = []
    seen: dict[int, list[Any]] = {}

    def output(time: Any, rdd: Any) -> None:
        groups.append(rdd.context.getLocalProperty("spark.jobGroup.id"))
        seen[len(seen)] = sorted(rdd.collect())

    (counts if reads_state else stream).foreachRDD(output)
    ssc.checkpoint(str(tmp_path / "ck"))
    assert run_dstream_batches(ssc, clock, 2) == []
    assert [g.rsplit("-", 1)[1] for g in groups] == ["0", "0"]
    own = [list(spark_context.statusTracker().getJobIdsForGroup(g.rsplit("-", 1)[0] + "-1")) for g in groups]
    if reads_state:
        assert seen == {0: [("a", 1), ("b", 1), ("c", 1)], 1: [("a", 2)]}
        assert own == [[], []]
    else:
        assert seen == {0: ["a", "b", "c"], 1: ["a"]}
        assert all(len(jobs) == 1 for jobs in own)
    progress = ssc.runtime.recent_progress
    assert [p.state_operators[0].num_rows_total for p in progress] == [3, 3]
    assert [p.state_operators[0].num_rows_updated for p in progress] == [3, 1]


def state_partitions(sc: Any, keys: list[str], partitions: int) -> dict[str, int]:
    """Each key's state partition (pyspark's ``portable_hash``, computed in a task: it needs the workers' hash seed)."""
    from pyspark.rdd import portable_hash

    return dict(sc.parallelize(keys, 1).map(lambda k: (k, portable_hash(k) % partitions)).collect())


def state_partition_order(sc: Any, keys: list[str], partitions: int) -> list[str]:
    """``keys`` as the operator's rows come: by state partition, then by pickled key."""
    partition = state_partitions(sc, keys, partitions)
    return sorted(keys, key=lambda k: (partition[k], pickle.dumps(k, protocol=5)))


def run_counts(sc: Any, directory: Path, batches: list[list[str]], *, input_partitions: int,
               partitions: int) -> tuple[list[list[list[Any]]], list[list[int]], list[Any]]:
    """The running count of ``batches`` (input in ``input_partitions``): each batch's rows by RDD partition (glom), the
    stages of its user output's job, and the progress."""
    clock = ManualClock(0)
    ssc = StreamingContext(sc, INTERVAL_MS / 1000, clock=clock)
    stream = ssc.queueStream([sc.parallelize(b, input_partitions) for b in batches], oneAtATime=True)
    counts = stream.map(lambda k: (k, 1)).flatMapGroupsWithState(count_values, "update", "NoTimeout",
                                                                 numPartitions=partitions)
    rows: list[list[list[Any]]] = []
    stages: list[list[int]] = []

    def output(rdd: Any) -> None:
        group = rdd.context.getLocalProperty("spark.jobGroup.id")
        rows.append(rdd.glom().collect())
        tracker = rdd.context.statusTracker()
        stages.append([len(tracker.getJobInfo(job).stageIds) for job in sorted(tracker.getJobIdsForGroup(group))])

    counts.foreachRDD(output)
    ssc.checkpoint(str(directory))
    assert run_dstream_batches(ssc, clock, len(batches)) == []
    return rows, stages, ssc.runtime.recent_progress


@pytest.mark.parametrize(("initial", "error", "message"), [
    ([("a", 1), ("a", 2)], ValueError, "de-duplicate the initial state before passing it"),
    ([("a", None)], ValueError, "the initial state of key 'a' is None"),
    ([("a", 1), "b"], InvalidPipelineError, r"initialState must hold \(key, state\) pairs, got 'b'"),
    ((pair for pair in [("a", 1)]), InvalidPipelineError, r"initialState must be an RDD or a list .*pass list\(\.\.\.\)"),
    ([(["x"], 1)], InvalidPipelineError, r"initialState's key \['x'\] cannot be hashed"),
])
def test_a_bad_initial_state_list_is_refused_at_the_call(spark_context: Any, initial: list[Any], error: type,
                                                         message: str) -> None:
    """Not by the first batch, inside a Spark job, and again by every batch after it."""
    ssc = StreamingContext(spark_context, 1)
    stream = ssc.queueStream([[]], default=[]).map(lambda k: (k, 1))
    with pytest.raises(error, match=message):
        stream.mapGroupsWithState(heartbeat, "NoTimeout", initialState=initial)


def test_initial_state_pairs_may_be_lists_as_before(spark_context: Any, tmp_path: Path) -> None:
    """Two-item lists (from JSON, say) are pairs, as on the RDD path."""
    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = ssc.queueStream([spark_context.parallelize(["a", "b"], 1)], oneAtATime=True)
    counts = stream.map(lambda k: (k, 1)).flatMapGroupsWithState(count_values, "update", "NoTimeout",
                                                                 initialState=[["a", 10], ("b", 2)])
    rows: list[Any] = []
    counts.foreachRDD(lambda rdd: rows.append(sorted(rdd.collect())))
    ssc.checkpoint(str(tmp_path / "ck"))
    assert run_dstream_batches(ssc, clock, 1) == []
    assert rows == [[("a", 11), ("b", 3)]]


def test_nan_keys_are_one_group_with_one_state_as_spark_groups_them(spark_context: Any, tmp_path: Path) -> None:
    """Each NaN of the input is its own object, and Python 3.10+ hashes a NaN by its id: the state partition is chosen by
    a hash that takes every NaN as one key (Spark groups NaN as one), so the count grows 4, 8, 12 in one group."""
    batches = [[float("nan")] * 4, [float("nan")] * 4, [float("nan")] * 4]
    rows, _, _ = run_counts(spark_context, tmp_path / "ck", batches, input_partitions=2, partitions=4)
    counts = [[count for part in batch for _, count in part] for batch in rows]
    assert counts == [[4], [8], [12]]


def test_a_single_partition_input_runs_every_state_partition_in_its_own_task(spark_context: Any, tmp_path: Path) -> None:
    """An input of one partition: one task, one stage, no shuffle; the rows and every partition's store as with a shuffle."""
    batches = [["a", "b", "c", "d", "e", "f"], ["a", "c"], []]
    rows, stages, progress = run_counts(spark_context, tmp_path / "ck", batches, input_partitions=1, partitions=4)
    assert [len(parts) for parts in rows] == [1, 1, 1]
    assert stages == [[1], [1], [1]]  # the state in the input's task: no shuffle stage
    assert rows[0][0] == [(k, 1) for k in state_partition_order(spark_context, list("abcdef"), 4)]
    assert rows[1][0] == [(k, 2) for k in state_partition_order(spark_context, ["a", "c"], 4)] and rows[2][0] == []
    assert [p.state_operators[0].num_rows_total for p in progress] == [6, 6, 6]
    assert [p.state_operators[0].num_state_store_instances for p in progress] == [4, 4, 4]
    assert sorted(os.listdir(tmp_path / "ck" / "stateful" / "state" / "0")) == ["0", "1", "2", "3", "operator", "partitions"]


def test_after_a_large_batch_a_single_partition_input_is_spread_over_the_tasks(spark_context: Any, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that gave the state SERIAL_INPUT_ROWS pairs (6 here) or more: the next single-partition batch is shuffled
    into Spark's parallelism of tasks (2 stages); once a batch is small again, one task. The rows are the same."""
    monkeypatch.setattr(keyed_state_module, "SERIAL_INPUT_ROWS", 6)
    batches = [list("abcdef"), ["a", "c"], ["b"], []]
    rows, stages, progress = run_counts(spark_context, tmp_path / "ck", batches, input_partitions=1, partitions=4)
    assert [len(parts) for parts in rows] == [1, 2, 1, 1]
    assert stages == [[1], [2], [1], [1]]
    flat = [[row for part in batch for row in part] for batch in rows]
    assert flat == [[(k, 1) for k in state_partition_order(spark_context, list("abcdef"), 4)],
                    [(k, 2) for k in state_partition_order(spark_context, ["a", "c"], 4)], [("b", 2)], []]
    assert [p.state_operators[0].num_rows_total for p in progress] == [6, 6, 6, 6]


def test_state_partitions_past_spark_s_parallelism_share_its_tasks_in_order(spark_context: Any, tmp_path: Path) -> None:
    """8 state partitions on local[2]: 2 tasks of 4 partitions each (a contiguous block), rows in the partitions' order."""
    assert spark_context.defaultParallelism == 2
    keys = [f"k{i}" for i in range(40)]
    rows, stages, progress = run_counts(spark_context, tmp_path / "ck", [keys, keys[:10]], input_partitions=3,
                                        partitions=8)
    assert [len(parts) for parts in rows] == [2, 2]
    assert stages == [[2], [2]]
    assert [row for part in rows[0] for row in part] == [(k, 1) for k in state_partition_order(spark_context, keys, 8)]
    partition = state_partitions(spark_context, keys, 8)
    assert {partition[k] for k, _ in rows[0][0]} == {0, 1, 2, 3} and {partition[k] for k, _ in rows[0][1]} == {4, 5, 6, 7}
    assert [p.state_operators[0].num_state_store_instances for p in progress] == [8, 8]
    assert [p.state_operators[0].num_rows_updated for p in progress] == [40, 10]


def test_state_partitions_sharing_tasks_survive_a_restart(spark_context: Any, tmp_path: Path) -> None:
    """4 state partitions in 2 tasks, stopped after two batches and resumed: the count goes on and the timeout fires."""
    directory = tmp_path / "ck"
    beats = [["x", "y", "z", "w"], ["x"], ["x"], [], [], []]
    first, _ = run(spark_context, directory, beats, drive=2, partitions=4)
    assert first == {1000: sorted((d, "online", 1) for d in "xyzw"), 2000: [("x", "online", 2)]}
    second, progress = run(spark_context, directory, beats, resume=True, clock_start=2000, drive=4, partitions=4)
    assert {p.state_operators[0].num_state_store_instances for p in progress} == {4}
    assert second == {3000: [("x", "online", 3)], 4000: sorted((d, "offline", 4000) for d in "yzw"), 5000: [],
                      6000: [("x", "offline", 6000)]}


def _failing_times(marker: Path) -> Any:
    """A counting state function that raises while ``marker`` holds a positive count of failures left (each raise takes
    one; tasks run in other processes, so the count lives in the file). Batch 2000's x (its total 2) is the one."""
    path = str(marker)

    def flaky(device: str, values: Iterator[str], state: GroupState) -> tuple[str, int]:
        total = (state.getOption or 0) + sum(1 for _ in values)
        if total == 2 and device == "x":
            with open(path) as file:
                left = int(file.read() or 0)
            if left > 0:
                with open(path, "w") as file:
                    file.write(str(left - 1))
                raise RuntimeError("flaky function")
        state.update(total)
        return (device, total)

    return flaky


def _flaky_program(sc: Any, directory: Path, marker: Path, beats: list[list[str]], drive: int, *, resume: bool = False,
                   clock_start: int = 0) -> tuple[dict[int, list[Any]], dict[int, list[str]]]:
    """The flaky counter over queued ``beats`` on a checkpoint, under the DStream semantics (a failed batch does not stop
    the context): the output's batches, and the failure reasons of each failed batch's output operations."""
    outputs: dict[int, list[Any]] = {}
    failures: dict[int, list[str]] = {}
    clock = ManualClock(clock_start)
    flaky = _failing_times(marker)

    class Failures:
        def onBatchCompleted(self, event: Any) -> None:
            for operation in event.batchInfo().outputOperationInfos().values():
                if operation.failureReason() is not None:
                    failures.setdefault(operation.batchTime().milliseconds(), []).append(operation.failureReason())

    def setup() -> StreamingContext:
        ssc = StreamingContext(sc, INTERVAL_MS / 1000, clock=clock)
        stream = ssc.queueStream([sc.parallelize(b, 2) for b in beats], oneAtATime=True, default=sc.emptyRDD())
        stream.map(lambda d: (d, d)).mapGroupsWithState(flaky, numPartitions=2).foreachRDD(
            lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
        ssc.checkpoint(str(directory))
        return ssc

    ssc = StreamingContext.getOrCreate(str(directory), setup, restoreGraph=False) if resume else setup()
    ssc.addStreamingListener(Failures())
    run_dstream_batches(ssc, clock, drive)
    return outputs, failures


def test_a_batch_whose_state_failed_runs_it_again_before_the_next_batch_as_spark_recomputes_a_lost_state(
        spark_context: Any, tmp_path: Path) -> None:
    """The function fails twice in batch 2000 (in the output's job, then in the operator's own): its state version is
    never committed. Batch 3000 runs batch 2000's state again first (its outputs stay lost, as a failed batch's are in
    Spark) and goes on from it, where it used to fail loading the missing version, and every batch after it; a
    restart then finds batch 2000 passed over and the state exact."""
    directory, marker = tmp_path / "ck", tmp_path / "failures-left"
    marker.write_text("2")
    beats = [["x"], ["x", "y"], ["x"], ["y"]]
    outputs, failures = _flaky_program(spark_context, directory, marker, beats, 4)
    assert marker.read_text() == "0"
    assert list(failures) == [2000] and len(failures[2000]) == 2  # the user's output and the operator's own
    assert all("flaky function" in reason for reason in failures[2000])
    assert outputs == {1000: [("x", 1)], 3000: [("x", 3)], 4000: [("y", 2)]}  # y's 1 in batch 2000 counted
    outputs, failures = _flaky_program(spark_context, directory, marker, [*beats, ["x", "y"]], 1, resume=True,
                                       clock_start=4000)
    assert failures == {}
    assert outputs == {5000: [("x", 4), ("y", 3)]}  # nothing run again: the next batch of the queue, on exact state


def test_a_batch_whose_state_keeps_failing_fails_the_later_ones_until_a_restart_runs_them_in_order(
        spark_context: Any, tmp_path: Path) -> None:
    """The function fails in batch 2000 every time it runs again: batches 3000 and 4000 fail too, each
    naming batch 2000 and its error; none commits, so a restart (the function healed) runs 2000 to 4000 again in
    order, with their outputs, on exact state."""
    directory, marker = tmp_path / "ck", tmp_path / "failures-left"
    marker.write_text("100")
    beats = [["x"], ["x", "y"], ["x"], ["y"]]
    outputs, failures = _flaky_program(spark_context, directory, marker, beats, 4)
    assert outputs == {1000: [("x", 1)]}
    assert marker.read_text() == "94"  # each of the three batches' two jobs ran batch 2000's state once
    assert list(failures) == [2000, 3000, 4000]
    assert all(len(reasons) == 2 for reasons in failures.values())
    for time in (3000, 4000):
        for reason in failures[time]:
            assert (f"StateCatchUpError: batch {time} ms cannot load the state of mapGroupsWithState: batch 2000 ms "
                    "failed before its state version was committed, and running its state again failed too: ") in reason
            assert "RuntimeError: flaky function" in reason  # the cause, chained
    marker.write_text("0")  # healed
    outputs, failures = _flaky_program(spark_context, directory, marker, beats, 3, resume=True, clock_start=4000)
    assert failures == {}
    assert {time: rows for time, rows in outputs.items() if time <= 4000} == {
        2000: [("x", 2), ("y", 1)], 3000: [("x", 3)], 4000: [("y", 2)]}


def test_a_batch_that_failed_at_generation_before_the_operator_gets_its_state_computed_by_the_next(
        spark_context: Any, tmp_path: Path) -> None:
    """A ``transform`` before the operator raises while batch 2000 is generated (once): no state task ever ran for it.
    Batch 3000 generates batch 2000's state again and runs it first, as Spark's lineage computes a state RDD its
    batch never made (updateStateByKey's), so y's beat of batch 2000 counts and every later batch goes on."""
    outputs: dict[int, list[Any]] = {}
    failures: dict[int, list[str]] = {}
    clock = ManualClock(0)
    raised: list[int] = []

    def flaky_transform(time: Any, rdd: Any) -> Any:
        ms = int(time.timestamp() * 1000)
        if ms == 2000 and not raised:
            raised.append(ms)
            raise RuntimeError("transform fails once")
        return rdd

    class Failures:
        def onBatchCompleted(self, event: Any) -> None:
            for operation in event.batchInfo().outputOperationInfos().values():
                if operation.failureReason() is not None:
                    failures.setdefault(operation.batchTime().milliseconds(), []).append(operation.failureReason())

    beats = [["x"], ["x", "y"], ["x"], ["y"]]
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = ssc.queueStream([spark_context.parallelize(b, 2) for b in beats], oneAtATime=True,
                             default=spark_context.emptyRDD())
    counts = stream.transform(flaky_transform).map(lambda d: (d, d)).mapGroupsWithState(
        lambda device, values, state: (state.update((state.getOption or 0) + sum(1 for _ in values)), (device, state.get))[1],
        numPartitions=2)
    counts.foreachRDD(lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
    ssc.checkpoint(str(tmp_path / "ck"))
    ssc.addStreamingListener(Failures())
    errors = run_dstream_batches(ssc, clock, 4)
    assert raised == [2000] and errors and "transform fails once" in str(errors[0])
    assert failures == {}  # a generation failure has no output operation: it is reported, not completed
    assert outputs == {1000: [("x", 1)], 3000: [("x", 3)], 4000: [("y", 2)]}


def test_a_batch_made_again_after_its_generation_failed_runs_with_its_own_watermark_and_moves_it(
        spark_context: Any, tmp_path: Path) -> None:
    """withWatermark -> a transform raising once while batch 3000 is generated -> an event-time flatMapGroupsWithState.
    Batch 4000 makes batch 3000's RDD again and runs its state first, with batch 3000's watermark (10 s), so its late
    b@5 s is dropped as in an uninterrupted run (not let into the state, to time out later), and its a@12 s counts
    for the watermark: batch 5000's is 19 s. (Batch 4000 itself was planned before 3000's events were seen: 10 s.)"""
    calls = tmp_path / "calls"
    outputs: dict[int, list[Any]] = {}
    raised: list[int] = []

    def sessions(key: str, values: Iterator[tuple[str, int]], state: GroupState) -> list[tuple[str, Any]]:
        times = [v[1] for v in values]
        with open(calls, "a") as file:
            file.write(f"{state.getCurrentWatermarkMs()} {key} {times}\n")
        if state.hasTimedOut:
            state.remove()
            return [(key, "timeout")]
        state.update((state.getOption or 0) + len(times))
        state.setTimeoutTimestamp(max(max(times, default=0) + 500, state.getCurrentWatermarkMs() + 1))
        return [(key, state.get)]

    def flaky(time: Any, rdd: Any) -> Any:
        if int(time.timestamp()) == 3 and not raised:
            raised.append(3)
            raise RuntimeError("transform fails once")
        return rdd

    beats = [[("a", 10_000)], [("a", 11_000)], [("b", 5_000), ("a", 12_000)], [("c", 20_000)], [], []]
    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    stream = ssc.queueStream([spark_context.parallelize(b, 2) for b in beats], oneAtATime=True,
                             default=spark_context.emptyRDD())
    stream.withWatermark(lambda e: e[1], "1 second").transform(flaky).map(lambda e: (e[0], e)).flatMapGroupsWithState(
        sessions, "append", "EventTimeTimeout", numPartitions=2).foreachRDD(
        lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
    ssc.checkpoint(str(tmp_path / "ck"))
    errors = run_dstream_batches(ssc, clock, len(beats))
    assert raised == [3] and len(errors) == 1 and "transform fails once" in str(errors[0])
    assert outputs == {1000: [("a", 1)], 2000: [("a", 2)], 4000: [("c", 1)], 5000: [("a", "timeout")], 6000: []}
    assert sorted(calls.read_text().splitlines()) == sorted([
        "0 a [10000]", "9000 a [11000]", "10000 a [12000]", "10000 c [20000]", "19000 a []"])
    watermarks = [(p.batch_id, p.event_time.get("watermark")) for p in ssc.runtime.recent_progress]
    assert watermarks == [(0, "1970-01-01T00:00:00.000Z"), (1, "1970-01-01T00:00:09.000Z"),
                          (3, "1970-01-01T00:00:10.000Z"), (4, "1970-01-01T00:00:19.000Z"),
                          (5, "1970-01-01T00:00:19.000Z")]


def test_catching_up_a_chained_operator_does_not_run_the_healthy_one_before_it_again(
        spark_context: Any, tmp_path: Path) -> None:
    """op1 feeds op2, each with an output (op1's first); op2 fails twice in batch 2000. Batch 3000's output on op1 runs
    op1's batch 3000, then op2's catch-up reads op1's batch 2000 again: op1's outputs of it are still kept (the run
    before the newest), so op1's function runs once per key and batch, and both outputs count as without the failure."""
    marker, calls = tmp_path / "failures-left", tmp_path / "op1-calls"
    marker.write_text("2")
    flaky = _failing_times(marker)
    path = str(calls)
    out1: dict[int, list[Any]] = {}
    out2: dict[int, list[Any]] = {}

    def op1(key: str, values: Iterator[str], state: GroupState) -> tuple[str, str]:
        total = (state.getOption or 0) + sum(1 for _ in values)
        with open(path, "a") as file:
            file.write(f"{key}{total} ")
        state.update(total)
        return (key, key)

    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    beats = [["x"], ["x", "y"], ["x"], ["y"]]
    stream = ssc.queueStream([spark_context.parallelize(b, 1) for b in beats], oneAtATime=True,
                             default=spark_context.emptyRDD())
    first = stream.map(lambda d: (d, d)).mapGroupsWithState(op1, numPartitions=1)
    first.foreachRDD(lambda time, rdd: out1.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
    first.mapGroupsWithState(flaky, numPartitions=1).foreachRDD(
        lambda time, rdd: out2.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
    ssc.checkpoint(str(tmp_path / "ck"))
    run_dstream_batches(ssc, clock, 4)
    assert marker.read_text() == "0"
    assert sorted(calls.read_text().split()) == ["x1", "x2", "x3", "y1", "y2"]
    assert out1 == {1000: [("x", "x")], 2000: [("x", "x"), ("y", "y")], 3000: [("x", "x")], 4000: [("y", "y")]}
    assert out2 == {1000: [("x", 1)], 3000: [("x", 3)], 4000: [("y", 2)]}


@pytest.mark.parametrize("where", ["downstream", "beside"])
def test_a_batch_whose_generation_failed_after_the_operator_made_its_rdd_is_caught_up(
        spark_context: Any, tmp_path: Path, where: str) -> None:
    """A transform raises once while batch 3000 is generated, after mapGroupsWithState made its RDD: downstream of it,
    or on another output reading the raw input (the state's output generated first). No job of batch 3000 ran, so
    batch 4000 runs its state first, as pyspark's updateStateByKey recomputes it: 3000's beats count (its output is
    lost), and every later batch goes on."""
    outputs: dict[int, list[Any]] = {}
    raised: list[int] = []

    def flaky(time: Any, rdd: Any) -> Any:
        if int(time.timestamp()) == 3 and not raised:
            raised.append(3)
            raise RuntimeError("transform fails once")
        return rdd

    def counts(key: str, values: Iterator[str], state: GroupState) -> tuple[str, int]:
        state.update((state.getOption or 0) + sum(1 for _ in values))
        return (key, state.get)

    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock)
    beats = [["x"], ["x", "y"], ["x", "y"], ["y"], ["x"]]
    stream = ssc.queueStream([spark_context.parallelize(b, 2) for b in beats], oneAtATime=True,
                             default=spark_context.emptyRDD())
    state = stream.map(lambda d: (d, d)).mapGroupsWithState(counts, numPartitions=2)

    def record(time: Any, rdd: Any) -> None:
        outputs[int(time.timestamp() * 1000)] = sorted(rdd.collect())

    if where == "downstream":
        state.transform(flaky).foreachRDD(record)
    else:
        state.foreachRDD(record)
        stream.transform(flaky).foreachRDD(lambda time, rdd: rdd.count())
    ssc.checkpoint(str(tmp_path / "ck"))
    errors = run_dstream_batches(ssc, clock, len(beats))
    assert raised == [3] and len(errors) == 1 and "transform fails once" in str(errors[0])
    assert outputs == {1000: [("x", 1)], 2000: [("x", 2), ("y", 1)], 4000: [("y", 3)], 5000: [("x", 4)]}


def test_with_concurrent_jobs_a_stateful_program_runs_its_batches_one_after_another(
        spark_context: Any, tmp_path: Path) -> None:
    """concurrentJobs=2, an output on the state and one on the raw input, every batch queued at once, the function
    failing in batch 2000 (however often its two jobs run it: the fault lasts until batch 3000 is generated): batch
    3000's output reads the state only after batch 2000 ended (and was noted), so only batch 2000's output is lost.
    (Overlapping, 3000's output loaded a version 2000's own output had not written.)"""
    marker = tmp_path / "failing"
    marker.touch()
    flaky = _failing_while(marker)

    def heal_at_3000(time: Any, rdd: Any) -> Any:  # on the driver, while batch 3000 is generated
        if int(time.timestamp()) == 3:
            marker.unlink(missing_ok=True)
        return rdd

    outputs: dict[int, list[Any]] = {}
    clock = ManualClock(0)
    ssc = StreamingContext(spark_context, INTERVAL_MS / 1000, clock=clock, concurrentJobs=2)
    beats = [["x"], ["x", "y"], ["x"], ["y"], ["x"]]
    stream = ssc.queueStream([spark_context.parallelize(b, 2) for b in beats], oneAtATime=True,
                             default=spark_context.emptyRDD()).transform(heal_at_3000)
    stream.map(lambda d: (d, d)).mapGroupsWithState(flaky, numPartitions=2).foreachRDD(
        lambda time, rdd: outputs.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
    stream.foreachRDD(lambda time, rdd: rdd.count())
    ssc.checkpoint(str(tmp_path / "ck"))

    async def driver() -> None:
        async with ssc:
            await ssc.start_async()
            assert ssc.runtime.tracker is not None and ssc.runtime.tracker.sequential_batches
            clock.advance(Milliseconds(INTERVAL_MS * len(beats)))  # every batch due at once
            await ssc.runtime.wait_until_idle()
            await ssc.stop_async(stopSparkContext=False)

    anyio.run(driver)
    assert not marker.exists()
    assert outputs == {1000: [("x", 1)], 3000: [("x", 3)], 4000: [("y", 2)], 5000: [("x", 4)]}
