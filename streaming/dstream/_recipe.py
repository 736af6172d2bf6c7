"""GraphRecipe: the DStream calls that built a context's graph, kept in its checkpoint to rebuild it (Spark's ``Checkpoint``).

Spark serializes the DStream graph, Python functions included, into the checkpoint, and
``getOrCreate`` rebuilds the context from it without calling the setup function. Here the graph is
rebuilt by replaying the program's own API calls (``socketTextStream``, ``map``, ``foreachRDD``,
...), each with its arguments pickled by pyspark's cloudpickle, on a fresh context.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Sequence, TypeVar

import attrs

from scheduler import MAX_MILLISECONDS, CheckpointError, CheckpointPath, CorruptCheckpointError, as_checkpoint_path

__all__ = ["RECIPE_FILE", "GraphRecipe", "RecipeCall", "SavedRecipe", "StreamRef", "load_recipe", "recorded"]

RECIPE_FILE = "graph"
"""The recipe's file name in a checkpoint directory."""

_MAGIC = b"aiodstream-graph v1\n"

F = TypeVar("F", bound=Callable[..., Any])


@attrs.frozen
class StreamRef:
    """Stands for the ``index``-th stream a recipe made, in a recorded call's arguments."""

    index: int


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
    """

    batch_ms: int
    concurrent_jobs: int | None
    spark_conf: tuple[tuple[str, str], ...]
    calls: tuple[RecipeCall, ...]
    continuous_ms: int | None = None
    """The epoch interval of a context with a Continuous trigger (recipes written before it had none)."""

    def replay(self, context: Any, stream_type: type) -> None:
        """Make the recorded calls again on ``context``, in order.

        Raises:
            CheckpointError: a call made another number of streams than when recorded.
        """
        streams: list[Any] = []

        def resolve(value: Any) -> Any:
            if isinstance(value, StreamRef):
                return streams[value.index]
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

    def save(self, directory: str | os.PathLike[str] | CheckpointPath, *, batch_ms: int, concurrent_jobs: int | None,
             spark_conf: Sequence[tuple[str, str]], continuous_ms: int | None = None) -> str | None:
        """Write the recipe to ``directory`` atomically (blocking I/O); ``None``, or why it cannot be written.

        A recipe that cannot be pickled (a queue of RDDs, a function holding the SparkContext)
        is not written, and an older one is removed: a restart then calls the setup function.
        """
        from pyspark import cloudpickle  # the pickler pyspark ships functions to executors with

        path = as_checkpoint_path(directory) / RECIPE_FILE
        unrecordable = [c.method for c in self.calls if c.method.startswith("<unrecordable")]
        reason = None
        data = b""
        if unrecordable:
            reason = f"{unrecordable[0][14:-1]} was called with a stream of another context"
        else:
            recipe = SavedRecipe(batch_ms, concurrent_jobs, tuple(spark_conf), tuple(self.calls), continuous_ms)
            try:
                data = _MAGIC + cloudpickle.dumps(recipe)  # type: ignore[no-untyped-call]
            except Exception as exc:  # cloudpickle raises many kinds: anything unpicklable
                reason = f"{type(exc).__name__}: {exc}"
        if reason is not None:
            path.delete()
            return reason
        path.write_replacing(data)
        return None


def load_recipe(directory: str | os.PathLike[str] | CheckpointPath) -> SavedRecipe | None:
    """The recipe saved in ``directory``, or ``None`` if there is none (blocking I/O).

    Raises:
        CorruptCheckpointError: the file is not a recipe this version wrote, or cannot be unpickled.
    """
    import pickle

    path = as_checkpoint_path(directory) / RECIPE_FILE
    data = path.read_bytes()
    if data is None:
        return None
    if not data.startswith(_MAGIC):
        raise CorruptCheckpointError(f"{path} is not a DStream graph written by aiodstream", path=str(path))
    try:
        recipe = pickle.loads(data[len(_MAGIC):])
    except Exception as exc:
        raise CorruptCheckpointError(f"cannot read the DStream graph in {path}: {type(exc).__name__}: {exc}; "
                                     "was it written by another version of the program's modules?", path=str(path)) from exc
    if not isinstance(recipe, SavedRecipe):
        raise CorruptCheckpointError(f"{path} holds {type(recipe).__name__}, not a DStream graph", path=str(path))
    for name, interval, optional in (("batch interval", recipe.batch_ms, False), ("epoch interval", recipe.continuous_ms, True)):
        if not (optional and interval is None) and (type(interval) is not int or not 0 < interval <= MAX_MILLISECONDS):
            raise CorruptCheckpointError(f"cannot read the DStream graph in {path}: its {name} must be a positive whole number "
                                         f"of milliseconds within a Java long, got {interval!r:.40}", path=str(path))
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
