"""The simulator: the real StreamingRuntime (JobGenerator, JobScheduler, listener bus) on virtual time.

Nothing here re-implements scheduling: a :class:`SimulatedGraph` hands the real scheduler jobs
that sleep on a :class:`~scheduler.VirtualClock`, and the clock jumps whenever the engine waits.
"""

from __future__ import annotations

import contextlib
import functools
import time as _wall
from typing import Callable, Iterable, Literal

import anyio
import attrs

from listeners import BatchCompleted, BatchInfo, EventRecorder, OverflowPolicy, StreamingEvent, StreamingListener
from scheduler import Duration, PIDRateEstimator, RateController, VirtualClock

from ..runtime import StreamingRuntime
from ._cluster import ClusterStatistics
from ._costs import CostHook, CostlyListener
from ._graph import SimulatedGraph
from ._loop import running_loop_probe, virtual_time_event_loop
from ._report import QueuePoint, Summary, format_duration, queue_lengths
from ._simulation_model import SimulationModel

__all__ = ["ProgressCallback", "SimulationResult", "simulate", "simulate_async"]

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(completed_batches, total_batches)`` while a simulation runs."""

# A graceful stop drains every generated batch, however deep the backlog of an unstable
# configuration: the runtime's stop timeout is measured on the virtual clock, so make it
# effectively unbounded (about 146 million years).
_DRAIN_WITHOUT_BOUND = Duration(2**62)


@attrs.frozen
class SimulationResult:
    """The outcome of one simulated run.

    Attributes:
        model: the model that ran.
        batches: every batch's BatchInfo, as the listener bus delivered it in BatchCompleted,
            ordered by batch time.
        summary: delays, utilisation and stability.
        events: every listener event in delivery order, if the run was asked to record them.
        jumps: how many times the virtual clock jumped.
        wall_seconds: how long the simulation took in real time (not compared by ``==``).
        source_backlog: with rate control, the records that arrived within the horizon and no
            batch took (they wait at the source); 0 otherwise.
        final_rate: with rate control, the ingestion rate of input 0 at the end (records/s),
            or ``None`` for unlimited.
        final_rates: the same for every input, in order.
        cluster: what the cluster model did (tasks, busy slot time, failures, down time), or
            ``None`` without one.
    """

    model: SimulationModel = attrs.field(repr=False)
    batches: tuple[BatchInfo, ...] = attrs.field(repr=lambda b: f"<{len(b)} batches>")
    summary: Summary = attrs.field(repr=False)
    events: tuple[StreamingEvent, ...] | None = attrs.field(default=None, repr=lambda e: "None" if e is None else f"<{len(e)} events>")
    jumps: int = 0
    wall_seconds: float = attrs.field(default=0.0, eq=False)
    source_backlog: int = 0
    final_rate: float | None = None
    final_rates: tuple[float | None, ...] = ()
    cluster: ClusterStatistics | None = attrs.field(default=None, eq=False)

    @property
    def queue(self) -> tuple[QueuePoint, ...]:
        """Waiting and pending batches at each batch time."""
        return queue_lengths(self.batches)

    @property
    def batches_per_second(self) -> float:
        """Simulated batches per real second."""
        return len(self.batches) / self.wall_seconds if self.wall_seconds > 0 else float("inf")

    def format(self) -> str:
        """The summary as text (with the source backlog and the final rate under rate control)."""
        text = self.summary.format()
        if self.model.rate_controlled:
            rates = ", ".join("unlimited" if r is None else f"{r:,.0f} records/s" for r in self.final_rates or (self.final_rate,))
            text += f"\nrate control: final rate {rates}; {self.source_backlog:,} records waiting at the source"
        if self.cluster is not None:
            c = self.cluster
            slots = self.model.cluster.slots if self.model.cluster is not None else self.model.concurrent_jobs
            horizon = max(1, self.model.horizon.milliseconds)
            text += (f"\ncluster: {c.tasks:,} tasks, slots {100 * c.busy_ms / (slots * horizon):.0f} % busy over the horizon"
                     f"; {c.failures} failures, {c.lost_tasks} tasks lost, down {format_duration(c.down_ms)}")
        return text


class _Collector(StreamingListener):
    """Keeps each completed batch's BatchInfo; the only events a plain simulation builds."""

    run_on_loop = True  # an append per batch: no thread trip

    def __init__(self, total: int, progress: ProgressCallback | None) -> None:
        self.batches: list[BatchInfo] = []
        self._total = total
        self._progress = progress
        self._every = max(1, total // 200)

    def on_batch_completed(self, event: BatchCompleted) -> None:
        batches = self.batches
        batches.append(event.batch_info)
        if self._progress is not None and (len(batches) % self._every == 0 or len(batches) == self._total):
            self._progress(len(batches), self._total)


async def simulate_async(
    model: SimulationModel,
    *,
    listeners: Iterable[object] = (),
    progress: ProgressCallback | None = None,
    record_events: bool = False,
) -> SimulationResult:
    """Run ``model`` on the real runtime in virtual time and return every batch and a summary.

    Runs inside the caller's event loop (asyncio or trio; in a notebook, ``await`` it). The run
    generates ``model.num_batches`` batches on the grid ``interval, 2 * interval, ...``, then stops
    gracefully: every generated batch runs to completion, however long the backlog.

    Args:
        model: what to simulate.
        listeners: extra listeners (e.g. a :class:`TraceRecorder`) added to the runtime's bus;
            they see exactly the events of a real run.
        progress: called now and then as ``progress(completed, total)``.
        record_events: keep every event in :attr:`SimulationResult.events` (memory grows with
            the run; off by default).

    Raises:
        JobFailedError: a processing-time model raised while a batch was generated (the
            original exception is the ``__cause__``); the run stops at that batch.

    On cancellation the simulation stops at once; nothing is returned.
    """
    return await _simulate(model, VirtualClock(0), listeners, progress, record_events)


async def _simulate(
    model: SimulationModel,
    clock: VirtualClock,
    listeners: Iterable[object],
    progress: ProgressCallback | None,
    record_events: bool,
) -> SimulationResult:
    # ``clock`` is driven by the event loop itself (virtual_time_event_loop) or, in a loop
    # the simulation does not own, by its driver task started here.
    started = _wall.perf_counter()
    total = model.num_batches
    stop_point = anyio.Event()
    # Graceful stop lets the tick the timer waits for fire, so asking to stop once batch n - 1
    # exists yields exactly n batches (and asking before the first tick yields one).
    stop_after = total - 1

    def on_generated(count: int) -> None:
        if count >= stop_after:
            stop_point.set()

    graph = SimulatedGraph(model, clock, on_generated=on_generated)
    collector = _Collector(total, progress)
    recorder = EventRecorder() if record_events else None
    costs = model.costs
    async with anyio.create_task_group() as tg:
        if not clock.driven:
            await tg.start(functools.partial(clock.run, probe=running_loop_probe()))
        hooks = []
        if costs.checkpoint is not None or costs.commit is not None:
            hook = CostHook(costs, clock, model.batch_interval, model.seed)
            if costs.checkpoint_mode == "async":
                tg.start_soon(hook.run_writer)
            hooks.append(hook)
        runtime = StreamingRuntime(
            graph,
            model.batch_interval,
            clock=clock,
            concurrent_jobs=model.concurrent_jobs,
            graceful_stop_timeout=_DRAIN_WITHOUT_BOUND,
            # Lossless: a listener that falls behind slows the simulation in real time, never
            # loses an event (the clock is held while it works: blocking costs no virtual time).
            listener_overflow=OverflowPolicy.BLOCK,
            listener_bus_capacity=costs.listener_capacity,
            # Nor at stop: the clock is held while a listener works, so a deadline on it would never pass.
            listener_exit_timeout=None,
            hooks=hooks,
            name="simulation",
        )
        async with runtime:
            runtime.add_listener(collector, name="simulation-collector")
            if recorder is not None:
                runtime.add_listener(recorder, name="simulation-recorder")
            for stream, one in enumerate(model.input_models):
                bp = one.backpressure
                if bp is None:
                    continue
                pid = PIDRateEstimator(model.batch_interval.milliseconds, bp.proportional, bp.integral, bp.derivative,
                                       bp.min_rate)
                runtime.add_listener(RateController(stream, pid, functools.partial(graph.set_rate, stream=stream)),
                                     name=f"RateController-{stream}")
            if costs.listener is not None:
                runtime.add_listener(CostlyListener(costs.listener, clock, model.batch_interval, model.seed),
                                     name="simulated-listener")
            extra = tuple(listeners)
            for listener in extra:
                runtime.add_listener(listener)
            # The caller's listeners take no virtual time: a callback on its thread (or awaiting real I/O) is work
            # of the current instant, so the clock waits for what they were given before it jumps.
            bus = runtime.listener_bus
            hold = clock.held_while(functools.partial(bus.undelivered, extra), functools.partial(bus.wait_delivered, extra))
            with hold if extra else contextlib.nullcontext():
                await runtime.start()
                failure = await _wait_stop_point(runtime, stop_point) if stop_after > 0 else None
                # A failed batch ends the run there: a graceful stop would generate the tick it waits for.
                await runtime.stop(graceful=failure is None)
        tg.cancel_scope.cancel()
    error = failure or runtime.exception()  # the first failure: a later batch's would replace it in the runtime
    if error is not None:
        raise error
    batches = tuple(sorted(collector.batches, key=lambda b: b.batch_time.milliseconds))
    return SimulationResult(
        model=model,
        batches=batches,
        summary=Summary.from_batches(batches, model.batch_interval, model.concurrent_jobs, engine_costs=any(
            cost is not None for cost in (costs.generation, costs.checkpoint, costs.commit, costs.listener))),
        events=None if recorder is None else tuple(recorder.events),
        jumps=clock.jumps,
        wall_seconds=_wall.perf_counter() - started,
        source_backlog=graph.source_backlog(model.horizon.milliseconds),
        final_rate=graph.rate,
        final_rates=tuple(graph.rates),
        cluster=None if graph.cluster is None else graph.cluster.statistics,
    )


async def _wait_stop_point(runtime: StreamingRuntime, stop_point: anyio.Event) -> BaseException | None:
    """Wait for the stop point, or the first failure (a batch whose generation fails never reaches it): returns that."""
    failures: list[BaseException] = []
    async with anyio.create_task_group() as tg:

        async def on_failure() -> None:
            try:
                await runtime.await_termination()
            except Exception as exc:
                failures.append(exc)
                stop_point.set()

        tg.start_soon(on_failure)
        await stop_point.wait()
        tg.cancel_scope.cancel()
    return failures[0] if failures else None


def simulate(
    model: SimulationModel,
    *,
    listeners: Iterable[object] = (),
    progress: ProgressCallback | None = None,
    record_events: bool = False,
    backend: Literal["asyncio", "trio"] = "asyncio",
) -> SimulationResult:
    """:func:`simulate_async` in an event loop of its own (for scripts; in a notebook, await that).

    Args:
        model: what to simulate.
        listeners: extra listeners added to the runtime's bus.
        progress: called now and then as ``progress(completed, total)``.
        record_events: keep every event in the result.
        backend: the anyio backend to run on.
    """
    clock = VirtualClock(0)
    run = functools.partial(_simulate, model, clock, listeners, progress, record_events)
    if backend == "asyncio":
        # The simulation owns this loop, so the loop itself jumps the clock whenever it would
        # wait: no driver task, and no loop iteration spent asking whether anything can run.
        return anyio.run(run, backend="asyncio", backend_options={"loop_factory": lambda: virtual_time_event_loop(clock)})
    return anyio.run(run, backend=backend)
