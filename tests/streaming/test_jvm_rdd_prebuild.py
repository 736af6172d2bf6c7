"""JvmRddPrebuild: an output makes its RDD's JVM RDD at generation only once one of its jobs was seen reading it."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from streaming.spark import JvmRddPrebuild


class FakePipelined:
    """Stands for a pyspark PipelinedRDD: ``_jrdd_val`` is None until its JVM RDD is made (reading ``id()`` makes it)."""

    def __init__(self) -> None:
        self._jrdd_val: Any = None
        self.made = 0

    def id(self) -> int:
        if self._jrdd_val is None:
            self._jrdd_val = object()
            self.made += 1
        return 7


def reads(t: Any, rdd: FakePipelined) -> str:
    rdd.id()  # what collect does: hands the RDD's own JVM RDD to Spark
    return "read"


def derives(t: Any, rdd: FakePipelined) -> str:
    return "derived"  # what count does: a new RDD over the parents; this one's JVM RDD is never made


def test_an_output_seen_reading_makes_the_jvm_rdd_at_generation_from_then_on() -> None:
    """The first batch's job makes it and is seen doing so; the next batches' RDDs are made before their jobs."""
    prebuild = JvmRddPrebuild()
    first = FakePipelined()
    assert prebuild.observing(reads, first)(None, first) == "read"
    assert prebuild.reads_jvm_rdd
    second = FakePipelined()
    job = prebuild.observing(reads, second)
    assert second.made == 1 and job is reads  # made at generation, the function as it is
    assert job(None, second) == "read" and second.made == 1


def test_an_output_that_never_reads_never_makes_one() -> None:
    """Batch after batch, nothing is made at generation nor by the job."""
    prebuild = JvmRddPrebuild()
    for _ in range(3):
        rdd = FakePipelined()
        assert prebuild.observing(derives, rdd)(None, rdd) == "derived"
        assert rdd.made == 0
    assert not prebuild.reads_jvm_rdd


def test_a_failing_job_that_read_still_teaches_and_its_error_propagates() -> None:
    """The function raises after reading: the error reaches the caller, and the output makes it at generation next time."""
    prebuild = JvmRddPrebuild()

    def read_then_fail(t: Any, rdd: FakePipelined) -> None:
        rdd.id()
        raise ValueError("boom")

    rdd = FakePipelined()
    with pytest.raises(ValueError, match=r"^boom$"):
        prebuild.observing(read_then_fail, rdd)(None, rdd)
    assert prebuild.reads_jvm_rdd


def test_a_coroutine_function_stays_one_and_teaches_the_same() -> None:
    """An async output's wrapper is a coroutine function too; reading inside it is seen."""
    prebuild = JvmRddPrebuild()

    async def read_async(t: Any, rdd: FakePipelined) -> str:
        rdd.id()
        return "async read"

    rdd = FakePipelined()
    job = prebuild.observing(read_async, rdd)

    async def main() -> str:
        result: str = await job(None, rdd)
        return result

    assert anyio.run(main) == "async read"
    assert prebuild.reads_jvm_rdd


def test_an_rdd_already_made_teaches_nothing() -> None:
    """Another output (or a cache) made the JVM RDD before the job: the function runs as it is, and nothing is learnt."""
    prebuild = JvmRddPrebuild()
    rdd = FakePipelined()
    rdd.id()
    assert prebuild.observing(reads, rdd) is reads
    reads(None, rdd)
    assert not prebuild.reads_jvm_rdd


def test_an_rdd_with_nothing_to_make_teaches_nothing() -> None:
    """A plain RDD (no ``_jrdd_val``: made with its JVM RDD) or another kind: the function as it is, never a build."""
    prebuild = JvmRddPrebuild()
    plain = object()
    assert prebuild.observing(derives, plain) is derives
    assert not prebuild.reads_jvm_rdd
