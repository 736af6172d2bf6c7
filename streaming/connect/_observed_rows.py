"""ObservedRows: an input's rows per batch on Spark Connect, where no accumulator can count them.

On a classic context an input's RDD counts its rows into an accumulator as the batch reads it
(``streaming.inputs``' ``RowCounter``). Connect has no accumulators; it has observed metrics: a
``DataFrame.observe`` node counts the rows that flow through it in every query that reads it,
and the server returns the counts with the query's results. So the batch's FrameRDD is observed
(no extra job, no extra stage) and its count read once the batch's jobs ended: the rows the
last query that read the input saw (every query reads the whole input but one stopped early).
"""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["ObservedRows"]

_names = itertools.count()


class ObservedRows:
    """Counts, per batch, the rows of an input's FrameRDDs.

    A FrameRDD whose count is known without running it (``parallelize``'s, and what ``map`` and the
    other count-keeping operations make of it) is counted at once; a persisted or checkpointed one,
    or one read straight from a frame, is observed. One whose values Python functions still have to
    make (``rdd.filter(f)``) goes uncounted (``take`` gives ``None``): see ``FrameRDD.observed``.
    """

    def __init__(self) -> None:
        self._counts: dict[int, Any] = {}  # batch ms -> an int, or the Observation the batch's queries fill

    def wrap(self, rdd: Any, batch_ms: int) -> Any:
        """``rdd`` (a FrameRDD) counting its rows for batch ``batch_ms`` (same partitions, same values)."""
        if rdd.known_count is not None:
            self._counts[batch_ms] = rdd.known_count
            return rdd
        from pyspark.sql.connect.observation import Observation

        observation = Observation(f"aiodstream-input-rows-{next(_names)}")
        observed = rdd.observed(observation)
        if observed is None:
            return rdd
        self._counts[batch_ms] = observation
        return observed

    def take(self, batch_ms: int) -> int | None:
        """The rows batch ``batch_ms`` read (``None`` if it was not counted), once its jobs ended; then forgotten."""
        count = self._counts.pop(batch_ms, None)
        if count is None or isinstance(count, int):
            return count
        return int(count.get.get("rows", 0))  # no query read the input: nothing was read
