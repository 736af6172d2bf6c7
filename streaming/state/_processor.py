"""StatefulProcessor and what it sees: pyspark 4.3's ``transformWithState`` API on plain Python values.

The names are pyspark's (``pyspark.sql.streaming.stateful_processor``): a processor's ``init``
gets a :class:`~streaming.state.StatefulProcessorHandle` and asks it for its state variables;
``handleInputRows``, ``handleExpiredTimer`` and ``handleInitialState`` get the grouping key,
:class:`TimerValues` and (for a timer) :class:`ExpiredTimerInfo`. Rows, outputs and state values
are any picklable Python objects, not pandas frames or Rows. Errors carry Spark's error classes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any

from ._processor_state import StatefulProcessorHandle

__all__ = [
    "ExpiredTimerInfo",
    "StatefulProcessor",
    "TimerValues",
]


class TimerValues:
    """The batch's times as a processor method sees them: -1 where the time mode has none."""

    def __init__(self, currentProcessingTimeInMs: int = -1, currentWatermarkInMs: int = -1) -> None:  # noqa: N803
        """The batch's processing time and the watermark (epoch ms), or -1."""
        self._processing = currentProcessingTimeInMs
        self._watermark = currentWatermarkInMs

    def getCurrentProcessingTimeInMs(self) -> int:
        """The batch's processing time (epoch ms); -1 in time mode "None"."""
        return self._processing

    def getCurrentWatermarkInMs(self) -> int:
        """The watermark used to fire event-time timers (epoch ms); -1 without one."""
        return self._watermark

    def __repr__(self) -> str:
        return f"TimerValues(processing={self._processing}, watermark={self._watermark})"


class ExpiredTimerInfo:
    """The timer that fired, given to ``handleExpiredTimer``."""

    def __init__(self, expiryTimeInMs: int = -1) -> None:  # noqa: N803
        """The timer's expiry (epoch ms)."""
        self._expiry = expiryTimeInMs

    def getExpiryTimeInMs(self) -> int:
        """The timer's expiry (epoch ms)."""
        return self._expiry

    def __repr__(self) -> str:
        return f"ExpiredTimerInfo(expiry={self._expiry})"


class StatefulProcessor(ABC):
    """The user's per-key logic of ``transformWithState`` (pyspark's ``StatefulProcessor``).

    Each partition of each batch runs a fresh copy: ``init(handle)`` (make the state variables),
    ``handleInitialState`` for each initial-state row (first batch only), ``handleInputRows`` once
    per key with input, ``handleExpiredTimer`` once per due timer, then ``close()``. The handle
    methods return iterables of output values (None counts as no output).
    """

    @abstractmethod
    def init(self, handle: StatefulProcessorHandle) -> None:
        """Make the state variables (``handle.getValueState(...)`` and the like) and keep them on ``self``."""

    @abstractmethod
    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterable[Any] | None:  # noqa: N803
        """The rows of ``key`` in this batch (in arrival order); returns its outputs."""

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,  # noqa: N803
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterable[Any] | None:  # noqa: N803
        """A timer of ``key`` fired; returns its outputs (none by default). The timer is deleted afterwards."""
        return iter(())

    def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> None:  # noqa: N803
        """One initial-state row of ``key``, in the first batch, before its input rows (nothing by default).

        Its return value is dropped unread, as pyspark drops it: write state here, do not yield
        (a generator's body would never run).
        """
        return None

    def close(self) -> None:
        """The partition's batch is done (nothing by default)."""
        return None
