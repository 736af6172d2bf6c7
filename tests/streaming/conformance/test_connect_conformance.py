"""Conformance on Spark Connect: the catalogue's programs give pyspark.streaming's outputs, batch by batch, on a Connect session.

The groups are :mod:`.test_conformance`'s; pyspark's outputs come from the classic shared
SparkContext, aiodstream's from the test run's Connect session. A Connect batch costs several
server round trips, so the default run takes a representative subset (:data:`DEFAULT_GROUPS`);
``AIODSTREAM_CONNECT=all`` runs every group that passes on Connect. :data:`NOT_YET` lists the
groups that do not pass yet, each with the reason (docs/connect.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import connect_params

from .connect import run_connect
from .test_conformance import BATCH_SECONDS, GROUPS, TIMEOUT, group_program, pyspark_outputs

pytestmark = pytest.mark.connect

DEFAULT_GROUPS = ["elementwise", "pprint", "save_as_text_files", "update_state_by_key"]
"""Run by default: stateless operations, the shuffles (reduce, combine, partitionBy, groupByKey, countByValue), pprint, saves,
and updateStateByKey under ssc.checkpoint (3 s on a quiet machine)."""

NOT_YET: dict[str, str] = {}
"""Groups that fail on Connect for now, with why; opt-in runs skip them."""


def test_the_default_groups_and_the_exceptions_are_groups() -> None:
    """Every group named here is a conformance group, and none is both run by default and listed as failing."""
    assert set(DEFAULT_GROUPS) <= set(GROUPS)
    assert set(NOT_YET) <= set(GROUPS)
    assert not set(DEFAULT_GROUPS) & set(NOT_YET)


@pytest.fixture(scope="module")
def warm_sessions(spark_context: Any, connect_session: Any) -> tuple[Any, Any]:
    """The shared SparkContext and Connect session with their Python workers started, so no group pays for that."""
    spark_context.parallelize(range(8), 2).map(lambda x: (x % 2, x)).reduceByKey(lambda a, b: a + b).collect()
    from streaming.connect import FrameContext

    FrameContext(connect_session).parallelize(range(8), 2).map(lambda x: (x % 2, x)).reduceByKey(lambda a, b: a + b).collect()
    return spark_context, connect_session


@pytest.mark.timeout(2 * TIMEOUT + 60)
@pytest.mark.parametrize("group", connect_params(GROUPS, DEFAULT_GROUPS, NOT_YET))
def test_same_outputs_on_connect_as_pyspark(group: str, warm_sessions: tuple[Any, Any]) -> None:
    """The group's recorded outputs, pprint text and saved files on Spark Connect equal pyspark.streaming's, batch by batch."""
    sc, session = warm_sessions
    program, num_batches = group_program(GROUPS[group])
    expected = pyspark_outputs(group, sc)  # pyspark.streaming's outputs: its verified record, else run now
    assert expected and all(expected.values()), {name: rows for name, rows in expected.items() if not rows}
    actual = run_connect(program, None, num_batches, BATCH_SECONDS, session=session, timeout=TIMEOUT)
    assert actual == expected
