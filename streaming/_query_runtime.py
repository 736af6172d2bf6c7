"""The runtime a StreamingContext runs on, chosen once: micro-batches or continuous processing.

Spark's ``StreamingQueryManager.createQuery`` choosing ``MicroBatchExecution`` or
``ContinuousExecution`` by trigger; what only a micro-batch query has (rate controllers, trace
recording, the input streams' runtime) is set up here, so the context sees a ``QueryRuntime`` only.
"""

from __future__ import annotations

from typing import Callable, Mapping

from listeners import OverflowPolicy
from scheduler import CheckpointPath, Clock, PIDRateEstimator, RateController, StreamingStateError
from scheduler.query import runs_batches_sequentially

from ._settings import ContextSettings
from .continuous import ContinuousExecution, SparkTaskLauncher
from .dstream import StreamEnvironment
from .inputs import RateControlledInput, continuous_plan
from .runtime import QueryRuntime, StreamingRuntime
from .simulation import TraceRecording

__all__ = ["create_runtime", "micro_batch_runtime", "query_options", "start_micro_batch"]


def query_options(env: StreamEnvironment, settings: ContextSettings, given: Mapping[str, object]) -> dict[str, object]:
    """The query's options for its kind: Spark's settings, overridden by ``given`` (``checkpoint()``, ``getOrCreate()``).

    Raises:
        InvalidPipelineError: async progress tracking for a continuous query.
    """
    return settings.progress_options(given) if env.continuous is None else settings.continuous_options(given)


def create_runtime(env: StreamEnvironment, settings: ContextSettings, *, clock: Clock | None, overflow: OverflowPolicy,
                   name: str | None, checkpoint_location: CheckpointPath | None, options: Mapping[str, object]) -> QueryRuntime:
    """The runtime for ``env``'s graph: a ``ContinuousExecution`` with a Continuous trigger, else a ``StreamingRuntime``.

    Args:
        env: the context's streams' environment (graph, batch interval, trigger, Spark binding).
        settings: the context's settings.
        clock: the runtime's clock (``None``: the wall clock).
        overflow: what a full listener queue does.
        name: the query's name.
        checkpoint_location: where the query keeps its logs, or ``None``.
        options: the progress-tracking options given to ``checkpoint()`` or ``getOrCreate()``.
    """
    options = query_options(env, settings, options)
    if env.continuous is not None:
        return ContinuousExecution(
            lambda: continuous_plan(env.recipe), env.continuous, launcher=SparkTaskLauncher(lambda: env.spark.spark_context),
            clock=clock, name=name, checkpoint_location=checkpoint_location, options=options,
            graceful_stop_timeout=settings.graceful_stop_timeout, listener_exit_timeout=settings.listener_exit_timeout)
    env.spark.set_concurrency(settings.concurrent_jobs)
    return StreamingRuntime(
        env.graph, env.batch_duration, clock=clock, concurrent_jobs=settings.concurrent_jobs,
        graceful_stop_timeout=settings.graceful_stop_timeout, listener_overflow=overflow,
        listener_exit_timeout=settings.listener_exit_timeout, name=name, checkpoint_location=checkpoint_location,
        track_progress=True, options=options, stop_on_failure=settings.stop_on_failure)


def micro_batch_runtime(runtime: QueryRuntime) -> StreamingRuntime:
    """``runtime`` as the micro-batch runtime that DStream inputs run their receivers on.

    Raises:
        StreamingStateError: a continuous query (its inputs are continuous inputs).
    """
    if not isinstance(runtime, StreamingRuntime):
        raise StreamingStateError("a continuous context has no micro-batch runtime: its inputs are continuous inputs")
    return runtime


def start_micro_batch(runtime: QueryRuntime, env: StreamEnvironment, settings: ContextSettings, trace: TraceRecording,
                      stop: Callable[[], None]) -> None:
    """What a micro-batch query adds at its start (blocking: py4j calls): with ``spark.streaming.backpressure.enabled``
    a rate controller per rate-controlled input (receivers, direct Kafka streams: Spark's), and the trace recording asked
    for. Nothing for a continuous one."""
    if env.continuous is not None:
        return  # continuous inputs are read as they come (no rate to control), and a trace needs batches
    if settings.backpressure is not None:
        for stream in env.graph.input_streams:
            if isinstance(stream, RateControlledInput):  # receivers, direct Kafka streams
                pid = PIDRateEstimator(env.batch_duration.milliseconds, *settings.backpressure)
                runtime.add_listener(RateController(stream.id, pid, stream.update_rate), name=f"RateController-{stream.id}")
    trace.start(settings.trace, runtime=runtime, sc=env.spark_context, batch_interval=env.batch_duration,
                concurrent_jobs=settings.concurrent_jobs, async_mode=env.async_mode, stop=stop,
                sequential_batches=runs_batches_sequentially(env.graph))
