"""getOrCreate rebuilds the DStream graph from the checkpoint without calling the setup function, as Spark does.

The pure tests record and replay a program's DStream calls without Spark; the Spark test runs
Spark's own ``recoverable_network_wordcount.py`` with one import changed, kills it with SIGKILL and
restarts it: the restart must not run its setup (which deletes the output file).
"""

from __future__ import annotations

import pickle
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import attrs
import pytest
from pyspark import cloudpickle

from listeners import OverflowPolicy
from scheduler import CheckpointError, CorruptCheckpointError, Duration, InvalidPipelineError
from streaming import StreamingContext
from streaming import _context as context_module
from streaming._settings import ContextArguments, ContextSettings
from streaming.dstream import RECIPE_FILE, GraphNotSerializableError, SavedRecipe, StreamNode, load_recipe
from streaming.spark import SparkSettings
from tests.anyio_support import raises_exactly
from tests.crash import child_env, kill, spawn


def offline_context(batch_s: float = 1) -> StreamingContext:
    """A context that builds streams without Spark: async mode (queues keep their lists), settings given."""
    ssc = StreamingContext(None, batch_s)
    ssc._env.async_mode = True
    ssc._spark._settings = SparkSettings(2, {})
    return ssc


def build(ssc: StreamingContext, sink: list[Any]) -> None:
    """A program over two queues: a union, element functions, a windowed reduce and two outputs."""
    words = ssc.queueStream([["a b", "c"], ["b"]])
    more = ssc.queueStream([["d"]])
    pairs = ssc.union(words, more).flatMap(str.split).map(lambda w: (w, 1)).cache()
    pairs.reduceByKeyAndWindow(lambda a, b: a + b, None, 2, 1).foreachRDD(sink.append)
    pairs.filter(lambda kv: kv[0] != "a").pprint(3)


def shape(ssc: StreamingContext) -> list[tuple[str, ...]]:
    """The graph as kinds: inputs with their queued items, outputs with their parents' kinds, recursively."""
    def walk(node: Any) -> tuple[str, ...]:
        return (type(node).__name__, *(part for parent in node._parents for part in walk(parent)))
    inputs = [("input", type(i).__name__, repr(i._items)) for i in ssc._graph.input_streams]  # type: ignore[attr-defined]
    return inputs + [walk(o) for o in ssc._graph.output_streams]


def test_the_recorded_calls_are_the_programs_own(tmp_path: Path) -> None:
    """Only top-level API calls are recorded, with streams as references: methods that call others are one call."""
    ssc = offline_context()
    build(ssc, [])
    calls = ssc._env.recipe.calls
    assert [c.method for c in calls] == ["queueStream", "queueStream", "union", "flatMap", "map", "cache",
                                         "reduceByKeyAndWindow", "foreachRDD", "filter", "pprint"]
    assert [c.result for c in calls] == [0, 1, 2, 3, 4, None, 5, None, 6, None]  # cache() returns the same stream
    assert calls[2].target is None and [r.index for r in calls[2].args] == [0, 1]


def test_a_saved_graph_is_replayed_into_the_same_graph(tmp_path: Path) -> None:
    """save then load_recipe and replay on a fresh context give a graph of the same shape with working functions."""
    first, sink = offline_context(), []
    build(first, sink)
    assert first._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=2, spark_conf=[("spark.app.name", "x")]) is None
    recipe = load_recipe(tmp_path)
    assert recipe is not None
    assert (recipe.batch_ms, recipe.concurrent_jobs, recipe.spark_conf) == (1000, 2, (("spark.app.name", "x"),))
    second = offline_context()
    recipe.replay(second, StreamNode)
    assert shape(second) == shape(first)
    assert [n for n in second._graph._streams() if n.is_cached] == [mapped := second._graph.output_streams[1]._parents[0]._parents[0]]  # type: ignore[attr-defined]
    # pprint <- filter <- the cached stream (flatMap and map fused into one)
    assert mapped._func(None, FakeRDD(["x y"])).rows == [("x", 1), ("y", 1)]  # type: ignore[attr-defined]
    assert tuple(second._env.recipe.calls) == recipe.calls  # the replay records itself again, identically


class FakeRDD:
    """Enough of an RDD for the element functions of a transform chain: mapPartitionsWithIndex over one partition."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def mapPartitionsWithIndex(self, f: Any, preservesPartitioning: bool = False) -> FakeRDD:  # noqa: N803
        return FakeRDD(list(f(0, iter(self.rows))))


def test_a_graph_with_a_function_that_cannot_be_pickled_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    """A function holding a lock cannot be pickled: save() raises pyspark's error naming the cause and the call,
    and leaves an older graph as it was (Spark refuses to start such a checkpointed context)."""
    ok = offline_context()
    build(ok, [])
    assert ok._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=None, spark_conf=[]) is None
    before = (tmp_path / RECIPE_FILE).read_bytes()
    lock = threading.Lock()
    bad = offline_context()
    bad.queueStream([[1]]).foreachRDD(lambda rdd: lock.locked())
    with pytest.raises(GraphNotSerializableError) as raised:
        bad._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=None, spark_conf=[])
    message = str(raised.value)
    assert message.startswith("An exception was raised by Python:\nTraceback (most recent call last):\n")
    assert message.endswith("_pickle.PicklingError: Could not serialize object: TypeError: cannot pickle '_thread.lock' object\n")
    assert raised.value.method == "foreachRDD"
    assert isinstance(raised.value, pickle.PicklingError) and isinstance(raised.value, CheckpointError)
    assert (tmp_path / RECIPE_FILE).read_bytes() == before


def test_a_stream_of_another_context_is_refused_and_leaves_the_graph_saveable(tmp_path: Path) -> None:
    """A stream this context never made has no place in its recipe; a call that mixes one in is refused at the call
    (Spark's requirement) and records nothing, so the graph still saves."""
    mine, other = offline_context(), offline_context()
    foreign = other.queueStream([[2]])
    with pytest.raises(CheckpointError, match="was not made through this context's API"):
        mine._env.recipe.ref(foreign, StreamNode)
    stream = mine.queueStream([[1]])
    with pytest.raises(InvalidPipelineError, match="Some of the DStreams have different contexts"):
        stream.transformWith(lambda a, b: a, foreign)
    stream.foreachRDD(print)
    assert mine._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=None, spark_conf=[]) is None
    assert (tmp_path / RECIPE_FILE).exists()


def test_a_damaged_graph_file_is_reported_with_its_path(tmp_path: Path) -> None:
    """A file that is not a saved graph, or one whose pickle is cut short, raises CorruptCheckpointError naming it."""
    path = tmp_path / RECIPE_FILE
    path.write_bytes(b"something else")
    with pytest.raises(CorruptCheckpointError, match=f"{path} is not a DStream graph written by aiodstream"):
        load_recipe(tmp_path)
    ssc = offline_context()
    build(ssc, [])
    assert ssc._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=None, spark_conf=[]) is None
    whole = path.read_bytes()
    path.write_bytes(whole[:-10])
    with pytest.raises(CorruptCheckpointError, match=f"cannot read the DStream graph in {path}") as cut:
        load_recipe(tmp_path)
    assert str(cut.value).endswith("; the file is cut short, damaged after it was written: restore it from a copy, or "
                                   "start over without this checkpoint")  # not a question about module versions
    path.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(CorruptCheckpointError, match="the file is cut short"):
        load_recipe(tmp_path)
    for size in (0, 5):  # inside its first line: not taken for another program's file
        path.write_bytes(whole[:size])
        with pytest.raises(CorruptCheckpointError, match=f"{path} is cut short \\({size} bytes\\), damaged after it was written"):
            load_recipe(tmp_path)


@pytest.mark.parametrize(("field", "value"), [("batch_ms", 0), ("batch_ms", 2.5), ("batch_ms", 2**63), ("continuous_ms", -1)])
def test_a_graph_with_an_impossible_interval_is_a_damaged_file(tmp_path: Path, field: str, value: object) -> None:
    """A saved graph whose batch or epoch interval is not a positive long of milliseconds is reported with its path."""
    ssc = offline_context()
    build(ssc, [])
    assert ssc._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=None, spark_conf=[]) is None
    recipe = attrs.evolve(load_recipe(tmp_path), **{field: value})
    (tmp_path / RECIPE_FILE).write_bytes(b"aiodstream-graph v1\n" + cloudpickle.dumps(recipe))
    name = "batch interval" if field == "batch_ms" else "epoch interval"
    with raises_exactly(CorruptCheckpointError, f"cannot read the DStream graph in {tmp_path / RECIPE_FILE}: its {name} must be "
                        f"a positive whole number of milliseconds within a Java long, got {value!r}"):
        load_recipe(tmp_path)


def test_get_or_create_restores_without_calling_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a saved graph, getOrCreate rebuilds it and never calls setupFunc; restoreGraph=False calls it."""
    first = offline_context()
    build(first, [])
    assert first._env.recipe.save(tmp_path, batch_ms=500, concurrent_jobs=None, spark_conf=[]) is None
    monkeypatch.setattr(StreamingContext, "checkpoint", lambda self, d, options=None: setattr(self, "_log_dir", Path(d)))
    made: list[StreamingContext] = []

    def fake_restore_context(cls: Any, checkpoint_path: str, recipe: Any, options: Any) -> StreamingContext:
        ssc = offline_context(recipe.batch_ms / 1000)
        recipe.replay(ssc, StreamNode)
        made.append(ssc)
        return ssc

    monkeypatch.setattr(StreamingContext, "_restore", classmethod(fake_restore_context))

    def setup() -> StreamingContext:
        raise AssertionError("setupFunc must not run when the checkpoint holds a graph")

    restored = StreamingContext.getOrCreate(str(tmp_path), setup)
    assert made == [restored] and shape(restored) == shape(first)
    called: list[bool] = []

    def fresh() -> StreamingContext:
        called.append(True)
        return offline_context()

    StreamingContext.getOrCreate(str(tmp_path), fresh, restoreGraph=False)
    assert called == [True]


def test_get_or_create_refuses_a_checkpoint_pyspark_wrote(tmp_path: Path) -> None:
    """A directory with Spark's checkpoint-<ms> files and no graph of ours: CheckpointError naming it, setupFunc not run."""
    (tmp_path / "checkpoint-1795793392000").write_bytes(b"java")
    (tmp_path / "checkpoint-1795793392000.bk").write_bytes(b"java")
    (tmp_path / "receivedBlockMetadata").mkdir()

    def setup() -> StreamingContext:
        raise AssertionError("setupFunc must not run on a pyspark checkpoint")

    message = (f"checkpoint directory {tmp_path} holds a checkpoint written by pyspark.streaming (checkpoint-1795793392000, "
               "checkpoint-1795793392000.bk, receivedBlockMetadata) and no aiodstream graph: the formats differ (Spark's "
               "serialized checkpoint files; aiodstream writes a graph file and recovery logs, see docs/compatibility.md), "
               "so it cannot be resumed here, and calling setupFunc would start from scratch and lose that run's state; "
               "resume it with pyspark.streaming, or pass getOrCreate a new directory to start afresh")
    for restore_graph in (True, False):
        with raises_exactly(CheckpointError, message) as caught:
            StreamingContext.getOrCreate(str(tmp_path), setup, restoreGraph=restore_graph)
        assert caught.value.path == str(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-1795793392000", "checkpoint-1795793392000.bk", "receivedBlockMetadata"]


def restore_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StreamingContext:
    """getOrCreate on ``tmp_path``'s saved graph (of no calls) without Spark (no SparkContext, no checkpoint files)."""
    monkeypatch.setattr(StreamingContext, "checkpoint", lambda self, d, options=None: None)
    monkeypatch.setattr(context_module, "spark_context_for", lambda recipe: (None, Duration(recipe.batch_ms)))

    def setup() -> StreamingContext:
        raise AssertionError("setupFunc must not run when the checkpoint holds a graph")

    return StreamingContext.getOrCreate(str(tmp_path), setup)


def test_a_restored_context_keeps_the_constructor_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """queryName, stopOnFailure, exclusive, uiPort and listenerOverflow are saved with the graph and given to the
    restored context (it was named None and ran with the DStream failure semantics); a restored uiPort that
    another program took meanwhile is followed by the next 16 ports, as Spark's UI does."""
    first = StreamingContext(None, 1, queryName="failing", stopOnFailure=True, exclusive=False, uiPort=4050,
                             listenerOverflow=OverflowPolicy.BLOCK, concurrentJobs=2)
    assert first._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=2, spark_conf=[],
                                  context_options=first._saved_options()) is None
    restored = restore_offline(tmp_path, monkeypatch)
    assert restored.name == "failing"
    assert restored._arguments == ContextArguments(2, "failing", True, 4050, ui_port_restored=True,
                                                   listener_overflow=OverflowPolicy.BLOCK, exclusive=False)
    assert (restored._arguments.exclusive, restored._arguments.listener_overflow) == (False, OverflowPolicy.BLOCK)
    settings = ContextSettings.read(SparkSettings(2, {}), restored._arguments, continuous=False)
    assert settings.stop_on_failure is True and settings.ui is not None and settings.ui[0] == ("127.0.0.1", 4050, 16)
    assert ContextSettings.read(SparkSettings(2, {}), first._arguments, continuous=False).ui[0] == ("127.0.0.1", 4050, 0)  # type: ignore[index]


def test_a_graph_saved_before_the_options_were_restores_with_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recipe pickled without context_options (an older version's) loads, and its context takes the defaults."""
    ssc = offline_context()  # no calls: the replay needs no Spark
    assert ssc._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=None, spark_conf=[],
                                context_options={"queryName": "new"}) is None
    state = load_recipe(tmp_path).__getstate__()  # type: ignore[union-attr]
    del state["context_options"]

    class Older:
        def __reduce__(self) -> tuple[Any, ...]:
            return object.__new__, (SavedRecipe,), state

    (tmp_path / RECIPE_FILE).write_bytes(b"aiodstream-graph v1\n" + cloudpickle.dumps(Older()))
    recipe = load_recipe(tmp_path)
    assert recipe is not None and not hasattr(recipe, "context_options") and recipe.saved_context_options() == {}
    restored = restore_offline(tmp_path, monkeypatch)
    assert restored.name is None and restored._arguments == ContextArguments(ui_port_restored=True)


def test_a_graph_with_an_unknown_constructor_option_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A saved option this version does not take (a newer version's) is refused naming it, not silently dropped."""
    ssc = offline_context()
    assert ssc._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=None, spark_conf=[],
                                context_options={"queryName": "q", "fancy": 1}) is None
    with raises_exactly(CorruptCheckpointError, f"the DStream graph in {tmp_path} was saved with StreamingContext options "
                        "this version does not take: fancy"):
        restore_offline(tmp_path, monkeypatch)


# -- Spark's own recoverable example, killed and restarted --

EXAMPLE = Path(sys.prefix).glob("lib/python*/site-packages/pyspark/examples/src/main/python/streaming/"
                                "recoverable_network_wordcount.py")


class WordServer:
    """A TCP server that sends every client a line of words every 0.1 s until closed."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._feed, args=(conn,), daemon=True).start()

    def _feed(self, conn: socket.socket) -> None:
        with conn:
            while not self.closed.is_set():
                try:
                    conn.sendall(b"a spark stream\n")
                except OSError:
                    return
                self.closed.wait(0.1)

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


@pytest.fixture
def word_server() -> Iterator[WordServer]:
    server = WordServer()
    yield server
    server.close()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def run_until(args: list[str], env: dict[str, str], output: Path, at_least: int, timeout: float = 180) -> str:
    """Run the example until ``output`` has ``at_least`` lines, then SIGKILL it; its stdout."""
    child = spawn(args, output.parent, env)
    try:
        deadline = time.monotonic() + timeout
        while len(lines(output)) < at_least:
            if child.poll() is not None:
                raise AssertionError(f"the example exited with {child.returncode}: {child.stdout.read() if child.stdout else ''}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {at_least} output lines; got {lines(output)}")
            time.sleep(0.1)
    finally:
        kill(child)
    assert child.stdout is not None
    return child.stdout.read()


@pytest.mark.spark
def test_sparks_recoverable_example_keeps_its_output_across_a_kill(tmp_path: Path, word_server: WordServer) -> None:
    """Spark's recoverable_network_wordcount.py with one import changed: killed with SIGKILL and restarted, the
    restart rebuilds the graph from the checkpoint (no "Creating new context"), so the output file survives."""
    example = next(EXAMPLE)
    source = example.read_text()
    assert "from pyspark.streaming import StreamingContext" in source
    program = tmp_path / "recoverable_network_wordcount.py"
    program.write_text(source.replace("from pyspark.streaming import StreamingContext", "from streaming import StreamingContext"))
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out.txt"
    env = child_env({"PYSPARK_PYTHON": sys.executable,
                     "PYSPARK_SUBMIT_ARGS": "--master local[2] --conf spark.ui.enabled=false pyspark-shell"})
    args = [str(program), "127.0.0.1", str(word_server.port), str(checkpoint), str(output)]

    first = run_until(args, env, output, at_least=2)
    assert "Creating new context" in first
    before = lines(output)
    assert before[0].startswith("Counts at time ")

    second = run_until(args, env, output, at_least=len(before) + 2)
    assert "Creating new context" not in second
    after = lines(output)
    assert after[:len(before)] == before  # the setup function, which deletes the output, did not run
    assert any("('spark'," in line for line in after[len(before):])  # and the restored graph counts words


def test_streams_after_a_function_argument_are_references_too(tmp_path: Path) -> None:
    """transformWith(func, other) records ``other`` as a reference, so the graph saves and replays with the join intact."""
    first = offline_context()
    a, b = first.queueStream([[1]]), first.queueStream([[2]])
    a.transformWith(lambda x, y: x, b).foreachRDD(print)
    call = first._env.recipe.calls[2]
    assert call.method == "transformWith" and call.args[1].index == 1
    assert first._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=None, spark_conf=[]) is None
    recipe = load_recipe(tmp_path)
    assert recipe is not None
    second = offline_context()
    recipe.replay(second, StreamNode)
    assert shape(second) == shape(first)
    joined = second._graph.output_streams[0]._parents[0]  # type: ignore[attr-defined]
    assert list(joined._parents) == second._graph.input_streams


@pytest.mark.spark
def test_an_rdd_argument_is_saved_as_its_contents_and_parallelized_again(tmp_path: Path, spark_context: Any) -> None:
    """updateStateByKey's initialRDD (an RDD cannot be pickled) is saved as its values and partition count, as
    Spark's checkpoint keeps the initial RDD; the replay gives the restored context an RDD of the same partitions."""
    from streaming.dstream import SavedRDD

    first = StreamingContext(spark_context, 1)
    initial = spark_context.parallelize([("hello", 1), ("world", 1), ("a", 2)], 3)
    first.queueStream([[("a", 1)]]).updateStateByKey(lambda new, old: sum(new) + (old or 0), initialRDD=initial).pprint()
    assert first._env.recipe.save(tmp_path, batch_ms=1000, concurrent_jobs=None, spark_conf=[]) is None
    recipe = load_recipe(tmp_path)
    assert recipe is not None
    saved = next(c for c in recipe.calls if c.method == "updateStateByKey").kwargs["initialRDD"]
    assert saved == SavedRDD([("hello", 1), ("world", 1), ("a", 2)], 3)
    second = StreamingContext(spark_context, 1)
    recipe.replay(second, StreamNode)
    replayed = next(c for c in second._env.recipe.calls if c.method == "updateStateByKey").kwargs["initialRDD"]
    assert replayed.glom().collect() == initial.glom().collect()
