"""The embedded local Spark and the Spark settings a streaming context reads (Spark's ``SparkConf`` keys).

PySpark is imported lazily, so ``import streaming`` stays cheap and the pure runtime needs no Java.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import TYPE_CHECKING, Any, Literal, Mapping

import attrs

from scheduler import LONG_MAX, LONG_MIN, REDACTED, REDACTION_PATTERN, InvalidPipelineError

from ._py4j import active_spark_context, conf_value, hadoop_configuration, java_spark_context, launched_gateway

if TYPE_CHECKING:
    from pyspark import SparkContext  # only for annotations: pyspark is imported when Spark is first needed
    from pyspark.sql import SparkSession

__all__ = ["EMBEDDED_SPARK_CONF", "STREAMING_SETTINGS", "SparkSettings", "driver_bind_address", "driver_host", "embedded_spark_context"]

EMBEDDED_SPARK_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "aiodstream",
    "spark.ui.showConsoleProgress": "false",
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "2",
}

_embedded_lock = threading.Lock()

_SHELL_DEFAULTS = {"spark.master": ("local[*]", "--master"), "spark.app.name": ("pyspark-shell", "--name"),
                   "spark.ui.showConsoleProgress": ("true", None)}
"""What spark-submit sets for a shell when nothing chose otherwise, with the option that chooses it, if any: the JVM
pyspark launches for a plain ``python`` program is spark-submit's ``pyspark-shell``."""


def driver_host(sc: SparkContext) -> str:
    """``spark.driver.host``: where executors' tasks reach this process (blocking: a py4j call)."""
    return str(sc.getConf().get("spark.driver.host", "127.0.0.1"))


def driver_bind_address(sc: SparkContext) -> str:
    """Where the driver's own ports listen: ``spark.driver.bindAddress``, else ``spark.driver.host`` (Spark's fallback).

    Executors still connect to :func:`driver_host`; the two differ behind NAT or in a container,
    or to keep a port off other interfaces (blocking: py4j calls).
    """
    conf = sc.getConf()
    bind = conf.get("spark.driver.bindAddress", None)
    return str(bind).strip() if bind is not None and str(bind).strip() else driver_host(sc)


def executor_of_task(sc: SparkContext, stage_id: int, task_id: int) -> str | None:
    """The id of the executor running task ``task_id`` of stage ``stage_id`` (``"driver"`` in local mode), from
    Spark's status store; ``None`` until the store has heard of the task (blocking: py4j calls).

    A Python task cannot see its executor's id; the driver's status store, which Spark's UI and REST API read, can.
    """
    tasks = java_spark_context(sc).sc().statusStore().taskList(stage_id, 0, 1000)
    for i in range(tasks.size()):
        task = tasks.apply(i)
        if task.taskId() == task_id:
            return str(task.executorId())
    return None


def embedded_spark_context(extra_conf: dict[str, str] | None = None) -> SparkContext:
    """The active SparkContext, or a new one: what spark-submit or ``spark-defaults.conf`` set, else :data:`EMBEDDED_SPARK_CONF`.

    Starting Spark takes seconds and blocks: call it from a worker thread in async code.
    """
    from pyspark import SparkConf, SparkContext

    with _embedded_lock:
        active = active_spark_context()
        if active is not None:
            return active
        # The JVM first: under spark-submit it carries the submitted settings (--master, --conf) as
        # system properties, which SparkConf() reads only when a gateway exists. Without this the
        # defaults below would replace spark-submit's master with local[2].
        submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit's PythonRunner made the JVM first
        launched_gateway()
        conf = SparkConf()
        if not os.environ.get("PYSPARK_PYTHON"):
            # The Python workers of the Spark started here run the driver's interpreter, whose
            # environment has aiodstream's packages (watermarks and state run code of theirs in
            # tasks), not whatever `python3` is first on PATH. PySpark reads only the variable.
            os.environ["PYSPARK_PYTHON"] = sys.executable
        unset = set() if submitted else _shell_defaults(conf)
        defaults = dict(EMBEDDED_SPARK_CONF)
        if conf.contains("spark.master") and "spark.master" not in unset:
            # A master chosen elsewhere (spark-submit, spark-defaults.conf, PYSPARK_SUBMIT_ARGS): the
            # local[2] sizing defaults are not ours to impose on it.
            for key in ("spark.master", "spark.default.parallelism", "spark.sql.shuffle.partitions"):
                defaults.pop(key)
        for key, value in {**defaults, **(extra_conf or {})}.items():
            if not conf.contains(key) or key in unset:
                conf.set(key, value)
        sc = SparkContext.getOrCreate(conf)
        sc.setLogLevel("WARN")
        return sc


def _shell_defaults(conf: Any) -> set[str]:
    """The keys that a JVM launched for a plain ``python`` program holds only as spark-submit's defaults for a shell
    (``local[*]``, ``pyspark-shell``, the console progress bar on): they have those values, and neither
    ``PYSPARK_SUBMIT_ARGS`` (``--master``, ``--master=``, ``--conf``) nor the properties file spark-submit read
    (``--properties-file``, else ``spark-defaults.conf``) names them. The embedded defaults replace them."""
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    words = args.split()
    named = _properties_file_keys(words)
    return {key for key, (value, option) in _SHELL_DEFAULTS.items()
            if conf.get(key, None) == value and key not in args and key not in named
            and (option is None or not any(w == option or w.startswith(option + "=") for w in words))}


def _properties_file_keys(words: list[str]) -> set[str]:
    """The keys of the properties file spark-submit reads: ``--properties-file``'s, else ``spark-defaults.conf`` in
    ``SPARK_CONF_DIR`` or ``SPARK_HOME/conf`` (Java properties: ``key value``, ``key=value`` or ``key:value``)."""
    path = next((w.split("=", 1)[1] for w in words if w.startswith("--properties-file=")), None)
    if path is None and "--properties-file" in words[:-1]:
        path = words[words.index("--properties-file") + 1]
    if path is None:
        from pyspark.find_spark_home import _find_spark_home  # where pyspark found spark-submit, as it launched it

        conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(_find_spark_home(), "conf")
        path = os.path.join(conf_dir, "spark-defaults.conf")
    try:
        with open(path, encoding="utf-8", errors="replace") as lines:
            return {re.split(r"[\s=:]", line.strip(), maxsplit=1)[0] for line in lines
                    if line.strip() and not line.strip().startswith(("#", "!"))}
    except OSError:
        return set()


STREAMING_SETTINGS = (
    "spark.streaming.concurrentJobs",
    "spark.streaming.gracefulStopTimeout",
    "spark.scheduler.listenerbus.exitTimeout",
    "spark.streaming.stopGracefullyOnShutdown",
    "spark.streaming.receiverRestartDelay",
    "spark.streaming.blockInterval",
    "spark.streaming.receiver.maxRate",
    "spark.streaming.backpressure.enabled",
    "spark.streaming.backpressure.initialRate",
    "spark.streaming.backpressure.rateEstimator",
    "spark.streaming.backpressure.pid.proportional",
    "spark.streaming.backpressure.pid.integral",
    "spark.streaming.backpressure.pid.derived",
    "spark.streaming.backpressure.pid.minRate",
    "spark.streaming.fileStream.minRememberDuration",
    "spark.streaming.minRememberDuration",
    # Direct Kafka streams (streaming.kafka): Spark's kafka-0-10 DStream settings.
    "spark.streaming.kafka.maxRatePerPartition",
    "spark.streaming.kafka.minRatePerPartition",
    "spark.streaming.kafka.consumer.poll.ms",
    # Progress tracking: Spark's SQL settings, and the async writer options under our prefix.
    "spark.sql.streaming.minBatchesToRetain",
    "spark.sql.streaming.numRecentProgressUpdates",
    "spark.sql.streaming.noDataProgressEventInterval",
    "spark.streaming.asyncProgressTrackingEnabled",
    "spark.streaming.asyncProgressTrackingCheckpointIntervalMs",
    "spark.streaming.stopOnFailure",
    # Event-time watermarks: the policy over several watermarked inputs (Spark's SQL setting).
    "spark.sql.streaming.multipleWatermarkPolicy",
    # Continuous processing: Spark's SQL settings.
    "spark.sql.streaming.continuous.epochBacklogQueueSize",
    "spark.sql.streaming.continuous.executorPollIntervalMs",
    # The driver's front doors (continuous coordinator, executor receivers' control channel):
    # Spark's network settings, and the cap on connections proving their hello under our prefix.
    "spark.network.auth.rpcTimeout",
    "spark.network.timeout",
    "spark.rpc.message.maxSize",
    "spark.aiodstream.network.maxUnauthenticatedConnections",
    # The web UI (ours: Spark's own UI has no streaming tab for this runtime), and Spark's retained batches it keeps.
    "spark.streaming.ui.retainedBatches",
    "spark.aiodstream.ui.port",
    "spark.aiodstream.ui.host",
    "spark.aiodstream.ui.allowRemote",
    "spark.aiodstream.ui.allowedHosts",
    "spark.aiodstream.ui.token",
    "spark.aiodstream.ui.user",
    "spark.aiodstream.ui.password",
    "spark.aiodstream.ui.showTracebacks",
    "spark.aiodstream.ui.maxConnections",
    "spark.aiodstream.ui.idleTimeout",
    "spark.aiodstream.ui.writeTimeout",
    # Which file manager keeps the checkpoint (auto, hadoop, local).
    "spark.aiodstream.checkpoint.fileManager",
    # Whether the state stores' tasks flush each commit to disk (default true; false: Spark's durability on a local disk).
    "spark.aiodstream.stateStore.fsync",
    # Where socket receivers run (driver, executor).
    "spark.aiodstream.receiver.placement",
    # The longest line a socket receiver takes.
    "spark.aiodstream.receiver.maxLineLength",
    # A trace of the run, with its Spark jobs, for the simulator's calibration.
    "spark.aiodstream.trace.path",
    "spark.aiodstream.trace.batches",
)
"""The Spark configuration keys the streaming layer reads."""


def redacted_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with the value of every key that names a secret (Spark's ``spark.redaction.regex``) shown as ``***``."""
    return {key: REDACTED if REDACTION_PATTERN.search(key) else value for key, value in conf.items()}


_WHOLE = re.compile(r"[+-]?[0-9]+")
_JAVA_WHITESPACE = "".join(map(chr, range(33)))  # what Java's String.trim removes: every char up to the space
_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (LONG_MIN, LONG_MAX)}


def _whole_number_setting(key: str, raw: str, kind: Literal["int", "long"] = "int") -> int:
    """The Spark setting ``key``'s text ``raw`` read as Spark's typed ``intConf`` / ``longConf`` reads it.

    Java's ``parseInt`` / ``parseLong`` after ``trim``: an optional sign and ASCII digits, in the
    type's range; a fraction, an exponent, ``inf``, ``nan`` or a unit (``2s``) is refused.

    Raises:
        InvalidPipelineError: not such a number, with Spark 4.3's message naming ``key``.
    """
    text = raw.strip(_JAVA_WHITESPACE)
    low, high = _RANGES[kind]
    if _WHOLE.fullmatch(text) is None or not low <= int(text) <= high:
        raise InvalidPipelineError(f"[INVALID_CONF_VALUE.TYPE_MISMATCH] The value '{raw}' in the config \"{key}\" is "
                                   f"invalid. It should be a/an '{kind}' value. SQLSTATE: 22022")
    return int(text)


@attrs.frozen
class SparkSettings:
    """What a StreamingContext reads from its SparkContext, fetched once (py4j calls: blocking).

    A context inside ``async with`` fetches them in a worker thread on entry, so building
    streams on the event loop makes no py4j call; otherwise on first need.

    Attributes:
        default_parallelism: ``sc.defaultParallelism``.
        conf: the :data:`STREAMING_SETTINGS` that are set, as strings.
        default_fs: Hadoop's ``fs.defaultFS``, where bare paths live (``file:///`` by default).
    """

    default_parallelism: int
    conf: dict[str, str] = attrs.field(repr=lambda conf: repr(redacted_conf(conf)))
    default_fs: str = "file:///"

    @classmethod
    def read(cls, sc: SparkContext, session: SparkSession | None = None) -> SparkSettings:
        """Read the settings from ``sc``: one py4j round trip per key (``sc.getConf()`` takes two per entry).

        With the classic ``session`` a context was given, Spark's SQL settings (``spark.sql.*``) are read
        from its runtime conf first, as Spark's ``SQLConf`` of a query's session has them: what
        ``spark.conf.set`` set there wins over the SparkConf.
        """
        conf = {}
        for key in STREAMING_SETTINGS:
            value = None
            if session is not None and key.startswith("spark.sql."):
                found = session.conf.get(key, None)  # None: not set in the session (its built-in default is not taken)
                value = None if found is None else str(found)
            if value is None:
                value = conf_value(sc, key)
            if value is not None:
                conf[key] = value
        default_fs = hadoop_configuration(sc).get("fs.defaultFS") or "file:///"
        return cls(sc.defaultParallelism, conf, str(default_fs))

    def get(self, key: str, default: str | None = None) -> str | None:
        """The setting ``key`` (one of :data:`STREAMING_SETTINGS`), ``default`` when unset."""
        if key not in STREAMING_SETTINGS:
            raise KeyError(f"{key} is not read by the streaming layer; add it to STREAMING_SETTINGS")
        return self.conf.get(key, default)

    def get_int(self, key: str, default: int) -> int:
        """The setting ``key`` as Spark's ``intConf`` reads it (``default`` when unset).

        Raises:
            InvalidPipelineError: not a whole number in an int's range (Spark's message, naming ``key``).
        """
        raw = self.get(key)
        return default if raw is None else _whole_number_setting(key, raw, "int")

    def get_long(self, key: str) -> int | None:
        """The setting ``key`` as Spark's ``longConf`` reads it (``None`` when unset).

        Raises:
            InvalidPipelineError: not a whole number in a long's range (Spark's message, naming ``key``).
        """
        raw = self.get(key)
        return None if raw is None else _whole_number_setting(key, raw, "long")
