"""The test run's Spark Connect session: a Connect client on the shared SparkContext's server, beside classic pyspark."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.connect


def test_the_connect_session_is_a_connect_client_beside_the_classic_context(connect_session: Any, spark_context: Any) -> None:
    """The fixture gives a Connect session that runs Python over Arrow on the same Spark the classic tests use."""
    import pyarrow as pa
    from pyspark.sql.connect.session import SparkSession

    assert isinstance(connect_session, SparkSession)

    def tag(batches: Any) -> Any:
        from pyspark import TaskContext

        for batch in batches:
            yield pa.RecordBatch.from_pydict({"p": pa.array([TaskContext.get().partitionId()] * batch.num_rows, pa.int32()),
                                              "id": batch.column(0)})

    rows = connect_session.range(0, 4, 1, 2).mapInArrow(tag, "p int, id long").collect()
    assert [(row.p, row.id) for row in rows] == [(0, 0), (0, 1), (1, 2), (1, 3)]
    assert spark_context.parallelize([1, 2, 3], 2).glom().collect() == [[1], [2, 3]]


def test_the_server_refuses_a_client_without_the_token(connect_address: str) -> None:
    """The test run's Connect server is a front door: a client without its token is refused."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException
    from pyspark.sql.connect.session import SparkSession

    stranger = SparkSession(f"sc://{connect_address}/;token=wrong")
    try:
        with pytest.raises(SparkConnectGrpcException, match="Invalid authentication token"):
            stranger.range(1).count()
    finally:
        stranger.client.close()
