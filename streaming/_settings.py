"""What a StreamingContext was given and what it reads from Spark's settings, checked and read once.

Spark's ``StreamingContext`` reads its ``SparkConf`` when it starts; here the context's arguments are
checked when it is created (:class:`ContextArguments`) and its settings read on first need (:class:`ContextSettings`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

import attrs

from listeners import OverflowPolicy
from scheduler import WATERMARK_POLICY_KEY, Clock, Duration, InvalidPipelineError

from .spark import CHECKPOINT_FILE_MANAGER_KEY, LISTENER_EXIT_TIMEOUT_KEY, SparkSettings, listener_exit_timeout, time_string_as

if TYPE_CHECKING:
    from .ui import UISecurity

__all__ = ["ContextArguments", "ContextSettings"]

# Spark settings that give progress-tracking options (their option names in Spark's writer).
_OPTION_SETTINGS = {
    "spark.streaming.asyncProgressTrackingEnabled": "asyncProgressTrackingEnabled",
    "spark.streaming.asyncProgressTrackingCheckpointIntervalMs": "asyncProgressTrackingCheckpointIntervalMs",
    "spark.sql.streaming.minBatchesToRetain": "spark.sql.streaming.minBatchesToRetain",
    "spark.sql.streaming.numRecentProgressUpdates": "spark.sql.streaming.numRecentProgressUpdates",
    "spark.sql.streaming.noDataProgressEventInterval": "spark.sql.streaming.noDataProgressEventInterval",
    WATERMARK_POLICY_KEY: WATERMARK_POLICY_KEY,  # read by the query's tracker (the policy is logged with each batch)
}
_CONTINUOUS_SETTINGS = ("spark.sql.streaming.continuous.epochBacklogQueueSize",
                        "spark.sql.streaming.continuous.executorPollIntervalMs",
                        # The coordinator's front door and frame bound.
                        "spark.network.auth.rpcTimeout", "spark.network.timeout", "spark.rpc.message.maxSize",
                        "spark.aiodstream.network.maxUnauthenticatedConnections")
# The progress options (read from their settings) that a continuous query takes too.
_CONTINUOUS_PROGRESS_OPTIONS = ("spark.sql.streaming.minBatchesToRetain", "spark.sql.streaming.numRecentProgressUpdates")
_PID_SETTINGS = (("proportional", "1.0"), ("integral", "0.2"), ("derived", "0.0"), ("minRate", "100"))


def _positive_int_or_none(name: str) -> Any:
    def check(_: Any, __: Any, value: Any) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}; pass e.g. 2")
    return check


def _query_name(_: Any, __: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"queryName must be a non-empty string, got {value!r}")


def _bool_or_none(name: str) -> Any:
    def check(_: Any, __: Any, value: Any) -> None:
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {value!r}")
    return check


def _clock_or_none(_: Any, __: Any, value: Any) -> None:
    if value is not None and not isinstance(value, Clock):
        raise TypeError(f"clock must be a Clock (SystemClock, ManualClock...), got {type(value).__name__} {value!r}")


def _overflow(_: Any, __: Any, value: Any) -> None:
    if not isinstance(value, OverflowPolicy):
        raise TypeError(f"listenerOverflow must be an OverflowPolicy (OverflowPolicy.DROP or OverflowPolicy.BLOCK), "
                        f"got {value!r}")


def _port_or_none(_: Any, __: Any, value: Any) -> None:
    if value is not None:
        from .ui import check_port  # the UI package only when a UI is asked for

        check_port(value)


@attrs.frozen
class ContextArguments:
    """The StreamingContext arguments that override Spark's settings, checked (pyspark's and aiodstream's messages)."""

    concurrent_jobs: int | None = attrs.field(default=None, validator=_positive_int_or_none("concurrentJobs"))
    query_name: str | None = attrs.field(default=None, validator=_query_name)
    stop_on_failure: bool | None = attrs.field(default=None, validator=_bool_or_none("stopOnFailure"))
    ui_port: int | None = attrs.field(default=None, validator=_port_or_none)
    ui_port_restored: bool = False
    """``ui_port`` came from a checkpoint (getOrCreate): another program may hold it by now, so the next ports are tried."""
    clock: Clock | None = attrs.field(default=None, kw_only=True, validator=_clock_or_none)
    listener_overflow: OverflowPolicy = attrs.field(default=OverflowPolicy.DROP, kw_only=True, validator=_overflow)
    exclusive: bool | None = attrs.field(default=None, kw_only=True, validator=_bool_or_none("exclusive"))


def _flag(settings: SparkSettings, key: str, default: str = "false") -> bool:
    """A true/false Spark setting (``default`` unset); anything else is refused, as Spark's ``getBoolean`` does."""
    raw = settings.get(key, default) or default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidPipelineError(f'For input string: "{raw}" ({key} must be true or false)')
    return value == "true"


def _concurrent_jobs(settings: SparkSettings) -> int:
    """``spark.streaming.concurrentJobs``: a whole number (Spark's ``intConf``), at least 1 (Spark's thread pool's rule)."""
    jobs = settings.get_int("spark.streaming.concurrentJobs", 1)
    if jobs < 1:
        raise InvalidPipelineError(f"spark.streaming.concurrentJobs must be a positive number of jobs run at once, got "
                                   f"{jobs}; set it to e.g. 1")
    return jobs


def _backpressure(settings: SparkSettings) -> tuple[float, float, float, float] | None:
    """``spark.streaming.backpressure.*``: the PID estimator's parameters, or ``None`` when off (Spark's messages)."""
    if not _flag(settings, "spark.streaming.backpressure.enabled"):
        return None
    estimator = settings.get("spark.streaming.backpressure.rateEstimator", "pid") or "pid"
    if estimator != "pid":
        raise InvalidPipelineError(f"Unknown rate estimator: {estimator}")
    params = []
    for name, default in _PID_SETTINGS:
        key = f"spark.streaming.backpressure.pid.{name}"
        value = settings.get(key, default) or default
        try:
            number = float(value)
        except ValueError:
            raise InvalidPipelineError(f"{key} must be a number, got {value!r}") from None
        if not math.isfinite(number):  # Python's float() reads "inf" and "nan", which Java's parse refuses
            raise InvalidPipelineError(f"{key} must be a number, got {value!r}")
        params.append(number)
    return params[0], params[1], params[2], params[3]


def _trace(settings: SparkSettings) -> tuple[str, int | None] | None:
    """``spark.aiodstream.trace.path`` and ``.batches``: where to record this run and after how many batches to stop."""
    path = (settings.get("spark.aiodstream.trace.path") or "").strip()
    if not path:
        return None
    raw = (settings.get("spark.aiodstream.trace.batches") or "").strip()
    if not raw:
        return path, None
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(f"spark.aiodstream.trace.batches must be a positive number of batches, got {raw!r}")
    return path, limit


def _ui(settings: SparkSettings, given: int | None, restored: bool) -> tuple[tuple[str, int, int], UISecurity, int] | None:
    """``uiPort`` (``restored`` from a checkpoint) or ``spark.aiodstream.ui.*``: where the web UI listens (host, port,
    further ports to try), its security, and the completed batches it keeps (``spark.streaming.ui.retainedBatches``)."""
    port = given
    if port is None:
        raw = settings.get("spark.aiodstream.ui.port")
        if raw is None or not raw.strip():
            return None
        try:
            port = int(raw.strip())
        except ValueError:
            raise ValueError(f"spark.aiodstream.ui.port must be a port number (0: any free port), got {raw!r}") from None
    from .ui import UISecurity, check_port, retained_batches_setting

    check_port(port)
    host = (settings.get("spark.aiodstream.ui.host") or "127.0.0.1").strip()
    # An explicit port is taken as given; Spark's setting follows the next ports when taken, as Spark's UI does, and so
    # does a port restored from a checkpoint: a restart must not fail because another program took it meanwhile.
    return ((host, port, 0 if given is not None and not restored else 16), UISecurity.from_settings(settings.get),
            retained_batches_setting(settings.get))


@attrs.frozen
class ContextSettings:
    """A context's Spark settings, read once (with its arguments' overrides): use :meth:`read`.

    Attributes:
        graceful_stop_timeout: ``spark.streaming.gracefulStopTimeout``.
        listener_exit_timeout: ``spark.scheduler.listenerbus.exitTimeout``.
        concurrent_jobs: ``concurrentJobs``, else ``spark.streaming.concurrentJobs``.
        stop_on_failure: ``stopOnFailure``, else ``spark.streaming.stopOnFailure``.
        stop_gracefully_on_shutdown: ``spark.streaming.stopGracefullyOnShutdown``.
        backpressure: the PID rate estimator's parameters (proportional, integral, derived, minRate)
            with ``spark.streaming.backpressure.enabled`` in a micro-batch context, else ``None``.
        trace: ``spark.aiodstream.trace.path`` and ``.batches``, or ``None``.
        ui: the web UI's (host, port, further ports to try), security and retained batches, or ``None``.
        checkpoint_file_manager: how checkpoint paths are written (``spark.aiodstream.checkpoint.fileManager``).
        default_fs: Hadoop's ``fs.defaultFS``.
    """

    graceful_stop_timeout: Duration | None
    listener_exit_timeout: Duration | None
    concurrent_jobs: int
    stop_on_failure: bool
    stop_gracefully_on_shutdown: bool
    backpressure: tuple[float, float, float, float] | None
    trace: tuple[str, int | None] | None
    ui: tuple[tuple[str, int, int], UISecurity, int] | None
    checkpoint_file_manager: str | None
    default_fs: str
    progress_settings: Mapping[str, object]
    continuous_settings: Mapping[str, object]

    @classmethod
    def read(cls, settings: SparkSettings, arguments: ContextArguments, *, continuous: bool) -> ContextSettings:
        """Read ``settings`` with the overrides in ``arguments`` (Spark's messages for malformed values).

        Raises:
            InvalidDurationError: a malformed timeout.
            InvalidPipelineError: an unknown rate estimator, a malformed PID parameter, or a concurrentJobs that is
                not a positive whole number (naming the setting).
            ValueError: a malformed trace batch count or UI port or security setting.
        """
        graceful = settings.get("spark.streaming.gracefulStopTimeout")
        _flag(settings, "spark.aiodstream.stateStore.fsync", "true")  # checked at start; the state's tasks read it
        stop_on_failure = arguments.stop_on_failure
        if stop_on_failure is None:
            stop_on_failure = _flag(settings, "spark.streaming.stopOnFailure")
        return cls(
            # Spark takes a negative timeout too: its graceful stop has then timed out at once.
            graceful_stop_timeout=None if graceful is None else Duration(
                max(0, time_string_as(graceful, "ms", "spark.streaming.gracefulStopTimeout"))),
            listener_exit_timeout=listener_exit_timeout(settings.get(LISTENER_EXIT_TIMEOUT_KEY)),
            concurrent_jobs=arguments.concurrent_jobs or _concurrent_jobs(settings),
            stop_on_failure=stop_on_failure,
            stop_gracefully_on_shutdown=_flag(settings, "spark.streaming.stopGracefullyOnShutdown"),
            # continuous inputs are read as they come: no receiver, no rate to control
            backpressure=None if continuous else _backpressure(settings),
            trace=_trace(settings),
            ui=_ui(settings, arguments.ui_port, arguments.ui_port_restored),
            checkpoint_file_manager=settings.get(CHECKPOINT_FILE_MANAGER_KEY),
            default_fs=settings.default_fs,
            progress_settings={option: value for key, option in _OPTION_SETTINGS.items()
                               if (value := settings.get(key)) is not None},
            continuous_settings={key: value for key in _CONTINUOUS_SETTINGS if (value := settings.get(key)) is not None},
        )

    def progress_options(self, given: Mapping[str, object]) -> dict[str, object]:
        """A micro-batch query's progress-tracking options: the settings', overridden by ``given`` (checkpoint(), getOrCreate())."""
        options = dict(self.progress_settings)
        lowered = {k.lower(): k for k in options}
        for option, value in given.items():
            options.pop(lowered.get(option.lower(), option), None)
            options[option] = value
        return options

    def continuous_options(self, given: Mapping[str, object]) -> dict[str, object]:
        """A continuous query's options: the settings', overridden by ``given``.

        Raises:
            InvalidPipelineError: async progress tracking asked for (micro-batch queries only).
        """
        options = dict(self.continuous_settings)
        known = {key.lower(): key for key in _CONTINUOUS_PROGRESS_OPTIONS}
        for option, value in self.progress_options(given).items():
            name = known.get(option.lower())
            if name is not None:
                options[name] = value
            elif option.lower() == "asyncprogresstrackingenabled" and str(value).strip().lower() == "true":
                raise InvalidPipelineError("async progress tracking is for micro-batch queries: a continuous query writes its "
                                           "offsets and commits at each epoch's commit; remove asyncProgressTrackingEnabled")
        return options
