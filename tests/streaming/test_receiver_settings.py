"""A receiver stream's Spark settings, read and checked when the stream is made (no Spark: the settings record only)."""

from __future__ import annotations

import pytest

from scheduler import InvalidPipelineError, Milliseconds
from streaming.inputs._receiver import ReceiverSettings
from streaming.spark import SparkSettings
from tests.anyio_support import raises_exactly


def read(**conf: str) -> ReceiverSettings:
    """The receiver settings of a SparkConf holding ``conf`` (keys with '__' for '.')."""
    return ReceiverSettings.read(SparkSettings(2, {key.replace("__", "."): value for key, value in conf.items()}))


def test_unset_settings_are_spark_s_defaults() -> None:
    """Unset: a 2 s restart delay, 200 ms blocks, no rate limit."""
    assert read() == ReceiverSettings(Milliseconds(2000), Milliseconds(200), None, None)


@pytest.mark.parametrize("raw", ["2s", "abc", "1.5", "9999999999"])
def test_a_restart_delay_that_is_not_an_int_is_refused_naming_it(raw: str) -> None:
    """receiverRestartDelay is Spark's getInt of milliseconds: "2s" or "abc" is refused with the setting named."""
    with raises_exactly(InvalidPipelineError, f"[INVALID_CONF_VALUE.TYPE_MISMATCH] The value '{raw}' in the config "
                                              "\"spark.streaming.receiverRestartDelay\" is invalid. It should be a/an 'int' "
                                              "value. SQLSTATE: 22022"):
        read(spark__streaming__receiverRestartDelay=raw)
    assert read(spark__streaming__receiverRestartDelay=" 500 ").restart_delay == Milliseconds(500)


def test_a_negative_restart_delay_is_refused_naming_it() -> None:
    """A negative receiverRestartDelay is refused when the stream is made (it made the receiver reconnect without a pause)."""
    with raises_exactly(InvalidPipelineError, "spark.streaming.receiverRestartDelay must be a non-negative number of "
                                              "milliseconds, got -1000; set it to e.g. 2000"):
        read(spark__streaming__receiverRestartDelay="-1000")
    assert read(spark__streaming__receiverRestartDelay="0").restart_delay == Milliseconds(0)


@pytest.mark.parametrize("key", ["spark.streaming.receiver.maxRate", "spark.streaming.backpressure.initialRate"])
@pytest.mark.parametrize("raw", ["inf", "1e999", "nan", "1.5", "100.0", "1e3"])
def test_a_rate_that_is_not_a_whole_number_is_refused_naming_it(key: str, raw: str) -> None:
    """maxRate and initialRate are Spark's getLong: inf, nan or a fraction is refused at creation, naming the setting."""
    with raises_exactly(InvalidPipelineError, f"[INVALID_CONF_VALUE.TYPE_MISMATCH] The value '{raw}' in the config "
                                              f"\"{key}\" is invalid. It should be a/an 'long' value. SQLSTATE: 22022"):
        ReceiverSettings.read(SparkSettings(2, {key: raw}))


def test_whole_rates_are_read_and_one_not_positive_is_no_limit() -> None:
    """A whole maxRate caps, initialRate starts below it (else at the cap); 0 or less means no limit, as before."""
    capped = read(spark__streaming__receiver__maxRate="300")
    assert (capped.max_rate, capped.initial_rate) == (300.0, 300.0)
    both = read(spark__streaming__receiver__maxRate=" 300 ", spark__streaming__backpressure__initialRate="+20")
    assert (both.max_rate, both.initial_rate) == (300.0, 20.0)
    assert read(spark__streaming__receiver__maxRate="0").max_rate is None
    assert read(spark__streaming__backpressure__initialRate="-5").initial_rate is None


@pytest.mark.parametrize("raw", ["0", "0ms", "-200ms", "999us"])
def test_a_block_interval_that_is_not_positive_is_refused_with_spark_s_message(raw: str) -> None:
    """blockInterval must be positive in ms (Spark's BlockGenerator requirement, its message); "1s" is 1000 ms."""
    with raises_exactly(InvalidPipelineError, "requirement failed: 'spark.streaming.blockInterval' should be a positive value"):
        read(spark__streaming__blockInterval=raw)
    assert read(spark__streaming__blockInterval="1s").block_interval == Milliseconds(1000)
