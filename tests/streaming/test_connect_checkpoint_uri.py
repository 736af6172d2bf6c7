"""A checkpoint and a file stream on a URI from a Spark Connect client: the FTP server of the tests (``tests.ftp``), a
file system the client reaches through fsspec and the server's Python workers through fsspec, never as a local path.

The client writes the metadata, offsets, commits, the saved graph and the file stream's log there; the server's
workers write the state snapshots, the RDD checkpoints and the keyed state store there and read the stream's files.
Each program's output is compared with classic Spark's (on a local checkpoint, since classic Spark's writers and
readers go through Hadoop's FTP file system, which cannot seek nor make the committers' directories).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler import CheckpointError, ManualClock
from streaming import StreamingContext
from tests.streaming.groups import test_dstream_groups as groups
from tests.streaming.test_connect_recovery import Run
from tests.streaming.test_dstream_recovery import run_program
from tests.support import connect_opt_in, run_dstream_batches

pytestmark = pytest.mark.connect

INTERVAL_MS = 1000
WORDS = [["a", "b"], ["a"], ["b", "c"], ["a", "a"], ["c", "b"]]


def counting_program(run: Run) -> Callable[[StreamingContext], None]:
    """Running word counts (updateStateByKey, checkpointed every 2 batches) over queued words."""
    def build(ssc: StreamingContext) -> None:
        sc = ssc.sparkContext
        pairs = ssc.queueStream([sc.parallelize(words, 2) for words in WORDS]).map(lambda w: (w, 1))
        counts = pairs.updateStateByKey(lambda values, state: (state or 0) + sum(values), 2)
        counts.checkpoint(2)
        counts.foreachRDD(run.output("counts"))
    return build


def _names(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.mark.spark
@pytest.mark.timeout(600)
@connect_opt_in("keyed state lives on an ftp:// checkpoint and resumes there by default (below)")
def test_state_resumes_from_an_ftp_checkpoint_as_classic_spark_runs_it(
        connect_session: Any, spark_context: Any, ftp_server: Any, tmp_path: Path) -> None:
    """Batches 1-3 run on Connect with the checkpoint on ftp://, 3 fails; getOrCreate resumes from the snapshot of
    batch 2 there, and the two runs give an uninterrupted classic run's partitions batch by batch."""
    reference = Run()
    run_program(spark_context, tmp_path / "classic", ManualClock(0), 5, counting_program(reference), resume=False)

    uri = ftp_server.uri("ck")
    first = Run(fail_at=3 * INTERVAL_MS)
    clock = ManualClock(0)
    run_program(connect_session, uri, clock, 3, counting_program(first), resume=False)
    assert sorted(first.outputs["counts"]) == [1000, 2000]
    written = _names(ftp_server.root / "ck")
    # The client's logs and graph, and what the server's workers wrote: the snapshot of batch 2 and an RDD checkpoint.
    assert {"metadata", "offsets/2", "commits/1", "state/0/2/_partitions", "state/0/2/part-00000",
            "state/0/2/part-00001"} <= written, sorted(written)
    assert "commits/2" not in written
    assert any(name.startswith("rdd-") and name.endswith("/part-00001") for name in written), sorted(written)

    second = Run()
    run_program(connect_session, uri, ManualClock(clock.now()), 2, counting_program(second), resume=True)
    assert sorted(second.outputs["counts"]) == [3000, 4000, 5000]
    assert {**first.outputs["counts"], **second.outputs["counts"]} == reference.outputs["counts"]


@pytest.mark.spark
def test_keyed_state_lives_on_an_ftp_checkpoint_and_resumes_there(connect_session: Any, ftp_server: Any) -> None:
    """mapGroupsWithState on Connect with the checkpoint on ftp://: the server's workers keep the state store there,
    and getOrCreate resumes from it with classic Spark's outputs (test_dstream_groups' remote-file-system test)."""
    uri = ftp_server.uri("ck")
    beats = [["x"], ["x"], ["x"], [], [], []]
    first, _ = groups.run(connect_session, uri, beats, drive=2)
    assert first == {1000: [("x", "online", 1)], 2000: [("x", "online", 2)]}
    state = ftp_server.root / "ck" / "stateful" / "state" / "0"
    assert {p.name for p in (state / "0").iterdir()} == {p.name for p in (state / "1").iterdir()} == {"1.delta", "2.delta"}
    second, _ = groups.run(connect_session, uri, beats, resume=True, clock_start=2000, drive=4)
    assert second == {3000: [("x", "online", 3)], 4000: [], 5000: [], 6000: [("x", "offline", 6000)]}


@pytest.mark.spark
def test_a_driver_receiver_logs_its_blocks_on_ftp_and_a_restart_replays_them(connect_session: Any, ftp_server: Any) -> None:
    """An async source's blocks go into the write-ahead log on ftp:// (written by this process through fsspec); the
    batch that failed after logging them re-runs from there after getOrCreate, as test_connect_receiver_log's local one."""
    from tests.streaming.test_connect_receiver_log import async_source, crash_and_resume

    first, second = crash_and_resume(connect_session, ftp_server.uri("ck"), async_source)
    assert first.outputs == {}
    assert second.outputs == {1000: [("a", 2), ("b", 1)], 2000: [("c", 1)]}
    log = ftp_server.root / "ck" / "sources" / "0"
    assert sorted(name for name in os.listdir(log) if name.isdigit()), "the blocks were logged on the FTP server"


def _stage(directory: Path, name: str, text: str, at_ms: int) -> None:
    """Write ``name`` into ``directory`` whole (a hidden file renamed in), modified at ``at_ms`` (whole seconds: FTP's
    listing gives no finer time)."""
    staged = directory / f".{name}.tmp"
    staged.write_bytes(text.encode())
    os.utime(staged, (at_ms / 1000, at_ms / 1000))
    os.replace(staged, directory / name)


FILES = {1: {"a.txt": "one two\r\nthree\n"}, 2: {}, 3: {"b.txt": "two\n\nfour", "c.txt": "five\rsix\n"}}


def _file_program(directory: str, got: dict[int, list[Any]]) -> Callable[[StreamingContext], None]:
    def build(ssc: StreamingContext) -> None:
        lines = ssc.textFileStream(directory)
        lines.foreachRDD(lambda time, rdd: got.__setitem__(int(time.timestamp() * 1000), sorted(rdd.collect())))
    return build


def _run_files(spark: Any, directory: str, where: Path, checkpoint: str | None) -> dict[int, list[Any]]:
    """The file program's batches 1-4 on ``spark``, its clock starting at 500 ms; FILES staged in ``where`` before the
    start, batch ``k``'s modified at ``k`` s (a batch takes the files modified in its interval, its end included), and
    one more modified at 700 ms, after the stream began: in the first batch (FTP lists it at 0 s, its whole second)."""
    got: dict[int, list[Any]] = {}
    clock = ManualClock(500)
    ssc = StreamingContext(spark, INTERVAL_MS / 1000, clock=clock)
    _file_program(directory, got)(ssc)
    if checkpoint is not None:
        ssc.checkpoint(checkpoint)
    for batch, files in FILES.items():
        for name, text in files.items():
            _stage(where, name, text, batch * INTERVAL_MS)
    _stage(where, "early.txt", "zero\n", 700)
    assert run_dstream_batches(ssc, clock, 4) == []
    return got


@pytest.mark.spark
def test_a_file_stream_on_ftp_reads_what_classic_spark_reads_from_a_local_directory(
        connect_session: Any, spark_context: Any, ftp_server: Any, tmp_path: Path) -> None:
    """textFileStream("ftp://...") on Connect: listed here, read by the server's workers through fsspec, each file in
    the batch of its modification time, lines split as Hadoop splits them; its log is on the ftp:// checkpoint."""
    local = tmp_path / "in"
    local.mkdir()
    classic = _run_files(spark_context, str(local), local, None)
    remote = ftp_server.root / "in"
    remote.mkdir()
    connect = _run_files(connect_session, ftp_server.uri("in"), remote, ftp_server.uri("ck"))
    assert connect == classic
    assert classic[1000] == ["one two", "three", "zero"] and classic[3000] == ["", "five", "four", "six", "two"]
    logged = (ftp_server.root / "ck" / "sources" / "0")
    entries = sorted(name for name in os.listdir(logged) if name.isdigit())
    assert entries == ["0", "1"]
    assert (logged / "0").read_text().count(ftp_server.uri("in/")) == 2  # a.txt and early.txt
    assert (logged / "1").read_text().count(ftp_server.uri("in/")) == 2  # b.txt and c.txt, by their full URIs


@pytest.mark.spark
def test_get_or_create_reads_a_graph_saved_on_ftp_without_a_jvm(
        connect_session: Any, ftp_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Connect client with no SparkContext (this test process has one: hidden here) reads the graph a Connect program
    saved on ftp:// through fsspec, never Hadoop's FileSystem, and rebuilds it on the Connect session."""
    import streaming._checkpointing as checkpointing
    from streaming.dstream import RECIPE_FILE

    remote = ftp_server.root / "in"
    remote.mkdir()
    uri = ftp_server.uri("ck")
    _run_files(connect_session, ftp_server.uri("in"), remote, uri)
    assert (ftp_server.root / "ck" / RECIPE_FILE).exists()

    def no_hadoop(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("Hadoop's FileSystem was asked for the checkpoint")

    monkeypatch.setattr(checkpointing, "active_spark_context", lambda: None)
    monkeypatch.setattr(checkpointing, "HadoopFileManager", no_hadoop)
    recipe = checkpointing.saved_graph(uri)
    assert recipe is not None and recipe.calls[0].method == "textFileStream"
    spark, interval = checkpointing.spark_context_for(recipe)
    assert spark is connect_session and interval.milliseconds == INTERVAL_MS


@pytest.fixture
def missing_package_scheme() -> Iterator[str]:
    """A scheme fsspec knows but cannot open here: its implementation's package is not installed."""
    import sys

    import fsspec

    fsspec.register_implementation("nopkgfs", "aiodstream_no_such_package.FileSystem",
                                   errtxt="Install aiodstream-no-such-package to access nopkgfs")
    yield "nopkgfs"
    sys.modules["fsspec.registry"].known_implementations.pop("nopkgfs", None)  # fsspec.registry is a mapping there


@pytest.mark.spark
def test_a_checkpoint_on_a_scheme_fsspec_cannot_open_names_what_to_install(
        connect_session: Any, missing_package_scheme: str) -> None:
    """ssc.checkpoint(URI) on Connect: a scheme whose package is missing names the package; an unknown scheme says so."""
    ssc = StreamingContext(connect_session, 1)
    with pytest.raises(CheckpointError) as raised:
        ssc.checkpoint(f"{missing_package_scheme}://user:secret@host/ck")
    assert str(raised.value) == (
        "checkpoint directory 'nopkgfs://user:***@host/ck': on Spark Connect this process reads and writes the checkpoint "
        "through fsspec, which cannot open nopkgfs:// here (Install aiodstream-no-such-package to access nopkgfs); install "
        "the package that implements it in this Python and in the Connect server's (its Python workers write the state "
        "there), or use a directory this process and the server both see")
    with pytest.raises(CheckpointError, match=r"fsspec knows no file system for nosuchfs://, and no installed package "
                                              r"registers one\); install"):
        ssc.checkpoint("nosuchfs://host/ck")
    with pytest.raises(ValueError) as stream_raised:
        ssc.textFileStream(f"{missing_package_scheme}://host/in")
    assert str(stream_raised.value) == (
        "a file stream on 'nopkgfs://host/in': on Spark Connect this process lists the directory and the server's Python "
        "workers read its files through fsspec, which cannot open nopkgfs:// here (Install aiodstream-no-such-package to "
        "access nopkgfs); install the package that implements it in this Python and in the Connect server's, or watch a "
        "directory this process and the server both see")
    ssc.stop(stopSparkContext=False)


def test_a_snapshot_in_the_earlier_parquet_format_is_refused_by_name(tmp_path: Path) -> None:
    """A Connect snapshot of an earlier aiodstream (Parquet rows) is not misread: the restart names both formats."""
    from scheduler import CheckpointPath
    from streaming.dstream._snapshot_frames import load_frame_snapshot

    snapshot = tmp_path / "state" / "0" / "2"
    snapshot.mkdir(parents=True)
    (snapshot / "_partitions").write_text('{"format": "parquet-pickled-rows", "partitions": 2}')
    with pytest.raises(CheckpointError) as raised:
        load_frame_snapshot(None, CheckpointPath.local(snapshot))
    assert str(raised.value) == (
        f"the state snapshot {snapshot} is in the format 'parquet-pickled-rows', which this version of aiodstream does "
        "not read (it reads 'arrow-partition-files'); start over with a new checkpoint directory")
