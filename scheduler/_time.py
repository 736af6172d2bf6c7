"""Time and Duration: integer-millisecond value types (Spark's ``Time`` and ``Duration``).

Floats never enter the runtime: a batch grid built from floats drifts, one built from integers
cannot.
"""

from __future__ import annotations

import itertools
from collections import deque
from decimal import Decimal, localcontext
from typing import Any, Iterator, TypeVar

import attrs

from ._errors import DurationOverflowError, InvalidDurationError
from ._numbers import LONG_MAX, LONG_MIN

__all__ = ["MAX_MILLISECONDS", "Duration", "Milliseconds", "Minutes", "Seconds", "Time", "TimeOrderedDict", "scaled_milliseconds"]

V = TypeVar("V")

_MISSING: object = object()


def _check_ms(value: object, what: str) -> int:
    # bool is an int subclass; True milliseconds is always a bug.
    if type(value) is not int:
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
        raise InvalidDurationError(
            f"{what} must be a whole number of milliseconds (int), got {type(value).__name__} {value!r}"
        )
    return value


def _duration_ms(value: object) -> int:
    return _check_ms(value, "a Duration")


def _time_ms(value: object) -> int:
    return _check_ms(value, "a Time")


# Times are built several times per batch (every clock read is one), so both classes write their
# own __init__, and share _Ordered, instead of attrs' converter and tuple comparisons: same behaviour
# (ints stored as is, int subclasses normalised, anything else refused; ordering only between
# values of one class), a fraction of the calls. attrs still provides eq, hash and frozenness.
_set_attribute = object.__setattr__


class _Ordered:
    """Ordering by ``milliseconds`` between values of one class (a Time never compares with a Duration)."""

    __slots__ = ()
    milliseconds: int

    def __lt__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self.milliseconds < other.milliseconds
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self.milliseconds <= other.milliseconds
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self.milliseconds > other.milliseconds
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self.milliseconds >= other.milliseconds
        return NotImplemented


@attrs.frozen(init=False, repr=False, order=False)
class Duration(_Ordered):
    """A length of time in whole milliseconds.

    Build one with :func:`Milliseconds`, :func:`Seconds` or :func:`Minutes`.
    """

    milliseconds: int

    def __init__(self, milliseconds: int) -> None:
        """A duration of ``milliseconds`` (an int)."""
        _set_attribute(self, "milliseconds", milliseconds if type(milliseconds) is int else _duration_ms(milliseconds))

    def __add__(self, other: Duration) -> Duration:
        if isinstance(other, Duration):
            return Duration(self.milliseconds + other.milliseconds)
        return NotImplemented

    def __sub__(self, other: Duration) -> Duration:
        if isinstance(other, Duration):
            return Duration(self.milliseconds - other.milliseconds)
        return NotImplemented

    def __mul__(self, factor: int) -> Duration:
        if type(factor) is int:
            return Duration(self.milliseconds * factor)
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, other: Duration) -> float:
        if isinstance(other, Duration):
            return self.milliseconds / other.milliseconds
        return NotImplemented

    def __neg__(self) -> Duration:
        return Duration(-self.milliseconds)

    def is_multiple_of(self, other: Duration) -> bool:
        """Whether this duration is a whole number of ``other`` (Spark's ``isMultipleOf``).

        Raises:
            InvalidDurationError: ``other`` is zero.
        """
        if not other.milliseconds:
            raise InvalidDurationError(f"cannot tell whether {self} is a multiple of a zero duration")
        return self.milliseconds % other.milliseconds == 0

    @property
    def is_zero(self) -> bool:
        """True for a zero-length duration."""
        return self.milliseconds == 0

    @property
    def seconds(self) -> float:
        """The duration in seconds, for display and for APIs that take seconds."""
        return self.milliseconds / 1000

    def __repr__(self) -> str:
        return f"Duration({self.milliseconds})"

    def __str__(self) -> str:
        return f"{self.milliseconds} ms"


@attrs.frozen(init=False, repr=False, order=False, unsafe_hash=False)
class Time(_Ordered):
    """A point in time: milliseconds since the epoch of the clock that produced it."""

    milliseconds: int

    def __init__(self, milliseconds: int) -> None:
        """The time ``milliseconds`` (an int) after the clock's epoch."""
        _set_attribute(self, "milliseconds", milliseconds if type(milliseconds) is int else _time_ms(milliseconds))

    def __hash__(self) -> int:
        # Batch-time dicts hash Times a dozen times a batch: the milliseconds' own hash, without
        # the tuple attrs' generated hash builds (equal Times have equal milliseconds).
        return hash(self.milliseconds)

    def __add__(self, other: Duration) -> Time:
        if isinstance(other, Duration):
            return Time(self.milliseconds + other.milliseconds)
        return NotImplemented

    def __sub__(self, other: Time | Duration) -> Time | Duration:
        if isinstance(other, Duration):
            return Time(self.milliseconds - other.milliseconds)
        if isinstance(other, Time):
            return Duration(self.milliseconds - other.milliseconds)
        return NotImplemented

    def minus(self, other: Duration) -> Time:
        """``self - other`` typed as a Time (mypy cannot narrow the operator's union)."""
        return Time(self.milliseconds - other.milliseconds)

    def since(self, earlier: Time) -> Duration:
        """``self - earlier`` typed as a Duration."""
        return Duration(self.milliseconds - earlier.milliseconds)

    def floor(self, period: Duration, zero: Time | None = None) -> Time:
        """The latest time on the grid ``zero + k * period`` that is not after this time."""
        z = 0 if zero is None else zero.milliseconds
        p = period.milliseconds
        return Time((self.milliseconds - z) // p * p + z)

    def is_multiple_of(self, period: Duration) -> bool:
        """Whether this time lies on the epoch-anchored grid of ``period``.

        Raises:
            InvalidDurationError: ``period`` is zero.
        """
        if not period.milliseconds:
            raise InvalidDurationError(f"a grid period must not be zero, got {period}")
        return self.milliseconds % period.milliseconds == 0

    def until(self, end: Time, step: Duration) -> Iterator[Time]:
        """Times ``self, self + step, ...`` strictly before ``end``.

        Raises:
            InvalidDurationError: ``step`` is zero (checked when iteration starts); a negative
                step counts down.
        """
        if not step.milliseconds:
            raise InvalidDurationError(f"the step between times must not be zero, got {step}")
        for ms in range(self.milliseconds, end.milliseconds, step.milliseconds):
            yield Time(ms)

    def to(self, end: Time, step: Duration) -> Iterator[Time]:
        """Times ``self, self + step, ...`` up to and including ``end``.

        Raises:
            InvalidDurationError: ``step`` is zero (checked when iteration starts).
        """
        if not step.milliseconds:
            raise InvalidDurationError(f"the step between times must not be zero, got {step}")
        # range() excludes its stop: step one past ``end`` in the direction of travel.
        past_end = end.milliseconds + (1 if step.milliseconds > 0 else -1)
        for ms in range(self.milliseconds, past_end, step.milliseconds):
            yield Time(ms)

    def __repr__(self) -> str:
        return f"Time({self.milliseconds})"

    def __str__(self) -> str:
        return f"{self.milliseconds} ms"


MAX_MILLISECONDS = LONG_MAX
"""The longest duration a public call accepts: :data:`LONG_MAX`, as Spark's ``Duration`` holds its milliseconds in a Java long."""


def _overflow(name: str, value: object, fix: str) -> DurationOverflowError:
    shown = value if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() < 128 else f"{value!r:.40}"
    return DurationOverflowError(
        f"{name} must be finite and within Spark's range of \u00b1{MAX_MILLISECONDS} ms (a Java long of milliseconds), "
        f"got {shown}; {fix}"
    )


def scaled_milliseconds(value: object, factor: int, name: str, *, fix: str, truncate: bool = False) -> int:
    """``value`` units of ``factor`` milliseconds, as whole milliseconds: every public duration argument goes through here.

    Args:
        value: an int, float or Decimal (bool is refused: ``True`` seconds is always a bug).
        factor: milliseconds per unit (1000 for seconds).
        name: the argument's name for messages (``"batchDuration"``).
        fix: the end of every message, telling what to pass instead (``"pass e.g. 1 or 0.5"``).
        truncate: cut a fraction of a millisecond of the number as typed toward zero, as pyspark's
            ``int(seconds * 1000)`` does (which, through the float product, sometimes gives 1 ms less:
            1.001 s is 1000 ms there, 1001 ms here; see docs/compatibility.md); otherwise a fraction is refused.

    Raises:
        InvalidDurationError: not a number, NaN (a ``ValueError``, as pyspark's ``int(nan)``),
            or a fraction of a millisecond without ``truncate``.
        DurationOverflowError: an infinity (an ``OverflowError`` too, as pyspark's ``int(inf)``),
            or beyond :data:`MAX_MILLISECONDS` either way.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise InvalidDurationError(f"{name} takes a number, got {type(value).__name__} {value!r}; {fix}")
    if isinstance(value, int):
        ms = value * factor  # exact for any size; Decimal arithmetic rounds past 28 digits
    else:
        # Decimal(repr(x)) keeps exactly what the user typed: 1.1 s is 1100 ms, not 1100.0000000000002.
        typed = value if isinstance(value, Decimal) else Decimal(repr(value))
        if typed.is_infinite():
            raise _overflow(name, value, fix)
        if not typed.is_finite():
            raise InvalidDurationError(f"{name} takes a finite number, got {value!r}; {fix}")
        if typed.adjusted() > 40:  # far beyond the range: do not build its digits
            raise _overflow(name, value, fix)
        with localcontext() as ctx:
            ctx.prec = len(typed.as_tuple().digits) + 10  # enough for the product to be exact
            exact = typed * factor
        if exact != exact.to_integral_value() and not truncate:
            raise InvalidDurationError(
                f"{name} must be a whole number of milliseconds, got {value!r} ({exact} ms); {fix}"
            )
        ms = int(exact)  # toward zero
    if not LONG_MIN <= ms <= LONG_MAX:
        raise _overflow(name, value, fix)
    return ms


def Milliseconds(n: int) -> Duration:
    """A duration of ``n`` whole milliseconds.

    Raises:
        InvalidDurationError: ``n`` is not an int.
        DurationOverflowError: ``n`` is beyond :data:`MAX_MILLISECONDS`.
    """
    ms = _check_ms(n, "Milliseconds(n)")
    if not LONG_MIN <= ms <= LONG_MAX:
        raise _overflow("Milliseconds(n)", n, "pass e.g. Milliseconds(500)")
    return Duration(ms)


def Seconds(n: int | float) -> Duration:
    """A duration of ``n`` seconds; fractions are allowed down to whole milliseconds.

    Raises:
        InvalidDurationError: not a number, NaN, or a fraction of a millisecond.
        DurationOverflowError: infinite, or beyond :data:`MAX_MILLISECONDS`.
    """
    return Duration(scaled_milliseconds(n, 1000, "Seconds(n)", fix="pass e.g. Seconds(1) or Seconds(0.5)"))


def Minutes(n: int | float) -> Duration:
    """A duration of ``n`` minutes; fractions are allowed down to whole milliseconds.

    Raises:
        InvalidDurationError: not a number, NaN, or a fraction of a millisecond.
        DurationOverflowError: infinite, or beyond :data:`MAX_MILLISECONDS`.
    """
    return Duration(scaled_milliseconds(n, 60_000, "Minutes(n)", fix="pass e.g. Minutes(1) or Minutes(0.5)"))


class TimeOrderedDict(dict[Time, V]):
    """A dict keyed by batch time whose oldest entries go without a scan of the newer ones.

    Per-batch metadata (generated RDDs, input ranges, input infos) arrives batch after batch, so
    the dict's insertion order is time order and the entries to forget are at its front. Dropping
    them by scanning every entry, as a plain dict needs, costs each batch time proportional to the
    backlog: a run that falls behind would fall further behind. The keys are also kept in a deque
    in insertion order, which :meth:`pop_through` and :meth:`oldest` read from its front: a dict's
    own iteration walks past the slots its deleted front entries leave until the dict is resized,
    so reading the front of a dict used as a queue costs the backlog too. An entry added out of
    time order (a past time computed late) marks the dict unordered, and the next
    :meth:`pop_through` scans everything once.

    Entries may be added from one thread while another pops: each step is one dict or deque
    operation. Keys removed by ``pop`` or ``del`` stay in the deque until a scan passes them.
    """

    __slots__ = ("_newest_ms", "_order", "_unordered")

    def __init__(self) -> None:
        """An empty dict."""
        super().__init__()
        self._newest_ms: int | None = None
        self._unordered = False
        self._order: deque[Time] = deque()

    def __setitem__(self, key: Time, value: V) -> None:
        ms = key.milliseconds
        newest = self._newest_ms
        if newest is None or ms > newest:
            self._newest_ms = ms
        elif key in self:  # a new value keeps its place
            dict.__setitem__(self, key, value)
            return
        elif ms < newest:
            self._unordered = True
        dict.__setitem__(self, key, value)
        self._order.append(key)

    def setdefault(self, key: Time, default: V) -> V:
        """``self[key]``, first set to ``default`` if missing (through :meth:`__setitem__`)."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            self[key] = default
            return default
        return value  # type: ignore[return-value]

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Set each entry through :meth:`__setitem__` (keyword arguments are refused: keys are times)."""
        if kwargs:
            raise TypeError("TimeOrderedDict keys are Times, not keywords")
        entries: dict[Time, V] = dict(*args)
        for key, value in entries.items():
            self[key] = value

    def clear(self) -> None:
        """Remove every entry."""
        dict.clear(self)
        self._order.clear()
        self._unordered = False

    def oldest(self) -> V | None:
        """The value of the oldest time held, or ``None`` if empty: the first entry (a scan only if some came out of order)."""
        if self._unordered:
            keys = list(self)  # one step: another thread may add entries meanwhile
            return self.get(min(keys)) if keys else None
        order = self._order
        while order:
            try:
                value = self.get(order[0], _MISSING)
            except IndexError:  # emptied meanwhile
                return None
            if value is not _MISSING:
                return value  # type: ignore[return-value]
            order.popleft()  # a key removed by pop or del
        return None

    def pop_through(self, milliseconds: int) -> list[tuple[Time, V]]:
        """Remove the entries at or before ``milliseconds`` and return them, oldest first."""
        order = self._order
        if not self._unordered:
            # In order: take from the front of the deque while it is not newer, without looking at
            # the entries behind it (generation running ahead of the jobs keeps a backlog of them).
            if not order or order[0].milliseconds > milliseconds:
                return []  # several calls a batch find nothing to drop
            pop = self.pop
            out: list[tuple[Time, V]] = []
            while order:
                t = order[0]
                if t.milliseconds > milliseconds:
                    break
                order.popleft()
                v = pop(t, _MISSING)
                if v is not _MISSING:
                    out.append((t, v))  # type: ignore[arg-type]
            return out
        keys = list(self)  # one step: another thread may add entries meanwhile
        self._unordered = False
        old = sorted(t for t in keys if t.milliseconds <= milliseconds)
        rest = [t for t in keys if t.milliseconds > milliseconds]
        if any(a.milliseconds > b.milliseconds for a, b in itertools.pairwise(rest)):
            self._unordered = True  # still out of order behind the first kept entry
        # The deque again in insertion order, without the keys popped or removed; one added
        # meanwhile (by another thread) goes behind.
        seen = set(keys)
        self._order = deque([*rest, *(t for t in list(order) if t not in seen and t in self)])
        pop = self.pop
        return [(t, v) for t in old if (v := pop(t, _MISSING)) is not _MISSING]  # type: ignore[misc]
