"""Per-key state carried from batch to batch: ``updateStateByKey`` (pyspark's ``PythonStateDStream``), as a graph node."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable

from scheduler import Time

from ._environment import StreamEnvironment
from ._node import StreamNode, memory_only

if TYPE_CHECKING:
    from pyspark import RDD

__all__ = ["StateNode", "initial_state"]


def initial_state(env: StreamEnvironment, initial: RDD[Any] | Iterable[Any] | None) -> RDD[Any] | list[Any] | None:
    """``updateStateByKey``'s ``initialRDD`` as the state stream takes it: an RDD (a FrameRDD on Spark Connect), or a
    list inside ``async with``.

    A list is parallelized now (a py4j call), as pyspark does, except on the event loop: then
    the state stream parallelizes a copy when the first batch needs it, on the generation thread.
    """
    from pyspark import RDD

    if not initial:
        return None
    if isinstance(initial, RDD) or not isinstance(initial, Iterable):  # an RDD, or a FrameRDD on Spark Connect
        return initial
    if env.async_mode:
        return list(initial)
    return env.spark_context.parallelize(initial)


class StateNode(StreamNode):
    """The state RDD of each batch: the previous state updated with the batch's new values.

    Per batch with new data, every key with state or new values gets
    ``update(new_values_list, old_state_or_None)``; a ``None`` result drops the key. Without
    a previous state (the first batch) the initial RDD, if any, stands in for it. In a batch
    where the parent has no RDD the previous state is carried over unchanged and ``update``
    is not called: pyspark's behaviour (Scala's ``updateStateByKey`` would call it with no
    values). The stream persists its RDDs and must checkpoint them: each state RDD derives
    from the one before, and a checkpoint cuts that ever-growing lineage.
    """

    def __init__(self, parent: StreamNode, update: Callable[[list[Any], Any], Any], num_partitions: int,
                 initial: RDD[Any] | list[Any] | None) -> None:
        """Keep state over ``parent``'s pairs, partitioned into ``num_partitions``.

        ``initial`` seeds the state: an RDD, or a list of pairs that the first batch
        parallelizes (on the generation thread, so a context inside ``async with`` makes no
        py4j call on the event loop).
        """
        super().__init__(parent.env, [parent])
        self._update = update
        self._num_partitions = num_partitions
        self._initial = initial
        self._storage_level = memory_only()
        self._must_checkpoint = True

    def _step(self, state: RDD[Any] | None, new: RDD[Any]) -> RDD[Any]:
        # What is shipped to executors captures plain values only (never self).
        update, n = self._update, self._num_partitions
        if state is None:
            pending = new.groupByKey(n).mapValues(lambda values: (list(values), None))
        else:
            def new_values_and_state(grouped: tuple[Any, Any]) -> tuple[list[Any], Any]:
                old, values = grouped
                old = list(old)
                return list(values), (old[0] if old else None)

            pending = state.cogroup(new.partitionBy(n), n).mapValues(new_values_and_state)
        updated = pending.mapValues(lambda values_state: update(values_state[0], values_state[1]))
        return updated.filter(lambda kv: kv[1] is not None)

    def _compute(self, time: Time) -> RDD[Any] | None:
        previous = self._get_or_compute(time.minus(self._slide))
        new = self._parents[0].get_or_compute(time)
        if new is None:
            return previous
        if previous is None and isinstance(self._initial, list):
            self._initial = self._env.spark_context.parallelize(self._initial)
        initial: RDD[Any] | None = self._initial  # type: ignore[assignment]  # an RDD from here on
        return self._step(previous if previous is not None else initial, new)
