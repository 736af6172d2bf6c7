"""Generation on the event loop: a batch whose every output says it needs no py4j call skips the generation thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from scheduler import Duration, Job, Time
from streaming import StreamingContext
from streaming.dstream import DStreamGraph
from streaming.inputs import QueueInputDStream
from streaming.spark import build_jvm_rdd


class Output:
    """An output stream stand-in: says whether its job needs Spark and records the thread that made the job."""

    def __init__(self, on_loop: bool) -> None:
        self.on_loop = on_loop
        self.threads: list[str] = []

    def generates_on_loop(self, time: Time) -> bool:
        return self.on_loop

    def generate_job(self, time: Time) -> Job | None:
        self.threads.append(threading.current_thread().name)
        return None


def generated_on(outputs: list[Output], *, lock_held: bool = False, backend: str = "asyncio") -> list[list[str]]:
    """Generate one batch of a graph with ``outputs`` (the generation lock held by another thread if asked): each output's thread names."""
    import anyio

    graph = DStreamGraph(Duration(1000))
    graph.output_streams.extend(outputs)  # type: ignore[arg-type]
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with graph.generation_lock:
            taken.set()
            release.wait()

    holder = threading.Thread(target=hold)
    if lock_held:
        holder.start()
        taken.wait()
    try:
        anyio.run(graph.generate_jobs, Time(1000), backend=backend)
    finally:
        release.set()
        if lock_held:
            holder.join()
        graph.release_threads()
    return [output.threads for output in outputs]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_batch_every_output_makes_without_spark_is_generated_on_the_loop(backend: str) -> None:
    """Both outputs say yes: their jobs are made on the calling thread (the event loop's), no generation thread."""
    main = threading.current_thread().name
    assert generated_on([Output(True), Output(True)], backend=backend) == [[main], [main]]


def test_one_output_needing_spark_sends_the_whole_batch_to_the_generation_thread() -> None:
    """One output says no: every job of the batch is made on the generation thread, in output order."""
    threads = generated_on([Output(True), Output(False)])
    assert len(threads[0]) == 1 and threads[0] == threads[1] and threads[0][0].startswith("aiodstream-generate")


def test_a_generation_lock_held_elsewhere_sends_the_batch_to_the_thread() -> None:
    """A user thread slicing holds the generation lock: the loop does not wait for it, the generation thread does."""
    threads = generated_on([Output(True)], lock_held=True)
    assert len(threads[0]) == 1 and threads[0][0].startswith("aiodstream-generate")


def test_a_queue_stream_is_loop_ready_only_for_its_made_default(spark_context: Any) -> None:
    """An item to take, a default not yet made in the JVM, or a storage level: no; the made default: yes."""
    ssc = StreamingContext(spark_context, 1)
    item, made = spark_context.parallelize([1], 1), spark_context.parallelize([2], 1)
    pipelined = made.map(lambda x: x)
    t = Time(1000)
    assert not QueueInputDStream(ssc._env, [item], True, made).generates_on_loop(t)  # the item is taken
    assert QueueInputDStream(ssc._env, [], True, made).generates_on_loop(t)
    assert not QueueInputDStream(ssc._env, [], True, None).generates_on_loop(t)  # the empty default is made by the batch
    assert not QueueInputDStream(ssc._env, [], True, [1, 2]).generates_on_loop(t)  # a list is parallelized by the batch
    waiting = QueueInputDStream(ssc._env, [], True, pipelined)
    assert not waiting.generates_on_loop(t)
    build_jvm_rdd(pipelined)
    assert waiting.generates_on_loop(t)
    persisted = QueueInputDStream(ssc._env, [], True, made)
    persisted.cache()
    assert not persisted.generates_on_loop(t)


@pytest.mark.parametrize("ready", [True, False])
def test_an_output_asks_its_parent(spark_context: Any, ready: bool) -> None:
    """foreachRDD's job is loop-ready exactly when its parent's RDD is."""
    ssc = StreamingContext(spark_context, 1)
    default = spark_context.parallelize([1], 1) if ready else None
    queue = QueueInputDStream(ssc._env, [], True, default)
    queue.foreachRDD(lambda rdd: None)
    (output,) = ssc._env.graph.output_streams
    assert output.generates_on_loop(Time(1000)) is ready
