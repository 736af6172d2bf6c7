"""GraphRecipe: the DStream calls that built a context's graph, kept in its checkpoint to rebuild it (Spark's ``Checkpoint``).

Spark serializes the DStream graph, Python functions included, into the checkpoint, and
``getOrCreate`` rebuilds the context from it without calling the setup function. Here the graph is
rebuilt by replaying the program's own API calls (``socketTextStream``, ``map``, ``foreachRDD``,
...), each with its arguments pickled by pyspark's cloudpickle, on a fresh context.
"""

from __future__ import annotations

import functools
import os
import pickle
import traceback
from typing import Any, Callable, Mapping, Sequence, TypeVar

import attrs

from scheduler import MAX_MILLISECONDS, CheckpointError, CheckpointPath, CorruptCheckpointError, as_checkpoint_path

__all__ = [
    "RECIPE_FILE",
    "check_recipe",
    "GraphNotSerializableError",
    "GraphRecipe",
    "RecipeCall",
    "SavedRecipe",
    "SavedRDD",
    "StreamRef",
    "load_recipe",
    "recorded",
    "write_recipe",
]

RECIPE_FILE = "graph"
"""The recipe's file name in a checkpoint directory."""

_MAGIC = b"aiodstream-graph v1\n"
_DAMAGED = "damaged after it was written: restore it from a copy, or start over without this checkpoint"
"""How a graph file that cannot be read because it was cut short or altered is described (our write is atomic)."""

F = TypeVar("F", bound=Callable[..., Any])

# Spark saves nothing for a queue stream and only warns (QueueInputDStream.writeObject); any other
# graph that cannot be serialized refuses the start (StreamingContext.validate). An async iterable
# (our asyncIterableStream) is a live source like a queue of RDDs: it warns the same way.
_LIVE_SOURCE_METHODS = frozenset({"queueStream", "asyncIterableStream"})


class GraphNotSerializableError(CheckpointError, pickle.PicklingError):
    """A checkpointed context's DStream graph cannot be saved: a function in it cannot be pickled.

    Spark refuses ``start()`` then, where pyspark raises a ``Py4JJavaError`` whose text holds
    ``SparkException: An exception was raised by Python:`` and the pickling traceback; this
    error's message is that text (``str(error)`` starts with ``An exception was raised by
    Python:``), and the original error is its ``__cause__``.

    Attributes:
        method: the DStream API call whose arguments cannot be pickled (``foreachRDD``, ...).
    """

    def __init__(self, message: str, *, method: str | None = None) -> None:
        super().__init__(message)
        self.method = method


@attrs.frozen
class StreamRef:
    """Stands for the ``index``-th stream a recipe made, in a recorded call's arguments."""

    index: int


@attrs.frozen
class SavedRDD:
    """Stands for an RDD argument (``updateStateByKey``'s ``initialRDD``) in a saved recipe: its values and
    partition count, collected when the recipe is written (an RDD itself cannot be pickled); the
    replay parallelizes them again on the restored context's Spark."""

    values: list[Any]
    partitions: int

    @staticmethod
    def of(value: Any) -> Any:
        """``value`` as saved: an RDD (pyspark's, or a FrameRDD) as its contents, anything else as is."""
        if callable(getattr(value, "collect", None)) and callable(getattr(value, "getNumPartitions", None)) \
                and callable(getattr(value, "mapPartitions", None)):
            return SavedRDD(list(value.collect()), int(value.getNumPartitions()))
        return value


@attrs.frozen
class RecipeCall:
    """One recorded API call: ``target.method(*args, **kwargs)``.

    Attributes:
        target: the stream it was called on, or ``None`` for the context.
        method: the method's name.
        args: positional arguments, streams replaced by :class:`StreamRef`.
        kwargs: keyword arguments, likewise.
        result: the index of the stream it returned, or ``None``.
    """

    target: StreamRef | None
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: int | None


@attrs.frozen
class SavedRecipe:
    """What the recipe file holds: the context's settings and its calls.

    Attributes:
        batch_ms: the batch interval.
        concurrent_jobs: the context's ``concurrentJobs`` argument.
        spark_conf: the SparkContext's settings (a restored program starts a SparkContext with them
            when none is active, as Spark recreates it from its checkpoint).
        calls: the recorded calls, in order.
        continuous_ms: a continuous context's epoch interval, else ``None``.
        context_options: the other constructor options the context was given (``queryName``,
            ``stopOnFailure``...), by keyword; a restart makes its context with them.
    """

    batch_ms: int
    concurrent_jobs: int | None
    spark_conf: tuple[tuple[str, str], ...]
    calls: tuple[RecipeCall, ...]
    continuous_ms: int | None = None
    """The epoch interval of a context with a Continuous trigger (recipes written before it had none)."""
    context_options: tuple[tuple[str, Any], ...] = ()
    """The constructor options given (recipes written before it had none: the options take their defaults)."""

    def saved_context_options(self) -> dict[str, Any]:
        """:attr:`context_options` as keywords (empty for a recipe written before they were saved)."""
        return dict(getattr(self, "context_options", ()))

    def replay(self, context: Any, stream_type: type) -> None:
        """Make the recorded calls again on ``context``, in order.

        Raises:
            CheckpointError: a call made another number of streams than when recorded.
        """
        streams: list[Any] = []

        def resolve(value: Any) -> Any:
            if isinstance(value, StreamRef):
                return streams[value.index]
            if isinstance(value, SavedRDD):
                return context.sparkContext.parallelize(value.values, max(value.partitions, 1))
            if isinstance(value, (list, tuple)) and any(isinstance(v, StreamRef) for v in value):
                return type(value)(resolve(v) for v in value)
            return value

        for call in self.calls:
            target = context if call.target is None else resolve(call.target)
            args = [resolve(v) for v in call.args]
            result = getattr(target, call.method)(*args, **{k: resolve(v) for k, v in call.kwargs.items()})
            if call.result is not None:
                if not isinstance(result, stream_type) or call.result != len(streams):
                    raise CheckpointError(f"replaying {call.method} did not make stream {call.result} again")
                streams.append(result)


class GraphRecipe:
    """Records the top-level DStream API calls of one context, and replays them on another.

    Only calls made by the program count: the calls an API method makes itself (``reduceByKeyAndWindow``
    calling ``window``) happen again when it is replayed.
    """

    def __init__(self) -> None:
        """Start an empty recording."""
        self.calls: list[RecipeCall] = []
        self.depth = 0
        self._index: dict[int, int] = {}  # id(stream) -> its index
        self._streams: list[Any] = []  # keeps recorded streams alive, so their ids stay theirs

    def ref(self, value: Any, stream_type: type) -> Any:
        """``value`` with every stream (also in a list or tuple of arguments) replaced by a :class:`StreamRef`."""
        if isinstance(value, stream_type):
            index = self._index.get(id(value))
            if index is None:
                raise CheckpointError(f"{value!r} was not made through this context's API: it cannot be checkpointed")
            return StreamRef(index)
        # Streams come as arguments or in a list or tuple of them (ssc.transform([streams], f)),
        # never deeper: a queue's list of lists of records is not walked record by record.
        if isinstance(value, (list, tuple)) and any(isinstance(v, stream_type) for v in value):
            return type(value)(self.ref(v, stream_type) for v in value)
        return value

    def add(self, target: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any,
            stream_type: type) -> None:
        """Record ``target.method(*args, **kwargs)`` that returned ``result`` (``target`` None: the context)."""
        try:
            call_target = None if target is None else self.ref(target, stream_type)
            call_args = tuple(self.ref(v, stream_type) for v in args)
            call_kwargs = {k: self.ref(v, stream_type) for k, v in kwargs.items()}
        except CheckpointError:
            call_target, call_args, call_kwargs = None, (), {}
            method = f"<unrecordable {method}>"
        index = None
        if isinstance(result, stream_type) and id(result) not in self._index:  # a new stream (cache() returns its own)
            index = len(self._streams)
            self._streams.append(result)
            self._index[id(result)] = index
        self.calls.append(RecipeCall(call_target, method, call_args, call_kwargs, index))

    def stream(self, index: int) -> Any:
        """The ``index``-th stream the recorded calls made."""
        return self._streams[index]

    def serialize(self, *, batch_ms: int, concurrent_jobs: int | None, spark_conf: Sequence[tuple[str, str]],
                  continuous_ms: int | None = None,
                  context_options: Mapping[str, Any] | None = None) -> tuple[bytes | None, str | None]:
        """The recipe file's bytes, or ``None`` and why it cannot be saved where Spark only warns.

        Spark's ``StreamingContext.validate`` serializes the graph before a checkpointed context
        starts, and a function that cannot be serialized refuses the start; a queue stream is
        not saved (Spark warns "queueStream doesn't support checkpointing"), nor is an
        ``asyncIterableStream``'s live iterable, nor a call that mixes in a stream of another
        context: for those this returns the reason.

        Raises:
            GraphNotSerializableError: a function (or another argument) of a call other than
                those input streams cannot be pickled; the message is pyspark's for that failure.
        """
        from pyspark import cloudpickle  # the pickler pyspark ships functions to executors with

        unrecordable = [c.method for c in self.calls if c.method.startswith("<unrecordable")]
        if unrecordable:
            return None, f"{unrecordable[0][14:-1]} was called with a stream of another context"
        calls = tuple(attrs.evolve(call, args=tuple(map(SavedRDD.of, call.args)),
                                   kwargs={k: SavedRDD.of(v) for k, v in call.kwargs.items()}) for call in self.calls)
        recipe = SavedRecipe(batch_ms, concurrent_jobs, tuple(spark_conf), calls, continuous_ms,
                             tuple((context_options or {}).items()))
        try:
            return _MAGIC + cloudpickle.dumps(recipe), None  # type: ignore[no-untyped-call]
        except Exception as exc:  # cloudpickle raises many kinds: anything unpicklable
            whole = exc
        # Which call: pyspark pickles each function on its own and fails on the first bad one.
        live_failure: tuple[str, BaseException] | None = None
        for call in calls:
            failure = _pickling_failure(call)
            if failure is None:
                continue
            if call.method in _LIVE_SOURCE_METHODS:
                live_failure = live_failure or (call.method, failure)
                continue
            raise _not_serializable(failure, call.method)
        if live_failure is not None:
            method, failure = live_failure
            return None, f"{method} doesn't support checkpointing: {failure}"
        raise _not_serializable(_pickling_failure(recipe) or whole, None)

    def save(self, directory: str | os.PathLike[str] | CheckpointPath, *, batch_ms: int, concurrent_jobs: int | None,
             spark_conf: Sequence[tuple[str, str]], continuous_ms: int | None = None,
             context_options: Mapping[str, Any] | None = None) -> str | None:
        """Write the recipe to ``directory`` atomically (blocking I/O); ``None``, or why it cannot be written.

        A recipe Spark would not save either (a queue of RDDs) is not written, and an older one
        is removed: a restart then calls the setup function.

        Raises:
            GraphNotSerializableError: see :meth:`serialize`; nothing is written or removed.
        """
        data, reason = self.serialize(batch_ms=batch_ms, concurrent_jobs=concurrent_jobs, spark_conf=spark_conf,
                                      continuous_ms=continuous_ms, context_options=context_options)
        write_recipe(directory, data)
        return reason


def write_recipe(directory: str | os.PathLike[str] | CheckpointPath, data: bytes | None) -> None:
    """Write serialized recipe bytes to ``directory`` atomically, or with ``None`` remove an older recipe (blocking I/O)."""
    path = as_checkpoint_path(directory) / RECIPE_FILE
    if data is None:
        path.delete()
    else:
        path.write_replacing(data)


def _pickling_failure(value: object) -> BaseException | None:
    """The error pyspark's serializer raises for ``value`` (a ``PicklingError`` naming the cause), or ``None``.

    pyspark's own serializer prints the cause's traceback to stderr before it raises; a graph that
    only warns (a queue of RDDs) must not print one at every start, so the same pickler is called
    here and its failure given pyspark's message without the print.
    """
    import pickle

    from pyspark import cloudpickle
    from pyspark.serializers import pickle_protocol

    try:
        cloudpickle.dumps(value, pickle_protocol)  # type: ignore[no-untyped-call]
    except pickle.PickleError as exc:
        return exc
    except Exception as exc:
        try:
            raise pickle.PicklingError(f"Could not serialize object: {type(exc).__name__}: {exc}") from exc
        except pickle.PicklingError as failure:
            return failure
    return None


def _not_serializable(failure: BaseException, method: str | None) -> GraphNotSerializableError:
    text = "".join(traceback.format_exception(type(failure), failure, failure.__traceback__))
    error = GraphNotSerializableError(f"An exception was raised by Python:\n{text}", method=method)
    error.__cause__ = failure
    note = ("DStream checkpointing has been enabled but the DStreams with their functions are not serializable"
            + ("" if method is None else f": an argument of {method}() cannot be pickled")
            + "; keep the SparkContext, locks, sockets and open files out of the functions (create them inside), "
            "or start without a checkpoint directory")
    add_note = getattr(error, "add_note", None)  # Python 3.11+: shown under the traceback, not in str(error)
    if add_note is not None:
        add_note(note)
    return error


def _recipe_bytes(path: CheckpointPath) -> bytes | None:
    """The pickle of the graph file at ``path`` (after its first line), or ``None`` if there is none.

    Raises:
        CorruptCheckpointError: the file is not a graph this version wrote, or is cut short inside its first line.
    """
    data = path.read_bytes()
    if data is None:
        return None
    if not data.startswith(_MAGIC):
        if _MAGIC.startswith(data):  # empty, or cut short inside its first line
            raise CorruptCheckpointError(f"{path} is cut short ({len(data)} bytes), {_DAMAGED}", path=str(path))
        raise CorruptCheckpointError(f"{path} is not a DStream graph written by aiodstream", path=str(path))
    return data[len(_MAGIC):]


def check_recipe(directory: str | os.PathLike[str] | CheckpointPath) -> None:
    """Check the graph file in ``directory``, if there is one, without unpickling it (``aiodstream checkpoint``).

    Its pickle is walked opcode by opcode (``pickletools``), which runs nothing: a file cut short is found; one altered
    into another valid pickle is not (only loading it, which runs its code, can tell).

    Raises:
        CorruptCheckpointError: the file is not a graph this version wrote, or is cut short.
    """
    import pickletools

    path = as_checkpoint_path(directory) / RECIPE_FILE
    data = _recipe_bytes(path)
    if data is None:
        return
    try:
        for _ in pickletools.genops(data):
            pass
    except Exception as exc:  # pickletools raises ValueError on a truncated or malformed stream
        raise CorruptCheckpointError(f"cannot read the DStream graph in {path}: {exc}; the file is cut short or altered, "
                                     f"{_DAMAGED}", path=str(path)) from exc


def load_recipe(directory: str | os.PathLike[str] | CheckpointPath) -> SavedRecipe | None:
    """The recipe saved in ``directory``, or ``None`` if there is none (blocking I/O).

    Raises:
        CorruptCheckpointError: the file is not a recipe this version wrote, or cannot be unpickled.
    """
    import pickle

    path = as_checkpoint_path(directory) / RECIPE_FILE
    data = _recipe_bytes(path)
    if data is None:
        return None
    try:
        recipe = pickle.loads(data)
    except Exception as exc:
        if isinstance(exc, EOFError) or "truncated" in str(exc):  # our write is atomic: the file was cut short after it
            cause = f"the file is cut short, {_DAMAGED}"
        else:
            cause = "was it written by another version of the program's modules?"
        raise CorruptCheckpointError(f"cannot read the DStream graph in {path}: {type(exc).__name__}: {exc}; {cause}",
                                     path=str(path)) from exc
    if not isinstance(recipe, SavedRecipe):
        raise CorruptCheckpointError(f"{path} holds {type(recipe).__name__}, not a DStream graph", path=str(path))
    for name, interval, optional in (("batch interval", recipe.batch_ms, False), ("epoch interval", recipe.continuous_ms, True)):
        if not (optional and interval is None) and (type(interval) is not int or not 0 < interval <= MAX_MILLISECONDS):
            raise CorruptCheckpointError(f"cannot read the DStream graph in {path}: its {name} must be a positive whole number "
                                         f"of milliseconds within a Java long, got {interval!r:.40}", path=str(path))
    options = getattr(recipe, "context_options", ())
    if not isinstance(options, tuple) or not all(isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str) for o in options):
        raise CorruptCheckpointError(f"cannot read the DStream graph in {path}: its context options must be (keyword, value) "
                                     f"pairs, got {options!r:.40}", path=str(path))
    return recipe


def recorded(stream_type: type) -> Callable[[F], F]:
    """A decorator recording calls of an API method (of a stream or a context: anything with an ``_env``).

    ``stream_type`` is what counts as a stream in arguments and results. Only the outermost call
    is recorded: what the method calls itself is made again on replay.
    """

    def decorate(method: F) -> F:
        name = method.__name__

        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            recipe: GraphRecipe = self._env.recipe
            if recipe.depth:
                return method(self, *args, **kwargs)
            recipe.depth += 1
            try:
                result = method(self, *args, **kwargs)
            finally:
                recipe.depth -= 1
            recipe.add(self if isinstance(self, stream_type) else None, name, args, kwargs, result, stream_type)
            return result

        return wrapper  # type: ignore[return-value]

    return decorate
