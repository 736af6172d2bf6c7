"""Calibration: fit the cluster model to a recorded Spark run, and measure how well it predicts others.

A trace recorded with ``spark.aiodstream.trace.path`` holds, beside the listener events, the Spark
jobs of every output operation: their stages and each task's slot time. :func:`calibrate` splits
such a run into work and contention:

* the work of batch ``k`` is its tasks' slot times, stage by stage (:class:`TracedStages`);
* an operation's driver overhead in batch ``k`` is its time outside its Spark jobs (before the
  first, between two, after the last, and each job's end after its last task), plus one launch
  latency per job;
* the launch latency (job submitted to first task) and the stage overhead (one stage's last task
  to the next stage's first) are the first quartiles over the run: what a job that found a free
  slot took. Longer ones waited for slots, which is contention, not work.

The replay then re-schedules that work on a modelled cluster under any concurrency, so a what-if
on ``concurrentJobs`` or on the number of slots has the contention of the new configuration, not
that of the recorded one. :meth:`Calibration.compare` simulates the configuration of another
recorded run and reports the median and p95 delays of both, with the relative errors.
"""

from __future__ import annotations

import ast
import itertools
import math
import os
import random
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import attrs

from listeners import BatchInfo

from ._cluster_model import ClusterModel
from ._cost_model import Costs
from ._input_rates import ReplayRate
from ._model_checks import ModelError
from ._output_model import OutputModel
from ._processing_times import BatchContext
from ._report import DelayStats, nearest_rank
from ._simulation_model import SimulationModel
from ._simulator import simulate
from ._spark_jobs import SparkJob
from ._trace import Trace, read_trace

__all__ = [
    "DEFAULT_WARMUP",
    "Calibration",
    "Comparison",
    "DelayError",
    "TracedStages",
    "TracedTimes",
    "calibrate",
    "cluster_from_trace",
    "record_run",
]

DEFAULT_WARMUP = 2
"""Batches left out at the start of a recorded run: the first jobs start Spark's Python workers and warm the JVM."""


def _stages_tuple(value: Sequence[Sequence[Sequence[int]]]) -> tuple[tuple[tuple[int, ...], ...], ...]:
    return tuple(tuple(tuple(stage) for stage in batch) for batch in value)


def _replayed(index: int, n: int, cycle_from: int) -> int:
    # Batch k replays recorded batch k while there is one, then cycles over the recorded
    # batches from cycle_from on (the warm-up of a real run happens once).
    if index < n:
        return index
    return cycle_from + (index - cycle_from) % (n - cycle_from)


def _check_cycle(n: int, cycle_from: int) -> None:
    if not 0 <= cycle_from < n:
        raise ModelError("cycle_from", f"must be in [0, {n}) (the recorded batches), got {cycle_from}")


@attrs.frozen
class TracedStages:
    """Recorded work replayed batch by batch: batch ``k`` runs the stages of recorded batch ``k``.

    Past the recorded batches it cycles over them from ``cycle_from`` on, so a recorded warm-up
    (Spark's Python workers starting) is replayed once, at the start, as it happened.

    Attributes:
        batches: per recorded batch, its stages, each the slot times (ms) of its tasks.
        cycle_from: the first recorded batch of the cycle.
    """

    batches: tuple[tuple[tuple[int, ...], ...], ...] = attrs.field(converter=_stages_tuple)
    cycle_from: int = 0

    def __attrs_post_init__(self) -> None:
        if not self.batches:
            raise ModelError("stages", "the trace holds no recorded Spark jobs to replay")
        _check_cycle(len(self.batches), self.cycle_from)

    def sample_stages(self, batch: BatchContext, rng: random.Random) -> tuple[tuple[int, ...], ...]:
        """The recorded stages of the batch's counterpart."""
        return self.batches[_replayed(batch.index, len(self.batches), self.cycle_from)]


def _ints(values: Sequence[int]) -> tuple[int, ...]:
    return tuple(values)


@attrs.frozen
class TracedTimes:
    """A recorded time per batch (an operation's driver overhead, a batch's generation), replayed like :class:`TracedStages`."""

    values_ms: tuple[int, ...] = attrs.field(converter=_ints)
    cycle_from: int = 0

    def __attrs_post_init__(self) -> None:
        if not self.values_ms:
            raise ModelError("values", "must hold at least one recorded time")
        _check_cycle(len(self.values_ms), self.cycle_from)

    def sample(self, batch: BatchContext, rng: random.Random) -> int:
        """The recorded time of the batch's counterpart."""
        return self.values_ms[_replayed(batch.index, len(self.values_ms), self.cycle_from)]


_LOCAL = re.compile(r"^local\[(\d+|\*)(?:,\s*\d+)?\]$")


def cluster_from_trace(trace: Trace, **overrides: Any) -> ClusterModel:
    """The cluster a trace ran on, from its header: one executor with ``local[N]``'s N slots, or the default parallelism.

    With a ``local`` master the driver is the recording process itself: its work (each
    operation's overhead, the gaps between stages) runs one job at a time (``driver_threads=1``:
    Python's GIL, the DAG scheduler's single event thread). Processors are not modelled by
    default: PySpark tasks of a few tens of milliseconds spend much of their slot time waiting
    (on the JVM, on sockets), and on the fidelity runs ``local[4]`` with three concurrent jobs kept
    2.9 tasks in flight on two processors without slowing them down. Give ``cpus=`` (and
    ``driver_on_cpus=True``) for CPU-bound tasks. ``overrides`` replace any field (``cores=4``).

    Raises:
        ModelError: the header says neither the master nor the parallelism.
    """
    meta = trace.meta
    master = str(meta.get("master") or "").strip()
    match = _LOCAL.match(master)
    local = bool(match) or master == "local"
    if match and match.group(1) != "*":
        slots = int(match.group(1))
    elif meta.get("default_parallelism"):
        slots = int(meta["default_parallelism"])
    elif master == "local":
        slots = 1
    else:
        raise ModelError("meta.master", f"cannot tell the task slots from master {master!r}; give cores=")
    fields: dict[str, Any] = {"executors": 1, "cores": slots}
    if local:
        fields["driver_threads"] = 1
    fields.update(overrides)
    return ClusterModel(**fields)


def _quartile(values: Sequence[int]) -> int:
    """The first quartile (nearest rank), 0 for no values."""
    return nearest_rank(sorted(values), 0.25) if values else 0


def _driver_time(start_ms: int, end_ms: int, jobs: Sequence[SparkJob], launch_ms: int) -> int:
    """An operation's driver time: outside its Spark jobs, each job's end after its last task, and ``launch_ms`` per job."""
    ordered = [j for j in jobs if j.submitted_ms is not None and j.completed_ms is not None]
    if not ordered:
        return max(0, end_ms - start_ms)
    ordered.sort(key=lambda j: j.submitted_ms or 0)
    outside = ordered[0].submitted_ms - start_ms + end_ms - ordered[-1].completed_ms  # type: ignore[operator]
    for prev, nxt in itertools.pairwise(ordered):
        outside += max(0, nxt.submitted_ms - prev.completed_ms)  # type: ignore[operator]
    # A job's end: from its last task to Spark marking it done (handling the result).
    for job in ordered:
        last = job.stages[-1].last_end_ms if job.stages else None
        if last is not None:
            outside += max(0, job.completed_ms - last)  # type: ignore[operator]
    return max(0, outside) + launch_ms * len(ordered)


@attrs.frozen
class DelayError:
    """One delay statistic, measured and simulated.

    Attributes:
        name: e.g. ``"processing p95"``.
        measured_ms: in the recorded run.
        simulated_ms: in the simulation of its configuration.
    """

    name: str
    measured_ms: float
    simulated_ms: float

    @property
    def error(self) -> float:
        """``(simulated - measured) / measured``; 0 when both are 0, infinite when only the measurement is."""
        if self.measured_ms == 0:
            return 0.0 if self.simulated_ms == 0 else math.inf
        return (self.simulated_ms - self.measured_ms) / self.measured_ms

    @classmethod
    def between(cls, measured: Sequence[BatchInfo], simulated: Sequence[BatchInfo]) -> tuple[DelayError, ...]:
        """The median and p95 processing and scheduling delays of two runs' batches, side by side.

        ``simulated`` may be another recorded run: the spread between two runs of one program
        is what no model can beat.
        """
        rows = []
        for name, attr in (("processing", "processing_delay"), ("scheduling", "scheduling_delay")):
            real = DelayStats.of([getattr(b, attr).milliseconds for b in measured if getattr(b, attr) is not None])
            sim = DelayStats.of([getattr(b, attr).milliseconds for b in simulated if getattr(b, attr) is not None])
            rows.append(cls(f"{name} median", float(real.p50_ms), float(sim.p50_ms)))
            rows.append(cls(f"{name} p95", float(real.p95_ms), float(sim.p95_ms)))
        return tuple(rows)

    def error_against(self, floor_ms: float) -> float:
        """``(simulated - measured) / max(measured, floor_ms)``: the error with the measurement taken as at least ``floor_ms``."""
        return (self.simulated_ms - self.measured_ms) / max(self.measured_ms, floor_ms, 1e-9)

    def within(self, tolerance: float, floor_ms: float = 0.0) -> bool:
        """Whether ``|simulated - measured|`` is at most ``tolerance`` times ``max(measured, floor_ms)``."""
        return abs(self.simulated_ms - self.measured_ms) <= tolerance * max(self.measured_ms, floor_ms)


@attrs.frozen
class Comparison:
    """A recorded run beside the simulation of its configuration.

    Attributes:
        label: what was compared (the configuration).
        concurrent_jobs: the run's ``concurrentJobs``.
        cluster: the cluster model simulated.
        batches: batches compared (after the warm-up).
        delays: median and p95 processing and scheduling delay, measured and simulated.
    """

    label: str
    concurrent_jobs: int
    cluster: ClusterModel
    batches: int
    delays: tuple[DelayError, ...]

    def worst(self, floor_ms: float = 0.0) -> float:
        """The largest ``|error|`` with each measurement taken as at least ``floor_ms``."""
        return max(abs(d.error_against(floor_ms)) for d in self.delays)

    def format(self) -> str:
        """A table of the four statistics."""
        lines = [f"{self.label}: {self.batches} batches, concurrent jobs {self.concurrent_jobs}, "
                 f"{self.cluster.slots} slots{'' if self.cluster.cpus is None else f' on {self.cluster.cpus} cpus'}",
                 f"  {'delay':<18}{'measured':>10}{'simulated':>11}{'error':>9}{'difference':>13}"]
        for d in self.delays:
            # The difference beside the relative error: a 1 ms delay simulated as 0 ms is "-100 %" and 1 ms.
            err = "-" if math.isinf(d.error) else f"{100 * d.error:+.0f} %"
            lines.append(f"  {d.name:<18}{d.measured_ms:>8.0f} ms{d.simulated_ms:>8.0f} ms{err:>9}"
                         f"{d.simulated_ms - d.measured_ms:>+10.0f} ms")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "label": self.label, "concurrent_jobs": self.concurrent_jobs, "slots": self.cluster.slots,
            "cpus": self.cluster.cpus, "batches": self.batches,
            "delays": [{"name": d.name, "measured_ms": d.measured_ms, "simulated_ms": d.simulated_ms,
                        "error": None if math.isinf(d.error) else d.error} for d in self.delays],
        }


@attrs.frozen
class Calibration:
    """A model fitted to one recorded run (see the module docstring).

    Attributes:
        trace: the calibration run.
        model: its replay: the recorded work on the fitted cluster, in the recorded configuration.
        stage_overhead_ms: the fitted gap between two stages of a job.
        operation_overheads_ms: the median driver overhead of each output operation (the
            replay uses each batch's own).
        generation_ms: the median time from a batch's time to its jobs' submission.
        warmup: batches left out at the start of every run.
    """

    trace: Trace = attrs.field(repr=False)
    model: SimulationModel = attrs.field(repr=False)
    stage_overhead_ms: float
    operation_overheads_ms: tuple[float, ...]
    generation_ms: float
    warmup: int

    def predict(self, *, concurrent_jobs: int | None = None, cluster: ClusterModel | None = None,
                batches: int | None = None) -> SimulationModel:
        """The model of another configuration: the same work, another concurrency or cluster."""
        fields: dict[str, Any] = {}
        if concurrent_jobs is not None:
            fields["concurrent_jobs"] = concurrent_jobs
        if cluster is not None:
            fields["cluster"] = attrs.evolve(cluster, stage_overhead_ms=self.stage_overhead_ms)
        if batches is not None:
            fields["batches"] = batches
        return self.model.evolve(**fields)

    def compare(self, run: Trace, *, label: str | None = None, **cluster: Any) -> Comparison:
        """Simulate the configuration of the recorded ``run`` (its concurrency and slots) and compare delays.

        Raises:
            ModelError: ``run`` has too few batches after the warm-up, or a different interval.
        """
        measured = run.completed_batches[self.warmup:]
        if not measured:
            raise ModelError("events", f"the run has no completed batch after the {self.warmup} warm-up batches")
        interval = run.batch_interval
        if interval is not None and interval != self.model.batch_interval:
            raise ModelError("batch_interval", f"the run's interval {interval} differs from the calibration's "
                                               f"{self.model.batch_interval}")
        target = cluster_from_trace(run, **cluster)
        jobs = run.concurrent_jobs or 1
        model = self.predict(concurrent_jobs=jobs, cluster=target, batches=len(run.completed_batches))
        simulated = simulate(model).batches[self.warmup:]
        name = label or f"{run.meta.get('master', '?')} concurrentJobs={jobs}"
        return Comparison(name, jobs, model.cluster or target, len(measured), DelayError.between(measured, simulated))


def calibrate(trace: Trace, *, warmup: int = DEFAULT_WARMUP, cluster: ClusterModel | None = None) -> Calibration:
    """Fit the cluster model to a recorded run with Spark jobs (``spark.aiodstream.trace.path``).

    Args:
        trace: the calibration run. Any configuration will do: waits for slots are left out
            of the fitted times. Tasks that ran under contention ran longer, though, and that
            stays in the replayed work, so a configuration in the middle of the range to predict
            splits that error both ways.
        warmup: batches to leave out at the start.
        cluster: the cluster it ran on (default: from the trace's header, :func:`cluster_from_trace`).

    Raises:
        ModelError: the trace has no Spark jobs, or an operation of a batch has none.
    """
    if not trace.spark_jobs:
        raise ModelError("spark_jobs", "the trace has no Spark jobs; record it with spark.aiodstream.trace.path "
                                       "on a context whose Spark UI is on")
    done = trace.completed_batches[warmup:]
    if not done:
        raise ModelError("events", f"the trace has no completed batch after the {warmup} warm-up batches")
    interval = trace.batch_interval
    if interval is None:
        raise ModelError("batch_interval", "the trace's header has no batch interval")
    base = cluster or cluster_from_trace(trace)
    op_ids = sorted(done[0].output_operation_infos)

    def jobs_of(b: BatchInfo, op: int) -> tuple[SparkJob, ...]:
        jobs = trace.spark_jobs.get((b.batch_time.milliseconds, op))
        if jobs is None:
            raise ModelError(f"spark_jobs[{b.batch_time.milliseconds}, {op}]", "no Spark jobs recorded for this operation")
        return jobs

    # Under contention a job waits for slots before its first task and between its stages:
    # that wait is the contention the replay re-creates, not work. The driver's own latency is
    # what an uncontended job shows, so the first quartile stands for it: in a run without
    # contention it is within a millisecond or two of the median, under contention it is the
    # jobs that found a free slot.
    gaps: list[int] = []
    launches: list[int] = []
    for b in done:
        for op in op_ids:
            for job in jobs_of(b, op):
                first = job.stages[0].first_launch_ms if job.stages else None
                if first is not None and job.submitted_ms is not None:
                    launches.append(max(0, first - job.submitted_ms))
                for prev, nxt in itertools.pairwise(job.stages):
                    end, start = prev.last_end_ms, nxt.first_launch_ms
                    if end is not None and start is not None:
                        gaps.append(max(0, start - end))
    stage_overhead = float(_quartile(gaps))
    launch = _quartile(launches)

    # Every recorded batch is replayed, the warm-up included (once, at the start); the fitted
    # constants come from the batches after it. An operation's driver overhead is its time
    # outside its jobs (before the first, between two, after the last) plus a launch latency
    # per job.
    recorded = trace.completed_batches
    outputs = []
    overheads = []
    for op in op_ids:
        work = []
        spare = []
        for b in recorded:
            info = b.output_operation_infos.get(op)
            if info is None or info.start_time is None or info.end_time is None:
                raise ModelError(f"batch {b.batch_time.milliseconds}.output_operations[{op}]", "has no start and end time")
            jobs = jobs_of(b, op)
            work.append([tuple(t.duration_ms for t in stage.tasks) for job in jobs for stage in job.stages])
            spare.append(_driver_time(info.start_time.milliseconds, info.end_time.milliseconds, jobs, launch))
        overheads.append(float(statistics.median(spare[warmup:])))
        name = recorded[0].output_operation_infos[op].name or f"output-{op}"
        outputs.append(OutputModel(name, stages=TracedStages(work, warmup), overhead=TracedTimes(spare, warmup)))
    # The JobGenerator's time per batch: from the batch time to the submission of its jobs.
    generation = [max(0, b.submission_time.milliseconds - b.batch_time.milliseconds) for b in recorded]
    model = SimulationModel(
        batch_interval=interval,
        outputs=outputs,
        input=ReplayRate(interval.milliseconds, [b.num_records for b in recorded]),
        concurrent_jobs=trace.concurrent_jobs or 1,
        sequential_batches=trace.sequential_batches,
        batches=len(recorded),
        cluster=attrs.evolve(base, stage_overhead_ms=stage_overhead),
        costs=Costs(generation=TracedTimes(generation, warmup)),
    )
    return Calibration(trace, model, stage_overhead, tuple(overheads), float(statistics.median(generation[warmup:])), warmup)


def record_run(
    program: str | os.PathLike[str],
    trace: str | os.PathLike[str],
    *,
    batches: int,
    master: str | None = None,
    concurrent_jobs: int | None = None,
    args: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
    python: str = sys.executable,
    timeout: float | None = None,
) -> Trace:
    """Run a pyspark.streaming program once, its import changed, recording a trace of its first ``batches`` batches.

    The program runs in a child process with Spark's settings passed the way ``spark-submit``
    passes them (``PYSPARK_SUBMIT_ARGS``): ``spark.aiodstream.trace.path`` records the run and
    its Spark jobs, ``spark.aiodstream.trace.batches`` stops the context gracefully after that
    many batches (the program's ``awaitTermination()`` returns), Spark's UI is on (its REST API
    gives the task times). The program must take its master from the settings (not hard-code
    one in ``SparkConf.setMaster``) for ``master`` to apply.

    Args:
        program: the program's file.
        trace: where the trace goes.
        batches: how many batches to record.
        master: ``--master`` (e.g. ``local[2]``).
        concurrent_jobs: ``spark.streaming.concurrentJobs``.
        args: the program's own arguments.
        conf: more Spark settings.
        python: the interpreter (also the workers' ``PYSPARK_PYTHON``).
        timeout: seconds before the child is killed.

    Raises:
        ModelError: the program failed (its exit status and the end of its stderr are in the
            message), or left no trace, or still takes its StreamingContext from pyspark.streaming.
    """
    _check_import(program)
    settings = {"spark.aiodstream.trace.path": os.fspath(trace), "spark.aiodstream.trace.batches": str(batches),
                "spark.ui.enabled": "true", "spark.ui.port": "0", "spark.ui.showConsoleProgress": "false"}
    if concurrent_jobs is not None:
        settings["spark.streaming.concurrentJobs"] = str(concurrent_jobs)
    settings.update(conf or {})
    submit = [] if master is None else ["--master", master]
    for key, value in settings.items():
        submit += ["--conf", f"{key}={value}"]
    env = dict(os.environ, PYSPARK_SUBMIT_ARGS=shlex.join([*submit, "pyspark-shell"]), PYSPARK_PYTHON=python)
    Path(trace).unlink(missing_ok=True)
    done = subprocess.run([python, os.fspath(program), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise ModelError("program", f"{program} exited with status {done.returncode}:\n{tail}")
    if not Path(trace).is_file():
        raise ModelError("program", f"{program} left no trace at {trace}: does it create a StreamingContext from "
                                    "aiodstream's streaming package and start it?")
    return read_trace(trace)


def _check_import(program: str | os.PathLike[str]) -> None:
    """Refuse a program whose StreamingContext is still pyspark.streaming's: that one reads no ``spark.aiodstream.*``
    setting, so its run records nothing and never stops after the batches asked for (its ``awaitTermination()``
    waits for good). A file that cannot be read or parsed is left to fail as the program."""
    try:
        tree = ast.parse(Path(program).read_bytes(), filename=os.fspath(program))
    except (OSError, SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):  # from pyspark.streaming import StreamingContext (or *)
            found = node.module == "pyspark.streaming" and any(alias.name in ("StreamingContext", "*") for alias in node.names)
        elif isinstance(node, ast.Attribute):  # pyspark.streaming.StreamingContext
            found = node.attr == "StreamingContext" and ast.unparse(node.value) == "pyspark.streaming"
        else:
            continue
        if found:
            raise ModelError("program", f"{program} takes its StreamingContext from pyspark.streaming (line {node.lineno}), "
                                        "whose run records no trace and does not stop after the batches asked for: "
                                        "change the import to `from streaming import StreamingContext`, the one change "
                                        "a pyspark.streaming program needs to run here")
