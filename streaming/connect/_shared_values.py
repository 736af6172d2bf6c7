"""Broadcast variables and accumulators on Spark Connect (``FrameContext.broadcast`` / ``accumulator``).

A :class:`FrameBroadcast` travels by value inside each job's pickled functions. A
:class:`FrameAccumulator`'s task-side copies add into a table of the worker process; when a FrameRDD
task's partition function has run to its end, the task writes what it added as one report file
(``streaming.connect.write_report``) into the report place the accumulator was pickled with: under
the FrameContext's checkpoint directory when one is set (``setCheckpointDir``, which
``ssc.checkpoint`` sets too; the server's executors reach it), else a private directory of this
machine (a local server only). The driver folds the files into the accumulators when one's
``value`` is read. No Spark counterpart code: pyspark's broadcasts and accumulators need a SparkContext.
"""

from __future__ import annotations

import itertools
import sys
import threading
import types
import weakref
from typing import Any

from ._task_reports import CheckpointReports, ReportFolder, ReportStore, write_report

__all__ = ["FrameAccumulator", "FrameBroadcast", "SharedValues", "task_ended", "task_started"]

_TASK_TABLE = "_aiodstream_task_accumulators"
"""The worker process's table of this task's additions, kept in ``sys.modules`` so that every copy of this
module (the package travels by value: each job's functions bring their own) finds the same one."""


def _task_table() -> dict[tuple[str, int], list[Any]]:
    """``(report place, accumulator id) -> [param, value so far]`` for the task running in this worker."""
    holder = sys.modules.get(_TASK_TABLE)
    if holder is None:
        holder = sys.modules[_TASK_TABLE] = types.ModuleType(_TASK_TABLE)
        holder.table = {}  # type: ignore[attr-defined]
    table: dict[tuple[str, int], list[Any]] = holder.table
    return table


def task_started() -> None:
    """A partition function starts in this worker: what an earlier, failed task added is dropped."""
    if _TASK_TABLE in sys.modules:
        _task_table().clear()


def task_ended() -> None:
    """A partition function ran to its end: what the task added goes to the driver, one file per report place."""
    if _TASK_TABLE not in sys.modules:
        return
    table = _task_table()
    if not table:
        return
    by_place: dict[str, dict[int, Any]] = {}
    for (place, aid), (_, value) in table.items():
        by_place.setdefault(place, {})[aid] = value
    table.clear()
    for place, values in by_place.items():
        write_report(place, "", values)


class FrameBroadcast:
    """pyspark's ``Broadcast`` on Spark Connect: a read-only value that travels by value with each job's functions.

    Every task gets its own copy (with the pickled function, as a closure's captured value does);
    ``unpersist`` has nothing to release, and after ``destroy`` the value can no longer be sent.
    """

    def __init__(self, value: Any) -> None:
        """Broadcast ``value``."""
        self._value = value
        self._destroyed = False

    @property
    def value(self) -> Any:
        """The broadcast value (on the driver and in tasks)."""
        return self._value

    def unpersist(self, blocking: bool = False) -> None:
        """Nothing to do: no copy is kept anywhere but in the jobs' pickled functions."""

    def destroy(self, blocking: bool = False) -> None:
        """Forbids sending the value to tasks again (a job using it afterwards fails as it is pickled)."""
        self._destroyed = True

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        if self._destroyed:
            raise RuntimeError("Attempted to use broadcast variable after it was destroyed")
        return FrameBroadcast, (self._value,)

    def __repr__(self) -> str:
        return f"<FrameBroadcast {self._value!r}>"


def _task_copy(place: str, aid: int, zero: Any, param: Any) -> FrameAccumulator:
    """What a pickled accumulator becomes in a task: a copy that adds into the worker's table."""
    copy = FrameAccumulator.__new__(FrameAccumulator)
    copy._place, copy.aid, copy._param, copy._value, copy._shared = place, aid, param, zero, None
    return copy


class FrameAccumulator:
    """pyspark's ``Accumulator`` on Spark Connect: ``add`` and ``+=`` anywhere, ``value`` on the driver only.

    A task's additions reach the driver as report files when the task's partition function has
    run to its end; the driver folds them in when ``value`` is read (so the additions of an action
    are in the value once the action returns, as with pyspark). Where the files go is chosen each
    time the accumulator is sent with a job (:meth:`SharedValues.place`).
    """

    def __init__(self, shared: SharedValues, aid: int, value: Any, param: Any) -> None:
        """The driver's accumulator ``aid`` of ``shared``, starting at ``value``."""
        self._shared: SharedValues | None = shared
        self._place = ""  # a task's copy: where it reports (the driver's chooses when pickled)
        self.aid = aid
        self._value = value
        self._param = param

    @property
    def value(self) -> Any:
        """The value on the driver (with every finished task's additions); a task may not read it."""
        if self._shared is None:
            raise RuntimeError("Accumulator.value cannot be accessed inside tasks")
        self._shared.fold()
        return self._value

    @value.setter
    def value(self, value: Any) -> None:
        if self._shared is None:
            raise RuntimeError("Accumulator.value cannot be accessed inside tasks")
        self._shared.fold()
        self._value = value

    def add(self, term: Any) -> None:
        """Adds ``term`` (with the accumulator's parameter's ``addInPlace``)."""
        if self._shared is not None:
            with self._shared.lock:
                self._value = self._param.addInPlace(self._value, term)
            return
        entry = _task_table().setdefault((self._place, self.aid), [self._param, self._value])
        entry[1] = self._param.addInPlace(entry[1], term)

    def __iadd__(self, term: Any) -> FrameAccumulator:
        self.add(term)
        return self

    def _merge(self, term: Any) -> None:
        self._value = self._param.addInPlace(self._value, term)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        place = self._shared.place() if self._shared is not None else self._place
        return _task_copy, (place, self.aid, self._param.zero(self._value), self._param)

    def __str__(self) -> str:
        return str(self._value)

    def __repr__(self) -> str:
        return f"Accumulator<id={self.aid}, value={self._value}>"


class SharedValues:
    """A FrameContext's accumulators and the report places their tasks write into (made when first needed)."""

    def __init__(self) -> None:
        """No accumulator yet, and no checkpoint directory."""
        self.lock = threading.RLock()
        self._ids = itertools.count()
        self._checkpoint_dir: str | None = None
        self._stores: dict[str | None, ReportStore] = {}  # by checkpoint directory (None: a private folder)
        self._accumulators: weakref.WeakValueDictionary[int, FrameAccumulator] = weakref.WeakValueDictionary()

    def use_checkpoint(self, directory: str | None) -> None:
        """Jobs sent from now on report under ``directory`` (the FrameContext's ``setCheckpointDir``; ``None``: a private folder)."""
        with self.lock:
            self._checkpoint_dir = directory

    def place(self) -> str:
        """Where the tasks of a job sent now report: under the checkpoint directory if one is set (the server's
        executors reach it), else in a private directory of this machine (only a server on this machine's disk does)."""
        with self.lock:
            key = self._checkpoint_dir
            store = self._stores.get(key)
            if store is None:
                store = ReportFolder(prefix="aiodstream-accumulators-") if key is None else CheckpointReports(key)
                self._stores[key] = store
            return store.place

    def accumulator(self, value: Any, param: Any) -> FrameAccumulator:
        """A new accumulator starting at ``value``."""
        with self.lock:
            made = FrameAccumulator(self, next(self._ids), value, param)
            self._accumulators[made.aid] = made
            return made

    def fold(self) -> None:
        """Adds every report the tasks have written so far to its accumulators, removing the files."""
        with self.lock:
            for store in self._stores.values():
                for record in store.records("", remove=True):
                    for aid, term in record.items():
                        accumulator = self._accumulators.get(aid)
                        if accumulator is not None:
                            accumulator._merge(term)
