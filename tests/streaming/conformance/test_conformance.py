"""Conformance: every catalogue program gives the same outputs, batch by batch, on pyspark.streaming and on aiodstream.

Programs run in groups: a group's programs share one StreamingContext per engine (outputs
named ``<program>/<output>``), which saves a context start, stop and first-batch wait per
program. Programs that print, save files, set ``ssc.remember`` or call ``ssc.checkpoint``
(pyspark then pickles the whole graph after every batch) run alone.

pyspark's outputs are read from their records (``data/pyspark/<group>.txt``, made by
``python -m tests.streaming.conformance.record``; ``tests/pyspark_records.py`` says when one is
used) unless a record is stale or ``AIODSTREAM_PYSPARK_REFERENCE=live``; the cluster's run, and
one group here, run pyspark live.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from tests.conftest import SPARK_TEST_CONF
from tests.pyspark_records import live, read_record, record_key, recorded_key

from .ours import run_aiodstream
from .programs import PROGRAMS, Program, combine
from .reference import Results, run_reference

HERE = Path(__file__).parent
RECORDS = HERE / "data" / "pyspark"
RECORD_COMMAND = "PYTHONPATH=$PWD .venv/bin/python -m tests.streaming.conformance.record"

BATCH_SECONDS = 0.2
"""Short batches keep the run fast; results do not depend on the interval (a slower engine
only queues batches, and each batch still takes exactly one queued list)."""

TIMEOUT = 300.0
"""Seconds each engine may take for a group's batches: generous, the machine is shared."""

GROUPS: dict[str, list[str]] = {
    "elementwise": ["map", "flat_map", "filter", "map_partitions", "map_partitions_with_index", "glom", "map_values", "empty_batches"],
    "transforms": ["transform", "transform_with", "repartition", "union", "mixed_slides", "count_quirks"],
    "aggregations": ["word_count", "reduce", "reduce_by_key", "combine_by_key", "partition_by", "group_by_key", "count_by_value", "count",
                     "multiple_outputs"],
    "pairs": ["cogroup", "joins", "persistence"],
    "windows": ["window", "reduce_by_window", "count_by_window", "count_by_value_and_window", "group_by_key_and_window",
                "reduce_by_key_and_window"],
    "inverse_windows": ["inverse_windows"],
    "incremental_window_slide": ["incremental_window_slide"],
    "state": ["update_state_by_key_initial", "update_state_by_key_lists", "state_carry_over"],
    "update_state_by_key": ["update_state_by_key"],
    "pprint": ["pprint"],
    "save_as_text_files": ["save_as_text_files"],
    "slice": ["slice"],
}
"""Every catalogue program, in exactly one group of programs with the same number of batches."""


def group_program(names: list[str]) -> tuple[Program, int]:
    """The program to run for a group (a lone program runs as itself) and its number of batches."""
    specs = [PROGRAMS[name] for name in names]
    if len(specs) == 1:
        return specs[0].program, specs[0].num_batches
    return combine(specs), specs[0].num_batches


def group_key(group: str) -> str:
    """The key of a group's record: the catalogue's and the harness's code, the group, its batches and the Spark settings."""
    names = GROUPS[group]
    settings = {name: SPARK_TEST_CONF[name] for name in ("spark.master", "spark.default.parallelism", "spark.sql.shuffle.partitions")}
    return record_key([HERE / "programs.py", HERE / "reference.py"], names, PROGRAMS[names[0]].num_batches, BATCH_SECONDS, settings)


def run_pyspark(group: str, sc: Any) -> Results:
    """The group's outputs on pyspark.streaming, run now."""
    program, num_batches = group_program(GROUPS[group])
    return run_reference(program, None, num_batches, BATCH_SECONDS, sc=sc, timeout=TIMEOUT)


def pyspark_outputs(group: str, sc: Any) -> Results:
    """The group's outputs on pyspark.streaming: its record when current, else run now."""
    recorded = None if live() else read_record(RECORDS / f"{group}.txt", group_key(group))
    return recorded if recorded is not None else run_pyspark(group, sc)


LIVE_GROUP = "slice"
"""The group whose record is checked against pyspark run live in every run (one of the quickest)."""


def test_every_recording_is_current() -> None:
    """Each group has a record of pyspark's outputs made under its current key (else the group runs pyspark live, slower)."""
    stale = [group for group in GROUPS if recorded_key(RECORDS / f"{group}.txt") != group_key(group)]
    assert stale == [], f"pyspark's outputs are not recorded for the current catalogue: run {RECORD_COMMAND} {' '.join(stale)}"


def test_groups_cover_the_catalogue_once() -> None:
    """Each catalogue program is in exactly one group, and a group's programs run for the same number of batches."""
    grouped = [name for names in GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(PROGRAMS)
    for names in GROUPS.values():
        assert len({PROGRAMS[name].num_batches for name in names}) == 1, names


@pytest.fixture(scope="module")
def warm_spark(spark_context: Any) -> Any:
    """The shared SparkContext with its Python workers started, so no group pays for that."""
    spark_context.parallelize(range(8), 2).map(lambda x: (x % 2, x)).reduceByKey(lambda a, b: a + b).collect()
    return spark_context


@pytest.mark.spark
@pytest.mark.timeout(2 * TIMEOUT + 60)
@pytest.mark.parametrize("group", list(GROUPS))
def test_same_outputs_as_pyspark(group: str, warm_spark: Any) -> None:
    """The group's recorded outputs, pprint text and saved files equal pyspark.streaming's, batch by batch."""
    program, num_batches = group_program(GROUPS[group])
    expected = pyspark_outputs(group, warm_spark)
    # Guard against a vacuous comparison: every output of the oracle fired at least once.
    assert expected and all(expected.values()), {name: rows for name, rows in expected.items() if not rows}
    actual = run_aiodstream(program, None, num_batches, BATCH_SECONDS, sc=warm_spark, timeout=TIMEOUT)
    assert actual == expected


@pytest.mark.spark
@pytest.mark.timeout(TIMEOUT + 60)
def test_a_record_is_what_pyspark_gives_now(warm_spark: Any) -> None:
    """pyspark run live gives exactly one group's record: the records are pyspark's outputs on this machine and settings."""
    recorded = read_record(RECORDS / f"{LIVE_GROUP}.txt", group_key(LIVE_GROUP))
    assert recorded is not None, f"no current record of {LIVE_GROUP}: run {RECORD_COMMAND} {LIVE_GROUP}"
    assert run_pyspark(LIVE_GROUP, warm_spark) == recorded
