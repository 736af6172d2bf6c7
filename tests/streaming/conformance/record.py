"""Record pyspark's outputs for the conformance catalogue's groups, which the default run reads (``tests/pyspark_records.py``).

Usage: ``PYTHONPATH=$PWD .venv/bin/python -m tests.streaming.conformance.record [GROUP ...]`` (every
group without arguments; about half of the conformance suite's run time, on a local[2] Spark with
the test run's settings).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tests.pyspark_records import write_record


def spark_context() -> Any:
    """A SparkContext with the test run's settings (``tests/conftest.py``), its Python workers started."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    from tests.conftest import SPARK_TEST_CONF

    sc = SparkContext.getOrCreate(SparkConf().setAll(list(SPARK_TEST_CONF.items())))
    sc.setLogLevel("ERROR")
    sc.parallelize(range(8), 2).map(lambda x: (x % 2, x)).reduceByKey(lambda a, b: a + b).collect()
    return sc


def main(groups: list[str]) -> None:
    """Run each group on pyspark and write its record; refuse a vacuous one."""
    from .test_conformance import GROUPS, RECORDS, group_key, run_pyspark

    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        raise SystemExit(f"unknown groups {unknown}; the groups are {sorted(GROUPS)}")
    sc = spark_context()
    try:
        for group in groups or list(GROUPS):
            outputs = run_pyspark(group, sc)
            if not (outputs and all(outputs.values())):
                raise SystemExit(f"{group}: an output of pyspark never fired: {sorted(k for k, v in outputs.items() if not v)}")
            write_record(RECORDS / f"{group}.txt", group_key(group), outputs)
            print(f"recorded {group}", flush=True)
    finally:
        sc.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
