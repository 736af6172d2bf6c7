"""FrameContext: what stands where the engine uses a SparkContext when the session is Spark Connect's
(pyspark's ``SparkContext``: parallelize, union, textFile, settings); the rest refused by name."""

from __future__ import annotations

import sys
import threading
from typing import Any, Iterable, Iterator

from ._codec import INDEX_SCHEMA, SHUFFLE_SCHEMA, PartitionRunner, SourceRows, dumps
from ._errors import unsupported_context_attribute
from ._frame_core import exchanged
from ._frame_rdd import FrameRDD
from ._partitioning import parallelize_slices, partition_keys
from ._shared_values import FrameAccumulator, FrameBroadcast, SharedValues

__all__ = ["FrameConf", "FrameContext", "is_connect_session", "ship_by_value"]


def is_connect_session(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect session (``pyspark.sql.connect.session.SparkSession``)."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the connect extra: no session can be one
        return False
    return isinstance(session, ConnectSession)


def ship_by_value() -> None:
    """Makes pyspark's cloudpickle send this package's code with each job's functions, by value.

    The Python workers then run FrameRDD's runners without importing aiodstream (an import of
    ``streaming`` loads ~150 modules: ~0.75 s of CPU in each new worker), and a Connect server's
    workers need no aiodstream installed at all. Idempotent.
    """
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__package__ or "streaming.connect"])  # type: ignore[no-untyped-call]


def remote_url(session: Any) -> str | None:
    """The ``sc://`` URL the Connect session was made from (its token too), if it was made from one."""
    url = getattr(getattr(session.client, "_builder", None), "url", None)
    if url is None or not hasattr(url, "geturl"):
        return None
    text: str = url.geturl()  # the client keeps it parsed as http://host:port/;params
    return "sc" + text[len("http"):] if text.startswith("http") else None


class _RangeSlice:
    """pyspark's slices of a ``range``: partition ``i`` is ``range(start(i), start(i + 1), step)``."""

    def __init__(self, first: int, size: int, step: int, slices: int) -> None:
        self.first, self.size, self.step, self.slices = first, size, step, slices

    def start(self, split: int) -> int:
        return self.first + int(split * self.size / self.slices) * self.step

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[Any]:
        return range(self.start(index), self.start(index + 1), self.step)


class _PartitionIds:
    """Runs in the Python worker: one row per partition, with its id (counts a frame's partitions)."""

    def __call__(self, batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa  # type: ignore[import-untyped]
        from pyspark import TaskContext

        for _ in batches:
            pass
        context = TaskContext.get()
        yield pa.RecordBatch.from_arrays([pa.array([context.partitionId() if context else 0], pa.int32())], names=["p"])


class FrameConf:
    """``SparkConf``'s reading side over the session's configuration (``spark.conf``)."""

    def __init__(self, session: Any) -> None:
        self._session = session

    def get(self, key: str, defaultValue: str | None = None) -> str | None:  # noqa: N803
        """The setting's value on the server, else ``defaultValue``."""
        value = self._session.conf.get(key, None)
        return defaultValue if value is None else str(value)

    def contains(self, key: str) -> bool:
        """Whether the server has the setting."""
        return self._session.conf.get(key, None) is not None

    def set(self, key: str, value: str) -> FrameConf:
        """Sets a runtime setting on the session."""
        self._session.conf.set(key, value)
        return self

    def getAll(self) -> list[tuple[str, str]]:
        """The session's settings as ``(key, value)`` pairs, with ``spark.remote`` (the server's URL) where a
        classic context has ``spark.master``: so ``SparkSession.builder.config(conf=rdd.context.getConf())
        .getOrCreate()`` in a Connect client returns this session, as it returns the classic one there."""
        settings = {key: str(value) for key, value in self._session.conf.getAll.items() if key != "spark.master"}
        url = remote_url(self._session)
        if url is not None:
            settings["spark.remote"] = url
        return sorted(settings.items())


class FrameContext:
    """The SparkContext of DStreams on Spark Connect: makes FrameRDDs on a Connect session.

    ``defaultParallelism`` and whether ``spark.default.parallelism`` is set are read from the server
    once. Attributes of pyspark's SparkContext that need a JVM in the client raise
    :class:`ConnectUnsupportedError` naming the alternative.
    """

    def __init__(self, session: Any) -> None:
        if not is_connect_session(session):
            raise TypeError(
                f"FrameContext needs a Spark Connect session (pyspark.sql.connect.session.SparkSession), got "
                f"{type(session).__name__}; use SparkSession.builder.remote(url).getOrCreate()"
            )
        ship_by_value()
        self._session = session
        self._lock = threading.Lock()
        self._parallelism: tuple[int, bool] | None = None
        self._checkpoint_dir: str | None = None
        self._placeholders: dict[int, Any] = {}
        self._shared = SharedValues()

    @property
    def session(self) -> Any:
        """The Connect session the batches run on."""
        return self._session

    def _read_parallelism(self) -> tuple[int, bool]:
        with self._lock:
            if self._parallelism is None:
                setting = self._session.conf.get("spark.default.parallelism", None)
                if setting is not None:
                    self._parallelism = (int(setting), True)
                else:
                    # The server's own default: how many partitions a range of no stated count gets.
                    from pyspark.sql.connect import functions

                    frame = self._session.range(0, 1 << 20).select(functions.spark_partition_id().alias("p"))
                    self._parallelism = (int(frame.agg(functions.max("p")).collect()[0][0]) + 1, False)
            return self._parallelism

    @property
    def defaultParallelism(self) -> int:
        """pyspark's ``defaultParallelism``: ``spark.default.parallelism``, else the server's default."""
        return self._read_parallelism()[0]

    @property
    def default_parallelism_set(self) -> bool:
        """Whether the server sets ``spark.default.parallelism``."""
        return self._read_parallelism()[1]

    @property
    def master(self) -> str | None:
        """The server's ``spark.master`` (``local[2]``, a cluster's URL), as the server reports it."""
        value = self._session.conf.get("spark.master", None)
        return None if value is None else str(value)

    @property
    def applicationId(self) -> str | None:
        """The server's Spark application id (``spark.app.id``)."""
        value = self._session.conf.get("spark.app.id", None)
        return None if value is None else str(value)

    @property
    def appName(self) -> str | None:
        """The server's application name (``spark.app.name``)."""
        value = self._session.conf.get("spark.app.name", None)
        return None if value is None else str(value)

    @property
    def version(self) -> str:
        """The server's Spark version (the session's ``version``)."""
        return str(self._session.version)

    @property
    def defaultMinPartitions(self) -> int:
        """``min(defaultParallelism, 2)``, as pyspark."""
        return min(self.defaultParallelism, 2)

    @property
    def checkpoint_dir(self) -> str | None:
        """The directory ``setCheckpointDir`` gave, if any."""
        return self._checkpoint_dir

    def setCheckpointDir(self, dirName: str) -> None:  # noqa: N803
        """Where ``FrameRDD.checkpoint`` saves partitions: a directory the server's executors reach
        (a URI on a cluster). The server's own ``spark.checkpoint.dir`` is static and left alone."""
        self._checkpoint_dir = dirName
        self._shared.use_checkpoint(dirName)  # accumulators' reports go there too: the executors reach it

    def getCheckpointDir(self) -> str | None:
        """The checkpoint directory, if set."""
        return self._checkpoint_dir

    def getConf(self) -> FrameConf:
        """The server's settings, read one at a time."""
        return FrameConf(self._session)

    def parallelize(self, c: Iterable[Any], numSlices: int | None = None) -> FrameRDD:  # noqa: N803
        """A FrameRDD of a local collection in ``numSlices`` partitions, sliced exactly as pyspark's
        ``parallelize`` (the slices travel with the job's function, one per task)."""
        slices = self.defaultParallelism if numSlices is None else int(numSlices)
        if slices < 1:
            raise ValueError(f"the number of slices must be at least 1, got {slices}")
        placeholder = self._placeholder(slices)
        if isinstance(c, range):
            size = len(c)
            if size:
                step = c[1] - c[0] if size > 1 else 1
                made = FrameRDD(self, placeholder, slices, PartitionRunner(_RangeSlice(c[0], size, step, slices)))
                made.known_count = size
                return made
            c = []
        values = list(c)
        parts = parallelize_slices(values, slices)
        encoded = [dumps(part) for part in parts]
        if sum(map(len, encoded)) <= self.closure_limit:
            made = FrameRDD(self, placeholder, slices, PartitionRunner(None, encoded))
        else:
            made = FrameRDD(self, self._uploaded(parts), slices)
        made.known_count = len(values)
        return made

    def range(self, start: int, end: int | None = None, step: int = 1, numSlices: int | None = None) -> FrameRDD:  # noqa: N803
        """The ints of ``range(start, end, step)`` (``range(0, start)`` without ``end``), in pyspark's slices."""
        if end is None:
            end, start = start, 0
        return self.parallelize(range(start, end, step), numSlices)

    closure_limit = 1 << 20
    """Bytes of pickled slices ``parallelize`` ships inside the job's function (every task gets them
    all, and each plan built on the RDD carries them); above it the values go up once as an Arrow
    local relation and an exact shuffle puts each slice in its partition."""

    def _uploaded(self, parts: list[list[Any]]) -> Any:
        import pyarrow as pa

        keys = partition_keys(len(parts))
        hashes: list[int] = []
        targets: list[int] = []
        orders: list[int] = []
        positions: list[int] = []
        rows: list[bytes | None] = []
        for index, part in enumerate(parts):
            hashes.append(keys[index])
            targets.append(index)
            orders.append(-1)
            positions.append(0)
            rows.append(None)  # the partition's marker
            for position, value in enumerate(part):
                hashes.append(keys[index])
                targets.append(index)
                orders.append(0)
                positions.append(position)
                rows.append(dumps(value))
        table = pa.table(
            [pa.array(hashes, pa.int32()), pa.array(targets, pa.int32()), pa.array(orders, pa.int32()),
             pa.array(positions, pa.int64()), pa.array(rows, pa.binary())],
            names=SHUFFLE_SCHEMA.names,
        )
        return exchanged([self._session.createDataFrame(table, SHUFFLE_SCHEMA)], len(parts))

    def broadcast(self, value: Any) -> FrameBroadcast:
        """pyspark's ``broadcast``: a read-only ``value`` that tasks read as ``.value``; it travels by value
        with each job's pickled functions (no copy is kept on the server)."""
        return FrameBroadcast(value)

    def accumulator(self, value: Any, accum_param: Any = None) -> FrameAccumulator:
        """pyspark's ``accumulator``: starts at ``value``, tasks ``add`` to it, the driver reads ``.value``.

        ``accum_param`` (pyspark's ``AccumulatorParam``: ``zero``, ``addInPlace``) defaults to pyspark's
        for ints, floats and complex numbers, as pyspark's does. Tasks' additions come back as report
        files under the checkpoint directory (``setCheckpointDir``, which ``ssc.checkpoint`` sets), or
        without one in a private directory of this machine (a local server only), and are folded in
        when ``.value`` is read (see docs/connect.md).
        """
        if accum_param is None:
            from pyspark import accumulators

            if isinstance(value, int):
                accum_param = accumulators.INT_ACCUMULATOR_PARAM
            elif isinstance(value, float):
                accum_param = accumulators.FLOAT_ACCUMULATOR_PARAM
            elif isinstance(value, complex):
                accum_param = accumulators.COMPLEX_ACCUMULATOR_PARAM
            else:
                raise TypeError(f"No default accumulator param for type {type(value)}")
        return self._shared.accumulator(value, accum_param)

    def emptyRDD(self) -> FrameRDD:
        """A FrameRDD with no partition."""
        return FrameRDD(self, self._placeholder(0), 0)

    def _placeholder(self, slices: int) -> Any:
        """A frame of one marker row in each of ``slices`` partitions, one object per count: a Connect
        ``mapInArrow`` asks the server for its input's columns (a plan analysis, one round trip) once
        per DataFrame object, so each batch's ``parallelize`` reusing it saves that round trip."""
        with self._lock:
            frame = self._placeholders.get(slices)
            if frame is None:
                frame = self._placeholders[slices] = self._markers(self._session.range(0, slices, 1, max(slices, 1)))
            return frame

    @staticmethod
    def _markers(frame: Any) -> Any:
        """A range frame's rows as partition markers: ``id`` is the partition's index."""
        from pyspark.sql.connect import functions

        return frame.select(functions.col("id").cast("int").alias("p"), functions.lit(None).cast("binary").alias("v"))

    def union(self, rdds: list[FrameRDD]) -> FrameRDD:
        """The union of several FrameRDDs (partitioner-aware when they all share one)."""
        if not rdds:
            raise ValueError("union needs at least one RDD")
        result = rdds[0]
        for rdd in rdds[1:]:
            result = result.union(rdd)
        return result

    def textFile(self, name: str, minPartitions: int | None = None, use_unicode: bool = True) -> FrameRDD:  # noqa: N803
        """The lines of text files (comma-separated paths allowed), read by the server
        (``spark.read.text``): the same lines in the same order, in the server's file partitions
        (Spark SQL's, not Hadoop's splits: the partition count may differ from pyspark's)."""
        paths = [path for path in name.split(",") if path]
        for path in paths:
            # Spark SQL's readers skip such a file silently, even named; classic's textFile fails the job (Hadoop's
            # hidden-file filter): refused here too, so a watched directory's `_x` is an error, not lost data.
            if path.rstrip("/").rsplit("/", 1)[-1].startswith(("_", ".")):
                raise FileNotFoundError(f"Input path does not exist: {path} (a name starting with '_' or '.' is hidden "
                                        "from Spark's file readers)")
        return self._from_frame(self._session.read.text(paths), lines=True)

    def fromDataFrame(self, df: Any) -> FrameRDD:
        """A FrameRDD of a Connect DataFrame's rows as ``Row``s, in its partitions (classic ``df.rdd``)."""
        if not is_connect_session(getattr(df, "sparkSession", None)):
            raise TypeError(f"fromDataFrame needs a Spark Connect DataFrame, got {type(df).__name__}")
        return self._from_frame(df, lines=False)

    def _from_frame(self, frame: Any, lines: bool) -> FrameRDD:
        # One small job: the highest partition index that ran (Spark skips the Python function
        # of some empty partitions, so counting the rows would undercount).
        count = max((row.p + 1 for row in frame.mapInArrow(_PartitionIds(), INDEX_SCHEMA).collect()), default=0)
        if count == 0:
            return self.emptyRDD()
        keys = partition_keys(count)
        markers = self._session.createDataFrame([(keys[j], j, -1, 0, None) for j in range(count)], SHUFFLE_SCHEMA)
        # Through a shuffle into the same partitions: the frame's task ids are its partitions'
        # indexes only in its own last stage, and a FrameRDD's partitions need markers.
        # The frame's rows first in the union: its tasks' ids stay its partition indexes.
        rows = exchanged([frame.mapInArrow(SourceRows(keys, lines), SHUFFLE_SCHEMA), markers], count)
        return FrameRDD(self, rows, count)

    def stop(self) -> None:
        """Stops the Connect session."""
        self._session.stop()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        import pyspark

        if hasattr(pyspark.SparkContext, name):
            raise unsupported_context_attribute(name)
        raise AttributeError(f"'FrameContext' object has no attribute {name!r}")

    def __repr__(self) -> str:
        parallelism = self._parallelism[0] if self._parallelism is not None else "?"
        return f"<FrameContext [Spark Connect | defaultParallelism: {parallelism}]>"

