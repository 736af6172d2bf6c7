"""Bad arguments of the public calls are refused at the call, with the rule, the value and the fix.

Non-finite and out-of-range durations (pyspark's own exception type for the same input, which
its ``int(seconds * 1000)`` raises deep inside) and socket addresses that cannot be reached.
No Spark: the context is built without a SparkContext.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.streaming import StreamingContext as PySparkStreamingContext

from scheduler import DurationOverflowError, InvalidDurationError, InvalidPipelineError, Milliseconds, Seconds, StreamingError
from streaming import StreamingContext, streams
from streaming.continuous import Continuous
from streaming.inputs import QueueInputDStream
from streaming.state import parse_delay_threshold
from tests.anyio_support import raises_exactly

RANGE = "within Spark's range of \u00b19223372036854775807 ms (a Java long of milliseconds)"


@pytest.fixture
def ssc() -> StreamingContext:
    """A context with 0.5 s batches and no SparkContext (streams are built, never run)."""
    return StreamingContext(None, 0.5)


def test_overflow_error_is_a_streaming_error_an_invalid_duration_and_an_overflow_error() -> None:
    """DurationOverflowError is caught as StreamingError, InvalidDurationError, ValueError and OverflowError."""
    assert issubclass(DurationOverflowError, StreamingError) and issubclass(DurationOverflowError, InvalidDurationError)
    assert issubclass(DurationOverflowError, ValueError) and issubclass(DurationOverflowError, OverflowError)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_the_batch_duration_error_is_of_pyspark_s_type_for_the_same_input(value: float) -> None:
    """StreamingContext(sc, nan/inf) raises an instance of what pyspark's own conversion raises for it."""
    with pytest.raises(Exception) as theirs:
        # pyspark's own code, with a stand-in for the JVM gateway: self._jvm.Duration(int(seconds * 1000))
        PySparkStreamingContext._jduration(SimpleNamespace(_jvm=SimpleNamespace(Duration=int)), value)  # type: ignore[arg-type]
    with pytest.raises(StreamingError) as ours:
        StreamingContext(None, value)
    assert isinstance(ours.value, type(theirs.value)) and type(theirs.value) in (ValueError, OverflowError)


def test_a_nan_batch_duration_names_the_argument_and_the_fix() -> None:
    """StreamingContext(sc, nan) says which argument, the value and what to pass."""
    with raises_exactly(InvalidDurationError, "batchDuration takes a finite number, got nan; pass e.g. 1 or 0.5"):
        StreamingContext(None, math.nan)


def test_an_infinite_batch_duration_names_the_range_and_the_fix() -> None:
    """StreamingContext(sc, inf) is refused at the call with the range Spark holds."""
    with raises_exactly(DurationOverflowError, f"batchDuration must be finite and {RANGE}, got inf; pass e.g. 1 or 0.5"):
        StreamingContext(None, math.inf)


def test_a_batch_duration_beyond_spark_s_range_is_refused() -> None:
    """A finite batch duration beyond a Java long of milliseconds is refused too, not built and failed later."""
    with raises_exactly(DurationOverflowError, f"batchDuration must be finite and {RANGE}, got 1e+300; pass e.g. 1 or 0.5"):
        StreamingContext(None, 1e300)


@pytest.mark.parametrize(
    ("call", "exc_type", "message"),
    [
        (lambda ssc, s: s.window(math.nan), InvalidDurationError, "windowDuration takes a finite number, got nan; pass e.g. 1 or 0.5"),
        (lambda ssc, s: s.window(1, math.inf), DurationOverflowError,
         f"slideDuration must be finite and {RANGE}, got inf; pass e.g. 1 or 0.5"),
        (lambda ssc, s: s.countByWindow(math.inf, 1), DurationOverflowError,
         f"windowDuration must be finite and {RANGE}, got inf; pass e.g. 1 or 0.5"),
        (lambda ssc, s: s.checkpoint(math.nan), InvalidDurationError,
         "checkpoint interval takes a finite number, got nan; pass e.g. 1 or 0.5"),
        (lambda ssc, s: ssc.remember(math.inf), DurationOverflowError,
         f"remember duration must be finite and {RANGE}, got inf; pass e.g. 1 or 0.5"),
        (lambda ssc, s: ssc.awaitTerminationOrTimeout(math.nan), InvalidDurationError,
         "timeout takes a finite number, got nan; pass a number of seconds such as 10, or None to wait without a timeout"),
        (lambda ssc, s: ssc.awaitTermination(math.inf), DurationOverflowError,
         f"timeout must be finite and {RANGE}, got inf; pass a number of seconds such as 10, or None to wait without a timeout"),
        (lambda ssc, s: s.slice(math.nan, 1), InvalidDurationError,
         "a slice bound takes a finite number, got nan; pass a datetime or unix seconds"),
        (lambda ssc, s: ssc.socketTextStream("localhost", 9999, restartDelay=math.inf), DurationOverflowError,
         f"restartDelay must be finite and {RANGE}, got inf; pass e.g. 2"),
        (lambda ssc, s: ssc.socketTextStream("localhost", 9999, restartDelay=math.nan), InvalidDurationError,
         "restartDelay takes a finite number, got nan; pass e.g. 2"),
    ],
)
def test_non_finite_durations_are_refused_at_every_public_call(
    ssc: StreamingContext, call: Callable[[StreamingContext, Any], object], exc_type: type[Exception], message: str,
) -> None:
    """Windows, slides, checkpoint intervals, remember, timeouts, slice bounds and restart delays refuse NaN and infinity."""
    stream = QueueInputDStream(ssc._env, [], True, None)
    with raises_exactly(exc_type, message):
        call(ssc, stream)


def test_await_any_termination_refuses_an_infinite_timeout_as_pyspark_does() -> None:
    """streams.awaitAnyTermination(inf) raises an OverflowError (pyspark's int(inf * 1000)) naming the fix."""
    with raises_exactly(DurationOverflowError, f"timeout must be finite and {RANGE}, got inf; pass a number of seconds "
                                               "such as 10, or None to wait without a timeout"):
        streams.awaitAnyTermination(math.inf)


@pytest.mark.parametrize(
    ("build", "exc_type", "message"),
    [
        (lambda: Seconds(math.inf), DurationOverflowError,
         f"Seconds(n) must be finite and {RANGE}, got inf; pass e.g. Seconds(1) or Seconds(0.5)"),
        (lambda: Milliseconds(2**63), DurationOverflowError,
         f"Milliseconds(n) must be finite and {RANGE}, got 9223372036854775808; pass e.g. Milliseconds(500)"),
        (lambda: Continuous("1" * 30 + " days"), InvalidDurationError,  # Spark's interval overflows first
         "Error parsing '111111111111111111111111111111 days' to interval: it overflows Spark's interval (months and "
         "days are 32-bit ints, and the whole interval at most 9223372036854775807 microseconds, about 292,000 years)"),
        (lambda: Continuous("\u0663 seconds"), InvalidDurationError,
         "Error parsing '\u0663 seconds' to interval: '\u0663' is not a number"),
    ],
)
def test_duration_builders_and_triggers_refuse_values_beyond_spark_s_range(
    build: Callable[[], object], exc_type: type[Exception], message: str,
) -> None:
    """Seconds, Milliseconds and the continuous trigger refuse what a Java long cannot hold, and non-ASCII digits."""
    with raises_exactly(exc_type, message):
        build()


@pytest.mark.parametrize("interval", ["1 month", "1 year", " 1 month ", "interval 2 years 1 day", "1 month 2 months"])
def test_the_continuous_trigger_refuses_months_and_years_as_spark_does(interval: str) -> None:
    """A month has no fixed length: Spark's Trigger.Continuous refuses months and years with this message, naming
    the string as given (a watermark's delay counts a month as 31 days instead)."""
    with raises_exactly(InvalidDurationError, f"Doesn't support month or year interval: {interval}"):
        Continuous(interval)


def test_months_and_years_that_cancel_out_leave_the_rest_of_a_trigger_interval() -> None:
    """Spark sums the months first: "1 year -12 months 1 second" is a second; a watermark still counts 31-day months."""
    assert Continuous("1 year -12 months 1 second").interval_ms == 1000
    assert parse_delay_threshold("1 month") == 31 * 86_400_000


@pytest.mark.parametrize(
    ("host", "port", "message"),
    [
        (None, 9, "socketTextStream needs the server's host name or address, got None; pass e.g. 'localhost'"),
        ("", 9, "socketTextStream needs the server's host name or address, got ''; pass e.g. 'localhost'"),
        ("  ", 9, "socketTextStream needs the server's host name or address, got '  '; pass e.g. 'localhost'"),
        ("localhost", 70000,
         "socketTextStream's port must be an int from 1 to 65535, got 70000; pass the port the server listens on, e.g. 9999"),
        ("localhost", 0,
         "socketTextStream's port must be an int from 1 to 65535, got 0; pass the port the server listens on, e.g. 9999"),
        ("localhost", "9",
         "socketTextStream's port must be an int from 1 to 65535, got '9'; pass the port the server listens on, e.g. 9999"),
    ],
)
def test_socket_text_stream_refuses_a_missing_host_or_a_bad_port_at_the_call(
    ssc: StreamingContext, host: Any, port: Any, message: str,
) -> None:
    """socketTextStream(None, 9) and ports outside 1..65535 are refused when the stream is built, not at every reconnect."""
    with raises_exactly(InvalidPipelineError, message):
        ssc.socketTextStream(host, port)
