"""Scheduling-delay simulation: the real engine on virtual time (no Spark counterpart).

Build a :class:`SimulationModel` (or load one from TOML with :func:`load_model`, or derive one
from a recorded trace with :func:`model_from_trace`), optionally with a :class:`ClusterModel` of
task slots its jobs share, several :class:`InputModel` inputs, engine :class:`Costs` and
:class:`Failures`; :func:`calibrate` fits a model to a traced Spark run. Run it with :func:`simulate` (or
``await simulate_async(...)`` in a notebook), and read the :class:`Summary`; :func:`sweep`
compares intervals and concurrency, and :func:`plot_run` / :func:`plot_sweep` draw them.
"""

from ._calibrate import (
    DEFAULT_WARMUP,
    Calibration,
    Comparison,
    DelayError,
    TracedStages,
    TracedTimes,
    calibrate,
    cluster_from_trace,
    record_run,
)
from ._cluster import ClusterStatistics, SimulatedCluster
from ._cluster_model import ClusterModel
from ._config import load_model, model_from_mapping, parse_duration, read_toml, whole_duration
from ._cost_model import Costs
from ._failure_model import Failures
from ._graph import SimulatedGraph
from ._input_model import Backpressure, InputModel
from ._input_rates import BurstRate, ConstantRate, InputRate, ReplayRate, StepRate
from ._loop import ProbedEventLoop, probed_event_loop, running_loop_probe, virtual_time_event_loop
from ._model_checks import ModelError
from ._output_model import OutputModel, Stage, StageWork
from ._plot import plot_run, plot_sweep, run_figure, sweep_figure
from ._processing_times import (
    BatchContext,
    Constant,
    Exponential,
    FromFunction,
    Linear,
    LogNormal,
    Normal,
    ProcessingTime,
    Replay,
    Uniform,
)
from ._recording import TraceRecording
from ._report import LAG_GROWTH_TOLERANCE, DelayStats, QueuePoint, Summary, format_duration, queue_lengths
from ._simulation_model import MAX_BATCHES, SimulationModel
from ._simulator import ProgressCallback, SimulationResult, simulate, simulate_async
from ._spark_jobs import SparkJob, SparkStage, SparkTask, fetch_spark_jobs
from ._sweep import SweepPoint, SweepResult, sweep, sweep_async
from ._trace import Trace, TraceRecorder, event_from_dict, event_to_dict, model_from_trace, read_trace

__all__ = [
    "DEFAULT_WARMUP",
    "LAG_GROWTH_TOLERANCE",
    "MAX_BATCHES",
    "Backpressure",
    "BatchContext",
    "BurstRate",
    "Calibration",
    "ClusterModel",
    "ClusterStatistics",
    "Comparison",
    "Constant",
    "ConstantRate",
    "Costs",
    "DelayError",
    "DelayStats",
    "Exponential",
    "Failures",
    "FromFunction",
    "InputModel",
    "InputRate",
    "Linear",
    "LogNormal",
    "ModelError",
    "Normal",
    "OutputModel",
    "ProbedEventLoop",
    "ProcessingTime",
    "ProgressCallback",
    "QueuePoint",
    "Replay",
    "ReplayRate",
    "SimulatedCluster",
    "SimulatedGraph",
    "SimulationModel",
    "SimulationResult",
    "SparkJob",
    "SparkStage",
    "SparkTask",
    "Stage",
    "StageWork",
    "StepRate",
    "Summary",
    "SweepPoint",
    "SweepResult",
    "Trace",
    "TraceRecorder",
    "TraceRecording",
    "TracedStages",
    "TracedTimes",
    "Uniform",
    "calibrate",
    "cluster_from_trace",
    "event_from_dict",
    "event_to_dict",
    "fetch_spark_jobs",
    "format_duration",
    "load_model",
    "model_from_mapping",
    "model_from_trace",
    "parse_duration",
    "plot_run",
    "plot_sweep",
    "probed_event_loop",
    "running_loop_probe",
    "queue_lengths",
    "read_toml",
    "read_trace",
    "record_run",
    "run_figure",
    "simulate",
    "simulate_async",
    "sweep",
    "sweep_async",
    "sweep_figure",
    "virtual_time_event_loop",
    "whole_duration",
]
