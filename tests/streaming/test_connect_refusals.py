"""A StreamingContext on a Spark Connect session: chosen by the session's kind; what needs a JVM is refused at the call.

These run without Spark: a Connect client is made for an address nobody serves, and each refusal
comes before the first call to a server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from streaming import StreamingContext
from streaming.continuous import Continuous
from streaming.spark import ConnectBinding, ConnectNotSupportedError, SparkBinding, bind_spark
from streaming.state import StatefulProcessor

_NEEDS_JVM = "is not supported on Spark Connect: it needs a SparkContext in the driver, and a Connect session has none; "
_CLASSIC = "or run the program on a classic SparkContext (SparkSession.builder.master(...).getOrCreate())"


@pytest.fixture
def offline_session() -> Iterator[Any]:
    """A Spark Connect session whose server does not exist: its client connects only on a first call, which never comes."""
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession("sc://localhost:1/;token=unused")
    yield session
    session.client.close()  # an open client keeps the interpreter from exiting


def _refusal(feature: str, alternative: str) -> str:
    return f"{feature} {_NEEDS_JVM}{alternative}"


def test_the_session_kind_chooses_the_binding(offline_session: Any) -> None:
    """A Connect session gets a ConnectBinding; a SparkContext or None gets the classic SparkBinding."""
    connect = bind_spark(offline_session, "kind-test", frame_context=lambda session: session)
    classic = bind_spark(None, "kind-test", frame_context=lambda session: session)
    assert isinstance(connect, ConnectBinding) and connect.kind == "connect"
    assert isinstance(classic, SparkBinding) and classic.kind == "classic"
    assert connect.started_spark_context is None


def test_the_refusal_is_a_streaming_error_and_not_implemented(offline_session: Any) -> None:
    """What Connect cannot run raises ConnectNotSupportedError, which callers may catch as NotImplementedError."""
    with pytest.raises(NotImplementedError):
        StreamingContext(offline_session, Continuous(1000))


def test_continuous_processing_is_refused(offline_session: Any) -> None:
    """A Continuous trigger on a Connect session is refused when the context is made."""
    expected = _refusal("continuous processing (a Continuous trigger)", "give a batch duration in seconds, e.g. StreamingContext(spark, 1)")
    with pytest.raises(ConnectNotSupportedError) as raised:
        StreamingContext(offline_session, Continuous(1000))
    assert str(raised.value) == expected


class _Nothing(StatefulProcessor):
    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N803
        return []


@pytest.mark.parametrize("method", ["withWatermark", "mapGroupsWithState", "flatMapGroupsWithState", "transformWithState"])
def test_the_keyed_state_operators_and_watermarks_are_not_refused(offline_session: Any, method: str) -> None:
    """withWatermark and the keyed state operators build on Connect as on classic Spark (their tasks report through
    files there: tests/streaming/groups/test_connect_groups.py and tests/streaming/tws/test_connect_tws.py run them)."""
    ssc = StreamingContext(offline_session, 1)
    pairs = ssc.queueStream([[(1, 2)]])
    calls = {
        "withWatermark": lambda: pairs.withWatermark(lambda record: record[1], "1 minute"),
        "mapGroupsWithState": lambda: pairs.mapGroupsWithState(lambda key, values, state: (key, 0), numPartitions=2),
        "flatMapGroupsWithState": lambda: pairs.flatMapGroupsWithState(lambda key, values, state: [], numPartitions=2),
        "transformWithState": lambda: pairs.transformWithState(_Nothing(), "append", "None", numPartitions=2),
    }
    stream = calls[method]()
    assert stream.context() is ssc


def test_foreach_batch_needs_a_function_of_two_arguments(offline_session: Any) -> None:
    """foreachBatch takes pyspark's shape, func(df, batch_id); another function is refused at the call."""
    from scheduler import InvalidPipelineError

    ssc = StreamingContext(offline_session, 1)
    stream = ssc.queueStream([[1]])
    with pytest.raises(InvalidPipelineError, match=r"^foreachBatch needs a function of \(df, batch_id\), got "):
        stream.foreachBatch(lambda df: None)
