"""Time and Duration: integer-millisecond arithmetic, grids, ranges and validation messages."""

from __future__ import annotations

import enum
from decimal import Decimal

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import Duration, InvalidDurationError, Milliseconds, Minutes, Seconds, StreamingError, Time, TimeOrderedDict
from tests.anyio_support import raises_exactly

# Bounded so that properties also hold for the runtime's realistic range (epoch milliseconds),
# while still reaching negative values and zero.
ms = st.integers(min_value=-(10**13), max_value=10**13)
positive_ms = st.integers(min_value=1, max_value=10**7)
nonzero_ms = st.integers(min_value=-(10**7), max_value=10**7).filter(lambda v: v != 0)
times = ms.map(Time)
durations = ms.map(Duration)


# -- construction and validation --


def test_invalid_duration_error_is_a_streaming_error_and_a_value_error() -> None:
    """InvalidDurationError can be caught as StreamingError and as ValueError."""
    assert issubclass(InvalidDurationError, StreamingError)
    assert issubclass(InvalidDurationError, ValueError)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Duration(1.5), "a Duration must be a whole number of milliseconds (int), got float 1.5"),
        (lambda: Duration(True), "a Duration must be a whole number of milliseconds (int), got bool True"),
        (lambda: Duration("5"), "a Duration must be a whole number of milliseconds (int), got str '5'"),
        (lambda: Time(2.0), "a Time must be a whole number of milliseconds (int), got float 2.0"),
        (lambda: Time(None), "a Time must be a whole number of milliseconds (int), got NoneType None"),
        (lambda: Milliseconds(1.0), "Milliseconds(n) must be a whole number of milliseconds (int), got float 1.0"),
        (lambda: Milliseconds(False), "Milliseconds(n) must be a whole number of milliseconds (int), got bool False"),
    ],
)
def test_non_integer_milliseconds_are_rejected_with_the_type_and_value(build, message) -> None:  # type: ignore[no-untyped-def]
    """Time, Duration and Milliseconds accept only ints and name the bad type and value."""
    with raises_exactly(InvalidDurationError, message):
        build()


def test_int_subclasses_are_normalised_to_plain_int() -> None:
    """An int subclass (not bool) is accepted and stored as a plain int."""

    class Level(enum.IntEnum):
        HIGH = 7

    d = Duration(Level.HIGH)
    assert d.milliseconds == 7 and type(d.milliseconds) is int
    assert type(Time(Level.HIGH).milliseconds) is int


S_FIX = "; pass e.g. Seconds(1) or Seconds(0.5)"
M_FIX = "; pass e.g. Minutes(1) or Minutes(0.5)"
RANGE = "within Spark's range of \u00b19223372036854775807 ms (a Java long of milliseconds)"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Seconds("1"), "Seconds(n) takes a number, got str '1'" + S_FIX),
        (lambda: Seconds(True), "Seconds(n) takes a number, got bool True" + S_FIX),
        (lambda: Minutes(None), "Minutes(n) takes a number, got NoneType None" + M_FIX),
        (lambda: Seconds(float("inf")), f"Seconds(n) must be finite and {RANGE}, got inf" + S_FIX),
        (lambda: Seconds(float("nan")), "Seconds(n) takes a finite number, got nan" + S_FIX),
        (lambda: Minutes(float("-inf")), f"Minutes(n) must be finite and {RANGE}, got -inf" + M_FIX),
        (lambda: Seconds(Decimal("sNaN")), "Seconds(n) takes a finite number, got Decimal('sNaN')" + S_FIX),
        (lambda: Seconds(0.0001), "Seconds(n) must be a whole number of milliseconds, got 0.0001 (0.1000 ms)" + S_FIX),
        (lambda: Seconds(1.0005), "Seconds(n) must be a whole number of milliseconds, got 1.0005 (1000.5000 ms)" + S_FIX),
        (lambda: Minutes(1e-05), "Minutes(n) must be a whole number of milliseconds, got 1e-05 (0.60000 ms)" + M_FIX),
        (lambda: Seconds(2**63 // 1000 + 1), f"Seconds(n) must be finite and {RANGE}, got 9223372036854776" + S_FIX),
        (lambda: Seconds(Decimal("1e99999")), f"Seconds(n) must be finite and {RANGE}, got Decimal('1E+99999')" + S_FIX),
    ],
)
def test_seconds_and_minutes_reject_non_numbers_non_finite_and_sub_millisecond_values(build, message) -> None:  # type: ignore[no-untyped-def]
    """Seconds and Minutes reject non-numbers, infinities/NaN and fractions of a millisecond, exactly worded."""
    with raises_exactly(InvalidDurationError, message):
        build()


@pytest.mark.parametrize(
    ("duration", "expected_ms"),
    [
        (Seconds(1), 1000),
        (Seconds(1.1), 1100),
        (Seconds(0.001), 1),
        (Seconds(-1.5), -1500),
        (Seconds(Decimal("2.345")), 2345),
        (Minutes(1), 60_000),
        (Minutes(0.5), 30_000),
        (Minutes(Decimal("0.00005")), 3),
        (Milliseconds(7), 7),
    ],
)
def test_helpers_build_exact_millisecond_durations(duration: Duration, expected_ms: int) -> None:
    """Seconds/Minutes/Milliseconds convert exactly what was typed (1.1 s is 1100 ms, no float error)."""
    assert duration == Duration(expected_ms)
    assert type(duration.milliseconds) is int


@given(st.integers(min_value=-((2**63) // 60_000), max_value=(2**63 - 1) // 60_000))
def test_seconds_and_minutes_of_an_int_are_exact_at_any_size(n: int) -> None:
    """Seconds(n) is exactly 1000 n ms and Minutes(n) exactly 60 Seconds(n) over Spark's whole range."""
    assert Seconds(n).milliseconds == n * 1000
    assert Minutes(n).milliseconds == n * 60_000
    assert Minutes(n) == Seconds(60 * n)


@given(st.integers(min_value=-(10**14), max_value=10**14))
def test_seconds_of_a_float_with_three_decimals_is_exact(k: int) -> None:
    """A float of seconds with at most three decimals converts to exactly that many milliseconds."""
    assert Seconds(k / 1000) == Milliseconds(k)
    assert Seconds(Decimal(k) / 1000) == Milliseconds(k)


def test_values_are_frozen() -> None:
    """Time and Duration are immutable values."""
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Time(1).milliseconds = 2  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Duration(1).milliseconds = 2  # type: ignore[misc]


# -- text --


def test_str_and_repr() -> None:
    """str is Spark's "<ms> ms"; repr names the type."""
    assert str(Time(1500)) == "1500 ms"
    assert str(Duration(-3)) == "-3 ms"
    assert repr(Time(1500)) == "Time(1500)"
    assert repr(Seconds(2)) == "Duration(2000)"


# -- Duration arithmetic --


@given(durations, durations, durations)
def test_duration_addition_and_subtraction_are_integer_arithmetic(a: Duration, b: Duration, c: Duration) -> None:
    """Duration +, - and unary - behave as on the underlying integers (associative, commutative, inverse)."""
    assert (a + b).milliseconds == a.milliseconds + b.milliseconds
    assert a + b == b + a
    assert (a + b) + c == a + (b + c)
    assert (a + b) - b == a
    assert -a == Duration(0) - a
    assert a - a == Duration(0) and (a - a).is_zero


@given(durations, st.integers(min_value=-(10**6), max_value=10**6))
def test_duration_scales_by_an_int_on_either_side(d: Duration, k: int) -> None:
    """d * k == k * d == Duration(d.ms * k)."""
    assert d * k == k * d == Duration(d.milliseconds * k)


@given(durations, nonzero_ms)
def test_duration_ratio_and_multiples(d: Duration, other_ms: int) -> None:
    """d / e is the float ratio; is_multiple_of is exact divisibility."""
    other = Duration(other_ms)
    assert d / other == d.milliseconds / other_ms
    assert d.is_multiple_of(other) == (d.milliseconds % other_ms == 0)
    assert (d * 3 + other * 5 - d * 3).is_multiple_of(other)


def test_duration_properties() -> None:
    """is_zero and seconds report the value."""
    assert Duration(0).is_zero and not Duration(1).is_zero
    assert Milliseconds(1500).seconds == 1.5


@pytest.mark.parametrize(
    "operation",
    [
        lambda: Duration(1) * 1.5,
        lambda: Duration(1) * True,
        lambda: Duration(1) + 1,
        lambda: Duration(1) - Time(1),
        lambda: Duration(1) / 2,
        lambda: Duration(1) + Time(1),
        lambda: Time(1) + Time(1),
        lambda: Time(1) + 1,
        lambda: Time(1) - 1,
        lambda: Time(1) < Duration(2),
    ],
)
def test_mixed_or_float_operands_are_type_errors(operation) -> None:  # type: ignore[no-untyped-def]
    """Operations mixing in floats, bools, bare ints or the wrong value type raise TypeError."""
    with pytest.raises(TypeError):
        operation()


# -- Time arithmetic --


@given(times, durations)
def test_time_plus_and_minus_a_duration(t: Time, d: Duration) -> None:
    """t + d and t - d are Times; (t + d) - t == d; minus() and since() agree with the operators."""
    assert isinstance(t + d, Time)
    assert (t + d).milliseconds == t.milliseconds + d.milliseconds
    assert (t + d) - d == t
    assert (t + d) - t == d
    assert t.minus(d) == t - d
    assert (t + d).since(t) == d


@given(times, times)
def test_difference_of_times_is_a_duration_and_order_follows_milliseconds(a: Time, b: Time) -> None:
    """a - b is a Duration, antisymmetric; Time ordering and equality follow the milliseconds."""
    diff = a - b
    assert isinstance(diff, Duration)
    assert diff == -(b - a)
    assert (a < b) == (a.milliseconds < b.milliseconds)
    assert (a <= b) == (a.milliseconds <= b.milliseconds)
    assert (a == b) == (a.milliseconds == b.milliseconds)
    if a == b:
        assert hash(a) == hash(b)


@given(times, positive_ms)
def test_floor_is_the_latest_grid_point_not_after_the_time(t: Time, p: int) -> None:
    """floor(p) is on the epoch grid of p, not after t, and within one period of it (negatives too)."""
    period = Duration(p)
    f = t.floor(period)
    assert f.is_multiple_of(period)
    assert f <= t < f + period


@given(times, positive_ms, times)
def test_floor_with_zero_uses_the_grid_anchored_at_zero(t: Time, p: int, zero: Time) -> None:
    """floor(p, zero) is on the grid zero + k p, not after t, and within one period of it."""
    period = Duration(p)
    f = t.floor(period, zero)
    assert f.since(zero).is_multiple_of(period)
    assert f <= t < f + period


def test_floor_examples_from_spark() -> None:
    """Spark's examples: floor is integer division, floor(d, zero) shifts the grid."""
    assert Time(1500).floor(Seconds(1)) == Time(1000)
    assert Time(2000).floor(Seconds(1)) == Time(2000)
    assert Time(1500).floor(Seconds(1), Time(300)) == Time(1300)
    assert Time(-1).floor(Seconds(1)) == Time(-1000)
    assert Time(3000).is_multiple_of(Seconds(1)) and not Time(3001).is_multiple_of(Seconds(1))


@given(times, st.integers(min_value=-500, max_value=500), st.integers(1, 100) | st.integers(-100, -1))
def test_until_and_to_enumerate_the_grid_from_start(start: Time, span: int, step_ms: int) -> None:
    """until() is start, start+step, ... strictly before end; to() also includes end when on the grid."""
    end = Time(start.milliseconds + span)
    step = Duration(step_ms)
    before_end = (lambda v: v < end.milliseconds) if step_ms > 0 else (lambda v: v > end.milliseconds)
    expected, v = [], start.milliseconds
    while before_end(v):
        expected.append(Time(v))
        v += step_ms
    assert list(start.until(end, step)) == expected
    reaches_end = (end.milliseconds - start.milliseconds) % step_ms == 0 and (span == 0 or (span > 0) == (step_ms > 0))
    assert list(start.to(end, step)) == expected + ([end] if reaches_end else [])


def test_until_and_to_examples() -> None:
    """until excludes the end, to includes it, counting up or down."""
    assert list(Time(0).until(Time(300), Milliseconds(100))) == [Time(0), Time(100), Time(200)]
    assert list(Time(0).to(Time(300), Milliseconds(100))) == [Time(0), Time(100), Time(200), Time(300)]
    assert list(Time(0).to(Time(250), Milliseconds(100))) == [Time(0), Time(100), Time(200)]
    assert list(Time(10).to(Time(0), Milliseconds(-5))) == [Time(10), Time(5), Time(0)]
    assert list(Time(10).until(Time(0), Milliseconds(-5))) == [Time(10), Time(5)]
    assert list(Time(5).to(Time(5), Milliseconds(1))) == [Time(5)]
    assert list(Time(5).until(Time(5), Milliseconds(1))) == []


def test_zero_or_negative_steps_and_periods_are_clear_errors() -> None:
    """A zero grid period or step is an InvalidDurationError, not Python's division or range error (negative steps count down)."""
    with pytest.raises(InvalidDurationError, match="must not be zero, got 0 ms"):
        list(Time(0).until(Time(10), Duration(0)))
    with pytest.raises(InvalidDurationError, match="must not be zero, got 0 ms"):
        list(Time(0).to(Time(10), Duration(0)))
    with pytest.raises(InvalidDurationError, match="a grid period must not be zero"):
        Time(10).is_multiple_of(Duration(0))
    with pytest.raises(InvalidDurationError, match="multiple of a zero duration"):
        Duration(10).is_multiple_of(Duration(0))


# -- TimeOrderedDict --


def test_time_ordered_dict_pops_the_oldest_entries_through_a_time() -> None:
    d: TimeOrderedDict[str] = TimeOrderedDict()
    for ms in (1000, 2000, 3000, 4000):
        d[Time(ms)] = f"b{ms}"
    assert d.pop_through(2000) == [(Time(1000), "b1000"), (Time(2000), "b2000")]
    assert list(d) == [Time(3000), Time(4000)]
    assert d.pop_through(2999) == []
    assert d.pop_through(10_000) == [(Time(3000), "b3000"), (Time(4000), "b4000")]
    assert d == {}


class _AddingTime(Time):
    """A key whose milliseconds, read by a scan, add an entry to a dict first (another thread's insert, made deterministic)."""

    target: TimeOrderedDict[int] | None = None

    @property  # type: ignore[misc]
    def milliseconds(self) -> int:  # type: ignore[override]
        target, _AddingTime.target = _AddingTime.target, None
        if target is not None:
            target[Time(9000)] = 9
        return 1000


def test_time_ordered_dict_takes_an_entry_added_during_the_scan_in_turn() -> None:
    """An insert during the in-order scan (another thread's) neither breaks it nor is taken before its time."""
    d: TimeOrderedDict[int] = TimeOrderedDict()
    d[Time(500)] = 5
    key = object.__new__(_AddingTime)
    d[key] = 1
    d[Time(2000)] = 2
    _AddingTime.target = d
    assert d.pop_through(1500) == [(Time(500), 5), (key, 1)]
    assert list(d) == [Time(2000), Time(9000)]


def test_time_ordered_dict_finds_entries_added_out_of_order() -> None:
    """A past time added late (a window computing an old parent batch) is still dropped on time, and order comes back."""
    d: TimeOrderedDict[int] = TimeOrderedDict()
    for ms in (3000, 4000, 1000, 5000):  # 1000 arrives after newer times
        d[Time(ms)] = ms
    assert d.pop_through(1500) == [(Time(1000), 1000)]
    assert d.pop_through(3500) == [(Time(3000), 3000)]  # back to the front-only walk
    d[Time(4000)] = 4  # replacing a value keeps its place and is not out of order
    assert d.pop_through(4000) == [(Time(4000), 4)]
    assert list(d) == [Time(5000)]


def test_time_ordered_dict_stays_unordered_while_misplaced_entries_remain() -> None:
    d: TimeOrderedDict[int] = TimeOrderedDict()
    for ms in (5000, 6000, 2000, 1000):
        d[Time(ms)] = ms
    assert d.pop_through(1000) == [(Time(1000), 1000)]
    assert d.pop_through(2000) == [(Time(2000), 2000)]  # behind 5000 and 6000 in insertion order
    assert list(d) == [Time(5000), Time(6000)]


def test_time_ordered_dict_setdefault_goes_through_the_order_check() -> None:
    d: TimeOrderedDict[list[int]] = TimeOrderedDict()
    d.setdefault(Time(2000), []).append(1)
    d.setdefault(Time(1000), []).append(2)
    d.setdefault(Time(2000), []).append(3)
    assert d == {Time(2000): [1, 3], Time(1000): [2]}
    assert d.pop_through(1000) == [(Time(1000), [2])]


def test_time_ordered_dict_gives_the_value_of_its_oldest_time() -> None:
    """``oldest`` is the first entry's value, the oldest time's even when it was added out of order, and None when empty."""
    d: TimeOrderedDict[int] = TimeOrderedDict()
    assert d.oldest() is None
    for ms in (3000, 4000):
        d[Time(ms)] = ms
    assert d.oldest() == 3000
    d[Time(1000)] = 1000
    assert d.oldest() == 1000
    d.pop_through(4000)
    assert d.oldest() is None


def test_time_ordered_dict_skips_keys_removed_behind_its_back() -> None:
    """Entries removed by ``pop``, ``del`` or ``clear`` are neither returned by ``oldest`` nor by ``pop_through``."""
    d: TimeOrderedDict[int] = TimeOrderedDict()
    for ms in (1000, 2000, 3000):
        d[Time(ms)] = ms
    d.pop(Time(1000))
    del d[Time(2000)]
    assert d.oldest() == 3000
    assert d.pop_through(2500) == []
    assert d.pop_through(3000) == [(Time(3000), 3000)]
    d[Time(3000)] = 3  # the newest time again, after it was popped
    d.update({Time(4000): 4})
    assert d.pop_through(5000) == [(Time(3000), 3), (Time(4000), 4)]
    d[Time(6000)] = 6
    d.clear()
    assert d.oldest() is None and d.pop_through(10_000) == []


@given(st.lists(st.integers(0, 50), max_size=40), st.lists(st.integers(-1, 60), max_size=10))
def test_time_ordered_dict_drops_exactly_what_a_full_scan_would(inserts: list[int], cuts: list[int]) -> None:
    d: TimeOrderedDict[int] = TimeOrderedDict()
    reference: dict[int, int] = {}
    for i, ms in enumerate(inserts):
        d[Time(ms)] = i
        reference[ms] = i
        if cuts and i % 4 == 3:
            cut = cuts[i % len(cuts)]
            expected = sorted((ms, v) for ms, v in reference.items() if ms <= cut)
            for ms_, _ in expected:
                del reference[ms_]
            assert sorted((t.milliseconds, v) for t, v in d.pop_through(cut)) == expected
    assert {t.milliseconds: v for t, v in d.items()} == reference
