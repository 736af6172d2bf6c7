"""Progress-tracking options read as Spark reads the settings they mirror (values as strings, ints or bools)."""

from __future__ import annotations

import pytest

from scheduler import InvalidPipelineError, ProgressTrackingOptions
from tests.anyio_support import raises_exactly

NO_DATA = "spark.sql.streaming.noDataProgressEventInterval"


@pytest.mark.parametrize(("value", "ms"), [("10s", 10_000), ("500ms", 500), ("1min", 60_000), (" 2S ", 2000),
                                            ("2500", 2500), ("0", 0), (750, 750)])
def test_no_data_progress_interval_is_a_time_in_milliseconds(value: object, ms: int) -> None:
    """noDataProgressEventInterval takes a time string ("10s" is 10000 ms) or a number of milliseconds, as Spark's timeConf."""
    assert ProgressTrackingOptions.from_options({NO_DATA: value}).no_data_progress_event_interval_ms == ms


@pytest.mark.parametrize("value", ["abc", "1.5s", "10 parsecs", "-1s", -5, True])
def test_a_malformed_or_negative_no_data_progress_interval_is_refused_naming_it(value: object) -> None:
    """A value that is not a time, or a negative one, is refused with the option's name and what it takes."""
    with raises_exactly(InvalidPipelineError, f"option {NO_DATA} must be a non-negative time: a number of milliseconds "
                                              f"or a time string such as 10s or 500ms, got {value!r}"):
        ProgressTrackingOptions.from_options({NO_DATA: value})
