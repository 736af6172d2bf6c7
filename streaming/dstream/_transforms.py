"""The stream kinds derived from other streams in one batch: transforms, unions, and output operations.

pyspark's ``TransformedDStream`` and ``PythonTransformed2DStream``, Spark's ``UnionDStream``,
``TransformedDStream`` and ``ForEachDStream``, as graph nodes (``DStream`` adds pyspark's API).
"""

from __future__ import annotations

import functools
import inspect
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Sequence

from scheduler import Duration, InvalidPipelineError, Job, StreamingStateError, Time

from ..spark import (
    BatchJob,
    JvmRddPrebuild,
    batch_datetime,
    current_batch_job,
    job_description,
    streaming_job_group,
    user_frame,
)
from ._node import StreamNode, union_rdds

if TYPE_CHECKING:
    from pyspark import RDD  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["ForEachNode", "MultiTransformedNode", "TransformedNode", "TransformedWithNode", "UnionNode", "check_stream"]


class TransformedNode(StreamNode):
    """``func(time, rdd)`` applied to the parent's RDD of each batch (pyspark's ``TransformedDStream``).

    As in pyspark, a chain of these is fused into one function over the first parent unless
    the intermediate stream is cached or checkpointed: the intermediate stream's function is
    then called once per derived stream, not once per batch.
    """

    def __init__(self, prev: StreamNode, func: Callable[[datetime, Any], Any]) -> None:
        """Derive a stream from ``prev`` through ``func(time, rdd)``."""
        # type(self): the concrete class (DStream's TransformedDStream), never a TransformedWith or other kind.
        if type(prev) is type(self) and isinstance(prev, TransformedNode) and not prev.is_cached and not prev.is_checkpointed:
            first, second = prev._func, func

            def fused(t: datetime, rdd: Any) -> Any:
                return second(t, first(t, rdd))

            func, prev = fused, prev.parents[0]
        super().__init__(prev.env, [prev])
        self._func: Callable[[datetime, Any], Any] = func

    def _compute(self, time: Time) -> RDD[Any] | None:
        rdd = self._parents[0].get_or_compute(time)
        if rdd is None:
            return None
        return _rdd_or_none(self._func(batch_datetime(time), rdd), "transform")


def _rdd_or_none(result: Any, what: str) -> RDD[Any] | None:
    """A transform function's result: an RDD (a FrameRDD on Spark Connect), or None for no RDD this batch.

    Anything else fails the batch's generation, as pyspark's does (it reads the result's ``_jrdd``): a list returned by
    mistake would otherwise reach the outputs as if it were the batch's data.
    """
    if not result:
        return None
    if not callable(getattr(result, "mapPartitionsWithIndex", None)):
        raise TypeError(f"the {what} function must return an RDD (or None), got {type(result).__name__} {result!r:.80}")
    return result  # type: ignore[no-any-return]


def check_stream(stream: Any, what: str, *, slide: Duration | None = None) -> Any:
    """``stream``, once checked: anything but a stream of this package is refused (a pyspark.streaming DStream, given by
    mistake, has no node to read), and (``slide`` given: a DStream's ``union``) one of another slide, with pyspark's
    message."""
    if not isinstance(stream, StreamNode):
        kind = f"{type(stream).__module__}.{type(stream).__qualname__}"
        hint = (": a pyspark.streaming DStream cannot be combined with aiodstream's; make both with one streaming.StreamingContext"
                if kind.startswith("pyspark.") else "")
        raise TypeError(f"{what} needs a streaming.DStream, got a {kind}{hint}")
    if slide is not None and stream.slide != slide:
        raise InvalidPipelineError("the two DStream should have same slide duration")
    return stream


def _check_same_context_and_slide(streams: Sequence[StreamNode], what: str) -> None:
    """Spark's requirements on the parents of a union or a multi-stream transform."""
    if not streams:
        raise InvalidPipelineError(f"requirement failed: List of DStreams to {what} is empty")
    for stream in streams:
        check_stream(stream, what)
    if len({id(s.env) for s in streams}) > 1:
        raise InvalidPipelineError("requirement failed: Some of the DStreams have different contexts")
    if len({s.slide for s in streams}) > 1:
        raise InvalidPipelineError("requirement failed: Some of the DStreams have different slide durations")


class TransformedWithNode(StreamNode):
    """``func(time, rdd_a, rdd_b)`` over two streams (pyspark's ``transformWith``, Spark's ``PythonTransformed2DStream``).

    A side without an RDD for the batch is replaced by an empty RDD, and ``func`` is always
    called; the slide is the first stream's.
    """

    def __init__(self, first: StreamNode, second: StreamNode, func: Callable[[datetime, Any, Any], Any]) -> None:
        """Combine ``first`` and ``second`` (of one context) through ``func``."""
        check_stream(second, "transformWith")
        if second.env is not first.env:
            raise InvalidPipelineError("requirement failed: Some of the DStreams have different contexts")
        super().__init__(first.env, [first, second])
        self._func = func

    def _compute(self, time: Time) -> RDD[Any] | None:
        first, second = self._parents
        a = first.get_or_compute(time)
        b = second.get_or_compute(time)
        if a is None or b is None:
            empty = self._env.spark_context.emptyRDD()
            a = empty if a is None else a
            b = empty if b is None else b
        return _rdd_or_none(self._func(batch_datetime(time), a, b), "transformWith")


class UnionNode(StreamNode):
    """The union of several streams' RDDs (Spark's ``UnionDStream``, ``ssc.union``)."""

    def __init__(self, parents: Sequence[StreamNode]) -> None:
        """Unite ``parents``, which share a context and a slide."""
        _check_same_context_and_slide(parents, "union")
        super().__init__(parents[0].env, parents)

    def _compute(self, time: Time) -> RDD[Any] | None:
        rdds = []
        for parent in self._parents:
            rdd = parent.get_or_compute(time)
            if rdd is None:
                raise StreamingStateError(f"Could not generate RDD from a parent for unifying at time {time}")
            rdds.append(rdd)
        return union_rdds(self._env, rdds)


class MultiTransformedNode(StreamNode):
    """``func(rdds)`` over several streams (Spark's ``TransformedDStream``, ``ssc.transform``).

    ``func`` gets a tuple of the parents' RDDs, in the parents' order; every parent must have
    an RDD for the batch, and ``func`` must return one.
    """

    def __init__(self, parents: Sequence[StreamNode], func: Callable[[Sequence[Any]], Any]) -> None:
        """Transform ``parents``, which share a context and a slide, through ``func``."""
        _check_same_context_and_slide(parents, "transform")
        super().__init__(parents[0].env, parents)
        self._func = func

    def _compute(self, time: Time) -> RDD[Any] | None:
        rdds = []
        for parent in self._parents:
            rdd = parent.get_or_compute(time)
            if rdd is None:
                raise StreamingStateError(f"Couldn't generate RDD from parent at time {time}")
            rdds.append(rdd)
        result = self._func(tuple(rdds))
        if not result:
            raise InvalidPipelineError(
                "Transform function must not return null. Return SparkContext.emptyRDD() instead to represent no element "
                "as the result of transformation."
            )
        return result  # type: ignore[no-any-return]


class ForEachNode(StreamNode):
    """An output operation: one job per batch running ``func(time, rdd)`` on the parent's RDD.

    ``supports_async_progress_tracking``: whether the output tolerates what async progress
    tracking may do after a failure (run a batch again, with other input: at least once).
    A user function (``foreachRDD``, ``pprint``) does, as Spark's foreach sinks do; a file
    output does not (Spark refuses its file sink).
    """

    def __init__(self, parent: StreamNode, func: Callable[[Any, Any], Any], *, operation: str = "foreachRDD",
                 supports_async_progress_tracking: bool = True) -> None:
        """Wrap ``func`` as an output operation on ``parent``."""
        super().__init__(parent.env, [parent])
        self._func = func
        self._is_async = inspect.iscoroutinefunction(func)
        self._prebuild = JvmRddPrebuild()
        frame = _user_frame()
        self._name = f"{operation} at {frame}"
        self.supports_async_progress_tracking = supports_async_progress_tracking
        self._states: tuple[Any, ...] | None = None  # the stateful operators upstream (catch_up_state), found once

    @property
    def name(self) -> str:
        """The graph's hook (not for users): the output operation's name and call site, e.g. ``"foreachRDD at app.py:12"``."""
        return self._name

    def register(self) -> None:
        """Add this stream to the graph's output streams."""
        self._env.graph.add_output_stream(self)

    def _compute(self, time: Time) -> RDD[Any] | None:
        return None  # an output stream produces jobs, not RDDs

    def generates_on_loop(self, time: Time) -> bool:
        """The graph's hook (not for users): the job is made without a py4j call when the parent's RDD is, ready
        (making its JVM RDD, if this output does, has nothing to build)."""
        return self._parents[0].generates_on_loop(time)

    def generate_job(self, time: Time) -> Job | None:
        """The graph's hook (not for users): the job running the function on the parent's RDD of ``time``, if it has one."""
        rdd = self._parents[0].get_or_compute(time)
        if rdd is None:
            return None
        # As pyspark.streaming's generation does, the JVM RDD is made now, not in the job's processing
        # time: for an output whose function reads it (learnt from its jobs; see JvmRddPrebuild).
        func = self._prebuild.observing(self._func, rdd)
        # One object per batch's job, not a closure each for the run, the group, the description and
        # the cancel hook (about 20 objects a queued batch that a backlog carries into the collector's
        # oldest generation).
        states = self._states
        if states is None:
            states = self._states = self._stateful_upstream()
        output = _OutputRun(self._env, time, func, rdd, states)
        job = output.job = Job(time, output.run_async if self._is_async else output.run, name=self._name,
                               description=self._name, is_async=True, cancel=output.cancel)
        return job

    def _stateful_upstream(self) -> tuple[Any, ...]:
        """The operators whose failed batches run their state again before this output reads (see stateful_upstream)."""
        return stateful_upstream(self._parents[0])


def stateful_upstream(stream: StreamNode) -> tuple[Any, ...]:
    """The stateful operators ``stream`` reads (itself included), each once, nearest the inputs first: those with a
    ``catch_up_state(time)``, whose failed batches run their state again before a later batch reads it."""
    found: list[Any] = []
    seen: set[int] = set()
    stack: list[tuple[StreamNode, bool]] = [(stream, False)]
    while stack:  # depth first, each node after its parents
        node, parents_done = stack.pop()
        if parents_done:
            if getattr(node, "catch_up_state", None) is not None:
                found.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((parent, False) for parent in reversed(node.parents))
    return tuple(found)



class _OutputRun:
    """One batch's job of an output: runs the function on the batch's RDD, names the Spark job group, cancels it."""

    __slots__ = ("env", "func", "job", "rdd", "states", "time")

    def __init__(self, env: Any, time: Time, func: Callable[[Any, Any], Any], rdd: Any, states: tuple[Any, ...]) -> None:
        self.env = env
        self.time = time
        self.func = func
        self.rdd = rdd
        self.states = states  # the stateful operators upstream: their failed batches catch up first
        self.job: Job | None = None  # set once the job is made

    def _behind(self) -> bool:
        return any(state.state_behind for state in self.states)

    def _catch_up(self) -> None:
        for state in self.states:
            state.catch_up_state(self.time)

    def group(self) -> str:  # known once the job has its output operation id
        assert self.job is not None
        return streaming_job_group(self.env.name, self.time, self.job.output_op_id)

    def description(self) -> str:
        assert self.job is not None
        return job_description(self.time, self.job.output_op_id, self.env.batch_duration.milliseconds)

    async def run(self) -> None:
        # The function runs on a job thread, which the event loop waits for without a worker
        # thread in between. Only the job group and its description are set (before the
        # function's first py4j call): Spark's internal batchTime/outputOpId properties feed the
        # JVM Streaming tab, which this runtime does not have. The group and description are made
        # only if the function calls Spark (see Label).
        spark = self.env.spark
        func = self.func
        if self.states and self._behind():  # on the job thread, in the job's group, before the function reads the state
            func = functools.partial(_after, self._catch_up, func)
        await spark.job_threads().run(spark.spark_context, self.group, self.description, func,
                                      batch_datetime(self.time), self.rdd)

    async def run_async(self) -> None:
        # Spark calls made through run_spark() join the batch's job group.
        spark = self.env.spark
        if self.states and self._behind():
            await spark.job_threads().run(spark.spark_context, self.group, self.description, self._catch_up)
        job = BatchJob(spark.spark_context, self.group(), self.description(), spark.job_threads())
        token = current_batch_job.set(job)
        try:
            await self.func(batch_datetime(self.time), self.rdd)
        finally:
            current_batch_job.reset(token)

    def cancel(self) -> None:
        self.env.spark.cancel_job_group(self.group())


def _after(first: Callable[[], None], func: Callable[..., Any], *args: Any) -> Any:
    first()
    return func(*args)


def _user_frame() -> str:
    """``file:line`` of the first caller outside this package (Spark's call site short form)."""
    frame = user_frame()
    return "?" if frame is None else f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
