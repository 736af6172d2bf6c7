"""Conformance: every catalogue program gives the same outputs, batch by batch, on pyspark.streaming and on aiodstream."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from .ours import run_aiodstream
from .programs import PROGRAMS, ProgramSpec
from .reference import run_reference

pytestmark = pytest.mark.spark

BATCH_SECONDS = 0.2
"""Short batches keep the run fast; results do not depend on the interval (a slower engine
only queues batches, and each batch still takes exactly one queued list)."""


@pytest.fixture(scope="module")
def warm_spark(spark_context: Any) -> Any:
    """The shared SparkContext with its Python workers started, so no program pays for that."""
    spark_context.parallelize(range(8), 2).map(lambda x: (x % 2, x)).reduceByKey(lambda a, b: a + b).collect()
    return spark_context


@pytest.mark.parametrize("spec", list(PROGRAMS.values()), ids=list(PROGRAMS))
def test_same_outputs_as_pyspark(spec: ProgramSpec, warm_spark: Any) -> None:
    """The program's recorded outputs, pprint text and saved files equal pyspark.streaming's, batch by batch."""
    expected = run_reference(spec.program, None, spec.num_batches, BATCH_SECONDS, sc=warm_spark)
    actual = run_aiodstream(spec.program, None, spec.num_batches, BATCH_SECONDS, sc=warm_spark)
    assert actual == expected
