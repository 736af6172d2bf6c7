"""GroupState and GroupStateTimeout: a key's state as ``mapGroupsWithState`` / ``flatMapGroupsWithState`` see it.

The names and semantics are pyspark's (``pyspark.sql.streaming.state``), the errors are pyspark's
exception classes with its error classes; values are any picklable Python object (pyspark's
``applyInPandasWithState`` takes tuples matching a schema). A fresh GroupState is made for every
call of the user's function; after the call the operator reads what it did (:attr:`updated`,
:attr:`removed`, :attr:`timeout_timestamp`) and writes the state back by Spark's rules.

Where pyspark departs from the documented contract this follows the contract: the timeout is
reset on every call (a call that sets none leaves the key without a timeout, as Scala's
``flatMapGroupsWithState`` does; pyspark resets it on a call with data too, but a timed-out call
that sets none keeps it, and the key then times out again in every later batch), ``setTimeoutTimestamp``'s error
names event-time timeouts (pyspark's says processing time), and ``VALUE_NOT_POSITIVE`` carries
the value (pyspark's carries its type name).
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from scheduler import LONG_MAX

from ._event_time import event_time_ms
from ._protocol import NO_TIMESTAMP

__all__ = ["NO_TIMESTAMP", "GroupState", "GroupStateTimeout"]

_OPERATOR = "[map|flatMap]GroupsWithState"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class GroupStateTimeout:
    """The kinds of timeout, by pyspark's names (and string values)."""

    NoTimeout: str = "NoTimeout"
    ProcessingTimeTimeout: str = "ProcessingTimeTimeout"
    EventTimeTimeout: str = "EventTimeTimeout"

    ALL = (NoTimeout, ProcessingTimeTimeout, EventTimeTimeout)

    @classmethod
    def check(cls, value: object) -> str:
        """``value`` if it names a timeout kind.

        Raises:
            PySparkValueError: anything else.
        """
        from pyspark.errors import PySparkValueError

        if not isinstance(value, str) or value not in cls.ALL:
            raise PySparkValueError(
                errorClass="VALUE_NOT_ALLOWED",
                messageParameters={"arg_name": "timeoutConf", "allowed_values": ", ".join(cls.ALL)},
            )
        return value


class GroupState:
    """The state of one key during one call of the user's function.

    Args:
        value: the stored value, or ``None`` when the key has none.
        exists: whether a value is stored (a removed state may still carry a timeout).
        batch_processing_time_ms: the batch time (constant within a batch and its re-runs).
        watermark_ms: the batch's eviction watermark, or ``NO_TIMESTAMP`` without a watermark.
        timeout_conf: a :class:`GroupStateTimeout` kind.
        has_timed_out: whether this call is for a timeout.
        watermark_present: whether the input has a watermark.
        old_timeout_ms: the stored timeout (pyspark's ``oldTimeoutTimestamp``).
    """

    NO_TIMESTAMP = NO_TIMESTAMP

    def __init__(
        self,
        value: Any,
        exists: bool,
        batch_processing_time_ms: int,
        watermark_ms: int,
        timeout_conf: str,
        has_timed_out: bool,
        watermark_present: bool,
        old_timeout_ms: int = NO_TIMESTAMP,
    ) -> None:
        """Make the state a call sees."""
        if has_timed_out and timeout_conf == GroupStateTimeout.NoTimeout:
            raise RuntimeError("a state cannot have timed out without a timeout: an internal error")
        self._value = value
        self._defined = exists
        self._batch_processing_time_ms = batch_processing_time_ms
        self._watermark_ms = watermark_ms
        self._timeout_conf = GroupStateTimeout.check(timeout_conf)
        self._has_timed_out = has_timed_out
        self._watermark_present = watermark_present
        self._old_timeout_ms = old_timeout_ms
        self.updated = False
        """Whether the call updated the value."""
        self.removed = False
        """Whether the call removed the state (and did not update it afterwards)."""
        self.timeout_timestamp = NO_TIMESTAMP
        """The timeout the call set (reset to none for every call)."""

    @property
    def exists(self) -> bool:
        """Whether the key has a value."""
        return self._defined

    @property
    def get(self) -> Any:
        """The value.

        Raises:
            PySparkValueError: STATE_NOT_EXISTS, when there is none.
        """
        if not self._defined:
            from pyspark.errors import PySparkValueError

            raise PySparkValueError(errorClass="STATE_NOT_EXISTS", messageParameters={})
        return self._value

    @property
    def getOption(self) -> Any:
        """The value, or ``None``."""
        return self._value if self._defined else None

    @property
    def hasTimedOut(self) -> bool:
        """Whether the function was called because the key timed out."""
        return self._has_timed_out

    @property
    def oldTimeoutTimestamp(self) -> int:
        """The timeout stored before this call (``NO_TIMESTAMP``: none); pyspark's is always ``NO_TIMESTAMP``."""
        return self._old_timeout_ms

    def update(self, newValue: Any) -> None:  # noqa: N803 (pyspark's name)
        """Set the value; ``None`` is not a value.

        Raises:
            PySparkTypeError: CANNOT_BE_NONE.
        """
        if newValue is None:
            from pyspark.errors import PySparkTypeError

            raise PySparkTypeError(errorClass="CANNOT_BE_NONE", messageParameters={"arg_name": "newValue"})
        self._value = newValue
        self._defined = True
        self.updated = True
        self.removed = False

    def remove(self) -> None:
        """Remove the state (an :meth:`update` afterwards brings it back)."""
        self._value = None
        self._defined = False
        self.updated = False
        self.removed = True

    def setTimeoutDuration(self, durationMs: int) -> None:  # noqa: N803 (pyspark's names)
        """Time out ``durationMs`` after this batch's processing time (processing-time timeouts only).

        A float is taken as pyspark takes it (its whole milliseconds: pyspark refuses only a string).

        Raises:
            PySparkTypeError: NOT_EXPECTED_TYPE, for anything but an int or a finite float.
            PySparkRuntimeError: CANNOT_WITHOUT, without processing-time timeouts.
            PySparkValueError: VALUE_NOT_POSITIVE; VALUE_OUT_OF_BOUNDS for a timeout past a Java long of milliseconds
                (Spark's timestamps are longs).
        """
        from pyspark.errors import PySparkRuntimeError, PySparkValueError

        durationMs = _milliseconds("durationMs", durationMs, "int")  # noqa: N806 (pyspark's name)
        if self._timeout_conf != GroupStateTimeout.ProcessingTimeTimeout:
            raise PySparkRuntimeError(
                errorClass="CANNOT_WITHOUT",
                messageParameters={"condition1": "set timeout duration",
                                   "condition2": f"enabling processing time timeout in {_OPERATOR}"},
            )
        if durationMs <= 0:
            raise PySparkValueError(errorClass="VALUE_NOT_POSITIVE",
                                    messageParameters={"arg_name": "durationMs", "arg_value": str(durationMs)})
        _check_long("durationMs", durationMs, LONG_MAX - self._batch_processing_time_ms)
        self.timeout_timestamp = self._batch_processing_time_ms + durationMs

    def setTimeoutTimestamp(self, timestampMs: int | datetime.datetime) -> None:  # noqa: N803 (pyspark's names)
        """Time out when the watermark passes ``timestampMs`` (epoch ms or a datetime; event-time timeouts only).

        Raises:
            PySparkTypeError: NOT_EXPECTED_TYPE, for anything but an int, a finite float or a datetime.
            PySparkRuntimeError: CANNOT_WITHOUT, without event-time timeouts.
            PySparkValueError: VALUE_NOT_POSITIVE, INVALID_TIMEOUT_TIMESTAMP before the watermark, or
                VALUE_OUT_OF_BOUNDS past a Java long of milliseconds.
        """
        from pyspark.errors import PySparkRuntimeError, PySparkValueError

        if self._timeout_conf != GroupStateTimeout.EventTimeTimeout:
            raise PySparkRuntimeError(
                errorClass="CANNOT_WITHOUT",
                messageParameters={"condition1": "set timeout timestamp",
                                   "condition2": f"enabling event time timeout in {_OPERATOR}"},
            )
        if isinstance(timestampMs, datetime.datetime):
            # Read as event times are (event_time_ms: a naive datetime in UTC), so that a timeout set from an event's
            # time is compared with a watermark from the same reading, in any local time zone.
            ms = event_time_ms(timestampMs)
        else:
            ms = _milliseconds("timestampMs", timestampMs, "int or datetime")
        if ms <= 0:
            raise PySparkValueError(errorClass="VALUE_NOT_POSITIVE",
                                    messageParameters={"arg_name": "timestampMs", "arg_value": str(ms)})
        if self._watermark_ms != NO_TIMESTAMP and ms < self._watermark_ms:
            raise PySparkValueError(
                errorClass="INVALID_TIMEOUT_TIMESTAMP",
                messageParameters={"timestamp": str(ms), "watermark": str(self._watermark_ms)},
            )
        _check_long("timestampMs", ms, LONG_MAX)
        self.timeout_timestamp = int(ms)

    def getCurrentWatermarkMs(self) -> int:
        """The batch's eviction watermark.

        Raises:
            PySparkRuntimeError: CANNOT_WITHOUT, when the input has no watermark.
        """
        if not self._watermark_present:
            from pyspark.errors import PySparkRuntimeError

            raise PySparkRuntimeError(
                errorClass="CANNOT_WITHOUT",
                messageParameters={"condition1": "get event time watermark timestamp",
                                   "condition2": f"setting watermark before {_OPERATOR}"},
            )
        return self._watermark_ms

    def getCurrentProcessingTimeMs(self) -> int:
        """The batch's processing time: its batch time, the same in a re-run."""
        return self._batch_processing_time_ms

    def __str__(self) -> str:
        return f"GroupState({self._value!r})" if self._defined else "GroupState(<undefined>)"

    __repr__ = __str__


def _milliseconds(name: str, value: object, expected: str) -> int:
    """``value`` as whole milliseconds, as pyspark takes them: an int, or a finite float's whole part (pyspark refuses
    only what is not a number); anything else is NOT_EXPECTED_TYPE naming ``expected``."""
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    from pyspark.errors import PySparkTypeError

    raise PySparkTypeError(errorClass="NOT_EXPECTED_TYPE",
                           messageParameters={"expected_type": expected, "arg_name": name, "arg_type": type(value).__name__})


def _check_long(name: str, value: int, upper: int) -> None:
    # A timeout is stored, and compared in Spark, as a Java long of milliseconds: beyond it there is no such time.
    if value > upper:
        from pyspark.errors import PySparkValueError

        raise PySparkValueError(errorClass="VALUE_OUT_OF_BOUNDS",
                                messageParameters={"arg_name": name, "lower_bound": "1", "upper_bound": str(upper),
                                                   "actual": str(value)})
