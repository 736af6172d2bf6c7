"""transformWithState on Spark Connect: the outputs and progress counters of the classic engine, batch by batch.

The programs and events of :mod:`.test_conformance`, run by the same driver over the test run's
Connect session (the processors' state stores under the checkpoint, opened by the server's
Python workers; the tasks' numbers and event-time statistics reach the driver as report files).
They are compared with the plain-Python pipeline run of the same program, which
:mod:`.test_conformance` holds equal to the classic engine and to pyspark 4.3's
``transformWithStateInPandas`` (outputs and counters). The default run takes the program with
initial state and event-time timers; ``AIODSTREAM_CONNECT=all`` runs every program.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.streaming.tws.reference import PROGRAMS
from tests.streaming.tws.test_conformance import EVENTS, run_ours, run_pipeline
from tests.support import connect_params

pytestmark = pytest.mark.connect

DEFAULT_PROGRAMS = ["seeded"]
"""Run by default: initial state, event-time timers, late rows dropped by the watermark."""


def test_the_default_programs_are_programs() -> None:
    """Every program run by default is one of the conformance programs."""
    assert set(DEFAULT_PROGRAMS) <= set(PROGRAMS)


@pytest.mark.parametrize("program", connect_params(sorted(PROGRAMS), DEFAULT_PROGRAMS))
def test_the_same_outputs_and_counters_on_connect(connect_session: Any, tmp_path: Path, program: str) -> None:
    """Outputs per input batch, and the timers registered, deleted and rows dropped by the watermark, as on classic Spark."""
    expected_metrics: list[dict[str, int]] = []
    expected = run_pipeline(tmp_path / "pipeline", program, EVENTS, expected_metrics)
    metrics: list[dict[str, int]] = []
    actual = run_ours(connect_session, tmp_path / "ck", program, EVENTS, metrics)
    assert any(expected), "the program produced nothing: the comparison would prove nothing"
    assert actual == expected
    assert metrics == expected_metrics
    if PROGRAMS[program]["time_mode"] == "EventTime":
        assert sum(m["numRowsDroppedByWatermark"] for m in metrics) == 2  # the late rows, counted by the tasks' reports


def test_an_initial_state_as_a_frame_rdd_is_refused_as_an_rdd_is(connect_session: Any) -> None:
    """transformWithState's initialState must be a list on Connect too: a FrameRDD gets the classic RDD's message."""
    from scheduler import InvalidPipelineError
    from streaming import StreamingContext
    from tests.streaming.tws.test_dstream_tws import Tally

    ssc = StreamingContext(connect_session, 1)
    pairs = ssc.queueStream([[("a", 1)]])
    with pytest.raises(InvalidPipelineError, match=r"^initialState of transformWithState must be \(key, row\) pairs in a "
                                                   r"list, not an RDD: .*; pass initialState=rdd\.collect\(\)$"):
        pairs.transformWithState(Tally(), "Update", "None", initialState=ssc.sparkContext.parallelize([("a", 1)]))
