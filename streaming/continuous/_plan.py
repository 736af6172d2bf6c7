"""What a continuous query runs: its trigger, its inputs with their operations, its sink.

``Continuous`` is Spark's continuous trigger; ``ContinuousStream`` builds a plan from plain
Python (the narrow operations pyspark's DStream has); the DStream API builds the same plan.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import attrs

from scheduler import MAX_MILLISECONDS, Duration, DurationOverflowError, InvalidDurationError, InvalidPipelineError

from ..state import parse_trigger_interval_ms
from ._sinks import ContinuousSink, ForeachSink
from ._sources import ContinuousSource
from ._task import PartitionFunction

__all__ = ["Branch", "Continuous", "ContinuousPlan", "ContinuousStream", "unsupported_operation"]


def unsupported_operation(name: str) -> InvalidPipelineError:
    """Spark's refusal of an operation in a continuous query."""
    return InvalidPipelineError(f"Continuous processing does not support {name} operations.")


class Continuous:
    """Spark's ``Trigger.Continuous(interval)``: the time between epochs of a continuous query.

    Accepts an interval string as Spark reads it (``"1 second"``), a :class:`Duration`, or whole
    milliseconds.
    """

    __slots__ = ("interval_ms",)

    def __init__(self, interval: str | Duration | int = "1 second") -> None:
        """Build the trigger.

        Raises:
            InvalidDurationError: a negative or zero interval, or a string Spark cannot read or that
                counts months or years (Spark's ``Doesn't support month or year interval``).
        """
        if isinstance(interval, Duration):
            ms = interval.milliseconds
        elif isinstance(interval, int) and not isinstance(interval, bool):
            ms = interval
        elif isinstance(interval, str):
            try:
                ms = parse_trigger_interval_ms(interval)
            except ValueError as exc:
                raise InvalidDurationError(str(exc)) from exc
        else:
            raise InvalidDurationError(f"the continuous trigger's interval must be a string such as '1 second', a Duration or "
                                       f"milliseconds, got {interval!r}")
        if ms < 0:
            raise InvalidDurationError("the interval of trigger should not be negative")
        if ms > MAX_MILLISECONDS:
            raise DurationOverflowError(f"the interval of a continuous trigger must be within Spark's range of "
                                        f"{MAX_MILLISECONDS} ms (a Java long of milliseconds), got {interval!r:.60}; pass e.g. "
                                        "Continuous('1 second')")
        if ms == 0:
            raise InvalidDurationError("the interval of a continuous trigger must be at least 1 ms, got 0 ms; pass e.g. "
                                       "Continuous('1 second')")
        self.interval_ms = ms

    @property
    def interval(self) -> Duration:
        """The time between epochs."""
        return Duration(self.interval_ms)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Continuous) and other.interval_ms == self.interval_ms

    def __hash__(self) -> int:
        return hash(("Continuous", self.interval_ms))

    def __repr__(self) -> str:
        return f"Continuous({self.interval_ms} ms)"


@attrs.frozen
class Branch:
    """One input of the plan and the partition functions its rows go through, in order."""

    source: ContinuousSource
    operations: tuple[PartitionFunction, ...] = ()


@attrs.frozen
class ContinuousPlan:
    """The inputs (their partitions, in order, are the query's partitions) and the one sink."""

    branches: tuple[Branch, ...]
    sink: ContinuousSink

    def __attrs_post_init__(self) -> None:
        if not self.branches:
            raise InvalidPipelineError("a continuous query needs at least one input")
        seen: set[int] = set()
        for branch in self.branches:
            if id(branch.source) in seen:
                raise InvalidPipelineError(
                    f"the continuous input {branch.source!r} reaches the output along more than one path; a continuous "
                    "query reads each input once: apply the operations of both paths in one chain instead")
            seen.add(id(branch.source))
        if not isinstance(self.sink, ContinuousSink):
            raise InvalidPipelineError(f"a continuous query writes to a ContinuousSink, got {self.sink!r}")

    @property
    def sources(self) -> list[ContinuousSource]:
        """The inputs, in offsets-log order."""
        return [branch.source for branch in self.branches]

    @property
    def num_partitions(self) -> int:
        """Tasks the query runs: every input's partitions."""
        return sum(branch.source.num_partitions for branch in self.branches)


def _per_row(function: Callable[[Any], Iterable[Any]]) -> PartitionFunction:
    def flat(_: int, rows: Iterable[Any]) -> Iterable[Any]:
        for row in rows:
            yield from function(row)

    return flat


class ContinuousStream:
    """A continuous input and narrow operations on it, for programs without the DStream API.

    ``ContinuousStream(RateSource(1000)).filter(...).map(...).to(MemorySink())`` gives the plan a
    :class:`~streaming.continuous.ContinuousExecution` runs. The operations are pyspark's narrow
    DStream operations; each returns a new stream and leaves this one as it is.
    """

    def __init__(self, source: ContinuousSource, *, _branches: Sequence[Branch] | None = None) -> None:
        """A stream of ``source``'s rows."""
        if _branches is None:
            if not isinstance(source, ContinuousSource):
                raise InvalidPipelineError(f"Data source {source!r} does not support continuous processing.")
            _branches = (Branch(source),)
        self._branches = tuple(_branches)

    def mapPartitionsWithIndex(self, f: PartitionFunction, preservesPartitioning: bool = False) -> ContinuousStream:  # noqa: N803
        """Apply ``f(partition, rows)`` to each partition's rows of every epoch (``preservesPartitioning`` has no effect)."""
        return ContinuousStream(self._branches[0].source,
                                _branches=[Branch(b.source, (*b.operations, f)) for b in self._branches])

    def mapPartitions(self, f: Callable[[Iterable[Any]], Iterable[Any]],
                      preservesPartitioning: bool = False) -> ContinuousStream:  # noqa: N803
        """Apply ``f(rows)`` to each partition's rows of every epoch."""
        return self.mapPartitionsWithIndex(lambda _, rows: f(rows))

    def map(self, f: Callable[[Any], Any], preservesPartitioning: bool = False) -> ContinuousStream:  # noqa: N803
        """Each row through ``f``."""
        return self.mapPartitionsWithIndex(lambda _, rows: map(f, rows))

    def flatMap(self, f: Callable[[Any], Iterable[Any]], preservesPartitioning: bool = False) -> ContinuousStream:  # noqa: N803
        """Each row to the rows ``f`` returns."""
        return self.mapPartitionsWithIndex(_per_row(f))

    def filter(self, f: Callable[[Any], bool]) -> ContinuousStream:
        """The rows for which ``f`` is true."""
        return self.mapPartitionsWithIndex(lambda _, rows: filter(f, rows))

    def glom(self) -> ContinuousStream:
        """Each partition's rows of an epoch as one list."""
        return self.mapPartitionsWithIndex(lambda _, rows: iter([list(rows)]))

    def mapValues(self, f: Callable[[Any], Any]) -> ContinuousStream:
        """``(k, f(v))`` for each pair ``(k, v)``."""
        return self.map(lambda kv: (kv[0], f(kv[1])))

    def flatMapValues(self, f: Callable[[Any], Iterable[Any]]) -> ContinuousStream:
        """``(k, w)`` for each ``w`` in ``f(v)``."""
        return self.flatMap(lambda kv: ((kv[0], w) for w in f(kv[1])))

    def union(self, other: ContinuousStream) -> ContinuousStream:
        """This stream's rows and ``other``'s."""
        return ContinuousStream(self._branches[0].source, _branches=[*self._branches, *other._branches])

    def foreach(self, writer: Any) -> ContinuousPlan:
        """Write with a ForeachWriter or a function per row."""
        return self.to(ForeachSink(writer))

    def to(self, sink: ContinuousSink) -> ContinuousPlan:
        """The plan writing this stream to ``sink``."""
        return ContinuousPlan(self._branches, sink)

    @property
    def branches(self) -> tuple[Branch, ...]:
        """The inputs and their operations."""
        return self._branches
